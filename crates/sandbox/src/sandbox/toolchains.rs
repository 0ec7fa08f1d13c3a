//! The person's toolchains inside the sandbox.
//!
//! A sandbox whose `HOME` is a fresh directory hides what rustup, pyenv,
//! nvm and the like installed under the real one: `cargo` is "not found",
//! `python3` silently becomes the system's. So the sandbox reproduces the
//! `PATH` the daemon was started with, and binds read-only the directories
//! it names and the toolchain homes of [`TOOLCHAINS`] (with the variables
//! that tell each tool where its home is, since `HOME` inside is not the
//! person's). Nothing is writable: what these tools cache (pip, npm, the Go
//! build cache) goes to `HOME` inside, the session's own `/tmp/home`.
//!
//! Never shown: the home directory itself, `/`, and the credential files
//! inside a shown directory ([`SECRETS_IN_HOMES`], and any file named like
//! a secret, see [`super::surface::is_secret_name`], down to
//! [`MASK_SCAN_DEPTH`] levels), which are covered with `/dev/null`.

use std::path::{Component, Path, PathBuf};

/// One toolchain manager: the directories under `$HOME` it lives in, the
/// variables that locate them, and why they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toolchain {
    pub name: &'static str,
    /// Directories relative to `$HOME`, bound read-only when they exist.
    pub dirs: &'static [&'static str],
    /// Variables the tool needs, and their default relative to `$HOME`:
    /// the daemon's own value is passed when it has one inside a shown
    /// directory, else the default when it exists.
    pub env: &'static [(&'static str, &'static str)],
    pub why: &'static str,
}

const fn t(
    name: &'static str,
    dirs: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    why: &'static str,
) -> Toolchain {
    Toolchain {
        name,
        dirs,
        env,
        why,
    }
}

/// The toolchain managers the sandbox knows, as data.
pub const TOOLCHAINS: &[Toolchain] = &[
    t(
        "rustup",
        &[".rustup", ".cargo"],
        &[("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")],
        "`~/.cargo/bin/cargo` is a proxy that runs the toolchain in RUSTUP_HOME; cargo \
         reads its configuration and the crates it fetched before from CARGO_HOME",
    ),
    t(
        "pyenv",
        &[".pyenv"],
        &[("PYENV_ROOT", ".pyenv")],
        "the shims run `pyenv exec`, which picks the version under PYENV_ROOT",
    ),
    t(
        "nvm",
        &[".nvm"],
        &[("NVM_DIR", ".nvm")],
        "node and npm live in ~/.nvm/versions",
    ),
    t(
        "fnm",
        &[".local/share/fnm", ".fnm"],
        &[("FNM_DIR", ".local/share/fnm")],
        "node versions live in FNM_DIR; its per-shell PATH entries link into it",
    ),
    t(
        "volta",
        &[".volta"],
        &[("VOLTA_HOME", ".volta")],
        "volta's shims look up the pinned tool in VOLTA_HOME",
    ),
    t(
        "local-bin",
        &[".local/bin"],
        &[],
        "pip --user, pipx and uv put commands there",
    ),
    t(
        "pipx",
        &[".local/share/pipx"],
        &[("PIPX_HOME", ".local/share/pipx")],
        "the ~/.local/bin commands pipx installed are links into its venvs",
    ),
    t(
        "uv",
        &[".local/share/uv"],
        &[],
        "Pythons and tools uv installed; ~/.local/bin links into it",
    ),
    t(
        "poetry",
        &[".local/share/pypoetry"],
        &[],
        "poetry's own virtualenv, which ~/.local/bin/poetry runs",
    ),
    t(
        "go",
        &["go"],
        &[("GOPATH", "go")],
        "commands `go install` built (~/go/bin) and the module cache",
    ),
    t(
        "sdkman",
        &[".sdkman"],
        &[("SDKMAN_DIR", ".sdkman")],
        "JDKs, Gradle and Maven installed by SDKMAN (`candidates/*/current/bin`)",
    ),
    t(
        "asdf",
        &[".asdf"],
        &[("ASDF_DIR", ".asdf"), ("ASDF_DATA_DIR", ".asdf")],
        "asdf's shims run the version its installs directory holds",
    ),
    t(
        "mise",
        &[".local/share/mise", ".config/mise"],
        &[
            ("MISE_DATA_DIR", ".local/share/mise"),
            ("MISE_CONFIG_DIR", ".config/mise"),
        ],
        "mise's shims run the versions its data directory holds, as its config picks",
    ),
    t(
        "bun",
        &[".bun"],
        &[("BUN_INSTALL", ".bun")],
        "bun and the commands it installed",
    ),
    t(
        "deno",
        &[".deno"],
        &[("DENO_INSTALL", ".deno")],
        "deno and the commands it installed",
    ),
];

