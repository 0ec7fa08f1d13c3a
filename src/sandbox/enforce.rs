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
//! - **Processes**: a pids cgroup when one is writable here (cgroup v1
//!   `pids`, or a cgroup v2 directory whose `subtree_control` offers
//!   `pids`): a child cgroup per run with `pids.max`, joined by the
//!   child before exec, watched through `pids.events` so the run is stopped
//!   (not left spinning until its timeout) when a fork bomb reaches the
//!   limit. Run cgroups are reused: one that a run left empty goes back to
//!   a small pool ([`CGROUP_POOL`]) with its `pids.max` and its count of
//!   refused forks, so the next run pays neither `mkdir`, `pids.max` nor
//!   `rmdir` (about 0.45 ms together here), only joining it. Joining a
//!   cgroup is the remaining cost: moving a process between cgroups waits
//!   for an RCU grace period unless one ran just before, so a tool call
//!   after a pause pays one (p50 14 ms measured here on a loaded 2-core
//!   host, 0.5 ms when joins follow each other closely). A hierarchy
//!   mounted with `favordynmods` (Linux ≥ 6.0, v1 and v2) does not wait;
//!   cgroup v2's `CLONE_INTO_CGROUP` would spare the move and is not used
//!   yet. [`super::probe::limit_diagnostics`] says which applies here. Otherwise RLIMIT_NPROC, set to the processes this user already
//!   runs plus the limit: the kernel counts NPROC per user across the host
//!   (and the sandbox's user namespace inherits the value as the ceiling of
//!   its parent level), so a bare limit would count the person's desktop
//!   too. RLIMIT_NPROC does not bind root (the kernel exempts the initial
//!   user namespace's root), measured on this machine: as root without a
//!   writable pids cgroup the process limit is not enforced, and a warning
//!   is logged.
//! - **Disk**: the free space of the filesystem holding the working
//!   directory is sampled every [`WATCH_EVERY`]; when it has dropped by more
//!   than the limit the run is stopped. This bounds `cat /dev/urandom >
//!   a; cat /dev/urandom > b; ...` which no per-file limit can; it also
//!   counts what other programs write meanwhile, which errs on the safe side.
//! - **`/tmp`**: a tmpfs of fixed size (`--size`), in [`super::bwrap`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{getrlimit, Resource, Rlimit};

use super::limits::{format_size, ResourceLimits};

/// How often the watchdog looks at the pids cgroup and the disk.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// A limit a run reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// More processes than allowed were attempted (pids cgroup).
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
                 (limit `processes`, pids cgroup); everything it started was killed"
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
    disk: Option<(PathBuf, u64)>,
}

#[derive(Debug)]
struct RunCgroup {
    dir: PathBuf,
    /// `cgroup.procs` of the run's cgroup, as a C string for the child.
    procs: std::ffi::CString,
    /// Its `pids.max`.
    max: u64,
    /// Forks refused in it before this run (a reused cgroup keeps its count).
    refused_before: u64,
}

/// How many empty run cgroups are kept for reuse.
pub const CGROUP_POOL: usize = 4;

/// Empty run cgroups, ready for the next run.
static POOL: std::sync::Mutex<Vec<RunCgroup>> = std::sync::Mutex::new(Vec::new());

