//! Run one program with a time limit, an output cap, resource limits
//! ([`run_limited`], enforced as described in [`super::enforce`]) and
//! cancellation.
//!
//! The runner knows nothing about sandboxes: it runs whatever program it is
//! given (bwrap with its arguments, or an interpreter directly) and keeps
//! its promises about resources. The program leads its own process group,
//! so a timeout or a cancellation kills everything it started, not just the
//! first process; whatever is left in the group when the program exits is
//! killed too. Only the first `output_cap` bytes of each stream are kept,
//! and a command whose output passes the cap is stopped at the source: its
//! group is killed at the first read past the cap, so `yes` costs one cap
//! and a pipe buffer of reading, not the whole timeout of draining.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::enforce::{Enforcer, LimitHit, Writable, WATCH_EVERY};
use super::limits::ResourceLimits;
use super::spawn::timeline::mark;
use tokio_util::sync::CancellationToken;

/// How long to keep reading after the group was killed: enough for the
/// kernel to close the pipes, short enough that a process that escaped the
/// group cannot hold the run open.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// Read size per pipe read (a full Linux pipe buffer).
const READ_CHUNK: usize = 64 * 1024;

/// Resource limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Wall-clock limit; the process group is killed when it passes.
    pub timeout: Duration,
    /// Bytes kept per stream (stdout and stderr each); a command that
    /// prints more is stopped, and what was read past the cap is counted.
    pub output_cap: usize,
}

impl Default for RunLimits {
    /// 30 s and 100 KB per stream.
    fn default() -> Self {
        RunLimits {
            timeout: Duration::from_secs(30),
            output_cap: 100_000,
        }
    }
}

/// What happened in one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The exit code, when the program exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did.
    pub signal: Option<i32>,
    /// The kept part of stdout, decoded lossily as UTF-8.
    pub stdout: String,
    pub stderr: String,
    /// Bytes of stdout read but not kept.
    pub stdout_truncated_bytes: u64,
    pub stderr_truncated_bytes: u64,
    /// The time limit passed and the group was killed.
    pub timed_out: bool,
    /// The run was cancelled and the group was killed.
    pub cancelled: bool,
    /// Wall-clock time from spawn to the end of output.
    pub duration: Duration,
    /// The limits the run was held to (for the messages in `render`).
    pub limits: RunLimits,
    /// The resource limit the run ran into, if any (see
    /// [`super::enforce`]).
    pub stopped_by: Option<LimitHit>,
}

impl RunOutcome {
    /// Whether the program ran to the end and exited 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }

    /// The outcome as text for the model: a status line, then each
    /// non-empty stream with a marker where output was cut.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let status = if self.cancelled {
            "cancelled: the command and every process it started were killed".to_string()
        } else if self.timed_out {
            format!(
                "timed out after {}: the command and every process it started were killed",
                format_duration(self.limits.timeout)
            )
        } else if let Some(hit) = self.stopped_by {
            hit.to_string()
        } else {
            match (self.exit_code, self.signal) {
                (Some(code), _) => format!("exit code: {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "exit status unknown".to_string(),
            }
        };
        text.push_str(&status);
        text.push('\n');
        let mut any = false;
        for (name, body, cut) in [
            ("stdout", &self.stdout, self.stdout_truncated_bytes),
            ("stderr", &self.stderr, self.stderr_truncated_bytes),
        ] {
            if body.is_empty() && cut == 0 {
                continue;
            }
            any = true;
            let _ = writeln!(text, "{name}:");
            text.push_str(body);
            if !body.ends_with('\n') && !body.is_empty() {
                text.push('\n');
            }
            if cut > 0 {
                let _ = writeln!(
                    text,
                    "[… {} of output truncated (cap {}) …]",
                    format_bytes(cut),
                    format_bytes(self.limits.output_cap as u64)
                );
            }
        }
        if !any {
            text.push_str("(no output)\n");
        }
        text
    }
}

