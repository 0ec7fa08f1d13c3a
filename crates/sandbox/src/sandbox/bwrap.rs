//! The bubblewrap argument list, built by a pure function.
//!
//! Everything the sandbox promises is spelled out here, as data: which
//! namespaces are unshared, which directories are visible and how, which
//! environment variables exist. [`bwrap_args`] touches nothing on disk — the
//! facts it needs about the host come in a [`SystemLayout`] probed once
//! elsewhere — so its tests can assert the whole vector.
//!
//! Policy, in the order the arguments appear:
//! - `--die-with-parent`, `--new-session` (no `TIOCSTI` into our terminal),
//!   `--unshare-all` (user, ipc, pid, uts, cgroup, net), `--cap-drop ALL`.
//!   A run granted network keeps its own namespace too: it gets a route
//!   out from slirp4netns, without the host's loopback ([`super::network`]).
//!   The ports of `[sandbox] localhost_ports` and, for a run granted
//!   `registries`, the registries proxy are listeners made on the run's own
//!   127.0.0.1 before its command starts ([`super::local_ports`],
//!   [`super::registry_proxy`]); the proxy's run gets the installers'
//!   proxy variables instead of the offline ones.
//! - System directories read-only (`/usr`, the merged-usr links recreated
//!   as symlinks rather than bound twice, `/opt`, `/nix`); `/var`, `/srv`,
//!   `/home`, `/root` and `/run` are not shown. A file the person's account
//!   cannot read stays unreadable inside: the run has the same uid, no
//!   capabilities (`--cap-drop ALL`), other owners are unmapped in its user
//!   namespace, and bwrap's binds are `nosuid`.
//! - `/etc` is built up from nothing: a directory of the daemon's holding
//!   copies of, links to and mount points for only the entries of
//!   [`super::etc_view::ETC_ENTRIES`] ([`super::etc_view::prepared`]; the
//!   loader's cache, TLS roots, time zone, Debian's alternatives, locale
//!   and shell files; each with its reason), `passwd` and `group` synthetic
//!   ones naming root and the user only ([`super::probe::synthetic_files`]),
//!   `resolv.conf` the sandbox's own for a run granted network. Binding the host's
//!   `/etc` whole and masking known secrets missed the ones nobody listed
//!   (`/etc/ssl/private/*.key` is readable to a daemon run as root, who
//!   stays their owner inside). The root of the view is remounted
//!   read-only last, so nothing in `/etc` can be created or changed.
//! - Fresh `/proc` and `/dev`; `/tmp` is the session's own directory
//!   ([`super::session_tmp`]: it lasts for the session's actions and goes
//!   when the session ends; caches tools write go to `/tmp/.cache`) or,
//!   without one, a private tmpfs; `/var/tmp` links to it. `HOME` is
//!   `/tmp/home`, each run's own (dotfiles there run code: one action must
//!   not plant what a later one runs); the real home directory is never
//!   visible as such.
//! - The person's toolchains ([`super::toolchains`]): the `PATH` the daemon
//!   was started with, the directories it names and the toolchain homes
//!   it needs (rustup, pyenv, nvm, ...), read-only, with the variables
//!   that locate them and credential files masked; the commit identity
//!   for git ([`super::git_identity`]).
//! - Directories the view needs but the host trees shown do not provide
//!   (the parents of the project) are made `0755`, not bwrap's `0700`:
//!   `ls -la` in the project shows an ordinary parent.
//! - The working directory read-write at its own path, then extra
//!   read-write binds, then the project's control surface (see
//!   [`super::surface`]: existing control paths read-only, the directories
//!   above them bound onto themselves so they cannot be renamed away), then
//!   extra read-only binds (last, so a read-only carve-out inside a writable
//!   tree wins). `/tmp` may be given a size (`--size`, bwrap ≥ 0.5). The
//!   daemon's own directories, when they lie inside a writable bind, are
//!   hidden behind an empty read-only tmpfs, and the directories between
//!   the bind and them are pinned so they cannot be renamed away.
//! - Nothing else of the host is mounted: the view is built up from this
//!   list, and `docs/threat-model.md` states it as a table that
//!   `tests/suite/boundary.rs` checks against these arguments.
//! - `--clearenv`, then a minimal fixed environment, then the action's
//!   variables.
//! - `--` and the interpreter, with the script as ONE argument and the
//!   action's argv after it: no value is ever spliced into shell text.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::surface::SurfaceMounts;

/// Interpreters an action may name. Each takes a script with `-c`.
pub const ALLOWED_INTERPRETERS: &[&str] = &["bash", "sh", "python3"];

/// `PATH` inside the sandbox (and for unsandboxed runs when the parent has
/// none).
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `HOME` inside the sandbox: a directory in the private `/tmp`.
pub const SANDBOX_HOME: &str = "/tmp/home";

/// Where the caches tools write go when the run has a session `/tmp`: in
/// its lasting part, so what pip, npm, uv, yarn and Go (its build cache)
/// fetched or built is there for the session's next action.
pub const SESSION_CACHE: &[(&str, &str)] = &[
    ("XDG_CACHE_HOME", "/tmp/.cache"),
    ("npm_config_cache", "/tmp/.cache/npm"),
];

/// Without network, installers fail at once instead of retrying a
/// registry they cannot reach (pip's retries took 9 s, npm's 73 s): no
/// retries for pip, npm and cargo. A run granted network or `registries`
/// keeps the tools' own settings.
pub const OFFLINE_ENV: &[(&str, &str)] = &[
    ("PIP_RETRIES", "0"),
    ("npm_config_fetch_retries", "0"),
    ("CARGO_NET_RETRY", "0"),
];

