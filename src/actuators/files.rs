//! The files actuator: reads, lists, searches and writes inside the
//! session's working directory, confined by the kernel.
//!
//! Paths were confined lexically when the action was planned; that says
//! nothing about what is on disk when the action runs (a plan can wait for
//! hours, and `ln -s .. up` makes `up/x` a path *outside* the project that
//! reads like one inside). So every effect opens the working directory once
//! and resolves the rest of the path beneath it with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, at
//! execution time: the kernel refuses any `..` that climbs out and any
//! symlink on the way, including one swapped in after approval. Writes
//! create missing directories the same way, one component at a time, and
//! replace the file atomically (a temporary file in the same directory,
//! then `renameat`), so a hard link to the old file is never written
//! through. Writing a control-surface path ([`crate::control_surface`])
//! needs a person's approval of this exact action.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::action::{Action, Effect};
use crate::control_surface::{control_entry, HostPath};
use crate::tools::confine_to;

use super::client_fs::{self, ClientFsError, ClientFsLink};
use super::{ActContext, ActError, ActOutput, Actuator};

/// Largest file the actuator will return whole to the model.
const MAX_READ_BYTES: u64 = 256 * 1024;
/// Most directory entries or search hits listed.
const MAX_ENTRIES: usize = 1000;
/// How `openat2` resolves every path beneath the working directory.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The files actuator; reads and writes go through the client's fs when
/// it offers one ([`super::client_fs`]).
#[derive(Default)]
pub struct FilesActuator {
    client: ClientFsLink,
    /// The daemon's own directories: never written, the private ones never
    /// read.
    hosts: Arc<[HostPath]>,
}

impl FilesActuator {
    pub fn new(client: ClientFsLink) -> Self {
        FilesActuator {
            client,
            hosts: Arc::from([]),
        }
    }

    /// The daemon's own directories (see
    /// [`crate::control_surface::host_paths_of`]).
    pub fn with_host_paths(mut self, hosts: Vec<HostPath>) -> Self {
        self.hosts = hosts.into();
        self
    }
}

#[async_trait::async_trait]
impl Actuator for FilesActuator {
    fn target(&self) -> &str {
        "files"
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let (path, job): (&Path, Job) = match &action.effect {
            Effect::ReadFile { path } => (path, Job::Read),
            Effect::ListDir { path } => (path, Job::List),
            Effect::WriteFile { path, content } => (path, Job::Write(content.clone())),
            Effect::SearchText { path, pattern } => (path, Job::Search(pattern.clone())),
            other => {
                return Err(ActError::Unsupported {
                    target: "files".into(),
                    effect: effect_name(other),
                })
            }
        };
        if ctx.read_only && matches!(job, Job::Write(_)) {
            // The mode gate denied it already; this is the second lock.
            return Ok(ActOutput::error(crate::modes::READ_ONLY_REASON));
        }
        // Through the editor when it offers its fs: same checks first.
        let note = match through_client(&self.client, path, &job, ctx, &self.hosts).await? {
            Delegated::Done(out) => return Ok(out),
            Delegated::Disk(note) => note,
        };
        let mut out = blocking(ctx, path, job, &self.hosts).await;
        if let Some(note) = note {
            out.text = format!("{}\n[{note}]", out.text);
        }
        Ok(out)
    }
}

/// [`perform`] off the runtime's workers (blocking file system calls).
async fn blocking(ctx: &ActContext, path: &Path, job: Job, hosts: &Arc<[HostPath]>) -> ActOutput {
    let cwd = ctx.cwd.clone();
    let requested = path.to_path_buf();
    let approved_by = ctx.approved_by.clone();
    let hosts = hosts.clone();
    tokio::task::spawn_blocking(move || {
        perform(&cwd, &requested, job, approved_by.as_deref(), &hosts)
    })
    .await
    .unwrap_or_else(|e| ActOutput::error(format!("the file operation failed: {e}")))
}

/// Whether the client's fs did the job, or the disk must (with a note why).
enum Delegated {
    Done(ActOutput),
    Disk(Option<String>),
}

