//! How [`ResourceLimits`] are enforced on one run, and how a limit that was
//! hit is recognised and named.
//!
//! - **Memory, file size, CPU, open files, core dumps**: `setrlimit` in the
//!   child before it executes bwrap (RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CPU,
//!   RLIMIT_NOFILE, RLIMIT_CORE = 0); every process of the sandbox inherits
//!   them, and they bind root too. A process over the file size gets
//!   SIGXFSZ, over its CPU seconds SIGXCPU; the shell reports both, which is
//!   how the result names them. Over its address space an allocation fails
//!   and the program says so ("out of memory", "Cannot allocate memory",
//!   …), which is how the memory limit is named. RLIMIT_AS rather than a
//!   memory cgroup: it costs nothing per run, where joining a cgroup v1
//!   hierarchy costs an RCU grace period (~12 ms measured here); the price
//!   is that it bounds reserved address space, so a runtime that reserves
//!   a large heap up front (a JVM without `-Xmx`) needs `memory=` raised.
//! - **Output**: not here but in [`super::runner`]: the first read past the
//!   output cap kills the process group.
//! - **Processes**, by the first of these that works here (see
//!   [`process_limit`]; [`super::probe::limit_diagnostics`] says which):
//!   1. **RLIMIT_NPROC in a user namespace of the run's own** (a daemon
//!      that is not root): the child unshares a user namespace, maps its
//!      own uid and gid, and only then sets RLIMIT_NPROC. Since Linux 5.14
//!      the kernel counts processes per (user namespace, uid) and checks
//!      every level, so the limit counts this run's processes only — not
//!      the person's desktop — and the namespace keeps the daemon's own
//!      (high) limit as its ceiling at the parent level. It costs an
//!      `unshare` and three small `/proc` writes in the child (tens of µs),
//!      and bwrap's own user namespace nests inside it. It does not bind
//!      root: the kernel exempts a task whose real uid is the host's root
//!      (`INIT_USER`), measured here (1,000 forks under a limit of 32).
//!   2. **A pids cgroup** when one is writable here (cgroup v1 `pids`, or a
//!      cgroup v2 directory whose `subtree_control` offers `pids`): a cgroup
//!      per run with `pids.max`, watched through `pids.events`. Moving a
//!      process into a cgroup waits for an RCU grace period unless one ran
//!      just before (p50 14 ms on this 2-core host after a pause), so no
//!      process is moved per run where it can be avoided: on cgroup v1,
//!      which moves single threads, each run cgroup has a *resident
//!      thread* of the daemon that joined it once when the cgroup was made
//!      and clones every run's child there — a child starts in its parent
//!      thread's cgroup, so nothing migrates and the per-run cost is a hop
//!      to that thread. Waking that thread on the other core (a halted
//!      vCPU here) was most of the hop, so the shell actuator says a run is
//!      coming ([`run_coming`]) before it takes the control surface's
//!      snapshot: the thread wakes then and spins for the spawn, yielding
//!      the core at every turn, for at most [`RESIDENT_SPIN`]. `pids.max`
//!      counts the resident thread, so it is the limit plus one. On cgroup v2 (whole processes only) the child
//!      joins the cgroup before exec and pays the wait unless the hierarchy
//!      is mounted with `favordynmods`. Run cgroups are reused: one that a
//!      run left empty goes back to a small pool ([`CGROUP_POOL`]) with
//!      its thread, its `pids.max` and its count of refused forks. A cgroup
//!      a bwrap run used empties only when the host's init reaps the
//!      sandbox's last process (1–2 s here), so a *keeper* thread keeps
//!      [`CGROUP_READY`] cgroups made ahead, resident thread joined, and a
//!      run takes one instead of paying the `mkdir` and the join on its
//!      path; it is told to make the next once the run's child is started.
//!      The keeper starts only when runs are coming ([`prepare_runs`], at
//!      the sandbox's trial run before the first shell action, or the
//!      first run itself): a daemon that never runs a command makes no run
//!      cgroup and starts no thread for them, and none competes with its
//!      `initialize` reply for the CPU. At exit [`remove_run_cgroups`]
//!      removes this process's run cgroups (bounded in time; what is left,
//!      a cgroup whose last process the host has not reaped yet, is removed
//!      by the next daemon that makes run cgroups).
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
//! - **Disk**: the free space of every file system the run can write to
//!   (the working directory's, the overlay's upper layer's, the session
//!   `/tmp`'s, each writable bind's) is sampled every [`WATCH_EVERY`]; when
//!   together they have dropped by more than the limit the run is stopped.
//!   This bounds `cat /dev/urandom > a; cat /dev/urandom > b; ...` which no
//!   per-file limit can, wherever the run writes; it also counts what other
//!   programs write meanwhile, which errs on the safe side.
//! - **`/tmp`**: a tmpfs of fixed size (`--size`), in [`super::bwrap`], or
//!   the session's own `/tmp`, measured after each run
//!   ([`super::session_tmp::enforce_size`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{getrlimit, Resource};

use super::limits::{format_size, ResourceLimits};
use super::spawn::{RawChild, SpawnError, Step};

/// How often the watchdog looks at the pids cgroup and the disk.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// A limit a run reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// More processes than allowed were attempted (pids cgroup or
    /// RLIMIT_NPROC).
    Processes(u64),
    /// An allocation failed at the address-space limit (RLIMIT_AS).
    Memory(u64),
    /// The output passed the cap (bytes per stream); the group was killed.
    Output(u64),
    /// The disk's free space dropped by more than allowed.
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
    cgroup: Option<RunCgroup>,
    /// The uid and gid maps of the run's own user namespace, when the
    /// process limit is RLIMIT_NPROC counted in one.
    userns: Option<UserNamespaceMaps>,
    /// Each file system the run can write to (one path on it), with its
    /// free bytes before the run.
    disk: Vec<(PathBuf, u64)>,
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

