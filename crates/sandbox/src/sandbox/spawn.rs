//! Starting a run's program: `std::process::Command` with the child's
//! set-up done as data ([`Step`]) in a `pre_exec` hook, then exec.
//!
//! A run's child has work to do between fork and exec: enter a user
//! namespace, set rlimits, join a pids cgroup, join or mount the overlay,
//! let bwrap inherit the network's pipes. Each is a [`Step`], prepared
//! before the fork, and performed in the child by raw system calls on the
//! step's own data (no allocation, no lock: the child of a multi-threaded
//! process may only do what is async-signal-safe). std forks, sets up
//! stdin (`/dev/null`), stdout and stderr (pipes) and a process group of
//! the child's own, runs the steps and executes the program, reporting a
//! failure of any of it to [`Command::spawn`]; which step failed travels
//! with the errno ([`failure_code`]).
//!
//! The parent holds the child by a pidfd: it waits for it by polling the
//! pidfd ([`Child::wait`], then `waitid(P_PIDFD)`), kills it through the
//! pidfd (no pid reuse), and a [`Child`] dropped before it was reaped
//! kills it and reaps it in the background, so no zombie is left. Needs
//! Linux ≥ 5.4 (`pidfd_open` 5.3, `waitid(P_PIDFD)` 5.4).

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// Timestamps of a run's steps, for `examples/bench_sandbox`'s per-step
/// breakdown. Off unless [`timeline::record`] turned it on (a relaxed
/// atomic load per step then); on, at most [`timeline::MAX_MARKS`] marks are
/// kept until [`timeline::take`] empties them.
pub mod timeline {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::time::Instant;