/// Read or write through the client's fs when it offers the method: the
/// path is resolved and checked by [`perform`] exactly as for the disk,
/// and only the kernel-resolved absolute path reaches the client.
async fn through_client(
    link: &ClientFsLink,
    path: &Path,
    job: &Job,
    ctx: &ActContext,
    hosts: &Arc<[HostPath]>,
) -> Result<Delegated, ActError> {
    let (out, check) = match job {
        Job::Read => match link.reader() {
            Some(out) => (out, Job::ResolveRead),
            None => return Ok(Delegated::Disk(None)),
        },
        Job::Write(_) => match link.writer() {
            Some(out) => (out, Job::ResolveWrite),
            None => return Ok(Delegated::Disk(None)),
        },
        _ => return Ok(Delegated::Disk(None)),
    };
    let resolved = blocking(ctx, path, check, hosts).await;
    if resolved.is_error {
        return Ok(Delegated::Done(resolved));
    }
    let absolute = PathBuf::from(&resolved.text);
    match job {
        Job::Write(content) => {
            match client_fs::write(&out, &ctx.session_id, &absolute, content, &ctx.cancel).await {
                Ok(()) => Ok(Delegated::Done(
                    settle_client_write(ctx, path, content, &absolute, hosts).await,
                )),
                Err(e) => client_failed(e),
            }
        }
        _ => match client_fs::read(&out, &ctx.session_id, &absolute, &ctx.cancel).await {
            Ok(text) => Ok(Delegated::Done(ActOutput::ok(text))),
            Err(e) => client_failed(e),
        },
    }
}

/// Only *method not found* goes back to the disk; any other client error
/// is the action's error, never a silent disk fallback.
fn client_failed(e: ClientFsError) -> Result<Delegated, ActError> {
    match e {
        ClientFsError::Cancelled => Err(ActError::Cancelled),
        ClientFsError::NotImplemented { .. } => {
            Ok(Delegated::Disk(Some(format!("{e}; done on disk instead"))))
        }
        other => Ok(Delegated::Done(ActOutput::error(other.to_string()))),
    }
}

/// After the client wrote: the disk must hold the text (checkpoints and the
/// shell see the disk). When it does not (a client that keeps the buffer
/// unsaved), write it atomically beneath the working directory ourselves.
async fn settle_client_write(
    ctx: &ActContext,
    path: &Path,
    content: &str,
    absolute: &Path,
    hosts: &Arc<[HostPath]>,
) -> ActOutput {
    let (cwd, requested, expected) = (ctx.cwd.clone(), path.to_path_buf(), content.to_string());
    let saved = tokio::task::spawn_blocking(move || disk_holds(&cwd, &requested, &expected))
        .await
        .unwrap_or(false);
    if saved {
        return ActOutput::ok(format!(
            "wrote {} bytes to {} (through the editor)",
            content.len(),
            absolute.display()
        ));
    }
    let mut out = blocking(ctx, path, Job::Write(content.to_string()), hosts).await;
    if !out.is_error {
        out.text = format!(
            "{} (the editor took the text but did not save it; written to disk too)",
            out.text
        );
    }
    out
}

/// Whether the file at `requested` (resolved beneath `cwd` like every
/// effect) holds exactly `content`; reads at most one byte more than that.
fn disk_holds(cwd: &Path, requested: &Path, content: &str) -> bool {
    let Ok(full) = confine_to(cwd, &requested.to_string_lossy()) else {
        return false;
    };
    let Ok(rel) = full.strip_prefix(cwd) else {
        return false;
    };
    let opened = rustix::fs::open(
        cwd,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(|root| open_beneath(&root, rel, OFlags::RDONLY | OFlags::NONBLOCK));
    let Ok(fd) = opened else {
        return false;
    };
    let mut bytes = Vec::new();
    let read =
        Read::take(std::fs::File::from(fd), content.len() as u64 + 1).read_to_end(&mut bytes);
    read.is_ok() && bytes == content.as_bytes()
}

enum Job {
    Read,
    List,
    Write(String),
    Search(String),
    /// The checks of a read, no reading: the absolute path the kernel
    /// resolved, for the client's fs.
    ResolveRead,
    /// The checks of a write (directories created), no writing: the
    /// absolute path, for the client's fs.
    ResolveWrite,
}

fn perform(
    cwd: &Path,
    requested: &Path,
    job: Job,
    approved_by: Option<&str>,
    hosts: &[HostPath],
) -> ActOutput {
    let full = match confine_to(cwd, &requested.to_string_lossy()) {
        Ok(p) => p,
        Err(e) => return ActOutput::error(e.to_string()),
    };
    let rel = match full.strip_prefix(cwd) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => {
            return ActOutput::error(format!(
                "path `{}` is outside the working directory {}",
                requested.display(),
                cwd.display()
            ))
        }
    };
    let root = match rustix::fs::open(
        cwd,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            return ActOutput::error(format!(
                "cannot open the working directory {}: {e}",
                cwd.display()
            ))
        }
    };
    let shown = display(&rel);
    if !matches!(job, Job::Write(_) | Job::ResolveWrite) {
        if let Some(host) = crate::control_surface::private_entry(&full, hosts) {
            return ActOutput::error(format!(
                "refused: `{shown}` is one of the agent's own private files ({}); the agent's \
                 tools do not read them (they may hold API keys or the person's history).",
                host.why
            ));
        }
    }
    match job {
        Job::Read => read_file(&root, &rel, &shown),
        Job::List => list_dir(&root, &rel, &shown),
        Job::Search(pattern) => search(&root, &rel, &pattern, &private_within(cwd, hosts)),
        Job::ResolveRead => resolve_read(&root, &rel, &shown),
        Job::Write(_) | Job::ResolveWrite => {
            if let Some(host) = crate::control_surface::host_entry(&full, hosts) {
                return ActOutput::error(format!(
                    "refused: `{shown}` is one of the agent's own files ({}); the agent never \
                     writes them, even with approval. The person can edit it themselves.",
                    host.why
                ));
            }
            if let Some(entry) = control_entry(&rel) {
                if approved_by.is_none() {
                    return ActOutput::error(format!(
                        "refused: `{shown}` is part of the project's control surface ({}); the \
                         agent may change it only when a person approves this exact action. \
                         Explain why the change is needed; the write is then offered to the \
                         person as a flight plan.",
                        entry.why
                    ));
                }
            }
            match job {
                Job::Write(content) => write_file(&root, &rel, &shown, &content, &full),
                _ => resolve_write(&root, &rel, &shown),
            }
        }
    }
}

