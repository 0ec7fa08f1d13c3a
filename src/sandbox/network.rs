//! Granted network without the host's loopback.
//!
//! A run granted network does not share the host's network namespace
//! (`--share-net` would let it reach every service listening on the host's
//! 127.0.0.1: databases, the daemon's own provider, a dev server). It keeps
//! the fresh namespace `--unshare-all` gives it, and
//! [slirp4netns](https://github.com/rootless-containers/slirp4netns) gives
//! that namespace a user-mode route out, started with
//! `--disable-host-loopback`: the sandbox's 127.0.0.1 is its own, and the
//! gateway address that slirp would map to the host's loopback
//! (10.0.2.2) is refused. Everything else is reached as from a normal
//! process of the person's (outbound TCP and UDP, DNS through slirp's
//! forwarder at [`SLIRP_DNS`]).
//!
//! The wiring, per run:
//! 1. [`bwrap_flags`] asks bwrap to report the sandbox's pid on one pipe
//!    (`--info-fd`) and to wait, namespaces made but before the command is
//!    executed, until a byte arrives on another (`--block-fd`). The argument
//!    builder writes placeholders; [`Attachment::prepare`] makes the two
//!    pipes and puts their numbers in.
//! 2. After the spawn, [`Attachment::attach`] reads the pid, waits for
//!    bwrap to set up the namespace's loopback, starts slirp4netns on it, waits for it to report the interface
//!    configured (`--ready-fd`), and only then unblocks bwrap. Each wait is
//!    bounded by [`ATTACH_TIMEOUT`].
//! 3. [`Attached`] lives as long as the run; dropping it closes slirp's
//!    `--exit-fd` and kills it.
//!
//! When slirp4netns is missing, a run granted network fails closed with the
//! reason and [`SLIRP_INSTALL_FIX`]; it never falls back to the host's
//! network. slirp4netns is not started with `--enable-sandbox`: that puts
//! it in a pid namespace of its own, where its netlink socket can take the
//! port id bwrap's loopback set-up expects (`getpid()` = 1 there), and
//! bwrap then fails with `loopback: Failed RTM_NEWADDR` (seen 1 run in 15).
//!
//! Not covered: private ranges (a service of the LAN, or one bound to the
//! host's own non-loopback address) stay reachable, as they are from any
//! process of the person's.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// Placeholder for the fd bwrap reports the sandbox's pid on.
pub const INFO_FD_ARG: &str = "{passepartout:net-info-fd}";
/// Placeholder for the fd bwrap waits on before running the command.
pub const BLOCK_FD_ARG: &str = "{passepartout:net-block-fd}";

/// The resolver inside the sandbox: slirp4netns's DNS forwarder, which
/// asks the host's resolver (also when that is 127.0.0.53, which the
/// sandbox cannot reach itself).
pub const SLIRP_DNS: &str = "10.0.2.3";

/// What to do when slirp4netns is missing.
pub const SLIRP_INSTALL_FIX: &str = "install slirp4netns: `apt-get install slirp4netns` \
     (Debian/Ubuntu), `dnf install slirp4netns` (Fedora), `pacman -S slirp4netns` (Arch)";

/// The longest each step of attaching may take (bwrap reporting its pid,
/// slirp4netns configuring the interface) before the run is refused.
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of bwrap's info JSON read (it is about 250).
const INFO_LIMIT: usize = 4096;
/// The most bytes of slirp4netns's stderr quoted when it fails.
const STDERR_LIMIT: usize = 2048;

/// The bwrap options a granted-network run gets instead of `--share-net`.
pub fn bwrap_flags() -> [&'static str; 4] {
    ["--info-fd", INFO_FD_ARG, "--block-fd", BLOCK_FD_ARG]
}

/// Where slirp4netns is, looked up once.
fn slirp4netns() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| super::probe::find_on_path("slirp4netns"))
        .clone()
}

/// Whether granted network can be given here (slirp4netns installed).
pub fn available() -> bool {
    slirp4netns().is_some()
}

/// Why a granted-network run could not be given its network.
pub fn missing_reason() -> String {
    format!(
        "network was granted, but slirp4netns (which gives the sandbox the network without \
         the host's loopback) was not found on PATH, so the run was refused rather than \
         given the host's network; {SLIRP_INSTALL_FIX}"
    )
}

/// A run's arguments with its network attachment, if it asks for one:
/// made before the spawn by [`Attachment::prepare`].
#[derive(Debug)]
pub struct Attachment<'a> {
    args: std::borrow::Cow<'a, [String]>,
    pipes: Option<Pipes>,
}

/// The pipes of a run granted network.
#[derive(Debug)]
struct Pipes {
    slirp: PathBuf,
    info_read: std::io::PipeReader,
    /// The child's ends: inherited by bwrap, closed here after the spawn.
    info_write: OwnedFd,
    block_read: OwnedFd,
    block_write: std::io::PipeWriter,
}

