//! Empty files made ahead of time, so an action's bookkeeping creates no
//! inode on its path.
//!
//! On the development VM's ext4 a new inode (a `mkdir`, an `O_CREAT`
//! temporary) cost 0.3–1.5 ms while renaming, writing or unlinking costs
//! tens of µs (why, and what keeps it near 20 µs now:
//! [`place_subdirectories_apart`]); an action wrote four or five new files
//! (its blob, its two partial trees, its record, the temporary it renamed
//! into the project).
//! Each store keeps a pool of empty private files, `<store>/spare/<pid>/`,
//! filled by a background thread (and the 256 object fan-out directories
//! made once): a write takes one, writes it and renames it into place — the
//! same temporary-then-rename as before, with the temporary already made.
//! The pool is per process (two daemons never write the same spare);
//! pools of processes that are gone are removed when a pool is first
//! filled. An empty pool falls back to a temporary made on the spot.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Spare files kept per store …
pub const SPARES_PER_STORE: usize = 48;
/// … refilled in the background once fewer than this are left.
const REFILL_BELOW: usize = 24;

/// How long a refill waits after the take that started it.
const REFILL_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

#[derive(Default)]
struct Pool {
    names: Vec<String>,
    filling: bool,
}

fn pools() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Pool>> {
    static POOLS: OnceLock<Mutex<HashMap<PathBuf, Pool>>> = OnceLock::new();
    POOLS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This process's pool directory in the store at `store_dir`.
fn pool_dir(store_dir: &Path) -> PathBuf {
    // The process id asked once (`getpid` is a system call, and a spare
    // is taken several times per action).
    static PID: OnceLock<String> = OnceLock::new();
    let pid = PID.get_or_init(|| std::process::id().to_string());
    store_dir.join("spare").join(pid)
}

/// An empty private file, opened for writing, waiting to be renamed into
/// place.
pub struct Spare {
    pub path: PathBuf,
    pub file: File,
}

impl Spare {
    /// Rename it to `dest` (same file system). On failure the spare is
    /// removed, so a half-written one is never taken again.
    pub fn persist(self, dest: &Path) -> std::io::Result<()> {
        drop(self.file);
        let moved = replace(&self.path, rustix::fs::CWD, dest).map_err(std::io::Error::from);
        if moved.is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
        moved
    }

    /// Give it up (removed).
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A spare file of the store at `store_dir`, if one is ready (a refill is
/// started when the pool runs low or was never filled).
pub fn take(store_dir: &Path) -> Option<Spare> {
    let dir = pool_dir(store_dir);
    let name = {
        let mut map = pools();
        let pool = map.entry(dir.clone()).or_default();
        let name = pool.names.pop();
        if pool.names.len() < REFILL_BELOW && !pool.filling {
            pool.filling = true;
            let (dir, store) = (dir.clone(), store_dir.to_path_buf());
            let started = std::thread::Builder::new()
                .name("spare-files".into())
                .spawn(move || {
                    // After the bookkeeping that took the spare, not
                    // alongside it (both would queue on the journal).
                    std::thread::sleep(REFILL_DELAY);
                    fill(&store, &dir)
                });
            if started.is_err() {
                pool.filling = false;
            }
        }
        name?
    };
    let path = dir.join(name);
    // Not `O_TRUNC`: a spare is made empty and never taken twice, and on
    // ext4 truncating a file (even an empty one) marks it to have its data
    // flushed when it is closed. One that is not empty (never expected) is
    // given up.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .ok()?;
    if file.metadata().map_or(true, |m| m.len() != 0) {
        let _ = std::fs::remove_file(&path);
        return None;
    }
    Some(Spare { path, file })
}

/// Put the written spare at `spare` in place as `name` in `dir`.
///
/// A new name is a plain rename. An existing file is *exchanged* with the
/// spare (`RENAME_EXCHANGE`, atomic like a rename over it) rather than
/// renamed over: ext4 (`auto_da_alloc`, on by default) flushes the data of
/// a file renamed over another before the rename returns — 1–5 ms on this
/// VM, against ~50 µs for the exchange. The replaced file, now at the
/// spare's path in the pool, is removed in the background
/// (`txn::remove_later`; a crash leaves it in the dead process's pool,
/// removed with it). Should the exchange have taken a directory (one put
/// at `name` since it was checked), it is exchanged back and `EISDIR`
/// returned, as a rename over it would have failed.
pub fn replace<D: std::os::fd::AsFd + Copy, N: rustix::path::Arg + Copy>(
    spare: &Path,
    dir: D,
    name: N,
) -> rustix::io::Result<()> {
    use rustix::fs::{renameat_with, AtFlags, FileType, RenameFlags, CWD};
    match renameat_with(CWD, spare, dir, name, RenameFlags::NOREPLACE) {
        Err(rustix::io::Errno::EXIST) => {}
        // A file system without `RENAME_NOREPLACE`: as before.
        Err(rustix::io::Errno::INVAL) => return rustix::fs::renameat(CWD, spare, dir, name),
        other => return other,
    }
    match renameat_with(CWD, spare, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        Err(rustix::io::Errno::INVAL) => return rustix::fs::renameat(CWD, spare, dir, name),
        Err(e) => return Err(e),
    }
    let swapped = rustix::fs::statat(CWD, spare, AtFlags::SYMLINK_NOFOLLOW);
    if swapped.is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory) {
        renameat_with(CWD, spare, dir, name, RenameFlags::EXCHANGE)?;
        return Err(rustix::io::Errno::ISDIR);
    }
    super::txn::remove_later(spare.to_path_buf());
    Ok(())
}

/// Fill the pool of the store at `store_dir` now, on this thread (the
/// session's warm-up: the first action finds it full). A filling already
/// under way elsewhere is left to finish.
pub fn fill_now(store_dir: &Path) {
    let dir = pool_dir(store_dir);
    {
        let mut map = pools();
        let pool = map.entry(dir.clone()).or_default();
        if pool.filling {
            return;
        }
        pool.filling = true;
    }
    fill(store_dir, &dir);
}

/// Make spare files (and, the first time, the object fan-out directories
/// and the removal of dead processes' pools) until the pool is full.
fn fill(store_dir: &Path, dir: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    static SEEN: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let first = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(dir.to_path_buf());
    if first {
        // Left by an earlier process with this pid: its spares are unknown.
        clear_pool(dir);
        // This process's pool directory, and so its spares, in a block
        // group of its own (see `place_subdirectories_apart`).
        if let Some(parent) = dir.parent() {
            if crate::paths::create_private_dir(parent).is_ok() {
                place_subdirectories_apart(parent);
            }
        }
        if let Err(e) = crate::paths::create_private_dir(dir) {
            tracing::debug!("spare files: {}: {e}", dir.display());
            pools().entry(dir.to_path_buf()).or_default().filling = false;
            return;
        }
        remove_dead_pools(store_dir);
        let objects = store_dir.join("git").join("objects");
        for byte in 0..=255u8 {
            let _ = std::fs::DirBuilder::new()
                .mode(0o755)
                .create(objects.join(format!("{byte:02x}")));
        }
    }
    loop {
        let short = {
            let map = pools();
            map.get(dir)
                .map_or(SPARES_PER_STORE, |p| SPARES_PER_STORE - p.names.len())
        };
        if short == 0 {
            break;
        }
        let name = format!("s{}", SERIAL.fetch_add(1, Ordering::Relaxed));
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(&name));
        if let Err(e) = made {
            tracing::debug!("spare files: {}: {e}", dir.display());
            break;
        }
        pools()
            .entry(dir.to_path_buf())
            .or_default()
            .names
            .push(name);
    }
    pools().entry(dir.to_path_buf()).or_default().filling = false;
}

/// Mark `dir` so that ext4 places each directory made in it from now on
/// in a block group chosen apart — one with few directories, as for a
/// directory at the top of the file system (`chattr +T`, `FS_TOPDIR_FL`,
/// read by the Orlov allocator) — instead of `dir`'s own group. Used for
/// the store's `txn/` (each action's run directory: the command's copy-up
/// makes its inodes there, on the action's path) and `spare/` (this
/// process's pool).
///
/// Why: ext4 without a journal (the development VM's; the kernel's
/// `recently_deleted` check runs only then) skips, for each new inode, every
/// free inode of the group deleted in the last 5 s — 300 s while its inode
/// table block is not yet written back — checking them one by one from the
/// group's start. In a group where much was deleted lately (each action's
/// used directories; a build or a test run removing a tree in `/tmp`) one
/// new inode cost 0.5–1.5 ms instead of ~20 µs (measured: docs/transactions.md,
/// "Fifth round"). Best effort, once per directory and process: a file
/// system without the flag keeps the default placement. `false`: `dir`
/// could not be opened (e.g. it does not exist yet).
pub fn place_subdirectories_apart(dir: &Path) -> bool {
    use rustix::fs::{ioctl_getflags, ioctl_setflags, IFlags, Mode, OFlags};
    static MARKED: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let marked = MARKED.get_or_init(Mutex::default);
    if marked
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(dir)
    {
        return true;
    }
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let settled = match ioctl_getflags(&fd) {
        Ok(flags) if flags.contains(IFlags::TOPDIR) => true,
        Ok(flags) => ioctl_setflags(&fd, flags | IFlags::TOPDIR).is_ok(),
        // No such flags here (not ext2/3/4): nothing to do, ever.
        Err(_) => true,
    };
    if settled {
        marked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(dir.to_path_buf());
    }
    true
}

/// Remove the pools of processes that are gone (a crash leaves one).
fn remove_dead_pools(store_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(store_dir.join("spare")) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        // Signal 0 only checks that the process exists.
        let gone = rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH);
        if gone {
            clear_pool(&entry.path());
        }
    }
}

