//! The person's toolchains inside the sandbox.
//!
//! A sandbox whose `HOME` is a fresh directory hides what rustup, pyenv,
//! nvm and the like installed under the real one: `cargo` is "not found",
//! `python3` silently becomes the system's. So the sandbox reproduces the
//! `PATH` the daemon was started with, and binds read-only the directories
//! it names and the toolchain homes of [`TOOLCHAINS`] (with the variables
//! that tell each tool where its home is, since `HOME` inside is not the
//! person's). Nothing of them is writable: what these tools write goes to
//! a per-session layer in the session's `/tmp` ([`LAYERS`],
//! [`HomeView::with_session_layers`]), removed with the session, while
//! what the person already had stays readable.
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
    /// The session's writable layers ([`HomeView::with_session_layers`]):
    /// variables set after [`HomeView::env`] (they win), and host
    /// directories bound writable over a path of a read-only toolchain
    /// home (host path, path inside).
    pub layer_env: Vec<(String, String)>,
    pub layer_binds: Vec<(PathBuf, PathBuf)>,
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

/// What one toolchain writes during a session, and where it goes instead
/// of the person's read-only home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layer {
    /// The [`Toolchain`] it belongs to.
    pub toolchain: &'static str,
    /// The variable (one of the toolchain's `env`) whose value in the view
    /// is the person's directory: the layer's read-only lower part.
    pub var: &'static str,
    pub kind: LayerKind,
    pub why: &'static str,
}

/// How a [`Layer`] is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// `var` points at a session directory that merges the person's: each
    /// entry of theirs is a symbolic link to it (read-only through the
    /// link), except the `fresh` ones (locks and databases the tool opens
    /// for writing, credentials), which the tool makes anew; the
    /// directories of `mirrored` (and those above them) are real
    /// directories down to the given depth below them, so what the tool
    /// adds there lands in the session.
    Merged {
        fresh: &'static [&'static str],
        mirrored: &'static [(&'static str, usize)],
    },
    /// The person's `sub` directory, copied per session and bound writable
    /// over its own path (a tool that writes there in place).
    Copy { sub: &'static str },
    /// `set` points at an empty session directory; `extra` variables are
    /// set too, `{lower}` standing for the person's directory.
    Redirect {
        set: &'static str,
        extra: &'static [(&'static str, &'static str)],
    },
}

/// The writable layers of the toolchains, as data. pip's, npm's and uv's
/// caches and Go's build cache need none: they follow `XDG_CACHE_HOME`
/// (and `npm_config_cache`), which point into the session's `/tmp` (see
/// `bwrap::SESSION_CACHE`).
pub const LAYERS: &[Layer] = &[
    Layer {
        toolchain: "rustup",
        var: "CARGO_HOME",
        kind: LayerKind::Merged {
            // Cargo's package-cache locks and its cache-tracking database
            // (opened read-write), and the credentials (masked anyway).
            fresh: &[
                ".package-cache",
                ".package-cache-mutate",
                ".global-cache",
                "credentials",
                "credentials.toml",
            ],
            // `registry/index/<id>/.cache/ab/cd/<crate>` (the sparse
            // index's cached entries), `registry/cache/<id>/<crate>.crate`,
            // `registry/src/<id>/<crate>-<version>/`, the bare clones of
            // git dependencies (`git/db/<name>/objects/pack/…`) and their
            // checkouts (`git/checkouts/<name>/<rev>/`). Everything else
            // (`bin`, `config.toml`, `env`) is a link: read-only.
            mirrored: &[
                ("registry/index", 4),
                ("registry/cache", 1),
                ("registry/src", 1),
                ("git/db", 4),
                ("git/checkouts", 1),
            ],
        },
        why: "cargo add, cargo fetch and a build needing a crate not fetched yet store the \
              index entries, archives and sources they download in CARGO_HOME; the crates \
              already there are found offline through the links",
    },
    Layer {
        toolchain: "pyenv",
        var: "PYENV_ROOT",
        kind: LayerKind::Copy { sub: "shims" },
        why: "pyenv's pip hook (pyenv.d/exec/pip-rehash) runs `pyenv rehash` after every \
              successful `pip install` or `uninstall`, and pyenv has no setting to skip it; \
              rehash takes its lock by creating `shims/.pyenv-shim` and links new shims \
              there, so on read-only shims the install exits 1",
    },
    Layer {
        toolchain: "go",
        var: "GOPATH",
        kind: LayerKind::Redirect {
            set: "GOMODCACHE",
            // The person's module cache is read through its download
            // directory used as a module proxy (the Go documentation's
            // way to serve a module cache); `-modcacherw` leaves what is
            // extracted writable, so the session's directory can be
            // removed.
            extra: &[
                (
                    "GOPROXY",
                    "file://{lower}/pkg/mod/cache/download,https://proxy.golang.org",
                ),
                ("GOFLAGS", "-modcacherw"),
            ],
        },
        why: "`go get` and `go mod download` write the module cache (GOPATH/pkg/mod)",
    },
];