/// Variables passed verbatim when the daemon has them: they pick a
/// version, they locate nothing.
pub const VERSION_VARIABLES: &[&str] =
    &["PYENV_VERSION", "RUSTUP_TOOLCHAIN", "JAVA_HOME", "GOROOT"];

/// Credential files inside the toolchain homes, relative to `$HOME`:
/// covered with `/dev/null` when their directory is shown.
pub const SECRETS_IN_HOMES: &[&str] = &[
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".local/share/pypoetry/auth.toml",
    ".config/mise/credentials.toml",
    ".bun/install/credentials",
    ".sdkman/etc/credentials",
];

/// How deep under a shown directory files named like secrets are looked
/// for (toolchain homes hold hundreds of thousands of files; credentials
/// sit near the top).
pub const MASK_SCAN_DEPTH: usize = 2;

/// Most files and directories looked at per shown directory by the mask
/// scan.
pub const MASK_SCAN_ENTRIES: usize = 4096;

/// What the sandbox shows of the person's machine beyond the system: the
/// toolchains, the person's own extra paths, the `PATH` and the variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HomeView {
    /// `PATH` inside (`None`: the sandbox's default).
    pub path: Option<String>,
    /// Toolchain directories bound read-only at their own path,
    /// shallowest first.
    pub read_only: Vec<PathBuf>,
    /// The person's `[sandbox] read_only` paths.
    pub extra_read_only: Vec<PathBuf>,
    /// The person's `[sandbox] writable` paths.
    pub writable: Vec<PathBuf>,
    /// Credential files inside them, covered with `/dev/null`.
    pub masked: Vec<PathBuf>,
    /// Variables set inside (`RUSTUP_HOME`, `PYENV_ROOT`, ...).
    pub env: Vec<(String, String)>,
}

/// Why a configured extra path cannot be shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraPathError {
    #[error("[sandbox] {key}: `{path}` is not absolute; write the full path")]
    NotAbsolute { key: &'static str, path: String },
    #[error("[sandbox] {key}: `{path}` contains `..`; write the path it means")]
    ParentDir { key: &'static str, path: String },
    #[error("[sandbox] {key}: `{path}` does not exist")]
    Missing { key: &'static str, path: String },
    #[error(
        "[sandbox] {key}: `{path}` would show {what} to every command, secrets included; \
         name the folders the commands need instead"
    )]
    TooWide {
        key: &'static str,
        path: String,
        what: &'static str,
    },
    #[error("[sandbox] {key}: `{path}` is not valid UTF-8, which bubblewrap cannot be given")]
    NotUtf8 { key: &'static str, path: String },
}

/// The host facts [`HomeView::probe`] reads.
pub struct Host<'a> {
    /// The person's home directory (`None`: no toolchain is looked for).
    pub home: Option<&'a Path>,
    /// The daemon's `PATH`.
    pub path: Option<&'a str>,
    /// The daemon's environment.
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// Trees the sandbox shows anyway (`/usr`, `/opt`, merged-usr links).
    pub system: &'a [PathBuf],
}