/// Why a run could not happen at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// `missing`: the program itself was not found (the one case where
    /// installing something is the fix).
    #[error("cannot start `{program}`: {message}")]
    Spawn {
        program: String,
        message: String,
        missing: bool,
    },
    #[error("lost track of `{program}`: {message}")]
    Wait { program: String, message: String },
}

/// Run `program args...` in `cwd` and collect its outcome.
///
/// `env`: `None` inherits this process's environment; `Some(map)` starts
/// from an empty one. stdin is `/dev/null`. Call it from async code on a
/// runtime worker, not from `spawn_blocking`: programs that use
/// `PR_SET_PDEATHSIG` (bwrap's `--die-with-parent`) die when the *thread*
/// that spawned them exits, and blocking-pool threads come and go.
pub async fn run(
    program: &str,
    args: &[String],
    cwd: &Path,
    env: Option<&BTreeMap<String, String>>,
    limits: &RunLimits,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    run_limited(
        program,
        args,
        cwd,
        env,
        limits,
        &ResourceLimits::none(),
        cancel,
    )
    .await
}

/// [`run`], also held to `resources` (see [`super::enforce`]): rlimits set
/// in the child before exec, RLIMIT_NPROC in the run's own user namespace
/// or a pids cgroup, and a watchdog
/// that stops the run when the process or disk limit is reached.
pub async fn run_limited(
    program: &str,
    args: &[String],
    cwd: &Path,
    env: Option<&BTreeMap<String, String>>,
    limits: &RunLimits,
    resources: &ResourceLimits,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    run_limited_in(program, args, cwd, env, limits, resources, None, cancel).await
}

/// [`run_limited`], started inside a new user and mount namespace in which
/// `overlay` (when given) is mounted over the project (see
/// [`super::overlay`]): what the program writes there lands in the upper
/// layer.
#[allow(clippy::too_many_arguments)]
pub async fn run_limited_in(
    program: &str,
    args: &[String],
    cwd: &Path,
    env: Option<&BTreeMap<String, String>>,
    limits: &RunLimits,
    resources: &ResourceLimits,
    overlay: Option<&super::overlay::OverlayMount>,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    mark("run");
    let writable = writable_layers(args, cwd, overlay);
    let enforcer = Enforcer::prepare_writing(resources, &writable);
    mark("prepared");
    let outcome = run_enforced(program, args, cwd, env, limits, &enforcer, overlay, cancel).await;
    mark("ran");
    enforcer.finish().await;
    mark("finished");
    outcome
}