/// Remove a pool left by a process that is gone: its files (spares, and
/// files an apply replaced that were not removed yet), then the pool.
/// A directory in it is never removed: a pool holds files only, and a
/// directory there can only be a person's, exchanged in by an apply in the
/// instant before a crash (`replace` puts one back at once otherwise) —
/// it is kept and named in the log.
fn clear_pool(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => {
                tracing::warn!(
                    "spare files: {} is a directory in a pool of spare files; kept",
                    path.display()
                );
            }
            _ => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

use std::os::unix::fs::OpenOptionsExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_is_written_and_renamed_into_place() {
        let store = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(store.path().join("git/objects")).unwrap();
        // The first take starts the filling; wait for it.
        let mut spare = None;
        for _ in 0..200 {
            spare = take(store.path());
            if spare.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut spare = spare.expect("the pool was filled");
        use std::io::Write;
        spare.file.write_all(b"record").unwrap();
        let dest = store.path().join("c1.json");
        spare.persist(&dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"record");
        assert!(store.path().join("git/objects/ab").is_dir());
    }

    /// A spare put in place over an existing file is exchanged with it:
    /// the destination holds the new bytes at once (never missing), the
    /// replaced file leaves the pool in the background, and a directory
    /// that appeared at the destination is put back and refused, as a
    /// rename over it would be.
    #[test]
    fn a_spare_replacing_a_file_is_exchanged_and_a_directory_is_refused() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("pool");
        std::fs::create_dir(&pool).unwrap();
        let dest = dir.path().join("a.txt");
        std::fs::write(&dest, "old\n").unwrap();
        // Another name for the old file: it keeps the old bytes.
        std::fs::hard_link(&dest, dir.path().join("old-link")).unwrap();
        let spare = pool.join("s1");
        std::fs::write(&spare, "new\n").unwrap();
        let spare_ino = std::fs::metadata(&spare).unwrap().ino();
        replace(&spare, rustix::fs::CWD, &dest).unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new\n");
        assert_eq!(std::fs::metadata(&dest).unwrap().ino(), spare_ino);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("old-link")).unwrap(),
            "old\n"
        );
        let mut gone = false;
        for _ in 0..200 {
            if !spare.exists() {
                gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(gone, "the replaced file stayed in the pool");
        // A new name: a plain rename.
        let spare = pool.join("s2");
        std::fs::write(&spare, "b\n").unwrap();
        replace(&spare, rustix::fs::CWD, &dir.path().join("b.txt")).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "b\n"
        );
        // A directory at the destination stays, with what it holds.
        let folder = dir.path().join("folder");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("inside"), "kept\n").unwrap();
        let spare = pool.join("s3");
        std::fs::write(&spare, "x\n").unwrap();
        let err = replace(&spare, rustix::fs::CWD, &folder).unwrap_err();
        assert_eq!(err, rustix::io::Errno::ISDIR);
        assert_eq!(
            std::fs::read_to_string(folder.join("inside")).unwrap(),
            "kept\n"
        );
        assert_eq!(std::fs::read_to_string(&spare).unwrap(), "x\n");
    }

    /// On a file system with the flag (ext4 here), the pool's parent
    /// directory places its subdirectories apart once a pool is filled.
    #[test]
    fn the_pool_directory_is_placed_apart_where_the_file_system_can() {
        use rustix::fs::{ioctl_getflags, IFlags, Mode, OFlags};
        let store = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(store.path().join("git/objects")).unwrap();
        let probe = rustix::fs::open(store.path(), OFlags::RDONLY, Mode::empty()).unwrap();
        if ioctl_getflags(&probe).is_err() {
            eprintln!("skipped: no inode flags on this file system");
            return;
        }
        fill_now(store.path());
        let spare =
            rustix::fs::open(store.path().join("spare"), OFlags::RDONLY, Mode::empty()).unwrap();
        assert!(ioctl_getflags(&spare).unwrap().contains(IFlags::TOPDIR));
        assert!(take(store.path()).is_some());
    }

    /// A spare that is not empty (never expected: a crash's leftover) is
    /// given up rather than written after its old bytes.
    #[test]
    fn a_spare_that_is_not_empty_is_not_taken() {
        let store = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(store.path().join("git/objects")).unwrap();
        fill_now(store.path());
        let dir = pool_dir(store.path());
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), SPARES_PER_STORE);
        for e in &names {
            std::fs::write(e.path(), "left over").unwrap();
        }
        assert!(take(store.path()).is_none());
    }

    /// A dead process's pool loses its files, never a directory (only a
    /// person's can be there, exchanged in by an apply cut short).
    #[test]
    fn clearing_a_dead_pool_keeps_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("4242");
        std::fs::create_dir_all(pool.join("persons")).unwrap();
        std::fs::write(pool.join("persons/work.txt"), "mine\n").unwrap();
        std::fs::write(pool.join("s1"), "").unwrap();
        clear_pool(&pool);
        assert!(!pool.join("s1").exists());
        assert_eq!(
            std::fs::read_to_string(pool.join("persons/work.txt")).unwrap(),
            "mine\n"
        );
    }
}
