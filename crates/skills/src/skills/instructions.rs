//! Instruction files people already keep for coding agents: `AGENTS.md`
//! (read by Codex, Zed, Cursor, Goose and others) and, where a folder has
//! none, `CLAUDE.md`. They join the system prompt before the skills.
//!
//! Which files: the person's own `$XDG_CONFIG_HOME/passepartout/AGENTS.md`
//! (trusted, like the user's skills), then one file per folder from the
//! project root (the nearest ancestor of the working directory holding
//! `.git`; without one, the working directory alone) down to the working
//! directory. A deeper file is more specific, so it comes later and is
//! labelled with the folder it applies to. Files in folders below the
//! working directory are not read: they apply when a session works there.
//!
//! A project's file is text the agent (or anyone who can write the
//! repository) may have written, so it is treated like a project skill:
//! it joins the prompt only when the person trusted its exact bytes
//! ([`super::trust`]); until then it is listed as untrusted with how to
//! trust it.

use std::path::{Path, PathBuf};

use super::diagnostic::{Diagnostic, Severity};
use super::trust::{sha256_hex, TrustState, Trusted};
use super::Origin;

/// The file names read, in order of preference within one folder.
pub const INSTRUCTION_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// A larger file is refused unread: instructions ride along with every
/// request, and 64 KiB is already ~16k tokens.
pub const MAX_INSTRUCTIONS_BYTES: u64 = 64 * 1024;

/// One instruction file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instructions {
    pub path: PathBuf,
    /// The folder it applies to.
    pub scope: PathBuf,
    pub origin: Origin,
    pub text: String,
    pub sha256: String,
    /// False for a project file not trusted with these bytes.
    pub trusted: bool,
    /// Whether it was trusted once with other bytes.
    pub changed: bool,
}

/// Whether a file name is an instruction file's.
pub fn is_instructions_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| INSTRUCTION_FILES.contains(&n))
}

/// The project root of `cwd`: its nearest ancestor (or itself) with a
/// `.git`, else `cwd`.
pub fn project_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// The folders from the project root down to `cwd`, root first.
fn chain(cwd: &Path) -> Vec<PathBuf> {
    let root = project_root(cwd);
    let mut dirs: Vec<PathBuf> = cwd
        .ancestors()
        .take_while(|d| d.starts_with(&root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

/// Every path that could hold instructions for `cwd` (existing or not):
/// what the loader's fingerprint watches.
pub fn candidates(user_config: Option<&Path>, cwd: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = user_config {
        out.push(dir.join(INSTRUCTION_FILES[0]));
    }
    if let Some(cwd) = cwd {
        for dir in chain(cwd) {
            out.extend(INSTRUCTION_FILES.iter().map(|n| dir.join(n)));
        }
    }
    out
}

/// The instruction files in force for `cwd`, with the diagnostics found
/// reading them. `user_config` is `$XDG_CONFIG_HOME/passepartout`.
pub fn load(
    user_config: Option<&Path>,
    cwd: Option<&Path>,
    trusted: &Trusted,
) -> (Vec<Instructions>, Vec<Diagnostic>) {
    let mut out = Vec::new();
    let mut diagnostics = Vec::new();
    if let Some(dir) = user_config {
        let path = dir.join(INSTRUCTION_FILES[0]);
        if let Some(i) = read(&path, dir, Origin::User, &mut diagnostics) {
            out.push(i);
        }
    }
    if let Some(cwd) = cwd {
        for dir in chain(cwd) {
            let Some(path) = INSTRUCTION_FILES
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file())
            else {
                continue;
            };
            let Some(mut i) = read(&path, &dir, Origin::Project, &mut diagnostics) else {
                continue;
            };
            let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
            let state = trusted.state(&canonical, &i.sha256);
            i.trusted = state == TrustState::Trusted;
            i.changed = state == TrustState::Changed;
            if !i.trusted {
                let why = if i.changed {
                    "it changed since it was trusted"
                } else {
                    "it has not been trusted"
                };
                diagnostics.push(Diagnostic {
                    path: path.clone(),
                    line: 1,
                    column: 1,
                    severity: Severity::Warning,
                    message: format!(
                        "project instructions are untrusted and do not reach the model: {why}; {}",
                        super::loader::trust_hint(&path)
                    ),
                });
            }
            out.push(i);
        }
    }
    (out, diagnostics)
}

/// Read one file (bounded, UTF-8); `None` when absent or unreadable (the
/// latter with a diagnostic).
fn read(
    path: &Path,
    scope: &Path,
    origin: Origin,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Instructions> {
    let bytes = read_bytes(path).map_err(|d| diagnostics.extend(d)).ok()??;
    let text = match String::from_utf8(bytes.clone()) {
        Ok(t) => t.replace("\r\n", "\n"),
        Err(_) => {
            diagnostics.push(error(
                path,
                "file is not UTF-8 text; save it as UTF-8".into(),
            ));
            return None;
        }
    };
    Some(Instructions {
        path: path.to_path_buf(),
        scope: scope.to_path_buf(),
        origin,
        text: text.trim().to_string(),
        sha256: sha256_hex(&bytes),
        trusted: origin != Origin::Project,
        changed: false,
    })
}

/// A file's bytes: `Ok(None)` when it does not exist, an error when it is
/// too large or unreadable.
pub fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, Option<Diagnostic>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Some(error(path, format!("cannot read file: {e}")))),
        Ok(m) if !m.is_file() => return Ok(None),
        Ok(m) if m.len() > MAX_INSTRUCTIONS_BYTES => {
            return Err(Some(error(
                path,
                format!(
                    "file is {} bytes, more than the {MAX_INSTRUCTIONS_BYTES}-byte limit for instruction files; it is not used",
                    m.len()
                ),
            )))
        }
        Ok(_) => {}
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| Some(error(path, format!("cannot read file: {e}"))))
}

fn error(path: &Path, message: String) -> Diagnostic {
    Diagnostic {
        path: path.to_path_buf(),
        line: 1,
        column: 1,
        severity: Severity::Error,
        message,
    }
}

/// The system-prompt part for the trusted files, most general first.
pub fn prompt(instructions: &[Instructions]) -> String {
    instructions
        .iter()
        .filter(|i| i.trusted && !i.text.is_empty())
        .map(|i| {
            format!(
                "## instructions: {} (applies to {})\n\n{}",
                i.path.display(),
                i.scope.display(),
                i.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_runs_from_the_repository_root_to_the_working_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        let sub = root.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(root.join("a/CLAUDE.md"), "a rules").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "b rules").unwrap();
        std::fs::write(sub.join("CLAUDE.md"), "not read: AGENTS.md wins").unwrap();
        let mut trusted = Trusted::default();
        let (found, diags) = load(None, Some(&sub), &trusted);
        assert_eq!(found.len(), 3);
        assert!(found.iter().all(|i| !i.trusted));
        assert_eq!(diags.len(), 3);
        assert_eq!(prompt(&found), "");
        for i in &found {
            trusted.insert_for_test(&i.path.canonicalize().unwrap(), &i.sha256);
        }
        let (found, _) = load(None, Some(&sub), &trusted);
        let text = prompt(&found);
        let (r, a, b) = (
            text.find("root rules").unwrap(),
            text.find("a rules").unwrap(),
            text.find("b rules").unwrap(),
        );
        assert!(r < a && a < b, "{text}");
        assert!(!text.contains("not read"));
    }
}
