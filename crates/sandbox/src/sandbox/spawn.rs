//! Starting a run's program without copying the daemon: `clone` with
//! `CLONE_VM | CLONE_VFORK`, the child's set-up done as data, then `execve`.
//!
//! Why not `std::process::Command` or `tokio::process::Command`: a run's
//! child has work to do between fork and exec (enter a user namespace, set
//! rlimits, join a pids cgroup, join or mount the overlay, let bwrap inherit
//! the network's pipes), and any `pre_exec` hook makes std `fork()` the
//! whole daemon — page tables of every thread's memory copied, then
//! faulted back on the next write — where `posix_spawn` would share the
//! memory until exec. Measured here: +1.2 ms per call for the fork alone,
//! and tokio's piped child (its SIGCHLD driver, its orphan reaping) about
//! +0.8 ms more. No crate on crates.io runs arbitrary set-up steps in a
//! `CLONE_VM` child (`posix_spawn` has a fixed list of attributes, and the
//! Linux-only `pidfd`-spawning crates wrap `fork`), so the spawn is written
//! here, as small as it can be: glibc's `posix_spawn` does the same.
//!
//! The rules of a `CLONE_VM` child, kept by [`child_main`]: it shares the
//! daemon's memory and runs on a stack of its own ([`ChildStack`]), while
//! the thread that cloned it is suspended until it executes or exits. So it
//! allocates nothing, takes no lock, uses no Rust I/O: every [`Step`] is a
//! raw system call on data prepared before the clone, and a failure is
//! written to a slot in the suspended parent's frame ([`Failure`]) before
//! `_exit(127)` — which step failed and its errno. Every signal is blocked
//! around the clone, and the child resets every handled signal (and
//! SIGPIPE, which Rust ignores) to its default and clears its mask just
//! before `execve`, as `posix_spawn` and std do: a handler of the daemon's
//! running in the child would run on the daemon's memory.
//!
//! The child is made with `CLONE_PIDFD`: the parent waits for it by polling
//! the pidfd ([`Child::wait`], then `waitid(P_PIDFD)`), kills it through
//! the pidfd (no pid reuse), and a [`Child`] dropped before it was reaped
//! kills it and reaps it in the background, so no zombie is left.
//!
//! Needs Linux ≥ 5.4 (`CLONE_PIDFD` 5.2, `waitid(P_PIDFD)` 5.4); older
//! kernels fail every run with "cloning the process: …" (the overlay and
//! the process limit in a user namespace already need 5.11 and 5.14).
//!
//! The child, in order: stdin from `/dev/null`, stdout and stderr to pipes;
//! the working directory; a process group of its own; the steps in the
//! order given (see `super::runner` for the order it gives); signals back to
//! their defaults; `execve` of the program, searched on `PATH` as `execvp`
//! does when its name has no `/` (the PATH of the environment the program
//! gets).

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

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

/// Bytes of stack the child runs on between clone and exec (it makes
/// system calls with a few small structs; the lowest page is a guard).
const CHILD_STACK: usize = 64 * 1024;