#[derive(Debug)]
struct RunCgroup {
    dir: PathBuf,
    /// `cgroup.procs` of the run's cgroup, as a C string for the child.
    procs: std::ffi::CString,
    /// The limit of processes of a run in it (`pids.max` is one more when
    /// a resident thread lives there).
    max: u64,
    /// The daemon's thread living in this cgroup (cgroup v1), which clones
    /// the run's child so that it starts here; None: the child joins.
    resident: Option<Resident>,
    /// Forks refused in it before this run (a reused cgroup keeps its count).
    refused_before: u64,
    /// `pids.current` and `pids.events`, open for as long as the cgroup
    /// lives: read after every run (and by the watchdog), each read is one
    /// `pread` instead of an open, a read and a close of a path built anew
    /// (~0.1 ms per run measured, see docs/performance.md).
    counters: CgroupCounters,
}

/// A run cgroup's counter files, kept open.
#[derive(Debug)]
struct CgroupCounters {
    current: std::fs::File,
    events: std::fs::File,
}

/// Bytes read from a counter file at most: `pids.current` is one number,
/// `pids.events` one line (`max N`); a longer text is cut, not grown.
const COUNTER_READ_MAX: usize = 128;

impl CgroupCounters {
    fn open(dir: &Path) -> Option<CgroupCounters> {
        Some(CgroupCounters {
            current: std::fs::File::open(dir.join("pids.current")).ok()?,
            events: std::fs::File::open(dir.join("pids.events")).ok()?,
        })
    }

    /// The file's text from its start, read again (a cgroup file renders
    /// its value afresh at offset 0), at most [`COUNTER_READ_MAX`] bytes.
    fn read<'b>(file: &std::fs::File, buf: &'b mut [u8; COUNTER_READ_MAX]) -> Option<&'b str> {
        use std::os::unix::fs::FileExt;
        let n = file.read_at(buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()
    }

    /// Processes in the cgroup now (`pids.current`).
    fn current(&self) -> Option<u64> {
        let mut buf = [0u8; COUNTER_READ_MAX];
        Self::read(&self.current, &mut buf)?.trim().parse().ok()
    }

    /// Forks refused for `pids.max` since the cgroup was made (`max N` in
    /// `pids.events`).
    fn refused(&self) -> u64 {
        let mut buf = [0u8; COUNTER_READ_MAX];
        Self::read(&self.events, &mut buf)
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("max ").and_then(|n| n.trim().parse().ok()))
            })
            .unwrap_or(0)
    }
}

/// Most empty run cgroups kept for reuse, those made ahead included.
pub const CGROUP_POOL: usize = 8;

/// How many run cgroups the keeper thread keeps ready ahead of the runs
/// (made, `pids.max` written, the resident thread joined): a run takes
/// one and never pays the `mkdir` and the join (an RCU grace period) on
/// its path. Needed because a cgroup a bwrap run used settles slowly:
/// the sandbox's last process is a zombie reaped by the host's init,
/// which took 1.1–1.8 s here (`pids.current` stays at 1 meanwhile), so
/// back-to-back runs find no settled cgroup to reuse.
pub const CGROUP_READY: usize = 4;

/// Empty run cgroups, ready for the next run (at most [`CGROUP_POOL`]).
static POOL: std::sync::Mutex<Vec<RunCgroup>> = std::sync::Mutex::new(Vec::new());
/// Wakes the keeper thread when a run took a cgroup from [`POOL`].
static POOL_TAKEN: std::sync::Condvar = std::sync::Condvar::new();
/// The limit the last run asked for: the keeper writes it into the
/// cgroups it makes, so that the next run need not.
static LAST_MAX: AtomicU64 = AtomicU64::new(u64::MAX);
/// Run cgroups made, and of those made by a run on its own path (the pool
/// was empty).
static MADE: AtomicU64 = AtomicU64::new(0);
static MADE_ON_PATH: AtomicU64 = AtomicU64::new(0);
/// Set by [`remove_run_cgroups`]: the keeper makes no more cgroups.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Held by the keeper while it makes a cgroup, so that
/// [`remove_run_cgroups`] can wait for one being made (it then lands in
/// the pool, which the removal empties) instead of missing it.
static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long [`remove_run_cgroups`] may take at exit: long enough for the
/// made-ahead cgroups, which empty as soon as their resident threads end,
/// and short enough that a person never waits on it. A cgroup a run used
/// right before the exit stays busy until the host reaps the sandbox's
/// last process, which can take seconds: it is left for the next daemon
/// to remove ([`remove_stale_cgroups`]), never waited for.
pub const EXIT_CLEANUP_WITHIN: Duration = Duration::from_millis(20);

/// The longest wait between two tries to remove a run cgroup that is
/// still busy (at exit, after a run, or discarded): the tries back off
/// from 1 ms to this, so a cgroup that stays busy for seconds (the host
/// reaps the sandbox's last process late) costs a few `rmdir`s a second,
/// not a storm.
pub const REMOVAL_RETRY_MAX: Duration = Duration::from_millis(200);

/// `rmdir` of run cgroups tried so far, and how many of those failed
/// (busy, `EBUSY`). For benchmarks and tests: the retries stay bounded.
static RMDIR_TRIED: AtomicU64 = AtomicU64::new(0);
static RMDIR_FAILED: AtomicU64 = AtomicU64::new(0);

/// Remove the run cgroup `dir`; whether it is gone now. Counted.
fn remove_run_cgroup_dir(dir: &Path) -> bool {
    RMDIR_TRIED.fetch_add(1, Ordering::Relaxed);
    let removed = std::fs::remove_dir(dir).is_ok();
    if !removed {
        RMDIR_FAILED.fetch_add(1, Ordering::Relaxed);
    }
    removed
}

/// `rmdir`s of run cgroups tried by this process so far, and how many
/// failed because the cgroup was still busy. For benchmarks and tests.
pub fn run_cgroup_removals() -> (u64, u64) {
    (
        RMDIR_TRIED.load(Ordering::Relaxed),
        RMDIR_FAILED.load(Ordering::Relaxed),
    )
}

/// Run cgroups made by this process so far: (all, made by a run on its
/// path because none was ready). For benchmarks and tests.
pub fn run_cgroups_made() -> (u64, u64) {
    (
        MADE.load(Ordering::Relaxed),
        MADE_ON_PATH.load(Ordering::Relaxed),
    )
}

