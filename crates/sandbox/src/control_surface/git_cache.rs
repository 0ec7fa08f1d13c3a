//! The person's git settings for a directory, read once and then reused
//! while nothing they depend on changed.
//!
//! Every shell call snapshots the control surface, and part of it is what
//! `git rev-parse` and `git config` answer in the project and in each
//! nested repository (see [`super::git_named_paths`]): two processes per
//! work tree, once most of a tool call's cost over a bare `bwrap`
//! (`examples/bench_sandbox`). Their answers depend only on files, on the
//! environment and on the repository's layout, so an answer is kept with a
//! *stamp* (kind, device, inode, owner, size, modification and
//! status-change time) of every path it depends on:
//!
//! - for the repository discovery, each ancestor of the directory (its
//!   canonical form, up to `/`) and in each `.git`, `HEAD`, `objects`,
//!   `refs` and `commondir` (git's test for a repository, and a bare one);
//! - for the repository found, its git directory and common directory with
//!   their `HEAD`, `config`, `config.worktree` and `commondir`;
//! - the system and global configuration files wherever git looks for them
//!   (`git var GIT_CONFIG_SYSTEM` / `GIT_CONFIG_GLOBAL`, plus the usual
//!   places and the `GIT_CONFIG_*` variables), whether they exist or not;
//! - every file the answer names as an origin, and every file an include
//!   names (also one whose settings did not match, and one whose
//!   condition was false).
//!
//! Paths that do not exist are stamped as absent, so creating one (a first
//! `~/.gitconfig`, a `.git` in a parent) is a change too. The environment
//! git sees (every `GIT_*` variable, `HOME`, `XDG_CONFIG_HOME`, `PATH`) is
//! part of the key.
//!
//! The stamps are taken *before* git runs, so a change while git reads
//! moves a stamp. A path whose modification or status-change time lies
//! within [`TRUSTED_AGE`] of the stamp is not trusted (the kernel's clock
//! for these times is coarse: a second change in the same tick could leave
//! them where they were), and the answer is not kept. Paths an answer
//! names that were not stamped before git ran (an include seen for the
//! first time) are stamped before the next read, whose answer is kept.
//! Whatever cannot be stamped (an include relative to a command-line
//! setting, `%(prefix)/`, `~user/`) makes the answer uncacheable: git is
//! asked every time, as before.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Directories whose git answers are remembered (the most recently asked).
pub const GIT_CACHE_ENTRIES: usize = 128;

/// Paths stamped for one answer at most; an answer that depends on more
/// (a chain of includes, a very deep directory) is not kept.
pub const MAX_GIT_CACHE_STAMPS: usize = 512;

/// How much older than its stamp a file's modification and status-change
/// time must be for a remembered answer to rely on it (a clock tick is at
/// most 10 ms; one second leaves room for a clock that was just set back a
/// little). The walk cache of the sandbox's surface uses the same rule.
pub const TRUSTED_AGE: Duration = Duration::from_secs(1);

/// What git answers about a directory: where it resolves relative settings
/// from, and the settings matching [`super::GIT_PROGRAM_KEYS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GitSettings {
    pub(super) layout: super::RepoLayout,
    pub(super) entries: Vec<(String, String, String)>,
}

/// What a path was when an answer was read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stamp {
    Absent,
    /// A directory: only what it is counts (what lies in it that matters
    /// is stamped on its own; its times move with every file git writes).
    Dir {
        dev: u64,
        ino: u64,
        uid: u32,
    },
    /// Anything else, with its times; a symlink also with what it points to.
    File {
        dev: u64,
        ino: u64,
        mode: u32,
        uid: u32,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
        target: Option<Box<Stamp>>,
    },
}

impl Stamp {
    fn of(path: &Path) -> Stamp {
        match std::fs::symlink_metadata(path) {
            Err(_) => Stamp::Absent,
            Ok(meta) => {
                let target = meta
                    .file_type()
                    .is_symlink()
                    .then(|| Box::new(Stamp::followed(path)));
                Stamp::from_meta(&meta, target)
            }
        }
    }

    fn followed(path: &Path) -> Stamp {
        match std::fs::metadata(path) {
            Err(_) => Stamp::Absent,
            Ok(meta) => Stamp::from_meta(&meta, None),
        }
    }

