//! The control surface: files inside a project that steer the agent or that
//! the host executes later, so the agent must never change them on its own.
//!
//! One list, read by every layer that enforces it: the sandbox mounts these
//! paths read-only, the files actuator refuses to write them without a
//! person's approval, and the gates turn any write to them into *ask*. Keeping
//! the list here (and not in each layer) is what keeps the layers in step.
//!
//! Beside the project-relative entries live the *host paths*: the daemon's
//! own directories (configuration, user skills, state with plans, audit,
//! sessions, checkpoints and the trust store, memex). They are outside most
//! projects, but a session whose working directory is `$HOME` (or one of
//! their ancestors) would otherwise have them inside its writable bind. The
//! sandbox binds each one read-only when it falls inside a writable bind,
//! the files actuator refuses to write them, and the gates ask.
//!
//! The list is completed at run time by what the person's own git
//! configuration names ([`git_named_paths`]): a `core.hooksPath` or a
//! textconv script inside the project runs at the person's next `git
//! commit` or `git diff` like a hook does. git's answers are remembered
//! per directory while none of the files they depend on changed
//! ([`git_cache`]), so a tool call does not start two git processes per
//! work tree.

use std::path::{Component, Path, PathBuf};

mod git_cache;
pub mod secret_names;
pub use git_cache::{forget_git_reads, GIT_CACHE_ENTRIES, MAX_GIT_CACHE_STAMPS, TRUSTED_AGE};

/// A control-surface entry, relative to the project root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlEntry {
    /// The path relative to the project root, with `/` separators.
    pub path: &'static str,
    /// Whether everything beneath the path belongs to the entry too.
    pub dir: bool,
    /// Why the agent must not change it, as shown to the model and the person.
    pub why: &'static str,
}

