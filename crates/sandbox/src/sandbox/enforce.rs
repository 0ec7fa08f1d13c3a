//! How [`ResourceLimits`] are enforced on one run, and how a limit that was
//! hit is recognised and named.
//!
//! - **Memory**, for the whole command: a memory cgroup of the run's own
//!   where this host lets the daemon make one (cgroup v1 `memory`, or a
//!   cgroup v2 directory whose `subtree_control` offers `memory`), with
//!   the limit as `memory.limit_in_bytes` (v1) or `memory.max` (v2) and no
//!   swap beyond it. Every process the command starts counts, together.
//!   When the kernel kills one of them for the limit (`oom_kill` in
//!   `memory.oom_control` or `memory.events`), the run is stopped and the
//!   result names the limit. Where no memory cgroup can be made, RLIMIT_AS
//!   per process instead, which bounds the reserved address space of each
//!   process, not their total: [`memory_limit`] says which, and the
//!   sandbox's status line ([`super::probe::SandboxStatus::describe`]) and
//!   `passepartout providers` say so.
//! - **File size, CPU, open files, core dumps**: `setrlimit` in the child
//!   before it executes bwrap (RLIMIT_FSIZE, RLIMIT_CPU, RLIMIT_NOFILE,
//!   RLIMIT_CORE = 0); every process of the sandbox inherits them, and
//!   they bind root too. A process over the file size gets SIGXFSZ, over
//!   its CPU seconds SIGXCPU; the shell reports both, which is how the
//!   result names them.
//! - **Output**: not here but in [`super::runner`]: the first read past the
//!   output cap kills the process group.
//! - **Processes**, by the first of these that works here (see
//!   [`process_limit`]; [`super::probe::limit_diagnostics`] says which):
//!   1. **RLIMIT_NPROC in a user namespace of the run's own** (a daemon
//!      that is not root): the child unshares a user namespace, maps its
//!      own uid and gid, and only then sets RLIMIT_NPROC. Since Linux 5.14
//!      the kernel counts processes per (user namespace, uid) and checks
//!      every level, so the limit counts this run's processes only. It
//!      does not bind root: the kernel exempts a task whose real uid is the
//!      host's root.
//!   2. **A pids cgroup** of the run's own when one is writable here, with
//!      `pids.max`, watched through `pids.events`.
//!   3. RLIMIT_NPROC over this user's processes when no user namespace can
//!      be made: the processes this user already runs plus the limit.
//!   4. Not at all as root without a writable pids cgroup (a warning is
//!      logged, and the diagnostics say so).
//!
//!   A run that reaches the limit is stopped (not left spinning until its
//!   timeout): with a cgroup when `pids.events` counts a refused fork; in a
//!   user namespace when the run's process tree (read from `/proc` every
//!   [`WATCH_EVERY`]) holds as many tasks as the limit, or when the shell
//!   reports a fork refused for lack of resources.
//! - **The run's cgroups** (pids, memory) are made when the run starts,
//!   joined by the child before it executes bwrap, and removed after the
//!   run. On cgroup v1 the child writes `0` to the cgroup's `tasks`: moving
//!   the writing thread alone takes no lock that waits for an RCU grace
//!   period, where moving a whole process (`cgroup.procs`) does; on v2
//!   (whole processes only) it writes `cgroup.procs` and waits unless the
//!   hierarchy is mounted with `favordynmods`. A cgroup still busy after
//!   the run (the sandbox's last process is reaped by the host's init, a
//!   moment after bwrap exits) is retried a few times in the background
//!   ([`REMOVAL_TRIES`]); nothing waits for it at exit, and what is left
//!   is removed by the next daemon that makes a run cgroup.
//! - **Disk**: what the command itself wrote, wherever it wrote it
//!   ([`DiskLayers`]): the blocks allocated (`st_blocks`, so a sparse file
//!   counts what it holds) under each tree it can write to — the overlay's
//!   upper layer, the session `/tmp`, each writable bind, counted as growth
//!   over their size at the start —, the tmpfs mounts of its own (`HOME`),
//!   and files it deleted but holds open. Sampled every [`WATCH_EVERY`]
//!   (off the runtime's threads); past the limit the run is stopped. What
//!   other programs write elsewhere on the same disk does not count. A tree
//!   of more than [`DISK_WALK_MAX_ENTRIES`] entries is measured by the drop
//!   of its file system's free space instead, which also counts other
//!   programs' writes (errs on the safe side).
//! - **`/tmp`**: a tmpfs of fixed size (`--size`), in [`super::bwrap`], or
//!   the session's own `/tmp`, measured after each run
//!   ([`super::session_tmp::enforce_size`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustix::process::{getrlimit, Resource};

use super::limits::{format_size, ResourceLimits};
use super::spawn::{RawChild, SpawnError, Step};