/// Environment names an action may not set: the fixed ones the sandbox
/// owns, and those that make an interpreter or the dynamic loader run code
/// that is not the approved script (`BASH_ENV=./evil.sh` would execute a
/// file before the script does).
const RESERVED_ENV_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "PROMPT_COMMAND",
];
/// Prefixes with the same danger (`LD_PRELOAD`, `PYTHONSTARTUP`, ...).
const RESERVED_ENV_PREFIXES: &[&str] = &["LD_", "PYTHON", "BASH_FUNC_"];

/// What a sandboxed run needs: where, with what, and what it may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// Working directory, bound read-write at the same path. Absolute.
    pub cwd: PathBuf,
    /// Bind the working directory read-only instead (the `read-only`
    /// session mode): the extra read-write binds become read-only too and
    /// no directory is pinned writable, so nothing the run can reach on the
    /// host changes. The kernel enforces it (`EROFS`).
    pub read_only: bool,
    /// Whether the network namespace is shared with the host.
    pub network: bool,
    /// Further paths visible read-only at the same path.
    pub extra_ro: Vec<PathBuf>,
    /// Further paths visible read-write at the same path.
    pub extra_rw: Vec<PathBuf>,
    /// The action's environment variables (names checked, values verbatim).
    pub env: BTreeMap<String, String>,
    /// `bash`, `sh` or `python3`.
    pub interpreter: String,
    /// The script, passed as a single argument after `-c`.
    pub script: String,
    /// Positional arguments (`$1`… for shells, `sys.argv[1:]` for Python).
    pub argv: Vec<String>,
}

/// Host facts the argument list depends on, probed once by
/// [`SystemLayout::probe`] so [`bwrap_args`] stays pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemLayout {
    /// System paths in the order they are mounted.
    pub entries: Vec<SystemEntry>,
    /// What the sandbox's `/etc` holds besides the synthetic files (see
    /// [`super::etc_view`]), mounted into an empty directory.
    pub etc: Vec<super::etc_view::EtcItem>,
    /// Where `/etc/resolv.conf` really lives when it is a symlink out of
    /// `/etc` (systemd-resolved points it into `/run`); bound read-only only
    /// when network is granted, so DNS works.
    pub resolv_conf_target: Option<PathBuf>,
    /// Files shown in place of the host's (`/etc/passwd`, `/etc/group`, the
    /// resolver of a run granted network); see [`super::probe::synthetic_files`].
    pub synthetic: Option<super::probe::SyntheticFiles>,
}

/// One system path as it exists on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemEntry {
    /// A real directory, bound read-only.
    Dir(PathBuf),
    /// A symlink (merged-usr `/bin -> usr/bin`), recreated as is.
    Symlink { path: PathBuf, target: String },
}

/// System paths considered, in mount order. `/usr` must precede the
/// merged-usr links that point into it.
const SYSTEM_PATHS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/nix",
];

impl SystemLayout {
    /// Look at the host: which system paths exist, which are symlinks,
    /// which secret files exist.
    pub fn probe() -> SystemLayout {
        let mut entries = Vec::new();
        for p in SYSTEM_PATHS {
            let path = Path::new(p);
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Ok(target) = std::fs::read_link(path) {
                    if let Some(target) = target.to_str() {
                        entries.push(SystemEntry::Symlink {
                            path: path.to_path_buf(),
                            target: target.to_string(),
                        });
                    }
                }
            } else if meta.is_dir() {
                entries.push(SystemEntry::Dir(path.to_path_buf()));
            }
        }
        let resolv = Path::new("/etc/resolv.conf");
        let resolv_conf_target = match std::fs::symlink_metadata(resolv) {
            Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(resolv)
                .ok()
                .filter(|t| !t.starts_with("/etc") && t.is_file()),
            _ => None,
        };
        SystemLayout {
            entries,
            etc: super::etc_view::prepared(super::etc_view::probe_etc(Path::new("/etc"))),
            resolv_conf_target,
            synthetic: super::probe::synthetic_files(),
        }
    }

    /// The trees of the host this layout shows at their own path (a `PATH`
    /// entry inside one needs no bind of its own).
    pub fn shown_trees(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .map(|e| match e {
                SystemEntry::Dir(p) | SystemEntry::Symlink { path: p, .. } => p.clone(),
            })
            .collect()
    }

    /// The common merged-usr layout (Debian 12+, Fedora, Arch), with no
    /// masks: deterministic input for tests and examples.
    pub fn merged_usr() -> SystemLayout {
        let link = |path: &str, target: &str| SystemEntry::Symlink {
            path: PathBuf::from(path),
            target: target.to_string(),
        };
        SystemLayout {
            entries: vec![
                SystemEntry::Dir(PathBuf::from("/usr")),
                link("/bin", "usr/bin"),
                link("/sbin", "usr/sbin"),
                link("/lib", "usr/lib"),
                link("/lib64", "usr/lib64"),
            ],
            etc: vec![super::etc_view::EtcItem::Bind {
                source: PathBuf::from("/etc/hosts"),
                dest: PathBuf::from("/etc/hosts"),
            }],
            resolv_conf_target: None,
            synthetic: None,
        }
    }
}