impl HomeView {
    /// The view for this daemon: its `HOME`, `PATH` and environment, with
    /// the person's `[sandbox] read_only` and `writable` paths.
    pub fn of_this_process(
        system: &[PathBuf],
        read_only: &[PathBuf],
        writable: &[PathBuf],
    ) -> Result<HomeView, ExtraPathError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let path = std::env::var("PATH").ok();
        let var = |k: &str| std::env::var(k).ok();
        HomeView::probe(
            &Host {
                home: home.as_deref(),
                path: path.as_deref(),
                var: &var,
                system,
            },
            read_only,
            writable,
        )
    }

    /// The view for `host`: see the module documentation.
    pub fn probe(
        host: &Host<'_>,
        read_only: &[PathBuf],
        writable: &[PathBuf],
    ) -> Result<HomeView, ExtraPathError> {
        let mut view = HomeView::default();
        for p in read_only {
            view.extra_read_only
                .push(check_extra("read_only", p, host.home)?);
        }
        for p in writable {
            view.writable.push(check_extra("writable", p, host.home)?);
        }
        let home = host
            .home
            .filter(|h| h.is_absolute() && h.parent().is_some());
        if let Some(home) = home {
            for tc in TOOLCHAINS {
                let present: Vec<PathBuf> = tc
                    .dirs
                    .iter()
                    .map(|d| home.join(d))
                    .filter(|d| d.is_dir())
                    .collect();
                if present.is_empty() {
                    continue;
                }
                for (name, default) in tc.env {
                    let value = (host.var)(name)
                        .map(PathBuf::from)
                        .filter(|v| present.iter().any(|d| v.starts_with(d)))
                        .or_else(|| Some(home.join(default)).filter(|d| d.is_dir()));
                    if let Some(v) = value.and_then(|v| v.to_str().map(str::to_string)) {
                        view.env.push((name.to_string(), v));
                    }
                }
                view.read_only.extend(present);
            }
        }
        // The PATH the daemon was started with, minus what cannot be
        // shown: relative entries (they would name the project's files),
        // and entries that are missing.
        let mut entries: Vec<String> = Vec::new();
        for entry in host.path.unwrap_or_default().split(':') {
            let p = Path::new(entry);
            if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
                continue;
            }
            let shown = host.system.iter().any(|s| p.starts_with(s))
                || view
                    .read_only
                    .iter()
                    .chain(&view.extra_read_only)
                    .chain(&view.writable)
                    .any(|d| p.starts_with(d));
            // A toolchain's directory named outside `$HOME` (the daemon
            // started with another `HOME` than the one its `PATH` was made
            // in): its whole home, as under `$HOME`.
            let shown = shown || toolchain_root_of(p, home, &mut view);
            if !shown {
                let too_wide = p.parent().is_none()
                    || home.is_some_and(|h| h.starts_with(p))
                    || ["/proc", "/sys", "/dev"].iter().any(|s| p.starts_with(s));
                if too_wide || !p.is_dir() {
                    continue;
                }
                view.read_only.push(p.to_path_buf());
            }
            entries.push(entry.to_string());
        }
        if !entries.is_empty() {
            view.path = Some(entries.join(":"));
        }
        for name in VERSION_VARIABLES {
            if let Some(v) = (host.var)(name) {
                if !view.env.iter().any(|(k, _)| k == name) && !v.contains('\0') {
                    view.env.push((name.to_string(), v));
                }
            }
        }
        view.read_only = outermost(view.read_only);
        if let Some(home) = home {
            for s in SECRETS_IN_HOMES {
                let f = home.join(s);
                if view.read_only.iter().any(|d| f.starts_with(d)) && f.exists() {
                    view.masked.push(f);
                }
            }
        }
        for d in view
            .read_only
            .iter()
            .chain(&view.extra_read_only)
            .chain(&view.writable)
        {
            scan_secrets(d, &mut view.masked);
        }
        view.masked.sort();
        view.masked.dedup();
        Ok(view)
    }
}

/// When `entry` lies in a toolchain's directory (`/root/.pyenv/shims` is
/// in `.pyenv`), show that directory with the toolchain's variables
/// pointing into it; whether it did.
fn toolchain_root_of(entry: &Path, home: Option<&Path>, view: &mut HomeView) -> bool {
    for tc in TOOLCHAINS {
        for d in tc.dirs {
            let Some(root) = entry.ancestors().find(|a| a.ends_with(d)) else {
                continue;
            };
            if root.parent().is_none()
                || home.is_some_and(|h| h.starts_with(root))
                || !root.is_dir()
            {
                continue;
            }
            for (name, default) in tc.env {
                if default == d && !view.env.iter().any(|(k, _)| k == name) {
                    if let Some(v) = root.to_str() {
                        view.env.push((name.to_string(), v.to_string()));
                    }
                }
            }
            // The other directories of the same toolchain beside it
            // (`~/.rustup` next to `~/.cargo`).
            let base = root.ancestors().nth(Path::new(d).components().count());
            if let Some(base) = base {
                for other in tc.dirs.iter().filter(|o| *o != d) {
                    let o = base.join(other);
                    if o.is_dir() && !view.read_only.contains(&o) {
                        for (name, default) in tc.env {
                            if default == other && !view.env.iter().any(|(k, _)| k == name) {
                                if let Some(v) = o.to_str() {
                                    view.env.push((name.to_string(), v.to_string()));
                                }
                            }
                        }
                        view.read_only.push(o);
                    }
                }
            }
            if !view.read_only.iter().any(|r| root.starts_with(r)) {
                view.read_only.push(root.to_path_buf());
            }
            return true;
        }
    }
    false
}

