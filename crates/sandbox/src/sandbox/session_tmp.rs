//! A `/tmp` per session: what one action leaves in `/tmp` (a build's
//! scratch files, a downloaded archive, the caches pip, npm and Go write
//! in `/tmp/.cache`) is there for the session's next action, as on the
//! person's machine, and is removed when the session ends. `HOME`
//! (`/tmp/home`) is each run's own (see [`super::bwrap`]).
//!
//! Each session's directory lives in the system's temporary directory,
//! inside a private directory of this daemon whose name carries its pid
//! (`passepartout-tmp-<pid>-…`): when the daemon ends, it removes it
//! ([`remove_all`]); a daemon that died without doing so is found by the
//! next one to start ([`remove_stale`], [`STALE_SCAN_LIMIT`] entries at
//! most).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Prefix of this daemon's directory of session `/tmp`s, followed by its pid.
pub const DIR_PREFIX: &str = "passepartout-tmp-";

/// Most entries of the temporary directory looked at for the leftovers of
/// dead daemons (a `/tmp` with millions of files must not stall startup).
pub const STALE_SCAN_LIMIT: usize = 10_000;

/// Most sessions a daemon keeps a `/tmp` for at once; past it the oldest
/// one's is removed (its next action starts with an empty `/tmp`).
pub const MAX_SESSION_TMPS: usize = 256;

struct Registry {
    /// This daemon's private directory (`None`: not made yet).
    root: Option<PathBuf>,
    /// Session id to its directory, with the order of creation.
    sessions: HashMap<String, (u64, PathBuf)>,
    next: u64,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    REG.get_or_init(|| {
        Mutex::new(Registry {
            root: None,
            sessions: HashMap::new(),
            next: 0,
        })
    })
    .lock()
    .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host directory shown as `/tmp` to the actions of `session`, made on
/// first use (mode 1777 like a real `/tmp`, inside a 0700 directory of
/// this daemon), with `home/` in it (where each run's own `HOME` is
/// mounted) and `.cache/` (the caches, which last).
pub fn dir_for(session: &str) -> std::io::Result<PathBuf> {
    let mut reg = registry();
    if let Some((_, d)) = reg.sessions.get(session) {
        if d.is_dir() {
            return Ok(d.clone());
        }
    }
    let root = match &reg.root {
        Some(r) if r.is_dir() => r.clone(),
        _ => {
            let tmp = std::env::temp_dir();
            remove_stale(&tmp);
            let r = tempfile::Builder::new()
                .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir_in(&tmp)?
                .keep();
            reg.root = Some(r.clone());
            r
        }
    };
    if reg.sessions.len() >= MAX_SESSION_TMPS {
        if let Some(oldest) = reg
            .sessions
            .iter()
            .min_by_key(|(_, (n, _))| *n)
            .map(|(k, _)| k.clone())
        {
            if let Some((_, d)) = reg.sessions.remove(&oldest) {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    let n = reg.next;
    reg.next += 1;
    // The session id is the client's word: not part of the path.
    let dir = root.join(format!("s{n}"));
    make_tmp(&dir)?;
    std::fs::create_dir_all(dir.join("home"))?;
    std::fs::create_dir_all(dir.join(".cache"))?;
    reg.sessions.insert(session.to_string(), (n, dir.clone()));
    Ok(dir)
}

fn make_tmp(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
}

/// Most entries the size check of a session's `/tmp` looks at after each
/// run (a cache of many small files must not make every command slow).
pub const USAGE_SCAN_ENTRIES: usize = 100_000;

/// What [`usage`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes allocated to the entries looked at.
    pub bytes: u64,
    /// Every entry was looked at (not stopped at [`USAGE_SCAN_ENTRIES`]).
    pub complete: bool,
}

/// Bytes the files under `dir` take on the disk (blocks allocated, so a
/// sparse file counts what it holds), symlinks not followed, over the
/// first [`USAGE_SCAN_ENTRIES`] entries.
pub fn usage(dir: &Path) -> Usage {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut looked = 0usize;
    let mut queue = vec![dir.to_path_buf()];
    while let Some(d) = queue.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            looked += 1;
            if looked > USAGE_SCAN_ENTRIES {
                return Usage {
                    bytes: total,
                    complete: false,
                };
            }
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                queue.push(e.path());
            }
        }
    }
    Usage {
        bytes: total,
        complete: true,
    }
}

