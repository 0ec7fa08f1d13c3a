//! Transactional runs: the project as the lower layer of an overlay.
//!
//! A sandboxed command runs with the project mounted as an overlay whose
//! lower layer is the project itself and whose upper layer is a private
//! directory of the daemon ([`OverlayMount`]). Everything the command
//! writes, creates, deletes, renames or chmods lands in the upper layer;
//! the project is untouched until the daemon reads that upper layer (the
//! changeset, `crate::checkpoint::changeset`), judges it and applies it.
//!
//! bubblewrap 0.8 has no `--overlay`, so the mount is made here: between
//! fork and exec of bwrap, the child unshares a user and a mount namespace,
//! maps its own uid and gid, makes its mounts private and mounts the
//! overlay *over the project's own path*. bwrap, started next inside that
//! namespace, binds the project path as it always does — and so binds the
//! overlay. Unprivileged overlay mounts need Linux ≥ 5.11; with
//! `userxattr` the overlay keeps its marks in `user.overlay.*` (an opaque
//! directory is `user.overlay.opaque = y`; a deletion is a character device
//! 0/0, a "whiteout").
//!
//! Mounting makes a few inodes in the work directory (milliseconds on a
//! busy ext4), so a transaction mounts the *next* action's overlay ahead,
//! in the background ([`mount_ahead`]): a holder process keeps the
//! namespace, and the command only joins it ([`install`], `setns` through
//! a pidfd).
//!
//! [`probe`] tries it once per process; where it fails the daemon either
//! fails closed (the default) or, when configured, falls back to observing
//! effects (see `docs/transactions.md`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::spawn::Step;

/// One overlay: the project (lower layer, mounted over at its own path),
/// the private upper layer, and the overlay's work directory (same file
/// system as the upper layer, empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayMount {
    pub project: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The overlay already mounted, ahead of the action, in a namespace
    /// kept by a holder process ([`mount_ahead`]): the command joins that
    /// namespace instead of mounting (None: it mounts its own).
    pub ahead: Option<Ahead>,
    /// The command starts only once the kernel's coarse clock (the one
    /// file timestamps are taken from) reads more than this (ns since the
    /// epoch; 0: at once). A transaction that must tell a change made just
    /// before its start from one just after (a person has just answered,
    /// and may have saved a file a moment before) sets it to its start: at
    /// most one clock tick of waiting.
    pub not_before_ns: i64,
}

/// A user and mount namespace in which an overlay is mounted, kept alive
/// by a holder process (`cat` reading a pipe only the daemon writes) until
/// [`Ahead::end`] or until the daemon goes (the pipe closes with it).
#[derive(Clone)]
pub struct Ahead(Arc<Holder>);

struct Holder {
    /// A pidfd of the holder: `setns` through it joins the holder's user
    /// and mount namespaces at once, and it names that process even if
    /// its pid were reused.
    pidfd: OwnedFd,
    /// The holder's stdin: closing it ends the holder.
    stdin: Mutex<Option<std::process::ChildStdin>>,
}

impl Ahead {
    /// End the holder (its namespace, and so the overlay, goes with it).
    /// The holder is reaped by the thread started with it; this does not
    /// wait for the namespace to be torn down.
    pub fn end(&self) {
        drop(
            self.0
                .stdin
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(
            self.stdin
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Ahead").field(&self.0.pidfd).finish()
    }
}

impl PartialEq for Ahead {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Ahead {}

tokio::task_local! {
    /// The overlay the shell actuator runs the current action in: set by
    /// the action's execution (`agent::act`) around the actuator call, so
    /// that no actuator signature has to carry it.
    static CURRENT: OverlayMount;
}

/// Run `work` with `mount` as the current action's overlay.
pub async fn scope<F: std::future::Future>(mount: OverlayMount, work: F) -> F::Output {
    CURRENT.scope(mount, work).await
}

/// The overlay of the action running in this task, if it runs in one.
pub fn current() -> Option<OverlayMount> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Why an overlay cannot be mounted for a project path: the overlay's
/// option string separates with `,` and `:` and escapes with `\`.
pub fn unmountable(path: &Path) -> Option<String> {
    let bytes = path.as_os_str().as_bytes();
    bytes
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | 0))
        .then(|| {
            format!(
                "{} contains `,`, `:` or `\\`, which an overlay mount option cannot carry",
                path.display()
            )
        })
}

fn cstring(bytes: &[u8], what: &str) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what} holds a NUL byte"),
        )
    })
}

