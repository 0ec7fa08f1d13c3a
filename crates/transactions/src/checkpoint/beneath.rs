//! Host-side file operations beneath the project, resolved by the kernel.
//!
//! Undo, hold, apply and every other restore write into the person's
//! project on the host, outside any sandbox. A path recorded earlier
//! (`sub/a.txt`) may by now run through a symlink an action planted
//! (`sub -> /home/me`), or a folder may have been swapped for one while a
//! held effect waited. Joining the path and calling `std::fs` would follow
//! that link and write outside the project. Here every operation opens the
//! project once and resolves each component beneath it with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//! at the moment of the operation, as `actuators/files.rs` does for the
//! file tools (that module sits a layer above, so the few calls are kept
//! here).

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// What is at a path, seen without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A regular file and its permission bits.
    File {
        perm: u32,
    },
    Symlink,
    Dir,
    Other,
}

/// A directory of the project a path was resolved to: the project itself
/// (borrowed: a file at the top costs no `open`) or one beneath it.
enum DirFd<'a> {
    Root(BorrowedFd<'a>),
    Sub(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(fd) => *fd,
            DirFd::Sub(fd) => fd.as_fd(),
        }
    }
}

/// The project, opened once; every path is resolved beneath it.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    base: PathBuf,
}

/// Why a path could not be resolved or changed.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error("{path}: a symbolic link is on the path (not followed out of the project)")]
    Link { path: String },
    #[error("{path}: `{part}` is not a directory")]
    NotDir { path: String, part: String },
    #[error("{path}: not a plain relative path")]
    Invalid { path: String },
    #[error("{path}: {errno}")]
    Sys { path: String, errno: Errno },
}

/// Why [`Beneath::read_capped`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadCappedError {
    #[error("cannot be read beneath the project ({0})")]
    NotBeneath(Errno),
    #[error("not a regular file")]
    NotRegular,
    #[error("larger than {max} bytes")]
    TooLarge { max: u64 },
    #[error("cannot be read ({0})")]
    Read(std::io::Error),
}

impl BeneathError {
    fn sys(path: &str, errno: Errno) -> Self {
        if errno == Errno::LOOP || errno == Errno::XDEV {
            BeneathError::Link { path: path.into() }
        } else {
            BeneathError::Sys {
                path: path.into(),
                errno,
            }
        }
    }
}