/// What a run of `args` (bwrap's, or a program's own) can write to, for
/// the disk limit: the overlay's upper layer (where its writes to the
/// project land), the source of each writable bind (the project without an
/// overlay, the session's `/tmp`, further writable paths; those inside the
/// overlaid project are its upper layer's), and each tmpfs it mounts for
/// itself that stays writable (`HOME`, a private `/tmp`).
fn writable_layers(
    args: &[String],
    cwd: &Path,
    overlay: Option<&super::overlay::OverlayMount>,
) -> Writable {
    let in_overlay = |p: &Path| overlay.is_some_and(|o| p.starts_with(&o.project));
    let mut trees: Vec<PathBuf> = overlay.map(|o| o.upper.clone()).into_iter().collect();
    let binds: Vec<PathBuf> = args
        .windows(3)
        .filter(|w| w[0] == "--bind")
        .map(|w| PathBuf::from(&w[1]))
        .collect();
    if binds.is_empty() && !in_overlay(cwd) {
        // Not bwrap: the program writes where it runs.
        trees.push(cwd.to_path_buf());
    }
    trees.extend(binds.into_iter().filter(|p| !in_overlay(p)));
    let private_mounts = args
        .iter()
        .enumerate()
        .filter(|(_, a)| *a == "--tmpfs")
        .filter_map(|(i, _)| {
            let dest = args.get(i + 1)?;
            let read_only = args.get(i + 2).is_some_and(|a| a == "--remount-ro")
                && args.get(i + 3) == Some(dest);
            (!read_only).then(|| PathBuf::from(dest))
        })
        .collect();
    Writable {
        trees,
        private_mounts,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_enforced(
    program: &str,
    args: &[String],
    cwd: &Path,
    env: Option<&BTreeMap<String, String>>,
    limits: &RunLimits,
    enforcer: &Enforcer,
    overlay: Option<&super::overlay::OverlayMount>,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    // A run granted network gets it from slirp4netns (see super::network).
    let spawn_error = |message| RunError::Spawn {
        program: program.to_string(),
        message,
        missing: false,
    };
    let network =
        super::network::Attachment::prepare(args).map_err(|e| spawn_error(e.to_string()))?;
    // Our own spawn (see super::spawn): clone with CLONE_VM | CLONE_VFORK,
    // the steps below done in the child, stdin from /dev/null, stdout and
    // stderr piped, a process group of its own, killed when dropped.
    let mut cmd = super::spawn::Command::new(program);
    cmd.args(network.args()).current_dir(cwd);
    if let Some(env) = env {
        cmd.env_exact(env);
    }
    let install_overlay = |cmd: &mut super::spawn::Command| match overlay {
        Some(mount) => super::overlay::install(cmd, mount).map_err(|e| RunError::Spawn {
            program: program.to_string(),
            message: format!("the overlay cannot be prepared: {e}"),
            missing: false,
        }),
        None => Ok(()),
    };
    // The child's steps run in the order installed. A process limit kept
    // in a user namespace of the run's own (a daemon run as a user) is made
    // inside the overlay's namespace: an overlay mounted ahead is joined
    // with `setns`, which a process already in a user namespace of its own
    // may not do (EPERM). Otherwise the limits come first, set in the
    // host's namespaces (a pids cgroup joined as root), then the overlay.
    if enforcer.enters_user_namespace() {
        install_overlay(&mut cmd)?;
        enforcer.install(&mut cmd);
    } else {
        enforcer.install(&mut cmd);
        install_overlay(&mut cmd)?;
    }
    network.install(&mut cmd);
    let started = Instant::now();
    let cannot_start = |e: super::spawn::SpawnError| RunError::Spawn {
        program: program.to_string(),
        message: e.to_string(),
        missing: e.missing(),
    };
    mark("spawn");
    let child = cmd.spawn().map_err(cannot_start)?;
    mark("spawned");
    let mut child = super::spawn::Child::from_raw(child).map_err(|e| RunError::Spawn {
        program: program.to_string(),
        message: e.to_string(),
        missing: false,
    })?;
    // Armed from here on: dropping this future, or returning, kills the group.
    let child_pid = Some(child.id());
    let group = GroupKiller(child_pid.and_then(|id| libc::pid_t::try_from(id).ok()));
    let _network = network
        .attach()
        .await
        .map_err(|e| spawn_error(e.to_string()))?;
    mark("attached");

    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let mut out = Capture::new(limits.output_cap);
    let mut err = Capture::new(limits.output_cap);

    enum Ending {
        Finished(std::io::Result<ExitStatus>),
        TimedOut,
        Cancelled,
        Limit(LimitHit),
    }
    // Resolves when a watched limit is reached; never, when none is watched.
    let watchdog = async {
        if !enforcer.watches() {
            return std::future::pending().await;
        }
        // The first look after one period: a run that ends sooner (most
        // tool calls) costs the watchdog nothing.
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + WATCH_EVERY, WATCH_EVERY);
        loop {
            tick.tick().await;
            if let Some(hit) = enforcer.check(child_pid).await {
                return hit;
            }
        }
    };
    let ending = {
        // When the program exits, what it left running in its group dies
        // with it (as bwrap's pid namespace does), so a background job
        // holding the pipes cannot keep the run open until the timeout.
        let wait_then_reap = async {
            let status = child.wait().await;
            mark("reaped");
            group.kill();
            status
        };
        let work = async {
            let (_, _, status) = tokio::join!(
                async {
                    drain(&mut out_pipe, &mut out, &group).await;
                    mark("stdout closed");
                },
                async {
                    drain(&mut err_pipe, &mut err, &group).await;
                    mark("stderr closed");
                },
                wait_then_reap
            );
            status
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Ending::Cancelled,
            status = work => Ending::Finished(status),
            _ = tokio::time::sleep(limits.timeout) => Ending::TimedOut,
            hit = watchdog => Ending::Limit(hit),
        }
    };

    let mut stopped_by = None;
    let (status, timed_out, cancelled) = match ending {
        Ending::Finished(status) => (status, false, false),
        Ending::TimedOut | Ending::Cancelled | Ending::Limit(_) => {
            if let Ending::Limit(hit) = ending {
                stopped_by = Some(hit);
            }
            group.kill();
            // Keep what the pipes still hold; the group is dead, so EOF
            // follows at once unless something escaped it.
            let rest = async {
                let (_, _, status) = tokio::join!(
                    drain(&mut out_pipe, &mut out, &group),
                    drain(&mut err_pipe, &mut err, &group),
                    child.wait()
                );
                status
            };
            let status = match tokio::time::timeout(KILL_GRACE, rest).await {
                Ok(status) => status,
                Err(_) => child.wait().await,
            };
            (
                status,
                matches!(ending, Ending::TimedOut),
                matches!(ending, Ending::Cancelled),
            )
        }
    };
    let status = status.map_err(|e| RunError::Wait {
        program: program.to_string(),
        message: e.to_string(),
    })?;
    drop(group);

    let (stdout, stdout_truncated_bytes) = out.finish();
    let (stderr, stderr_truncated_bytes) = err.finish();
    if stopped_by.is_none() && !timed_out && !cancelled {
        if stdout_truncated_bytes > 0 || stderr_truncated_bytes > 0 {
            stopped_by = Some(LimitHit::Output(limits.output_cap as u64));
        } else {
            stopped_by = enforcer.recognise(status.code(), status.signal(), &stderr);
        }
    }
    Ok(RunOutcome {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        stdout_truncated_bytes,
        stderr_truncated_bytes,
        timed_out,
        cancelled,
        duration: started.elapsed(),
        limits: *limits,
        stopped_by,
    })
}

/// Kills a process group when told to, and when dropped.
struct GroupKiller(Option<libc::pid_t>);

impl GroupKiller {
    fn kill(&self) {
        // A pgid of 0 or 1 would mean our own group or init's: never.
        if let Some(pgid) = self.0.filter(|&p| p > 1) {
            // ESRCH (group already gone) is the normal case after a clean
            // exit and is ignored.
            if let Some(pgid) = rustix::process::Pid::from_raw(pgid) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Read a pipe to EOF into `capture`. The pipe is dropped at EOF or on a
/// read error, so a second call after a kill resumes where this one was
/// interrupted.
///
/// The first read past the cap kills `group` and closes the pipe: the
/// output cap is enforced at the source, so a command printing without end
/// is stopped instead of being drained until its timeout. Reading on until
/// the kill brings EOF would count what a fast writer (`yes`) pours in while
/// its sandbox is torn down — megabytes on a loaded machine — so the count
/// of what was cut is what was read past the cap, not all it wrote.
async fn drain<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    capture: &mut Capture,
    group: &GroupKiller,
) {
    let Some(reader) = pipe.as_mut() else {
        return;
    };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let was_over = capture.dropped > 0;
                capture.push(&buf[..n]);
                if !was_over && capture.dropped > 0 {
                    group.kill();
                    break;
                }
            }
        }
    }
    *pipe = None;
}