/// Lock the pool; a poisoned lock still holds a valid list.
fn pool() -> std::sync::MutexGuard<'static, Vec<RunCgroup>> {
    POOL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Start making run cgroups ahead, because runs are coming: the keeper
/// thread starts (once per process) where runs take a pids cgroup, and
/// first removes the run cgroups that daemons gone meanwhile left. Called
/// as the sandbox makes its trial run (before the first shell action),
/// and by a run that finds the keeper not started; not at start-up, so
/// that a daemon that never runs a command makes none.
pub fn prepare_runs() {
    if userns_nproc_binds() {
        return;
    }
    if let Some(parent) = pids_parent() {
        start_keeper(parent);
    }
}

/// A run with a process limit is about to start (the shell actuator says
/// so before it takes the control surface's snapshot): the resident thread
/// of the run cgroup that run will take is woken now, and spins for the
/// spawn (at most [`RESIDENT_SPIN`]) instead of being woken by it, so the
/// wake-up on the other core overlaps the caller's own set-up. Nothing
/// happens where runs take no resident thread (a user namespace, cgroup
/// v2, no cgroup ready).
pub fn run_coming() {
    let next = pool()
        .last()
        .and_then(|cg| cg.resident.as_ref())
        .map(|r| std::sync::Arc::clone(&r.hand));
    if let Some(hand) = next {
        hand.expect();
    }
}

/// Whether the keeper thread was started ([`prepare_runs`]).
pub fn keeper_started() -> bool {
    KEEPER.get().is_some()
}

static KEEPER: OnceLock<()> = OnceLock::new();

fn start_keeper(parent: PathBuf) {
    KEEPER.get_or_init(|| {
        let keeper = std::thread::Builder::new()
            .name("cgroup-keeper".into())
            .spawn(move || {
                remove_stale_cgroups(&parent);
                keep_ready(parent);
            });
        if let Err(e) = keeper {
            tracing::debug!("no run cgroups made ahead: {e}");
        }
    });
}

/// Lock [`MAKING`]; a poisoned lock guards nothing that could be broken.
fn making() -> std::sync::MutexGuard<'static, ()> {
    MAKING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The keeper: keeps [`CGROUP_READY`] run cgroups in the pool, made off