/// Make `cmd` start inside a user and mount namespace in which
/// `mount.project` is the overlay: the namespace mounted ahead
/// (`mount.ahead`, joined), else a new one mounted in the child.
/// Everything the child needs is prepared here, before the spawn.
pub fn install(cmd: &mut super::spawn::Command, mount: &OverlayMount) -> std::io::Result<()> {
    let cwd = cmd.get_current_dir().map(Path::to_path_buf);
    for step in steps(mount, cwd)? {
        cmd.step(step);
    }
    if let Some(ahead) = &mount.ahead {
        // The step joining it names the holder's pidfd.
        cmd.keep_alive(Box::new(ahead.clone()));
    }
    Ok(())
}

/// [`install`] for a `tokio` command (the probe, run once).
pub fn install_tokio(
    cmd: &mut tokio::process::Command,
    mount: &OverlayMount,
) -> std::io::Result<()> {
    let cwd = cmd.as_std().get_current_dir().map(Path::to_path_buf);
    let steps = steps(mount, cwd)?;
    let keep = mount.ahead.clone();
    let mut in_child = super::spawn::as_pre_exec(steps);
    // SAFETY: the steps are async-signal-safe system calls on data prepared
    // before the fork; `keep` holds the pidfd a step names open.
    unsafe {
        cmd.pre_exec(move || {
            let _ = &keep;
            in_child()
        })
    };
    Ok(())
}

/// The child's steps into the overlay's namespace: join the one mounted
/// ahead and enter `cwd` again (joining a mount namespace sets the working
/// directory to its root, so the one the command was given is entered
/// again, now through the overlay), or mount a new one
/// ([`mount_steps`]); then wait for the clock when the transaction asks.
fn steps(mount: &OverlayMount, cwd: Option<PathBuf>) -> std::io::Result<Vec<Step>> {
    let mut steps = match &mount.ahead {
        None => mount_steps(mount)?,
        Some(ahead) => {
            let cwd = match cwd {
                Some(d) => d,
                None => std::env::current_dir()?,
            };
            vec![
                Step::JoinNamespaces {
                    pidfd: ahead.0.pidfd.as_raw_fd(),
                },
                Step::Chdir(cstring(
                    cwd.as_os_str().as_bytes(),
                    "the working directory",
                )?),
            ]
        }
    };
    if mount.not_before_ns > 0 {
        steps.push(Step::WaitForTick {
            not_before_ns: mount.not_before_ns,
        });
    }
    Ok(steps)
}

/// The pre-exec step that unshares a user and a mount namespace, maps the
/// caller's uid and gid into it, makes its mounts private and mounts the
/// overlay over `mount.project` (see [`mount_steps`]).
fn mount_in_child(
    mount: &OverlayMount,
) -> std::io::Result<impl FnMut() -> std::io::Result<()> + Send + Sync + 'static> {
    Ok(super::spawn::as_pre_exec(mount_steps(mount)?))
}