/// How often the watchdog looks at the cgroups and the disk.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// A limit a run reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// More processes than allowed were attempted (pids cgroup or
    /// RLIMIT_NPROC).
    Processes(u64),
    /// An allocation failed at the address-space limit (RLIMIT_AS, per
    /// process).
    Memory(u64),
    /// The command's processes together reached the memory limit (its
    /// memory cgroup), and the kernel killed one.
    MemoryTotal(u64),
    /// The output passed the cap (bytes per stream); the group was killed.
    Output(u64),
    /// The command wrote more than allowed to the disk.
    DiskWrite(u64),
    /// A file reached the size limit (RLIMIT_FSIZE).
    FileSize(u64),
    /// A process used up its CPU seconds (RLIMIT_CPU).
    Cpu(u64),
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Processes(n) => write!(
                f,
                "stopped: the command tried to run more than {n} processes at once \
                 (limit `processes`); everything it started was killed"
            ),
            LimitHit::Memory(n) => write!(
                f,
                "stopped: a process ran out of its {} of memory (limit `memory`, RLIMIT_AS); \
                 raise it with `:LIMITS: memory=…` if the command needs more",
                format_size(*n)
            ),
            LimitHit::MemoryTotal(n) => write!(
                f,
                "stopped: the command's processes together used more than {} of memory \
                 (limit `memory`, for the whole command); everything it started was killed; \
                 raise it with `:LIMITS: memory=…` if the command needs more",
                format_size(*n)
            ),
            LimitHit::Output(n) => write!(
                f,
                "stopped: the output passed the cap of {n} bytes per stream; the command and \
                 everything it started were killed (print less, e.g. `| head` or `| tail`)"
            ),
            LimitHit::DiskWrite(n) => write!(
                f,
                "stopped: the command filled more than {} of the disk (limit `disk_write`); \
                 everything it started was killed, what it wrote is still there",
                format_size(*n)
            ),
            LimitHit::FileSize(n) => write!(
                f,
                "stopped: a file reached the file size limit of {} (limit `file_size`, \
                 RLIMIT_FSIZE); the writing process was killed",
                format_size(*n)
            ),
            LimitHit::Cpu(n) => write!(
                f,
                "stopped: a process used its {n} s of CPU time (limit `cpu`, RLIMIT_CPU) \
                 and was killed"
            ),
        }
    }
}

/// The limits of one run, made ready before the spawn.
#[derive(Debug)]
pub struct Enforcer {
    limits: ResourceLimits,
    /// (resource, soft, hard)
    rlimits: Vec<(Resource, u64, u64)>,
    /// The run's own cgroups (pids, memory), when made.
    cgroups: Option<RunCgroups>,
    /// The uid and gid maps of the run's own user namespace, when the
    /// process limit is RLIMIT_NPROC counted in one.
    userns: Option<UserNamespaceMaps>,
    /// What the run can write to, measured at its start (when `disk_write`
    /// is set); shared with the blocking thread that samples it.
    disk: Option<Arc<DiskLayers>>,
}

/// `/proc/self/uid_map` and `gid_map` contents mapping the daemon's own ids.
#[derive(Debug, Clone)]
struct UserNamespaceMaps {
    uid_map: std::ffi::CString,
    gid_map: std::ffi::CString,
}

impl UserNamespaceMaps {
    fn own() -> UserNamespaceMaps {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        // Digits and spaces: never a NUL byte.
        let line = |id: u32| std::ffi::CString::new(format!("{id} {id} 1")).unwrap_or_default();
        UserNamespaceMaps {
            uid_map: line(uid),
            gid_map: line(gid),
        }
    }

    /// The child's step entering a new user namespace that maps our own
    /// ids.
    fn step(&self) -> Step {
        Step::EnterUserNamespace {
            also: 0,
            uid_map: self.uid_map.clone(),
            gid_map: self.gid_map.clone(),
        }
    }

    /// In the forked child: enter a new user namespace mapping our own
    /// ids. Async-signal-safe (raw system calls on prepared data).
    fn enter(&self) -> std::io::Result<()> {
        // SAFETY: unshare takes a flag word and touches no memory of ours.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        write_proc(c"/proc/self/setgroups", b"deny")?;
        write_proc(c"/proc/self/uid_map", self.uid_map.as_bytes())?;
        write_proc(c"/proc/self/gid_map", self.gid_map.as_bytes())
    }
}

/// Write `bytes` to a `/proc` file in a forked child (no allocation).
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{open, Mode, OFlags};
    let fd = open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&fd, bytes)?;
    Ok(())
}

// ---------------------------------------------------------------------
// The run's cgroups
// ---------------------------------------------------------------------

/// A cgroup directory under which this process can make run cgroups for
/// one controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupParent {
    pub dir: PathBuf,
    /// cgroup v2 (a unified hierarchy), else v1.
    pub v2: bool,
}

impl CgroupParent {
    /// The file a process writes `0` to to join a cgroup of this
    /// hierarchy: `tasks` on v1, which moves the writing thread alone and
    /// so waits for no RCU grace period (the child is single-threaded
    /// then), `cgroup.procs` on v2.
    fn join_file(&self) -> &'static str {
        if self.v2 {
            "cgroup.procs"
        } else {
            "tasks"
        }
    }
}

/// Why a run cgroup could not be made (the run then falls back to the
/// rlimits, and says so in the log).
#[derive(Debug, thiserror::Error)]
enum CgroupError {
    #[error("cannot make {dir}: {error}")]
    Make { dir: PathBuf, error: std::io::Error },
    #[error("cannot write {file}: {error}")]
    Write {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("the path {0} holds a NUL byte")]
    Nul(PathBuf),
}

/// The cgroups one run made for itself, removed by [`Enforcer::finish`].
#[derive(Debug, Default)]
struct RunCgroups {
    /// The directories made (one per hierarchy: a v2 cgroup holds both
    /// controllers).
    dirs: Vec<PathBuf>,
    /// What the child writes `0` to, one per directory.
    joins: Vec<std::ffi::CString>,
    /// `pids.events`, when the process limit is a cgroup's.
    pids_events: Option<std::fs::File>,
    /// `memory.oom_control` (v1) or `memory.events` (v2), when the memory
    /// limit is a cgroup's.
    memory_events: Option<std::fs::File>,
}

/// Bytes read from a cgroup's event file at most: a few `key N` lines; a
/// longer text is cut, not grown.
const EVENTS_READ_MAX: usize = 512;