/// the runs' path, and never more than [`CGROUP_POOL`] in it. Runs until
/// [`remove_run_cgroups`] stops it (at exit).
fn keep_ready(parent: PathBuf) {
    let mut ready = pool();
    loop {
        while ready.len() >= CGROUP_READY && !STOPPING.load(Ordering::Relaxed) {
            ready = POOL_TAKEN
                .wait(ready)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        drop(ready);
        let made = {
            let _making = making();
            if STOPPING.load(Ordering::Relaxed) {
                return;
            }
            RunCgroup::create_in(&parent, LAST_MAX.load(Ordering::Relaxed))
        };
        ready = pool();
        match made {
            Some(cg) if ready.len() < CGROUP_POOL => ready.push(cg),
            // Settled cgroups came back meanwhile and filled the pool.
            Some(cg) => {
                drop(ready);
                cg.discard();
                ready = pool();
            }
            None => {
                // Cannot make one now (a limit on cgroups?): runs make
                // their own meanwhile; try again later, not in a loop.
                tracing::debug!("the keeper could not make a run cgroup ahead");
                ready = POOL_TAKEN
                    .wait_timeout(ready, Duration::from_secs(1))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        }
    }
}

impl Enforcer {
    /// Prepare `limits` for a run in `cwd`. Creates the run's cgroup when
    /// one is available; [`Enforcer::finish`] removes it.
    pub fn prepare(limits: &ResourceLimits, cwd: &Path) -> Enforcer {
        Enforcer::prepare_writing(limits, &[cwd.to_path_buf()])
    }

    /// [`Enforcer::prepare`] for a run that can write to each of `places`
    /// (the working directory, an overlay's upper layer, the session's
    /// `/tmp`, further writable binds): the disk limit watches every file
    /// system among them, and counts what they lost together.
    pub fn prepare_writing(limits: &ResourceLimits, places: &[PathBuf]) -> Enforcer {
        let mut rlimits = vec![(Resource::Core, 0)];
        if let Some(n) = limits.memory {
            rlimits.push((Resource::As, n));
        }
        if let Some(n) = limits.file_size {
            rlimits.push((Resource::Fsize, n));
        }
        if let Some(n) = limits.cpu_secs {
            rlimits.push((Resource::Cpu, n));
        }
        if let Some(n) = limits.open_files {
            rlimits.push((Resource::Nofile, n));
        }
        let mut cgroup = None;
        let mut userns = None;
        if let Some(n) = limits.processes {
            if userns_nproc_binds() {
                userns = Some(UserNamespaceMaps::own());
                rlimits.push((Resource::Nproc, n));
            } else {
                cgroup = RunCgroup::take(n);
            }
            if cgroup.is_none() && userns.is_none() {
                if rustix::process::getuid().is_root() {
                    warn_once();
                } else {
                    rlimits.push((Resource::Nproc, own_process_count().saturating_add(n)));
                }
            }
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
        let disk = match limits.disk_write {
            Some(_) => file_systems(places),
            None => Vec::new(),
        };
        Enforcer {
            limits: *limits,
            rlimits,
            cgroup,
            userns,
            disk,
        }
    }

    /// Whether the run's child enters a user namespace of its own for the
    /// process limit ([`ProcessLimit::UserNamespace`]).
    pub fn enters_user_namespace(&self) -> bool {
        self.userns.is_some()
    }

    /// Add the limits to the child's steps: the user namespace first (so
    /// that RLIMIT_NPROC counts in it), then the rlimits, then the join of
    /// the run's cgroup when no resident thread lives there.
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
        // A child cloned by the cgroup's resident thread starts in it.
        if let Some(cg) = self.cgroup.as_ref().filter(|c| c.resident.is_none()) {
            cmd.step(Step::JoinCgroup {
                procs: cg.procs.clone(),
            });
        }
    }

    /// Start `cmd` (prepared with [`Enforcer::install`]): from the run
    /// cgroup's resident thread when it has one, so that the child starts
    /// in the cgroup, else from this thread.
    pub async fn spawn(&self, cmd: super::spawn::Command) -> Result<RawChild, SpawnError> {
        let Some(resident) = self.cgroup.as_ref().and_then(|c| c.resident.as_ref()) else {
            let spawned = cmd.spawn();
            if self.cgroup.is_some() {
                POOL_TAKEN.notify_one();
            }
            return spawned;
        };
        let (sender, spawned) = tokio::sync::oneshot::channel();
        let job: SpawnJob = Box::new(move || {
            super::spawn::timeline::mark("resident woke");
            // A caller gone meanwhile drops the child, which kills it.
            let _ = sender.send(cmd.spawn());
            // The child runs: the keeper makes the next run's cgroup while
            // the caller waits for it.
            POOL_TAKEN.notify_one();
        });
        let gone = || SpawnError {
            during: Some("handing the spawn to the run cgroup's thread".into()),
            error: std::io::Error::other("the thread is gone"),
        };
        resident.hand.hand_over(job).map_err(|_| gone())?;
        spawned.await.map_err(|_| gone())?
    }

    /// A limit the running command has reached, if any (called every
    /// [`WATCH_EVERY`] while `child`, the process spawned, runs).
    pub fn check(&self, child: Option<u32>) -> Option<LimitHit> {
        if let (Some(cg), Some(n)) = (&self.cgroup, self.limits.processes) {
            if cg.limit_events() > 0 {
                return Some(LimitHit::Processes(n));
            }
        }
        if let (Some(_), Some(n), Some(root)) = (&self.userns, self.limits.processes, child) {
            // The kernel refuses the fork past n; a run holding n tasks is
            // at the limit (a fork bomb stays there, forking in vain).
            if tree_tasks(root) >= n {
                return Some(LimitHit::Processes(n));
            }
        }
        if let Some(n) = self.limits.disk_write {
            let taken: u64 = self
                .disk
                .iter()
                .filter_map(|(path, before)| free_bytes(path).map(|now| before.saturating_sub(now)))
                .fold(0, u64::saturating_add);
            if taken > n {
                return Some(LimitHit::DiskWrite(n));
            }
        }
        None
    }

    /// Whether a watchdog is needed at all.
    pub fn watches(&self) -> bool {
        self.cgroup.is_some() || self.userns.is_some() || !self.disk.is_empty()
    }

    /// The limit an ended run ran into, read from how it ended: the signal
    /// or the shell's exit code for it (128 + signal), or the message the
    /// shell printed for a child killed by it.
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
        if let (Some(cg), Some(n)) = (&self.cgroup, self.limits.processes) {
            if cg.limit_events() > 0 {
                return Some(LimitHit::Processes(n));
            }
        }
        if let (Some(_), Some(n)) = (&self.userns, self.limits.processes) {
            if exit_code != Some(0) && FORK_REFUSED.iter().any(|m| stderr.contains(m)) {
                return Some(LimitHit::Processes(n));
            }
        }
        if let Some(n) = self.limits.memory {
            if exit_code != Some(0) && OUT_OF_MEMORY.iter().any(|m| stderr.contains(m)) {
                return Some(LimitHit::Memory(n));
            }
        }
        None
    }

    /// Give the run's cgroup back to the pool once the run has left it
    /// empty, else remove it once its processes are gone. The run's result
    /// does not wait for that: right after bwrap exits, the kernel often
    /// still counts the sandbox's last processes (its pid namespace is
    /// torn down as bwrap ends; `rmdir` gave EBUSY 3 runs in 5 here), so a
    /// cgroup that is not empty yet is watched off the caller's path, soon
    /// at first and then less often, and pooled when it empties. (Removing
    /// it at once instead left the pool empty after most bwrap runs, and
    /// the next run paid for a fresh cgroup and its resident thread's
    /// join: milliseconds.)
    pub async fn finish(self) {
        let Some(cg) = self.cgroup else {
            return;
        };
        // Told already when the child started; again in case no child
        // did (a spawn that failed), so the pool does not stay short.
        POOL_TAKEN.notify_one();
        let mut removing = false;
        let Some(cg) = cg.settle(&mut removing) else {
            return;
        };
        let settle = async move {
            let mut cg = cg;
            let mut wait = Duration::from_millis(1);
            let mut waited = Duration::ZERO;
            while waited < Duration::from_secs(10) {
                tokio::time::sleep(wait).await;
                waited += wait;
                match cg.settle(&mut removing) {
                    None => return,
                    Some(back) => cg = back,
                }
                wait = (wait * 2).min(REMOVAL_RETRY_MAX);
            }
            tracing::warn!(cgroup = %cg.dir.display(), "could not remove the run's cgroup");
        };
        tokio::spawn(settle);
    }
}

impl RunCgroup {
    /// Back to the pool once empty, or removed when the pool is full
    /// (`removing` then stays set); the cgroup back while it is not done.
    fn settle(mut self, removing: &mut bool) -> Option<RunCgroup> {
        if !*removing {
            if !self.is_empty() {
                return Some(self);
            }
            self.refused_before = self.refused_total();
            let mut pool = pool();
            if pool.len() < CGROUP_POOL {
                pool.push(self);
                return None;
            }
            drop(pool);
            *removing = true;
            // A resident thread leaves the cgroup when it ends: tell it to.
            self.resident = None;
        }
        if remove_run_cgroup_dir(&self.dir) {
            return None;
        }
        Some(self)
    }
}

impl RunCgroup {
    /// An empty pids cgroup with `pids.max = max`: one from the pool, else
    /// a fresh one; None when no pids hierarchy is writable here.
    fn take(max: u64) -> Option<RunCgroup> {
        LAST_MAX.store(max, Ordering::Relaxed);
        // Runs are here: make the next ones ahead from now on.
        start_keeper(pids_parent()?);
        // The keeper is told once the run's child is started (see
        // `Enforcer::spawn`), not here: woken now it would compete for a
        // CPU with this run's own set-up.
        let pooled = pool().pop();
        if let Some(mut cg) = pooled {
            if cg.max == max || cg.set_max(max) {
                cg.max = max;
                return Some(cg);
            }
            cg.discard();
        }
        let made = Self::create(max);
        if made.is_some() {
            MADE_ON_PATH.fetch_add(1, Ordering::Relaxed);
        }
        made
    }

    /// Remove a cgroup no run will use, off the caller's path: its resident
    /// thread ends (which takes it out of the cgroup), and the directory is
    /// removed once the kernel no longer counts it.
    fn discard(mut self) {
        self.resident = None;
        if remove_run_cgroup_dir(&self.dir) {
            return;
        }
        let removed = std::thread::Builder::new()
            .name("cgroup-discard".into())
            .spawn(move || {
                let mut wait = Duration::from_millis(1);
                let mut waited = Duration::ZERO;
                while waited < Duration::from_secs(10) {
                    std::thread::sleep(wait);
                    waited += wait;
                    if remove_run_cgroup_dir(&self.dir) {
                        return;
                    }
                    wait = (wait * 2).min(REMOVAL_RETRY_MAX);
                }
                tracing::warn!(cgroup = %self.dir.display(), "could not remove a run cgroup");
            });
        if let Err(e) = removed {
            tracing::debug!("a run cgroup is left for the next start to remove: {e}");
        }
    }

    /// Write `pids.max` for a run limit of `max` processes (the resident
    /// thread counts too); `u64::MAX` is no limit.
    fn set_max(&self, max: u64) -> bool {
        let value = match max {
            u64::MAX => "max".to_string(),
            n => n
                .saturating_add(u64::from(self.resident.is_some()))
                .to_string(),
        };
        std::fs::write(self.dir.join("pids.max"), value).is_ok()
    }

    /// Whether no process of a run is left in it (its resident thread
    /// aside).
    fn is_empty(&self) -> bool {
        self.counters
            .current()
            .is_some_and(|n| n <= u64::from(self.resident.is_some()))
    }

    /// A fresh pids cgroup with `pids.max = max`.
    fn create(max: u64) -> Option<RunCgroup> {
        Self::create_in(&pids_parent()?, max)
    }

    /// A fresh pids cgroup under `parent` (`u64::MAX`: no `pids.max`).
    /// Whether run cgroups can be made in `parent`: one is made (with its
    /// `pids.max` written) and removed again.
    fn writable_in(parent: &Path) -> bool {
        let dir = parent.join(format!("passepartout-{}-probe", std::process::id()));
        if std::fs::create_dir(&dir).is_err() {
            return false;
        }
        let writable = std::fs::write(dir.join("pids.max"), "max").is_ok();
        let _ = std::fs::remove_dir(&dir);
        writable
    }

    fn create_in(parent: &Path, max: u64) -> Option<RunCgroup> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "passepartout-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        MADE.fetch_add(1, Ordering::Relaxed);
        let procs = std::ffi::CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .ok();
        let (Some(procs), Some(counters)) = (procs, CgroupCounters::open(&dir)) else {
            let _ = std::fs::remove_dir(&dir);
            return None;
        };
        // `pids.max` binds forks, not moves: set it, let the thread join,
        // then count the thread in.
        let mut cg = RunCgroup {
            resident: None,
            dir,
            procs,
            max,
            refused_before: 0,
            counters,
        };
        if !cg.set_max(max) {
            let _ = std::fs::remove_dir(&cg.dir);
            return None;
        }
        cg.resident = Resident::start(&cg.dir);
        if !cg.set_max(max) {
            cg.resident = None;
            let _ = std::fs::remove_dir(&cg.dir);
            return None;
        }
        Some(cg)
    }

    /// How many times a fork was refused for `pids.max` in this run.
    fn limit_events(&self) -> u64 {
        self.refused_total().saturating_sub(self.refused_before)
    }

    /// How many times a fork was refused for `pids.max` since the cgroup
    /// was made (`max N` in `pids.events`).
    fn refused_total(&self) -> u64 {
        self.counters.refused()
    }
}