/// Why a spec cannot become a sandboxed command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("interpreter `{0}` is not allowed; use one of: bash, sh, python3")]
    Interpreter(String),
    #[error("environment variable name `{0}` is invalid: names must match [A-Za-z_][A-Za-z0-9_]*")]
    EnvName(String),
    #[error(
        "environment variable `{0}` is reserved: the sandbox sets it, or it would make the \
         interpreter run code other than the script"
    )]
    ReservedEnv(String),
    #[error("{what} contains a NUL byte, which cannot be passed to a program")]
    Nul { what: String },
    #[error("path `{path}` cannot be bound: {why}")]
    Path { path: String, why: &'static str },
}

/// What a run adds to the policy beyond its spec: the project's control
/// surface (probed on the host just before the run) and the size of the
/// private `/tmp`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Boundary {
    /// Control paths to bind read-only, and the directories to pin.
    pub surface: SurfaceMounts,
    /// Size of the `/tmp` tmpfs in bytes (`None`: the kernel's default, half
    /// of the memory).
    pub tmp_size: Option<u64>,
    /// Directories inside a writable bind to hide behind an empty,
    /// read-only tmpfs: the daemon's own files (config, skills, state,
    /// memex) when a session runs in `$HOME`; see
    /// [`crate::control_surface::host_paths_within`]. They must exist.
    pub hidden: Vec<PathBuf>,
    /// The session's own `/tmp` on the host (see [`super::session_tmp`]),
    /// bound at `/tmp` instead of a tmpfs (`tmp_size` then does not apply).
    pub session_tmp: Option<PathBuf>,
    /// The person's toolchains and `PATH` (see [`super::toolchains`]).
    pub home: super::toolchains::HomeView,
    /// Variables set before the action's own (the git identity).
    pub env: Vec<(String, String)>,
    /// What of the host's loopback and the registries the run reaches.
    pub reach: LocalReach,
}

/// What a run reaches of the person's services and the package
/// registries besides its own loopback (see [`super::local_ports`] and
/// [`super::registry_proxy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalReach {
    /// Ports of the host's 127.0.0.1 shown at the sandbox's 127.0.0.1.
    pub ports: Vec<u16>,
    /// The `registries` grant: the proxy, and the installers told of it.
    pub registries: bool,
}

/// The bwrap arguments (without the `bwrap` program itself) that run
/// `spec` under the policy described in this module's documentation, with
/// no control surface and the default `/tmp`.
pub fn bwrap_args(spec: &SandboxSpec, system: &SystemLayout) -> Result<Vec<String>, SpecError> {
    bwrap_args_with(spec, system, &Boundary::default())
}