/// Where a session's layers live in its `/tmp` (on the host, in the
/// session's directory; inside, under `/tmp`).
pub const LAYERS_DIR: &str = ".toolchains";

/// Most entries a [`LayerKind::Merged`] layer makes (a link or a
/// directory each); past it, directories are linked whole (read-only).
pub const MERGE_ENTRY_LIMIT: usize = 100_000;

/// Most files a [`LayerKind::Copy`] layer copies (pyenv has one shim per
/// command of its Pythons: hundreds).
pub const COPY_ENTRY_LIMIT: usize = 10_000;

/// Why a session layer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} is not a directory of the daemon's (a link or a file is in its place)")]
    NotOurs(String),
    #[error("{0} is not valid UTF-8")]
    NotUtf8(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LayerError + '_ {
    move |source| LayerError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl HomeView {
    /// This view with the writable layers of [`LAYERS`] for the session
    /// whose `/tmp` is `session_tmp` on the host (shown at `/tmp`). Each
    /// is made on the session's first run, before the command starts;
    /// the next runs find it there. A layer that cannot be made is left
    /// out (its tool sees the read-only home, as without layers).
    pub fn with_session_layers(&self, session_tmp: &Path) -> HomeView {
        let mut view = self.clone();
        for layer in LAYERS {
            let Some(lower) = self
                .env
                .iter()
                .find(|(k, _)| k == layer.var)
                .map(|(_, v)| PathBuf::from(v))
            else {
                continue;
            };
            match make_layer(layer, &lower, session_tmp) {
                Ok(Some((env, bind))) => {
                    view.layer_env.extend(env);
                    view.layer_binds.extend(bind);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(
                        "the session's writable layer for {} ({}) cannot be made, it stays \
                         read-only: {e}",
                        layer.toolchain,
                        layer.var
                    );
                }
            }
        }
        view
    }
}

/// The variables and the bind of one layer.
type Made = (Vec<(String, String)>, Option<(PathBuf, PathBuf)>);

fn make_layer(layer: &Layer, lower: &Path, session_tmp: &Path) -> Result<Option<Made>, LayerError> {
    let root = session_tmp.join(LAYERS_DIR);
    real_dir_or_absent(&root)?;
    if !root.exists() {
        std::fs::create_dir(&root).map_err(io(&root))?;
    }
    let name = format!("{}-{}", layer.toolchain, layer.var.to_ascii_lowercase());
    let host = root.join(&name);
    let inside = Path::new("/tmp").join(LAYERS_DIR).join(&name);
    let inside = inside
        .to_str()
        .ok_or_else(|| LayerError::NotUtf8(inside.display().to_string()))?
        .to_string();
    let lower_s = lower
        .to_str()
        .ok_or_else(|| LayerError::NotUtf8(lower.display().to_string()))?;
    // Made once per session: the layer's own directory is created here
    // (never followed if something else is in its place), and what is
    // made is made inside it, before the session's next command runs.
    let fresh = match std::fs::symlink_metadata(&host) {
        Ok(m) if m.is_dir() => false,
        Ok(_) => return Err(LayerError::NotOurs(host.display().to_string())),
        Err(_) => true,
    };
    match layer.kind {
        LayerKind::Merged {
            fresh: skip,
            mirrored,
        } => {
            if !lower.is_dir() {
                return Ok(None);
            }
            if fresh {
                std::fs::create_dir(&host).map_err(io(&host))?;
                let mut budget = MERGE_ENTRY_LIMIT;
                merge(lower, &host, Path::new(""), skip, mirrored, &mut budget)?;
            } else {
                restore_links(lower, &host, skip, mirrored)?;
            }
            Ok(Some((vec![(layer.var.to_string(), inside)], None)))
        }
        LayerKind::Copy { sub } => {
            let src = lower.join(sub);
            if !src.is_dir() {
                return Ok(None);
            }
            // A fresh copy for every command: the directory is on the
            // PATH, and what one command leaves there (a `python3` of its
            // own) must not run in the next one, granted more.
            if !fresh {
                std::fs::remove_dir_all(&host).map_err(io(&host))?;
            }
            std::fs::create_dir(&host).map_err(io(&host))?;
            copy_files(&src, &host)?;
            Ok(Some((vec![], Some((host, src)))))
        }
        LayerKind::Redirect { set, extra } => {
            if fresh {
                std::fs::create_dir(&host).map_err(io(&host))?;
            }
            let mut env = vec![(set.to_string(), inside)];
            env.extend(
                extra
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.replace("{lower}", lower_s))),
            );
            Ok(Some((env, None)))
        }
    }
}