/// One thing the child does before `execve`, as data prepared before the
/// clone.
#[derive(Debug)]
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
    /// Write `0` to a cgroup's `cgroup.procs`: the child joins it.
    JoinCgroup { procs: CString },
    /// `setns` through the pidfd of a process, into its user and mount
    /// namespaces (the fd must stay open until the spawn: see
    /// [`Command::keep_alive`]).
    JoinNamespaces { pidfd: RawFd },
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
            Step::JoinCgroup { procs } => format!(
                "joining the run's pids cgroup ({})",
                procs.to_string_lossy()
            ),
            Step::JoinNamespaces { .. } => "joining the overlay mounted ahead".into(),
            Step::Chdir(dir) => format!("entering the working directory {}", dir.to_string_lossy()),
            Step::WaitForTick { .. } => "waiting for the clock".into(),
            Step::Inherit(fd) => format!("passing fd {fd} to the program"),
        }
    }

    /// Do the step; the errno when it fails. Async-signal-safe and
    /// allocation-free: raw system calls on the step's own data.
    fn perform(&self) -> Result<(), i32> {
        // SAFETY (whole body): raw system calls on NUL-terminated strings
        // and integers owned by the step; none touches other memory.
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
                .map_err(|e| e.raw_os_error()),
                Step::JoinCgroup { procs } => write_file(procs, b"0\n"),
                Step::JoinNamespaces { pidfd } => {
                    check(libc::setns(*pidfd, libc::CLONE_NEWUSER | libc::CLONE_NEWNS))
                }
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
/// overlay's holder and probe, which are not on a tool call's path).
pub fn as_pre_exec(steps: Vec<Step>) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    move || {
        for step in &steps {
            step.perform().map_err(std::io::Error::from_raw_os_error)?;
        }
        Ok(())
    }
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
    // SAFETY: raw open/write/close on a NUL-terminated path and a borrowed
    // buffer; async-signal-safe.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let wrote = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = errno();
        libc::close(fd);
        if wrote < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// A program to start: its arguments, environment, working directory and
/// the steps its child takes before `execve`.
pub struct Command {
    program: String,
    argv0: Option<CString>,
    args: Vec<CString>,
    /// None: the daemon's environment.
    env: Option<Vec<CString>>,
    cwd: Option<PathBuf>,
    steps: Vec<Step>,
    /// What must outlive the spawn because a step names its fd.
    keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
    /// The first argument, variable or path that holds a NUL byte.
    invalid: Option<&'static str>,
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
        let argv0 = CString::new(program).ok();
        Command {
            program: program.to_string(),
            invalid: argv0.is_none().then_some("the program name"),
            argv0,
            args: Vec::new(),
            env: None,
            cwd: None,
            steps: Vec::new(),
            keep: Vec::new(),
        }
    }

    pub fn args<S: AsRef<OsStr>>(&mut self, args: impl IntoIterator<Item = S>) -> &mut Self {
        for arg in args {
            match CString::new(arg.as_ref().as_bytes()) {
                Ok(arg) => self.args.push(arg),
                Err(_) => {
                    self.invalid.get_or_insert("an argument");
                }
            }
        }
        self
    }

    /// Exactly this environment (nothing inherited).
    pub fn env_exact<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        let mut env = Vec::new();
        for (key, value) in vars {
            let mut entry = key.as_ref().as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_ref().as_bytes());
            match CString::new(entry) {
                Ok(entry) => env.push(entry),
                Err(_) => {
                    self.invalid.get_or_insert("an environment variable");
                }
            }
        }
        self.env = Some(env);
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
        let prepare = |error: std::io::Error| SpawnError {
            during: Some("preparing the command".into()),
            error,
        };
        if let Some(what) = self.invalid {
            return Err(prepare(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{what} holds a NUL byte"),
            )));
        }
        let Some(argv0) = &self.argv0 else {
            return Err(prepare(std::io::Error::other("no program")));
        };
        let mut argv: Vec<*const libc::c_char> = Vec::with_capacity(self.args.len() + 2);
        argv.push(argv0.as_ptr());
        argv.extend(self.args.iter().map(|a| a.as_ptr()));
        argv.push(std::ptr::null());
        let inherited;
        let env: &[CString] = match &self.env {
            Some(env) => env,
            None => {
                inherited = std::env::vars_os()
                    .filter_map(|(key, value)| {
                        let mut entry = key.into_vec();
                        entry.push(b'=');
                        entry.extend(value.into_vec());
                        CString::new(entry).ok()
                    })
                    .collect::<Vec<_>>();
                &inherited
            }
        };
        let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        let candidates = self.candidates(env);
        let candidate_ptrs: Vec<*const libc::c_char> =
            candidates.iter().map(|c| c.as_ptr()).collect();
        let cwd = match &self.cwd {
            Some(dir) => Some(CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
                prepare(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the working directory holds a NUL byte",
                ))
            })?),
            None => None,
        };
        let stdin = dev_null().map_err(prepare)?;
        let (out_read, out_write) = pipe_pair().map_err(prepare)?;
        let (err_read, err_write) = pipe_pair().map_err(prepare)?;
        let stack = ChildStack::new().map_err(prepare)?;
        let failure = Failure {
            at: AtomicUsize::new(NO_FAILURE),
            errno: AtomicI32::new(0),
        };
        let plan = Plan {
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            candidates: &candidate_ptrs,
            cwd: cwd.as_ref().map(|c| c.as_ptr()),
            stdio: [stdin, out_write.as_raw_fd(), err_write.as_raw_fd()],
            steps: &self.steps,
            failure: &failure,
        };
        let mut pidfd: libc::c_int = -1;
        timeline::mark("clone");
        // Every signal blocked around the clone (the raw call: glibc's
        // wrapper leaves its own two unblockable), so no handler of the
        // daemon's runs in the child before it has reset them.
        let all: u64 = !0;
        let mut before: u64 = 0;
        // SAFETY: rt_sigprocmask reads and writes one 8-byte mask we own;
        // clone runs `child_main` on `stack` with a pointer to `plan`,
        // which lives in this frame until the child has executed or exited
        // (CLONE_VFORK suspends this thread until then), and writes the
        // pidfd into `pidfd`.
        let (pid, clone_errno) = unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &all as *const u64,
                &mut before as *mut u64,
                8usize,
            );
            let pid = libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                (&plan as *const Plan).cast_mut().cast(),
                &mut pidfd as *mut libc::c_int,
            );
            let clone_errno = errno();
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &before as *const u64,
                std::ptr::null_mut::<u64>(),
                8usize,
            );
            (pid, clone_errno)
        };
        timeline::mark("executed");
        drop(stack);
        if pid < 0 || pidfd < 0 {
            return Err(SpawnError {
                during: Some("cloning the process".into()),
                error: std::io::Error::from_raw_os_error(clone_errno),
            });
        }
        // SAFETY: a fresh pidfd from clone that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        let child = RawChild {
            pid,
            pidfd: Some(pidfd),
            stdout: Some(out_read),
            stderr: Some(err_read),
        };
        let at = failure.at.load(Ordering::Acquire);
        if at != NO_FAILURE {
            let error = std::io::Error::from_raw_os_error(failure.errno.load(Ordering::Acquire));
            // Dropping the child reaps it (it has exited already).
            drop(child);
            let during = match at {
                AT_STDIO => Some("connecting stdin, stdout and stderr".to_string()),
                AT_CHDIR => Some(format!(
                    "entering the working directory {}",
                    self.cwd.as_deref().unwrap_or(Path::new("")).display()
                )),
                AT_GROUP => Some("making a process group".to_string()),
                AT_EXEC => None,
                step => self.steps.get(step).map(Step::describe),
            };
            return Err(SpawnError { during, error });
        }
        Ok(child)
    }

    /// The paths to try `execve` on, in order: the program itself when its
    /// name holds a `/`, else each directory of the program's `PATH` (or
    /// the default `/bin:/usr/bin`, as glibc) joined with it.
    fn candidates(&self, env: &[CString]) -> Vec<CString> {
        let name = self.program.as_bytes();
        if name.contains(&b'/') {
            return self.argv0.iter().cloned().collect();
        }
        let path: Vec<u8> = match &self.env {
            Some(_) => env
                .iter()
                .find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
                .map(<[u8]>::to_vec),
            None => std::env::var_os("PATH").map(OsStringExt::into_vec),
        }
        .unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
        path.split(|&b| b == b':')
            .filter_map(|dir| {
                let mut full = if dir.is_empty() {
                    b".".to_vec()
                } else {
                    dir.to_vec()
                };
                full.push(b'/');
                full.extend_from_slice(name);
                CString::new(full).ok()
            })
            .collect()
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

/// No failure written by the child.
const NO_FAILURE: usize = usize::MAX;
const AT_STDIO: usize = usize::MAX - 1;
const AT_CHDIR: usize = usize::MAX - 2;
const AT_GROUP: usize = usize::MAX - 3;
const AT_EXEC: usize = usize::MAX - 4;

/// Where the child says what failed (a step index or one of the `AT_`
/// values) and its errno, before `_exit(127)`.
struct Failure {
    at: AtomicUsize,
    errno: AtomicI32,
}

/// Everything the child reads, prepared before the clone.
struct Plan<'a> {
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    candidates: &'a [*const libc::c_char],
    cwd: Option<*const libc::c_char>,
    /// stdin, stdout, stderr (each ≥ 3, close-on-exec).
    stdio: [RawFd; 3],
    steps: &'a [Step],
    failure: &'a Failure,
}