/// Every control-surface entry. Directories cover everything beneath them.
pub const CONTROL_SURFACE: &[ControlEntry] = &[
    ControlEntry {
        path: ".passepartout",
        dir: true,
        why: "the agent's own project skills, policy and settings",
    },
    ControlEntry {
        path: ".git",
        dir: false,
        why: "a `.git` file (a linked worktree) points git at the repository, and so at the configuration and hooks, it uses on the host",
    },
    ControlEntry {
        path: ".git/config",
        dir: false,
        why: "git configuration can name programs git runs on the host (core.fsmonitor, core.pager, include.path)",
    },
    ControlEntry {
        path: ".git/hooks",
        dir: true,
        why: "git hooks run on the host at the next commit, checkout or push",
    },
    ControlEntry {
        path: ".git/info",
        dir: true,
        why: "git attributes and excludes can change what git runs and shows on the host",
    },
    ControlEntry {
        path: ".git/config.worktree",
        dir: false,
        why: "per-worktree git configuration is read like .git/config",
    },
    ControlEntry {
        path: ".git/commondir",
        dir: false,
        why: "a commondir file makes git read its configuration and hooks from another directory",
    },
    ControlEntry {
        path: ".git/worktrees",
        dir: true,
        why: "linked worktrees' metadata (commondir, config.worktree) steers git in those worktrees on the host",
    },
    ControlEntry {
        path: ".git/modules",
        dir: true,
        why: "submodule repositories have their own configuration and hooks that git runs on the host",
    },
    // Git's in-progress state: the person's next `git rebase --continue`,
    // `git cherry-pick --continue`, `git am --continue` or `git commit`
    // acts on it (a rebase todo list holds `exec` lines git runs on the
    // host). `ORIG_HEAD` and `FETCH_HEAD` are left out: every `git pull`,
    // `fetch`, `merge` and `reset` rewrites them, and git only reads them
    // when the person names them.
    ControlEntry {
        path: ".git/rebase-merge",
        dir: true,
        why: "an interrupted rebase's todo list, whose `exec` lines run on the host at the person's next `git rebase --continue`",
    },
    ControlEntry {
        path: ".git/rebase-apply",
        dir: true,
        why: "an interrupted `git am` or rebase, which the person's next `--continue` applies",
    },
    ControlEntry {
        path: ".git/sequencer",
        dir: true,
        why: "an interrupted cherry-pick or revert's todo list, which the person's next `--continue` carries out",
    },
    ControlEntry {
        path: ".git/MERGE_HEAD",
        dir: false,
        why: "a merge in progress: the person's next `git commit` records these commits as parents",
    },
    ControlEntry {
        path: ".git/MERGE_MSG",
        dir: false,
        why: "a merge in progress: the message of the person's next `git commit`",
    },
    ControlEntry {
        path: ".git/MERGE_MODE",
        dir: false,
        why: "a merge in progress: how the person's next `git commit` records it",
    },
    ControlEntry {
        path: ".git/CHERRY_PICK_HEAD",
        dir: false,
        why: "a cherry-pick in progress, which the person's next `git commit` completes",
    },
    ControlEntry {
        path: ".git/REVERT_HEAD",
        dir: false,
        why: "a revert in progress, which the person's next `git commit` completes",
    },
    ControlEntry {
        path: ".gitmodules",
        dir: false,
        why: "submodule URLs and update commands are run by git on the host",
    },
    ControlEntry {
        path: ".envrc",
        dir: false,
        why: "direnv runs it in the person's shell",
    },
    ControlEntry {
        path: ".vscode",
        dir: true,
        why: "editor tasks and settings run commands on the host",
    },
    ControlEntry {
        path: ".dir-locals.el",
        dir: false,
        why: "Emacs evaluates directory-local variables in the person's editor",
    },
    ControlEntry {
        path: ".dir-locals-2.el",
        dir: false,
        why: "Emacs evaluates directory-local variables in the person's editor",
    },
    // A project that is (or holds) a home directory: the person's shell
    // and tools read these at their next start, outside any sandbox.
    ControlEntry {
        path: ".bashrc",
        dir: false,
        why: "bash runs it in the person's next interactive shell",
    },
    ControlEntry {
        path: ".bash_profile",
        dir: false,
        why: "bash runs it in the person's next login shell",
    },
    ControlEntry {
        path: ".bash_login",
        dir: false,
        why: "bash runs it in the person's next login shell",
    },
    ControlEntry {
        path: ".bash_logout",
        dir: false,
        why: "bash runs it when the person's login shell exits",
    },
    ControlEntry {
        path: ".profile",
        dir: false,
        why: "login shells run it at the person's next login",
    },
    ControlEntry {
        path: ".zshenv",
        dir: false,
        why: "zsh runs it in every shell the person starts",
    },
    ControlEntry {
        path: ".zprofile",
        dir: false,
        why: "zsh runs it in the person's next login shell",
    },
    ControlEntry {
        path: ".zshrc",
        dir: false,
        why: "zsh runs it in the person's next interactive shell",
    },
    ControlEntry {
        path: ".zlogin",
        dir: false,
        why: "zsh runs it in the person's next login shell",
    },
    ControlEntry {
        path: ".ssh",
        dir: true,
        why: "SSH keys, authorized_keys and client configuration (ProxyCommand runs programs)",
    },
    ControlEntry {
        path: ".gitconfig",
        dir: false,
        why: "the person's git configuration can name programs git runs on the host",
    },
];

/// Whether `name` is the first component of a control-surface entry: a
/// directory whose listing holds one may hold a nested control path.
pub fn starts_an_entry(name: &str) -> bool {
    CONTROL_SURFACE
        .iter()
        .any(|e| e.path.split('/').next() == Some(name))
}

/// The control-surface entry a path falls under, if any. `rel` is relative
/// to the project root; `.` components are ignored, and a path that climbs
/// out with `..` is never matched here (confinement is another layer's job).
///
/// Entries count at any depth: `docs/.git/config` (a nested or vendored
/// repository), `sub/.envrc` and `sub/.dir-locals.el` steer the host as
/// much as their top-level twins.
pub fn control_entry(rel: &Path) -> Option<&'static ControlEntry> {
    let parts: Vec<&str> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    if rel.components().any(|c| matches!(c, Component::ParentDir)) {
        return None;
    }
    (0..parts.len()).find_map(|start| {
        let parts = &parts[start..];
        CONTROL_SURFACE.iter().find(|entry| {
            let want: Vec<&str> = entry.path.split('/').collect();
            if entry.dir {
                parts.len() >= want.len() && parts[..want.len()] == want[..]
            } else {
                parts == want
            }
        })
    })
}

/// Whether other entries live beneath `entry` (`.git` holds `.git/config`,
/// `.git/hooks`, ...). Such an entry is only control surface when it is not
/// a directory: a `.git` *file* redirects git, a `.git` directory is the
/// repository, whose dangerous parts are entries of their own.
pub fn is_container(entry: &ControlEntry) -> bool {
    CONTROL_SURFACE.iter().any(|other| {
        other.path.len() > entry.path.len()
            && other.path.starts_with(entry.path)
            && other.path.as_bytes()[entry.path.len()] == b'/'
    })
}