    fn from_meta(meta: &std::fs::Metadata, target: Option<Box<Stamp>>) -> Stamp {
        if meta.is_dir() {
            return Stamp::Dir {
                dev: meta.dev(),
                ino: meta.ino(),
                uid: meta.uid(),
            };
        }
        Stamp::File {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            uid: meta.uid(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            target,
        }
    }

    /// Whether a change after `taken` is sure to move this stamp.
    fn trusted(&self, taken: SystemTime) -> bool {
        match self {
            Stamp::Absent | Stamp::Dir { .. } => true,
            Stamp::File {
                mtime,
                ctime,
                target,
                ..
            } => {
                let old = |(secs, nanos): (i64, i64)| {
                    let at = UNIX_EPOCH
                        + Duration::new(
                            u64::try_from(secs).unwrap_or(u64::MAX / 2),
                            u32::try_from(nanos).unwrap_or(0),
                        );
                    at + TRUSTED_AGE < taken
                };
                old(*mtime) && old(*ctime) && target.as_ref().is_none_or(|t| t.trusted(taken))
            }
        }
    }
}

/// The environment git sees, as far as it changes git's answers.
type EnvPrint = Vec<(OsString, OsString)>;

fn env_print() -> EnvPrint {
    let mut vars: EnvPrint = std::env::vars_os()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            name.starts_with("GIT_")
                || matches!(
                    name.as_ref(),
                    "HOME" | "XDG_CONFIG_HOME" | "PATH" | "PREFIX"
                )
        })
        .collect();
    vars.sort();
    vars
}

/// One remembered answer.
struct Entry {
    dir: PathBuf,
    env: Arc<EnvPrint>,
    canonical: PathBuf,
    /// Every path the answer depends on, as it was before git ran.
    stamps: Vec<(PathBuf, Stamp)>,
    /// Whether the stamps cover the answer (else they only say what to
    /// stamp before the next read).
    valid: bool,
    settings: GitSettings,
}

fn cache() -> &'static Mutex<VecDeque<Entry>> {
    static CACHE: OnceLock<Mutex<VecDeque<Entry>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Where git looks for the system and global configuration, by
/// environment: asked of git once (`git var`), with the usual places
/// added. None when git does not say (too old, or missing): nothing is
/// remembered then.
fn config_files(env: &Arc<EnvPrint>) -> Option<Arc<Vec<PathBuf>>> {
    type Known = Option<(Arc<EnvPrint>, Option<Arc<Vec<PathBuf>>>)>;
    static KNOWN: Mutex<Known> = Mutex::new(None);
    if let Ok(known) = KNOWN.lock() {
        if let Some((for_env, files)) = known.as_ref() {
            if for_env == env {
                return files.clone();
            }
        }
    }
    let files = ask_config_files().map(Arc::new);
    if let Ok(mut known) = KNOWN.lock() {
        *known = Some((env.clone(), files.clone()));
    }
    files
}

fn ask_config_files() -> Option<Vec<PathBuf>> {
    let var = |name: &str| -> Option<Vec<PathBuf>> {
        let mut cmd = std::process::Command::new("git");
        cmd.args(["var", name]);
        let out = super::run_git_bounded(cmd)?;
        Some(
            String::from_utf8_lossy(&out)
                .lines()
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .collect(),
        )
    };
    let global = var("GIT_CONFIG_GLOBAL")?;
    if global.is_empty() {
        return None; // git too old to say, or not there
    }
    // Empty when GIT_CONFIG_NOSYSTEM is set: git reads no system file.
    let system = var("GIT_CONFIG_SYSTEM")?;
    if system.is_empty() && std::env::var_os("GIT_CONFIG_NOSYSTEM").is_none() {
        return None;
    }
    let mut files = global;
    files.extend(system);
    let home = crate::paths::home_dir();
    files.push(PathBuf::from("/etc/gitconfig"));
    files.push(home.join(".gitconfig"));
    files.push(home.join(".config/git/config"));
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME") {
        files.push(PathBuf::from(xdg).join("git/config"));
    }
    for name in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        if let Some(p) = std::env::var_os(name) {
            files.push(PathBuf::from(p));
        }
    }
    files.retain(|f| f.is_absolute());
    files.sort();
    files.dedup();
    Some(files)
}

/// The paths git's repository discovery from `canonical` looks at.
fn discovery_paths(canonical: &Path, out: &mut Vec<PathBuf>) {
    for dir in canonical.ancestors() {
        out.push(dir.to_path_buf());
        for name in [".git", "HEAD", "objects", "refs", "commondir"] {
            out.push(dir.join(name));
        }
    }
}

/// The paths of the repository found that its answers depend on.
fn repository_paths(layout: &super::RepoLayout, out: &mut Vec<PathBuf>) {
    for dir in [&layout.git_dir, &layout.common_dir].into_iter().flatten() {
        out.push(dir.clone());
        for name in ["HEAD", "config", "config.worktree", "commondir"] {
            out.push(dir.join(name));
        }
    }
}