/// The child between clone and exec. It must not allocate, lock, panic or
/// return into the parent's frames: see the module doc.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Plan` in the suspended parent's frame.
    let plan = unsafe { &*(arg as *const Plan) };
    let fail = |at: usize, errno: i32| -> ! {
        plan.failure.errno.store(errno, Ordering::Release);
        plan.failure.at.store(at, Ordering::Release);
        // SAFETY: ends this child only (its own thread group).
        unsafe { libc::_exit(127) }
    };
    // SAFETY (each block below): raw system calls on fds and C strings
    // prepared by the parent.
    for (target, &fd) in (0..).zip(plan.stdio.iter()) {
        // The sources are ≥ 3, so dup2 makes a new fd (without
        // close-on-exec) and the pipes' own fds close at exec.
        if unsafe { libc::dup2(fd, target) } < 0 {
            fail(AT_STDIO, errno());
        }
    }
    if let Some(dir) = plan.cwd {
        if unsafe { libc::chdir(dir) } < 0 {
            fail(AT_CHDIR, errno());
        }
    }
    // Lead a new process group so the whole tree can be killed at once.
    if unsafe { libc::setpgid(0, 0) } < 0 {
        fail(AT_GROUP, errno());
    }
    for (index, step) in plan.steps.iter().enumerate() {
        if let Err(e) = step.perform() {
            fail(index, e);
        }
    }
    reset_signals();
    let mut refused = false;
    let mut last = libc::ENOENT;
    for &path in plan.candidates {
        unsafe { libc::execve(path, plan.argv, plan.envp) };
        match errno() {
            // As execvp: try the next directory, remember a refusal.
            libc::EACCES => refused = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            other => {
                last = other;
                break;
            }
        }
    }
    if refused && last == libc::ENOENT {
        last = libc::EACCES;
    }
    fail(AT_EXEC, last)
}