    static RECORDING: AtomicBool = AtomicBool::new(false);
    static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());
    /// Marks kept at most between two [`take`]s (later ones are dropped).
    pub const MAX_MARKS: usize = 4096;

    /// Turn the recording on or off.
    pub fn record(on: bool) {
        RECORDING.store(on, Ordering::Relaxed);
    }

    /// Note that the step `name` of a run is reached now.
    #[inline]
    pub fn mark(name: &'static str) {
        if !RECORDING.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut marks = MARKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if marks.len() < MAX_MARKS {
            marks.push((name, now));
        }
    }

    /// The marks made since the last call, in the order made.
    pub fn take() -> Vec<(&'static str, Instant)> {
        std::mem::take(
            &mut *MARKS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// One thing the child does before `execve`, as data prepared before the
/// clone.
#[derive(Debug, Clone)]
pub enum Step {
    /// `unshare(CLONE_NEWUSER | also)`, deny `setgroups`, map the daemon's
    /// own uid and gid (`"uid uid 1"`).
    EnterUserNamespace {
        also: libc::c_int,
        uid_map: CString,
        gid_map: CString,
    },
    /// Make every mount private, so that nothing mounted next reaches the
    /// host's mount table.
    MakeMountsPrivate,
    /// Mount an overlay at `target` with `options`.
    MountOverlay { target: CString, options: CString },
    /// `setrlimit(resource, soft, hard)`.
    SetRlimit {
        resource: rustix::process::Resource,
        soft: u64,
        hard: u64,
    },
    /// Write `0` to a cgroup's `tasks` (v1: the child alone, as a thread)
    /// or `cgroup.procs` (v2): the child joins the cgroup.
    JoinCgroup { file: CString },
    /// `setns` through the pidfd of a process, into its user and mount
    /// namespaces (the fd must stay open until the spawn: see
    /// [`Command::keep_alive`]).
    JoinNamespaces { pidfd: RawFd },
    /// `setns(fd, kind)`: enter the namespace `fd` names (the fd must stay
    /// open until the spawn).
    EnterNamespace { fd: RawFd, kind: libc::c_int },
    /// `chdir` (again: joining a mount namespace moves to its root).
    Chdir(CString),
    /// Wait until the coarse real-time clock passes this (ns since the
    /// epoch), at most `super::overlay`'s bound.
    WaitForTick { not_before_ns: i64 },
    /// Clear close-on-exec on an fd, so that the program inherits it.
    Inherit(RawFd),
}

impl Step {
    /// What the step does, for the message when it fails.
    pub fn describe(&self) -> String {
        match self {
            Step::EnterUserNamespace { also, .. } if *also & libc::CLONE_NEWNS != 0 => {
                "entering a user and mount namespace for the overlay".into()
            }
            Step::EnterUserNamespace { .. } => {
                "entering a user namespace of the run's own (for its process limit)".into()
            }
            Step::MakeMountsPrivate => "making the mounts private for the overlay".into(),
            Step::MountOverlay { .. } => "mounting the overlay over the project".into(),
            Step::SetRlimit { resource, .. } => format!("setting {}", rlimit_name(*resource)),
            Step::JoinCgroup { file } => {
                format!("joining the run's cgroup ({})", file.to_string_lossy())
            }
            Step::JoinNamespaces { .. } => "joining the overlay mounted ahead".into(),
            Step::EnterNamespace { kind, .. } if *kind == libc::CLONE_NEWUSER => {
                "entering the sandbox's user namespace".into()
            }
            Step::EnterNamespace { .. } => "entering the sandbox's network namespace".into(),
            Step::Chdir(dir) => format!("entering the working directory {}", dir.to_string_lossy()),
            Step::WaitForTick { .. } => "waiting for the clock".into(),
            Step::Inherit(fd) => format!("passing fd {fd} to the program"),
        }
    }

    /// Do the step; the errno when it fails. Async-signal-safe and
    /// allocation-free: raw system calls on the step's own data.
    fn perform(&self) -> Result<(), i32> {
        // SAFETY: the whole body makes raw system calls on NUL-terminated
        // strings and integers owned by the step; none touches other memory.
        unsafe {
            match self {
                Step::EnterUserNamespace {
                    also,
                    uid_map,
                    gid_map,
                } => {
                    check(libc::unshare(libc::CLONE_NEWUSER | also))?;
                    write_file(c"/proc/self/setgroups", b"deny")?;
                    write_file(c"/proc/self/uid_map", uid_map.as_bytes())?;
                    write_file(c"/proc/self/gid_map", gid_map.as_bytes())
                }
                Step::MakeMountsPrivate => check(libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )),
                Step::MountOverlay { target, options } => check(libc::mount(
                    c"overlay".as_ptr(),
                    target.as_ptr(),
                    c"overlay".as_ptr(),
                    0,
                    options.as_ptr().cast(),
                )),
                Step::SetRlimit {
                    resource,
                    soft,
                    hard,
                } => rustix::process::setrlimit(
                    *resource,
                    rustix::process::Rlimit {
                        current: Some(*soft),
                        maximum: Some(*hard),
                    },
                )
                .map_err(rustix::io::Errno::raw_os_error),
                Step::JoinCgroup { file } => write_file(file, b"0\n"),
                Step::JoinNamespaces { pidfd } => {
                    check(libc::setns(*pidfd, libc::CLONE_NEWUSER | libc::CLONE_NEWNS))
                }
                Step::EnterNamespace { fd, kind } => check(libc::setns(*fd, *kind)),
                Step::Chdir(dir) => check(libc::chdir(dir.as_ptr())),
                Step::WaitForTick { not_before_ns } => {
                    super::overlay::wait_for_tick(*not_before_ns);
                    Ok(())
                }
                Step::Inherit(fd) => check(libc::fcntl(*fd, libc::F_SETFD, 0)),
            }
        }
    }
}

/// `RLIMIT_…` as the C headers spell it.
fn rlimit_name(resource: rustix::process::Resource) -> String {
    use rustix::process::Resource;
    match resource {
        Resource::Core => "RLIMIT_CORE".into(),
        Resource::As => "RLIMIT_AS".into(),
        Resource::Fsize => "RLIMIT_FSIZE".into(),
        Resource::Cpu => "RLIMIT_CPU".into(),
        Resource::Nofile => "RLIMIT_NOFILE".into(),
        Resource::Nproc => "RLIMIT_NPROC".into(),
        other => format!("RLIMIT_{}", format!("{other:?}").to_uppercase()),
    }
}

/// The steps as a `pre_exec` hook for a `std`/`tokio` command (the
/// overlay's holder and probe).
pub fn as_pre_exec(steps: Vec<Step>) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    move || {
        for step in &steps {
            step.perform().map_err(std::io::Error::from_raw_os_error)?;
        }
        Ok(())
    }
}

/// Marks an errno that a step (or the working directory) of the child
/// failed with: the code std carries from the child is
/// `STEP_FAILED | at << 12 | errno`, errno below 4096 as Linux keeps it.
const STEP_FAILED: i32 = 0x4000_0000;
/// `at` for entering the working directory; steps are `0..`.
const AT_CHDIR: i32 = 0x3_ffff;

