//! What a trusted project config *runs*, bound into its trust: the files
//! inside the project that its stdio servers execute or load.
//!
//! Trusting `.passepartout/config.toml` by its bytes alone trusted a name:
//! `command = "python3", args = ["tools/server.py"]` ran whatever the agent
//! later wrote at `tools/server.py`. So the trust record covers the config
//! *and* every project file found this way, hashed at trust time:
//!
//! - the command, and every argument, that names an existing file or folder
//!   beneath the project (relative to the project or absolute);
//! - Python's `-m MODULE`: `MODULE.py` or the package folder `MODULE/`
//!   (dots as folders), since Python imports it from the working directory;
//! - `npx PACKAGE` (and `npm exec`): `node_modules/PACKAGE` and
//!   `node_modules/.bin/PACKAGE`, which npx runs before any registry copy.
//!
//! A folder counts with every file beneath it (bounded by
//! [`MAX_BOUND_FILES`] and [`MAX_BOUND_BYTES`]); symbolic links are hashed
//! as links, never followed. The digest trusted is the SHA-256 of the
//! config's bytes followed by a manifest of `sha256  path` lines; with no
//! bound file it is the config's own hash, so existing trust stays valid.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::config::{ServerSpec, Transport};

/// Most files bound to one config: past it, trust is refused (bind a
/// smaller folder, or name the script itself).
pub const MAX_BOUND_FILES: usize = 2000;
/// Most bytes hashed for one config.
pub const MAX_BOUND_BYTES: u64 = 64 * 1024 * 1024;

/// One project file a server runs, as it was hashed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct BoundFile {
    /// Relative to the project.
    pub path: PathBuf,
    pub sha256: String,
}

/// Why the files a config's servers run could not be bound into its trust.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("its servers run more than {MAX_BOUND_FILES} files from the project (the trust binding limit); name the script itself rather than a folder")]
    TooManyFiles,
    #[error("its servers run more than {MAX_BOUND_BYTES} bytes from the project (the trust binding limit)")]
    TooManyBytes,
}

/// The `map_err` of an I/O error on `path`.
fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BindingError + '_ {
    move |source| BindingError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The files a config's servers run from the project, sorted, each once.
pub fn bound_files(project: &Path, specs: &[ServerSpec]) -> Result<Vec<BoundFile>, BindingError> {
    let root = project.canonicalize().map_err(io(project))?;
    let mut roots = Vec::new();
    for spec in specs {
        if let Transport::Stdio { command, args, .. } = &spec.transport {
            candidates(command, args, &mut roots);
        }
    }
    let mut budget = Budget::default();
    let mut files = Vec::new();
    for candidate in roots {
        let Some(relative) = beneath(&root, &candidate) else {
            continue;
        };
        hash_tree(&root, &relative, &mut files, &mut budget)?;
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// The bytes trusted for `config_bytes` with `files` bound to it: the
/// config itself when nothing is bound, else the config and a manifest.
pub fn manifest(config_bytes: &[u8], files: &[BoundFile]) -> Vec<u8> {
    let mut manifest = config_bytes.to_vec();
    if files.is_empty() {
        return manifest;
    }
    manifest.extend_from_slice(b"\n--- files its servers run ---\n");
    for f in files {
        manifest.extend_from_slice(format!("{}  {}\n", f.sha256, f.path.display()).as_bytes());
    }
    manifest
}

/// The digest trusted for `config_bytes` with `files` bound to it.
pub fn digest(config_bytes: &[u8], files: &[BoundFile]) -> String {
    crate::skills::trust::sha256_hex(&manifest(config_bytes, files))
}

/// Paths the command line may run from the project (not yet checked).
fn candidates(command: &Path, args: &[String], out: &mut Vec<PathBuf>) {
    out.push(command.to_path_buf());
    let program = command
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let python = program.starts_with("python");
    let npx = program == "npx"
        || (program == "npm" && args.first().is_some_and(|a| a == "exec" || a == "x"));
    let mut package_taken = false;
    let mut words = args.iter().peekable();
    while let Some(arg) = words.next() {
        out.push(PathBuf::from(arg));
        if let Some(value) = arg.strip_prefix("--") {
            // `--flag=path` names a path too.
            if let Some((_, v)) = value.split_once('=') {
                out.push(PathBuf::from(v));
            }
        }
        if python && arg == "-m" {
            if let Some(module) = words.peek() {
                let base = module.replace('.', "/");
                out.push(PathBuf::from(format!("{base}.py")));
                out.push(PathBuf::from(base));
            }
        }
        if npx && !package_taken && !arg.starts_with('-') && arg != "exec" && arg != "x" {
            package_taken = true;
            let name = package_name(arg);
            out.push(Path::new("node_modules").join(name));
            out.push(Path::new("node_modules/.bin").join(name));
        }
    }
}

/// `@scope/pkg@1.2` → `@scope/pkg`; `pkg@latest` → `pkg`.
fn package_name(spec: &str) -> &str {
    let search_from = usize::from(spec.starts_with('@'));
    match spec[search_from..].find('@') {
        Some(i) => &spec[..search_from + i],
        None => spec,
    }
}

/// `candidate` relative to the project root when it exists beneath it
/// (resolving `..` lexically first; the last component is not followed).
fn beneath(root: &Path, candidate: &Path) -> Option<PathBuf> {
    if candidate.as_os_str().is_empty() {
        return None;
    }
    let joined = crate::util::path::normalize(&root.join(candidate));
    let relative = joined.strip_prefix(root).ok()?.to_path_buf();
    if relative.as_os_str().is_empty() {
        // The project itself.
        return Some(relative);
    }
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    // Resolve the parents (the agent may have planted a link among them).
    let parent = root.join(&relative).parent()?.canonicalize().ok()?;
    if !parent.starts_with(root) {
        return None;
    }
    let path = parent.join(relative.file_name()?);
    std::fs::symlink_metadata(&path).ok()?;
    Some(path.strip_prefix(root).ok()?.to_path_buf())
}

#[derive(Default)]
struct Budget {
    files: usize,
    bytes: u64,
}

/// Hash `relative` (a file, a link, or a folder with everything beneath it).
fn hash_tree(
    root: &Path,
    relative: &Path,
    out: &mut Vec<BoundFile>,
    budget: &mut Budget,
) -> Result<(), BindingError> {
    let path = root.join(relative);
    let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
    if meta.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(&path)
            .map_err(io(&path))?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        entries.sort();
        for name in entries {
            // The repository's own store is not code a server runs.
            if name == ".git" {
                continue;
            }
            hash_tree(root, &relative.join(name), out, budget)?;
        }
        return Ok(());
    }
    budget.files += 1;
    if budget.files > MAX_BOUND_FILES {
        return Err(BindingError::TooManyFiles);
    }
    let sha256 = if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&path).map_err(io(&path))?;
        format!(
            "link:{}",
            crate::skills::trust::sha256_hex(target.as_os_str().as_encoded_bytes())
        )
    } else if meta.is_file() {
        budget.bytes += meta.len();
        if budget.bytes > MAX_BOUND_BYTES {
            return Err(BindingError::TooManyBytes);
        }
        hash_file(&path)?
    } else {
        // A FIFO or device: its name is all that can be bound.
        "special".to_string()
    };
    out.push(BoundFile {
        path: relative.to_path_buf(),
        sha256,
    });
    Ok(())
}