/// `N` of the line `key N` in a cgroup's event file, read afresh (a
/// cgroup file renders its value anew at offset 0).
fn event_count(file: &std::fs::File, key: &str) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; EVENTS_READ_MAX];
    let Ok(n) = file.read_at(&mut buf, 0) else {
        return 0;
    };
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .and_then(|n| n.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Run cgroups made by this process so far (for benchmarks and tests).
static MADE: AtomicU64 = AtomicU64::new(0);

/// Run cgroups made by this process so far (for benchmarks and tests).
pub fn run_cgroups_made() -> u64 {
    MADE.load(Ordering::Relaxed)
}

/// How many times a run cgroup still busy after its run is tried again in
/// the background, waiting 50 ms, then twice as long each time (about
/// 13 s in all): the sandbox's last process is reaped by the host's init
/// a moment after bwrap ends. Bounded, so a cgroup that stays busy costs a
/// handful of `rmdir`s; what is left then, or at exit, is removed by the
/// next daemon that makes a run cgroup ([`remove_stale_cgroups`]).
pub const REMOVAL_TRIES: u32 = 8;

impl RunCgroups {
    /// The cgroups a run with `processes` and `memory` limits needs on this
    /// host; a controller that offers none here, or whose cgroup cannot be
    /// made, is left out (the caller falls back to rlimits).
    fn make(processes: Option<u64>, memory: Option<u64>) -> RunCgroups {
        let pids = processes.and_then(|n| pids_parent().map(|p| (p, n)));
        let mem = memory.and_then(|n| memory_parent().map(|p| (p, n)));
        if pids.is_none() && mem.is_none() {
            return RunCgroups::default();
        }
        reap_stale_once();
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "passepartout-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut made = RunCgroups::default();
        let shared = matches!((&pids, &mem), (Some((p, _)), Some((m, _))) if p == m);
        if let Some((parent, n)) = &pids {
            let memory_too = shared.then(|| mem.as_ref().map(|(_, m)| *m)).flatten();
            if let Err(e) = made.add(parent, &name, Some(*n), memory_too) {
                tracing::warn!("no pids cgroup for this run: {e}");
            }
        }
        if let (Some((parent, n)), false) = (&mem, shared) {
            if let Err(e) = made.add(parent, &name, None, Some(*n)) {
                tracing::warn!("no memory cgroup for this run: {e}");
            }
        }
        made
    }

    /// Make `parent/name` with the limits given, and remember it; on an
    /// error nothing is left behind.
    fn add(
        &mut self,
        parent: &CgroupParent,
        name: &str,
        processes: Option<u64>,
        memory: Option<u64>,
    ) -> Result<(), CgroupError> {
        let dir = parent.dir.join(name);
        std::fs::create_dir(&dir).map_err(|error| CgroupError::Make {
            dir: dir.clone(),
            error,
        })?;
        MADE.fetch_add(1, Ordering::Relaxed);
        let set_up = || -> Result<(Option<std::fs::File>, Option<std::fs::File>), CgroupError> {
            let write = |file: &str, value: &str| {
                let file = dir.join(file);
                std::fs::write(&file, value).map_err(|error| CgroupError::Write { file, error })
            };
            let open = |file: &str| {
                let file = dir.join(file);
                std::fs::File::open(&file).map_err(|error| CgroupError::Write { file, error })
            };
            let mut pids_events = None;
            if let Some(n) = processes {
                write("pids.max", &n.to_string())?;
                pids_events = Some(open("pids.events")?);
            }
            let mut memory_events = None;
            if let Some(n) = memory {
                let n = n.to_string();
                if parent.v2 {
                    write("memory.max", &n)?;
                    // No swap past the limit, and the whole command goes
                    // at once when the kernel must kill (where offered).
                    let _ = write("memory.swap.max", "0");
                    let _ = write("memory.oom.group", "1");
                    memory_events = Some(open("memory.events")?);
                } else {
                    write("memory.limit_in_bytes", &n)?;
                    // Memory and swap together (present with swap
                    // accounting only); must follow the memory limit.
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write("memory.memsw.limit_in_bytes", &n)?;
                    }
                    memory_events = Some(open("memory.oom_control")?);
                }
            }
            Ok((pids_events, memory_events))
        };
        let (pids_events, memory_events) = match set_up() {
            Ok(files) => files,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let join = dir.join(parent.join_file());
        let Ok(join) = std::ffi::CString::new(join.into_os_string().into_encoded_bytes()) else {
            let _ = std::fs::remove_dir(&dir);
            return Err(CgroupError::Nul(dir));
        };
        self.pids_events = self.pids_events.take().or(pids_events);
        self.memory_events = self.memory_events.take().or(memory_events);
        self.dirs.push(dir);
        self.joins.push(join);
        Ok(())
    }

    /// Forks refused for `pids.max` in this run.
    fn refused_forks(&self) -> u64 {
        self.pids_events
            .as_ref()
            .map_or(0, |f| event_count(f, "max"))
    }

    /// Processes the kernel killed for the memory limit in this run.
    fn oom_kills(&self) -> u64 {
        self.memory_events
            .as_ref()
            .map_or(0, |f| event_count(f, "oom_kill"))
    }

    /// Remove the directories; those still busy are tried again in the
    /// background ([`REMOVAL_TRIES`]), never waited for.
    fn remove(self) {
        let busy: Vec<PathBuf> = self
            .dirs
            .into_iter()
            .filter(|d| std::fs::remove_dir(d).is_err() && d.exists())
            .collect();
        if busy.is_empty() {
            return;
        }
        let retry = async move {
            let mut busy = busy;
            let mut wait = Duration::from_millis(50);
            for _ in 0..REMOVAL_TRIES {
                tokio::time::sleep(wait).await;
                busy.retain(|d| std::fs::remove_dir(d).is_err() && d.exists());
                if busy.is_empty() {
                    return;
                }
                wait *= 2;
            }
            tracing::debug!(
                left = busy.len(),
                "run cgroups still busy are left for the next daemon to remove"
            );
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(retry)),
            Err(_) => tracing::debug!("run cgroups still busy are left for the next daemon"),
        }
    }
}