/// The code the child reports for a failure at `at` with `errno`.
fn failure_code(at: i32, errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(STEP_FAILED | (at.min(AT_CHDIR) << 12) | (errno & 0xfff))
}

/// `(at, errno)` of a code made by [`failure_code`], else None.
fn decode_failure(error: &std::io::Error) -> Option<(i32, i32)> {
    let code = error.raw_os_error()?;
    (code & STEP_FAILED != 0).then_some(((code & !STEP_FAILED) >> 12, code & 0xfff))
}

/// `Ok` for a system call's non-negative result, else its errno.
fn check(result: libc::c_int) -> Result<(), i32> {
    if result < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

fn errno() -> i32 {
    // SAFETY: the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Write `bytes` to the file at `path` (no allocation).
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), i32> {
    use rustix::fs::{open, Mode, OFlags};
    let fd = open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(rustix::io::Errno::raw_os_error)?;
    rustix::io::write(&fd, bytes).map_err(rustix::io::Errno::raw_os_error)?;
    Ok(())
}

/// A program to start: its arguments, environment, working directory and
/// the steps its child takes before `execve`.
pub struct Command {
    program: String,
    args: Vec<OsString>,
    /// None: the daemon's environment.
    env: Option<Vec<(OsString, OsString)>>,
    cwd: Option<PathBuf>,
    steps: Vec<Step>,
    /// What must outlive the spawn because a step names its fd.
    keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl Command {
    pub fn new(program: &str) -> Command {
        Command {
            program: program.to_string(),
            args: Vec::new(),
            env: None,
            cwd: None,
            steps: Vec::new(),
            keep: Vec::new(),
        }
    }

    pub fn args<S: AsRef<OsStr>>(&mut self, args: impl IntoIterator<Item = S>) -> &mut Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Exactly this environment (nothing inherited).
    pub fn env_exact<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        self.env = Some(
            vars.into_iter()
                .map(|(k, v)| (k.as_ref().to_os_string(), v.as_ref().to_os_string()))
                .collect(),
        );
        self
    }

    pub fn current_dir(&mut self, dir: &Path) -> &mut Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// The working directory given, if any.
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// Add a step, done after the steps added before it.
    pub fn step(&mut self, step: Step) -> &mut Self {
        self.steps.push(step);
        self
    }

    /// Keep `value` alive until the command is dropped (a step names an fd
    /// it owns).
    pub fn keep_alive(&mut self, value: Box<dyn std::any::Any + Send + Sync>) -> &mut Self {
        self.keep.push(value);
        self
    }

    /// The program as given.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Start the program from the calling thread (the child starts in this
    /// thread's cgroup, and `PR_SET_PDEATHSIG` follows this thread).
    /// Blocks only until the child has executed the program or failed.
    pub fn spawn(&self) -> Result<RawChild, SpawnError> {
        let prepare = |what: &str| SpawnError {
            during: Some("preparing the command".into()),
            error: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{what} holds a NUL byte"),
            ),
        };
        // std would refuse these too, but not say which one.
        if self.program.contains('\0') {
            return Err(prepare("the program name"));
        }
        if self.args.iter().any(|a| a.as_encoded_bytes().contains(&0)) {
            return Err(prepare("an argument"));
        }
        let cwd = match &self.cwd {
            Some(dir) => Some(
                CString::new(dir.as_os_str().as_encoded_bytes())
                    .map_err(|_| prepare("the working directory"))?,
            ),
            None => None,
        };
        let mut cmd = std::process::Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Lead a new process group so the whole tree can be killed at once.
            .process_group(0);
        if let Some(env) = &self.env {
            if env.iter().any(|(k, v)| {
                k.as_encoded_bytes().contains(&0) || v.as_encoded_bytes().contains(&0)
            }) {
                return Err(prepare("an environment variable"));
            }
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        let steps = self.steps.clone();
        let hook = move || {
            // The working directory as a step of ours, so that its failure
            // is named and never taken for a missing program.
            if let Some(dir) = &cwd {
                rustix::process::chdir(dir.as_c_str())
                    .map_err(|e| failure_code(AT_CHDIR, e.raw_os_error()))?;
            }
            for (at, step) in (0..).zip(&steps) {
                step.perform().map_err(|e| failure_code(at, e))?;
            }
            Ok(())
        };
        // SAFETY: the hook runs in the forked child before exec; it only
        // makes raw system calls on data it owns (the steps and the working
        // directory, cloned before the fork): it allocates nothing, takes
        // no lock and touches no state shared with the parent's threads.
        unsafe {
            cmd.pre_exec(hook);
        }
        timeline::mark("clone");
        let spawned = cmd.spawn();
        timeline::mark("executed");
        let mut child = spawned.map_err(|error| match decode_failure(&error) {
            Some((AT_CHDIR, errno)) => SpawnError {
                during: Some(format!(
                    "entering the working directory {}",
                    self.cwd.as_deref().unwrap_or(Path::new("")).display()
                )),
                error: std::io::Error::from_raw_os_error(errno),
            },
            Some((at, errno)) => SpawnError {
                during: usize::try_from(at)
                    .ok()
                    .and_then(|at| self.steps.get(at))
                    .map(Step::describe),
                error: std::io::Error::from_raw_os_error(errno),
            },
            None => SpawnError {
                during: None,
                error,
            },
        })?;
        let pid = child.id();
        let pidfd = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
            .ok_or_else(|| std::io::Error::other("the child has no pid"))
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                    .map_err(std::io::Error::from)
            });
        let pidfd = match pidfd {
            Ok(fd) => fd,
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SpawnError {
                    during: Some("opening the child's pidfd".into()),
                    error,
                });
            }
        };
        Ok(RawChild {
            pid,
            pidfd: Some(pidfd),
            stdout: child.stdout.take().map(OwnedFd::from),
            stderr: child.stderr.take().map(OwnedFd::from),
        })
    }
}