/// Check the person's `[sandbox] read_only` and `writable` paths (the
/// configuration's validation, before any command runs).
pub fn check_extra_paths(
    read_only: &[PathBuf],
    writable: &[PathBuf],
    home: Option<&Path>,
) -> Result<(), ExtraPathError> {
    for p in read_only {
        check_extra("read_only", p, home)?;
    }
    for p in writable {
        check_extra("writable", p, home)?;
    }
    Ok(())
}

/// A configured extra path, checked.
fn check_extra(
    key: &'static str,
    p: &Path,
    home: Option<&Path>,
) -> Result<PathBuf, ExtraPathError> {
    let path = p.to_string_lossy().into_owned();
    if !p.is_absolute() {
        return Err(ExtraPathError::NotAbsolute { key, path });
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(ExtraPathError::ParentDir { key, path });
    }
    if p.to_str().is_none() {
        return Err(ExtraPathError::NotUtf8 { key, path });
    }
    if p.parent().is_none() {
        return Err(ExtraPathError::TooWide {
            key,
            path,
            what: "the whole machine",
        });
    }
    if home.is_some_and(|h| h.starts_with(p)) {
        return Err(ExtraPathError::TooWide {
            key,
            path,
            what: "your whole home directory",
        });
    }
    if !p.exists() {
        return Err(ExtraPathError::Missing { key, path });
    }
    Ok(p.to_path_buf())
}

/// `dirs` without those inside another, in order of depth.
fn outermost(mut dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    dirs.sort_by_key(|d| (d.components().count(), d.clone()));
    let mut out: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if !out.iter().any(|o| d.starts_with(o)) {
            out.push(d);
        }
    }
    out
}