/// From `/proc/self/cgroup` and `/proc/self/mountinfo`, the directory where
/// this process can make run cgroups with `controller` (`pids`, `memory`),
/// found and tried (a cgroup made and removed) once per controller.
fn writable_parent(controller: &'static str) -> Option<CgroupParent> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let dir = find_parent(controller, &own, mountinfo()?)?;
    let v2 = dir.join("cgroup.controllers").exists();
    let probe = dir.join(format!("passepartout-{}-probe", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let limit_file = match (controller, v2) {
        ("memory", false) => "memory.limit_in_bytes",
        ("memory", true) => "memory.max",
        _ => "pids.max",
    };
    let writable = std::fs::write(probe.join(limit_file), "max").is_ok()
        || std::fs::write(probe.join(limit_file), "-1").is_ok();
    let _ = std::fs::remove_dir(&probe);
    writable.then_some(CgroupParent { dir, v2 })
}

/// Where run cgroups with a pids controller are made here, if anywhere.
fn pids_parent() -> Option<CgroupParent> {
    static FOUND: OnceLock<Option<CgroupParent>> = OnceLock::new();
    FOUND.get_or_init(|| writable_parent("pids")).clone()
}

/// Where run cgroups with a memory controller are made here, if anywhere.
fn memory_parent() -> Option<CgroupParent> {
    static FOUND: OnceLock<Option<CgroupParent>> = OnceLock::new();
    FOUND.get_or_init(|| writable_parent("memory")).clone()
}

/// How the memory limit is enforced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryLimit {
    /// A memory cgroup per run under this directory: the command's
    /// processes together.
    Cgroup { parent: PathBuf, v2: bool },
    /// RLIMIT_AS per process only: N processes may together hold N times
    /// the limit.
    PerProcess,
}

/// How this host enforces the memory limit (found once).
pub fn memory_limit() -> MemoryLimit {
    match memory_parent() {
        Some(p) => MemoryLimit::Cgroup {
            parent: p.dir,
            v2: p.v2,
        },
        None => MemoryLimit::PerProcess,
    }
}

/// Remove, once per process and before its first run cgroup, the run
/// cgroups of daemons that are gone: left because they were busy when
/// their run ended and the daemon exited, or the daemon was killed.
fn reap_stale_once() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for parent in [pids_parent(), memory_parent()].into_iter().flatten() {
            remove_stale_cgroups(&parent.dir);
        }
    });
}

/// At exit: one try to remove each of this process's run cgroups, without
/// waiting for any; the number still there is returned (busy ones are the
/// next daemon's to remove). Nothing to do when this process made none.
pub fn remove_run_cgroups() -> usize {
    if MADE.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let prefix = format!("passepartout-{}-", std::process::id());
    let mut left = 0;
    for parent in [pids_parent(), memory_parent()].into_iter().flatten() {
        let Ok(entries) = std::fs::read_dir(&parent.dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with(&prefix)
                && std::fs::remove_dir(e.path()).is_err()
                && e.path().exists()
            {
                left += 1;
            }
        }
    }
    if left > 0 {
        tracing::debug!(
            left,
            "run cgroups still busy at exit are left for the next daemon"
        );
    }
    left
}

/// Remove the run cgroups of daemons that are gone (`passepartout-<pid>-…`
/// where no process `pid` runs): those busy at their daemon's exit, and
/// all of a daemon that was killed. One still busy stays (EBUSY).
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("passepartout-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

// ---------------------------------------------------------------------
// The disk the command writes to
// ---------------------------------------------------------------------

/// Most entries one look at a writable tree walks (at the run's start and
/// at each sample): a tree larger than this (a project with its build
/// output) is measured by its file system's free space instead.
pub const DISK_WALK_MAX_ENTRIES: usize = 20_000;

/// Most processes of a run whose open files one sample looks at (for
/// files deleted while held open).
pub const DISK_OPEN_FILES_MAX_PROCESSES: usize = 512;

/// What a run can write to, on the host and in its own mount namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writable {
    /// Host directories whose growth the run causes: the overlay's upper
    /// layer, the session's `/tmp`, each writable bind's source.
    pub trees: Vec<PathBuf>,
    /// Paths inside the sandbox where a tmpfs of the run's own is mounted
    /// (`HOME`, a private `/tmp`): everything in it is the run's.
    pub private_mounts: Vec<PathBuf>,
}

#[derive(Debug)]
struct Tree {
    root: PathBuf,
    /// Its file system (`st_dev`): the walk does not cross into another.
    dev: u64,
    /// Blocks allocated under it at the start; None when it was too large
    /// to walk.
    walked: Option<u64>,
    /// Its file system's free bytes at the start: measured by their drop
    /// when the tree cannot be walked (or grows too large to be).
    free_before: u64,
}

/// The run's writable layers, measured at its start.
#[derive(Debug)]
pub struct DiskLayers {
    trees: Vec<Tree>,
    private_mounts: Vec<PathBuf>,
}

/// Blocks allocated under `root`, on its file system only, over at most
/// `max` entries; `None` when there were more.
fn tree_bytes(root: &Path, dev: u64, max: usize) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut looked = 0usize;
    let mut queue = vec![root.to_path_buf()];
    while let Some(d) = queue.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            looked += 1;
            if looked > max {
                return None;
            }
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() && meta.dev() == dev {
                queue.push(e.path());
            }
        }
    }
    Some(total)
}

/// Bytes in use on the file system holding `path`.
fn used_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(
        st.f_blocks
            .saturating_sub(st.f_bfree)
            .saturating_mul(st.f_frsize),
    )
}

/// Bytes available to unprivileged users on the file system holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