/// Why a path could not be opened beneath the working directory, in words
/// for the model.
fn refusal(shown: &str, doing: &str, e: Errno) -> String {
    match e {
        Errno::LOOP => format!(
            "refused: `{shown}` goes through a symbolic link; the files tools follow no \
             symbolic links, so that a path always names a file inside the project"
        ),
        Errno::XDEV => format!("refused: `{shown}` leads outside the working directory"),
        Errno::NOSYS => format!(
            "refused: this kernel has no openat2 (Linux 5.6 or later), which the files tools \
             need to stay inside the project; `{shown}` was not {doing}"
        ),
        other => format!("cannot {doing} {shown}: {}", std::io::Error::from(other)),
    }
}

fn open_beneath(dir: impl AsFd, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    rustix::fs::openat2(dir, rel, flags | OFlags::CLOEXEC, Mode::empty(), BENEATH)
}

fn read_file(root: &OwnedFd, rel: &Path, shown: &str) -> ActOutput {
    // O_NONBLOCK: a FIFO planted at the path must not hang the actuator.
    let fd = match open_beneath(
        root,
        rel,
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK,
    ) {
        Ok(fd) => fd,
        Err(e) => return ActOutput::error(refusal(shown, "read", e)),
    };
    let st = match rustix::fs::fstat(&fd) {
        Ok(st) => st,
        Err(e) => return ActOutput::error(refusal(shown, "read", e)),
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind == FileType::Directory {
        return ActOutput::error(format!("{shown} is a directory; list it instead"));
    }
    if kind != FileType::RegularFile {
        return ActOutput::error(format!("{shown} is not a regular file"));
    }
    let size = st.st_size as u64;
    if size > MAX_READ_BYTES {
        return ActOutput::error(format!(
            "{shown} is {size} bytes, more than the {MAX_READ_BYTES}-byte read limit; search it \
             instead"
        ));
    }
    let mut bytes = Vec::new();
    let file = std::fs::File::from(fd);
    if let Err(e) = Read::take(file, MAX_READ_BYTES + 1).read_to_end(&mut bytes) {
        return ActOutput::error(format!("cannot read {shown}: {e}"));
    }
    match String::from_utf8(bytes) {
        Ok(text) => ActOutput::ok(text),
        Err(_) => ActOutput::error(format!("{shown} is not UTF-8 text")),
    }
}

/// The names in a directory opened for reading, sorted, with their types.
fn entries(dir: &OwnedFd) -> Result<Vec<(Vec<u8>, FileType)>, Errno> {
    let mut out = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir)?;
    while let Some(entry) = d.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes().to_vec();
        if name == b"." || name == b".." {
            continue;
        }
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            if let Ok(st) = rustix::fs::statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                kind = FileType::from_raw_mode(st.st_mode);
            }
        }
        out.push((name, kind));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn list_dir(root: &OwnedFd, rel: &Path, shown: &str) -> ActOutput {
    let listed =
        open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY).and_then(|fd| entries(&fd));
    let listed = match listed {
        Ok(l) => l,
        Err(e) => return ActOutput::error(refusal(shown, "list", e)),
    };
    let total = listed.len();
    let mut text = format!("{shown}: {total} entries\n");
    for (name, kind) in listed.iter().take(MAX_ENTRIES) {
        let name = String::from_utf8_lossy(name);
        let mark = match *kind {
            FileType::Directory => "/",
            FileType::Symlink => "@",
            _ => "",
        };
        let _ = writeln!(text, "{name}{mark}");
    }
    if total > MAX_ENTRIES {
        let _ = writeln!(text, "[… {} more entries not shown]", total - MAX_ENTRIES);
    }
    ActOutput::ok(text)
}