impl<'a> Attachment<'a> {
    /// When `args` hold the placeholders of [`bwrap_flags`]: the pipes, and
    /// the arguments with the placeholders replaced by their fd numbers.
    /// Otherwise (no network granted, or not bwrap) the arguments as they
    /// are, at no cost.
    pub fn prepare(args: &'a [String]) -> Result<Attachment<'a>, String> {
        if !args.iter().any(|a| a == INFO_FD_ARG || a == BLOCK_FD_ARG) {
            return Ok(Attachment {
                args: std::borrow::Cow::Borrowed(args),
                pipes: None,
            });
        }
        let slirp = slirp4netns().ok_or_else(missing_reason)?;
        let pipe_error = |e: std::io::Error| format!("cannot make a pipe for the network: {e}");
        let (info_read, info_write) = std::io::pipe().map_err(pipe_error)?;
        let (block_read, block_write) = std::io::pipe().map_err(pipe_error)?;
        let info_write = OwnedFd::from(info_write);
        let block_read = OwnedFd::from(block_read);
        let args = args
            .iter()
            .map(|a| match a.as_str() {
                INFO_FD_ARG => info_write.as_raw_fd().to_string(),
                BLOCK_FD_ARG => block_read.as_raw_fd().to_string(),
                _ => a.clone(),
            })
            .collect();
        Ok(Attachment {
            args: std::borrow::Cow::Owned(args),
            pipes: Some(Pipes {
                slirp,
                info_read,
                info_write,
                block_read,
                block_write,
            }),
        })
    }

    /// The arguments to spawn the program with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Let bwrap inherit its two pipe ends (they are close-on-exec here, so
    /// no other program started meanwhile holds them).
    pub fn install(&self, cmd: &mut tokio::process::Command) {
        let Some(p) = &self.pipes else {
            return;
        };
        let fds = [p.info_write.as_raw_fd(), p.block_read.as_raw_fd()];
        // SAFETY: runs in the forked child before exec; fcntl is
        // async-signal-safe and the closure allocates nothing.
        unsafe {
            cmd.pre_exec(move || inherit(&fds));
        }
    }

    /// After the spawn: give the sandbox its network, then let it run.
    /// `None` when no network was asked for.
    pub async fn attach(self) -> Result<Option<Attached>, String> {
        match self.pipes {
            Some(pipes) => pipes.attach().await.map(Some),
            None => Ok(None),
        }
    }
}

impl Pipes {
    /// After the spawn: give the sandbox its network, then let it run.
    async fn attach(self) -> Result<Attached, String> {
        let Pipes {
            slirp,
            mut info_read,
            info_write,
            block_read,
            mut block_write,
        } = self;
        // Our copies of the child's ends: closed, so a bwrap that dies
        // early gives EOF instead of a wait until the timeout.
        drop(info_write);
        drop(block_read);
        let pid = blocking_bounded("bwrap's report of the sandbox's pid", move || {
            let info = read_until_brace(&mut info_read)?;
            let pid = child_pid(&info).ok_or_else(|| {
                std::io::Error::other(format!(
                    "bwrap did not report the sandbox's pid (it said: {})",
                    String::from_utf8_lossy(&info).trim()
                ))
            })?;
            wait_for_loopback(pid)?;
            Ok(pid)
        })
        .await?;

        let pipe_error = |e: std::io::Error| format!("cannot make a pipe for slirp4netns: {e}");
        let (mut ready_read, ready_write) = std::io::pipe().map_err(pipe_error)?;
        let (exit_read, exit_write) = std::io::pipe().map_err(pipe_error)?;
        let ready_write = OwnedFd::from(ready_write);
        let exit_read = OwnedFd::from(exit_read);
        let mut cmd = tokio::process::Command::new(&slirp);
        cmd.args([
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            "--enable-seccomp",
        ])
        .arg(format!("--ready-fd={}", ready_write.as_raw_fd()))
        .arg(format!("--exit-fd={}", exit_read.as_raw_fd()))
        .arg(pid.to_string())
        .arg("tap0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        let fds = [ready_write.as_raw_fd(), exit_read.as_raw_fd()];
        // SAFETY: as in `install`.
        unsafe {
            cmd.pre_exec(move || inherit(&fds));
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", slirp.display()))?;
        drop(ready_write);
        drop(exit_read);
        let ready = blocking_bounded("slirp4netns configuring the sandbox's network", move || {
            let mut byte = [0u8; 1];
            ready_read
                .read(&mut byte)
                .map(|n| n == 1 && byte[0] == b'1')
        })
        .await;
        if ready != Ok(true) {
            let _ = child.start_kill();
            let mut said = Vec::new();
            if let Some(mut stderr) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let mut limited = (&mut stderr).take(STDERR_LIMIT as u64);
                let _ = tokio::time::timeout(ATTACH_TIMEOUT, limited.read_to_end(&mut said)).await;
            }
            let why = ready.err().unwrap_or_else(|| "it exited".into());
            return Err(format!(
                "slirp4netns could not give the sandbox its network ({why}): {}",
                String::from_utf8_lossy(&said).trim()
            ));
        }
        let stderr = child.stderr.take();
        // Unblock bwrap: the command runs from here on, with its network.
        use std::io::Write;
        block_write
            .write_all(b"1")
            .map_err(|e| format!("the sandbox ended before its network was ready: {e}"))?;
        Ok(Attached {
            slirp: Some(Slirp {
                _child: child,
                _exit: exit_write,
                _stderr: stderr,
            }),
        })
    }
}

/// How long slirp4netns outlives the run: what the run wrote just before
/// it ended (`echo data > /dev/tcp/host/port; exit`) is still on its way
/// through slirp, and would be lost if it were killed at once.
pub const LINGER: Duration = Duration::from_secs(1);

/// slirp4netns, alive for one run and [`LINGER`] after it.
#[derive(Debug)]
pub struct Attached {
    slirp: Option<Slirp>,
}

#[derive(Debug)]
struct Slirp {
    /// Killed when dropped.
    _child: tokio::process::Child,
    /// Closing it tells slirp4netns to exit.
    _exit: std::io::PipeWriter,
    /// Kept open so a late message of slirp's never meets a closed pipe.
    _stderr: Option<tokio::process::ChildStderr>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let Some(slirp) = self.slirp.take() else {
            return;
        };
        // Off the caller's path: the run's result does not wait.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                drop(slirp);
            });
        }
    }
}