impl Beneath {
    pub fn open(base: &Path) -> std::io::Result<Beneath> {
        let root = rustix::fs::open(
            base,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Beneath {
            root,
            base: base.to_path_buf(),
        })
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    fn parts(rel: &str) -> Result<(Vec<&OsStr>, &OsStr), BeneathError> {
        let parts: Vec<&OsStr> = rel
            .split('/')
            .filter(|p| !p.is_empty())
            .map(OsStr::new)
            .collect();
        if parts
            .iter()
            .any(|p| p == &OsStr::new("..") || p == &OsStr::new("."))
        {
            return Err(BeneathError::Invalid { path: rel.into() });
        }
        match parts.split_last() {
            Some((name, parents)) => Ok((parents.to_vec(), name)),
            None => Err(BeneathError::Invalid { path: rel.into() }),
        }
    }

    fn dot(&self) -> Result<OwnedFd, Errno> {
        rustix::fs::openat(
            &self.root,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }

    /// The directory holding `rel` and its last component. `create`: make
    /// missing directories (0755) one at a time, each beneath the one
    /// before. Without it a missing or non-directory component means "no
    /// such path" (`Ok(None)`). A symlink anywhere is an error either way.
    ///
    /// The usual case costs one system call (the parents resolved by one
    /// `openat2` beneath the project; none for a file at the top): only
    /// when that fails are they walked one at a time, to make what is
    /// missing or to tell why.
    fn parent<'a>(
        &self,
        rel: &'a str,
        create: bool,
    ) -> Result<Option<(DirFd<'_>, &'a OsStr)>, BeneathError> {
        let (parents, name) = Self::parts(rel)?;
        if parents.is_empty() {
            return Ok(Some((DirFd::Root(self.root.as_fd()), name)));
        }
        let joined = parents
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if let Ok(fd) =
            rustix::fs::openat2(&self.root, joined.as_str(), flags, Mode::empty(), BENEATH)
        {
            return Ok(Some((DirFd::Sub(fd), name)));
        }
        let mut dir = self.dot().map_err(|e| BeneathError::sys(rel, e))?;
        for part in parents {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let mut next = rustix::fs::openat2(&dir, part, flags, Mode::empty(), BENEATH);
            if create && matches!(next, Err(Errno::NOENT)) {
                match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(BeneathError::sys(rel, e)),
                }
                next = rustix::fs::openat2(&dir, part, flags, Mode::empty(), BENEATH);
            }
            dir = match next {
                Ok(fd) => fd,
                Err(Errno::NOENT) if !create => return Ok(None),
                Err(Errno::NOTDIR) => {
                    // A symlink to a directory is refused as a link, not
                    // reported as "not a directory".
                    if let Ok(st) = rustix::fs::statat(&dir, part, AtFlags::SYMLINK_NOFOLLOW) {
                        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                            return Err(BeneathError::Link { path: rel.into() });
                        }
                    }
                    if !create {
                        return Ok(None);
                    }
                    return Err(BeneathError::NotDir {
                        path: rel.into(),
                        part: part.to_string_lossy().into(),
                    });
                }
                Err(e) => return Err(BeneathError::sys(rel, e)),
            };
        }
        Ok(Some((DirFd::Sub(dir), name)))
    }

    /// What is at `rel` now (None: nothing, or a parent is missing or not a
    /// directory). A symlink on the way is an error: the path does not
    /// lead to a file of the project.
    pub fn node(&self, rel: &str) -> Result<Option<Node>, BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(None);
        };
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Node::File {
                    perm: st.st_mode & 0o7777,
                },
                FileType::Symlink => Node::Symlink,
                FileType::Directory => Node::Dir,
                _ => Node::Other,
            })),
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(None),
            Err(e) => Err(BeneathError::sys(rel, e)),
        }
    }

    /// The status of what is at `rel` (None: nothing there), without
    /// following a link.
    pub fn stat(&self, rel: &str) -> Result<Option<rustix::fs::Stat>, BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(None);
        };
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(None),
            Err(e) => Err(BeneathError::sys(rel, e)),
        }
    }

    /// The change time of what is at `rel` (ns since the epoch; None:
    /// nothing there), without following a link. A transaction compares it
    /// with its start: ctime cannot be set back from user space, so a file
    /// changed since then is seen whatever its mtime says.
    pub fn ctime_ns(&self, rel: &str) -> Result<Option<i64>, BeneathError> {
        Ok(self
            .stat(rel)?
            .map(|st| st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec as i64))
    }

    /// The bytes of the regular file at `rel`.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, BeneathError> {
        self.open_and_read(rel).map(|(_, bytes)| bytes)
    }

    /// [`Beneath::read`], and the status of the file read, taken through
    /// the same descriptor after the read.
    pub fn read_with_stat(&self, rel: &str) -> Result<(Vec<u8>, rustix::fs::Stat), BeneathError> {
        let (file, bytes) = self.open_and_read(rel)?;
        let st = rustix::fs::fstat(&file).map_err(|e| BeneathError::sys(rel, e))?;
        Ok((bytes, st))
    }

    /// The file at `rel` (never through a symlink) and its whole content.
    fn open_and_read(&self, rel: &str) -> Result<(std::fs::File, Vec<u8>), BeneathError> {
        use std::io::Read;
        let fd = rustix::fs::openat2(
            &self.root,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        )
        .map_err(|e| BeneathError::sys(rel, e))?;
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| BeneathError::sys(rel, Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        Ok((file, bytes))
    }

    /// The bytes of the regular file at `rel` if it has at most `max`
    /// bytes: `Ok(None)` when nothing is there, `Err(why)` when it is not a
    /// regular file, too large, or unreadable. Opened non-blocking, so a
    /// FIFO swapped in after a check never blocks the reader.
    pub fn read_capped(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>, ReadCappedError> {
        use std::io::Read;
        let fd = match rustix::fs::openat2(
            &self.root,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(ReadCappedError::NotBeneath(e)),
        };
        let file = std::fs::File::from(fd);
        match file.metadata() {
            Ok(m) if !m.is_file() => return Err(ReadCappedError::NotRegular),
            Ok(m) if m.len() > max => return Err(ReadCappedError::TooLarge { max }),
            Ok(_) => {}
            Err(e) => return Err(ReadCappedError::Read(e)),
        }
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(ReadCappedError::Read)?;
        Ok(Some(bytes))
    }

    /// The target of the symlink at `rel` (the link itself, not followed).
    pub fn read_link(&self, rel: &str) -> Result<Vec<u8>, BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Err(BeneathError::sys(rel, Errno::NOENT));
        };
        rustix::fs::readlinkat(&dir, name, Vec::new())
            .map(std::ffi::CString::into_bytes)
            .map_err(|e| BeneathError::sys(rel, e))
    }

    /// Put a regular file (`perm` bits) or a symlink (`link`: its target
    /// is `bytes`) at `rel`: a temporary file beside it, renamed into
    /// place, so a hard link to the old file is never written through and
    /// a reader sees the old or the new file, never half of one.
    pub fn put(&self, rel: &str, bytes: &[u8], perm: u32, link: bool) -> Result<(), BeneathError> {
        let Some((dir, name)) = self.parent(rel, true)? else {
            return Err(BeneathError::sys(rel, Errno::NOENT));
        };
        if let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(BeneathError::sys(rel, Errno::ISDIR));
            }
        }
        let tmp = format!(
            ".{}.passepartout-restore-{}",
            name.to_string_lossy(),
            std::process::id()
        );
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        let made = if link {
            rustix::fs::symlinkat(OsStr::from_bytes(bytes), &dir, tmp.as_str())
        } else {
            rustix::fs::openat(
                &dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .and_then(|fd| {
                // The umask narrows the mode at creation: set it exactly.
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm))?;
                let mut file = std::fs::File::from(fd);
                file.write_all(bytes)
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
            })
        };
        let done = made.and_then(|()| rustix::fs::renameat(&dir, tmp.as_str(), &dir, name));
        if let Err(e) = done {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(BeneathError::sys(rel, e));
        }
        Ok(())
    }

    /// Put a copy of the regular file `src` at `rel` with `perm`, holes
    /// kept: only its data segments are written (`SEEK_DATA`/`SEEK_HOLE`)
    /// and the length set last, so a sparse file lands as sparse as it
    /// was (ten `truncate -s 250M` take no disk). Through a temporary
    /// beside it, renamed into place, as [`Beneath::put`]. Returns the
    /// bytes of data copied.
    pub fn put_sparse(
        &self,
        rel: &str,
        src: &std::fs::File,
        perm: u32,
    ) -> Result<u64, BeneathError> {
        let Some((dir, name)) = self.parent(rel, true)? else {
            return Err(BeneathError::sys(rel, Errno::NOENT));
        };
        if let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(BeneathError::sys(rel, Errno::ISDIR));
            }
        }
        let tmp = format!(
            ".{}.passepartout-restore-{}",
            name.to_string_lossy(),
            std::process::id()
        );
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        let made = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .and_then(|fd| {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm))?;
            let dst = std::fs::File::from(fd);
            copy_sparse(src, &dst).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
        });
        let done = made.and_then(|n| {
            rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)?;
            Ok(n)
        });
        done.map_err(|e| {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            BeneathError::sys(rel, e)
        })
    }

    /// Make the directory `rel` (and its parents) with `perm` (already
    /// there is fine).
    pub fn make_dir(&self, rel: &str, perm: u32) -> Result<(), BeneathError> {
        let Some((dir, name)) = self.parent(rel, true)? else {
            return Err(BeneathError::sys(rel, Errno::NOENT));
        };
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(perm)) {
            Ok(()) | Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(BeneathError::sys(rel, e)),
        }
    }

    /// Set the permission bits of the directory or file `rel` (never
    /// through a symlink: a link there is refused).
    pub fn chmod(&self, rel: &str, perm: u32) -> Result<(), BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Err(BeneathError::sys(rel, Errno::NOENT));
        };
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| BeneathError::sys(rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| BeneathError::sys(rel, e))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(BeneathError::sys(rel, Errno::LOOP));
        }
        // fchmod does not take an O_PATH descriptor: through /proc/self/fd.
        let via = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        rustix::fs::chmod(via.as_str(), Mode::from_raw_mode(perm))
            .map_err(|e| BeneathError::sys(rel, e))
    }

    /// Remove the file or symlink at `rel` (already gone is fine).
    pub fn remove(&self, rel: &str) -> Result<(), BeneathError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(());
        };
        match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(BeneathError::sys(rel, e)),
        }
    }

    /// Remove the empty directory at `rel`; false if it is not empty or
    /// not there.
    pub fn remove_empty_dir(&self, rel: &str) -> bool {
        match self.parent(rel, false) {
            Ok(Some((dir, name))) => rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR).is_ok(),
            _ => false,
        }
    }

    /// Every file (not directory) beneath the directory `rel`, relative to
    /// the project; symlinks are listed, never entered.
    pub fn files_under(&self, rel: &str) -> Result<Vec<String>, BeneathError> {
        Ok(self.walk(rel)?.0)
    }

    /// Every directory beneath the directory `rel` (not `rel` itself),
    /// relative to the project; symlinks are never entered.
    pub fn dirs_under(&self, rel: &str) -> Result<Vec<String>, BeneathError> {
        Ok(self.walk(rel)?.1)
    }

    /// The files and the directories beneath the directory `rel`.
    fn walk(&self, rel: &str) -> Result<(Vec<String>, Vec<String>), BeneathError> {
        let mut out = Vec::new();
        let mut dirs = Vec::new();
        let mut stack = vec![rel.trim_end_matches('/').to_string()];
        while let Some(d) = stack.pop() {
            let fd = rustix::fs::openat2(
                &self.root,
                d.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                BENEATH,
            )
            .map_err(|e| BeneathError::sys(&d, e))?;
            let entries = rustix::fs::Dir::read_from(&fd).map_err(|e| BeneathError::sys(&d, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| BeneathError::sys(&d, e))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let child = format!("{d}/{}", String::from_utf8_lossy(name));
                match self.node(&child)? {
                    Some(Node::Dir) => {
                        dirs.push(child.clone());
                        stack.push(child);
                    }
                    Some(_) => out.push(child),
                    None => {}
                }
            }
        }
        Ok((out, dirs))
    }
}

