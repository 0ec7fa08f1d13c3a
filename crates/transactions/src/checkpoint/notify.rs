//! Which directories changed since the last snapshot, as the kernel saw it
//! (inotify), so that a snapshot walks only those — or nothing at all.
//!
//! Walking a tree costs one `statx` per file, twice per action, which adds
//! up in a large project (`examples/bench_checkpoint`). The walk of a
//! full snapshot arms one inotify watch per directory it enters, *before*
//! it reads that directory, so every later change in it is queued by the
//! kernel. The next snapshot drains the queue: nothing queued means nothing
//! changed (no walk); a few directories with file events means only those
//! are read again. Writes from inside the sandbox are seen: a bind mount
//! shares the inodes the watches are on.
//!
//! Anything the incremental path does not model sends the next snapshot
//! back to a full walk (which re-arms): a queue overflow, a watch the kernel
//! dropped, a directory created, removed or moved, a `.gitignore` or
//! `.git/info/exclude` changed, a hard-linked file (a write through another
//! link is reported on the other link's directory), a watch limit reached,
//! other snapshot settings. So the fast path is an optimisation that can
//! only be skipped, never wrong in a way a full walk would not also be.
//!
//! Writes through a shared memory map raise no modify event, but opening a
//! file for writing raises `IN_CLOSE_WRITE` when its last reference goes,
//! which happens before the action's processes are gone.
//!
//! Bounded: at most [`MAX_WATCHED_TREES`] trees are watched (one inotify
//! instance each), each with at most [`MAX_WATCHED_DIRS`] directories; past
//! either, snapshots simply walk.
//!
//! The inotify part (arming, draining, what no watch models) is
//! [`crate::util::dir_watch`], shared with the sandbox's control surface;
//! this module adds what a snapshot models and which state a watch vouches
//! for.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::util::dir_watch::{self, DirWatch, ReadFlags, WatchFlags};

/// Trees watched at once (each an inotify instance; the kernel's default
/// limit is 128 per user).
pub const MAX_WATCHED_TREES: usize = 16;

/// Directories watched per tree; a larger tree is walked every time.
pub const MAX_WATCHED_DIRS: usize = 16_384;

/// The events that can change what a snapshot records.
fn mask() -> WatchFlags {
    dir_watch::entry_events() | WatchFlags::MODIFY | WatchFlags::ATTRIB | WatchFlags::CLOSE_WRITE
}

/// The relative path standing for `.git/info` (never a real work-tree
/// directory name: it holds a NUL).
const EXCLUDE_DIR: &str = "\0info";

/// What a snapshot may do instead of a full walk.
#[derive(Debug, PartialEq, Eq)]
pub enum Since {
    /// Nothing changed since the state the watch was armed for.
    Nothing,
    /// Only files directly in these directories (relative, "" the root).
    Dirs(BTreeSet<String>),
}

/// The settings a watch was armed under: a snapshot with others walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Armed {
    /// `taken_ns` and tree of the state the watch vouches for.
    pub taken_ns: i64,
    pub tree: String,
    pub untracked_cap: u64,
    pub precious: Vec<String>,
    /// Files left out for their size in that state.
    pub skipped: BTreeSet<String>,
}

/// One tree's watches.
struct TreeWatch {
    watch: DirWatch<String>,
    armed: Option<Armed>,
}

fn watches() -> &'static Mutex<HashMap<PathBuf, TreeWatch>> {
    static WATCHES: OnceLock<Mutex<HashMap<PathBuf, TreeWatch>>> = OnceLock::new();
    WATCHES.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<PathBuf, TreeWatch>> {
    watches()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A fresh set of watches for a full walk of the tree whose store is
/// `git_dir`: the walk adds one per directory with [`Arming::watch`].
pub struct Arming {
    watch: Option<DirWatch<String>>,
    failed: std::sync::atomic::AtomicBool,
}

impl Arming {
    /// Start arming (None: no watch possible; the walk goes on without).
    pub fn start(work_tree: &Path) -> Arming {
        let watch = DirWatch::new(mask(), MAX_WATCHED_DIRS, "MAX_WATCHED_DIRS")
            .map_err(|e| tracing::debug!("checkpoint: no inotify ({e}); every snapshot walks"))
            .ok();
        let arming = Arming {
            watch,
            failed: Default::default(),
        };
        // `.git/info/exclude` decides what is ignored: any change there
        // means a full walk.
        let info = work_tree.join(".git/info");
        if info.is_dir() {
            arming.watch(&info, EXCLUDE_DIR);
        }
        arming
    }

    /// Watch one directory; call before reading it.
    pub fn watch(&self, abs: &Path, rel: &str) {
        let Some(watch) = &self.watch else { return };
        if self.failed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Err(refused) = watch.watch(abs, &rel.to_string()) {
            self.fail(&refused.why);
        }
    }

    /// Give up watching this tree (the walk itself goes on).
    pub fn fail(&self, why: &str) {
        if !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!("checkpoint: not watching this tree ({why}); its snapshots walk");
        }
    }

    /// Keep the watches for `git_dir`, vouching for `armed` (a walk that
    /// could not watch everything keeps none).
    pub fn finish(self, git_dir: &Path, armed: Armed) {
        let mut map = lock();
        map.remove(git_dir);
        let Some(watch) = self.watch else { return };
        if self.failed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if map.len() >= MAX_WATCHED_TREES {
            // Bounded: one of the watched trees gives way (its next
            // snapshot walks and watches it again).
            if let Some(k) = map.keys().next().cloned() {
                map.remove(&k);
            }
        }
        map.insert(
            git_dir.to_path_buf(),
            TreeWatch {
                watch,
                armed: Some(armed),
            },
        );
    }
}