impl DiskLayers {
    /// Measure `writable` now, as the run starts. A tree nested in another
    /// one (a bind inside the project) is counted once, with the outer.
    pub fn at_start(writable: &Writable) -> DiskLayers {
        use std::os::unix::fs::MetadataExt;
        let mut roots: Vec<PathBuf> = writable.trees.clone();
        roots.sort();
        roots.dedup();
        let outer: Vec<PathBuf> = roots
            .iter()
            .filter(|r| !roots.iter().any(|o| o != *r && r.starts_with(o)))
            .cloned()
            .collect();
        let trees = outer
            .into_iter()
            .filter_map(|root| {
                let dev = std::fs::metadata(&root).ok()?.dev();
                Some(Tree {
                    walked: tree_bytes(&root, dev, DISK_WALK_MAX_ENTRIES),
                    free_before: free_bytes(&root)?,
                    root,
                    dev,
                })
            })
            .collect();
        DiskLayers {
            trees,
            private_mounts: writable.private_mounts.clone(),
        }
    }

    /// Bytes the run has written so far: the growth of each tree, what its
    /// own tmpfs mounts hold, and the files it deleted but holds open on
    /// those file systems. `run` is the pid of the run's first process.
    pub fn written(&self, run: Option<u32>) -> u64 {
        let mut total = 0u64;
        let mut devs: Vec<u64> = Vec::new();
        for t in &self.trees {
            devs.push(t.dev);
            let walked = t.walked.and_then(|before| {
                Some((before, tree_bytes(&t.root, t.dev, DISK_WALK_MAX_ENTRIES)?))
            });
            let grew = match walked {
                Some((before, now)) => now.saturating_sub(before),
                // Too large to walk: what its file system lost, which
                // counts other programs' writes too (the safe side).
                None => free_bytes(&t.root).map_or(0, |now| t.free_before.saturating_sub(now)),
            };
            total = total.saturating_add(grew);
        }
        let tree = run.map(run_processes).unwrap_or_default();
        for mount in &self.private_mounts {
            if let Some((dev, used)) = private_mount_usage(&tree, mount) {
                devs.push(dev);
                total = total.saturating_add(used);
            }
        }
        total.saturating_add(deleted_open_bytes(&tree, &devs))
    }
}

/// The pids of `root` and of all its descendants, from `/proc`.
fn run_processes(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = proc_stats()
        .into_iter()
        .map(|(pid, ppid, _)| (pid, ppid))
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// Each process's (pid, parent, threads), from `/proc/*/stat`.
fn proc_stats() -> Vec<(u32, u32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name, which may hold spaces and parentheses:
            // state ppid pgrp session tty tpgid flags minflt cminflt majflt
            // cmajflt utime stime cutime cstime priority nice num_threads.
            let rest = &stat[stat.rfind(')')? + 1..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some((
                pid,
                fields.get(1)?.parse().ok()?,
                fields.get(17)?.parse().ok()?,
            ))
        })
        .collect()
}

/// The file system and bytes used of the tmpfs the run mounted at `mount`
/// (a path inside its sandbox), seen through `/proc/<pid>/root` of one of
/// its processes that is inside (bwrap's own first process is not);
/// None before it is mounted.
fn private_mount_usage(tree: &[u32], mount: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let rel = mount.strip_prefix("/").unwrap_or(mount);
    let above = rel.parent().unwrap_or(Path::new(""));
    tree.iter().skip(1).find_map(|pid| {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let at = root.join(rel);
        let dev = std::fs::metadata(&at).ok()?.dev();
        // A mount of its own: another file system than the directory
        // holding it.
        if dev == std::fs::metadata(root.join(above)).ok()?.dev() {
            return None;
        }
        Some((dev, used_bytes(&at)?))
    })
}