/// Why a program could not be started.
#[derive(Debug)]
pub struct SpawnError {
    /// The step that failed; None: executing the program itself.
    pub during: Option<String>,
    pub error: std::io::Error,
}

impl SpawnError {
    /// Whether the program itself was not found (the one case where
    /// installing something is the fix).
    pub fn missing(&self) -> bool {
        self.during.is_none() && self.error.kind() == std::io::ErrorKind::NotFound
    }
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.during {
            Some(step) => write!(f, "{step}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for SpawnError {}

/// A started program before it is tied to a runtime (it may have been
/// started on a thread outside one): its pid, pidfd and the read ends of
/// its stdout and stderr. Dropped unused, it is killed and reaped.
#[derive(Debug)]
pub struct RawChild {
    pid: u32,
    pidfd: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Drop for RawChild {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            kill(&pidfd);
            let _ = waitid(&pidfd, false);
        }
    }
}

/// A running program, read and waited for in the runtime it was made in.
/// Dropped before it was reaped, it is killed (through its pidfd) and
/// reaped in the background.
#[derive(Debug)]
pub struct Child {
    pid: u32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl Child {
    /// Tie `raw` to the current runtime (call it inside one).
    pub fn from_raw(mut raw: RawChild) -> std::io::Result<Child> {
        let stdout = raw
            .stdout
            .take()
            .map(pipe::Receiver::from_owned_fd)
            .transpose()?;
        let stderr = raw
            .stderr
            .take()
            .map(pipe::Receiver::from_owned_fd)
            .transpose()?;
        let Some(pidfd) = raw.pidfd.take() else {
            return Err(std::io::Error::other("the child's pidfd is gone"));
        };
        // SAFETY: an OwnedFd keeps the pidfd open, and the same, for the
        // life of the AsyncFd.
        let registered =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        let pidfd = match registered {
            Ok(fd) => fd,
            Err(e) => {
                let (pidfd, error) = e.into_parts();
                // Back in `raw`, which kills and reaps it when dropped.
                raw.pidfd = Some(pidfd);
                return Err(error);
            }
        };
        Ok(Child {
            pid: raw.pid,
            pidfd: Some(pidfd),
            status: None,
            stdout,
            stderr,
        })
    }

    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Wait for the program to end and reap it; cancel-safe, and the status
    /// is kept for later calls.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let Some(pidfd) = &self.pidfd else {
                return Err(std::io::Error::other("the child's pidfd is gone"));
            };
            let mut ready = pidfd.readable().await?;
            match waitid(pidfd.get_ref(), true)? {
                Some(status) => self.status = Some(status),
                None => ready.clear_ready(),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        let pidfd = pidfd.into_inner();
        kill(&pidfd);
        if let Ok(Some(_)) = waitid(&pidfd, true) {
            return;
        }
        // Killed, not yet gone: reaped off this thread.
        let reap = move || {
            let _ = waitid(&pidfd, false);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap)),
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("reap-child".into())
                    .spawn(reap);
            }
        }
    }
}