/// The private host paths inside `cwd`, relative to it: a search never
/// enters them.
fn private_within(cwd: &Path, hosts: &[HostPath]) -> Vec<PathBuf> {
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    hosts
        .iter()
        .filter(|h| h.private)
        .filter_map(|h| h.path.strip_prefix(&cwd).ok().map(Path::to_path_buf))
        .collect()
}

/// Plain substring search, line by line, over text files under `rel`.
/// Symbolic links are skipped, never followed.
fn search(root: &OwnedFd, rel: &Path, pattern: &str, private: &[PathBuf]) -> ActOutput {
    let shown = display(rel);
    let start = match open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => return ActOutput::error(refusal(&shown, "search", e)),
    };
    let mut hits = Vec::new();
    let is_dir = rustix::fs::fstat(&start)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir {
        search_file(start, &shown, pattern, &mut hits);
    } else {
        let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(start, rel.to_path_buf())];
        while let Some((dir, dir_rel)) = stack.pop() {
            if hits.len() >= MAX_ENTRIES {
                break;
            }
            let Ok(listed) = entries(&dir) else {
                continue;
            };
            let mut subdirs = Vec::new();
            for (name, kind) in listed {
                if hits.len() >= MAX_ENTRIES {
                    break;
                }
                let name_os = OsStr::from_bytes(&name);
                let child_rel = dir_rel.join(name_os);
                match kind {
                    FileType::Directory => {
                        if matches!(name.as_slice(), b".git" | b"target" | b"node_modules") {
                            continue;
                        }
                        if private.contains(&child_rel) {
                            continue;
                        }
                        if let Ok(fd) = open_beneath(
                            &dir,
                            Path::new(name_os),
                            OFlags::RDONLY | OFlags::DIRECTORY,
                        ) {
                            subdirs.push((fd, child_rel));
                        }
                    }
                    FileType::RegularFile => {
                        if let Ok(fd) = open_beneath(
                            &dir,
                            Path::new(name_os),
                            OFlags::RDONLY | OFlags::NONBLOCK,
                        ) {
                            search_file(fd, &display(&child_rel), pattern, &mut hits);
                        }
                    }
                    _ => {}
                }
            }
            // Depth first, in name order.
            stack.extend(subdirs.into_iter().rev());
        }
    }
    if hits.is_empty() {
        ActOutput::ok(format!("no matches for `{pattern}`"))
    } else {
        ActOutput::ok(hits.join("\n"))
    }
}

fn search_file(fd: OwnedFd, shown: &str, pattern: &str, hits: &mut Vec<String>) {
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return;
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_size as u64 > MAX_READ_BYTES
    {
        return;
    }
    let mut text = String::new();
    if std::fs::File::from(fd).read_to_string(&mut text).is_err() {
        return;
    }
    for (n, line) in text.lines().enumerate() {
        if line.contains(pattern) {
            hits.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            if hits.len() >= MAX_ENTRIES {
                break;
            }
        }
    }
}

