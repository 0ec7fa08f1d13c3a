//! The one atomic file write: readers see the old file or the new one,
//! never a mix. A temporary file (mode 0600, from `tempfile`) is written
//! beside the target and renamed over it; with [`Atomic::DURABLE`] the data
//! and the directory entry are fsync'd before this returns, so the new file
//! also survives a crash. A failed write leaves no temporary file behind.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::Path;

/// How [`write_atomic`] treats an existing file and the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Atomic {
    /// Replace an existing file; `false` refuses with `AlreadyExists`
    /// (atomically: two writers cannot both create the file).
    pub replace: bool,
    /// fsync the file and its directory before returning.
    pub fsync: bool,
}

impl Atomic {
    /// Replace, and survive a crash once written.
    pub const DURABLE: Atomic = Atomic {
        replace: true,
        fsync: true,
    };
    /// Create only (never overwrite), and survive a crash once written.
    pub const DURABLE_NEW: Atomic = Atomic {
        replace: false,
        fsync: true,
    };
    /// Replace without waiting for the disk: for records that can be
    /// rebuilt or lost in a crash without harm.
    pub const FAST: Atomic = Atomic {
        replace: true,
        fsync: false,
    };
}

/// Write `bytes` to `path` atomically (see the module doc); the file is
/// created with mode 0600.
pub fn write_atomic(path: &Path, bytes: &[u8], how: Atomic) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if how.fsync {
        tmp.as_file().sync_all()?;
    }
    if how.replace {
        tmp.persist(path).map_err(|e| e.error)?;
    } else {
        tmp.persist_noclobber(path).map_err(|e| e.error)?;
    }
    if how.fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_or_refuses_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"one", Atomic::DURABLE_NEW).unwrap();
        let err = write_atomic(&path, b"two", Atomic::DURABLE_NEW).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        write_atomic(&path, b"three", Atomic::DURABLE).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"three");
        write_atomic(&path, b"four", Atomic::FAST).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"four");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.json")]);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/a.json");
        assert!(write_atomic(&path, b"x", Atomic::DURABLE).is_err());
    }
}
