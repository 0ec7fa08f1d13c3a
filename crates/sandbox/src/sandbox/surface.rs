//! The project's control surface as the sandbox sees it: which paths of
//! [`crate::control_surface`] exist before a run (and so can be mounted
//! read-only), and what to undo after the run for those that did not.
//!
//! The kernel does the work for paths that exist: each is bound read-only
//! over the writable working directory, and every directory between the
//! working directory and it is bound onto itself ("pinned"). A mount point
//! cannot be renamed or removed (`EBUSY`), so `mv .git .git-old && mkdir
//! .git` cannot slip a fresh, writable `.git/config` past the read-only one.
//!
//! A path that does not exist yet cannot be bound without creating a mount
//! point on the host (bwrap would leave an empty `.envrc` or `.passepartout/`
//! behind in the project). So those are checked when the run is over, when
//! bubblewrap has killed every process of the sandbox: whatever the run
//! created at a control path is removed, and the result says so. Symlinks
//! among the control paths are recorded too and put back if the run
//! replaced them. The window this leaves (a program on the host reading a
//! control file the sandbox created, *during* the run) is documented in
//! `docs/architecture.md`.
//!
//! `.git` may be a directory (the repository: its dangerous parts are
//! entries of their own) or a file (a linked worktree's or vendored
//! repository's `gitdir:` pointer, bound read-only like any other file; the
//! repository it points to is protected like a `.git` directory when it
//! lies in the project, and not visible in the sandbox at all otherwise).
//!
//! Every entry counts at any depth: the tree is walked (see
//! [`MAX_WALKED_DIRS`]) so a repository made with `git init` in a
//! subfolder, or a nested `.envrc`, is as read-only as the top-level one.
//! Only the root's missing entries are swept; what a run creates deeper
//! is judged from the checkpoint by the effect gates — except
//! repositories: a bare-shaped folder is protected like `.git`, and after
//! the run every repository the run created is found (only directories
//! the watch saw change, or whose status-change time moved, are read
//! again) and loses what would run programs on the host (a new `.git`
//! pointer file, a config naming programs, hooks, in-progress state).
//!
//! Beside the fixed entries, the files the person's git settings name in
//! the project ([`crate::control_surface::git_named_paths`]: a
//! `core.hooksPath`, a textconv or filter script) are protected the same
//! way: read-only when they exist, removed after the run when it creates
//! them.
//!
//! What a snapshot costs is kept small because it is paid before every
//! shell call, and it must not grow with the project: an inotify watch per
//! project ([`ProjectWatch`], on `util::dir_watch`) is armed on each
//! directory before it is read, so a directory without an event since is
//! neither stat'ed nor listed again, before the run or after it (an
//! unchanged tree costs one non-blocking read of the kernel's queue). When
//! that read finds no event at all, the last walk's whole result (its
//! directories behind an `Arc`, its secrets, repositories and the
//! directories holding control entries) is taken as it is, and only the
//! insides of those directories, which the watch does not see
//! (`.git/hooks`, `.git/config`), are looked at again; where the watch
//! cannot vouch, directories unchanged since the last walk
//! by their status-change time are not listed again ([`Walks`]). git's
//! answers are remembered while no file they depend on changed
//! (`control_surface::git_cache`), and the sweep stats each missing path
//! once before resolving it. Under the watch the root's listing says
//! which root entries exist (a missing one is not looked at), an existing
//! entry that is no symlink in a directory found real is not resolved
//! again, and the sweep skips the root's missing entries when the root had
//! no event since the drain that came before they were judged missing.
//! `examples/bench_sandbox` prints snapshot + sweep alone, against git
//! asked every time, and the snapshot alone warm, after a pause and after
//! a bwrap run (the same work costs more on a core that idled); the
//! figures are in docs/performance.md.
//!
//! The same walk names the project's secret files (by the gates' rule)
//! for the output redaction ([`redactable_files`]), so a tool call in a
//! large project does not scan it again, and a secret file at any depth
//! is known as soon as the watch sees it created.

use std::io;
use std::path::{Component, Path, PathBuf};

use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;

use rustc_hash::{FxHashMap, FxHashSet};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use crate::util::dir_watch::{DirWatch, ReadFlags, WatchFlags};

use super::spawn::timeline::mark;

use crate::control_surface::{is_container, ControlEntry, CONTROL_SURFACE};

/// What one protected path is, for the sweep and its report: a
/// control-surface entry, or a path the person's git settings name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Guard {
    /// Why the path is protected, as shown to the model and the person.
    why: String,
    /// A `.git` directory: a new one is kept, its parts are judged.
    container: bool,
}

impl Guard {
    fn of(entry: &ControlEntry) -> Guard {
        Guard {
            why: entry.why.to_string(),
            container: is_container(entry),
        }
    }
}

/// A directory as the walk before the run saw it: its status-change time
/// (which every entry created, removed or renamed in it moves, and which no
/// program can set back) and its subdirectories.
#[derive(Debug, Clone)]
struct Seen {
    ctime: (i64, i64),
    subdirs: Vec<OsString>,
    /// An inotify watch was on the directory from before its listing was
    /// read ([`ProjectWatch`]): its events, not its time, say whether it
    /// changed.
    watched: bool,
}

/// Repositories looked at after a run for being new, at most: past this
/// many the rest is not judged (and a warning is logged).
pub const MAX_NESTED_REPOSITORY_CONFIGS: usize = 32;

/// What the sandbox must mount for the control surface, computed on the
/// host before a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurfaceMounts {
    /// Directories bound read-write onto themselves so they cannot be
    /// renamed or removed, shallowest first.
    pub pins: Vec<PathBuf>,
    /// Paths bound read-only, in order.
    pub read_only: Vec<PathBuf>,
    /// Files named like secrets (`.env`, private keys), to cover with
    /// `/dev/null` unless a person approved the run (see [`is_secret_name`]).
    pub masked: Vec<PathBuf>,
}

/// Whether a file's name marks it as a secret the sandbox masks: environment
/// files (`.env`, `.env.local`, not `.env.example`), private keys and
/// credential stores. The gates ask about reading these by name; the mask
/// makes a read by any route (a script building the name, a glob) find
/// nothing.
pub fn is_secret_name(name: &str) -> bool {
    let env_file = crate::control_surface::secret_names::is_dotenv_name(name);
    let key_ext = [".pem", ".key", ".p12", ".pfx"]
        .iter()
        .any(|e| name.ends_with(e));
    env_file
        || key_ext
        || matches!(
            name,
            "id_rsa"
                | "id_dsa"
                | "id_ecdsa"
                | "id_ed25519"
                | ".netrc"
                | ".pgpass"
                | ".git-credentials"
        )
}

/// The state of the control surface before a run.
#[derive(Debug, Clone)]
pub struct SurfaceSnapshot {
    root: PathBuf,
    /// Entries that did not exist, with their path relative to the root.
    missing: Vec<(Guard, PathBuf)>,
    /// Symlinks among the control paths: path relative to the root, target.
    links: Vec<(Guard, PathBuf, PathBuf)>,
    mounts: SurfaceMounts,
    /// Every directory walked, by path relative to the root (shared with
    /// the project's watch, which hands it to the next snapshot when no
    /// event came in between).
    seen: Arc<SeenDirs>,
    /// Every directory in `seen` was watched from before its listing was
    /// read: with the watch's word, a directory without an event is
    /// unchanged.
    all_watched: bool,
    /// Every repository in the tree before the run (relative: a `.git`
    /// directory or pointer file, or a bare repository's directory).
    repositories: FxHashSet<PathBuf>,
    /// The project's watch and the drain this walk began with, when the
    /// walk was watched: the sweep asks it which directories changed since.
    watched: Option<WatchTicket>,
    /// Directories the walk stat'ed (the rest the watch vouched for).
    looked_at: usize,
    /// The walk was not done at all: no event in the project since the
    /// last one, whose result was taken whole ([`LastWalk`]).
    reused: bool,
}

/// Every directory a walk saw, by path relative to the root. The keys are
/// hashed by FxHash: they are the project's own paths, hashed several
/// times per directory per walk (SipHash's resistance to chosen keys buys
/// nothing against paths an attacker would have to create first, one
/// directory each, under [`MAX_WALKED_DIRS`]).
type SeenDirs = FxHashMap<PathBuf, Seen>;

/// One thing the sweep undid after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undone {
    /// The control path, relative to the working directory.
    pub path: String,
    /// What was done: "removed" or "restored the symlink".
    pub what: &'static str,
    /// Why the path is control surface.
    pub why: String,
}