/// SIGKILL through the pidfd (it names this process even if its pid were
/// reused).
fn kill(pidfd: &OwnedFd) {
    let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
}

/// `waitid(P_PIDFD, pidfd, WEXITED)`, with `WNOHANG` when `nohang`: the
/// status once the process has ended (and it is reaped), None when
/// `nohang` found it running.
fn waitid(pidfd: &OwnedFd, nohang: bool) -> std::io::Result<Option<ExitStatus>> {
    use rustix::process::{WaitId, WaitIdOptions};
    let mut options = WaitIdOptions::EXITED;
    if nohang {
        options |= WaitIdOptions::NOHANG;
    }
    loop {
        match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), options) {
            Ok(None) => return Ok(None),
            Ok(Some(status)) => {
                // As the wait status std decodes: exit code in the second
                // byte, or the signal (with 0x80 for a core dump) in the
                // first.
                let raw = match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) => (code & 0xff) << 8,
                    (None, Some(signal)) if status.dumped() => (signal & 0x7f) | 0x80,
                    (None, Some(signal)) => signal & 0x7f,
                    (None, None) => 0,
                };
                return Ok(Some(ExitStatus::from_raw(raw)));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn run(cmd: &Command) -> (ExitStatus, String, String, u32) {
        let mut child = Child::from_raw(cmd.spawn().expect("spawn")).expect("child");
        let mut out = String::new();
        let mut err = String::new();
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (o, e) = tokio::join!(
            stdout.read_to_string(&mut out),
            stderr.read_to_string(&mut err)
        );
        o.expect("read stdout");
        e.expect("read stderr");
        let status = child.wait().await.expect("wait");
        (status, out, err, child.id())
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[tokio::test]
    async fn exit_codes_signals_and_output() {
        let (status, out, err, _) = run(&sh("echo out; echo err >&2; exit 3")).await;
        assert_eq!(status.code(), Some(3));
        assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
        let (status, _, _, _) = run(&sh("kill -TERM $$")).await;
        assert_eq!(
            (status.code(), status.signal()),
            (None, Some(libc::SIGTERM))
        );
        let (status, _, _, _) = run(&sh("true")).await;
        assert!(status.success());
    }

    #[tokio::test]
    async fn the_environment_is_exact_or_inherited() {
        let mut cmd = Command::new("env");
        cmd.env_exact([("PATH", "/usr/bin:/bin"), ("ONLY", "this")]);
        let (status, out, _, _) = run(&cmd).await;
        assert!(status.success());
        let mut vars: Vec<&str> = out.lines().collect();
        vars.sort();
        assert_eq!(vars, ["ONLY=this", "PATH=/usr/bin:/bin"]);
        // None: the daemon's own environment, PATH searched in it.
        let (status, out, _, _) = run(&Command::new("env")).await;
        assert!(status.success());
        let home = std::env::var("PATH").expect("PATH set for tests");
        assert!(out.lines().any(|l| l == format!("PATH={home}")), "{out}");
    }

    #[tokio::test]
    async fn runs_in_its_working_directory_and_its_own_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = sh("pwd; ps -o pgid= -p $$ | tr -d ' '; echo $$");
        cmd.current_dir(dir.path());
        let (status, out, _, pid) = run(&cmd).await;
        assert!(status.success());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines.first().copied(),
            Some(
                dir.path()
                    .canonicalize()
                    .expect("canon")
                    .to_str()
                    .expect("utf8")
            )
        );
        assert_eq!(lines.get(1), Some(&pid.to_string().as_str()), "{out}");
        assert_eq!(lines.get(2), Some(&pid.to_string().as_str()));
    }

    #[tokio::test]
    async fn a_missing_program_is_missing() {
        for program in ["/nonexistent/bwrap", "passepartout-no-such-program"] {
            let err = Command::new(program).spawn().expect_err("missing");
            assert!(err.missing(), "{program}: {err}");
            assert_eq!(err.to_string(), "No such file or directory (os error 2)");
        }
        // Found but not executable: not "missing".
        let err = Command::new("/etc/passwd")
            .spawn()
            .expect_err("not executable");
        assert!(!err.missing());
        assert_eq!(err.to_string(), "Permission denied (os error 13)");
    }

    #[tokio::test]
    async fn a_failing_step_is_named_with_its_error() {
        let mut cmd = sh("true");
        cmd.step(Step::SetRlimit {
            resource: rustix::process::Resource::Core,
            soft: 0,
            hard: 0,
        })
        .step(Step::JoinCgroup {
            file: CString::new("/nonexistent/cgroup.procs").expect("cstr"),
        });
        let err = cmd.spawn().expect_err("a bad cgroup");
        assert!(!err.missing());
        assert_eq!(
            err.to_string(),
            "joining the run's cgroup (/nonexistent/cgroup.procs): \
             No such file or directory (os error 2)"
        );
        // A soft limit above the hard one: EINVAL, named.
        let mut cmd = sh("true");
        cmd.step(Step::SetRlimit {
            resource: rustix::process::Resource::Cpu,
            soft: 20,
            hard: 10,
        });
        let err = cmd.spawn().expect_err("a bad rlimit");
        assert_eq!(
            err.to_string(),
            "setting RLIMIT_CPU: Invalid argument (os error 22)"
        );
        let mut cmd = sh("true");
        cmd.current_dir(Path::new("/nonexistent-dir"));
        let err = cmd.spawn().expect_err("a bad cwd");
        assert!(
            !err.missing(),
            "a missing directory is not a missing program"
        );
        assert!(err
            .to_string()
            .starts_with("entering the working directory"));
    }

    #[tokio::test]
    async fn steps_apply_to_the_program() {
        let mut cmd = sh("ulimit -n");
        cmd.step(Step::SetRlimit {
            resource: rustix::process::Resource::Nofile,
            soft: 37,
            hard: 37,
        });
        let (status, out, _, _) = run(&cmd).await;
        assert!(status.success());
        assert_eq!(out, "37\n");
    }

    /// This process's fds a program inherits (not close-on-exec): the
    /// test harness's own (cargo's jobserver), which std passes on too.
    fn inheritable_fds() -> Vec<String> {
        std::fs::read_dir("/proc/self/fd")
            .expect("fd dir")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&fd| fd > 2)
            .filter(|&fd| {
                // SAFETY: F_GETFD on an fd number reads its flags.
                let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
                flags >= 0 && flags & libc::FD_CLOEXEC == 0
            })
            .map(|fd| fd.to_string())
            .collect()
    }

    #[tokio::test]
    async fn only_stdio_is_open_in_the_program() {
        // Held open (close-on-exec) here while the child starts.
        let _held = std::fs::File::open("/dev/null").expect("open");
        let mut expected = vec!["0".to_string(), "1".into(), "2".into()];
        expected.extend(inheritable_fds());
        expected.sort();
        // `ls` lists the shell's fds (not its own directory's).
        let (status, out, _, _) = run(&sh("ls /proc/$$/fd")).await;
        assert!(status.success());
        let mut fds: Vec<String> = out.lines().map(str::to_string).collect();
        fds.sort();
        assert_eq!(fds, expected, "neither the pipes' other ends nor ours leak");
        // stdin is /dev/null.
        let (_, out, _, _) = run(&sh("readlink /proc/self/fd/0")).await;
        assert_eq!(out, "/dev/null\n");
    }

    #[tokio::test]
    async fn a_dropped_child_is_killed_and_reaped() {
        let raw = sh("sleep 30").spawn().expect("spawn");
        let child = Child::from_raw(raw).expect("child");
        let pid = child.id();
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        drop(child);
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        assert!(gone, "pid {pid} still there (a zombie is too)");
        // A raw child dropped unused too.
        let raw = sh("sleep 30").spawn().expect("spawn");
        let pid = raw.pid;
        drop(raw);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn signals_are_reset_as_std_resets_them() {
        // Rust ignores SIGPIPE (bit 13), and the test's runtime may handle
        // others: the program gets the defaults and an empty mask. (Which of
        // glibc's internal real-time signals stay ignored differs between
        // std's posix_spawn and its fork path; no program uses them.)
        let script = "grep -E 'Sig(Ign|Blk)' /proc/self/status";
        let (_, out, _, _) = run(&sh(script)).await;
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
        let ignored = out
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:\t"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .expect("SigIgn");
        assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
        assert_eq!(
            ignored & 0x7fff_ffff,
            0,
            "no standard signal ignored: {out}"
        );
    }
}