/// The files the answer's settings came from and the files its includes
/// name; None when one cannot be stamped.
fn named_files(dir: &Path, settings: &GitSettings, out: &mut Vec<PathBuf>) -> Option<()> {
    let layout = &settings.layout;
    // git prints the repository's own files relative to where it runs: the
    // top of the work tree, the git directory or the directory asked.
    let bases: Vec<&Path> = [Some(dir), layout.top.as_deref(), layout.git_dir.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let home = crate::paths::home_dir();
    for (origin, key, value) in &settings.entries {
        let origins: Vec<PathBuf> = match origin.strip_prefix("file:") {
            Some(file) if Path::new(file).is_absolute() => vec![PathBuf::from(file)],
            Some(file) => bases.iter().map(|b| b.join(file)).collect(),
            None => Vec::new(),
        };
        out.extend(origins.iter().cloned());
        let include =
            key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
        if !include {
            continue;
        }
        let value = value.trim();
        if let Some(rest) = value.strip_prefix("~/") {
            out.push(home.join(rest));
        } else if Path::new(value).is_absolute() {
            out.push(PathBuf::from(value));
        } else if value.starts_with('~') || value.starts_with("%(") || origins.is_empty() {
            return None;
        } else {
            for o in &origins {
                out.push(o.parent()?.join(value));
            }
        }
    }
    Some(())
}

/// Forget every remembered answer (for measurements and tests).
pub fn forget_git_reads() {
    if let Ok(mut cache) = cache().lock() {
        cache.clear();
    }
}

/// What git answers about `dir` ([`super::read_git_settings`]), from the
/// cache while nothing it depends on changed.
pub(super) fn git_settings(dir: &Path) -> GitSettings {
    let env = Arc::new(env_print());
    let (Some(globals), Ok(canonical)) = (config_files(&env), dir.canonicalize()) else {
        return super::read_git_settings(dir).0;
    };
    let mut hint: Vec<PathBuf> = Vec::new();
    if let Ok(mut cache) = cache().lock() {
        if let Some(at) = cache
            .iter()
            .position(|e| e.dir == dir && e.env == env && e.canonical == canonical)
        {
            let fresh = cache[at].valid
                && cache[at]
                    .stamps
                    .iter()
                    .all(|(path, stamp)| Stamp::of(path) == *stamp);
            if fresh {
                let settings = cache[at].settings.clone();
                if let Some(entry) = cache.remove(at) {
                    cache.push_front(entry);
                }
                return settings;
            }
            hint = cache[at].stamps.iter().map(|(p, _)| p.clone()).collect();
        }
    }
    let mut before = Vec::new();
    discovery_paths(&canonical, &mut before);
    before.extend(globals.iter().cloned());
    before.extend(hint);
    let taken = SystemTime::now();
    let stamped: HashMap<PathBuf, Stamp> = before
        .into_iter()
        .map(|p| {
            let s = Stamp::of(&p);
            (p, s)
        })
        .collect();
    let (settings, complete) = super::read_git_settings(dir);
    #[cfg(test)]
    tests::READS.with(|n| n.set(n.get() + 1));

    let mut needed = Vec::new();
    discovery_paths(&canonical, &mut needed);
    needed.extend(globals.iter().cloned());
    repository_paths(&settings.layout, &mut needed);
    let nameable = named_files(dir, &settings, &mut needed).is_some();
    // Not normalised: `.git/../x` is where the OS finds it (through a
    // symlinked `.git`), not where a lexical `..` would.
    needed.sort();
    needed.dedup();
    let mut valid = complete && nameable && needed.len() <= MAX_GIT_CACHE_STAMPS;
    let mut stamps = Vec::with_capacity(needed.len());
    for path in needed.into_iter().take(MAX_GIT_CACHE_STAMPS) {
        let stamp = match stamped.get(&path) {
            Some(s) => {
                valid &= s.trusted(taken);
                s.clone()
            }
            None => {
                valid = false; // stamped before the next read
                Stamp::Absent
            }
        };
        stamps.push((path, stamp));
    }
    if let Ok(mut cache) = cache().lock() {
        cache.retain(|e| e.dir != dir);
        cache.push_front(Entry {
            dir: dir.to_path_buf(),
            env,
            canonical,
            stamps,
            valid,
            settings: settings.clone(),
        });
        cache.truncate(GIT_CACHE_ENTRIES);
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// git reads by this thread (each test runs on its own).
        pub(super) static READS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn reads() -> u64 {
        READS.with(std::cell::Cell::get)
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// Let every file written so far fall out of the distrusted tick.
    fn age() {
        std::thread::sleep(TRUSTED_AGE + Duration::from_millis(100));
    }

    #[test]
    fn a_changed_or_new_setting_file_is_read_again_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("extra.inc"), "[user]\n\tname = ada\n").unwrap();
        // One include that exists, one that does not yet (relative to
        // `.git/config`, which holds them).
        git(&root, &["config", "--add", "include.path", "../extra.inc"]);
        git(&root, &["config", "--add", "include.path", "../later.inc"]);
        let named = |root: &Path| -> Vec<PathBuf> {
            super::super::git_named_paths(root, Path::new("/nonexistent-home"))
                .into_iter()
                .map(|n| n.path)
                .collect()
        };
        let warm = |root: &Path| {
            age();
            // A first read learns which files to stamp (unless an earlier
            // answer told), the next one is kept, then the cache answers.
            let first = named(root);
            let _ = named(root);
            let settled = reads();
            assert_eq!(named(root), first);
            assert_eq!(named(root), first);
            assert_eq!(reads(), settled, "the answer is reused");
        };

        warm(&root);
        git(&root, &["config", "core.hooksPath", "hooks-a"]);
        assert!(
            named(&root).contains(&root.join("hooks-a")),
            "the repository's config changed"
        );

        warm(&root);
        std::fs::write(root.join("extra.inc"), "[core]\n\thooksPath = hooks-b\n").unwrap();
        assert!(
            named(&root).contains(&root.join("hooks-b")),
            "an included file changed"
        );

        warm(&root);
        std::fs::write(
            root.join("later.inc"),
            "[diff \"x\"]\n\ttextconv = tools/c.sh\n",
        )
        .unwrap();
        assert!(
            named(&root).contains(&root.join("tools/c.sh")),
            "an included file appeared"
        );

        // A repository made in a folder of the project after its answer
        // was kept: the folder's own answer is its repository's.
        let sub = root.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        warm(&sub);
        git(&sub, &["init", "-q"]);
        git(&sub, &["config", "core.hooksPath", "mine"]);
        let in_sub = named(&sub);
        assert!(in_sub.contains(&sub.join("mine")), "{in_sub:?}");
        assert!(!in_sub.contains(&root.join("hooks-a")), "{in_sub:?}");
    }

    #[test]
    fn a_just_written_file_is_not_relied_on() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        git(&root, &["init", "-q"]);
        let before = reads();
        for _ in 0..3 {
            let _ = git_settings(&root);
        }
        // `.git/config` is younger than a trusted tick: read every time.
        assert_eq!(reads(), before + 3);
    }

    #[test]
    fn a_stamp_sees_creation_change_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        let absent = Stamp::of(&file);
        assert_eq!(absent, Stamp::Absent);
        std::fs::write(&file, "[core]\n").unwrap();
        let first = Stamp::of(&file);
        assert_ne!(first, absent);
        std::fs::write(&file, "[core]\n\thooksPath = h\n").unwrap();
        assert_ne!(Stamp::of(&file), first, "a longer file");
        let second = Stamp::of(&file);
        let tmp = dir.path().join("config.new");
        std::fs::write(&tmp, "[core]\n\thooksPath = x\n").unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert_ne!(Stamp::of(&file), second, "replaced by a rename");
        // Just written: not trusted until a clock tick surely passed.
        assert!(!Stamp::of(&file).trusted(SystemTime::now()));
        assert!(Stamp::of(&file).trusted(SystemTime::now() + 2 * TRUSTED_AGE));
    }

    #[test]
    fn a_symlink_is_stamped_with_what_it_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "a").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let before = Stamp::of(&link);
        std::fs::write(&real, "ab").unwrap();
        assert_ne!(Stamp::of(&link), before);
    }

    #[test]
    fn includes_relative_to_a_command_line_setting_cannot_be_stamped() {
        let settings = GitSettings {
            layout: Default::default(),
            entries: vec![(
                "command line:".into(),
                "include.path".into(),
                "rel.inc".into(),
            )],
        };
        let mut out = Vec::new();
        assert!(named_files(Path::new("/p"), &settings, &mut out).is_none());
        let settings = GitSettings {
            layout: Default::default(),
            entries: vec![(
                "file:/home/ada/.gitconfig".into(),
                "include.path".into(),
                "more/x.inc".into(),
            )],
        };
        let mut out = Vec::new();
        assert!(named_files(Path::new("/p"), &settings, &mut out).is_some());
        assert!(
            out.contains(&PathBuf::from("/home/ada/more/x.inc")),
            "{out:?}"
        );
    }
}