/// After a run: when the session's `/tmp` at `dir` holds more than
/// `limit` bytes (the `tmp_size` limit, which a private tmpfs enforced as
/// it filled; a directory that lasts for the session is measured after
/// each run instead), empty it and say so.
pub fn enforce_size(dir: &Path, limit: u64) -> Option<String> {
    let held = usage(dir);
    if held.bytes <= limit {
        if !held.complete {
            tracing::debug!(
                "the session's /tmp has more than {USAGE_SCAN_ENTRIES} entries; its size was \
                 checked over those only"
            );
        }
        return None;
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(Result::ok) {
            let p = e.path();
            let _ = match p.symlink_metadata() {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
                _ => std::fs::remove_file(&p),
            };
        }
    }
    let _ = std::fs::create_dir_all(dir.join("home"));
    let _ = std::fs::create_dir_all(dir.join(".cache"));
    let held = match held.complete {
        true => format!("{} bytes", held.bytes),
        false => format!("more than {} bytes", held.bytes),
    };
    Some(format!(
        "stopped: the session's /tmp held {held}, over its limit of {limit} bytes (limit \
         `tmp_size`); it was emptied, so the next command starts with an empty /tmp"
    ))
}

/// The session has ended: its `/tmp` goes.
pub fn end_session(session: &str) {
    if let Some((_, d)) = registry().sessions.remove(session) {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The daemon is ending: every session's `/tmp` goes, with the directory
/// holding them.
pub fn remove_all() {
    let mut reg = registry();
    reg.sessions.clear();
    if let Some(root) = reg.root.take() {
        let _ = std::fs::remove_dir_all(root);
    }
}

/// Remove the session `/tmp`s of daemons that are gone.
pub fn remove_stale(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.filter_map(Result::ok).take(STALE_SCAN_LIMIT) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_session_keeps_its_tmp_until_it_ends() {
        let a = dir_for("test-session-a").unwrap();
        let b = dir_for("test-session-b").unwrap();
        assert_ne!(a, b);
        assert_eq!(dir_for("test-session-a").unwrap(), a);
        assert!(a.join("home").is_dir());
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
        let parent = std::fs::metadata(a.parent().unwrap()).unwrap();
        assert_eq!(parent.permissions().mode() & 0o777, 0o700);
        std::fs::write(a.join("kept"), "x").unwrap();
        assert!(dir_for("test-session-a").unwrap().join("kept").exists());
        end_session("test-session-a");
        assert!(!a.exists());
        assert!(b.exists());
        end_session("test-session-b");
    }

    #[test]
    fn a_tmp_over_its_size_is_emptied() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home/.cache")).unwrap();
        std::fs::write(dir.path().join("small"), vec![1u8; 1000]).unwrap();
        assert_eq!(enforce_size(dir.path(), 1 << 20), None);
        std::fs::write(dir.path().join("home/.cache/big"), vec![1u8; 2 << 20]).unwrap();
        let said = enforce_size(dir.path(), 1 << 20).unwrap();
        assert!(said.contains("limit `tmp_size`"), "{said}");
        assert!(!dir.path().join("small").exists());
        assert!(dir.path().join("home").is_dir());
        assert!(!dir.path().join("home/.cache").exists());
    }

    #[test]
    fn leftovers_of_dead_daemons_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        // A pid that is not running: above the kernel's pid_max.
        let dead = tmp.path().join(format!("{DIR_PREFIX}4294967295-abc"));
        let alive = tmp
            .path()
            .join(format!("{DIR_PREFIX}{}-abc", std::process::id()));
        let other = tmp.path().join("unrelated-1");
        for d in [&dead, &alive, &other] {
            std::fs::create_dir_all(d.join("s0")).unwrap();
        }
        remove_stale(tmp.path());
        assert!(!dead.exists());
        assert!(alive.exists());
        assert!(other.exists());
    }
}