/// In the child, before exec: every handled signal back to its default
/// (SIGPIPE too, which Rust ignores), glibc's internal ones ignored, then
/// an empty mask: as glibc's `posix_spawn` (which std uses) leaves them.
fn reset_signals() {
    // SAFETY: sigaction reads and writes a struct on this stack; the raw
    // rt_sigprocmask reads one 8-byte mask.
    unsafe {
        for sig in 1..libc::SIGRTMAX() + 1 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            if sig >= 32 && sig < libc::SIGRTMIN() {
                // glibc's own signals (cancellation, set*id), which its
                // sigaction refuses: ignored, as glibc's posix_spawn does.
                let ignore = KernelSigaction {
                    handler: libc::SIG_IGN,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                };
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &ignore as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if handled || (sig == libc::SIGPIPE && old.sa_sigaction == libc::SIG_IGN) {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        let none: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &none as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
}

/// `struct sigaction` as the kernel's `rt_sigaction` takes it.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The child's stack: an anonymous mapping with a guard page at its low
/// end, so an overflow faults instead of writing over the daemon's memory.
struct ChildStack {
    base: *mut libc::c_void,
}

impl ChildStack {
    fn new() -> std::io::Result<ChildStack> {
        // SAFETY: a fresh private anonymous mapping, and a change of the
        // protection of its own first page.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                CHILD_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let stack = ChildStack { base };
            if libc::mprotect(base, page_size(), libc::PROT_NONE) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// The high end (stacks grow down); page-aligned, so 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        self.base.wrapping_byte_add(CHILD_STACK)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child has
        // executed or exited before clone returned).
        unsafe {
            libc::munmap(self.base, CHILD_STACK);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// `/dev/null` for reading, opened once (close-on-exec, ≥ 3).
fn dev_null() -> std::io::Result<RawFd> {
    static DEV_NULL: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    match DEV_NULL.get_or_init(|| {
        std::fs::File::open("/dev/null")
            .map_err(|e| e.to_string())
            .and_then(|f| above_stdio(f.into()).map_err(|e| e.to_string()))
    }) {
        Ok(fd) => Ok(fd.as_raw_fd()),
        Err(e) => Err(std::io::Error::other(format!("cannot open /dev/null: {e}"))),
    }
}

/// A pipe (read end, write end), both close-on-exec and ≥ 3.
fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh fds that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(read)?, above_stdio(write)?))
}

/// `fd` itself when ≥ 3, else a duplicate that is (a daemon started with a
/// standard stream closed would otherwise hand the child a pipe as 0–2
/// that the next `dup2` overwrites).
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd we then own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// A started program before it is tied to a runtime (it may have been
/// started on a thread outside one): its pid, pidfd and the read ends of
/// its stdout and stderr. Dropped unused, it is killed and reaped.
#[derive(Debug)]
pub struct RawChild {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Drop for RawChild {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            kill(&pidfd);
            let _ = waitid(&pidfd, 0);
        }
    }
}

/// A running program, read and waited for in the runtime it was made in.
/// Dropped before it was reaped, it is killed (through its pidfd) and
/// reaped in the background.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
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
        self.pid.unsigned_abs()
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
            match waitid(pidfd.get_ref(), libc::WNOHANG)? {
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
        if let Ok(Some(_)) = waitid(&pidfd, libc::WNOHANG) {
            return;
        }
        // Killed, not yet gone: reaped off this thread.
        let reap = move || {
            let _ = waitid(&pidfd, 0);
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
    // SAFETY: pidfd_send_signal takes an fd, a signal and no info.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// `waitid(P_PIDFD, pidfd, WEXITED | flags)`: the status once the process
/// has ended (and it is reaped), None when `WNOHANG` found it running.
fn waitid(pidfd: &OwnedFd, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
    loop {
        // SAFETY: zeroed siginfo is valid; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo we own.
        let result = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | flags,
            )
        };
        if result != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: si_pid and si_status are set for SIGCHLD infos.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        // As the wait status std decodes: exit code in the second byte, or
        // the signal (with 0x80 for a core dump) in the first.
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => (status & 0x7f) | 0x80,
            _ => status & 0x7f,
        };
        return Ok(Some(ExitStatus::from_raw(raw)));
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
            procs: CString::new("/nonexistent/cgroup.procs").expect("cstr"),
        });
        let err = cmd.spawn().expect_err("a bad cgroup");
        assert!(!err.missing());
        assert_eq!(
            err.to_string(),
            "joining the run's pids cgroup (/nonexistent/cgroup.procs): \
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
            // SAFETY: F_GETFD on an fd number reads its flags.
            .filter(|&fd| {
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
        // others: the program gets the defaults and an empty mask, as a
        // program std starts does.
        let script = "grep -E 'Sig(Ign|Blk)' /proc/self/status";
        let (_, out, _, _) = run(&sh(script)).await;
        let std_out = std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .output()
            .expect("std spawn");
        assert_eq!(out, String::from_utf8_lossy(&std_out.stdout));
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
        let ignored = out
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:\t"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .expect("SigIgn");
        assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }
}