/// Clear close-on-exec on `fds` (in a forked child, before exec).
fn inherit(fds: &[RawFd]) -> std::io::Result<()> {
    for &fd in fds {
        // SAFETY: fcntl on an fd number; touches no memory of ours.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Run a blocking read off the runtime, bounded by [`ATTACH_TIMEOUT`].
async fn blocking_bounded<T: Send + 'static>(
    what: &str,
    read: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, String> {
    match tokio::time::timeout(ATTACH_TIMEOUT, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(e))) => Err(format!("reading {what}: {e}")),
        Ok(Err(e)) => Err(format!("reading {what}: {e}")),
        Err(_) => Err(format!(
            "{what} took more than {} s (limit ATTACH_TIMEOUT)",
            ATTACH_TIMEOUT.as_secs()
        )),
    }
}

/// Wait until bwrap has set up the sandbox's loopback (`lo` up with
/// 127.0.0.1: its address appears in the namespace's routing tables).
/// slirp4netns brings `lo` up too, which gives it 127.0.0.1 at once; were
/// it first, bwrap's own `RTM_NEWADDR` would fail with EEXIST and the run
/// with it (11 runs in 20 here). bwrap does this within a millisecond of
/// reporting its pid; the caller bounds the wait.
fn wait_for_loopback(pid: u32) -> std::io::Result<()> {
    let tables = format!("/proc/{pid}/net/fib_trie");
    let deadline = std::time::Instant::now() + ATTACH_TIMEOUT;
    while std::time::Instant::now() < deadline {
        // Gone: bwrap failed; its stderr says why.
        let text = std::fs::read_to_string(&tables).map_err(|e| {
            std::io::Error::other(format!("the sandbox ended while it was being set up ({e})"))
        })?;
        if text.contains("127.0.0.1") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Err(std::io::Error::other(
        "the sandbox's loopback did not come up (limit ATTACH_TIMEOUT)",
    ))
}

/// Read bwrap's info JSON up to its closing brace, EOF, or [`INFO_LIMIT`].
fn read_until_brace(pipe: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    while !out.contains(&b'}') && out.len() < INFO_LIMIT {
        let n = pipe.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// `"child-pid": 1234` from bwrap's info JSON.
fn child_pid(info: &[u8]) -> Option<u32> {
    let end = info.iter().position(|&b| b == b'}')?;
    let value: serde_json::Value = serde_json::from_slice(&info[..=end]).ok()?;
    value
        .get("child-pid")?
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pid_from_bwraps_report() {
        let info = b"{\n    \"child-pid\": 12340,\n    \"net-namespace\": 4026532183\n}\n";
        assert_eq!(child_pid(info), Some(12340));
        assert_eq!(child_pid(b"{\"child-pid\": 1}"), None);
        assert_eq!(child_pid(b"{\"other\": 5}"), None);
        assert_eq!(child_pid(b"garbage"), None);
    }

    #[test]
    fn arguments_without_placeholders_need_no_attachment() {
        let args = vec!["--unshare-all".to_string(), "--".into(), "true".into()];
        let prepared = Attachment::prepare(&args).unwrap();
        assert!(prepared.pipes.is_none());
        assert_eq!(prepared.args(), &args[..]);
    }

    #[test]
    fn the_missing_tool_is_named_with_the_fix() {
        let why = missing_reason();
        assert!(why.contains("slirp4netns"));
        assert!(why.contains("apt-get install slirp4netns"));
    }
}