/// The child's steps that unshare a user and a mount namespace, map the
/// caller's uid and gid into it, make its mounts private (nothing mounted
/// there may reach the host's mount table) and mount the overlay over
/// `mount.project`.
fn mount_steps(mount: &OverlayMount) -> std::io::Result<Vec<Step>> {
    if let Some(why) = [&mount.project, &mount.upper, &mount.work]
        .into_iter()
        .find_map(|p| unmountable(p))
    {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
    }
    match_project_mode(&mount.project, &mount.upper);
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let uid_map = cstring(format!("{uid} {uid} 1").as_bytes(), "the uid map")?;
    let gid_map = cstring(format!("{gid} {gid} 1").as_bytes(), "the gid map")?;
    let target = cstring(mount.project.as_os_str().as_bytes(), "the project path")?;
    let mut options = b"lowerdir=".to_vec();
    options.extend_from_slice(mount.project.as_os_str().as_bytes());
    options.extend_from_slice(b",upperdir=");
    options.extend_from_slice(mount.upper.as_os_str().as_bytes());
    options.extend_from_slice(b",workdir=");
    options.extend_from_slice(mount.work.as_os_str().as_bytes());
    // `volatile`: the upper layer is read once and thrown away, so the
    // overlay must not sync the whole file system it lives on when the
    // namespace goes (an ext4 `syncfs` per action, tens of ms or worse).
    options.extend_from_slice(b",userxattr,volatile");
    let options = cstring(&options, "the overlay options")?;
    Ok(vec![
        Step::EnterUserNamespace {
            also: libc::CLONE_NEWNS,
            uid_map,
            gid_map,
        },
        Step::MakeMountsPrivate,
        Step::MountOverlay { target, options },
    ])
}

/// Give the upper layer the project's mode. The overlay's root takes its
/// mode from the upper layer, a private directory of the daemon (`0700`):
/// `ls -la` in the project showed that instead of the project's own. The
/// upper layer's parent stays private, so nothing is opened up on the host.
fn match_project_mode(project: &Path, upper: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(project) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o7777;
    if let Err(e) = std::fs::set_permissions(upper, std::fs::Permissions::from_mode(mode)) {
        tracing::debug!("overlay: the upper layer keeps its own mode: {e}");
    }
}

/// The kernel's coarse real-time clock now, in ns since the epoch.
/// Async-signal-safe (one `clock_gettime`).
pub fn coarse_now_ns() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    ts.tv_sec.saturating_mul(1_000_000_000) + ts.tv_nsec
}

/// Longest wait for the coarse clock to pass a transaction's start (one
/// tick is 1–10 ms; a clock that does not move must not hang the command).
const MAX_TICK_WAIT_NS: i64 = 50_000_000;

/// Sleep until the coarse clock reads more than `not_before_ns` (at most
/// [`MAX_TICK_WAIT_NS`]; 0: no wait). Runs in the forked child: only
/// `clock_gettime` and `nanosleep`, both async-signal-safe.
pub(super) fn wait_for_tick(not_before_ns: i64) {
    if not_before_ns <= 0 {
        return;
    }
    const STEP_NS: i64 = 200_000;
    let mut slept = 0i64;
    while coarse_now_ns() <= not_before_ns && slept < MAX_TICK_WAIT_NS {
        // std's sleep is `nanosleep` in a loop: no allocation, no lock.
        std::thread::sleep(std::time::Duration::from_nanos(STEP_NS.unsigned_abs()));
        slept += STEP_NS;
    }
}

/// Mount `mount`'s overlay now, ahead of the action that will run in it,
/// in a namespace kept by a holder process; the command then only joins
/// it ([`install`]). Mounting costs a handful of new inodes in the work
/// directory (its `work/`, the `volatile` marker, the probes for whiteouts
/// and `O_TMPFILE`) — milliseconds on a busy ext4 — which this takes off
/// the action's path. Blocking: call it from a blocking thread.
pub fn mount_ahead(mut mount: OverlayMount) -> std::io::Result<OverlayMount> {
    use std::os::unix::process::CommandExt;
    let in_child = mount_in_child(&mount)?;
    let mut cmd = std::process::Command::new("/bin/cat");
    cmd.current_dir("/")
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // No `PR_SET_PDEATHSIG`: it fires when the *thread* that forked the
    // holder ends, and that is a short-lived blocking thread. Should the
    // daemon die, its end of the pipe closes and `cat` ends by itself.
    // SAFETY: `mount_in_child` is async-signal-safe.
    unsafe { cmd.pre_exec(in_child) };
    let mut child = cmd.spawn()?;
    let pidfd = match rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.into());
        }
    };
    let stdin = child.stdin.take();
    // Reaped when it ends (its pipe closed, or killed with the daemon).
    std::thread::Builder::new()
        .name("overlay-holder".into())
        .spawn(move || {
            let _ = child.wait();
        })?;
    mount.ahead = Some(Ahead(Arc::new(Holder {
        pidfd,
        stdin: Mutex::new(stdin),
    })));
    Ok(mount)
}