/// The directory a write lands in (created one component at a time,
/// each beneath the one before: no symlink, no `..`, no escape), the file's
/// name in it, and the mode to keep.
fn open_parent<'a>(
    root: &OwnedFd,
    rel: &'a Path,
    shown: &str,
) -> Result<(OwnedFd, &'a OsStr, Mode), ActOutput> {
    let parts: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect();
    let Some((name, parents)) = parts.split_last() else {
        return Err(ActOutput::error(format!(
            "{shown} is a directory; name a file to write"
        )));
    };
    // Walk (and create) the directories one component at a time, each
    // opened beneath the one before: no symlink, no `..`, no escape.
    let mut dir = match rustix::fs::openat(
        root,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return Err(ActOutput::error(refusal(shown, "write", e))),
    };
    for part in parents {
        let next = match open_beneath(&dir, Path::new(part), OFlags::PATH | OFlags::DIRECTORY) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(ActOutput::error(refusal(shown, "write", e))),
                }
                open_beneath(&dir, Path::new(part), OFlags::PATH | OFlags::DIRECTORY)
            }
            other => other,
        };
        dir = match next {
            Ok(fd) => fd,
            Err(Errno::NOTDIR) => {
                return Err(ActOutput::error(format!(
                    "cannot write {shown}: `{}` is not a directory",
                    Path::new(part).display()
                )))
            }
            Err(e) => return Err(ActOutput::error(refusal(shown, "write", e))),
        };
    }
    // The file itself: never a symlink, never a directory; keep its mode.
    let mut mode = Mode::from_raw_mode(0o644);
    match rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => mode = Mode::from_raw_mode(st.st_mode & 0o7777),
            FileType::Symlink => {
                return Err(ActOutput::error(refusal(shown, "write", Errno::LOOP)))
            }
            FileType::Directory => {
                return Err(ActOutput::error(format!(
                    "{shown} is a directory; name a file to write"
                )))
            }
            _ => {
                return Err(ActOutput::error(format!(
                    "cannot write {shown}: not a regular file"
                )))
            }
        },
        Err(Errno::NOENT) => {}
        Err(e) => return Err(ActOutput::error(refusal(shown, "write", e))),
    }
    Ok((dir, name, mode))
}

/// The checks of a read, and the absolute path of the file the kernel
/// opened (for the client's fs).
fn resolve_read(root: &OwnedFd, rel: &Path, shown: &str) -> ActOutput {
    let fd = match open_beneath(root, rel, OFlags::PATH) {
        Ok(fd) => fd,
        Err(e) => return ActOutput::error(refusal(shown, "read", e)),
    };
    match rustix::fs::fstat(&fd).map(|st| FileType::from_raw_mode(st.st_mode)) {
        Ok(FileType::RegularFile) => {}
        Ok(FileType::Directory) => {
            return ActOutput::error(format!("{shown} is a directory; list it instead"))
        }
        Ok(_) => return ActOutput::error(format!("{shown} is not a regular file")),
        Err(e) => return ActOutput::error(refusal(shown, "read", e)),
    }
    match fd_path(&fd) {
        Ok(p) => ActOutput::ok(p.display().to_string()),
        Err(e) => ActOutput::error(format!("cannot resolve {shown}: {e}")),
    }
}

/// The checks of a write (directories created), and the absolute path the
/// file will have (for the client's fs).
fn resolve_write(root: &OwnedFd, rel: &Path, shown: &str) -> ActOutput {
    let (dir, name, _) = match open_parent(root, rel, shown) {
        Ok(parent) => parent,
        Err(refused) => return refused,
    };
    match fd_path(&dir) {
        Ok(p) => ActOutput::ok(p.join(name).display().to_string()),
        Err(e) => ActOutput::error(format!("cannot resolve {shown}: {e}")),
    }
}

/// The path the kernel holds for an open file: canonical, no symlinks.
fn fd_path(fd: &OwnedFd) -> std::io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn write_file(root: &OwnedFd, rel: &Path, shown: &str, content: &str, full: &Path) -> ActOutput {
    let (dir, name, mode) = match open_parent(root, rel, shown) {
        Ok(parent) => parent,
        Err(refused) => return refused,
    };
    let tmp_name = format!(
        ".{}.{}-{}.tmp",
        Path::new(name).display(),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let tmp = match rustix::fs::openat(
        &dir,
        tmp_name.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
    ) {
        Ok(fd) => fd,
        Err(e) => return ActOutput::error(refusal(shown, "write", e)),
    };
    let mut file = std::fs::File::from(tmp);
    let written = file
        .write_all(content.as_bytes())
        .and_then(|()| file.sync_all());
    drop(file);
    let renamed = written.map_err(|e| e.to_string()).and_then(|()| {
        rustix::fs::renameat(&dir, tmp_name.as_str(), &dir, name)
            .map_err(|e| refusal(shown, "write", e))
    });
    match renamed {
        Ok(()) => ActOutput::ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            full.display()
        )),
        Err(e) => {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_str(), AtFlags::empty());
            ActOutput::error(format!("cannot write {shown}: {e}"))
        }
    }
}