/// The control-surface entry for an absolute (or cwd-relative) path inside
/// the project rooted at `root`.
pub fn control_entry_in(root: &Path, path: &Path) -> Option<&'static ControlEntry> {
    let rel = if path.is_absolute() {
        path.strip_prefix(root).ok()?
    } else {
        path
    };
    control_entry(rel)
}

/// One of the daemon's own directories on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPath {
    /// Absolute, as configured (and canonicalized when it exists).
    pub path: PathBuf,
    /// What it holds, as shown to the model and the person.
    pub why: &'static str,
    /// Not even read by the agent's tools: it may hold API keys (the
    /// configuration) or the person's history (sessions, audit).
    pub private: bool,
    /// It steers the daemon (configuration, user skills, the trust store in
    /// the state): no sandboxed run may have its working directory inside.
    pub steers: bool,
}

/// The daemon's own directories, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDirs {
    pub config: PathBuf,
    pub user_skills: PathBuf,
    /// Plans, audit, sessions, checkpoints, trust store.
    pub state: PathBuf,
    pub memex: PathBuf,
}

/// The daemon's own directories as host paths, each with why it is
/// protected.
pub fn host_paths_of(dirs: &HostDirs) -> Vec<HostPath> {
    let mut out: Vec<HostPath> = Vec::new();
    let mut add = |path: PathBuf, why: &'static str, private: bool, steers: bool| {
        let path = path.canonicalize().unwrap_or(path);
        if path.is_absolute() && !out.iter().any(|h| h.path == path) {
            out.push(HostPath {
                path,
                why,
                private,
                steers,
            });
        }
    };
    add(
        dirs.config.clone(),
        "the agent's own configuration and policy",
        true,
        true,
    );
    add(
        dirs.user_skills.clone(),
        "the agent's own user skills",
        false,
        true,
    );
    add(
        dirs.state.clone(),
        "the agent's own state: flight plans, audit log, sessions, checkpoints and the trust store",
        true,
        true,
    );
    add(dirs.memex.clone(), "the agent's memex notes", false, false);
    out
}

/// The host path that steers the daemon and holds the directory `dir`
/// (canonical), if any: a session there would have the daemon's own
/// configuration, skills or trust store in its writable bind, with no
/// parent left to hide them in, so its runs are refused.
pub fn steering_host_path_around(dir: &Path, hosts: &[HostPath]) -> Option<HostPath> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    hosts
        .iter()
        .find(|h| h.steers && dir.starts_with(&h.path))
        .cloned()
}

/// The host paths an absolute path falls under. The path is compared as
/// given and, when it exists (or its parent does), canonically, so
/// `~/./.config/x` or a symlinked home do not slip past.
fn covering<'a>(path: &Path, hosts: &'a [HostPath]) -> impl Iterator<Item = &'a HostPath> {
    let canonical = path.canonicalize().ok().or_else(|| {
        let parent = path.parent()?.canonicalize().ok()?;
        Some(parent.join(path.file_name()?))
    });
    let lexical = crate::util::path::normalize(path);
    hosts.iter().filter(move |h| {
        lexical.starts_with(&h.path) || canonical.as_ref().is_some_and(|c| c.starts_with(&h.path))
    })
}

/// The host path an absolute path falls under, if any (see [`covering`]).
pub fn host_entry(path: &Path, hosts: &[HostPath]) -> Option<HostPath> {
    covering(path, hosts).next().cloned()
}

/// The private host path `path` falls under, if any: the most specific
/// host path containing it decides (the user skills inside the config
/// directory may be read; the configuration beside them may not).
pub fn private_entry(path: &Path, hosts: &[HostPath]) -> Option<HostPath> {
    covering(path, hosts)
        .max_by_key(|h| h.path.components().count())
        .filter(|h| h.private)
        .cloned()
}

/// The host paths inside any of `binds` (the sandbox's writable binds):
/// those to hide over them. Only the outermost of nested ones (the user
/// skills inside the config directory): hiding the outer one hides both,
/// and nothing can be mounted inside a read-only tmpfs.
pub fn host_paths_within(binds: &[PathBuf], hosts: &[HostPath]) -> Vec<HostPath> {
    let inside: Vec<HostPath> = hosts
        .iter()
        .filter(|h| {
            binds.iter().any(|b| {
                let b = b.canonicalize().unwrap_or_else(|_| b.clone());
                h.path.starts_with(&b)
            })
        })
        .cloned()
        .collect();
    inside
        .iter()
        .filter(|h| {
            !inside
                .iter()
                .any(|outer| outer.path != h.path && h.path.starts_with(&outer.path))
        })
        .cloned()
        .collect()
}