impl Enforcer {
    /// Prepare `limits` for a run in `cwd`. Creates the run's cgroup when
    /// one is available; [`Enforcer::finish`] removes it.
    pub fn prepare(limits: &ResourceLimits, cwd: &Path) -> Enforcer {
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
        if let Some(n) = limits.processes {
            cgroup = RunCgroup::take(n);
            if cgroup.is_none() {
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
        let disk = limits
            .disk_write
            .and_then(|_| free_bytes(cwd).map(|free| (cwd.to_path_buf(), free)));
        Enforcer {
            limits: *limits,
            rlimits,
            cgroup,
            disk,
        }
    }

    /// Apply the limits in the child between fork and exec.
    pub fn install(&self, cmd: &mut tokio::process::Command) {
        let rlimits = self.rlimits.clone();
        let procs = self.cgroup.as_ref().map(|c| c.procs.clone());
        // SAFETY: the closure runs in the forked child before exec, where
        // only async-signal-safe calls are allowed: it makes raw setrlimit,
        // open, write and close system calls on data prepared before the
        // fork, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                for (res, soft, hard) in &rlimits {
                    rustix::process::setrlimit(
                        *res,
                        Rlimit {
                            current: Some(*soft),
                            maximum: Some(*hard),
                        },
                    )?;
                }
                if let Some(procs) = &procs {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let wrote = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if wrote < 0 {
                        return Err(err);
                    }
                }
                Ok(())
            });
        }
    }

    /// A limit the running command has reached, if any (called every
    /// [`WATCH_EVERY`]).
    pub fn check(&self) -> Option<LimitHit> {
        if let (Some(cg), Some(n)) = (&self.cgroup, self.limits.processes) {
            if cg.limit_events() > 0 {
                return Some(LimitHit::Processes(n));
            }
        }
        if let (Some((path, before)), Some(n)) = (&self.disk, self.limits.disk_write) {
            if let Some(now) = free_bytes(path) {
                if before.saturating_sub(now) > n {
                    return Some(LimitHit::DiskWrite(n));
                }
            }
        }
        None
    }

    /// Whether a watchdog is needed at all.
    pub fn watches(&self) -> bool {
        self.cgroup.is_some() || self.disk.is_some()
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
        if let Some(n) = self.limits.memory {
            if exit_code != Some(0) && OUT_OF_MEMORY.iter().any(|m| stderr.contains(m)) {
                return Some(LimitHit::Memory(n));
            }
        }
        None
    }

    /// Give the run's cgroup back to the pool when the run left it empty,
    /// else remove it once its processes are gone. The run's result does
    /// not wait for that: right after a kill the kernel may still hold the
    /// cgroup (EBUSY, 3 runs in 5 here) while the last processes are
    /// released, so the removal is retried off the caller's path, soon at
    /// first and then less often.
    pub async fn finish(self) {
        let Some(mut cg) = self.cgroup else {
            return;
        };
        let empty = std::fs::read_to_string(cg.dir.join("cgroup.procs"))
            .is_ok_and(|procs| procs.trim().is_empty());
        if empty {
            cg.refused_before = cg.refused_total();
            if let Ok(mut pool) = POOL.lock() {
                if pool.len() < CGROUP_POOL {
                    pool.push(cg);
                    return;
                }
            }
        }
        if std::fs::remove_dir(&cg.dir).is_ok() {
            return;
        }
        let retry = async move {
            let mut wait = Duration::from_millis(1);
            let mut waited = Duration::ZERO;
            while waited < Duration::from_secs(10) {
                tokio::time::sleep(wait).await;
                waited += wait;
                if std::fs::remove_dir(&cg.dir).is_ok() {
                    return;
                }
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            tracing::warn!(cgroup = %cg.dir.display(), "could not remove the run's cgroup");
        };
        tokio::spawn(retry);
    }
}

impl RunCgroup {
    /// An empty pids cgroup with `pids.max = max`: one from the pool, else
    /// a fresh one; None when no pids hierarchy is writable here.
    fn take(max: u64) -> Option<RunCgroup> {
        let pooled = POOL.lock().ok().and_then(|mut pool| pool.pop());
        if let Some(mut cg) = pooled {
            if cg.max == max || std::fs::write(cg.dir.join("pids.max"), max.to_string()).is_ok() {
                cg.max = max;
                return Some(cg);
            }
            let _ = std::fs::remove_dir(&cg.dir);
        }
        Self::create(max)
    }

    /// A fresh pids cgroup with `pids.max = max`.
    fn create(max: u64) -> Option<RunCgroup> {
        Self::create_in(&pids_parent()?, max)
    }

    /// A fresh pids cgroup under `parent` (`u64::MAX`: no `pids.max`).
    fn create_in(parent: &Path, max: u64) -> Option<RunCgroup> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "passepartout-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).ok()?;
        let limit = match max {
            u64::MAX => "max".to_string(),
            n => n.to_string(),
        };
        if std::fs::write(dir.join("pids.max"), limit).is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        let procs = std::ffi::CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .ok()?;
        Some(RunCgroup {
            dir,
            procs,
            max,
            refused_before: 0,
        })
    }

    /// How many times a fork was refused for `pids.max` in this run.
    fn limit_events(&self) -> u64 {
        self.refused_total().saturating_sub(self.refused_before)
    }

    /// How many times a fork was refused for `pids.max` since the cgroup
    /// was made (`max N` in `pids.events`).
    fn refused_total(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("pids.events"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("max ").and_then(|n| n.trim().parse().ok()))
            })
            .unwrap_or(0)
    }
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
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            let parent = find_pids_parent(&own, &mounts);
            if let Some(dir) = &parent {
                remove_stale_cgroups(dir);
            }
            parent.filter(|dir| {
                // Writable here? Try once with a run cgroup, which the
                // first run then takes from the pool.
                let trial = RunCgroup::create_in(dir, u64::MAX);
                let ok = trial.is_some();
                if let (Some(cg), Ok(mut pool)) = (trial, POOL.lock()) {
                    pool.push(cg);
                }
                ok
            })
        })
        .clone()
}

/// Remove the empty run cgroups of daemons that are gone: a run's cgroup is
/// removed in the background after its result (see [`Enforcer::finish`]),
/// which a process that exits at once does not wait for.
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

/// Bytes available to unprivileged users on the filesystem holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// How the process limit is enforced on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimit {
    /// A pids cgroup per run under this directory; `v2` tells the
    /// hierarchy, `favordynmods` whether it is mounted so that joining a
    /// cgroup does not wait for an RCU grace period.
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
/// makes a trial cgroup, which the first run then uses).
pub fn process_limit() -> ProcessLimit {
    match pids_parent() {
        Some(parent) => {
            let v2 = parent.join("cgroup.controllers").exists();
            // The super options of the mount holding `parent`.
            let favordynmods = std::fs::read_to_string("/proc/self/mountinfo")
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

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:15 - cgroup cgroup rw,pids
37 25 0:32 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

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