fn effect_name(e: &Effect) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "this effect".into())
}

/// A path relative to the working directory as shown to the model.
fn display(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cwd: &Path, path: &str, job: Job, approved: bool) -> ActOutput {
        perform(cwd, Path::new(path), job, approved.then_some("ada"), &[])
    }

    #[test]
    fn writes_create_directories_and_replace_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), "a/b/c.txt", Job::Write("one".into()), false);
        assert!(!out.is_error, "{}", out.text);
        std::fs::set_permissions(
            dir.path().join("a/b/c.txt"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        // A hard link to the old file keeps the old content.
        std::fs::hard_link(dir.path().join("a/b/c.txt"), dir.path().join("link")).unwrap();
        let out = run(dir.path(), "a/b/c.txt", Job::Write("two".into()), false);
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "two"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("link")).unwrap(),
            "one"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("a/b/c.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let names = std::fs::read_dir(dir.path().join("a/b")).unwrap().count();
        assert_eq!(names, 1, "no temporary file is left behind");
    }

    #[test]
    fn symlinks_anywhere_on_the_path_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("up")).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("s")).unwrap();
        for (path, job) in [
            ("up/x", Job::Write("x".into())),
            ("up/new/x", Job::Write("x".into())),
            ("s", Job::Write("x".into())),
            ("up/secret", Job::Read),
            ("s", Job::Read),
            ("up", Job::List),
            ("up", Job::Search("s".into())),
        ] {
            let out = run(dir.path(), path, job, true);
            assert!(out.is_error, "{path}: {}", out.text);
            // The planner's lexical check catches links that already lead
            // out; the kernel catches the rest.
            assert!(
                out.text.contains("symbolic link") || out.text.contains("outside the working"),
                "{path}: {}",
                out.text
            );
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "s"
        );
    }

    #[test]
    fn control_surface_needs_a_person() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), ".envrc", Job::Write("x".into()), false);
        assert!(out.is_error);
        assert!(
            out.text
                .starts_with("refused: `.envrc` is part of the project's control surface (direnv"),
            "{}",
            out.text
        );
        assert!(!dir.path().join(".envrc").exists());
        let out = run(
            dir.path(),
            ".passepartout/skills/x.org",
            Job::Write("x".into()),
            false,
        );
        assert!(out.is_error);
        assert!(!dir.path().join(".passepartout").exists());
        let out = run(dir.path(), ".envrc", Job::Write("x".into()), true);
        assert!(!out.is_error, "{}", out.text);
        // Reading is fine.
        let out = run(dir.path(), ".envrc", Job::Read, false);
        assert_eq!(out.text, "x");
    }

    #[test]
    fn list_and_search_stay_inside_and_skip_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "fn main() {}\nneedle here\n").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("etc")).unwrap();
        let out = run(dir.path(), ".", Job::List, false);
        assert_eq!(out.text, ".: 2 entries\netc@\nsrc/\n");
        let out = run(dir.path(), ".", Job::Search("needle".into()), false);
        assert_eq!(out.text, "src/a.rs:2: needle here");
        let out = run(dir.path(), "src/a.rs", Job::Read, false);
        assert!(out.text.contains("needle"));
    }

    #[test]
    fn resolving_for_the_client_checks_like_the_disk_and_gives_the_kernel_path() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("up")).unwrap();
        let out = run(dir.path(), "a.txt", Job::ResolveRead, false);
        assert_eq!(out.text, root.join("a.txt").display().to_string());
        // A write's directories are created; nothing is written.
        let out = run(dir.path(), "new/dir/b.txt", Job::ResolveWrite, false);
        assert_eq!(out.text, root.join("new/dir/b.txt").display().to_string());
        assert!(dir.path().join("new/dir").is_dir());
        assert!(!dir.path().join("new/dir/b.txt").exists());
        for (path, job) in [
            ("up/x", Job::ResolveRead),
            ("up/x", Job::ResolveWrite),
            ("missing.txt", Job::ResolveRead),
            (".", Job::ResolveRead),
            (".envrc", Job::ResolveWrite),
        ] {
            let out = run(dir.path(), path, job, false);
            assert!(out.is_error, "{path}: {}", out.text);
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let out = run(dir.path(), ".envrc", Job::ResolveWrite, true);
        assert_eq!(out.text, root.join(".envrc").display().to_string());
    }
}