fn hash_file(path: &Path) -> Result<String, BindingError> {
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use crate::mcp::config::Origin;

    fn spec(command: &str, args: &[&str]) -> ServerSpec {
        ServerSpec {
            name: "s".into(),
            prefix: "s".into(),
            transport: Transport::Stdio {
                command: command.into(),
                args: args.iter().map(std::string::ToString::to_string).collect(),
                env: Default::default(),
            },
            approval: Approval::Ask,
            origin: Origin::Project,
        }
    }

    fn paths(files: &[BoundFile]) -> Vec<String> {
        files.iter().map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn scripts_modules_and_npx_packages_in_the_project_are_bound() {
        let p = tempfile::tempdir().unwrap();
        let root = p.path();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("tools/server.py"), "print(1)").unwrap();
        std::fs::create_dir_all(root.join("pkg/sub")).unwrap();
        std::fs::write(root.join("pkg/__init__.py"), "").unwrap();
        std::fs::write(root.join("pkg/sub/main.py"), "x").unwrap();
        std::fs::create_dir_all(root.join("node_modules/@me/srv")).unwrap();
        std::fs::write(root.join("node_modules/@me/srv/index.js"), "js").unwrap();
        let files = bound_files(
            root,
            &[
                spec("python3", &["tools/server.py", "--verbose"]),
                spec("/usr/bin/python3", &["-m", "pkg.sub.main"]),
                spec("python3", &["-m", "pkg"]),
                spec("npx", &["-y", "@me/srv@1.0"]),
                spec("python3", &["../outside.py", "/etc/passwd"]),
            ],
        )
        .unwrap();
        assert_eq!(
            paths(&files),
            [
                "node_modules/@me/srv/index.js",
                "pkg/__init__.py",
                "pkg/sub/main.py",
                "tools/server.py"
            ]
        );
        let before = digest(b"config", &files);
        std::fs::write(root.join("pkg/sub/main.py"), "y").unwrap();
        let after = digest(
            b"config",
            &bound_files(root, &[spec("python3", &["-m", "pkg.sub.main"])]).unwrap(),
        );
        assert_ne!(before, after);
        // Nothing bound: the config's own hash, as before.
        assert_eq!(
            digest(b"config", &[]),
            crate::skills::trust::sha256_hex(b"config")
        );
    }

    #[test]
    fn links_are_bound_as_links_and_never_followed_out() {
        let p = tempfile::tempdir().unwrap();
        let root = p.path();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        let files = bound_files(root, &[spec("python3", &["out/passwd", "out"])]).unwrap();
        assert_eq!(paths(&files), ["out"]);
        assert!(files[0].sha256.starts_with("link:"));
    }
}