/// What lets overlays be used where the probe found they cannot.
pub const OVERLAY_FIX: &str = "Linux ≥ 5.11 with unprivileged user namespaces \
     (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0) \
     lets each action run into an overlay; or set `[checkpoints] transactions = \
     \"overlay-or-observe\"` to observe effects instead";

/// Why overlays cannot be mounted here: the step that failed and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("overlays are unavailable here ({what}: {detail}); {OVERLAY_FIX}")]
pub struct OverlayUnavailable {
    pub what: &'static str,
    pub detail: String,
}

/// Whether overlays can be mounted here (tried once per process, in
/// `scratch`: a lower file, a deletion and a write, then the upper layer
/// must hold exactly the write and a whiteout, and the lower must be
/// untouched). `Err` is the reason and the fix.
pub fn probe(scratch: &Path) -> Result<(), OverlayUnavailable> {
    static RESULT: OnceLock<Result<(), OverlayUnavailable>> = OnceLock::new();
    RESULT.get_or_init(|| probe_once(scratch)).clone()
}

fn probe_once(scratch: &Path) -> Result<(), OverlayUnavailable> {
    let fail = |what: &'static str, e: &dyn std::fmt::Display| OverlayUnavailable {
        what,
        detail: e.to_string(),
    };
    std::fs::create_dir_all(scratch).map_err(|e| fail("scratch directory", &e))?;
    let dir = tempfile::Builder::new()
        .prefix("probe-")
        .tempdir_in(scratch)
        .map_err(|e| fail("scratch directory", &e))?;
    let (lower, upper, work) = (
        dir.path().join("lower"),
        dir.path().join("upper"),
        dir.path().join("work"),
    );
    for d in [&lower, &upper, &work] {
        std::fs::create_dir(d).map_err(|e| fail("scratch directory", &e))?;
    }
    std::fs::write(lower.join("gone"), "x").map_err(|e| fail("scratch file", &e))?;
    let mount = OverlayMount {
        project: lower.clone(),
        upper: upper.clone(),
        work,
        ahead: None,
        not_before_ns: 0,
    };
    let mut cmd = tokio::process::Command::new("/bin/sh");
    // Absolute paths: the child's working directory is set before the
    // mount and would name the lower directory itself, not the overlay.
    cmd.args(["-c", "rm \"$1/gone\" && echo y > \"$1/made\"", "sh"])
        .arg(&lower)
        .current_dir("/")
        .env_clear();
    install_tokio(&mut cmd, &mount).map_err(|e| fail("mount options", &e))?;
    // The probe runs once, before any action; a small current-thread
    // runtime keeps it independent of the caller's.
    let status = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let mut cmd = cmd;
            cmd.status().await
        })
    })
    .join()
    .map_err(|_| fail("probe", &"the probe thread panicked"))?
    .map_err(|e| fail("unshare or mount", &e))?;
    if !status.success() {
        return Err(fail("probe command", &status));
    }
    let whiteout = std::fs::symlink_metadata(upper.join("gone"))
        .map(|m| {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            m.file_type().is_char_device() && m.rdev() == 0
        })
        .unwrap_or(false);
    let made = std::fs::read_to_string(upper.join("made")).unwrap_or_default() == "y\n";
    let lower_kept = lower.join("gone").exists() && !lower.join("made").exists();
    if whiteout && made && lower_kept {
        Ok(())
    } else {
        Err(fail(
            "probe",
            &format!("whiteout {whiteout}, write in upper {made}, lower untouched {lower_kept}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_an_overlay_option_cannot_carry_are_named() {
        assert!(unmountable(Path::new("/home/ada/project")).is_none());
        for bad in ["/a,b", "/a:b", "/a\\b"] {
            assert!(unmountable(Path::new(bad)).is_some(), "{bad}");
        }
    }
}