/// Work for a resident thread: spawn one child.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// How long a resident thread spins for a spawn it was told is coming
/// ([`run_coming`]) before it sleeps again. Waking a sleeping thread on
/// the other core took most of the hop here (a halted vCPU woken by an
/// IPI); a thread woken while the caller takes the control surface's
/// snapshot and builds the argument list is running when the spawn is
/// handed over. Bounded so that a run that never comes costs at most this
/// much of a core, and the spin yields the core at every turn, so a busy
/// host's other work runs first.
pub const RESIDENT_SPIN: Duration = Duration::from_millis(1);

/// A thread of the daemon living in a run cgroup: cgroup v1 moves single
/// threads (`tasks`), and a child starts in the cgroup of the thread that
/// clones it, so the run's child is in its cgroup without being moved.
/// Dropping it ends the thread, which leaves the cgroup.
#[derive(Debug)]
struct Resident {
    hand: std::sync::Arc<Hand>,
    /// The thread, for [`Resident::end`] to wait for it.
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where a spawn is handed to a resident thread.
struct Hand {
    slot: std::sync::Mutex<Slot>,
    /// Rung when a job is handed over, a spawn is coming, or the thread
    /// is to end.
    ring: std::sync::Condvar,
    /// A job waits in `slot` (what the spinning thread watches, lock-free).
    handed: AtomicBool,
    /// Until when (ns after [`spin_clock`]'s start) the thread spins for a
    /// job instead of sleeping.
    spin_until: AtomicU64,
    /// How many times the thread woke from its wait (for tests: a sampled
    /// thread state, or a spin window, can be missed on a busy host; a
    /// wake-up cannot).
    wakes: AtomicUsize,
}

impl std::fmt::Debug for Hand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hand")
            .field("handed", &self.handed)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Slot {
    job: Option<SpawnJob>,
    /// The [`Resident`] was dropped: the thread ends.
    closed: bool,
}

/// Nanoseconds since the first call, for [`Hand::spin_until`].
fn spin_clock() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Hand {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A spawn is coming: spin for it until [`RESIDENT_SPIN`] from now.
    fn expect(&self) {
        let until = spin_clock().saturating_add(RESIDENT_SPIN.as_nanos() as u64);
        let before = self.spin_until.swap(until, Ordering::AcqRel);
        if before < until.saturating_sub(RESIDENT_SPIN.as_nanos() as u64 / 2) {
            // Not spinning (or nearly done): wake it. Rung under the lock
            // so it cannot fall asleep between its check and its wait.
            let _slot = self.slot();
            self.ring.notify_one();
        }
    }

    fn expecting(&self) -> bool {
        spin_clock() < self.spin_until.load(Ordering::Acquire)
    }

    /// The thread's loop: run each job handed over, until closed.
    fn serve(&self) {
        loop {
            // Told a spawn is coming: wait for it on the CPU, not asleep.
            while self.expecting() && !self.handed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let mut slot = self.slot();
            loop {
                if let Some(job) = slot.job.take() {
                    self.handed.store(false, Ordering::Release);
                    drop(slot);
                    job();
                    break;
                }
                if slot.closed {
                    return;
                }
                if self.expecting() {
                    break;
                }
                slot = self
                    .ring
                    .wait(slot)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                self.wakes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hand `job` to the thread; given back when the thread is gone.
    fn hand_over(&self, job: SpawnJob) -> Result<(), SpawnJob> {
        let mut slot = self.slot();
        if slot.closed {
            return Err(job);
        }
        slot.job = Some(job);
        self.handed.store(true, Ordering::Release);
        self.ring.notify_one();
        Ok(())
    }
}

impl Resident {
    /// A thread that moved itself into the cgroup at `dir` (once, off the
    /// per-run path), or None where threads cannot be moved alone (cgroup
    /// v2 outside threaded mode).
    fn start(dir: &Path) -> Option<Resident> {
        let tasks = dir.join("tasks");
        if !tasks.exists() {
            return None;
        }
        let hand = std::sync::Arc::new(Hand {
            slot: std::sync::Mutex::new(Slot::default()),
            ring: std::sync::Condvar::new(),
            handed: AtomicBool::new(false),
            spin_until: AtomicU64::new(0),
            wakes: AtomicUsize::new(0),
        });
        let (joined_tx, joined_rx) = std::sync::mpsc::sync_channel(1);
        let served = std::sync::Arc::clone(&hand);
        let thread = std::thread::Builder::new()
            .name("run-cgroup".into())
            // It only clones (see super::spawn); bwrap's --die-with-parent
            // follows this thread, which lives as long as the cgroup is in
            // use.
            .stack_size(RESIDENT_STACK)
            .spawn(move || {
                // "0": the writing thread, alone (cgroup v1).
                let joined = std::fs::write(&tasks, "0").is_ok();
                let _ = joined_tx.send(joined);
                if joined {
                    served.serve();
                }
            })
            .ok()?;
        joined_rx.recv().ok()?.then_some(Resident {
            hand,
            thread: Some(thread),
        })
    }

    /// End the thread and wait until it has ended (it leaves the cgroup
    /// as it exits): off the runs' path only, at exit.
    fn end(mut self) {
        let thread = self.thread.take();
        drop(self);
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Resident {
    /// The thread ends (after a job it is running), leaving the cgroup.
    fn drop(&mut self) {
        self.hand.slot().closed = true;
        self.hand.spin_until.store(0, Ordering::Release);
        self.hand.ring.notify_one();
    }
}

/// Stack of a resident thread: it runs `spawn::Command::spawn` (which
/// clones onto a stack of its own) and nothing else.
const RESIDENT_STACK: usize = 256 * 1024;

/// How a shell reports a fork refused at RLIMIT_NPROC (bash, dash, zsh,
/// Python).
const FORK_REFUSED: &[&str] = &[
    "fork: Resource temporarily unavailable",
    "fork: retry: Resource temporarily unavailable",
    "Cannot fork",
    "can't fork",
    "BlockingIOError: [Errno 11] Resource temporarily unavailable",
];

/// Tasks (threads count, as RLIMIT_NPROC counts them) of `root` and of
/// all its descendants, from `/proc`.
fn tree_tasks(root: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    // (pid, parent, threads)
    let procs: Vec<(u32, u32, u64)> = entries
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
        .collect();
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

/// The cgroup directory under which run cgroups with a pids controller can
/// be made, found once per process.
fn pids_parent() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let mounts = mountinfo()?;
            // Writable here? A cgroup made and removed says so at once.
            // The runs' cgroups (each with its resident thread, whose join
            // into the cgroup may wait for an RCU grace period) are made
            // ahead by the keeper once runs are coming ([`prepare_runs`]),
            // not here: `initialize`'s limit diagnostics land here, and a
            // daemon that never runs a command needs none.
            find_pids_parent(&own, mounts).filter(|dir| RunCgroup::writable_in(dir))
        })
        .clone()
}

/// At exit: remove this process's run cgroups, within
/// [`EXIT_CLEANUP_WITHIN`]. The keeper stops (a cgroup it is making is
/// waited for), the pooled cgroups' resident threads end, and each
/// `passepartout-<pid>-*` directory is removed once the kernel lets it
/// go; the number still there at the deadline is returned (the next
/// daemon that makes run cgroups removes them). Nothing to do, and no
/// file touched, when this process made none or a first call did it.
pub fn remove_run_cgroups() -> usize {
    if MADE.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let Some(parent) = pids_parent() else {
        return 0;
    };
    // Once per process: `serve` removes its own before it exits and
    // `main` calls this again after every command.
    if STOPPING.swap(true, Ordering::Relaxed) {
        return 0;
    }
    let deadline = std::time::Instant::now() + EXIT_CLEANUP_WITHIN;
    // After this no cgroup is being made, and none will be.
    drop(making());
    POOL_TAKEN.notify_all();
    let prefix = format!("passepartout-{}-", std::process::id());
    let mut left: Vec<PathBuf> = std::fs::read_dir(&parent)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    // Retried soon at first (a pooled cgroup's resident thread leaves it
    // well under a millisecond after it is told to end), then less and
    // less often: a cgroup a run used right before the exit stays busy
    // until the host reaps the sandbox's last process, seconds here, and
    // retrying it every millisecond was ~200 failing `rmdir`s per cgroup.
    let mut wait = Duration::from_millis(1);
    loop {
        // Pooled cgroups' resident threads end, which takes them out of
        // their cgroups: waited for, so that the `rmdir` right after finds
        // them gone or nearly (a cgroup pooled just before the deadline
        // was otherwise tried while its thread still ran). Emptied again
        // each round: the keeper's last cgroup and a run's settling one
        // land there meanwhile.
        let pooled = std::mem::take(&mut *pool());
        let ended_some = !pooled.is_empty();
        for mut cg in pooled {
            if let Some(resident) = cg.resident.take() {
                resident.end();
            }
        }
        left.retain(|dir| !remove_run_cgroup_dir(dir) && dir.exists());
        let now = std::time::Instant::now();
        if left.is_empty() || now >= deadline {
            break;
        }
        if ended_some {
            // A thread just ended leaves its cgroup within moments.
            wait = Duration::from_millis(1);
        }
        std::thread::sleep(wait.min(deadline - now));
        wait = (wait * 2).min(REMOVAL_RETRY_MAX);
    }
    if !left.is_empty() {
        tracing::debug!(
            left = left.len(),
            "run cgroups still busy at exit are left for the next daemon to remove"
        );
    }
    left.len()
}

/// `/proc/self/mountinfo`, read once per process: finding the pids
/// hierarchy and its mount options both need it, on the way to the
/// `initialize` reply (the kernel renders every mount for each read).
fn mountinfo() -> Option<&'static str> {
    static TEXT: OnceLock<Option<String>> = OnceLock::new();
    TEXT.get_or_init(|| std::fs::read_to_string("/proc/self/mountinfo").ok())
        .as_deref()
}

/// Remove the empty run cgroups of daemons that are gone: a run's cgroup is
/// removed in the background after its result (see [`Enforcer::finish`]),
/// which a process that exits at once does not wait for, and a daemon
/// killed leaves all of its own. Done by the keeper as it starts.
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
            // Fails (EBUSY) while processes remain in it: then it stays.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// From `/proc/self/cgroup` and `/proc/self/mountinfo`: our cgroup in a v1
/// `pids` hierarchy, else our v2 cgroup if its `subtree_control` enables
/// `pids` for children.
fn find_pids_parent(own: &str, mountinfo: &str) -> Option<PathBuf> {
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
        if controllers.split(',').any(|c| c == "pids") {
            if let Some((root, point, _, _)) = mounts
                .iter()
                .find(|(_, _, fs, opts)| fs == "cgroup" && opts.split(',').any(|o| o == "pids"))
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
                    .is_ok_and(|t| t.split_whitespace().any(|c| c == "pids"));
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

/// One path per file system among `places` (by device), with its free
/// bytes now; places that cannot be looked at are left out.
fn file_systems(places: &[PathBuf]) -> Vec<(PathBuf, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut seen: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for p in places {
        let (Ok(meta), Some(free)) = (std::fs::metadata(p), free_bytes(p)) else {
            continue;
        };
        if !seen.contains(&meta.dev()) {
            seen.push(meta.dev());
            out.push((p.clone(), free));
        }
    }
    out
}

/// Bytes available to unprivileged users on the filesystem holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// How the process limit is enforced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimit {
    /// RLIMIT_NPROC set inside a user namespace of the run's own: counts
    /// the run's processes only, costs no cgroup.
    UserNamespace,
    /// A pids cgroup per run under this directory; `v2` tells the
    /// hierarchy, `favordynmods` whether it is mounted so that joining a
    /// cgroup does not wait for an RCU grace period, `resident` whether
    /// the run's child is forked by a thread living in the cgroup (cgroup
    /// v1), so that no process joins per run.
    Cgroup {
        parent: PathBuf,
        v2: bool,
        favordynmods: bool,
        resident: bool,
    },
    /// RLIMIT_NPROC over this user's processes.
    Nproc,
    /// Not at all: root without a writable pids cgroup.
    NotEnforced,
}

/// How this host enforces the process limit (found once; the first call
/// makes a trial cgroup and removes it again: run cgroups are made only
/// once runs are coming, see [`prepare_runs`]).
pub fn process_limit() -> ProcessLimit {
    if userns_nproc_binds() {
        return ProcessLimit::UserNamespace;
    }
    match pids_parent() {
        Some(parent) => {
            let v2 = parent.join("cgroup.controllers").exists();
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
            // Threads move alone in v1 only (a `tasks` file per cgroup).
            let resident = !v2 && parent.join("tasks").exists();
            ProcessLimit::Cgroup {
                parent,
                v2,
                favordynmods,
                resident,
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

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids
37 25 0:32 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

    /// The tests below share the process-wide pool and its keeper.
    static POOL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Wait up to 10 s for `done`.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < until {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        done()
    }

    #[test]
    fn runs_take_cgroups_made_ahead_and_the_pool_stays_bounded() {
        let _serial = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        if userns_nproc_binds() || pids_parent().is_none() {
            eprintln!("skipped: no writable pids cgroup here (or not root)");
            return;
        }
        // Runs are coming (as the sandbox's trial run says before the
        // first shell action): the keeper makes cgroups ahead from now on.
        prepare_runs();
        assert!(keeper_started());
        assert!(
            eventually(|| pool().len() >= CGROUP_READY),
            "the keeper did not make {CGROUP_READY} cgroups ahead"
        );
        // Runs back to back (none gives its cgroup back meanwhile) take
        // the ready ones: nothing is made on their path.
        let (_, on_path_before) = run_cgroups_made();
        let taken: Vec<RunCgroup> = (0..CGROUP_READY)
            .map(|_| RunCgroup::take(32).expect("a run cgroup"))
            .collect();
        assert_eq!(run_cgroups_made().1, on_path_before);
        for cg in &taken {
            assert_eq!(
                std::fs::read_to_string(cg.dir.join("pids.max"))
                    .unwrap()
                    .trim(),
                (32 + u64::from(cg.resident.is_some())).to_string(),
                "the limit, and the resident thread if any"
            );
        }
        // And the keeper, told as a run's child starts, makes the next
        // ones meanwhile.
        POOL_TAKEN.notify_one();
        assert!(eventually(|| pool().len() >= CGROUP_READY));
        // Many runs giving their (empty) cgroups back: the pool keeps at
        // most CGROUP_POOL, the rest are removed (settle ends either way).
        let mut more = taken;
        more.extend((0..CGROUP_POOL).filter_map(|_| RunCgroup::take(32)));
        for cg in more {
            let mut removing = false;
            let mut left = cg.settle(&mut removing);
            assert!(pool().len() <= CGROUP_POOL);
            while let Some(cg) = left {
                std::thread::sleep(Duration::from_millis(5));
                left = cg.settle(&mut removing);
            }
        }
        // (Whether each was pooled or removed cannot be told apart from
        // another test's run taking it meanwhile; the bound can.)
        assert!(pool().len() <= CGROUP_POOL);
    }

    #[test]
    fn a_cgroup_still_in_use_is_not_pooled_until_it_empties() {
        let _serial = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        if userns_nproc_binds() || pids_parent().is_none() {
            eprintln!("skipped: no writable pids cgroup here (or not root)");
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let limits = ResourceLimits {
                processes: Some(8),
                ..ResourceLimits::none()
            };
            let enforcer = Enforcer::prepare(&limits, Path::new("/"));
            let dir = enforcer.cgroup.as_ref().expect("a run cgroup").dir.clone();
            let mut cmd = super::super::spawn::Command::new("sleep");
            cmd.args(["0.3"]);
            enforcer.install(&mut cmd);
            let child = enforcer.spawn(cmd).await.expect("spawned");
            let mut child = super::super::spawn::Child::from_raw(child).unwrap();
            // The run "ends" while its process still lives (as bwrap's last
            // process outlives it): the cgroup is watched, not pooled.
            enforcer.finish().await;
            let pooled = || pool().iter().any(|cg| cg.dir == dir);
            assert!(!pooled());
            let next = RunCgroup::take(8).expect("another run cgroup");
            assert_ne!(next.dir, dir, "a cgroup still in use was handed out");
            child.wait().await.unwrap();
            // Once empty, it comes back (or is removed when the pool is full).
            let until = tokio::time::Instant::now() + Duration::from_secs(10);
            while !pooled() && dir.exists() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(pooled() || !dir.exists());
            let mut removing = false;
            let mut left = next.settle(&mut removing);
            while let Some(cg) = left {
                tokio::time::sleep(Duration::from_millis(5)).await;
                left = cg.settle(&mut removing);
            }
        });
    }

    /// The scheduler state of thread `tid` of this process (`R`, `S`, …).
    fn thread_state(tid: &str) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    #[test]
    fn a_resident_thread_told_a_run_is_coming_spins_for_a_bounded_time() {
        let _serial = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        if userns_nproc_binds() || pids_parent().is_none() {
            eprintln!("skipped: no writable pids cgroup here (or not root)");
            return;
        }
        prepare_runs();
        assert!(eventually(|| !pool().is_empty()), "no cgroup made ahead");
        // A cgroup of our own, taken as a run takes it, so no other test
        // hands its thread work meanwhile.
        let cg = RunCgroup::take(32).expect("a run cgroup");
        let Some(hand) = cg.resident.as_ref().map(|r| std::sync::Arc::clone(&r.hand)) else {
            eprintln!("skipped: no resident threads here (cgroup v2)");
            return;
        };
        // Its resident thread is the one task in it.
        let tid = std::fs::read_to_string(cg.dir.join("tasks")).unwrap();
        let tid = tid.trim().to_string();
        assert!(!tid.is_empty() && !tid.contains('\n'), "tasks: {tid:?}");
        assert!(
            eventually(|| thread_state(&tid) == Some('S')),
            "the resident thread is not asleep while no run is coming"
        );
        // Told a run is coming, it wakes (and spins, unless the host let
        // the window pass before it ran)…
        let wakes = hand.wakes.load(Ordering::Relaxed);
        hand.expect();
        let told = std::time::Instant::now();
        assert!(
            eventually(|| hand.wakes.load(Ordering::Relaxed) > wakes),
            "the resident thread did not wake to spin"
        );
        // …for a bounded time: no run came, and it sleeps again.
        assert!(
            eventually(|| told.elapsed() > RESIDENT_SPIN && thread_state(&tid) == Some('S')),
            "the resident thread kept spinning past RESIDENT_SPIN"
        );
        // A spawn handed over while it spins is run there.
        hand.expect();
        let (done, ran) = std::sync::mpsc::channel();
        let handed = hand.hand_over(Box::new(move || {
            let _ = done.send(std::fs::read_to_string("/proc/thread-self/stat").ok());
        }));
        assert!(handed.is_ok());
        let stat = ran
            .recv_timeout(Duration::from_secs(10))
            .expect("the job ran")
            .expect("its stat");
        assert!(
            stat.starts_with(&format!("{tid} ")),
            "ran elsewhere: {stat}"
        );
        // Dropped while told a run is coming, the thread ends at once.
        hand.expect();
        cg.discard();
        assert!(
            eventually(|| thread_state(&tid).is_none()),
            "the resident thread outlived its cgroup"
        );
    }

    #[test]
    fn finds_a_v1_pids_hierarchy() {
        let own = "9:name=systemd:/\n8:pids:/user.slice\n0::/\n";
        assert_eq!(
            find_pids_parent(own, MOUNTINFO_V1),
            Some(PathBuf::from("/sys/fs/cgroup/pids/user.slice"))
        );
    }

    #[test]
    fn no_pids_controller_means_none() {
        let own = "4:memory:/x\n";
        let mounts = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(find_pids_parent(own, mounts), None);
    }

    #[test]
    fn a_process_tree_counts_its_threads() {
        // This test process runs at least one thread; a pid that does not
        // exist has no tree.
        assert!(tree_tasks(std::process::id()) >= 1);
        assert_eq!(tree_tasks(u32::MAX), 0);
    }

    #[test]
    fn a_refused_fork_is_named_in_a_user_namespace_only() {
        let mut e = Enforcer {
            limits: ResourceLimits::default(),
            rlimits: vec![],
            cgroup: None,
            userns: None,
            disk: vec![],
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
    }

    #[test]
    fn recognises_signals_and_shell_messages() {
        let e = Enforcer {
            limits: ResourceLimits::default(),
            rlimits: vec![],
            cgroup: None,
            userns: None,
            disk: vec![],
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