/// Bytes of regular files on `devs` that the run's processes hold open
/// after deleting them (no name left for a walk to find), over the first
/// [`DISK_OPEN_FILES_MAX_PROCESSES`] processes.
fn deleted_open_bytes(tree: &[u32], devs: &[u64]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut total = 0u64;
    for pid in tree.iter().take(DISK_OPEN_FILES_MAX_PROCESSES) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(Result::ok) {
            // Follows the link to the open file itself, named or not.
            let Ok(meta) = std::fs::metadata(fd.path()) else {
                continue;
            };
            let key = (meta.dev(), meta.ino());
            if meta.is_file() && meta.nlink() == 0 && devs.contains(&key.0) && !seen.contains(&key)
            {
                seen.push(key);
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    total
}

// ---------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------

impl Enforcer {
    /// Prepare `limits` for a run in `cwd` that writes nowhere else.
    pub fn prepare(limits: &ResourceLimits, cwd: &Path) -> Enforcer {
        Enforcer::prepare_writing(
            limits,
            &Writable {
                trees: vec![cwd.to_path_buf()],
                private_mounts: vec![],
            },
        )
    }

    /// Prepare `limits` for a run that can write to `writable`: makes the
    /// run's cgroups where this host offers them ([`Enforcer::finish`]
    /// removes them), and measures what it can write to, for `disk_write`.
    pub fn prepare_writing(limits: &ResourceLimits, writable: &Writable) -> Enforcer {
        let mut rlimits = vec![(Resource::Core, 0)];
        if let Some(n) = limits.file_size {
            rlimits.push((Resource::Fsize, n));
        }
        if let Some(n) = limits.cpu_secs {
            rlimits.push((Resource::Cpu, n));
        }
        if let Some(n) = limits.open_files {
            rlimits.push((Resource::Nofile, n));
        }
        let mut userns = None;
        let mut pids_in_cgroup = None;
        if let Some(n) = limits.processes {
            if userns_nproc_binds() {
                userns = Some(UserNamespaceMaps::own());
                rlimits.push((Resource::Nproc, n));
            } else {
                pids_in_cgroup = Some(n);
            }
        }
        let cgroups = RunCgroups::make(pids_in_cgroup, limits.memory);
        if let (Some(n), None) = (pids_in_cgroup, &cgroups.pids_events) {
            if rustix::process::getuid().is_root() {
                warn_once();
            } else {
                rlimits.push((Resource::Nproc, own_process_count().saturating_add(n)));
            }
        }
        if let (Some(n), None) = (limits.memory, &cgroups.memory_events) {
            rlimits.push((Resource::As, n));
        }
        // Never raise a hard limit (EPERM for an unprivileged user). CPU
        // gets a second of grace above the soft limit: SIGXCPU at the soft
        // one (which the shell reports, so the result can name the limit),
        // SIGKILL at the hard one for a process that ignores it.
        let rlimits = rlimits
            .into_iter()
            .map(|(res, want)| {
                let hard = getrlimit(res).maximum.unwrap_or(u64::MAX);
                let grace = u64::from(res == Resource::Cpu);
                (res, want.min(hard), want.saturating_add(grace).min(hard))
            })
            .collect();
        let disk = limits
            .disk_write
            .map(|_| Arc::new(DiskLayers::at_start(writable)));
        Enforcer {
            limits: *limits,
            rlimits,
            cgroups: (!cgroups.dirs.is_empty()).then_some(cgroups),
            userns,
            disk,
        }
    }

    /// Whether the run's child enters a user namespace of its own for the
    /// process limit ([`ProcessLimit::UserNamespace`]).
    pub fn enters_user_namespace(&self) -> bool {
        self.userns.is_some()
    }

    /// Whether the memory limit holds for the whole command (a memory
    /// cgroup of the run's own), rather than per process.
    pub fn memory_is_whole_command(&self) -> bool {
        self.cgroups
            .as_ref()
            .is_some_and(|c| c.memory_events.is_some())
    }

    /// Add the limits to the child's steps: the user namespace first (so
    /// that RLIMIT_NPROC counts in it), then the rlimits, then the join of
    /// the run's cgroups.
    pub fn install(&self, cmd: &mut super::spawn::Command) {
        if let Some(maps) = &self.userns {
            cmd.step(maps.step());
        }
        for &(resource, soft, hard) in &self.rlimits {
            cmd.step(Step::SetRlimit {
                resource,
                soft,
                hard,
            });
        }
        for file in self.cgroups.iter().flat_map(|c| &c.joins) {
            cmd.step(Step::JoinCgroup { file: file.clone() });
        }
    }

    /// Start `cmd` (prepared with [`Enforcer::install`]).
    pub async fn spawn(&self, cmd: super::spawn::Command) -> Result<RawChild, SpawnError> {
        cmd.spawn()
    }

    /// A limit the running command has reached, if any (called every
    /// [`WATCH_EVERY`] while `child`, the process spawned, runs). The disk
    /// is measured on a blocking thread: a walk must not hold up the
    /// runtime's.
    pub async fn check(&self, child: Option<u32>) -> Option<LimitHit> {
        if let Some(hit) = self.cgroup_hit() {
            return Some(hit);
        }
        if let (Some(_), Some(n), Some(root)) = (&self.userns, self.limits.processes, child) {
            // The kernel refuses the fork past n; a run holding n tasks is
            // at the limit (a fork bomb stays there, forking in vain).
            if tree_tasks(root) >= n {
                return Some(LimitHit::Processes(n));
            }
        }
        if let (Some(disk), Some(n)) = (&self.disk, self.limits.disk_write) {
            let disk = Arc::clone(disk);
            let written = tokio::task::spawn_blocking(move || disk.written(child))
                .await
                .unwrap_or(0);
            if written > n {
                return Some(LimitHit::DiskWrite(n));
            }
        }
        None
    }

    /// A limit the run's cgroups counted: a refused fork, a process killed
    /// for the memory limit.
    fn cgroup_hit(&self) -> Option<LimitHit> {
        let cg = self.cgroups.as_ref()?;
        if let Some(n) = self.limits.processes {
            if cg.refused_forks() > 0 {
                return Some(LimitHit::Processes(n));
            }
        }
        if let Some(n) = self.limits.memory {
            if cg.oom_kills() > 0 {
                return Some(LimitHit::MemoryTotal(n));
            }
        }
        None
    }

    /// Whether a watchdog is needed at all.
    pub fn watches(&self) -> bool {
        self.cgroups.is_some() || self.userns.is_some() || self.disk.is_some()
    }

    /// The limit an ended run ran into, read from its cgroups' counters
    /// and from how it ended: the signal or the shell's exit code for it
    /// (128 + signal), or the message the shell printed for a child killed
    /// by it.
    pub fn recognise(
        &self,
        exit_code: Option<i32>,
        signal: Option<i32>,
        stderr: &str,
    ) -> Option<LimitHit> {
        let by = |sig: i32, message: &str| {
            signal == Some(sig) || exit_code == Some(128 + sig) || stderr.contains(message)
        };
        if let Some(n) = self.limits.file_size {
            if by(libc::SIGXFSZ, "File size limit exceeded") {
                return Some(LimitHit::FileSize(n));
            }
        }
        if let Some(n) = self.limits.cpu_secs {
            if by(libc::SIGXCPU, "CPU time limit exceeded") {
                return Some(LimitHit::Cpu(n));
            }
        }
        if let Some(hit) = self.cgroup_hit() {
            return Some(hit);
        }
        if let (Some(_), Some(n)) = (&self.userns, self.limits.processes) {
            if exit_code != Some(0) && FORK_REFUSED.iter().any(|m| stderr.contains(m)) {
                return Some(LimitHit::Processes(n));
            }
        }
        if let (Some(n), false) = (self.limits.memory, self.memory_is_whole_command()) {
            if exit_code != Some(0) && OUT_OF_MEMORY.iter().any(|m| stderr.contains(m)) {
                return Some(LimitHit::Memory(n));
            }
        }
        None
    }

    /// Remove the run's cgroups. The run's result does not wait for one
    /// still busy: right after bwrap exits the kernel often still counts
    /// the sandbox's last process, and such a cgroup is retried in the
    /// background ([`REMOVAL_TRIES`]).
    pub async fn finish(self) {
        if let Some(cg) = self.cgroups {
            cg.remove();
        }
    }
}

/// Tasks (threads count, as RLIMIT_NPROC counts them) of `root` and of
/// all its descendants, from `/proc`.
fn tree_tasks(root: u32) -> u64 {
    let procs = proc_stats();
    let mut tree = vec![root];
    let mut total = 0;
    while let Some(pid) = tree.pop() {
        for &(child, parent, threads) in &procs {
            if child == pid {
                total += threads;
            }
            if parent == pid {
                tree.push(child);
            }
        }
    }
    total
}

/// How the process limit is enforced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimit {
    /// RLIMIT_NPROC set inside a user namespace of the run's own: counts
    /// the run's processes only, costs no cgroup.
    UserNamespace,
    /// A pids cgroup per run under this directory; `v2` tells the
    /// hierarchy, `favordynmods` whether it is mounted so that a process
    /// joining a cgroup does not wait for an RCU grace period (on v1 the
    /// child moves alone, as a thread, and never waits).
    Cgroup {
        parent: PathBuf,
        v2: bool,
        favordynmods: bool,
    },
    /// RLIMIT_NPROC over this user's processes.
    Nproc,
    /// Not at all: root without a writable pids cgroup.
    NotEnforced,
}

/// How this host enforces the process limit (found once; the first call
/// makes a trial cgroup and removes it again).
pub fn process_limit() -> ProcessLimit {
    if userns_nproc_binds() {
        return ProcessLimit::UserNamespace;
    }
    match pids_parent() {
        Some(CgroupParent { dir: parent, v2 }) => {
            // The super options of the mount holding `parent`.
            let favordynmods = mountinfo()
                .unwrap_or_default()
                .lines()
                .filter_map(|l| {
                    let (left, right) = l.split_once(" - ")?;
                    let point = left.split(' ').nth(4)?;
                    let fs = right.split(' ').next()?;
                    let opts = right.split(' ').nth(2).unwrap_or("");
                    (fs.starts_with("cgroup") && parent.starts_with(point))
                        .then(|| (point.len(), opts.split(',').any(|o| o == "favordynmods")))
                })
                .max_by_key(|(len, _)| *len)
                .is_some_and(|(_, on)| on);
            ProcessLimit::Cgroup {
                parent,
                v2,
                favordynmods,
            }
        }
        None if rustix::process::getuid().is_root() => ProcessLimit::NotEnforced,
        None => ProcessLimit::Nproc,
    }
}

fn warn_once() {
    static WARNED: OnceLock<()> = OnceLock::new();
    WARNED.get_or_init(|| {
        tracing::warn!(
            "the sandbox's process limit is not enforced: running as root, where RLIMIT_NPROC \
             does not apply, and no pids cgroup is writable"
        );
    });
}

/// `/proc/self/mountinfo`, read once per process.
fn mountinfo() -> Option<&'static str> {
    static TEXT: OnceLock<Option<String>> = OnceLock::new();
    TEXT.get_or_init(|| std::fs::read_to_string("/proc/self/mountinfo").ok())
        .as_deref()
}