/// [`bwrap_args`] with a [`Boundary`]: the control paths read-only over the
/// writable working directory, their parent directories pinned, `/tmp`
/// of a fixed size.
pub fn bwrap_args_with(
    spec: &SandboxSpec,
    system: &SystemLayout,
    boundary: &Boundary,
) -> Result<Vec<String>, SpecError> {
    let command = interpreter_command(&spec.interpreter, &spec.script, &spec.argv)?;
    check_env(&spec.env)?;
    let cwd = bind_path(&spec.cwd)?;
    let extra_rw = spec
        .extra_rw
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let extra_ro = spec
        .extra_ro
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let pins = boundary
        .surface
        .pins
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let surface_ro = boundary
        .surface
        .read_only
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let tmp_size = boundary.tmp_size.map(|n| n.to_string());
    let hidden = boundary
        .hidden
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let masked = boundary
        .surface
        .masked
        .iter()
        .filter(|m| !boundary.hidden.iter().any(|h| m.starts_with(h)))
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;

    let host_pins = host_pins(&spec.cwd, &spec.extra_rw, &boundary.hidden)
        .iter()
        .map(|p| bind_path(p))
        .collect::<Result<Vec<_>, _>>()?;

    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(std::string::ToString::to_string));

    push(&["--die-with-parent", "--new-session", "--unshare-all"]);
    // Not the host's network: slirp4netns, without its loopback; the
    // person's listed ports and the registries proxy as listeners made
    // inside before the command runs.
    let plan = super::network::Plan {
        slirp: spec.network,
        ports: boundary.reach.ports.clone(),
        proxy: boundary.reach.registries && !spec.network,
    };
    if !plan.is_empty() {
        let flags = plan.bwrap_flags();
        push(&flags.each_ref().map(String::as_str));
    }
    push(&["--cap-drop", "ALL"]);

    for entry in &system.entries {
        match entry {
            SystemEntry::Dir(p) => {
                let p = lossless(p)?;
                push(&["--ro-bind", p, p]);
            }
            SystemEntry::Symlink { path, target } => {
                push(&["--symlink", target, lossless(path)?]);
            }
        }
    }
    // `/etc` from nothing: an empty directory, then the listed entries.
    if !system
        .etc
        .iter()
        .any(|i| matches!(i, super::etc_view::EtcItem::Base(_)))
    {
        push(&["--perms", "0755", "--dir", "/etc"]);
    }
    for item in &system.etc {
        match item {
            super::etc_view::EtcItem::Base(dir) => {
                push(&["--ro-bind", lossless(dir)?, "/etc"]);
            }
            super::etc_view::EtcItem::Bind { source, dest } => {
                push(&["--ro-bind", lossless(source)?, lossless(dest)?]);
            }
            super::etc_view::EtcItem::Symlink { dest, target } => {
                push(&["--symlink", target, lossless(dest)?]);
            }
        }
    }
    let synthetic = system.synthetic.as_ref();
    if let Some(s) = synthetic {
        push(&["--ro-bind", lossless(&s.passwd)?, "/etc/passwd"]);
        push(&["--ro-bind", lossless(&s.group)?, "/etc/group"]);
    }
    if spec.network {
        if let Some(t) = &system.resolv_conf_target {
            let t = lossless(t)?;
            push(&["--ro-bind", t, t]);
        }
        if let Some(r) = synthetic.and_then(|s| s.resolv_conf.as_ref()) {
            push(&["--ro-bind", lossless(r)?, "/etc/resolv.conf"]);
        }
    }

    push(&["--proc", "/proc", "--dev", "/dev"]);
    match &boundary.session_tmp {
        Some(dir) => {
            // The session's /tmp lasts; `HOME` in it does not: dotfiles
            // there (`.gitconfig`, `.bashrc`, `.config/git/config`,
            // Python's user site) make programs run code, and one action
            // must not plant code that a later one (granted the network,
            // or approved to read a secret) would run. Caches go to
            // `XDG_CACHE_HOME` in the lasting part ([`SESSION_CACHE`]).
            push(&["--bind", &bind_path(dir)?, "/tmp"]);
            if let Some(size) = &tmp_size {
                push(&["--size", size]);
            }
            push(&["--tmpfs", SANDBOX_HOME]);
        }
        None => {
            if let Some(size) = &tmp_size {
                push(&["--size", size]);
            }
            push(&["--tmpfs", "/tmp"]);
            push(&["--dir", SANDBOX_HOME]);
        }
    }
    // Programs that keep big temporary files in /var/tmp find the same
    // /tmp there (the view's root is read-only: nothing can make it).
    push(&["--symlink", "/tmp", "/var/tmp"]);
    // The person's toolchains, read-only; those inside a writable bind
    // come after it (a read-only carve-out), the others before (a project
    // inside one stays writable).
    let (toolchains_inside, toolchains_outside): (Vec<&PathBuf>, Vec<&PathBuf>) =
        boundary.home.read_only.iter().partition(|d| {
            d.starts_with(&spec.cwd) || spec.extra_rw.iter().any(|w| d.starts_with(w))
        });
    for d in &toolchains_outside {
        let d = bind_path(d)?;
        push(&["--ro-bind", &d, &d]);
    }
    // Read-only mode: everything writable becomes read-only, and pins
    // (writable binds of directories inside the project) are left out —
    // a read-only tree cannot be renamed anyway.
    let writable = if spec.read_only {
        "--ro-bind"
    } else {
        "--bind"
    };
    push(&[writable, &cwd, &cwd]);
    for p in &extra_rw {
        push(&[writable, p, p]);
    }
    // After every writable bind, so nothing re-exposes them: pinned parents
    // (a mount point cannot be renamed away), then the control paths.
    if !spec.read_only {
        for p in &pins {
            push(&["--bind", p, p]);
        }
        for p in &host_pins {
            push(&["--bind", p, p]);
        }
    }
    for p in &surface_ro {
        push(&["--ro-bind", p, p]);
    }
    // The daemon's own directories: not even readable (past tool output,
    // keys in config.toml), and nothing can be created there.
    for p in &hidden {
        push(&["--tmpfs", p, "--remount-ro", p]);
    }
    // Secrets: `/dev/null` (which cannot even be opened in the sandbox:
    // its mounts are `nodev`) over each, except inside a hidden directory,
    // where nothing is visible anyway.
    for p in &masked {
        push(&["--ro-bind", "/dev/null", p]);
    }
    for p in &extra_ro {
        push(&["--ro-bind", p, p]);
    }
    for d in &toolchains_inside {
        let d = bind_path(d)?;
        push(&["--ro-bind", &d, &d]);
    }
    // The session's writable copies over a path of a toolchain home
    // (pyenv's shims; see `toolchains::LAYERS`), after the read-only
    // binds they lie in. They live in the session's `/tmp`, which is
    // writable in read-only mode too.
    for (host, dest) in &boundary.home.layer_binds {
        push(&["--bind", &bind_path(host)?, &bind_path(dest)?]);
    }
    // Credentials inside the toolchain homes and the person's extra paths.
    if boundary
        .home
        .masked
        .iter()
        .any(|m| m.as_os_str().is_empty())
    {
        return Err(SpecError::Path {
            path: String::new(),
            why: "it is empty",
        });
    }
    for m in &boundary.home.masked {
        if !boundary.hidden.iter().any(|h| m.starts_with(h)) {
            push(&["--ro-bind", "/dev/null", &bind_path(m)?]);
        }
    }
    // Last: nothing more can be created in the view's own root (`/etc`
    // is a directory of it).
    push(&["--remount-ro", "/"]);
    push(&["--chdir", &cwd]);

    // The mounts are complete: their missing parents are made `0755`.
    let mut a = with_parent_dirs(a);
    let mut push = |items: &[&str]| a.extend(items.iter().map(std::string::ToString::to_string));
    push(&["--clearenv"]);
    let path = boundary.home.path.as_deref().unwrap_or(SANDBOX_PATH);
    for (k, v) in base_env(path, SANDBOX_HOME) {
        push(&["--setenv", k, &v]);
    }
    if boundary.session_tmp.is_some() {
        for (k, v) in SESSION_CACHE {
            push(&["--setenv", k, v]);
        }
    }
    if plan.proxy {
        for (k, v) in super::registry_proxy::proxy_env() {
            push(&["--setenv", k, &v]);
        }
    } else if !spec.network {
        for (k, v) in OFFLINE_ENV {
            push(&["--setenv", k, v]);
        }
    }
    for (k, v) in (boundary.home.env.iter())
        .chain(&boundary.home.layer_env)
        .chain(&boundary.env)
    {
        if !valid_env_name(k) || v.contains('\0') {
            return Err(SpecError::EnvName(k.clone()));
        }
        push(&["--setenv", k, v]);
    }
    for (k, v) in &spec.env {
        push(&["--setenv", k, v]);
    }

    a.push("--".into());
    a.extend(command);
    Ok(a)
}

