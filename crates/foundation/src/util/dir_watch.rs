//! Which directories of a tree changed since the last look, as the kernel
//! saw it (inotify), for walks that would otherwise stat every directory
//! every time: checkpoint snapshots (`checkpoint::notify`) and the sandbox's
//! control surface (`sandbox::surface`).
//!
//! The caller arms one watch per directory *before* it reads that
//! directory, so every later change in it is queued by the kernel; draining
//! the queue (non-blocking) then names the directories with events.
//! Anything a caller cannot model — a queue overflow, a watch the kernel
//! dropped (`IN_IGNORED`), a watched directory deleted, moved or unmounted,
//! an event for a watch it does not know, the same directory reached by two
//! paths — makes [`DirWatch::drain`] or [`DirWatch::watch`] fail with the
//! reason, and the caller walks the whole tree again: the fast path can only
//! be skipped, never be wrong.
//!
//! Bounded: at most `max_dirs` watches per instance (named in the error when
//! hit), and the kernel's own limits (`fs.inotify.max_user_watches`,
//! `max_queued_events`: an overflow is an error like any other).
//!
//! Why rustix's inotify and not the `notify` crate: `notify` delivers events
//! on a thread of its own, debounced, so "has everything up to now arrived?"
//! has no answer; draining the kernel queue synchronously does.

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rustix::fs::inotify::{self, CreateFlags};
pub use rustix::fs::inotify::{ReadFlags, WatchFlags};
use rustix::io::Errno;

/// One inotify instance and the directories it watches, by watch
/// descriptor, each with the name its caller gave it (`K`: a relative
/// path, as text or as a `PathBuf`).
pub struct DirWatch<K> {
    fd: OwnedFd,
    /// This instance's key in [`live`].
    id: u64,
    dirs: Mutex<HashMap<i32, K>>,
    mask: WatchFlags,
    max_dirs: usize,
    /// Named in the error when `max_dirs` is reached.
    limit_name: &'static str,
}

/// The events that change a directory's names or their kinds, and those
/// that say a watched directory itself went (which [`DirWatch::drain`]
/// does not model); no symlink followed, directories only. A caller that
/// cares for file contents adds the write events.
pub fn entry_events() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::ONLYDIR
}

/// Why the watch cannot vouch for the tree any more (the caller walks).
pub type Unmodelled = String;

/// Why one directory could not be watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What happened, naming the limit when one was hit.
    pub why: String,
    /// A limit was hit (this instance's or the kernel's): no further
    /// directory can be watched either.
    pub limit: bool,
}

impl<K: Clone + PartialEq + std::fmt::Debug> DirWatch<K> {
    /// A fresh instance (non-blocking, close-on-exec) whose watches report
    /// `mask`, holding at most `max_dirs` of them; `limit_name` is the
    /// constant's name, said when the bound is hit.
    pub fn new(
        mask: WatchFlags,
        max_dirs: usize,
        limit_name: &'static str,
    ) -> std::io::Result<DirWatch<K>> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        lock_live().insert(id, (fd.try_clone()?, Vec::new()));
        Ok(DirWatch {
            fd,
            id,
            dirs: Mutex::new(HashMap::new()),
            mask,
            max_dirs,
            limit_name,
        })
    }

    /// Watch the directory `abs`, known to the caller as `rel`; call before
    /// reading it. Watching a directory again is harmless (same watch).
    pub fn watch(&self, abs: &Path, rel: &K) -> Result<(), Refused> {
        let refused = |why: String, limit: bool| Err(Refused { why, limit });
        let mut dirs = self
            .dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match inotify::add_watch(&self.fd, abs, self.mask) {
            Ok(wd) => match dirs.get(&wd) {
                // Events name one path per watch: a directory also
                // reached by another path (a bind mount) is not watched.
                Some(known) if known != rel => refused(
                    format!(
                        "the directory {} is also reached as {known:?}",
                        abs.display()
                    ),
                    false,
                ),
                Some(_) => Ok(()),
                None if dirs.len() >= self.max_dirs => {
                    // Past the bound: taken back (a watch left armed but
                    // unknown would make every drain fail).
                    let _ = inotify::remove_watch(&self.fd, wd);
                    let why = format!(
                        "more than {} directories ({})",
                        self.max_dirs, self.limit_name
                    );
                    refused(why, true)
                }
                None => {
                    dirs.insert(wd, rel.clone());
                    if let Some((_, wds)) = lock_live().get_mut(&self.id) {
                        wds.push(wd);
                    }
                    Ok(())
                }
            },
            Err(Errno::NOSPC) => refused(
                "the inotify watch limit (fs.inotify.max_user_watches) is reached".into(),
                true,
            ),
            Err(e) => refused(format!("{}: {e}", abs.display()), false),
        }
    }

    /// How many directories are watched.
    pub fn watched(&self) -> usize {
        self.dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Read every queued event without blocking, passing each with the
    /// name of its directory to `on_event`, which says whether it models
    /// it. Err: something nobody models happened (see the module doc) or
    /// `on_event` refused an event; the rest of the queue is left unread,
    /// as the instance is of no further use.
    pub fn drain(
        &self,
        mut on_event: impl FnMut(&K, ReadFlags, Option<&CStr>) -> bool,
    ) -> Result<(), Unmodelled> {
        let dirs = self
            .dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut buf = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        let structural = ReadFlags::DELETE_SELF
            | ReadFlags::MOVE_SELF
            | ReadFlags::IGNORED
            | ReadFlags::UNMOUNT
            | ReadFlags::QUEUE_OVERFLOW;
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(Errno::WOULDBLOCK) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(format!("reading inotify events: {e}")),
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                return Err("the inotify queue overflowed (fs.inotify.max_queued_events)".into());
            }
            if flags.intersects(structural) {
                return Err(format!("a watched directory went away ({flags:?})"));
            }
            let Some(dir) = dirs.get(&event.wd()) else {
                return Err(format!("an event for an unknown watch {}", event.wd()));
            };
            if !on_event(dir, flags, event.file_name()) {
                return Err(format!("an event not modelled ({flags:?} in {dir:?})"));
            }
        }
    }
}