/// From `/proc/self/cgroup` and `/proc/self/mountinfo`: our cgroup in the
/// v1 hierarchy of `controller`, else our v2 cgroup if its
/// `subtree_control` enables `controller` for children.
fn find_parent(controller: &str, own: &str, mountinfo: &str) -> Option<PathBuf> {
    // mountinfo: id parent major:minor root mountpoint opts... - fstype source superopts
    let mounts: Vec<(String, String, String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            Some((
                left.get(3)?.to_string(),
                left.get(4)?.to_string(),
                right.first()?.to_string(),
                right.get(2).unwrap_or(&"").to_string(),
            ))
        })
        .collect();
    let join = |mount_root: &str, mountpoint: &str, path: &str| -> Option<PathBuf> {
        let rel = path.strip_prefix(mount_root).unwrap_or(path);
        let rel = rel.trim_start_matches('/');
        Some(Path::new(mountpoint).join(rel))
    };
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == controller) {
            if let Some((root, point, _, _)) = mounts
                .iter()
                .find(|(_, _, fs, opts)| fs == "cgroup" && opts.split(',').any(|o| o == controller))
            {
                return join(root, point, path);
            }
        }
    }
    for line in own.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            for (root, point, fs, _) in &mounts {
                if fs != "cgroup2" {
                    continue;
                }
                let dir = join(root, point, path)?;
                let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                    .is_ok_and(|t| t.split_whitespace().any(|c| c == controller));
                if enabled {
                    return Some(dir);
                }
            }
        }
    }
    None
}

/// Processes (and threads count too, for the kernel) this user runs now.
fn own_process_count() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::getuid().as_raw();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| {
            std::fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|status| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix("Threads:"))
                        .and_then(|n| n.trim().parse().ok())
                })
                .unwrap_or(1)
        })
        .sum()
}

/// How a shell reports a fork refused at RLIMIT_NPROC (bash, dash, zsh,
/// Python).
const FORK_REFUSED: &[&str] = &[
    "fork: Resource temporarily unavailable",
    "fork: retry: Resource temporarily unavailable",
    "Cannot fork",
    "can't fork",
    "BlockingIOError: [Errno 11] Resource temporarily unavailable",
];

/// Whether RLIMIT_NPROC set inside a user namespace of the run's own binds
/// here: not for root (exempt), and only where this process may create a
/// user namespace (tried once, in a forked child).
pub fn userns_nproc_binds() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        if rustix::process::getuid().is_root() {
            return false;
        }
        let maps = UserNamespaceMaps::own();
        // SAFETY: the child makes only async-signal-safe calls (unshare,
        // open, write, close, setrlimit, _exit) on data prepared before the
        // fork, then exits; the parent waits for it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let limit = libc::rlimit {
                    rlim_cur: 16,
                    rlim_max: 16,
                };
                let ok = maps.enter().is_ok() && libc::setrlimit(libc::RLIMIT_NPROC, &limit) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
            if pid < 0 {
                return false;
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0) == pid
                && libc::WIFEXITED(status)
                && libc::WEXITSTATUS(status) == 0
        }
    })
}