/// Options that take this many arguments after them (the ones this module
/// emits); a destination is the last of them where one is made.
fn arity(op: &str) -> Option<(usize, bool)> {
    Some(match op {
        "--bind" | "--ro-bind" | "--dev-bind" | "--symlink" => (2, true),
        "--tmpfs" | "--dir" | "--proc" | "--dev" => (1, true),
        "--remount-ro" | "--chdir" | "--cap-drop" => (1, false),
        // Modifiers of the next operation.
        "--perms" | "--size" => (1, false),
        "--setenv" => (2, false),
        _ => return None,
    })
}

/// `args` (without `--` and the command) with `--perms 0755 --dir P` before
/// the first operation needing a directory `P` that nothing made yet:
/// bwrap would make it `0700` (`ls -la` in a project at `/home/ada/p`
/// would show `..` as `drwx------`). Directories under a host tree bound
/// in are the host's own and are left alone; under the view's fresh ones
/// (`--dir`, `--tmpfs`, the session's `/tmp`) they are made.
fn with_parent_dirs(args: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(args.len() + 8);
    // Destinations made so far, and whether each is the host's tree.
    let mut made: Vec<(PathBuf, bool)> = vec![(PathBuf::from("/"), false)];
    // Where the current operation starts in `out` (before its modifiers).
    let mut op_start: Option<usize> = None;
    let mut i = 0;
    while i < args.len() {
        let op = args[i].as_str();
        let Some((n, makes)) = arity(op) else {
            out.push(args[i].clone());
            i += 1;
            continue;
        };
        let end = (i + 1 + n).min(args.len());
        if matches!(op, "--perms" | "--size") {
            op_start.get_or_insert(out.len());
            out.extend_from_slice(&args[i..end]);
            i = end;
            continue;
        }
        let at = op_start.take().unwrap_or(out.len());
        if makes && end > i + 1 {
            let dest = PathBuf::from(&args[end - 1]);
            let mut parents: Vec<String> = Vec::new();
            let ancestors: Vec<&Path> = dest.ancestors().skip(1).collect();
            for anc in ancestors.into_iter().rev() {
                let known = made
                    .iter()
                    .any(|(m, host)| anc == m || (*host && anc.starts_with(m)));
                if known {
                    continue;
                }
                made.push((anc.to_path_buf(), false));
                parents.extend(["--perms", "0755", "--dir"].map(String::from));
                parents.push(anc.to_string_lossy().into_owned());
            }
            out.splice(at..at, parents);
            let fresh =
                matches!(op, "--dir" | "--tmpfs") || (op == "--bind" && dest == Path::new("/tmp"));
            made.push((dest, !fresh));
        }
        out.extend_from_slice(&args[i..end]);
        i = end;
    }
    out
}

/// The directories between a writable bind and a hidden host directory
/// inside it (`~/.config` and `~/.local`, `~/.local/state` for a session in
/// `$HOME`), shallowest first. Bound onto themselves they are mount points,
/// which cannot be renamed or removed (`EBUSY`): otherwise `mv ~/.config
/// ~/.c && mkdir -p ~/.config/passepartout` would put a fresh, writable
/// configuration where the hidden one was.
fn host_pins(cwd: &Path, extra_rw: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for h in hidden {
        let Some(bind) = std::iter::once(cwd)
            .chain(extra_rw.iter().map(PathBuf::as_path))
            .filter(|b| h.starts_with(b) && h.as_path() != *b)
            .max_by_key(|b| b.components().count())
        else {
            continue;
        };
        let mut p = bind.to_path_buf();
        let Ok(rest) = h.strip_prefix(bind) else {
            continue;
        };
        let parts: Vec<Component> = rest.components().collect();
        for c in &parts[..parts.len().saturating_sub(1)] {
            p.push(c);
            if !out.contains(&p) {
                out.push(p.clone());
            }
        }
    }
    out.sort_by_key(|p| p.components().count());
    out
}

/// The interpreter command line: `bash -c SCRIPT bash ARGV...` (the name
/// after the script becomes `$0`, so messages read `bash: line 1: ...`), or
/// `python3 -c SCRIPT ARGV...` (Python puts `-c` in `sys.argv[0]`).
/// Shared with unsandboxed runs so both obey the same argv discipline.
pub fn interpreter_command(
    interpreter: &str,
    script: &str,
    argv: &[String],
) -> Result<Vec<String>, SpecError> {
    if !ALLOWED_INTERPRETERS.contains(&interpreter) {
        return Err(SpecError::Interpreter(interpreter.to_string()));
    }
    if script.contains('\0') {
        return Err(SpecError::Nul {
            what: "the script".into(),
        });
    }
    if let Some(i) = argv.iter().position(|s| s.contains('\0')) {
        return Err(SpecError::Nul {
            what: format!("argument {}", i + 1),
        });
    }
    let mut cmd = vec![
        interpreter.to_string(),
        "-c".to_string(),
        script.to_string(),
    ];
    if interpreter != "python3" {
        cmd.push(interpreter.to_string());
    }
    cmd.extend(argv.iter().cloned());
    Ok(cmd)
}