/// Copy `src` into the empty `dst` data segment by data segment, leaving
/// holes unwritten, then set the length (a trailing hole). Where the file
/// system cannot tell holes (`SEEK_DATA` unsupported) the whole file is
/// one segment. Returns the bytes of data copied.
pub fn copy_sparse(src: &std::fs::File, dst: &std::fs::File) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let len = src.metadata()?.len();
    let mut copied = 0u64;
    let mut pos = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut reader = src;
    while pos < len {
        let data = match rustix::fs::seek(src, rustix::fs::SeekFrom::Data(pos)) {
            Ok(d) => d,
            Err(Errno::NXIO) => break, // only a hole is left
            Err(Errno::INVAL) | Err(Errno::NOTSUP) => pos,
            Err(e) => return Err(e.into()),
        };
        let hole = match rustix::fs::seek(src, rustix::fs::SeekFrom::Hole(data)) {
            Ok(h) => h.min(len),
            Err(_) => len,
        };
        reader.seek(SeekFrom::Start(data))?;
        let mut at = data;
        while at < hole {
            let want = ((hole - at) as usize).min(buf.len());
            let n = reader.read(&mut buf[..want])?;
            if n == 0 {
                break;
            }
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
            copied += n as u64;
        }
        pos = hole.max(at);
    }
    dst.set_len(len)?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_copy_keeps_its_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let src = std::fs::File::create(dir.path().join("src")).unwrap();
        src.set_len(64 << 20).unwrap();
        src.write_all_at(b"middle", 32 << 20).unwrap();
        let b = Beneath::open(dir.path()).unwrap();
        let src = std::fs::File::open(dir.path().join("src")).unwrap();
        let copied = b.put_sparse("dst", &src, 0o640).unwrap();
        assert!(copied < 1 << 20, "{copied}");
        let meta = std::fs::metadata(dir.path().join("dst")).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        assert_eq!(meta.mode() & 0o777, 0o640);
        let mut buf = [0u8; 6];
        std::fs::File::open(dir.path().join("dst"))
            .unwrap()
            .read_exact_at(&mut buf, 32 << 20)
            .unwrap();
        assert_eq!(&buf, b"middle");
    }

    #[test]
    fn links_on_the_path_are_never_followed() {
        let project = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("a.txt"), "host").unwrap();
        std::os::unix::fs::symlink(host.path(), project.path().join("sub")).unwrap();
        let b = Beneath::open(project.path()).unwrap();
        assert!(matches!(
            b.node("sub/a.txt"),
            Err(BeneathError::Link { .. })
        ));
        assert!(matches!(
            b.read("sub/a.txt"),
            Err(BeneathError::Link { .. })
        ));
        assert!(b.put("sub/b.txt", b"x", 0o644, false).is_err());
        assert!(b.remove("sub/a.txt").is_err());
        assert_eq!(b.node("sub").unwrap(), Some(Node::Symlink));
        assert_eq!(std::fs::read(host.path().join("a.txt")).unwrap(), b"host");
        assert!(!host.path().join("b.txt").exists());
    }

    #[test]
    fn put_keeps_the_mode_it_is_given_and_creates_parents() {
        use std::os::unix::fs::PermissionsExt;
        let project = tempfile::tempdir().unwrap();
        let b = Beneath::open(project.path()).unwrap();
        b.put("d/e/.env", b"KEY=1\n", 0o600, false).unwrap();
        let meta = std::fs::metadata(project.path().join("d/e/.env")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(
            b.node("d/e/.env").unwrap(),
            Some(Node::File { perm: 0o600 })
        );
        assert_eq!(b.files_under("d").unwrap(), vec!["d/e/.env".to_string()]);
        b.remove("d/e/.env").unwrap();
        assert!(b.remove_empty_dir("d/e"));
        assert_eq!(b.node("d/e").unwrap(), None);
    }
}