/// The first `cap` bytes of a stream, and a count of the rest.
#[derive(Debug)]
struct Capture {
    kept: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Capture {
            kept: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let take = room.min(chunk.len());
        if take > 0 {
            self.kept.reserve_exact(take);
            self.kept.extend_from_slice(&chunk[..take]);
        }
        self.dropped += (chunk.len() - take) as u64;
    }

    /// The kept text and the number of bytes not kept. When the cap cut a
    /// character in two, its leading bytes are dropped (and counted) rather
    /// than decoded as U+FFFD.
    fn finish(self) -> (String, u64) {
        let mut kept = self.kept;
        let mut dropped = self.dropped;
        if dropped > 0 {
            let partial = incomplete_tail(&kept);
            kept.truncate(kept.len() - partial);
            dropped += partial as u64;
        }
        (String::from_utf8_lossy(&kept).into_owned(), dropped)
    }
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 character
/// whose remaining bytes are missing.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: keep looking for the lead
        }
        let len = match b {
            0xF0..=0xF7 => 4,
            0xE0..=0xEF => 3,
            0xC0..=0xDF => 2,
            _ => return 0,
        };
        return if back < len { back } else { 0 };
    }
    0
}

/// `1 byte`, `999 bytes`, `100 KB`, `9.9 MB` (decimal units).
fn format_bytes(n: u64) -> String {
    const UNITS: &[(u64, &str)] = &[(1_000_000_000, "GB"), (1_000_000, "MB"), (1_000, "KB")];
    for &(size, unit) in UNITS {
        if n >= size {
            let value = format!("{:.1}", n as f64 / size as f64);
            let value = value.strip_suffix(".0").unwrap_or(&value);
            return format!("{value} {unit}");
        }
    }
    if n == 1 {
        "1 byte".into()
    } else {
        format!("{n} bytes")
    }
}