/// The person's git settings that name programs git runs or files git
/// reads as configuration, by canonical (lower-case) key: `core.hooksPath`,
/// the diff, merge and filter drivers, `core.fsmonitor`, `core.sshCommand`,
/// `gpg.program`, pagers and editors, `!` aliases, includes. When one of
/// them points into the project, the file it names steers the person's next
/// `git commit` or `git diff` as much as `.git/hooks` does.
pub const GIT_PROGRAM_KEYS: &str = "^(core\\.(hookspath|fsmonitor|sshcommand|pager|editor|askpass|gitproxy|attributesfile|worktree)\
|diff\\..*\\.(textconv|command)|diff\\.external|filter\\..*\\.(clean|smudge|process)|merge\\..*\\.driver\
|gpg\\.(.*\\.)?program|include\\.path|includeif\\..*\\.path|sequence\\.editor|credential\\.(.*\\.)?helper\
|alias\\..*|pager\\..*|interactive\\.difffilter|init\\.templatedir|(diff|merge)tool\\..*\\.(cmd|path)\
|sendemail\\.(smtpserver|tocmd|cccmd)|web\\.browser|browser\\..*\\.(cmd|path)|uploadpack\\.packobjectshook)$";

/// Keys whose whole value is one path (not a command line).
fn is_path_key(key: &str) -> bool {
    matches!(
        key,
        "core.hookspath"
            | "include.path"
            | "core.attributesfile"
            | "core.worktree"
            | "init.templatedir"
    ) || (key.starts_with("includeif.") && key.ends_with(".path"))
}

/// Values that switch a built-in on or off rather than naming a program.
fn is_switch(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    )
}

/// A file or directory in the project that one of the person's git
/// settings names: git runs it (or reads it as configuration) on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitNamed {
    /// Absolute, inside the project (lexically normalised; it may not exist).
    pub path: PathBuf,
    /// The setting, as git spells it canonically (`diff.py.textconv`).
    pub key: String,
    /// Where the setting comes from (`file:/home/ada/.gitconfig`).
    pub origin: String,
}

impl GitNamed {
    /// Why the path is control surface, for the model and the person.
    pub fn why(&self) -> String {
        format!(
            "the person's git setting `{}` ({}) names it: git runs or reads it on the host",
            self.key, self.origin
        )
    }
}

/// How long one `git config` read may take before it is given up (a
/// configuration file could be a FIFO nobody writes).
pub const GIT_CONFIG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Bytes of `git config` output read at most.
pub const MAX_GIT_CONFIG_OUTPUT: usize = 1 << 20;

/// The settings matching `regex` that `git config` sees in `dir` (the
/// system, global and repository configuration, includes followed), as
/// `(origin, key, value)`. Empty when git is missing, the directory is no
/// repository and no global setting matches, or git does not answer within
/// [`GIT_CONFIG_TIMEOUT`] (logged).
pub fn git_config_entries(
    dir: &Path,
    extra: &[&str],
    regex: &str,
) -> Vec<(String, String, String)> {
    git_config_entries_in_time(dir, extra, regex).unwrap_or_default()
}

/// [`git_config_entries`], `None` when git did not answer in time.
fn git_config_entries_in_time(
    dir: &Path,
    extra: &[&str],
    regex: &str,
) -> Option<Vec<(String, String, String)>> {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("-C").arg(dir).arg("config");
    cmd.args(extra);
    cmd.args(["--show-origin", "--null", "--get-regexp", regex]);
    let Some(out) = run_git_bounded(cmd) else {
        tracing::warn!(
            dir = %dir.display(),
            "git config did not answer within {GIT_CONFIG_TIMEOUT:?}: the person's git \
             settings that point into the project are not protected for this run"
        );
        return None;
    };
    let text = String::from_utf8_lossy(&out);
    let mut fields = text.split('\0');
    let mut entries = Vec::new();
    while let (Some(origin), Some(kv)) = (fields.next(), fields.next()) {
        let (key, value) = kv.split_once('\n').unwrap_or((kv, ""));
        if !key.is_empty() {
            entries.push((origin.to_string(), key.to_string(), value.to_string()));
        }
    }
    Some(entries)
}