/// Before each command after the first: the top of a merged layer holds
/// only the links to the person's entries (`bin`, `config.toml`, `env`:
/// what configures the tool or is run from it, which a command could have
/// replaced with its own), the tool's `fresh` files and the mirrored
/// trees; anything else a command put there goes, and a link is made
/// again to each of the person's entries.
fn restore_links(
    lower: &Path,
    layer: &Path,
    fresh: &[&str],
    mirrored: &[(&str, usize)],
) -> Result<(), LayerError> {
    let kept_dir = |name: &std::ffi::OsStr| {
        mirrored.iter().any(|(m, _)| {
            Path::new(m)
                .components()
                .next()
                .is_some_and(|c| c.as_os_str() == name)
        })
    };
    let entries = std::fs::read_dir(layer).map_err(io(layer))?;
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let p = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let ours = if meta.is_symlink() {
            std::fs::read_link(&p).is_ok_and(|t| t == lower.join(&name)) && !kept_dir(&name)
        } else {
            (meta.is_dir() && kept_dir(&name)) || fresh.iter().any(|f| name == *f)
        };
        if !ours {
            let removed = if meta.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed.map_err(io(&p))?;
        }
    }
    let entries = std::fs::read_dir(lower).map_err(io(lower))?;
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let d = layer.join(&name);
        if fresh.iter().any(|f| name == *f) || std::fs::symlink_metadata(&d).is_ok() {
            continue;
        }
        if kept_dir(&name) && e.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::create_dir(&d).map_err(io(&d))?;
        } else {
            std::os::unix::fs::symlink(e.path(), &d).map_err(io(&d))?;
        }
    }
    Ok(())
}

/// `p` is absent, or a real directory (not a link to one).
fn real_dir_or_absent(p: &Path) -> Result<(), LayerError> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if !m.is_dir() => Err(LayerError::NotOurs(p.display().to_string())),
        _ => Ok(()),
    }
}

/// Fill `dst` (a directory just made) with `src`'s entries: links, or real
/// directories along and within `mirrored` (see [`LayerKind::Merged`]).
/// `rel` is `src` relative to the layer's root.
fn merge(
    src: &Path,
    dst: &Path,
    rel: &Path,
    fresh: &[&str],
    mirrored: &[(&str, usize)],
    budget: &mut usize,
) -> Result<(), LayerError> {
    let entries = std::fs::read_dir(src).map_err(io(src))?;
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let r = rel.join(&name);
        if rel.as_os_str().is_empty() && fresh.iter().any(|f| name == *f) {
            continue;
        }
        if *budget == 0 {
            return Ok(());
        }
        *budget -= 1;
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        let descend = is_dir
            && mirrored.iter().any(|(m, depth)| {
                let m = Path::new(m);
                m.starts_with(&r)
                    || r.strip_prefix(m)
                        .is_ok_and(|below| below.components().count() <= *depth)
            });
        let (s, d) = (e.path(), dst.join(&name));
        if descend && *budget > 0 {
            std::fs::create_dir(&d).map_err(io(&d))?;
            merge(&s, &d, &r, fresh, mirrored, budget)?;
        } else {
            std::os::unix::fs::symlink(&s, &d).map_err(io(&d))?;
        }
    }
    Ok(())
}