/// Check the action's environment: valid, unreserved names; no NUL bytes.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), SpecError> {
    for (name, value) in env {
        if !valid_env_name(name) {
            return Err(SpecError::EnvName(name.clone()));
        }
        if RESERVED_ENV_NAMES.contains(&name.as_str())
            || RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
        {
            return Err(SpecError::ReservedEnv(name.clone()));
        }
        if value.contains('\0') {
            return Err(SpecError::Nul {
                what: format!("the value of `{name}`"),
            });
        }
    }
    Ok(())
}

/// The fixed environment every run starts from, before the action's
/// variables: `PATH`, `HOME`, a UTF-8 locale that exists everywhere, and a
/// terminal type that asks programs for no escape sequences.
pub fn base_env(path: &str, home: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", path.to_string()),
        ("HOME", home.to_string()),
        ("LANG", "C.UTF-8".to_string()),
        ("TERM", "dumb".to_string()),
    ]
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A path to bind at its own location: absolute, UTF-8, no `..`, and not
/// the root (binding `/` read-write would undo the sandbox).
fn bind_path(p: &Path) -> Result<String, SpecError> {
    let fail = |why| SpecError::Path {
        path: p.to_string_lossy().into_owned(),
        why,
    };
    if !p.is_absolute() {
        return Err(fail("it is not absolute"));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(fail("it contains `..`"));
    }
    if p.components().all(|c| c == Component::RootDir) {
        return Err(fail("it is the root directory"));
    }
    Ok(lossless(p)?.to_string())
}