/// `30 s`, `1.5 s`, `250 ms`.
fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> RunOutcome {
        RunOutcome {
            exit_code: Some(0),
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated_bytes: 0,
            stderr_truncated_bytes: 0,
            timed_out: false,
            cancelled: false,
            duration: Duration::from_millis(5),
            limits: RunLimits::default(),
            stopped_by: None,
        }
    }

    #[test]
    fn capture_keeps_the_cap_and_counts_the_rest() {
        let mut c = Capture::new(10);
        c.push(b"0123456");
        c.push(b"789abcdef");
        c.push(b"ghij");
        assert_eq!(c.finish(), ("0123456789".to_string(), 10));
    }

    #[test]
    fn capture_never_splits_a_character() {
        // "é" is two bytes, "€" three, "🦀" four: cut each after its first byte.
        for (text, keep) in [("aé", 2), ("a€", 2), ("a€", 3), ("a🦀", 2), ("a🦀", 4)] {
            let mut c = Capture::new(keep);
            c.push(text.as_bytes());
            let total = text.len() as u64;
            assert_eq!(
                c.finish(),
                ("a".to_string(), total - 1),
                "{text} cut at {keep}"
            );
        }
        // A whole character at the cap is kept.
        let mut c = Capture::new(4);
        c.push("a€b".as_bytes());
        assert_eq!(c.finish(), ("a€".to_string(), 1));
    }

    #[test]
    fn capture_without_truncation_decodes_lossily() {
        let mut c = Capture::new(100);
        c.push(b"ok \xff end");
        assert_eq!(c.finish(), ("ok \u{fffd} end".to_string(), 0));
    }

    #[test]
    fn renders_exit_streams_and_truncation() {
        let mut o = outcome();
        o.exit_code = Some(3);
        o.stdout = "partial".into();
        o.stdout_truncated_bytes = 9_900_000;
        o.stderr = "oops\n".into();
        assert_eq!(
            o.render(),
            "exit code: 3\nstdout:\npartial\n[… 9.9 MB of output truncated (cap 100 KB) …]\n\
             stderr:\noops\n"
        );
    }

    #[test]
    fn renders_timeout_cancel_signal_and_silence() {
        let mut o = outcome();
        assert_eq!(o.render(), "exit code: 0\n(no output)\n");
        o.exit_code = None;
        o.signal = Some(9);
        o.timed_out = true;
        o.limits.timeout = Duration::from_secs(1);
        assert_eq!(
            o.render(),
            "timed out after 1 s: the command and every process it started were killed\n\
             (no output)\n"
        );
        o.timed_out = false;
        assert_eq!(o.render(), "killed by signal 9\n(no output)\n");
        o.cancelled = true;
        assert_eq!(
            o.render(),
            "cancelled: the command and every process it started were killed\n(no output)\n"
        );
    }

    #[test]
    fn formats_sizes_and_durations() {
        assert_eq!(format_bytes(1), "1 byte");
        assert_eq!(format_bytes(999), "999 bytes");
        assert_eq!(format_bytes(100_000), "100 KB");
        assert_eq!(format_bytes(1_500), "1.5 KB");
        assert_eq!(format_bytes(9_900_000), "9.9 MB");
        assert_eq!(format_bytes(2_000_000_000), "2 GB");
        assert_eq!(format_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250 ms");
    }

    /// A command in an overlay, mounted by its own child or ahead by a
    /// holder (joined with `setns` through a pidfd from the cloned child):
    /// its write lands in the upper layer, the project is untouched.
    #[tokio::test]
    async fn runs_in_an_overlay_mounted_ahead_or_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        if let Err(why) = super::super::overlay::probe(&dir.path().join("probe")) {
            eprintln!("overlays unavailable here, not tested: {why}");
            return;
        }
        for ahead in [false, true] {
            let base = dir.path().join(format!("ahead-{ahead}"));
            let (project, upper, work) = (base.join("p"), base.join("u"), base.join("w"));
            for d in [&project, &upper, &work] {
                std::fs::create_dir_all(d).expect("mkdir");
            }
            let mut mount = super::super::overlay::OverlayMount {
                project: project.clone(),
                upper: upper.clone(),
                work,
                ahead: None,
                not_before_ns: 0,
            };
            if ahead {
                mount = super::super::overlay::mount_ahead(mount).expect("mount ahead");
            }
            // An absolute path: a child that mounts its own overlay enters
            // its working directory before the mount (as std did), so a
            // relative path would name the lower directory itself.
            let script = format!("echo y > '{}/made' && pwd", project.display());
            let args = vec!["-c".to_string(), script];
            let outcome = run_limited_in(
                "/bin/sh",
                &args,
                &project,
                Some(&BTreeMap::new()),
                &RunLimits::default(),
                &ResourceLimits::default(),
                Some(&mount),
                CancellationToken::new(),
            )
            .await
            .expect("run");
            assert!(outcome.success(), "ahead {ahead}: {}", outcome.render());
            assert_eq!(outcome.stdout.trim(), project.to_str().expect("utf8"));
            assert_eq!(
                std::fs::read_to_string(upper.join("made")).ok().as_deref(),
                Some("y\n")
            );
            assert!(
                !project.join("made").exists(),
                "ahead {ahead}: the project was written"
            );
            if let Some(holder) = &mount.ahead {
                holder.end();
            }
        }
    }

    /// A step the child cannot take fails the run with the step named.
    #[tokio::test]
    async fn a_refused_step_names_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mount = super::super::overlay::OverlayMount {
            project: dir.path().join("missing-project"),
            upper: dir.path().join("missing-upper"),
            work: dir.path().join("missing-work"),
            ahead: None,
            not_before_ns: 0,
        };
        let err = run_limited_in(
            "/bin/true",
            &[],
            dir.path(),
            None,
            &RunLimits::default(),
            &ResourceLimits::default(),
            Some(&mount),
            CancellationToken::new(),
        )
        .await
        .expect_err("no overlay over a missing project");
        let RunError::Spawn {
            message, missing, ..
        } = err
        else {
            panic!("not a spawn error: {err:?}");
        };
        assert!(!missing);
        assert!(
            message.starts_with("mounting the overlay over the project: ")
                || message.starts_with("entering a user and mount namespace for the overlay: "),
            "{message}"
        );
        // A missing program is the one `missing` case.
        let err = run(
            "/nonexistent/bwrap",
            &[],
            dir.path(),
            None,
            &RunLimits::default(),
            CancellationToken::new(),
        )
        .await
        .expect_err("missing");
        assert_eq!(
            err,
            RunError::Spawn {
                program: "/nonexistent/bwrap".into(),
                message: "No such file or directory (os error 2)".into(),
                missing: true,
            }
        );
    }
}