/// Run a git command with no input, its output read up to
/// [`MAX_GIT_CONFIG_OUTPUT`] bytes and its run bounded by
/// [`GIT_CONFIG_TIMEOUT`] (a configuration file could be a FIFO nobody
/// writes). `None` when it takes too long (it is killed); its output,
/// whatever its exit status, otherwise (empty when git cannot start).
fn run_git_bounded(mut cmd: std::process::Command) -> Option<Vec<u8>> {
    use std::io::Read;
    // What the person's git would see, minus variables that point git at
    // another repository than the directory's own.
    for var in ["GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CONFIG"] {
        cmd.env_remove(var);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return Some(Vec::new());
    };
    let Some(mut stdout) = child.stdout.take() else {
        return Some(Vec::new());
    };
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stdout)
            .take(MAX_GIT_CONFIG_OUTPUT as u64)
            .read_to_end(&mut buf);
        buf
    });
    let deadline = std::time::Instant::now() + GIT_CONFIG_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    Some(reader.join().unwrap_or_default())
}

/// The words of a command line a git setting holds, split at blanks,
/// quotes and shell operators: enough to find the paths in it, also inside
/// `sh -c '...'` (not a shell parser; it may over-split, which only
/// protects more).
fn command_words(value: &str) -> Vec<String> {
    value
        .split(|c: char| c.is_whitespace() || ";|&()<>`$'\"".contains(c))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The paths a git setting's value names, unresolved: the whole value for
/// a path key; for a command line, every word that is a path or a file
/// name (the program or an argument), and for `-m MODULE` the module's file
/// and package (the interpreter imports it from the directory git runs it
/// in, the top of the work tree).
fn named_words(key: &str, value: &str) -> Vec<String> {
    let value = value.trim();
    if is_switch(value) {
        return Vec::new();
    }
    if is_path_key(key) {
        return vec![value.to_string()];
    }
    let value = if key.starts_with("alias.") {
        match value.strip_prefix('!') {
            Some(shell) => shell,
            None => return Vec::new(), // a git subcommand, no program
        }
    } else {
        value
    };
    let words = command_words(value);
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if w == "-m" {
            if let Some(module) = it.next() {
                let file = module.replace('.', "/");
                out.push(format!("{file}.py"));
                out.push(file);
            }
            continue;
        }
        // A word names a file when it is a path (`./x`, `tools/x`, `~/x`)
        // or a file name with an extension (`conv.py`); bare words are
        // programs from PATH or arguments like `log` that only happen to
        // match a folder's name.
        let pathlike = w.contains('/') || w.starts_with('~');
        let file_name = w
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && !ext.is_empty());
        if w.starts_with('-') || w.starts_with('%') || w.contains('=') || w.contains(':') {
            continue;
        }
        if pathlike || file_name {
            out.push(w.clone());
        }
    }
    out
}

/// The files and directories inside the project rooted at `root` that the
/// person's git settings (as `git config` sees them there) name: see
/// [`GIT_PROGRAM_KEYS`]. Relative paths are resolved as git resolves them
/// ([`git_base`]): from the top of the work tree, also when the session's
/// directory is a folder deeper down (`core.hooksPath = sub/hooks` set in
/// `proj` names `proj/sub/hooks`, which a session in `proj/sub` can write),
/// includes from the file that holds them. Only what lies inside `root`
/// is returned: nothing else is writable in the sandbox.
///
/// git's answers are remembered while no file they depend on changed (see
/// [`git_cache`]); where the paths really lie is judged anew every time.
pub fn git_named_paths(root: &Path, home: &Path) -> Vec<GitNamed> {
    let settings = git_cache::git_settings(root);
    let base = settings.layout.base().unwrap_or_else(|| root.to_path_buf());
    git_named_in(root, &base, home, settings.entries)
}

/// Where a directory's repository lies, as `git rev-parse` tells it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RepoLayout {
    bare: bool,
    /// The repository's git directory (absolute).
    git_dir: Option<PathBuf>,
    /// Where its shared configuration lives (a linked worktree's
    /// repository; else the git directory).
    common_dir: Option<PathBuf>,
    /// The top of the work tree, when there is one.
    top: Option<PathBuf>,
}

impl RepoLayout {
    /// See [`git_base`].
    fn base(&self) -> Option<PathBuf> {
        let found = if self.bare { &self.git_dir } else { &self.top };
        found.clone().filter(|p| !p.as_os_str().is_empty())
    }
}