fn lossless(p: &Path) -> Result<&str, SpecError> {
    p.to_str().ok_or_else(|| SpecError::Path {
        path: p.to_string_lossy().into_owned(),
        why: "it is not valid UTF-8",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(interpreter: &str, script: &str) -> SandboxSpec {
        SandboxSpec {
            cwd: PathBuf::from("/home/ada/project"),
            read_only: false,
            network: false,
            extra_ro: vec![],
            extra_rw: vec![],
            env: BTreeMap::new(),
            interpreter: interpreter.into(),
            script: script.into(),
            argv: vec![],
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(std::string::ToString::to_string).collect()
    }

    /// Everything between the namespace flags and the working directory,
    /// for the merged-usr layout: shared by the whole-vector tests.
    const SYSTEM: &[&str] = &[
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--perms",
        "0755",
        "--dir",
        "/etc",
        "--ro-bind",
        "/etc/hosts",
        "/etc/hosts",
    ];
    /// The project's parents, made `0755` before its bind.
    const PARENTS: &[&str] = &[
        "--perms",
        "0755",
        "--dir",
        "/home",
        "--perms",
        "0755",
        "--dir",
        "/home/ada",
    ];
    const FS: &[&str] = &[
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--dir",
        "/tmp/home",
        "--perms",
        "0755",
        "--dir",
        "/var",
        "--symlink",
        "/tmp",
        "/var/tmp",
    ];
    const BASE_ENV: &[&str] = &[
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--setenv",
        "HOME",
        "/tmp/home",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "TERM",
        "dumb",
    ];
    /// A run without network: installers do not retry.
    const OFFLINE: &[&str] = &[
        "--setenv",
        "PIP_RETRIES",
        "0",
        "--setenv",
        "npm_config_fetch_retries",
        "0",
        "--setenv",
        "CARGO_NET_RETRY",
        "0",
    ];

    fn expected(parts: &[&[&str]]) -> Vec<String> {
        parts.iter().flat_map(|p| strings(p)).collect()
    }

    #[test]
    fn parents_of_hidden_host_dirs_are_pinned() {
        let hidden = vec![
            PathBuf::from("/home/ada/.config/passepartout"),
            PathBuf::from("/home/ada/.local/state/passepartout"),
            PathBuf::from("/home/ada/memex"),
        ];
        assert_eq!(
            host_pins(Path::new("/home/ada"), &[], &hidden),
            vec![
                PathBuf::from("/home/ada/.config"),
                PathBuf::from("/home/ada/.local"),
                PathBuf::from("/home/ada/.local/state"),
            ]
        );
        let mut s = spec("bash", "true");
        s.cwd = PathBuf::from("/home/ada");
        let boundary = Boundary {
            hidden: hidden[..1].to_vec(),
            ..Boundary::default()
        };
        let args = bwrap_args_with(&s, &SystemLayout::merged_usr(), &boundary).unwrap();
        let at = |x: &str| args.iter().position(|a| a == x).unwrap();
        // The pin comes before the tmpfs that hides the directory in it.
        assert_eq!(args[at("/home/ada/.config") - 1], "--bind");
        assert!(at("/home/ada/.config") < at("/home/ada/.config/passepartout"));
        // Read-only mode: nothing is writable, nothing to pin.
        s.read_only = true;
        let args = bwrap_args_with(&s, &SystemLayout::merged_usr(), &boundary).unwrap();
        assert!(!args.iter().any(|a| a == "/home/ada/.config"));
    }

    #[test]
    fn a_session_tmp_is_bound_with_a_fresh_home_and_lasting_caches() {
        let boundary = Boundary {
            session_tmp: Some(PathBuf::from("/var/tmp/passepartout-tmp-1-x/s0")),
            tmp_size: Some(1024),
            ..Boundary::default()
        };
        let args =
            bwrap_args_with(&spec("sh", "true"), &SystemLayout::merged_usr(), &boundary).unwrap();
        let joined = args.join(" ");
        assert!(
            joined.contains(
                "--bind /var/tmp/passepartout-tmp-1-x/s0 /tmp --size 1024 --tmpfs /tmp/home"
            ),
            "{joined}"
        );
        assert!(!joined.contains("--tmpfs /tmp "), "{joined}");
        assert!(
            joined.contains("--setenv XDG_CACHE_HOME /tmp/.cache"),
            "{joined}"
        );
        assert!(
            joined.contains("--setenv npm_config_cache /tmp/.cache/npm"),
            "{joined}"
        );
    }

    #[test]
    fn default_policy_whole_vector() {
        let args = bwrap_args(&spec("bash", "ls -la"), &SystemLayout::merged_usr()).unwrap();
        let want = expected(&[
            &["--die-with-parent", "--new-session", "--unshare-all"],
            SYSTEM,
            FS,
            PARENTS,
            &[
                "--bind",
                "/home/ada/project",
                "/home/ada/project",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            OFFLINE,
            &["--", "bash", "-c", "ls -la", "bash"],
        ]);
        assert_eq!(args, want);
    }

    #[test]
    fn read_only_mode_binds_everything_writable_read_only_whole_vector() {
        let mut s = spec("bash", "echo x > f");
        s.read_only = true;
        s.extra_rw = vec![PathBuf::from("/home/ada/memex")];
        s.extra_ro = vec![PathBuf::from("/opt/docs")];
        let boundary = Boundary {
            surface: SurfaceMounts {
                pins: vec![PathBuf::from("/home/ada/project/.git")],
                read_only: vec![PathBuf::from("/home/ada/project/.git/config")],
                masked: vec![],
            },
            tmp_size: None,
            hidden: vec![PathBuf::from("/home/ada/project/.local/state/passepartout")],
            ..Boundary::default()
        };
        let args = bwrap_args_with(&s, &SystemLayout::merged_usr(), &boundary).unwrap();
        let want = expected(&[
            &["--die-with-parent", "--new-session", "--unshare-all"],
            SYSTEM,
            FS,
            PARENTS,
            &[
                "--ro-bind",
                "/home/ada/project",
                "/home/ada/project",
                "--ro-bind",
                "/home/ada/memex",
                "/home/ada/memex",
                // No writable pin of `.git`; the control path stays read-only.
                "--ro-bind",
                "/home/ada/project/.git/config",
                "/home/ada/project/.git/config",
                "--tmpfs",
                "/home/ada/project/.local/state/passepartout",
                "--remount-ro",
                "/home/ada/project/.local/state/passepartout",
                "--perms",
                "0755",
                "--dir",
                "/opt",
                "--ro-bind",
                "/opt/docs",
                "/opt/docs",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            OFFLINE,
            &["--", "bash", "-c", "echo x > f", "bash"],
        ]);
        assert_eq!(args, want);
    }

    #[test]
    fn network_granted_shares_net_and_binds_resolver() {
        let mut s = spec("sh", "curl example.org");
        s.network = true;
        let mut layout = SystemLayout::merged_usr();
        layout.resolv_conf_target = Some(PathBuf::from("/run/systemd/resolve/stub-resolv.conf"));
        let args = bwrap_args(&s, &layout).unwrap();
        let want = expected(&[
            &[
                "--die-with-parent",
                "--new-session",
                "--unshare-all",
                "--info-fd",
                super::super::network::INFO_FD_ARG,
                "--block-fd",
                "{passepartout:net-block-fd slirp}",
            ],
            SYSTEM,
            &[
                "--perms",
                "0755",
                "--dir",
                "/run",
                "--perms",
                "0755",
                "--dir",
                "/run/systemd",
                "--perms",
                "0755",
                "--dir",
                "/run/systemd/resolve",
                "--ro-bind",
                "/run/systemd/resolve/stub-resolv.conf",
                "/run/systemd/resolve/stub-resolv.conf",
            ],
            FS,
            PARENTS,
            &[
                "--bind",
                "/home/ada/project",
                "/home/ada/project",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            &["--", "sh", "-c", "curl example.org", "sh"],
        ]);
        assert_eq!(args, want);

        // Without network the resolver target is not bound.
        s.network = false;
        let args = bwrap_args(&s, &layout).unwrap();
        assert!(!args.iter().any(|a| a.starts_with("/run")));
        assert!(!args.contains(&"--info-fd".to_string()));
    }

    #[test]
    fn python_takes_argv_without_a_name() {
        let mut s = spec("python3", "import sys; print(sys.argv)");
        s.argv = strings(&["one", "two"]);
        let args = bwrap_args(&s, &SystemLayout::merged_usr()).unwrap();
        let want = expected(&[
            &["--die-with-parent", "--new-session", "--unshare-all"],
            SYSTEM,
            FS,
            PARENTS,
            &[
                "--bind",
                "/home/ada/project",
                "/home/ada/project",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            OFFLINE,
            &[
                "--",
                "python3",
                "-c",
                "import sys; print(sys.argv)",
                "one",
                "two",
            ],
        ]);
        assert_eq!(args, want);
    }

    #[test]
    fn extra_binds_masks_and_split_layout() {
        let mut s = spec("bash", "make");
        s.extra_rw = vec![PathBuf::from("/home/ada/memex")];
        s.extra_ro = vec![PathBuf::from("/home/ada/project/.git")];
        // A non-merged layout: /bin and /lib are real directories.
        let layout = SystemLayout {
            entries: vec![
                SystemEntry::Dir("/usr".into()),
                SystemEntry::Dir("/bin".into()),
                SystemEntry::Dir("/lib".into()),
                SystemEntry::Dir("/opt".into()),
            ],
            etc: vec![
                super::super::etc_view::EtcItem::Bind {
                    source: "/etc/ssl/certs".into(),
                    dest: "/etc/ssl/certs".into(),
                },
                super::super::etc_view::EtcItem::Symlink {
                    dest: "/etc/localtime".into(),
                    target: "/usr/share/zoneinfo/UTC".into(),
                },
            ],
            resolv_conf_target: None,
            synthetic: None,
        };
        let args = bwrap_args(&s, &layout).unwrap();
        let want = expected(&[
            &[
                "--die-with-parent",
                "--new-session",
                "--unshare-all",
                "--cap-drop",
                "ALL",
            ],
            &[
                "--ro-bind",
                "/usr",
                "/usr",
                "--ro-bind",
                "/bin",
                "/bin",
                "--ro-bind",
                "/lib",
                "/lib",
                "--ro-bind",
                "/opt",
                "/opt",
            ],
            &[
                "--perms",
                "0755",
                "--dir",
                "/etc",
                "--perms",
                "0755",
                "--dir",
                "/etc/ssl",
                "--ro-bind",
                "/etc/ssl/certs",
                "/etc/ssl/certs",
                "--symlink",
                "/usr/share/zoneinfo/UTC",
                "/etc/localtime",
            ],
            FS,
            PARENTS,
            &[
                "--bind",
                "/home/ada/project",
                "/home/ada/project",
                "--bind",
                "/home/ada/memex",
                "/home/ada/memex",
                "--ro-bind",
                "/home/ada/project/.git",
                "/home/ada/project/.git",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            OFFLINE,
            &["--", "bash", "-c", "make", "bash"],
        ]);
        assert_eq!(args, want);
    }

    #[test]
    fn hostile_env_values_and_argv_stay_single_arguments() {
        let mut s = spec("bash", r#"printf '%s\n' "$Q" "$@""#);
        let hostile = "; rm -rf ~ $(touch pwned) `id` '\"\nnext line";
        s.env.insert("Q".into(), hostile.into());
        s.env.insert("_under_score9".into(), "--setenv".into());
        s.argv = strings(&["--", "-c", hostile]);
        let args = bwrap_args(&s, &SystemLayout::merged_usr()).unwrap();
        let want = expected(&[
            &["--die-with-parent", "--new-session", "--unshare-all"],
            SYSTEM,
            FS,
            PARENTS,
            &[
                "--bind",
                "/home/ada/project",
                "/home/ada/project",
                "--remount-ro",
                "/",
                "--chdir",
                "/home/ada/project",
            ],
            BASE_ENV,
            OFFLINE,
            &[
                "--setenv",
                "Q",
                hostile,
                "--setenv",
                "_under_score9",
                "--setenv",
            ],
            &[
                "--",
                "bash",
                "-c",
                r#"printf '%s\n' "$Q" "$@""#,
                "bash",
                "--",
                "-c",
                hostile,
            ],
        ]);
        assert_eq!(args, want);
    }

    #[test]
    fn rejects_bad_env_names() {
        for name in ["1X", "A-B", "A B", "", "A=B", "X;rm", "É"] {
            let mut s = spec("bash", "true");
            s.env.insert(name.into(), "v".into());
            assert_eq!(
                bwrap_args(&s, &SystemLayout::merged_usr()),
                Err(SpecError::EnvName(name.into())),
                "{name:?}"
            );
        }
    }

    #[test]
    fn rejects_reserved_env_names() {
        for name in [
            "PATH",
            "HOME",
            "BASH_ENV",
            "ENV",
            "LD_PRELOAD",
            "PYTHONSTARTUP",
        ] {
            let mut s = spec("bash", "true");
            s.env.insert(name.into(), "v".into());
            assert_eq!(
                bwrap_args(&s, &SystemLayout::merged_usr()),
                Err(SpecError::ReservedEnv(name.into())),
                "{name}"
            );
        }
        let err = SpecError::ReservedEnv("BASH_ENV".into()).to_string();
        assert_eq!(
            err,
            "environment variable `BASH_ENV` is reserved: the sandbox sets it, or it would make \
             the interpreter run code other than the script"
        );
    }

    #[test]
    fn rejects_unknown_interpreters() {
        for interp in ["zsh", "/bin/bash", "bash -x", "python", "perl", ""] {
            assert_eq!(
                bwrap_args(&spec(interp, "true"), &SystemLayout::merged_usr()),
                Err(SpecError::Interpreter(interp.into()))
            );
        }
        assert_eq!(
            SpecError::Interpreter("zsh".into()).to_string(),
            "interpreter `zsh` is not allowed; use one of: bash, sh, python3"
        );
    }

    #[test]
    fn rejects_unbindable_paths_and_nul_bytes() {
        let layout = SystemLayout::merged_usr();
        for cwd in ["/", "relative/dir", "/home/../etc"] {
            let mut s = spec("bash", "true");
            s.cwd = PathBuf::from(cwd);
            assert!(
                matches!(bwrap_args(&s, &layout), Err(SpecError::Path { .. })),
                "{cwd}"
            );
        }
        let mut s = spec("bash", "true");
        s.extra_rw = vec![PathBuf::from("//")];
        assert!(matches!(
            bwrap_args(&s, &layout),
            Err(SpecError::Path { .. })
        ));

        let mut s = spec("bash", "true");
        s.argv = strings(&["ok", "a\0b"]);
        assert_eq!(
            bwrap_args(&s, &layout),
            Err(SpecError::Nul {
                what: "argument 2".into()
            })
        );
        let mut s = spec("bash", "true");
        s.env.insert("V".into(), "a\0".into());
        assert_eq!(
            bwrap_args(&s, &layout),
            Err(SpecError::Nul {
                what: "the value of `V`".into()
            })
        );
    }
}