impl std::fmt::Display for Undone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}` ({})", self.what, self.path, self.why)
    }
}

/// Directories looked at before a run, at most: a larger tree is protected
/// up to this many directories (breadth first, so shallow ones first) and a
/// warning is logged. What a large tree costs per snapshot is measured by
/// `examples/bench_surface` (docs/performance.md).
pub const MAX_WALKED_DIRS: usize = 100_000;

/// What [`SurfaceSnapshot::take`] gathers.
#[derive(Default)]
struct Gather {
    missing: Vec<(Guard, PathBuf)>,
    links: Vec<(Guard, PathBuf, PathBuf)>,
    pins: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    masked: Vec<PathBuf>,
    seen: Arc<SeenDirs>,
    all_watched: bool,
    repositories: FxHashSet<PathBuf>,
    watched: Option<WatchTicket>,
    /// Directories stat'ed (and read unless their listing was remembered).
    looked_at: usize,
    /// The last walk's result was taken whole.
    reused: bool,
    /// Work trees of the nested repositories (relative), whose own
    /// configuration may name files too.
    nested_work_trees: Vec<PathBuf>,
    /// Directories (relative) this snapshot found by `lstat` to be real
    /// directories reached without a symlink ([`real_parent`]).
    real_dirs: FxHashSet<PathBuf>,
}

/// What a walk of the tree found from the directories' listings alone:
/// everything but what lies inside the directories holding control
/// entries (`.git/hooks`, `.git/config`, a bare repository's parts),
/// which the watch does not see and [`apply_walk`] looks at every time.
/// Kept by the project's watch ([`ProjectWatch::keep_walk`]) and taken
/// whole by the next snapshot when no event came in between.
#[derive(Default)]
struct Walked {
    seen: SeenDirs,
    /// Every directory was watched before it was read, and the walk was
    /// not cut short by [`MAX_WALKED_DIRS`].
    reusable: bool,
    masked: Vec<PathBuf>,
    /// Files whose values the output redaction takes out (relative).
    redactable: Vec<PathBuf>,
    /// More were found than [`MAX_REDACTABLE_FILES`].
    redactable_cut: bool,
    /// `.git` entries and bare-shaped directories found in listings.
    repositories: Vec<PathBuf>,
    nested_work_trees: Vec<PathBuf>,
    /// Directories (not the root) whose listing names a control entry or
    /// makes them a bare repository, in walk order.
    control_dirs: Vec<ControlDir>,
    looked_at: usize,
    /// The root's names that start a control entry, when its listing was
    /// read under the watch ([`RootEntryNames`]).
    root_entry_names: Option<RootEntryNames>,
}

/// The names in the project's root that start a control entry, from a
/// listing the watch vouches for as of the drain its walk began with: an
/// entry whose first name is not among them did not exist then, and one
/// made since is an event in the root, which the sweep is told of.
type RootEntryNames = Arc<Vec<OsString>>;

/// A directory whose insides [`apply_walk`] protects.
struct ControlDir {
    rel: PathBuf,
    /// Bare-shaped: protected like a `.git` directory.
    bare: bool,
    /// Holds a name that starts a control entry.
    control: bool,
}

/// A walk's result as the project's watch keeps it.
struct LastWalk {
    /// The drain the walk began with: an event drained after it means
    /// the result is stale.
    drain: u64,
    seen: Arc<SeenDirs>,
    masked: Vec<PathBuf>,
    /// The project's secret files by the gates' rule ([`redactable_files`]),
    /// relative, shared with the redaction.
    redactable: Arc<Vec<PathBuf>>,
    repositories: Vec<PathBuf>,
    nested_work_trees: Vec<PathBuf>,
    control_dirs: Vec<ControlDir>,
    root_entry_names: Option<RootEntryNames>,
}

impl SurfaceSnapshot {
    /// Look at the control surface of the project rooted at `root`: the
    /// entries at the root (missing ones are remembered for the sweep), and
    /// every nested one in the tree (a repository made with `git init` in a
    /// subfolder, a vendored repository, a `.envrc` or `.dir-locals.el`
    /// further down), plus the repository a `.git` pointer file names when
    /// it lies in the project.
    pub fn take(root: &Path) -> SurfaceSnapshot {
        let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        mark("surface: root resolved");
        // The walk first (its drain of the watch included), the root's
        // entries after: a root entry created after that drain is an event
        // the sweep is told of, so a missing one whose directory had no
        // event since is still missing without a look ([`Self::sweep`]).
        let current = current_walk(root, &canonical_root);
        mark("surface: watch drained");
        let snapshot = Self::from_walk(root, &canonical_root, current);
        tracing::debug!(
            "control surface of {}: {} directories, {} stat'ed ({})",
            root.display(),
            snapshot.seen.len(),
            snapshot.looked_at,
            if snapshot.reused {
                "the last walk reused: no event since"
            } else if snapshot.watched.is_some() {
                "the rest unchanged by inotify"
            } else {
                "not watched"
            }
        );
        if differential_checks() {
            check_against_fresh_walk(root, &canonical_root, &snapshot);
        }
        snapshot
    }

    /// The snapshot built on `current`, a walk cached or fresh.
    fn from_walk(root: &Path, canonical_root: &Path, current: CurrentWalk) -> SurfaceSnapshot {
        let canonical_root = canonical_root.to_path_buf();
        let mut g = Gather::default();
        // Under the watch, the root's listing says which entries exist:
        // one whose first name it lacks is missing without a look.
        let root_names = current
            .watched
            .as_ref()
            .and(current.walk.root_entry_names.clone());
        for entry in CONTROL_SURFACE {
            let first = entry.path.split('/').next().unwrap_or(entry.path);
            let listed = root_names
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n.as_os_str() == first));
            if !listed {
                g.missing
                    .push((Guard::of(entry), PathBuf::from(entry.path)));
                continue;
            }
            protect(
                root,
                &canonical_root,
                PathBuf::from(entry.path),
                Guard::of(entry),
                true,
                &mut g,
            );
        }
        mark("surface: root entries");
        walk_nested(root, &canonical_root, current, &mut g);
        mark("surface: walk");
        // The person's git settings (global, system, the repository's own,
        // and each nested repository's) that name files in the project:
        // git runs those on the host at the person's next commit or diff.
        let home = crate::paths::home_dir();
        let mut work_trees = vec![PathBuf::new()];
        work_trees.extend(
            g.nested_work_trees
                .iter()
                .take(MAX_NESTED_REPOSITORY_CONFIGS)
                .cloned(),
        );
        if g.nested_work_trees.len() > MAX_NESTED_REPOSITORY_CONFIGS {
            tracing::warn!(
                "the project {} holds more than {MAX_NESTED_REPOSITORY_CONFIGS} nested \
                 repositories: the git settings of the rest are not read",
                root.display()
            );
        }
        for tree in work_trees {
            for named in crate::control_surface::git_named_paths(&root.join(&tree), &home) {
                let Ok(rel) = named.path.strip_prefix(root) else {
                    continue;
                };
                let guard = Guard {
                    why: named.why(),
                    container: false,
                };
                protect(
                    root,
                    &canonical_root,
                    rel.to_path_buf(),
                    guard,
                    true,
                    &mut g,
                );
            }
        }
        mark("surface: git settings");
        // A path beneath a read-only one is covered already; a pin there
        // would even make it writable again.
        let covered = |p: &PathBuf, ro: &[PathBuf]| ro.iter().any(|r| p != r && p.starts_with(r));
        let read_only_all = g.read_only.clone();
        g.read_only.retain(|p| !covered(p, &read_only_all));
        g.pins
            .retain(|p| !covered(p, &read_only_all) && !read_only_all.contains(p));
        g.pins.sort_by_key(|p| p.components().count());
        SurfaceSnapshot {
            root: root.to_path_buf(),
            missing: g.missing,
            links: g.links,
            mounts: SurfaceMounts {
                pins: g.pins,
                read_only: g.read_only,
                masked: g.masked,
            },
            seen: g.seen,
            all_watched: g.all_watched,
            repositories: g.repositories,
            watched: g.watched,
            looked_at: g.looked_at,
            reused: g.reused,
        }
    }

    /// The mounts that protect the existing control paths.
    pub fn mounts(&self) -> &SurfaceMounts {
        &self.mounts
    }

    /// How many directories the walk stat'ed (the rest the project's
    /// watch vouched for): 0 for an unchanged tree under the watch. For
    /// measurements (`PASSEPARTOUT_LOG=debug` logs it per walk).
    pub fn directories_looked_at(&self) -> usize {
        self.looked_at
    }

    /// Whether the last walk's result was taken whole (no event in the
    /// project since it): only the insides of the directories holding
    /// control entries were looked at. For measurements and tests.
    pub fn reused_last_walk(&self) -> bool {
        self.reused
    }

    /// After the run (every sandboxed process is gone): remove what the run
    /// created at control paths that did not exist, and put back symlinks
    /// it replaced. Never follows a symlink out of the project.
    pub fn sweep(&self) -> Vec<Undone> {
        self.sweep_counted().0
    }

    /// [`Self::sweep`], and how many missing entries it looked at (for
    /// tests: the rest the watch vouched for).
    fn sweep_counted(&self) -> (Vec<Undone>, usize) {
        let mut looked_at = 0;
        let mut undone = Vec::new();
        for (guard, rel, target) in &self.links {
            let path = self.root.join(rel);
            let same = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink())
                && std::fs::read_link(&path).is_ok_and(|t| &t == target);
            if same {
                continue;
            }
            if remove_any(&path).is_ok() && std::os::unix::fs::symlink(target, &path).is_ok() {
                undone.push(Undone {
                    path: shown(rel),
                    what: "restored the symlink",
                    why: guard.why.clone(),
                });
            }
        }
        let changed = self.changed_since_walk();
        // The root had no event since the walk's drain, which came before
        // its entries were looked at: nothing was created, linked or moved
        // into it, so its missing entries are still missing.
        let root_unchanged = changed.as_ref().is_some_and(|c| !c.contains(Path::new("")))
            && self.seen.get(Path::new("")).is_some_and(|s| s.watched);
        // `.git/config` is still missing too when `.git` was.
        let missing_at_root: FxHashSet<&Path> = self
            .missing
            .iter()
            .filter(|(_, rel)| rel.components().count() == 1)
            .map(|(_, rel)| rel.as_path())
            .collect();
        for (guard, rel) in &self.missing {
            let first = rel.components().next().map(|c| Path::new(c.as_os_str()));
            if root_unchanged && first.is_some_and(|f| missing_at_root.contains(f)) {
                continue;
            }
            looked_at += 1;
            // Most are still missing: one stat, before resolving the path
            // (nothing there by any route means nothing to remove).
            if std::fs::symlink_metadata(self.root.join(rel)).is_err() {
                continue;
            }
            let Some(path) = self.inside_root(rel) else {
                continue;
            };
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() && guard.container {
                continue; // a new repository: its own entries are swept one by one
            }
            if remove_any(&path).is_ok() {
                undone.push(Undone {
                    path: shown(rel),
                    what: "removed",
                    why: guard.why.clone(),
                });
            }
        }
        undone.extend(self.sweep_planted_repositories(changed));
        (undone, looked_at)
    }

    /// The directories with an event since the walk, when the watch knows
    /// (None: it does not, and every directory is judged by its time).
    fn changed_since_walk(&self) -> Option<FxHashSet<PathBuf>> {
        self.watched.as_ref().and_then(|ticket| {
            crate::util::sync::lock(&ticket.project).changed_since(&self.root, ticket.drain)
        })
    }

    /// After a run into an overlay (every sandboxed process is gone): undo,
    /// in its upper layer `upper`, what the run did to the control surface,
    /// before the changeset is read. Removing an upper entry brings back
    /// the project's own (a replaced symlink, a path that did not exist);
    /// planted repositories lose what runs programs, as in [`Self::sweep`].
    /// The project itself is never touched: what the person does there
    /// meanwhile is theirs.
    pub fn sweep_upper(&self, upper: &Path) -> Vec<Undone> {
        let mut undone = Vec::new();
        for (guard, rel, _) in &self.links {
            let Some(path) = inside(upper, rel) else {
                continue;
            };
            if std::fs::symlink_metadata(&path).is_ok() && remove_any(&path).is_ok() {
                undone.push(Undone {
                    path: shown(rel),
                    what: "restored the symlink",
                    why: guard.why.clone(),
                });
            }
        }
        for (guard, rel) in &self.missing {
            if std::fs::symlink_metadata(upper.join(rel)).is_err() {
                continue;
            }
            let Some(path) = inside(upper, rel) else {
                continue;
            };
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() && guard.container {
                continue; // a new repository: its own entries are swept one by one
            }
            if remove_any(&path).is_ok() {
                undone.push(Undone {
                    path: shown(rel),
                    what: "removed",
                    why: guard.why.clone(),
                });
            }
        }
        // The upper layer is not watched: its directories are judged by
        // their times (all of them are new or changed anyway).
        let in_upper = SurfaceSnapshot {
            root: upper.to_path_buf(),
            watched: None,
            ..self.clone()
        };
        undone.extend(in_upper.sweep_planted_repositories(None));
        undone
    }

    /// `root/rel`, if every directory on the way is a real directory inside
    /// the root (a symlinked ancestor that leaves the project yields None).
    fn inside_root(&self, rel: &Path) -> Option<PathBuf> {
        inside(&self.root, rel)
    }
}

/// `root/rel`, if every directory on the way is a real directory inside
/// `root` (a symlinked ancestor that leaves it yields None).
fn inside(root: &Path, rel: &Path) -> Option<PathBuf> {
    let canonical_root = root.canonicalize().ok()?;
    let path = root.join(rel);
    let parent = path.parent()?.canonicalize().ok()?;
    if !parent.starts_with(&canonical_root) {
        return None;
    }
    Some(parent.join(path.file_name()?))
}

/// Protect the control path `rel` (relative to the root) of `entry`, if it
/// exists and really lies in the project; remember it for the sweep when it
/// does not and `record_missing` (the root's own entries).
fn protect(
    root: &Path,
    canonical_root: &Path,
    rel: PathBuf,
    guard: Guard,
    record_missing: bool,
    g: &mut Gather,
) {
    let path = root.join(&rel);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        if record_missing {
            g.missing.push((guard, rel));
        }
        return;
    };
    if meta.file_type().is_symlink() {
        if let Ok(target) = std::fs::read_link(&path) {
            g.links.push((guard.clone(), rel.clone(), target));
        }
    }
    // Protect what the path really is, if it lies in the project;
    // elsewhere it is not visible in the sandbox at all. A path that is no
    // symlink, in a directory this snapshot found real (the root, or one
    // whose every step it looked at: no symlink on the way), is where it
    // is: resolving it again (`realpath`, a `readlink` per component) was
    // most of what an existing entry cost.
    let plain = !meta.file_type().is_symlink() && real_parent(&rel, g);
    let real = if plain {
        canonical_root.join(&rel)
    } else {
        let Ok(real) = path.canonicalize() else {
            return;
        };
        real
    };
    if plain && meta.is_dir() {
        g.real_dirs.insert(rel);
    }
    let (real_is_dir, real_is_file) = if plain {
        (meta.is_dir(), meta.is_file())
    } else {
        (real.is_dir(), real.is_file())
    };
    let Ok(real_rel) = real.strip_prefix(canonical_root) else {
        return;
    };
    if real_rel.as_os_str().is_empty() {
        return; // a link back to the root itself: nothing to bind
    }
    let real_rel = real_rel.to_path_buf();
    let inside = root.join(&real_rel);
    let container_dir = guard.container && real_is_dir;
    for ancestor in ancestors_beneath(&real_rel) {
        push_unique(&mut g.pins, root.join(ancestor));
    }
    if container_dir {
        push_unique(&mut g.pins, inside);
        return;
    }
    push_unique(&mut g.read_only, inside);
    // A `.git` pointer file: the repository it names, when that lies in the
    // project, steers git as much as a `.git` directory would.
    if guard.container && real_is_file {
        if let Some(gitdir) = pointer_target(&real) {
            if let Ok(git_rel) = gitdir.strip_prefix(canonical_root) {
                if !git_rel.as_os_str().is_empty() && gitdir.is_dir() {
                    let git_rel = git_rel.to_path_buf();
                    g.repositories.insert(git_rel.clone());
                    protect_repository(root, canonical_root, &git_rel, g);
                }
            }
        }
    }
}

/// Whether `rel`'s directory is known real: the root, or a directory this
/// snapshot looked at (`lstat`: a directory, no symlink) whose own
/// directory was known real, and `rel` names no `.` or `..` step.
fn real_parent(rel: &Path, g: &Gather) -> bool {
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return false;
    }
    match rel.parent() {
        None => false,
        Some(parent) if parent.as_os_str().is_empty() => true,
        Some(parent) => g.real_dirs.contains(parent),
    }
}

/// Protect a repository directory that is not named `.git` (the target of
/// a pointer file, a bare repository): it is pinned, and its configuration,
/// hooks and in-progress state are read-only like `.git`'s.
fn protect_repository(root: &Path, canonical_root: &Path, git_rel: &Path, g: &mut Gather) {
    push_unique(&mut g.pins, root.join(git_rel));
    for sub in CONTROL_SURFACE {
        if let Some(rest) = sub.path.strip_prefix(".git/") {
            protect(
                root,
                canonical_root,
                git_rel.join(rest),
                Guard::of(sub),
                false,
                g,
            );
        }
    }
}

/// Whether a directory listing makes its directory a repository git
/// accepts as bare (git's own test: `HEAD`, `objects/` and `refs/`).
fn looks_bare(names: &HashSet<&str>) -> bool {
    ["HEAD", "objects", "refs"]
        .iter()
        .all(|n| names.contains(n))
}

/// The path as shown in a report.
fn shown(rel: &Path) -> String {
    rel.to_string_lossy().into_owned()
}

/// The directory a `.git` file's `gitdir:` line names, canonical.
fn pointer_target(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    let target = Path::new(line);
    let target = if target.is_absolute() {
        target.to_path_buf()
    } else {
        file.parent()?.join(target)
    };
    target.canonicalize().ok()
}

/// Every directory beneath the root (breadth first, symlinks not
/// followed, repositories' insides and read-only control directories not
/// entered): a directory whose listing holds the start of a control entry
/// has its entries protected like the root's.
///
/// When the project's watch drained no event at all since its last walk
/// (and vouched for every directory of it), that walk's result is taken
/// whole: nothing is walked, and only the insides of the directories
/// holding control entries are looked at again ([`apply_walk`]), as the
/// watch does not see into them. Any event: the walk, reading only the
/// directories with events; anything the watch cannot model: the whole
/// walk.
fn walk_nested(root: &Path, canonical_root: &Path, current: CurrentWalk, g: &mut Gather) {
    g.watched = current.watched;
    g.reused = current.reused;
    g.all_watched = current.all_watched;
    g.looked_at += current.looked_at;
    apply_walk(root, canonical_root, &current.walk, g);
    g.seen = current.walk.seen;
}

/// The walk as it stands now, and how it was had.
struct CurrentWalk {
    walk: LastWalk,
    watched: Option<WatchTicket>,
    /// The last walk was taken whole (no event since).
    reused: bool,
    all_watched: bool,
    looked_at: usize,
}

/// The walk of the project at `root`: the last one when no event came
/// since, otherwise walked now (reading only the directories the watch
/// cannot vouch for) and kept for the next caller.
fn current_walk(root: &Path, canonical_root: &Path) -> CurrentWalk {
    let project = watched_project(canonical_root);
    let mut state = crate::util::sync::lock(&project);
    let drain = state.drain(root);
    if let Some(last) = state.reusable_walk() {
        let walk = last.clone_parts();
        drop(state);
        return CurrentWalk {
            walk,
            watched: Some(WatchTicket {
                project: project.clone(),
                drain,
            }),
            reused: true,
            all_watched: true,
            looked_at: 0,
        };
    }
    let mut walks = Walks::of(canonical_root);
    let walked = walk_listed(root, canonical_root, &mut walks, &mut state, drain);
    let all_watched = walked.reusable && state.watch.is_some();
    if walked.redactable_cut {
        tracing::warn!(
            "the project {} has more than {MAX_REDACTABLE_FILES} secret files \
             (MAX_REDACTABLE_FILES): the values of the rest are not redacted from tool output",
            root.display()
        );
    }
    let last = LastWalk {
        drain,
        seen: Arc::new(walked.seen),
        masked: walked.masked,
        redactable: Arc::new(walked.redactable),
        repositories: walked.repositories,
        nested_work_trees: walked.nested_work_trees,
        control_dirs: walked.control_dirs,
        root_entry_names: walked.root_entry_names,
    };
    let watched = state.watch.is_some().then(|| WatchTicket {
        project: project.clone(),
        drain,
    });
    let walk = if all_watched {
        let parts = last.clone_parts();
        state.keep_walk(last);
        parts
    } else {
        last
    };
    drop(state);
    walks.keep();
    CurrentWalk {
        walk,
        watched,
        reused: false,
        all_watched,
        looked_at: walked.looked_at,
    }
}

/// Whether every snapshot is checked against one taken without any cache
/// (the watch's reused walk, the remembered listings): on in debug builds
/// (every test) and wherever `PASSEPARTOUT_CHECK_CACHES=1` is set. The
/// caches decide what is read-only in the sandbox, so a stale answer must
/// fail loudly where it can be seen, not leave a control file writable.
pub fn differential_checks() -> bool {
    cfg!(debug_assertions)
        || std::env::var_os("PASSEPARTOUT_CHECK_CACHES").is_some_and(|v| v == "1")
}

/// The walk of the project at `root` read from the disk alone: no watch,
/// no remembered listing, nothing kept for later.
fn fresh_walk(root: &Path, canonical_root: &Path) -> CurrentWalk {
    let mut state = ProjectWatch::unwatched();
    let mut walks = Walks::empty(canonical_root);
    let walked = walk_listed(root, canonical_root, &mut walks, &mut state, 0);
    CurrentWalk {
        walk: LastWalk {
            drain: 0,
            seen: Arc::new(walked.seen),
            masked: walked.masked,
            redactable: Arc::new(walked.redactable),
            repositories: walked.repositories,
            nested_work_trees: walked.nested_work_trees,
            control_dirs: walked.control_dirs,
            root_entry_names: walked.root_entry_names,
        },
        watched: None,
        reused: false,
        all_watched: false,
        looked_at: walked.looked_at,
    }
}

/// What a snapshot protects, in an order that does not depend on how the
/// walk was had: the mounts, the missing entries swept after the run, the
/// symlinks put back, the repositories.
fn protected_parts(s: &SurfaceSnapshot) -> [Vec<PathBuf>; 6] {
    let sorted = |mut v: Vec<PathBuf>| {
        v.sort();
        v
    };
    [
        sorted(s.mounts.pins.clone()),
        sorted(s.mounts.read_only.clone()),
        sorted(s.mounts.masked.clone()),
        sorted(s.missing.iter().map(|(_, p)| p.clone()).collect()),
        sorted(s.links.iter().map(|(_, p, t)| p.join(t)).collect()),
        sorted(s.repositories.iter().cloned().collect()),
    ]
}

/// The differential check of [`SurfaceSnapshot::take`]: the snapshot the
/// caches gave must protect exactly what one from a fresh walk protects.
/// A tree that changed between the two walks (a second fresh walk differs
/// from the first) gives no verdict; a stable tree that the cached answer
/// misreads panics with both answers.
// The differential check exists to fail loudly (debug builds and CI).
#[allow(clippy::panic)]
fn check_against_fresh_walk(root: &Path, canonical_root: &Path, cached: &SurfaceSnapshot) {
    let fresh = || {
        protected_parts(&SurfaceSnapshot::from_walk(
            root,
            canonical_root,
            fresh_walk(root, canonical_root),
        ))
    };
    let cached = protected_parts(cached);
    let first = fresh();
    if first == cached {
        return;
    }
    if fresh() != first {
        tracing::debug!(
            "control surface of {}: the tree changed during the differential check",
            root.display()
        );
        return;
    }
    panic!(
        "the control surface cache of {} disagrees with a fresh walk \
         (pins, read-only, masked, missing, links, repositories):\ncached: {cached:?}\nfresh:  {first:?}",
        root.display()
    );
}

/// Files at most that [`redactable_files`] names: past them the rest of
/// the project's secret files are not named (a warning is logged).
pub const MAX_REDACTABLE_FILES: usize = 1024;

/// The files of the project at `root` whose values tool output is
/// searched for (relative to `root`): every regular file at any depth the
/// gates' rule names a project secret
/// ([`crate::control_surface::secret_names::is_project_secret_name`]: `.env*`,
/// `.envrc`, `*secret*`, credentials, key files), at most
/// [`MAX_REDACTABLE_FILES`]. The walk is the one a shell call's snapshot
/// makes, shared with it: under the project's watch an unchanged tree
/// costs one read of the kernel's queue, and a file created since the
/// last call is an event, so it is named at once. What a file holds is
/// not watched (a write in place is no event): the caller stats each one.
pub fn redactable_files(root: &Path) -> Arc<Vec<PathBuf>> {
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    current_walk(root, &canonical_root).walk.redactable
}

/// Walk the project at `root` now, ahead of its first shell call (a
/// session's warm-up): the walk is remembered and the tree put under the
/// project's watch, so that call takes the walk whole.
pub fn walk_ahead(root: &Path) {
    let files = redactable_files(root);
    tracing::debug!(
        "warm-up: the project {} walked ahead of its first call ({} secret files)",
        root.display(),
        files.len()
    );
}

impl LastWalk {
    /// A copy sharing the directories (an `Arc`); the rest is small: the
    /// project's secrets, repositories and control directories.
    fn clone_parts(&self) -> LastWalk {
        LastWalk {
            drain: self.drain,
            seen: self.seen.clone(),
            masked: self.masked.clone(),
            redactable: self.redactable.clone(),
            repositories: self.repositories.clone(),
            nested_work_trees: self.nested_work_trees.clone(),
            control_dirs: self
                .control_dirs
                .iter()
                .map(|d| ControlDir {
                    rel: d.rel.clone(),
                    bare: d.bare,
                    control: d.control,
                })
                .collect(),
            root_entry_names: self.root_entry_names.clone(),
        }
    }
}

/// Add a walk's result to the snapshot being gathered, protecting what
/// lies inside the directories holding control entries: whether
/// `.git/hooks` or `.git/config` exists, is a link, or points elsewhere is
/// looked at now, whether the walk was just done or reused.
fn apply_walk(root: &Path, canonical_root: &Path, walk: &LastWalk, g: &mut Gather) {
    g.masked
        .extend(walk.masked.iter().map(|rel| root.join(rel)));
    g.repositories.extend(walk.repositories.iter().cloned());
    g.nested_work_trees
        .extend(walk.nested_work_trees.iter().cloned());
    for dir in &walk.control_dirs {
        if dir.bare {
            protect_repository(root, canonical_root, &dir.rel, g);
        }
        if dir.control {
            for entry in CONTROL_SURFACE {
                protect(
                    root,
                    canonical_root,
                    dir.rel.join(entry.path),
                    Guard::of(entry),
                    false,
                    g,
                );
            }
        }
    }
}

/// The walk of [`walk_nested`] with the listings of `walks` and the watch
/// `state` (drained as of `drain`): what the listings say, nothing
/// protected yet.
fn walk_listed(
    root: &Path,
    canonical_root: &Path,
    walks: &mut Walks,
    state: &mut ProjectWatch,
    drain: u64,
) -> Walked {
    let mut w = Walked {
        reusable: true,
        ..Walked::default()
    };
    let mut queue: VecDeque<PathBuf> = VecDeque::new();
    queue.push_back(PathBuf::new());
    let mut walked = 0usize;
    while let Some(rel) = queue.pop_front() {
        walked += 1;
        if walked > MAX_WALKED_DIRS {
            tracing::warn!(
                "the project {} has more than {MAX_WALKED_DIRS} directories: control paths \
                 deeper than the first {MAX_WALKED_DIRS} are not mounted read-only",
                root.display()
            );
            w.reusable = false;
            return w;
        }
        let (facts, ctime, watched) = if let Some(listing) = state.unchanged(&rel) {
            // No event in the directory since its listing was read: the
            // same names of the same kinds, without a system call.
            walks.carry(listing.key);
            (listing.facts.clone(), listing.ctime, true)
        } else {
            let abs = root.join(&rel);
            // Watched before it is looked at, so a change during the
            // listing is an event for the next walk.
            let watched = state.arm(root, &canonical_root.join(&rel), &rel);
            w.looked_at += 1;
            // The time is taken before the listing: a change after it moves
            // the time, so the check after the run reads the directory again.
            let Ok(meta) = std::fs::symlink_metadata(&abs) else {
                w.reusable = false;
                continue;
            };
            let Some(facts) = walks.facts(&abs, &meta) else {
                w.reusable = false;
                continue;
            };
            let ctime = (meta.ctime(), meta.ctime_nsec());
            if watched {
                state.remember(
                    rel.clone(),
                    WatchedListing {
                        facts: facts.clone(),
                        ctime,
                        key: (meta.dev(), meta.ino(), ctime.0, ctime.1),
                        read_at: drain,
                    },
                );
            }
            (facts, ctime, watched)
        };
        w.reusable &= watched;
        if rel.as_os_str().is_empty() && watched {
            w.root_entry_names = Some(Arc::new(facts.entry_names.clone()));
        }
        for name in &facts.subdirs {
            queue.push_back(rel.join(name));
        }
        for name in &facts.secrets {
            w.masked.push(rel.join(name));
        }
        for name in &facts.redactable {
            if w.redactable.len() < MAX_REDACTABLE_FILES {
                w.redactable.push(rel.join(name));
            } else {
                w.redactable_cut = true;
            }
        }
        let subdirs = facts.subdirs.clone();
        if facts.has_git {
            w.repositories.push(rel.join(".git"));
            if !rel.as_os_str().is_empty() {
                w.nested_work_trees.push(rel.clone());
            }
        }
        let nested = !rel.as_os_str().is_empty();
        if facts.bare && nested {
            w.repositories.push(rel.clone());
        }
        if nested && (facts.bare || facts.control) {
            w.control_dirs.push(ControlDir {
                rel: rel.clone(),
                bare: facts.bare,
                control: facts.control,
            });
        }
        w.seen.insert(
            rel,
            Seen {
                ctime,
                subdirs,
                watched,
            },
        );
    }
    w
}

/// What the walk needs from one directory's listing.
#[derive(Debug, Default)]
struct DirFacts {
    /// Subdirectories to walk (sorted; not `.git`, symlinks not followed).
    subdirs: Vec<OsString>,
    /// Files whose names mark secrets ([`is_secret_name`]).
    secrets: Vec<OsString>,
    /// Files whose values the output redaction takes out
    /// ([`crate::control_surface::secret_names::is_project_secret_name`]).
    redactable: Vec<OsString>,
    /// A name that starts a control-surface entry is present.
    control: bool,
    /// The names that start a control-surface entry (the root's say which
    /// of its entries exist, without a look at each).
    entry_names: Vec<OsString>,
    /// A `.git` entry is present.
    has_git: bool,
    /// The listing makes the directory a bare repository ([`looks_bare`]).
    bare: bool,
}

impl DirFacts {
    fn read(dir: &Path) -> Option<DirFacts> {
        let mut children: Vec<std::fs::DirEntry> = std::fs::read_dir(dir).ok()?.flatten().collect();
        // Sorted, so the same tree gives the same mounts every time.
        children.sort_by_key(std::fs::DirEntry::file_name);
        let mut facts = DirFacts::default();
        let names: Vec<OsString> = children.iter().map(std::fs::DirEntry::file_name).collect();
        let mut seen: HashSet<&str> = HashSet::new();
        for (e, name) in children.iter().zip(&names) {
            let Some(name) = name.to_str() else {
                continue;
            };
            seen.insert(name);
            if crate::control_surface::starts_an_entry(name) {
                facts.control = true;
                facts.entry_names.push(OsString::from(name));
            }
            let file_type = e.file_type().ok();
            // A repository's insides are its own entries; other control
            // directories (read-only as a whole) are entered for secrets.
            if file_type.is_some_and(|t| t.is_dir()) && name != ".git" {
                facts.subdirs.push(OsString::from(name));
            }
            if file_type.is_some_and(|t| t.is_file()) {
                if is_secret_name(name) {
                    facts.secrets.push(OsString::from(name));
                }
                if crate::control_surface::secret_names::is_project_secret_name(name)
                    || crate::control_surface::secret_names::holds_secret_values_name(name)
                {
                    facts.redactable.push(OsString::from(name));
                }
            }
        }
        facts.has_git = seen.contains(".git");
        facts.bare = looks_bare(&seen);
        Some(facts)
    }

    /// What remembering these facts costs, in entries.
    fn size(&self) -> usize {
        1 + self.subdirs.len() + self.secrets.len() + self.redactable.len() + self.entry_names.len()
    }
}

type Listing = std::sync::Arc<DirFacts>;

/// The listings of one project's directories from the last walk, keyed by
/// (device, inode, status-change time). A directory's status-change time
/// moves whenever an entry in it is created, removed or renamed (and when
/// it is itself renamed), so an unchanged key means the same names of the
/// same kinds: the walk before the next shell call reads only directories
/// that changed, and stats the rest (measured by `examples/bench_surface`).
/// A listing is kept only when the directory's time lies more than
/// [`TRUSTED_AGE`] before the listing was read: the kernel's clock for
/// these times is coarse, and a change in the same tick as the listing
/// could leave the time where it was.
struct Walks {
    root: PathBuf,
    old: FxHashMap<(u64, u64, i64, i64), Listing>,
    new: FxHashMap<(u64, u64, i64, i64), Listing>,
    entries: usize,
}

/// Projects whose walks are remembered (the most recently walked).
pub const WALK_CACHE_PROJECTS: usize = 8;
/// Directory entries remembered per project at most; past it the rest of
/// the walk is read every time.
pub const WALK_CACHE_ENTRIES: usize = 1_000_000;
/// How much older than its listing a directory's status-change time must
/// be for the listing to be reused (a clock tick is at most 10 ms; one
/// second leaves room for a clock that was just set back a little). The
/// cache of the person's git settings uses the same rule.
pub const TRUSTED_AGE: std::time::Duration = crate::control_surface::TRUSTED_AGE;

type WalkCache = VecDeque<(PathBuf, FxHashMap<(u64, u64, i64, i64), Listing>)>;

fn walk_cache() -> &'static std::sync::Mutex<WalkCache> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<WalkCache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Forget every remembered walk (for measurements and tests).
pub fn forget_walks() {
    if let Ok(mut cache) = walk_cache().lock() {
        cache.clear();
    }
    crate::util::sync::lock(watched_projects()).clear();
}

impl Walks {
    /// The walk of `root` remembered from last time (taken out of the
    /// cache; [`Walks::keep`] puts this walk's back).
    fn of(root: &Path) -> Walks {
        let old = walk_cache()
            .lock()
            .ok()
            .and_then(|mut cache| {
                let at = cache.iter().position(|(r, _)| r == root)?;
                cache.remove(at).map(|(_, listings)| listings)
            })
            .unwrap_or_default();
        Walks {
            root: root.to_path_buf(),
            old,
            new: FxHashMap::default(),
            entries: 0,
        }
    }

    /// No remembered listing, and none kept: every directory is read.
    fn empty(root: &Path) -> Walks {
        Walks {
            root: root.to_path_buf(),
            old: FxHashMap::default(),
            new: FxHashMap::default(),
            entries: WALK_CACHE_ENTRIES,
        }
    }

    /// Remember this walk's listings (only those of directories it saw).
    fn keep(self) {
        if let Ok(mut cache) = walk_cache().lock() {
            if cache.len() >= WALK_CACHE_PROJECTS {
                cache.pop_back();
            }
            cache.push_front((self.root, self.new));
        }
    }

    /// What the walk needs from `dir` (whose metadata is `meta`): the
    /// last walk's when the directory has not changed since, otherwise
    /// read now.
    fn facts(&mut self, dir: &Path, meta: &std::fs::Metadata) -> Option<Listing> {
        let key = (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec());
        if let Some(facts) = self.old.get(&key).cloned() {
            self.remember(key, facts.clone());
            return Some(facts);
        }
        let read_at = std::time::SystemTime::now();
        let facts = std::sync::Arc::new(DirFacts::read(dir)?);
        let changed = std::time::UNIX_EPOCH
            + std::time::Duration::new(
                u64::try_from(meta.ctime()).unwrap_or(u64::MAX / 2),
                u32::try_from(meta.ctime_nsec()).unwrap_or(0),
            );
        if changed + TRUSTED_AGE < read_at {
            self.remember(key, facts.clone());
        }
        Some(facts)
    }

    /// Keep the last walk's listing under `key` (a directory the watch
    /// vouches for was not stat'ed, but its listing stays remembered for a
    /// walk without the watch).
    fn carry(&mut self, key: DirKey) {
        if let Some(listing) = self.old.get(&key).cloned() {
            self.remember(key, listing);
        }
    }

    fn remember(&mut self, key: (u64, u64, i64, i64), listing: Listing) {
        if self.entries + listing.size() <= WALK_CACHE_ENTRIES {
            self.entries += listing.size();
            self.new.insert(key, listing);
        }
    }
}

/// A directory's identity and status-change time: the key of [`Walks`].
type DirKey = (u64, u64, i64, i64);

/// Directories watched per project at most (one inotify watch each); a
/// larger project is not watched and each walk stats its directories.
pub const MAX_SURFACE_WATCHED_DIRS: usize = 32_768;

/// A listing read while its directory was watched.
#[derive(Clone)]
struct WatchedListing {
    facts: Listing,
    ctime: (i64, i64),
    key: DirKey,
    /// The drain before the read: an event drained later means a change.
    read_at: u64,
}

/// One project's inotify watch for the control surface: which directories
/// had an entry created, removed or renamed since their listing was read,
/// so a walk before a run reads only those and one after a run looks only
/// at those (see `docs/performance.md`). Each drain of the kernel's queue
/// is numbered; a directory remembers the last drain that found an event
/// in it, so any number of snapshots (one per concurrent run) can each ask
/// "changed since my walk?".
///
/// What the drain cannot model ([`crate::util::dir_watch`]: an overflow, a
/// watched directory removed or moved; here also a directory renamed into
/// or out of one) forgets every listing and every event: the next walk
/// reads and re-arms the whole tree, and a sweep for a walk before that
/// judges by status-change times, as without a watch. A limit reached
/// ([`MAX_SURFACE_WATCHED_DIRS`], the kernel's `max_user_watches`) stops
/// watching the project, said once in the log.
struct ProjectWatch {
    watch: Option<DirWatch<PathBuf>>,
    /// Why the project is not watched (a limit), once that is so.
    off: Option<String>,
    max_dirs: usize,
    drains: u64,
    /// The drain at which everything known was forgotten.
    reset_at: u64,
    /// The last drain that found any event (or forgot everything).
    last_event_at: u64,
    /// Per directory (relative), the last drain that found an event in it.
    changed: FxHashMap<PathBuf, u64>,
    listings: FxHashMap<PathBuf, WatchedListing>,
    /// The last walk whose every directory was watched, for the next
    /// snapshot to take whole while no event comes.
    last_walk: Option<LastWalk>,
}

/// The events that change a directory's names or their kinds (all a
/// listing records): a file written in place changes nothing here.
fn surface_watch_mask() -> WatchFlags {
    crate::util::dir_watch::entry_events()
}

impl ProjectWatch {
    fn new(max_dirs: usize) -> ProjectWatch {
        let mut state = ProjectWatch {
            watch: None,
            off: None,
            max_dirs,
            drains: 0,
            reset_at: 0,
            last_event_at: 0,
            changed: FxHashMap::default(),
            listings: FxHashMap::default(),
            last_walk: None,
        };
        state.watch = state.fresh_watch();
        state
    }

    /// A project state with no watch at all: each directory is read.
    fn unwatched() -> ProjectWatch {
        ProjectWatch {
            watch: None,
            off: Some("a walk without caches".into()),
            max_dirs: 0,
            drains: 0,
            reset_at: 0,
            last_event_at: 0,
            changed: FxHashMap::default(),
            listings: FxHashMap::default(),
            last_walk: None,
        }
    }

    fn fresh_watch(&self) -> Option<DirWatch<PathBuf>> {
        if self.off.is_some() {
            return None;
        }
        DirWatch::new(
            surface_watch_mask(),
            self.max_dirs,
            "MAX_SURFACE_WATCHED_DIRS",
        )
        .map_err(|e| tracing::debug!("control surface: no inotify ({e}); each walk stats"))
        .ok()
    }

    /// Read the kernel's queue without blocking; the number of this drain.
    fn drain(&mut self, root: &Path) -> u64 {
        self.drains += 1;
        let now = self.drains;
        if self.watch.is_none() {
            // No instance (the per-user limit of instances was reached,
            // say): try again, from nothing known.
            self.watch = self.fresh_watch();
            return now;
        }
        let Some(watch) = &self.watch else {
            return now;
        };
        let mut dirty = Vec::new();
        let drained = watch.drain(|dir, flags, _| {
            let dir_renamed = flags.contains(ReadFlags::ISDIR)
                && flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO);
            dirty.push(dir.clone());
            !dir_renamed
        });
        match drained {
            Ok(()) => {
                if !dirty.is_empty() {
                    self.last_event_at = now;
                }
                for dir in dirty {
                    self.changed.insert(dir, now);
                }
            }
            Err(why) => {
                tracing::debug!(
                    "control surface of {}: {why}; the next walk reads every directory",
                    root.display()
                );
                self.forget_all(now);
                self.watch = self.fresh_watch();
            }
        }
        now
    }

    fn forget_all(&mut self, now: u64) {
        self.reset_at = now;
        self.last_event_at = now;
        self.changed.clear();
        self.listings.clear();
        self.last_walk = None;
    }

    /// The last walk, when no drain found an event since it began (the
    /// drain it began with may have: the walk read those directories).
    fn reusable_walk(&self) -> Option<&LastWalk> {
        self.watch.as_ref()?;
        let last = self.last_walk.as_ref()?;
        (self.last_event_at <= last.drain).then_some(last)
    }

    /// Keep a walk whose every directory was watched (and so whose every
    /// change since is an event).
    fn keep_walk(&mut self, walk: LastWalk) {
        if self.watch.is_some() {
            self.last_walk = Some(walk);
        }
    }

    /// The listing of `rel`, when it was read under the watch and no event
    /// came in the directory since.
    fn unchanged(&self, rel: &Path) -> Option<&WatchedListing> {
        self.watch.as_ref()?;
        let listing = self.listings.get(rel)?;
        let changed = self
            .changed
            .get(rel)
            .is_some_and(|at| *at > listing.read_at);
        (!changed).then_some(listing)
    }

    /// Watch `abs` (before it is read); whether it is watched. A limit
    /// reached stops watching the project.
    fn arm(&mut self, root: &Path, abs: &Path, rel: &Path) -> bool {
        let Some(watch) = &self.watch else {
            return false;
        };
        match watch.watch(abs, &rel.to_path_buf()) {
            Ok(()) => true,
            Err(refused) if refused.limit => {
                tracing::warn!(
                    "the control surface of {} is not watched: {}; each tool call stats \
                     its directories instead",
                    root.display(),
                    refused.why
                );
                self.off = Some(refused.why);
                self.watch = None;
                self.drains += 1;
                let now = self.drains;
                self.forget_all(now);
                false
            }
            Err(refused) => {
                tracing::debug!("control surface: {}; read at every walk", refused.why);
                false
            }
        }
    }

    fn remember(&mut self, rel: PathBuf, listing: WatchedListing) {
        if self.watch.is_some() {
            self.listings.insert(rel, listing);
        }
    }

    /// The directories with an event since the drain `since`; None when
    /// that is not known (everything was forgotten since, or no watch).
    fn changed_since(&mut self, root: &Path, since: u64) -> Option<FxHashSet<PathBuf>> {
        self.drain(root);
        if self.watch.is_none() || self.reset_at > since {
            return None;
        }
        Some(
            self.changed
                .iter()
                .filter(|(_, at)| **at > since)
                .map(|(dir, _)| dir.clone())
                .collect(),
        )
    }
}

/// A snapshot's claim on its project's watch.
#[derive(Clone)]
struct WatchTicket {
    project: Arc<Mutex<ProjectWatch>>,
    /// The drain the walk began with.
    drain: u64,
}

impl std::fmt::Debug for WatchTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WatchTicket(drain {})", self.drain)
    }
}

type WatchedProjects = VecDeque<(PathBuf, Arc<Mutex<ProjectWatch>>)>;

fn watched_projects() -> &'static Mutex<WatchedProjects> {
    static PROJECTS: std::sync::OnceLock<Mutex<WatchedProjects>> = std::sync::OnceLock::new();
    PROJECTS.get_or_init(Default::default)
}

/// The watch of the project at `root` (canonical), made on first use; at
/// most [`WALK_CACHE_PROJECTS`] are kept (the least recently walked gives
/// way, and its next walk reads everything).
fn watched_project(root: &Path) -> Arc<Mutex<ProjectWatch>> {
    watched_project_with(root, MAX_SURFACE_WATCHED_DIRS)
}

fn watched_project_with(root: &Path, max_dirs: usize) -> Arc<Mutex<ProjectWatch>> {
    let mut projects = crate::util::sync::lock(watched_projects());
    let project = match projects.iter().position(|(r, _)| r == root) {
        Some(at) => projects.remove(at).map(|(_, p)| p),
        None => None,
    }
    .unwrap_or_else(|| Arc::new(Mutex::new(ProjectWatch::new(max_dirs))));
    if projects.len() >= WALK_CACHE_PROJECTS {
        projects.pop_back();
    }
    projects.push_front((root.to_path_buf(), project.clone()));
    project
}

impl SurfaceSnapshot {
    /// After the run: every repository git would accept that the run
    /// created (a `.git` pointer file, a `.git` directory, a bare
    /// repository's `HEAD` + `objects/` + `refs/`), found by reading again
    /// only the directories whose status-change time moved. A new pointer
    /// file is removed (it makes git on the host use whatever repository
    /// it names); in a new repository directory, a configuration naming
    /// programs, hooks, a `commondir` redirect and in-progress state are
    /// removed, so a fresh `git init` or `git clone` stays as it is.
    ///
    /// `changed`: the directories with an event since the walk, when the
    /// watch knows ([`Self::changed_since_walk`]; a watched directory
    /// without one is unchanged and not even stat'ed); otherwise each
    /// directory's status-change time says.
    fn sweep_planted_repositories(&self, changed: Option<FxHashSet<PathBuf>>) -> Vec<Undone> {
        let mut undone = Vec::new();
        // Each directory with whether it is new by its parent's record: a
        // directory the walk before the run did not see and that is not
        // new lay past the walk's limit, and its past is unknown.
        let mut queue: VecDeque<(PathBuf, bool)> = VecDeque::new();
        // When the watch saw every directory of the walk, only those with
        // an event (and what is new beneath them) can hold anything new:
        // the rest of the tree is not even visited in memory.
        let only_changed = self.all_watched && changed.is_some();
        match &changed {
            Some(changed) if only_changed => {
                let mut dirs: Vec<&PathBuf> = changed
                    .iter()
                    .filter(|d| self.seen.contains_key(*d))
                    .collect();
                dirs.sort();
                queue.extend(dirs.into_iter().map(|d| (d.clone(), false)));
            }
            _ => queue.push_back((PathBuf::new(), false)),
        }
        let mut walked = 0usize;
        let mut judged = 0usize;
        while let Some((rel, fresh)) = queue.pop_front() {
            walked += 1;
            if walked > MAX_WALKED_DIRS {
                break;
            }
            let before = self.seen.get(&rel);
            if let (Some(seen), Some(changed)) = (before, &changed) {
                if seen.watched && !changed.contains(&rel) {
                    queue.extend(seen.subdirs.iter().map(|d| (rel.join(d), false)));
                    continue;
                }
            }
            // Only real directories are queued (no symlink is followed), and
            // nothing runs in the sandbox any more to swap one in.
            let abs = self.root.join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&abs) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let ctime = (meta.ctime(), meta.ctime_nsec());
            // A watched directory with an event is read whatever its time.
            let by_events = changed.is_some() && before.is_some_and(|seen| seen.watched);
            match before {
                Some(seen) if !by_events && seen.ctime == ctime => {
                    queue.extend(seen.subdirs.iter().map(|d| (rel.join(d), false)));
                    continue;
                }
                Some(_) => {}
                None if fresh => {}
                None => continue,
            }
            let Ok(rd) = std::fs::read_dir(&abs) else {
                continue;
            };
            let mut names: HashSet<String> = HashSet::new();
            for e in rd.flatten() {
                let Ok(name) = e.file_name().into_string() else {
                    continue;
                };
                if e.file_type().is_ok_and(|t| t.is_dir()) && name != ".git" {
                    let new = before.is_none_or(|b| !b.subdirs.iter().any(|d| *d == *name));
                    // A directory the walk saw is queued already when it
                    // had an event (only_changed), and needs no look if not.
                    if new || !only_changed {
                        queue.push_back((rel.join(&name), new));
                    }
                }
                names.insert(name);
            }
            let mut candidates = Vec::new();
            if names.contains(".git") {
                candidates.push(rel.join(".git"));
            }
            let borrowed: HashSet<&str> = names.iter().map(String::as_str).collect();
            if looks_bare(&borrowed) && !rel.as_os_str().is_empty() {
                candidates.push(rel.clone());
            }
            for repo in candidates {
                if self.repositories.contains(&repo) {
                    continue;
                }
                judged += 1;
                if judged > MAX_NESTED_REPOSITORY_CONFIGS {
                    tracing::warn!(
                        "a run created more than {MAX_NESTED_REPOSITORY_CONFIGS} repositories in \
                         {}: the rest are not judged",
                        self.root.display()
                    );
                    return undone;
                }
                undone.extend(self.neutralise_repository(&repo));
            }
        }
        undone
    }

    /// Remove what makes a repository the run created run programs on the
    /// host (see [`Self::sweep_planted_repositories`]).
    fn neutralise_repository(&self, repo: &Path) -> Vec<Undone> {
        let mut undone = Vec::new();
        let Some(abs) = self.inside_root_dir(repo) else {
            return undone;
        };
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            return undone;
        };
        let mut remove = |rel: PathBuf, why: String| {
            if let Some(p) = self.inside_root(&rel) {
                if remove_any(&p).is_ok() {
                    undone.push(Undone {
                        path: shown(&rel),
                        what: "removed",
                        why,
                    });
                }
            }
        };
        if !meta.is_dir() {
            remove(
                repo.to_path_buf(),
                "a `.git` pointer file the run created makes git on the host use the \
                 repository it names, with that repository's configuration and hooks"
                    .into(),
            );
            return undone;
        }
        if let Some(danger) = crate::control_surface::repository_config_danger(&abs.join("config"))
        {
            remove(
                repo.join("config"),
                format!(
                    "the configuration of a repository the run created names programs git \
                     runs on the host: {danger}"
                ),
            );
        }
        for name in ["config.worktree", "commondir"] {
            if std::fs::symlink_metadata(abs.join(name)).is_ok() {
                remove(
                    repo.join(name),
                    format!(
                        "`{name}` in a repository the run created redirects git's configuration"
                    ),
                );
            }
        }
        if let Ok(hooks) = std::fs::read_dir(abs.join("hooks")) {
            for e in hooks.flatten() {
                let name = e.file_name();
                if !name.to_string_lossy().ends_with(".sample") {
                    remove(
                        repo.join("hooks").join(&name),
                        "a hook in a repository the run created runs on the host at the next \
                         commit, checkout or push"
                            .into(),
                    );
                }
            }
        }
        for entry in CONTROL_SURFACE {
            let Some(rest) = entry.path.strip_prefix(".git/") else {
                continue;
            };
            let in_progress = !matches!(
                rest,
                "config"
                    | "hooks"
                    | "info"
                    | "config.worktree"
                    | "commondir"
                    | "worktrees"
                    | "modules"
            );
            if in_progress && std::fs::symlink_metadata(abs.join(rest)).is_ok() {
                remove(repo.join(rest), entry.why.to_string());
            }
        }
        undone
    }

    /// `root/rel` when it is a real directory inside the root (no symlink
    /// on the way out of the project).
    fn inside_root_dir(&self, rel: &Path) -> Option<PathBuf> {
        if rel.as_os_str().is_empty() {
            return Some(self.root.clone());
        }
        self.inside_root(rel)
    }
}

/// Remove a file, a symlink (not what it points to) or a directory tree.
fn remove_any(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        // std's remove_dir_all does not follow symlinks inside the tree.
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// The directories strictly between the root and `rel`: `a`, `a/b` for
/// `a/b/c`.
fn ancestors_beneath(rel: &Path) -> Vec<PathBuf> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect();
    (1..parts.len())
        .map(|n| parts[..n].iter().collect::<PathBuf>())
        .collect()
}

fn push_unique(list: &mut Vec<PathBuf>, p: PathBuf) {
    if !list.contains(&p) {
        list.push(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_paths_are_bound_and_their_parents_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(root.join(".passepartout/skills")).unwrap();
        std::fs::write(root.join(".envrc"), "").unwrap();
        let snap = SurfaceSnapshot::take(root);
        assert_eq!(
            snap.mounts(),
            &SurfaceMounts {
                pins: vec![root.join(".git")],
                read_only: vec![
                    root.join(".passepartout"),
                    root.join(".git/config"),
                    root.join(".git/hooks"),
                    root.join(".envrc"),
                ],
                masked: vec![],
            }
        );
    }

    #[test]
    fn nested_repositories_and_control_files_are_bound_at_any_depth() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("docs/.git/hooks")).unwrap();
        std::fs::write(root.join("docs/.git/config"), "").unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/.envrc"), "").unwrap();
        // Not entered: a repository's insides, a symlink out.
        std::fs::create_dir_all(root.join(".git/objects/.envrc")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join(".envrc"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        assert_eq!(
            snap.mounts(),
            &SurfaceMounts {
                pins: vec![
                    root.join(".git"),
                    root.join("docs"),
                    root.join("a"),
                    root.join("docs/.git"),
                    root.join("a/b"),
                ],
                read_only: vec![
                    root.join("docs/.git/config"),
                    root.join("docs/.git/hooks"),
                    root.join("a/b/.envrc"),
                ],
                masked: vec![],
            }
        );
    }

    /// The differential check is live: a reused walk that lost a nested
    /// repository's control directory (a cache bug, planted here) makes
    /// the next snapshot fail instead of leaving `docs/.git/hooks`
    /// writable; the untampered cache passes it.
    #[test]
    fn a_stale_cached_walk_fails_the_differential_check() {
        assert!(differential_checks(), "on in every debug build");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("docs/.git/hooks")).unwrap();
        std::fs::write(root.join("docs/.git/config"), "").unwrap();
        let first = SurfaceSnapshot::take(root);
        let again = SurfaceSnapshot::take(root);
        assert!(again.reused_last_walk(), "inotify watches the project here");
        assert_eq!(first.mounts(), again.mounts());
        let canonical = root.canonicalize().unwrap();
        {
            let project = watched_project(&canonical);
            let mut state = crate::util::sync::lock(&project);
            let walk = state.last_walk.as_mut().expect("a walk kept for reuse");
            walk.control_dirs.clear();
            walk.repositories.clear();
        }
        let stale = std::panic::catch_unwind(|| SurfaceSnapshot::take(root));
        let message = stale.expect_err("the stale walk must not pass");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("disagrees with a fresh walk"), "{text}");
    }

    #[test]
    fn the_walk_cache_sees_every_change_to_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("c/x.rs"), "").unwrap();
        // Older than the tick the cache distrusts: these listings are kept.
        std::thread::sleep(TRUSTED_AGE + std::time::Duration::from_millis(100));
        let first = SurfaceSnapshot::take(root);
        assert!(first.mounts().read_only.is_empty());
        let again = SurfaceSnapshot::take(root);
        assert_eq!(
            first.mounts(),
            again.mounts(),
            "the same tree, the same mounts"
        );
        assert_eq!(first.seen.len(), again.seen.len());
        // Each change moves its folder's time: seen at once.
        std::fs::write(root.join("a/b/.envrc"), "").unwrap();
        std::fs::write(root.join("c/.env"), "K=v").unwrap();
        std::fs::create_dir_all(root.join("c/d/.git")).unwrap();
        let after = SurfaceSnapshot::take(root);
        assert!(
            after.mounts().read_only.contains(&root.join("a/b/.envrc")),
            "{after:?}"
        );
        assert_eq!(after.mounts().masked, vec![root.join("c/.env")]);
        assert!(after.repositories.contains(Path::new("c/d/.git")));
        // Removed again: gone from the snapshot too.
        std::fs::remove_file(root.join("a/b/.envrc")).unwrap();
        let last = SurfaceSnapshot::take(root);
        assert!(!last.mounts().read_only.contains(&root.join("a/b/.envrc")));
    }

    /// Under the project's watch an unchanged tree is not stat'ed at all,
    /// and what the person makes deep in it between two walks is seen.
    #[test]
    fn the_watch_vouches_for_unchanged_folders_and_sees_a_deep_new_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c/d")).unwrap();
        std::fs::create_dir_all(root.join("e/f")).unwrap();
        let first = SurfaceSnapshot::take(root);
        assert!(first.watched.is_some(), "inotify is available here");
        assert_eq!(first.looked_at, 7);
        let again = SurfaceSnapshot::take(root);
        assert_eq!(again.looked_at, 0, "nothing changed: nothing stat'ed");
        assert_eq!(first.mounts(), again.mounts());
        // The person: `git init` deep in the walked tree, a `.envrc`.
        git(&root.join("a/b/c/d"), &["init", "-q", "repo"]);
        std::fs::write(root.join("e/f/.envrc"), "").unwrap();
        let after = SurfaceSnapshot::take(root);
        let ro = &after.mounts().read_only;
        assert!(
            ro.contains(&root.join("a/b/c/d/repo/.git/config")),
            "{ro:?}"
        );
        assert!(ro.contains(&root.join("e/f/.envrc")), "{ro:?}");
        assert_eq!(after.looked_at, 3, "a/b/c/d and e/f changed, repo is new");
        // A folder made and one removed: seen too.
        std::fs::create_dir_all(root.join("e/g/.passepartout")).unwrap();
        std::fs::remove_dir_all(root.join("a/b/c/d/repo")).unwrap();
        let last = SurfaceSnapshot::take(root);
        let ro = &last.mounts().read_only;
        assert!(ro.contains(&root.join("e/g/.passepartout")), "{ro:?}");
        assert!(!ro.iter().any(|p| p.starts_with(root.join("a/b/c/d/repo"))));
    }

    /// No event since the last walk: its result is taken whole, and what
    /// the watch cannot see (inside a nested `.git`) is still looked at
    /// every time; an event sends the next snapshot back to the walk.
    #[test]
    fn an_unchanged_tree_reuses_the_last_walk_and_still_looks_inside_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/.env"), "K=v").unwrap();
        git(&root.join("a"), &["init", "-q", "lib"]);
        std::fs::remove_dir_all(root.join("a/lib/.git/hooks")).unwrap();
        let first = SurfaceSnapshot::take(root);
        assert!(first.watched.is_some(), "inotify is available here");
        assert!(!first.reused_last_walk());
        let again = SurfaceSnapshot::take(root);
        assert!(again.reused_last_walk() && again.looked_at == 0);
        assert_eq!(first.mounts(), again.mounts());
        assert_eq!(first.repositories, again.repositories);
        assert!(Arc::ptr_eq(&first.seen, &again.seen), "shared, not copied");
        // Inside `.git`: no event, still seen.
        std::fs::create_dir_all(root.join("a/lib/.git/hooks")).unwrap();
        std::fs::remove_file(root.join("a/lib/.git/config")).unwrap();
        std::os::unix::fs::symlink("../../.env", root.join("a/lib/.git/config")).unwrap();
        let inside = SurfaceSnapshot::take(root);
        assert!(inside.reused_last_walk());
        let ro = &inside.mounts().read_only;
        assert!(ro.contains(&root.join("a/lib/.git/hooks")), "{ro:?}");
        assert!(
            ro.contains(&root.join("a/.env")),
            "the link's target: {ro:?}"
        );
        assert_eq!(inside.links.len(), 1, "{:?}", inside.links);
        // An event: walked again (only the folder with it), then reused.
        std::fs::write(root.join("a/b/c/.envrc"), "").unwrap();
        let after = SurfaceSnapshot::take(root);
        assert!(!after.reused_last_walk());
        assert_eq!(after.looked_at, 1);
        assert!(after
            .mounts()
            .read_only
            .contains(&root.join("a/b/c/.envrc")));
        let next = SurfaceSnapshot::take(root);
        assert!(next.reused_last_walk());
        assert_eq!(after.mounts(), next.mounts());
        // A sweep in between (its drain finds the event): not reused.
        let before_sweep = SurfaceSnapshot::take(root);
        std::fs::create_dir_all(root.join("a/b/new")).unwrap();
        assert!(before_sweep.sweep().is_empty());
        let after_sweep = SurfaceSnapshot::take(root);
        assert!(!after_sweep.reused_last_walk());
        assert!(after_sweep.seen.contains_key(Path::new("a/b/new")));
    }

    /// After a run under the watch, a repository it planted deep in an
    /// unchanged tree is found from the events alone.
    #[test]
    fn a_repository_planted_under_the_watch_is_found_by_its_events() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::create_dir_all(root.join("x/y")).unwrap();
        SurfaceSnapshot::take(root);
        let snap = SurfaceSnapshot::take(root);
        assert!(snap.watched.is_some() && snap.looked_at == 0);
        git(&root.join("a/b/c"), &["init", "-q", "bad"]);
        git(
            &root.join("a/b/c/bad"),
            &["config", "core.fsmonitor", "./x.sh"],
        );
        std::fs::write(root.join("x/y/.git"), "gitdir: ../../a/b/c/bad/.git\n").unwrap();
        let mut undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        undone.sort();
        assert_eq!(undone, vec!["a/b/c/bad/.git/config", "x/y/.git"]);
    }

    /// Make more events than the kernel queues for one instance.
    fn overflow(root: &Path) {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16_384);
        assert!(
            max <= 1 << 20,
            "a queue this long is not overflowed in a test"
        );
        let f = root.join("churn");
        for _ in 0..max / 2 + 8 {
            std::fs::write(&f, "").unwrap();
            std::fs::remove_file(&f).unwrap();
        }
    }

    /// A queue overflow loses events: the next walk reads every folder,
    /// and a sweep for a walk before it judges by status-change times.
    #[test]
    fn a_queue_overflow_falls_back_to_the_whole_walk() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        assert!(snap.watched.is_some());
        overflow(root);
        git(&root.join("a/b/c"), &["init", "-q", "bad"]);
        git(
            &root.join("a/b/c/bad"),
            &["config", "core.fsmonitor", "./x.sh"],
        );
        let undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        assert_eq!(undone, vec!["a/b/c/bad/.git/config"]);

        let rewalked = SurfaceSnapshot::take(root);
        assert_eq!(rewalked.looked_at, 5, "every folder read and watched again");
        assert_eq!(SurfaceSnapshot::take(root).looked_at, 0);
        overflow(root);
        std::fs::write(root.join("a/b/c/.envrc"), "").unwrap();
        let after = SurfaceSnapshot::take(root);
        assert!(
            after
                .mounts()
                .read_only
                .contains(&root.join("a/b/c/.envrc")),
            "{after:?}"
        );
        assert_eq!(after.looked_at, 5, "every folder read again");
        assert!(after.watched.is_some(), "and watched again");
        assert_eq!(SurfaceSnapshot::take(root).looked_at, 0);
    }

    /// Past the watch limit a project is walked by stat every time, as
    /// without inotify, and what changes is still seen.
    #[test]
    fn past_the_watch_limit_the_project_is_walked_by_stat() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        watched_project_with(&root.canonicalize().unwrap(), 2);
        let first = SurfaceSnapshot::take(root);
        assert!(first.watched.is_none());
        assert_eq!(first.looked_at, 4);
        assert_eq!(SurfaceSnapshot::take(root).looked_at, 4);
        std::fs::write(root.join("a/b/.envrc"), "").unwrap();
        let after = SurfaceSnapshot::take(root);
        assert!(after.mounts().read_only.contains(&root.join("a/b/.envrc")));
        git(root, &["init", "-q", "c/planted"]);
        git(
            &root.join("c/planted"),
            &["config", "core.fsmonitor", "./x.sh"],
        );
        let undone: Vec<String> = after.sweep().iter().map(|u| u.path.clone()).collect();
        assert_eq!(undone, vec!["c/planted/.git/config"]);
    }

    #[test]
    fn a_git_pointer_into_the_project_protects_the_repository_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("modules/lib/hooks")).unwrap();
        std::fs::write(root.join("modules/lib/config"), "").unwrap();
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::write(root.join("lib/.git"), "gitdir: ../modules/lib\n").unwrap();
        let snap = SurfaceSnapshot::take(root);
        let ro = &snap.mounts().read_only;
        assert!(ro.contains(&root.join("lib/.git")), "{ro:?}");
        assert!(ro.contains(&root.join("modules/lib/config")), "{ro:?}");
        assert!(ro.contains(&root.join("modules/lib/hooks")), "{ro:?}");
        assert!(snap.mounts().pins.contains(&root.join("modules/lib")));
    }

    #[test]
    fn redactable_files_are_found_at_any_depth_and_new_ones_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/c/d/e")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        for file in [
            ".env",
            "a/b/c/d/e/secrets.yaml",
            "src/secrets.rs",
            ".env.example",
        ] {
            std::fs::write(root.join(file), "TOKEN=abcdefgh12345\n").unwrap();
        }
        let sorted = |files: Arc<Vec<PathBuf>>| {
            let mut files = files.to_vec();
            files.sort();
            files
        };
        let first = redactable_files(root);
        assert_eq!(
            sorted(first.clone()),
            [
                PathBuf::from(".env"),
                PathBuf::from("a/b/c/d/e/secrets.yaml")
            ]
        );
        // Nothing changed: the last walk's list, not a new one.
        assert!(Arc::ptr_eq(&first, &redactable_files(root)));
        std::fs::create_dir_all(root.join("x/y")).unwrap();
        std::fs::write(root.join("x/y/.envrc"), "export A=b\n").unwrap();
        std::fs::write(root.join("a/b/c/d/e/api_token"), "x\n").unwrap();
        assert_eq!(
            sorted(redactable_files(root)),
            [
                PathBuf::from(".env"),
                PathBuf::from("a/b/c/d/e/api_token"),
                PathBuf::from("a/b/c/d/e/secrets.yaml"),
                PathBuf::from("x/y/.envrc")
            ]
        );
    }

    #[test]
    fn secrets_are_found_at_any_depth_and_examples_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/.ssh")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        for f in [
            ".env",
            "a/.env.prod",
            "a/.ssh/id_rsa",
            "a/tls.pem",
            ".env.example",
            "a/env",
            ".git/x.key",
        ] {
            std::fs::write(root.join(f), "").unwrap();
        }
        let snap = SurfaceSnapshot::take(root);
        assert_eq!(
            snap.mounts().masked,
            vec![
                root.join(".env"),
                root.join("a/.env.prod"),
                root.join("a/tls.pem"),
                root.join("a/.ssh/id_rsa"),
            ]
        );
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn in_progress_state_and_files_the_repositorys_settings_name_are_protected() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        git(root, &["config", "core.hooksPath", ".husky"]);
        git(
            root,
            &["config", "diff.py.textconv", "python3 tools/conv.py"],
        );
        std::fs::create_dir_all(root.join(".husky")).unwrap();
        std::fs::create_dir_all(root.join(".git/rebase-merge")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        let ro = &snap.mounts().read_only;
        assert!(ro.contains(&root.join(".husky")), "{ro:?}");
        assert!(ro.contains(&root.join(".git/rebase-merge")), "{ro:?}");
        // Missing ones are swept when the run creates them.
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("tools/conv.py"), "evil").unwrap();
        std::fs::write(root.join(".git/MERGE_HEAD"), "evil").unwrap();
        let undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        assert!(undone.contains(&"tools/conv.py".to_string()), "{undone:?}");
        assert!(
            undone.contains(&".git/MERGE_HEAD".to_string()),
            "{undone:?}"
        );
        assert!(!root.join("tools/conv.py").exists());
    }

    #[test]
    fn a_bare_repository_in_the_tree_is_protected_like_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["store/objects", "store/refs", "store/hooks"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("store/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("store/config"), "").unwrap();
        let snap = SurfaceSnapshot::take(root);
        let ro = &snap.mounts().read_only;
        assert!(ro.contains(&root.join("store/config")), "{ro:?}");
        assert!(ro.contains(&root.join("store/hooks")), "{ro:?}");
        assert!(snap.mounts().pins.contains(&root.join("store")));
    }

    #[test]
    fn repositories_planted_during_a_run_lose_what_runs_programs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("old")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        // A fresh `git init` stays; one with an fsmonitor loses its config.
        git(root, &["init", "-q", "fresh"]);
        git(root, &["init", "-q", "old/bad"]);
        git(
            &root.join("old/bad"),
            &["config", "core.fsmonitor", "./x.sh"],
        );
        std::fs::write(root.join("old/bad/.git/hooks/post-checkout"), "evil").unwrap();
        // A pointer file and a bare-shaped folder with a program.
        for d in ["evil/objects", "evil/refs", "sub"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("evil/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("evil/config"), "[core]\n\tsshCommand = ./x.sh\n").unwrap();
        std::fs::write(root.join("sub/.git"), "gitdir: ../evil\n").unwrap();
        let mut undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        undone.sort();
        assert_eq!(
            undone,
            vec![
                "evil/config",
                "old/bad/.git/config",
                "old/bad/.git/hooks/post-checkout",
                "sub/.git"
            ]
        );
        assert!(root.join("fresh/.git/config").exists());
        assert!(root.join("old/bad/.git/HEAD").exists());
    }

    #[test]
    fn a_git_file_is_bound_read_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        let snap = SurfaceSnapshot::take(dir.path());
        assert_eq!(snap.mounts().read_only, vec![dir.path().join(".git")]);
        assert!(snap.mounts().pins.is_empty());
    }

    #[test]
    fn sweep_removes_what_appeared_and_keeps_a_new_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "x").unwrap();
        let snap = SurfaceSnapshot::take(root);
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
        std::fs::create_dir_all(root.join(".passepartout/skills")).unwrap();
        std::fs::write(root.join(".passepartout/skills/shell.org"), "evil").unwrap();
        let undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        assert_eq!(undone, vec![".passepartout", ".git/config", ".git/hooks"]);
        assert!(!root.join(".passepartout").exists());
        assert!(!root.join(".git/config").exists());
        assert!(root.join(".git/objects").is_dir());
        assert!(root.join("keep.txt").exists());
    }

    #[test]
    fn a_root_entry_made_during_a_run_under_the_watch_is_swept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("plain"), "x").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        // The second snapshot takes the first's walk whole (no event
        // since): the root's missing entries are judged by its events.
        let _ = SurfaceSnapshot::take(root).sweep();
        let snap = SurfaceSnapshot::take(root);
        assert!(snap.reused_last_walk() && snap.watched.is_some());
        std::fs::write(root.join(".envrc"), "evil").unwrap();
        std::fs::create_dir(root.join(".vscode")).unwrap();
        std::fs::rename(root.join("plain"), root.join(".zshrc")).unwrap();
        std::fs::hard_link(root.join(".zshrc"), root.join(".profile")).unwrap();
        // Deeper: not a root entry, judged as before.
        std::fs::write(root.join("sub/.envrc"), "fine").unwrap();
        let mut undone: Vec<String> = snap.sweep().iter().map(|u| u.path.clone()).collect();
        undone.sort();
        assert_eq!(undone, vec![".envrc", ".profile", ".vscode", ".zshrc"]);
        for gone in [".envrc", ".vscode", ".zshrc", ".profile"] {
            assert!(!root.join(gone).exists(), "{gone} left");
        }
        // A root without an event since: nothing to remove, and none of
        // its missing entries looked at.
        let snap = SurfaceSnapshot::take(root);
        assert_eq!(snap.sweep_counted(), (vec![], 0));
        // An event in the root: each is looked at again.
        let snap = SurfaceSnapshot::take(root);
        std::fs::write(root.join("other"), "x").unwrap();
        let (undone, looked_at) = snap.sweep_counted();
        assert!(undone.is_empty());
        assert_eq!(looked_at, snap.missing.len());
    }

    #[test]
    fn entries_behind_a_symlinked_git_are_bound_where_they_really_are() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real-git/hooks")).unwrap();
        std::fs::write(root.join("real-git/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink("real-git", root.join(".git")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        let ro = &snap.mounts().read_only;
        assert!(ro.contains(&root.join("real-git/config")), "{ro:?}");
        assert!(ro.contains(&root.join("real-git/hooks")), "{ro:?}");
        assert!(!ro.contains(&root.join(".git/config")), "{ro:?}");
        assert!(snap.mounts().pins.contains(&root.join("real-git")));
    }

    #[test]
    fn sweep_never_follows_a_symlink_out_of_the_project() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("hooks")).unwrap();
        std::fs::write(outside.path().join("config"), "theirs").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let snap = SurfaceSnapshot::take(dir.path());
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".git")).unwrap();
        let undone = snap.sweep();
        assert_eq!(undone.len(), 1, "{undone:?}");
        assert_eq!(undone[0].path, ".git");
        assert!(outside.path().join("config").exists());
        assert!(outside.path().join("hooks").is_dir());
        assert!(std::fs::symlink_metadata(dir.path().join(".git")).is_err());
    }

    #[test]
    fn sweep_restores_a_replaced_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("envrc.shared"), "ok").unwrap();
        std::os::unix::fs::symlink("envrc.shared", root.join(".envrc")).unwrap();
        let snap = SurfaceSnapshot::take(root);
        assert_eq!(snap.mounts().read_only, vec![root.join("envrc.shared")]);
        std::fs::remove_file(root.join(".envrc")).unwrap();
        std::fs::write(root.join(".envrc"), "evil").unwrap();
        let undone = snap.sweep();
        assert_eq!(undone[0].what, "restored the symlink");
        assert_eq!(
            std::fs::read_link(root.join(".envrc")).unwrap(),
            PathBuf::from("envrc.shared")
        );
    }
}