/// Copy the files (and links, as links) directly in `src` to `dst`,
/// [`COPY_ENTRY_LIMIT`] at most.
fn copy_files(src: &Path, dst: &Path) -> Result<(), LayerError> {
    let entries = std::fs::read_dir(src).map_err(io(src))?;
    for e in entries.filter_map(Result::ok).take(COPY_ENTRY_LIMIT) {
        let Ok(t) = e.file_type() else { continue };
        let (s, d) = (e.path(), dst.join(e.file_name()));
        if t.is_symlink() {
            let target = std::fs::read_link(&s).map_err(io(&s))?;
            std::os::unix::fs::symlink(target, &d).map_err(io(&d))?;
        } else if t.is_file() {
            std::fs::copy(&s, &d).map_err(io(&d))?;
        }
    }
    Ok(())
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

    /// The session layers of rustup, pyenv and Go: what the person had
    /// is linked or copied, what the tools write lands in the session's
    /// `/tmp`, and a layer is made once per session.
    #[test]
    fn the_session_layers_keep_what_was_there_and_take_what_is_written() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let w = |p: &str, text: &str| {
            let p = h.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(".cargo/bin/cargo", "proxy");
        w(".cargo/config.toml", "");
        w(".cargo/credentials.toml", "token");
        w(".cargo/.package-cache", "");
        w(".cargo/registry/cache/idx/old-1.0.crate", "old");
        w(".cargo/registry/src/idx/old-1.0/src/lib.rs", "");
        w(".cargo/registry/index/idx/.cache/ol/d_/old", "entry");
        w(".pyenv/shims/python3", "shim");
        w(".pyenv/version", "3.99.1");
        w("go/pkg/mod/cache/download/x/@v/list", "v1.0.0");
        let v = view(h, "/usr/bin", &[]);
        let tmp = tempfile::tempdir().unwrap();
        let l = v.with_session_layers(tmp.path());
        let env = |k: &str| {
            l.layer_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            env("CARGO_HOME").as_deref(),
            Some("/tmp/.toolchains/rustup-cargo_home")
        );
        let cargo = tmp.path().join(".toolchains/rustup-cargo_home");
        let link = |p: &str| std::fs::read_link(cargo.join(p)).ok();
        assert_eq!(link("bin"), Some(h.join(".cargo/bin")));
        assert_eq!(link("config.toml"), Some(h.join(".cargo/config.toml")));
        assert_eq!(
            link("registry/cache/idx/old-1.0.crate"),
            Some(h.join(".cargo/registry/cache/idx/old-1.0.crate"))
        );
        assert_eq!(
            link("registry/src/idx/old-1.0"),
            Some(h.join(".cargo/registry/src/idx/old-1.0"))
        );
        assert_eq!(
            link("registry/index/idx/.cache/ol/d_/old"),
            Some(h.join(".cargo/registry/index/idx/.cache/ol/d_/old"))
        );
        for real in [
            "registry",
            "registry/cache/idx",
            "registry/index/idx/.cache/ol/d_",
        ] {
            let m = std::fs::symlink_metadata(cargo.join(real)).unwrap();
            assert!(m.is_dir(), "{real}");
        }
        for absent in [".package-cache", "credentials.toml"] {
            assert!(
                std::fs::symlink_metadata(cargo.join(absent)).is_err(),
                "{absent}"
            );
        }
        // pyenv's shims: a copy, bound over the person's.
        let shims = tmp.path().join(".toolchains/pyenv-pyenv_root");
        assert_eq!(l.layer_binds, vec![(shims.clone(), h.join(".pyenv/shims"))]);
        assert!(std::fs::symlink_metadata(shims.join("python3"))
            .unwrap()
            .is_file());
        // Go: an empty module cache, the person's read as a proxy.
        assert_eq!(
            env("GOMODCACHE").as_deref(),
            Some("/tmp/.toolchains/go-gopath")
        );
        assert_eq!(
            env("GOPROXY"),
            Some(format!(
                "file://{}/pkg/mod/cache/download,https://proxy.golang.org",
                h.join("go").display()
            ))
        );
        // Made once: the next run of the session finds what was written.
        std::fs::write(cargo.join("registry/cache/idx/new-2.0.crate"), "new").unwrap();
        let again = v.with_session_layers(tmp.path());
        assert_eq!(again.layer_env, l.layer_env);
        assert!(cargo.join("registry/cache/idx/new-2.0.crate").is_file());
        assert!(!h.join(".cargo/registry/cache/idx/new-2.0.crate").exists());
        // What a command put at the top of the cargo layer, or in the
        // shims, is gone at the next command; the person's links are back.
        std::fs::remove_file(cargo.join("config.toml")).unwrap();
        std::fs::write(
            cargo.join("config.toml"),
            "[build]\nrustc-wrapper = \"/tmp/x\"",
        )
        .unwrap();
        std::fs::write(cargo.join("planted"), "").unwrap();
        std::fs::write(shims.join("git"), "planted").unwrap();
        v.with_session_layers(tmp.path());
        assert_eq!(link("config.toml"), Some(h.join(".cargo/config.toml")));
        assert!(std::fs::symlink_metadata(cargo.join("planted")).is_err());
        assert!(!shims.join("git").exists());
        assert!(cargo.join("registry/cache/idx/new-2.0.crate").is_file());
        // Something else in a layer's place is never followed.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(h, other.path().join(".toolchains")).unwrap();
        let refused = v.with_session_layers(other.path());
        assert!(refused.layer_env.is_empty() && refused.layer_binds.is_empty());
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