/// What changed in the tree of `git_dir` since the state `key` describes
/// (its `skipped` is ignored), with the files that state left out for
/// their size; None: walk the whole tree. Drains the queue; a tree found
/// unusable is forgotten.
pub fn since(git_dir: &Path, key: &Armed) -> Option<(Since, BTreeSet<String>)> {
    let mut map = lock();
    let watch = map.get_mut(git_dir)?;
    let vouches = watch.armed.as_ref().is_some_and(|a| {
        a.taken_ns == key.taken_ns
            && a.tree == key.tree
            && a.untracked_cap == key.untracked_cap
            && a.precious == key.precious
    });
    if !vouches {
        map.remove(git_dir);
        return None;
    }
    let skipped = watch
        .armed
        .as_ref()
        .map(|a| a.skipped.clone())
        .unwrap_or_default();
    match drain(watch) {
        Some(dirs) if dirs.is_empty() => Some((Since::Nothing, skipped)),
        Some(dirs) => Some((Since::Dirs(dirs), skipped)),
        None => {
            map.remove(git_dir);
            None
        }
    }
}

/// After a snapshot that used [`since`]: the watch now vouches for this
/// state.
pub fn rearm(git_dir: &Path, armed: Armed) {
    if let Some(w) = lock().get_mut(git_dir) {
        w.armed = Some(armed);
    }
}

/// Stop watching a tree (its next snapshot walks).
pub fn forget(git_dir: &Path) {
    lock().remove(git_dir);
}

/// The directories with file events, or None when something happened the
/// incremental path does not model: besides what no watch models
/// ([`DirWatch::drain`]), a directory created, removed or moved, and a
/// change to `.gitignore` or `.git/info/exclude`.
fn drain(watch: &mut TreeWatch) -> Option<BTreeSet<String>> {
    let mut dirty = BTreeSet::new();
    let drained = watch.watch.drain(|dir, flags, name| {
        let modelled = !flags.contains(ReadFlags::ISDIR)
            && dir != EXCLUDE_DIR
            && name.is_none_or(|n| n.to_bytes() != b".gitignore");
        if modelled {
            dirty.insert(dir.clone());
        }
        modelled
    });
    match drained {
        Ok(()) => Some(dirty),
        Err(why) => {
            tracing::debug!("checkpoint: {why}; the next snapshot walks");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn armed(tree: &str) -> Armed {
        Armed {
            taken_ns: 1,
            tree: tree.into(),
            untracked_cap: 10,
            precious: vec![],
            skipped: BTreeSet::new(),
        }
    }

    fn arm(root: &Path, key: &Path, dirs: &[&str]) {
        let a = Arming::start(root);
        for d in dirs {
            a.watch(&root.join(d), d);
        }
        a.finish(key, armed("t"));
    }

    #[test]
    fn file_events_name_their_directory_and_structure_means_walk() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("w");
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::write(root.join("src/a.rs"), "a").unwrap();
        let key = t.path().join("store");
        arm(&root, &key, &["", "src", "src/deep"]);
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), Some(Since::Nothing));

        std::fs::write(root.join("src/a.rs"), "b").unwrap();
        std::fs::write(root.join("new.txt"), "n").unwrap();
        let expect: BTreeSet<String> = ["", "src"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        assert_eq!(
            since(&key, &armed("t")).map(|x| x.0),
            Some(Since::Dirs(expect))
        );
        // Drained: nothing new since.
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), Some(Since::Nothing));

        // A state the watch does not vouch for: walk (and the watch goes).
        assert_eq!(since(&key, &armed("other")).map(|x| x.0), None);
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), None);

        // A directory created, or a .gitignore changed: walk.
        arm(&root, &key, &["", "src", "src/deep"]);
        std::fs::create_dir(root.join("src/new")).unwrap();
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), None);
        arm(&root, &key, &["", "src", "src/deep"]);
        std::fs::write(root.join("src/.gitignore"), "*.o\n").unwrap();
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), None);
        arm(&root, &key, &["", "src", "src/deep"]);
        std::fs::remove_dir(root.join("src/deep")).unwrap();
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), None);
    }

    #[test]
    fn a_chmod_and_a_write_through_a_map_are_seen() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("w");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("x"), "x").unwrap();
        let key = t.path().join("store");
        arm(&root, &key, &[""]);
        std::fs::set_permissions(root.join("x"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            since(&key, &armed("t")),
            Some((Since::Dirs(_), _))
        ));
        // Opened for writing and closed without a write(2): still an event
        // (a shared map writes without one).
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .open(root.join("x"))
                .unwrap(),
        );
        assert!(matches!(
            since(&key, &armed("t")),
            Some((Since::Dirs(_), _))
        ));
    }

    #[test]
    fn an_exclude_file_change_means_walk() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("w");
        std::fs::create_dir_all(root.join(".git/info")).unwrap();
        let key = t.path().join("store");
        arm(&root, &key, &[""]);
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), Some(Since::Nothing));
        std::fs::write(root.join(".git/info/exclude"), "*.log\n").unwrap();
        assert_eq!(since(&key, &armed("t")).map(|x| x.0), None);
    }
}