/// Ask git where `dir`'s repository lies: `None` when git does not answer
/// within [`GIT_CONFIG_TIMEOUT`], an empty layout when `dir` is in no
/// repository.
fn repo_layout(dir: &Path) -> Option<RepoLayout> {
    let mut cmd = std::process::Command::new("git");
    // One run: in a bare repository the last question fails after the
    // others are answered.
    cmd.arg("-C").arg(dir).args([
        "rev-parse",
        "--is-bare-repository",
        "--absolute-git-dir",
        "--git-common-dir",
        "--show-toplevel",
    ]);
    let out = run_git_bounded(cmd)?;
    let text = String::from_utf8_lossy(&out);
    let mut lines = text.lines();
    let (Some(bare), Some(git_dir), Some(common)) = (lines.next(), lines.next(), lines.next())
    else {
        return Some(RepoLayout::default());
    };
    let bare = bare == "true";
    let path = |p: &str| (!p.is_empty()).then(|| dir.join(p));
    Some(RepoLayout {
        bare,
        git_dir: path(git_dir),
        // Relative to the directory asked (`../../.git`).
        common_dir: path(common),
        top: if bare {
            None
        } else {
            lines.next().and_then(path)
        },
    })
}

/// What git answers in `dir` (its repository's layout and the settings of
/// [`GIT_PROGRAM_KEYS`]), and whether both questions were answered in time.
fn read_git_settings(dir: &Path) -> (git_cache::GitSettings, bool) {
    let layout = repo_layout(dir);
    let entries = git_config_entries_in_time(dir, &[], GIT_PROGRAM_KEYS);
    let complete = layout.is_some() && entries.is_some();
    (
        git_cache::GitSettings {
            layout: layout.unwrap_or_default(),
            entries: entries.unwrap_or_default(),
        },
        complete,
    )
}

/// The directory git resolves `dir`'s relative settings from, and runs
/// hooks and drivers in: the top of the work tree, or the repository
/// itself when it is bare (`git help githooks`). `None` when `dir` is in
/// no repository or git does not answer within [`GIT_CONFIG_TIMEOUT`].
pub fn git_base(dir: &Path) -> Option<PathBuf> {
    repo_layout(dir)?.base()
}

/// [`git_named_paths`] over entries already read: relative paths from
/// `base`, kept when they lie inside `root`.
pub fn git_named_in(
    root: &Path,
    base: &Path,
    home: &Path,
    entries: Vec<(String, String, String)>,
) -> Vec<GitNamed> {
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut out: Vec<GitNamed> = Vec::new();
    for (origin, key, value) in entries {
        // git names the repository's own file relative to where it runs
        // (`file:.git/config`, from the top of the work tree).
        let base = if key == "include.path" || key.starts_with("includeif.") {
            origin
                .strip_prefix("file:")
                .map(|f| base.join(f))
                .and_then(|f| f.parent().map(Path::to_path_buf))
                .unwrap_or_else(|| base.to_path_buf())
        } else {
            base.to_path_buf()
        };
        for word in named_words(&key, &value) {
            let path = if let Some(rest) = word.strip_prefix("~/") {
                home.join(rest)
            } else {
                base.join(&word)
            };
            let path = crate::util::path::normalize(&path);
            // Compare where it really is: a symlinked project directory
            // or a path through `..` must not slip past.
            let real = real_location(&path);
            let inside = |p: &Path| {
                p.strip_prefix(&canonical_root)
                    .is_ok_and(|rel| !rel.as_os_str().is_empty())
            };
            let Some(real) = real.filter(|r| inside(r)) else {
                continue;
            };
            let Ok(rel) = real.strip_prefix(&canonical_root) else {
                continue;
            };
            let path = root.join(rel);
            if !out.iter().any(|n| n.path == path) {
                out.push(GitNamed {
                    path,
                    key: key.clone(),
                    origin: origin.clone(),
                });
            }
        }
    }
    out
}

/// Where a path really is: its canonical form, or for a path that does not
/// exist (yet), the canonical form of its deepest existing ancestor with
/// the rest appended.
fn real_location(path: &Path) -> Option<PathBuf> {
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return Some(rest.iter().rev().fold(real, |p, c| p.join(c)));
        }
        rest.push(at.file_name()?);
        at = at.parent()?;
    }
}