/// How programs report a failed allocation on stderr: glibc's strerror
/// (bash, coreutils), awk, Python, C++, Rust, Perl, the JVM's start-up.
const OUT_OF_MEMORY: &[&str] = &[
    "Cannot allocate memory",
    "out of memory",
    "Out of memory",
    "MemoryError",
    "std::bad_alloc",
    "memory allocation of",
    "memory exhausted",
    "Could not reserve enough space",
];

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids
37 25 0:32 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_v1_hierarchies_per_controller() {
        let own = "9:name=systemd:/\n8:pids:/user.slice\n4:memory:/svc/a1\n0::/\n";
        assert_eq!(
            find_parent("pids", own, MOUNTINFO_V1),
            Some(PathBuf::from("/sys/fs/cgroup/pids/user.slice"))
        );
        assert_eq!(
            find_parent("memory", own, MOUNTINFO_V1),
            Some(PathBuf::from("/sys/fs/cgroup/memory/svc/a1"))
        );
    }

    #[test]
    fn no_controller_means_none() {
        let own = "4:memory:/x\n";
        let mounts = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(find_parent("pids", own, mounts), None);
    }

    #[test]
    fn event_files_are_read_by_key() {
        let mut f = tempfile::tempfile().unwrap();
        use std::io::Write;
        write!(f, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(event_count(&f, "oom_kill"), 2);
        assert_eq!(event_count(&f, "under_oom"), 0);
        assert_eq!(event_count(&f, "max"), 0);
    }

    #[test]
    fn a_process_tree_counts_its_threads() {
        // This test process runs at least one thread; a pid that does not
        // exist has no tree.
        assert!(tree_tasks(std::process::id()) >= 1);
        assert_eq!(tree_tasks(u32::MAX), 0);
    }

    #[test]
    fn the_disk_counts_growth_of_each_tree_once_and_deleted_open_files() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("old"), vec![1u8; 256 * 1024]).unwrap();
        std::fs::create_dir(a.path().join("inner")).unwrap();
        let layers = DiskLayers::at_start(&Writable {
            // `inner` lies inside `a`: counted with it, once.
            trees: vec![a.path().into(), a.path().join("inner"), b.path().into()],
            private_mounts: vec![],
        });
        assert_eq!(layers.trees.len(), 2);
        assert!(layers.written(None) < 64 * 1024, "nothing written yet");
        std::fs::write(a.path().join("inner/new"), vec![1u8; 1024 * 1024]).unwrap();
        std::fs::write(b.path().join("new"), vec![1u8; 1024 * 1024]).unwrap();
        let written = layers.written(None);
        assert!(
            (2 * 1024 * 1024..3 * 1024 * 1024).contains(&written),
            "{written}"
        );
        // A file deleted while held open (by this process, here the run's).
        let held = b.path().join("held");
        let file = std::fs::File::create(&held).unwrap();
        use std::io::Write;
        (&file).write_all(&vec![1u8; 1024 * 1024]).unwrap();
        file.sync_all().unwrap();
        std::fs::remove_file(&held).unwrap();
        let with_held = layers.written(Some(std::process::id()));
        assert!(
            with_held >= written + 1024 * 1024,
            "{with_held} vs {written}"
        );
        drop(file);
    }

    #[test]
    fn a_refused_fork_is_named_in_a_user_namespace_only() {
        let mut e = Enforcer {
            limits: ResourceLimits::default(),
            rlimits: vec![],
            cgroups: None,
            userns: None,
            disk: None,
        };
        let bash = "bash: fork: retry: Resource temporarily unavailable";
        assert_eq!(e.recognise(Some(254), None, bash), None);
        e.userns = Some(UserNamespaceMaps::own());
        let n = ResourceLimits::default().processes.unwrap();
        assert_eq!(
            e.recognise(Some(254), None, bash),
            Some(LimitHit::Processes(n))
        );
    }

    #[test]
    fn hits_are_named() {
        assert_eq!(
            LimitHit::FileSize(1024 * 1024).to_string(),
            "stopped: a file reached the file size limit of 1 MiB (limit `file_size`, \
             RLIMIT_FSIZE); the writing process was killed"
        );
        assert!(LimitHit::Processes(64)
            .to_string()
            .contains("more than 64 processes"));
        assert!(LimitHit::MemoryTotal(64 * 1024 * 1024)
            .to_string()
            .contains("together used more than 64 MiB of memory (limit `memory`"));
    }

    #[test]
    fn recognises_signals_and_shell_messages() {
        let e = Enforcer {
            limits: ResourceLimits::default(),
            rlimits: vec![],
            cgroups: None,
            userns: None,
            disk: None,
        };
        let fsize = ResourceLimits::default().file_size.unwrap();
        assert_eq!(
            e.recognise(Some(153), None, ""),
            Some(LimitHit::FileSize(fsize))
        );
        assert_eq!(
            e.recognise(
                Some(1),
                None,
                "bash: line 1: 12 File size limit exceeded cat"
            ),
            Some(LimitHit::FileSize(fsize))
        );
        assert_eq!(
            e.recognise(None, Some(libc::SIGXCPU), ""),
            Some(LimitHit::Cpu(120))
        );
        assert_eq!(e.recognise(Some(0), None, "fine"), None);
        let memory = ResourceLimits::default().memory.unwrap();
        assert_eq!(
            e.recognise(Some(2), None, "awk: cmd. line:1: fatal: out of memory"),
            Some(LimitHit::Memory(memory))
        );
        assert_eq!(
            e.recognise(Some(0), None, "grep: out of memory was logged"),
            None
        );
    }
}
