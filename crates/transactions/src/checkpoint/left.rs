//! What the daemon itself last left at a project path: the status
//! (device, inode, size, mtime, ctime) of each file it wrote when it
//! applied a changeset, undid or redid one, or ran a file tool.
//!
//! A transaction starts its command at once (no wait for the kernel's
//! coarse clock to tick past the start). A project file whose ctime falls
//! in the start's own clock tick may then have been changed just before
//! the start or just after it — the timestamps cannot tell. It counts as
//! changed (a conflict, never overwritten) unless its status is still
//! exactly what the daemon left there: then the change in that tick was
//! the daemon's own (the previous action's apply), and back-to-back
//! actions on the same file neither wait nor conflict falsely.
//!
//! The status is taken right after the write, so on a kernel with
//! multigrain timestamps (Linux ≥ 6.13) any later change gets a ctime
//! different from it, even within the same tick.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::beneath::Beneath;

/// Paths remembered per process at most (the oldest are forgotten first:
/// a forgotten path is merely treated as possibly changed).
pub const MAX_REMEMBERED_PATHS: usize = 4096;

/// A file's status as the daemon left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    dev: u64,
    ino: u64,
    size: i64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Status {
    pub fn of(st: &rustix::fs::Stat) -> Status {
        Status {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime_ns: st.st_mtime.saturating_mul(1_000_000_000) + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec as i64,
        }
    }
}

type Key = (PathBuf, String);

#[derive(Default)]
struct Memory {
    by_path: HashMap<Key, Status>,
    order: VecDeque<Key>,
}

fn memory() -> std::sync::MutexGuard<'static, Memory> {
    static MEMORY: OnceLock<Mutex<Memory>> = OnceLock::new();
    MEMORY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Remember what the daemon just left at `rel` beneath `b` (nothing
/// there, or not a file: forgotten).
pub fn remember(b: &Beneath, rel: &str) {
    let status = b
        .stat(rel)
        .ok()
        .flatten()
        .filter(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_file())
        .map(|st| Status::of(&st));
    let key = (b.base().to_path_buf(), rel.to_string());
    let mut m = memory();
    match status {
        Some(s) => {
            if m.by_path.insert(key.clone(), s).is_none() {
                m.order.push_back(key);
                while m.order.len() > MAX_REMEMBERED_PATHS {
                    if let Some(old) = m.order.pop_front() {
                        m.by_path.remove(&old);
                    }
                }
            }
        }
        None => {
            m.by_path.remove(&key);
        }
    }
}

/// Whether `st` (the status of `rel` beneath the project at `base` now) is
/// exactly what the daemon last left there.
pub fn is_as_left(base: &Path, rel: &str, st: &rustix::fs::Stat) -> bool {
    let key = (base.to_path_buf(), rel.to_string());
    memory().by_path.get(&key) == Some(&Status::of(st))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_after_the_daemons_write_is_not_as_left() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "daemon\n").unwrap();
        let b = Beneath::open(dir.path()).unwrap();
        remember(&b, "a.txt");
        let st = b.stat("a.txt").unwrap().unwrap();
        assert!(is_as_left(dir.path(), "a.txt", &st));
        // Same size, written in place, at once (the same clock tick).
        std::fs::write(dir.path().join("a.txt"), "person\n").unwrap();
        let st = b.stat("a.txt").unwrap().unwrap();
        assert!(!is_as_left(dir.path(), "a.txt", &st));
        assert!(!is_as_left(dir.path(), "b.txt", &st));
    }
}