/// Why a repository's own configuration is dangerous, or `None`: a key of
/// [`GIT_PROGRAM_KEYS`] with a value that names a program or a path (a
/// fresh `git init` or `git clone` has none). Read with `git config --file`
/// (includes not followed: an include is itself such a key).
pub fn repository_config_danger(config: &Path) -> Option<String> {
    if std::fs::symlink_metadata(config).is_err() {
        return None;
    }
    let file = config.to_string_lossy();
    let found: Vec<String> = git_config_entries(
        Path::new("/"),
        &["--file", &file, "--no-includes"],
        GIT_PROGRAM_KEYS,
    )
    .into_iter()
    .filter(|(_, key, value)| {
        // A plain alias (`st = status`) runs git itself, not a program.
        let plain_alias = key.starts_with("alias.") && !value.starts_with('!');
        !is_switch(value.trim()) && !plain_alias
    })
    .map(|(_, key, _)| key)
    .collect();
    (!found.is_empty()).then(|| format!("it sets {}", found.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_cover_what_is_beneath_them_and_the_binds_that_contain_them() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        let config = home.join(".config/passepartout");
        std::fs::create_dir_all(&config).unwrap();
        let state = home.join("state");
        let hosts = vec![
            HostPath {
                path: config.clone(),
                why: "config",
                private: true,
                steers: true,
            },
            HostPath {
                path: state.clone(),
                why: "state",
                private: true,
                steers: true,
            },
            HostPath {
                path: config.join("skills"),
                why: "skills",
                private: false,
                steers: true,
            },
        ];
        assert_eq!(
            host_entry(&config.join("config.toml"), &hosts).map(|h| h.why),
            Some("config")
        );
        assert_eq!(
            host_entry(
                &home.join(".config/./passepartout/../passepartout/x"),
                &hosts
            )
            .map(|h| h.why),
            Some("config")
        );
        assert_eq!(host_entry(&home.join(".config/other"), &hosts), None);
        // Reads: the configuration and the state are private, the user
        // skills inside the config directory are not.
        assert_eq!(
            private_entry(&config.join("config.toml"), &hosts).map(|h| h.why),
            Some("config")
        );
        assert_eq!(private_entry(&config.join("skills/mine.org"), &hosts), None);
        assert_eq!(
            private_entry(&state.join("audit.jsonl"), &hosts).map(|h| h.why),
            Some("state")
        );
        assert_eq!(private_entry(&home.join("notes.txt"), &hosts), None);
        let within: Vec<&str> = host_paths_within(std::slice::from_ref(&home), &hosts)
            .iter()
            .map(|h| h.why)
            .collect();
        // The skills directory is hidden with the config directory.
        assert_eq!(within, vec!["config", "state"]);
        assert!(host_paths_within(&[home.join("project")], &hosts).is_empty());
        // A session inside one of them is refused; beside them it is not.
        assert_eq!(
            steering_host_path_around(&config.join("skills"), &hosts).map(|h| h.why),
            Some("config")
        );
        assert_eq!(steering_host_path_around(&home, &hosts), None);
    }

    #[test]
    fn directories_cover_what_is_beneath_them() {
        assert_eq!(
            control_entry(Path::new(".passepartout/skills/shell.org")).map(|e| e.path),
            Some(".passepartout")
        );
        assert_eq!(
            control_entry(Path::new("./.git/hooks/pre-commit")).map(|e| e.path),
            Some(".git/hooks")
        );
        assert_eq!(
            control_entry(Path::new(".git/config")).map(|e| e.path),
            Some(".git/config")
        );
    }

    #[test]
    fn entries_count_at_any_depth() {
        for (p, want) in [
            ("docs/.git/config", ".git/config"),
            ("vendor/lib/.git/hooks/post-checkout", ".git/hooks"),
            ("sub/.envrc", ".envrc"),
            ("a/b/.dir-locals.el", ".dir-locals.el"),
            ("tools/.vscode/tasks.json", ".vscode"),
            (".bashrc", ".bashrc"),
            ("ada/.ssh/authorized_keys", ".ssh"),
        ] {
            assert_eq!(
                control_entry(Path::new(p)).map(|e| e.path),
                Some(want),
                "{p}"
            );
        }
        assert_eq!(control_entry(Path::new("docs/.git/objects/ab")), None);
        assert!(starts_an_entry(".git") && starts_an_entry(".bashrc"));
        assert!(!starts_an_entry("src"));
    }

    #[test]
    fn ordinary_project_files_are_not_control_surface() {
        for p in [
            "src/main.rs",
            ".git/objects/ab/cdef",
            ".git/index",
            ".git/refs/heads/main",
            ".gitignore",
            ".git/config.d",
            "docs/.envrc.md",
            "../.envrc",
            "docs/.git/index",
            "src/bashrc",
        ] {
            assert_eq!(control_entry(Path::new(p)), None, "{p}");
        }
    }

    #[test]
    fn only_git_is_a_container() {
        let containers: Vec<&str> = CONTROL_SURFACE
            .iter()
            .filter(|e| is_container(e))
            .map(|e| e.path)
            .collect();
        assert_eq!(containers, vec![".git"]);
        assert_eq!(
            control_entry(Path::new(".git/commondir")).map(|e| e.path),
            Some(".git/commondir")
        );
        assert_eq!(
            control_entry(Path::new(".git/modules/sub/hooks/post-checkout")).map(|e| e.path),
            Some(".git/modules")
        );
    }

    #[test]
    fn git_settings_name_the_project_files_they_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("tools/conv.py"), "").unwrap();
        let home = Path::new("/home/ada");
        let entry = |key: &str, value: &str| {
            (
                "file:/home/ada/.gitconfig".to_string(),
                key.to_string(),
                value.to_string(),
            )
        };
        let named = git_named_in(
            &root,
            &root,
            home,
            vec![
                entry("core.hookspath", ".husky/_"),
                entry("diff.py.textconv", "python3 tools/conv.py"),
                entry("filter.x.clean", "sh -c './scripts/clean.sh %f'"),
                entry("core.fsmonitor", "true"),
                entry("alias.lg", "log --graph"),
                entry("alias.up", "!git pull && ./bin/post.sh"),
                entry("gpg.program", "/usr/bin/gpg"),
                entry("diff.mine.textconv", "python3 -m tools.show"),
                entry("core.sshcommand", "ssh -i ~/.ssh/key"),
                entry("include.path", "../outside.inc"),
            ],
        );
        let rel: Vec<String> = named
            .iter()
            .map(|n| n.path.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            vec![
                ".husky/_",
                "tools/conv.py",
                "scripts/clean.sh",
                "bin/post.sh",
                "tools/show.py",
                "tools/show",
            ]
        );
        assert!(named[1].why().contains("diff.py.textconv"));
    }

    #[test]
    fn relative_settings_resolve_from_the_top_of_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        let sub = top.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .arg("-C")
                .arg(&top)
                .args(args)
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["config", "core.hooksPath", "sub/hooks"]);
        git(&["config", "diff.x.textconv", "sh hooks/conv.sh"]);
        // An include is relative to the file that holds it (`.git/config`).
        git(&["config", "include.path", "../sub/extra.inc"]);
        assert_eq!(git_base(&sub), Some(top.clone()));
        let named = git_named_paths(&sub, Path::new("/nonexistent-home"));
        let paths: Vec<&Path> = named.iter().map(|n| n.path.as_path()).collect();
        // `sub/hooks` is the session's `hooks`; `hooks/conv.sh` lies above
        // the session (not writable there), so it is not returned.
        assert_eq!(
            paths,
            vec![sub.join("hooks").as_path(), sub.join("extra.inc").as_path()],
            "{named:?}"
        );
        let bare = top.join("b.git");
        git(&["init", "-q", "--bare", "b.git"]);
        assert_eq!(git_base(&bare), Some(bare.clone()));
        assert_eq!(git_base(Path::new("/")), None);
    }

    #[test]
    fn a_fresh_repository_config_is_harmless_and_program_keys_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfilemode = true\n             [remote \"origin\"]\n\turl = https://example.org/r.git\n[alias]\n\tst = status\n",
        )
        .unwrap();
        assert_eq!(repository_config_danger(&config), None);
        std::fs::write(&config, "[core]\n\tfsmonitor = ./x.sh\n").unwrap();
        let danger = repository_config_danger(&config);
        assert!(
            danger
                .as_deref()
                .is_some_and(|d| d.contains("core.fsmonitor")),
            "{danger:?}"
        );
        assert_eq!(repository_config_danger(&dir.path().join("none")), None);
    }

    #[test]
    fn absolute_paths_are_judged_relative_to_the_root() {
        let root = Path::new("/home/u/proj");
        assert!(control_entry_in(root, Path::new("/home/u/proj/.envrc")).is_some());
        assert!(control_entry_in(root, Path::new("/home/u/other/.envrc")).is_none());
    }
}
