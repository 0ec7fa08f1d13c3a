//! One decider per state directory: `daemon.lock`, held with `flock` by the
//! daemon that recovers plans, runs approved plans whose turn is gone, and
//! sweeps for decisions made from a terminal.
//!
//! A second daemon on the same directory does not wait and does not fight:
//! it serves its own editor (sessions, turns, the flight plans of its own
//! turns) but leaves every other plan alone, and takes the lock over (and
//! with it the holder's duties) when the holder exits. The kernel releases
//! an `flock` when its holder dies, so a crash never leaves a stale lock.
//! The holder's pid is written into the file for people and for
//! `passepartout plans approve`, which says truthfully who will run a plan.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use crate::paths::LOCK_FILE;

/// Errors taking or reading the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot use the daemon lock {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The lock, held for as long as this value lives.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Who holds a state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No daemon runs on it.
    Nobody,
    /// A daemon does (its pid, when the file says).
    Daemon(Option<u32>),
}

fn open(state_dir: &Path) -> Result<(File, PathBuf), LockError> {
    let path = crate::paths::StateDir::new(state_dir).lock_file();
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    crate::paths::create_private_dir(state_dir).map_err(io)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    Ok((file, path))
}

/// `flock(LOCK_EX | LOCK_NB)`: true when taken, false when someone has it.
fn try_flock(file: &File) -> io::Result<bool> {
    use rustix::fs::{flock, FlockOperation};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(errno) => Err(errno.into()),
    }
}

/// Take the lock if nobody holds it. `Ok(None)`: another daemon does.
pub fn try_acquire(state_dir: &Path) -> Result<Option<StateLock>, LockError> {
    let (mut file, path) = open(state_dir)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    if !try_flock(&file).map_err(io)? {
        return Ok(None);
    }
    // The pid over the old one, then cut what is left of a longer one: a
    // truncation to zero first would make ext4 flush the file at close.
    file.rewind().map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    let written = file.stream_position().map_err(io)?;
    file.set_len(written).map_err(io)?;
    Ok(Some(StateLock { _file: file }))
}

/// Who holds the lock now (without keeping it).
pub fn holder(state_dir: &Path) -> Result<Holder, LockError> {
    if !crate::paths::StateDir::new(state_dir).lock_file().exists() {
        return Ok(Holder::Nobody);
    }
    let (mut file, path) = open(state_dir)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    if try_flock(&file).map_err(io)? {
        // Taken only to look: dropping the file releases it.
        return Ok(Holder::Nobody);
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    Ok(Holder::Daemon(text.trim().parse().ok()))
}

/// The pid of the daemon that made a session id: `sN-PID` (older
/// daemons) or `YYYYMMDDTHHMMSS-PID-N` (see `sessions::new_id`); `None` for
/// ids of any other shape.
pub fn session_owner(session_id: &str) -> Option<u32> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((n, pid)) = session_id.strip_prefix('s').and_then(|r| r.split_once('-')) {
        return if digits(n) { pid.parse().ok() } else { None };
    }
    let mut parts = session_id.split('-');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(ts), Some(pid), Some(n), None)
            if ts.len() == 15 && ts.as_bytes()[8] == b'T' && digits(pid) && digits(n) =>
        {
            pid.parse().ok()
        }
        _ => None,
    }
}

/// Whether process `pid` exists (signal 0 checks without sending).
pub fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    matches!(
        rustix::process::test_kill_process(pid),
        Ok(()) | Err(rustix::io::Errno::PERM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_release_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()).unwrap(), Holder::Nobody);
        let first = try_acquire(dir.path()).unwrap().expect("free");
        // flock is per open file description: a second open cannot take it.
        assert!(try_acquire(dir.path()).unwrap().is_none());
        assert_eq!(
            holder(dir.path()).unwrap(),
            Holder::Daemon(Some(std::process::id()))
        );
        drop(first);
        assert_eq!(holder(dir.path()).unwrap(), Holder::Nobody);
        assert!(try_acquire(dir.path()).unwrap().is_some());
    }

    #[test]
    fn the_lock_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let _lock = try_acquire(&state).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join(LOCK_FILE)), 0o600);
    }

    #[test]
    fn session_owners() {
        assert_eq!(session_owner("s12-4567"), Some(4567));
        assert_eq!(session_owner("session-1"), None);
        assert_eq!(session_owner("run"), None);
        assert_eq!(session_owner("s-1"), None);
        assert_eq!(session_owner("20261123T181500-4567-3"), Some(4567));
        assert_eq!(session_owner("20261123T181500-x-3"), None);
    }

    #[test]
    fn liveness_of_processes() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }
}