/// Every live instance (a duplicate of its descriptor) and the watches it
/// armed, for [`unwatch_all`].
type Live = HashMap<u64, (OwnedFd, Vec<i32>)>;

fn lock_live() -> std::sync::MutexGuard<'static, Live> {
    static LIVE: OnceLock<Mutex<Live>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Take back every watch of every live instance, ahead of the process's
/// exit. Closing an inotify instance that still holds watches waits for
/// the kernel to retire them (an RCU grace period) in the closing thread,
/// and at exit that thread is the exiting process: a person's shell waits
/// with it. A watch taken back is retired in the kernel's background
/// instead. An instance used afterwards sees its watches gone (an
/// `IN_IGNORED` event: unmodelled), so its caller walks, never misreads.
pub fn unwatch_all() {
    let live = std::mem::take(&mut *lock_live());
    for (fd, wds) in live.values() {
        for wd in wds {
            let _ = inotify::remove_watch(fd, *wd);
        }
    }
}

impl<K> Drop for DirWatch<K> {
    /// The watches are taken back before the descriptor closes (see
    /// [`unwatch_all`]).
    fn drop(&mut self) {
        if let Some((_, wds)) = lock_live().remove(&self.id) {
            for wd in wds {
                let _ = inotify::remove_watch(&self.fd, wd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`unwatch_all`] takes every instance's watches: the tests that
    /// watch run one at a time.
    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn changed(w: &DirWatch<String>) -> Result<Vec<String>, Unmodelled> {
        let mut dirs = Vec::new();
        w.drain(|dir, _, _| {
            dirs.push(dir.clone());
            true
        })?;
        dirs.sort();
        dirs.dedup();
        Ok(dirs)
    }

    #[test]
    fn events_name_their_directory_and_a_removed_one_is_unmodelled() {
        let _serial = one_at_a_time();
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        let w = DirWatch::new(entry_events(), 10, "TEST_LIMIT").unwrap();
        for rel in ["", "a", "a/b"] {
            w.watch(&t.path().join(rel), &rel.to_string()).unwrap();
        }
        assert_eq!(changed(&w), Ok(vec![]));
        std::fs::write(t.path().join("a/x"), "").unwrap();
        std::fs::write(t.path().join("y"), "").unwrap();
        assert_eq!(changed(&w), Ok(vec![String::new(), "a".to_string()]));
        assert_eq!(changed(&w), Ok(vec![]), "drained");
        std::fs::remove_dir(t.path().join("a/b")).unwrap();
        assert!(changed(&w).is_err());
    }

    /// Watches taken back ahead of exit are gone from the instance: the
    /// next drain is unmodelled (the caller walks), never silent.
    #[test]
    fn unwatching_all_leaves_an_instance_that_reports_it() {
        let _serial = one_at_a_time();
        let t = tempfile::tempdir().unwrap();
        let w = DirWatch::new(entry_events(), 10, "TEST_LIMIT").unwrap();
        w.watch(t.path(), &String::new()).unwrap();
        assert_eq!(changed(&w), Ok(vec![]));
        unwatch_all();
        assert!(changed(&w).is_err(), "the watch's removal went unreported");
        // Watched again afterwards, it works as before.
        let again = DirWatch::new(entry_events(), 10, "TEST_LIMIT").unwrap();
        again.watch(t.path(), &String::new()).unwrap();
        std::fs::write(t.path().join("x"), "").unwrap();
        assert_eq!(changed(&again), Ok(vec![String::new()]));
    }

    #[test]
    fn the_limit_is_named_and_a_refused_event_is_an_error() {
        let _serial = one_at_a_time();
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a")).unwrap();
        let w = DirWatch::new(entry_events(), 1, "TEST_LIMIT").unwrap();
        w.watch(t.path(), &String::new()).unwrap();
        w.watch(t.path(), &String::new()).unwrap();
        let err = w.watch(&t.path().join("a"), &"a".to_string()).unwrap_err();
        assert!(err.limit && err.why.contains("TEST_LIMIT"), "{err:?}");
        let two = DirWatch::new(entry_events(), 10, "TEST_LIMIT").unwrap();
        two.watch(t.path(), &String::new()).unwrap();
        let err = two.watch(t.path(), &"other".to_string()).unwrap_err();
        assert!(!err.limit && err.why.contains("also reached"), "{err:?}");
        std::fs::write(t.path().join("z"), "").unwrap();
        assert!(w.drain(|_, _, _| false).is_err());
    }
}