/// Files named like secrets under `dir`, [`MASK_SCAN_DEPTH`] levels down
/// at most, [`MASK_SCAN_ENTRIES`] looked at at most.
fn scan_secrets(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut queue = vec![(dir.to_path_buf(), 0usize)];
    let mut looked = 0usize;
    while let Some((d, depth)) = queue.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            looked += 1;
            if looked > MASK_SCAN_ENTRIES {
                return;
            }
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if ft.is_dir() {
                if depth + 1 < MASK_SCAN_DEPTH {
                    queue.push((e.path(), depth + 1));
                }
            } else if ft.is_file() && super::surface::is_secret_name(&name) {
                out.push(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn view(home: &Path, path: &str, vars: &[(&str, &str)]) -> HomeView {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let var = |k: &str| vars.get(k).cloned();
        HomeView::probe(
            &Host {
                home: Some(home),
                path: Some(path),
                var: &var,
                system: &[PathBuf::from("/usr"), PathBuf::from("/bin")],
            },
            &[],
            &[],
        )
        .unwrap()
    }

    fn env_of(v: &HomeView, name: &str) -> Option<String> {
        v.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// Each toolchain of the table, alone in a home: its directories are
    /// shown and its variables point into them.
    #[test]
    fn every_toolchain_is_shown_with_its_variables() {
        for tc in TOOLCHAINS {
            let home = tempfile::tempdir().unwrap();
            let h = home.path();
            for d in tc.dirs {
                std::fs::create_dir_all(h.join(d).join("bin")).unwrap();
            }
            let v = view(h, "/usr/bin:/bin", &[]);
            for d in tc.dirs {
                assert!(
                    v.read_only.iter().any(|r| h.join(d).starts_with(r)),
                    "{}: {d} not shown: {v:?}",
                    tc.name
                );
            }
            for (name, default) in tc.env {
                assert_eq!(
                    env_of(&v, name),
                    Some(h.join(default).to_string_lossy().into_owned()),
                    "{}",
                    tc.name
                );
            }
            assert!(!v.read_only.iter().any(|r| r == h), "{}", tc.name);
            assert_eq!(v.path.as_deref(), Some("/usr/bin:/bin"));
        }
    }

    #[test]
    fn the_path_is_kept_and_home_entries_are_bound_but_never_home_itself() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
        std::fs::create_dir_all(h.join(".rustup")).unwrap();
        std::fs::create_dir_all(h.join("mybin")).unwrap();
        let path = format!(
            "{c}:.:bin:{m}:{h}:/usr/bin:/nonexistent/bin:{h}/../x",
            c = h.join(".cargo/bin").display(),
            m = h.join("mybin").display(),
            h = h.display()
        );
        let v = view(h, &path, &[("RUSTUP_TOOLCHAIN", "stable")]);
        assert_eq!(
            v.path,
            Some(format!(
                "{}:{}:/usr/bin",
                h.join(".cargo/bin").display(),
                h.join("mybin").display()
            ))
        );
        assert_eq!(
            v.read_only,
            vec![h.join(".cargo"), h.join(".rustup"), h.join("mybin")]
        );
        assert_eq!(env_of(&v, "RUSTUP_TOOLCHAIN").as_deref(), Some("stable"));
    }

    #[test]
    fn a_toolchain_named_by_path_outside_home_is_shown_whole() {
        let home = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let o = other.path();
        std::fs::create_dir_all(o.join(".pyenv/shims")).unwrap();
        std::fs::create_dir_all(o.join(".pyenv/libexec")).unwrap();
        std::fs::create_dir_all(o.join(".cargo/bin")).unwrap();
        std::fs::create_dir_all(o.join(".rustup/toolchains")).unwrap();
        let path = format!(
            "{}:{}:/usr/bin",
            o.join(".cargo/bin").display(),
            o.join(".pyenv/shims").display()
        );
        let v = view(home.path(), &path, &[]);
        assert_eq!(
            v.read_only,
            vec![o.join(".cargo"), o.join(".pyenv"), o.join(".rustup")]
        );
        let s = |p: &Path| p.to_string_lossy().into_owned();
        assert_eq!(env_of(&v, "CARGO_HOME"), Some(s(&o.join(".cargo"))));
        assert_eq!(env_of(&v, "RUSTUP_HOME"), Some(s(&o.join(".rustup"))));
        assert_eq!(env_of(&v, "PYENV_ROOT"), Some(s(&o.join(".pyenv"))));
        assert_eq!(v.path, Some(path));
    }

    #[test]
    fn credentials_inside_a_shown_home_are_masked() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
        std::fs::write(h.join(".cargo/credentials.toml"), "token").unwrap();
        std::fs::write(h.join(".cargo/bin/server.pem"), "key").unwrap();
        std::fs::write(h.join(".cargo/config.toml"), "").unwrap();
        let v = view(h, "/usr/bin", &[]);
        assert_eq!(
            v.masked,
            vec![
                h.join(".cargo/bin/server.pem"),
                h.join(".cargo/credentials.toml")
            ]
        );
    }

    #[test]
    fn a_variable_of_the_daemon_is_kept_only_inside_a_shown_directory() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".pyenv/versions")).unwrap();
        let inside = h.join(".pyenv").to_string_lossy().into_owned();
        let v = view(h, "", &[("PYENV_ROOT", &inside)]);
        assert_eq!(env_of(&v, "PYENV_ROOT"), Some(inside.clone()));
        let v = view(h, "", &[("PYENV_ROOT", "/srv/elsewhere")]);
        assert_eq!(env_of(&v, "PYENV_ROOT"), Some(inside));
        assert_eq!(v.path, None);
    }

    #[test]
    fn extra_paths_are_checked_with_clear_errors() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let var = |_: &str| None;
        let probe = |ro: &[PathBuf], rw: &[PathBuf]| {
            HomeView::probe(
                &Host {
                    home: Some(h),
                    path: None,
                    var: &var,
                    system: &[],
                },
                ro,
                rw,
            )
        };
        let err = |ro: &str| probe(&[PathBuf::from(ro)], &[]).unwrap_err().to_string();
        assert_eq!(
            err("data"),
            "[sandbox] read_only: `data` is not absolute; write the full path"
        );
        assert!(err("/").contains("would show the whole machine"));
        assert!(err(&h.display().to_string()).contains("your whole home directory"));
        assert!(err("/a/../b").contains("contains `..`"));
        let missing = probe(&[], &[h.join("nope")]).unwrap_err().to_string();
        assert_eq!(
            missing,
            format!(
                "[sandbox] writable: `{}` does not exist",
                h.join("nope").display()
            )
        );
        std::fs::create_dir_all(h.join("data")).unwrap();
        let ok = probe(&[h.join("data")], &[]).unwrap();
        assert_eq!(ok.extra_read_only, vec![h.join("data")]);
    }
}
