//! Can bubblewrap run here? Find out once, and if not, say why and how to
//! fix it.
//!
//! Finding the binary is not enough: on Ubuntu 23.10+ (AppArmor restricting
//! unprivileged user namespaces), in many containers, and with
//! `user.max_user_namespaces = 0`, `bwrap` exists but every run fails. So
//! the probe makes a real trial run with the same flags real runs use, and
//! when it fails, reads the kernel knobs that usually cause it and names
//! the one to change, quoting bwrap's own words.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::bwrap::{bwrap_args, SandboxSpec, SystemLayout};
use super::limits::ResourceLimits;

/// The fix when bwrap is not installed.
pub const INSTALL_FIX: &str = "install bubblewrap: `apt-get install bubblewrap` (Debian/Ubuntu), \
     `dnf install bubblewrap` (Fedora), `pacman -S bubblewrap` (Arch)";

/// The fix when bwrap is there but the kernel refused the run's setup
/// (a user namespace, the overlay's mount or joining its namespace, a
/// limit) between fork and exec.
pub const SETUP_FIX: &str = "the kernel refused to set up the sandbox for this run; check that \
     unprivileged user namespaces are allowed (`sysctl kernel.unprivileged_userns_clone`, \
     `kernel.apparmor_restrict_unprivileged_userns`, `user.max_user_namespaces`) and see \
     `passepartout providers` for the sandbox's status; the daemon's log has the details";

/// Added to the status line where the memory limit cannot hold for a whole
/// command: said at start, not found out when a command's processes
/// together hold many times the limit.
pub const MEMORY_PER_PROCESS_NOTE: &str = "; memory is limited per process only (RLIMIT_AS): \
     no memory cgroup can be made here, so a command's processes together may use a multiple \
     of `memory` (run the daemon where it may make cgroups: cgroup v2 with `memory` \
     delegated, or a writable v1 memory hierarchy)";

/// How long the trial run may take before it counts as a failure.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether sandboxed runs are possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxStatus {
    /// bwrap ran a trial sandbox successfully.
    Available { bwrap: PathBuf, version: String },
    /// It cannot: `reason` says why (with bwrap's stderr when it ran),
    /// `fix` what a person can do about it.
    Unavailable { reason: String, fix: String },
}

impl SandboxStatus {
    /// One paragraph for the startup log or the person's status line.
    pub fn describe(&self) -> String {
        match self {
            SandboxStatus::Available { bwrap, version } => {
                let mut line = format!("sandbox: bubblewrap {version} ({})", bwrap.display());
                if super::enforce::memory_limit() == super::enforce::MemoryLimit::PerProcess {
                    line.push_str(MEMORY_PER_PROCESS_NOTE);
                }
                line
            }
            SandboxStatus::Unavailable { reason, fix } => {
                format!("sandbox UNAVAILABLE: {reason}\nfix: {fix}")
            }
        }
    }

    pub fn is_available(&self) -> bool {
        matches!(self, SandboxStatus::Available { .. })
    }
}

/// The sandbox status of this machine, probed on first call and cached for
/// the life of the process.
pub fn probe() -> SandboxStatus {
    static STATUS: OnceLock<SandboxStatus> = OnceLock::new();
    STATUS
        .get_or_init(|| match find_on_path("bwrap") {
            Some(path) => probe_with(&path),
            None => SandboxStatus::Unavailable {
                reason: "bubblewrap (`bwrap`) was not found on PATH".into(),
                fix: INSTALL_FIX.into(),
            },
        })
        .clone()
}

/// Probe a specific bwrap binary, uncached: version, then a trial run.
pub fn probe_with(bwrap: &Path) -> SandboxStatus {
    let version = match Command::new(bwrap)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let text = text.trim();
            text.strip_prefix("bubblewrap ").unwrap_or(text).to_string()
        }
        Ok(out) => {
            return SandboxStatus::Unavailable {
                reason: format!(
                    "`{} --version` failed ({}): {}",
                    bwrap.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                fix: INSTALL_FIX.into(),
            }
        }
        Err(e) => {
            return SandboxStatus::Unavailable {
                reason: format!("cannot run `{}`: {e}", bwrap.display()),
                fix: INSTALL_FIX.into(),
            }
        }
    };

    let args = match trial_args() {
        Ok(a) => a,
        Err(reason) => {
            return SandboxStatus::Unavailable {
                reason: reason.to_string(),
                fix: "run passepartout from a directory it can bind (not `/`)".into(),
            }
        }
    };
    match trial(bwrap, &args) {
        Ok(()) => SandboxStatus::Available {
            bwrap: bwrap.to_path_buf(),
            version,
        },
        Err(failed) => {
            let stderr = failed.to_string();
            let (reason, fix) = classify_failure(&stderr, &Sysctls::read(Path::new("/proc")));
            SandboxStatus::Unavailable { reason, fix }
        }
    }
}

/// Why the trial run failed.
#[derive(Debug, thiserror::Error)]
enum TrialError {
    #[error("trial sandbox: {0}")]
    Args(#[from] super::bwrap::SpecError),
    #[error("cannot start bwrap: {0}")]
    Start(std::io::Error),
    #[error("the trial run did not finish within {} s", TRIAL_TIMEOUT.as_secs())]
    Timeout,
    #[error("waiting for bwrap: {0}")]
    Wait(std::io::Error),
    /// bwrap ran and failed: what it said on stderr (or its status).
    #[error("{0}")]
    Refused(String),
}

/// The real argument list for a script that does nothing, run in the
/// system temporary directory.
fn trial_args() -> Result<Vec<String>, TrialError> {
    let spec = SandboxSpec {
        cwd: std::env::temp_dir(),
        read_only: false,
        network: false,
        extra_ro: vec![],
        extra_rw: vec![],
        env: Default::default(),
        interpreter: "sh".into(),
        script: "exit 0".into(),
        argv: vec![],
    };
    Ok(bwrap_args(&spec, &SystemLayout::probe())?)
}

/// Run bwrap once; `Err` carries what it said on stderr.
fn trial(bwrap: &Path, args: &[String]) -> Result<(), TrialError> {
    let mut child = Command::new(bwrap)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(TrialError::Start)?;
    let status = match wait_within(&mut child, TRIAL_TIMEOUT) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TrialError::Timeout);
        }
        Err(e) => return Err(TrialError::Wait(e)),
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    if status.success() {
        Ok(())
    } else {
        let stderr = stderr.trim();
        Err(TrialError::Refused(if stderr.is_empty() {
            format!("(no message; {status})")
        } else {
            stderr.to_string()
        }))
    }
}

/// The child's exit status once it ends, `None` if it is still running
/// after `timeout`. Woken by the kernel when the child ends (a pidfd, Linux
/// ≥ 5.3), not by polling: a fixed sleep between polls added up to a whole
/// period to the first shell action. Without pidfds, polls every
/// [`FALLBACK_POLL`].
fn wait_within(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let started = Instant::now();
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(child),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(None);
        }
        match &pidfd {
            Some(pidfd) => {
                use rustix::event::{poll, PollFd, PollFlags};
                let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
                let wait = rustix::time::Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                match poll(&mut fds, Some(&wait)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            None => std::thread::sleep(FALLBACK_POLL.min(left)),
        }
    }
}

/// How often [`wait_within`] looks when the kernel has no pidfds.
const FALLBACK_POLL: Duration = Duration::from_millis(1);

/// The kernel knobs that decide whether unprivileged user namespaces work.
/// `None`: the knob does not exist on this kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sysctls {
    /// `kernel.unprivileged_userns_clone` (Debian/Ubuntu patch): 0 forbids.
    pub unprivileged_userns_clone: Option<i64>,
    /// `user.max_user_namespaces`: 0 forbids.
    pub max_user_namespaces: Option<i64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+): 1
    /// restricts.
    pub apparmor_restrict_unprivileged_userns: Option<i64>,
}

impl Sysctls {
    /// Read the knobs under a proc root (`/proc`, or a fixture in tests).
    pub fn read(proc_root: &Path) -> Sysctls {
        let read = |rel: &str| {
            std::fs::read_to_string(proc_root.join(rel))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        };
        Sysctls {
            unprivileged_userns_clone: read("sys/kernel/unprivileged_userns_clone"),
            max_user_namespaces: read("sys/user/max_user_namespaces"),
            apparmor_restrict_unprivileged_userns: read(
                "sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
        }
    }
}

/// Turn a failed trial's stderr into (reason, fix).
pub fn classify_failure(stderr: &str, sysctls: &Sysctls) -> (String, String) {
    const NAMESPACE_SIGNS: &[&str] = &[
        "Operation not permitted",
        "No permissions to create new namespace",
        "loopback: Failed RTM_NEWADDR",
        "setting up uid map",
        "Creating new namespace failed",
    ];
    let quoted = format!("bwrap said: {stderr}");
    if !NAMESPACE_SIGNS.iter().any(|s| stderr.contains(s)) {
        return (
            format!("bubblewrap failed its trial run; {quoted}"),
            "run `bwrap --unshare-all --die-with-parent --ro-bind / / true` yourself to see \
             the problem"
                .into(),
        );
    }
    let reason = format!("bubblewrap cannot create the namespaces it needs; {quoted}");
    let mut fixes = Vec::new();
    if sysctls.apparmor_restrict_unprivileged_userns == Some(1) {
        fixes.push(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1): install an AppArmor profile \
             for bwrap that allows `userns` (e.g. /etc/apparmor.d/bwrap with \
             `profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }`, then \
             `sudo apparmor_parser -r /etc/apparmor.d/bwrap`), or run \
             `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
                .to_string(),
        );
    }
    if sysctls.unprivileged_userns_clone == Some(0) {
        fixes.push(
            "unprivileged user namespaces are disabled \
             (kernel.unprivileged_userns_clone = 0): run \
             `sudo sysctl -w kernel.unprivileged_userns_clone=1`"
                .to_string(),
        );
    }
    if sysctls.max_user_namespaces == Some(0) {
        fixes.push(
            "user namespaces are disabled (user.max_user_namespaces = 0): run \
             `sudo sysctl -w user.max_user_namespaces=15000`"
                .to_string(),
        );
    }
    if fixes.is_empty() {
        fixes.push(
            "the kernel settings look permissive, so something else blocks user namespaces: \
             inside a container, allow them (e.g. Docker `--security-opt seccomp=unconfined \
             --security-opt apparmor=unconfined`), or make bwrap setuid root \
             (`sudo chmod u+s $(command -v bwrap)`)"
                .to_string(),
        );
    }
    (reason, fixes.join("; "))
}

/// Where `bwrap` is on `$PATH`, without running it (cheap: for the startup
/// report; the trial run waits for the first shell action).
pub fn locate_bwrap() -> Option<PathBuf> {
    find_on_path("bwrap")
}

/// The first executable file called `name` in `$PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// One resource limit, as this host enforces it: for `initialize`
/// (`_meta.passepartout.limits`) and `passepartout providers`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LimitDiagnostic {
    /// The limit's name, as `[sandbox_limits]` and `:LIMITS:` spell it.
    pub name: &'static str,
    /// Its value (`none` when not limited).
    pub value: String,
    /// Whether a run is held to it on this host.
    pub enforced: bool,
    /// By what, and what it costs or misses here.
    pub how: String,
}

/// What the limit diagnostics read from the host: how the process limit
/// is enforced (the pids cgroup found and tried, the mount options, or a
/// forked trial of a user namespace) and whether slirp4netns is on PATH.
/// Found once per process: neither changes while a daemon runs.
#[derive(Debug, Clone)]
struct HostLimits {
    process: super::enforce::ProcessLimit,
    network: bool,
}

fn host_limits() -> &'static HostLimits {
    static FOUND: OnceLock<HostLimits> = OnceLock::new();
    FOUND.get_or_init(|| {
        let started = Instant::now();
        let found = HostLimits {
            process: super::enforce::process_limit(),
            network: super::network::available(),
        };
        tracing::debug!(
            took_us = started.elapsed().as_micros(),
            "limit diagnostics: host limits found"
        );
        found
    })
}

/// Start finding what [`limit_diagnostics`] reads from the host on a
/// thread of its own, so that a daemon's `initialize` reply, which carries
/// the diagnostics, finds them ready instead of reading `/proc` and the
/// cgroup files (or forking a user-namespace trial) on its path. A call
/// to [`limit_diagnostics`] before the thread is done waits for it; when
/// the thread cannot start, the first call finds them itself.
///
/// Inside a tokio runtime the thread is one of its blocking pool: done
/// here, it stays idle in the pool, and the daemon's stdin reader (tokio
/// reads stdin on that pool) takes it instead of starting one more thread
/// before the first request can be read.
pub fn prepare_limit_diagnostics() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        drop(runtime.spawn_blocking(|| {
            host_limits();
        }));
        return;
    }
    let started = std::thread::Builder::new()
        .name("limit-probe".into())
        .spawn(|| {
            host_limits();
        });
    if let Err(e) = started {
        tracing::debug!("limit diagnostics not prepared ahead: {e}");
    }
}

/// Each limit of `limits` and how this host enforces it, including the
/// ones it cannot enforce (cheaply or at all), so nobody pays silently or
/// trusts a limit that is not there.
pub fn limit_diagnostics(limits: &ResourceLimits) -> Vec<LimitDiagnostic> {
    use super::enforce::{MemoryLimit, ProcessLimit};
    use super::limits::format_size;
    let size = |n: Option<u64>| n.map_or("none".to_string(), format_size);
    let count = |n: Option<u64>| n.map_or("none".to_string(), |n| n.to_string());
    let row = |name, value: String, enforced: bool, how: &str| LimitDiagnostic {
        name,
        enforced: enforced && value != "none",
        value,
        how: how.to_string(),
    };
    let host = host_limits();
    let processes = match host.process.clone() {
        ProcessLimit::UserNamespace => row(
            "processes",
            count(limits.processes),
            true,
            "RLIMIT_NPROC set inside a user namespace of each run's own (Linux >= 5.14 counts \
             it per namespace): counts only the run's processes, nothing joins a cgroup, \
             no cost per tool call; a run is stopped when its process tree reaches the limit",
        ),
        ProcessLimit::Cgroup {
            parent,
            v2,
            favordynmods,
        } => row(
            "processes",
            count(limits.processes),
            true,
            &format!(
                "a pids cgroup {} of each run's own under {}; {}",
                if v2 { "v2" } else { "v1" },
                parent.display(),
                if !v2 {
                    "the child joins it alone, as a thread, before exec (no wait)"
                } else if favordynmods {
                    "joined before exec without waiting (favordynmods)"
                } else {
                    "joining it before exec waits for an RCU grace period (milliseconds per \
                     tool call); mounting the hierarchy with `favordynmods` (Linux >= 6.0) \
                     removes the wait"
                }
            ),
        ),
        ProcessLimit::Nproc => row(
            "processes",
            count(limits.processes),
            true,
            "RLIMIT_NPROC above this user's running processes (no user namespace can be made, \
             no writable pids cgroup): free, but other programs of the user starting meanwhile \
             use up the margin",
        ),
        ProcessLimit::NotEnforced => row(
            "processes",
            count(limits.processes),
            false,
            "NOT enforced: running as root, where RLIMIT_NPROC does not apply, and no pids \
             cgroup is writable; run as a user, or delegate a pids cgroup",
        ),
    };
    let network = if host.network {
        row(
            "network",
            "when granted".into(),
            true,
            "own namespace; a granted run reaches out through slirp4netns without the \
             host's loopback; private ranges are blocked unless `network_reach` names them",
        )
    } else {
        row(
            "network",
            "when granted".into(),
            false,
            &format!(
                "granted runs are refused: {}",
                super::network::SLIRP_INSTALL_FIX
            ),
        )
    };
    vec![
        processes,
        match super::enforce::memory_limit() {
            MemoryLimit::Cgroup { parent, v2 } => row(
                "memory",
                size(limits.memory),
                true,
                &format!(
                    "for the whole command: a memory cgroup {} of each run's own under {} \
                     (all its processes together, no swap past it); a run the kernel must \
                     kill a process of is stopped",
                    if v2 { "v2" } else { "v1" },
                    parent.display()
                ),
            ),
            MemoryLimit::PerProcess => row(
                "memory",
                size(limits.memory),
                true,
                "per process only: RLIMIT_AS (address space reserved, not memory used); no \
                 memory cgroup can be made here, so a command's processes together may use a \
                 multiple of it",
            ),
        },
        row(
            "file_size",
            size(limits.file_size),
            true,
            "RLIMIT_FSIZE per file",
        ),
        row(
            "cpu",
            limits
                .cpu_secs
                .map_or("none".to_string(), |n| format!("{n} s")),
            true,
            "RLIMIT_CPU per process",
        ),
        row(
            "open_files",
            count(limits.open_files),
            true,
            "RLIMIT_NOFILE per process",
        ),
        row(
            "disk_write",
            size(limits.disk_write),
            true,
            &format!(
                "what the command wrote, sampled every 100 ms: the growth of the transaction's \
                 upper layer, the session /tmp and each writable path, its own HOME tmpfs, \
                 files it holds open after deleting them (a tree of more than {} entries: the \
                 drop of its file system's free space, which other programs' writes count in)",
                super::enforce::DISK_WALK_MAX_ENTRIES
            ),
        ),
        row(
            "tmp_size",
            size(limits.tmp_size),
            true,
            "size of the private /tmp tmpfs",
        ),
        row(
            "output",
            "per stream".into(),
            true,
            "the command is stopped at the first read past the cap",
        ),
        network,
    ]
}

/// The diagnostics as lines for a terminal.
pub fn render_limit_diagnostics(rows: &[LimitDiagnostic]) -> String {
    let mut out = String::from("sandbox limits on this host:\n");
    for r in rows {
        out.push_str(&format!(
            "  {} {:<11} {:<13} {}\n",
            if r.enforced { "+" } else { "-" },
            r.name,
            r.value,
            r.how
        ));
    }
    out
}

/// Files the sandbox sees in place of the host's, written once per daemon
/// into a private directory (see [`synthetic_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntheticFiles {
    /// `/etc/passwd` with root and the current user only: the host's list
    /// of accounts (names, homes, services installed) is none of a
    /// command's business, while `id`, `whoami`, `ls -l` and ssh still
    /// find the user they run as.
    pub passwd: PathBuf,
    /// `/etc/group` with root's group and the current user's.
    pub group: PathBuf,
    /// `/etc/resolv.conf` for a run granted network: slirp4netns's DNS
    /// forwarder (the host's own resolver may be on its loopback, which
    /// the sandbox cannot reach).
    /// `None` when the host has no `/etc/resolv.conf` to mount over.
    pub resolv_conf: Option<PathBuf>,
}

/// Prefix of the directory holding [`SyntheticFiles`], followed by the
/// daemon's pid: `tests/suite/boundary.rs` recognises a synthetic file by it.
pub const SYNTHETIC_DIR_PREFIX: &str = "passepartout-view-";

/// The synthetic files of this daemon, written on first use; `None` when
/// the temporary directory is not writable (then the host's files are
/// shown, and a warning is logged).
pub fn synthetic_files() -> Option<SyntheticFiles> {
    static FILES: OnceLock<Option<SyntheticFiles>> = OnceLock::new();
    FILES
        .get_or_init(|| match write_synthetic_files() {
            Ok(files) => Some(files),
            Err(e) => {
                tracing::warn!(
                    "the sandbox shows the host's /etc/passwd and /etc/group: cannot write \
                     synthetic ones: {e}"
                );
                None
            }
        })
        .clone()
}

fn write_synthetic_files() -> std::io::Result<SyntheticFiles> {
    let tmp = std::env::temp_dir();
    remove_stale_synthetic_dirs(&tmp);
    // A fresh directory of ours (0700, a random name): nobody else can put
    // a file or a link where the sandbox's `/etc/passwd` comes from.
    let dir = tempfile::Builder::new()
        .prefix(&format!("{SYNTHETIC_DIR_PREFIX}{}-", std::process::id()))
        .tempdir_in(&tmp)?
        .keep();
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let host_group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let (passwd, group) = identity(uid, gid, &host_passwd, &host_group);
    let files = SyntheticFiles {
        passwd: dir.join("passwd"),
        group: dir.join("group"),
        // Mounted over the host's, which must exist: `/etc` is read-only.
        resolv_conf: Path::new("/etc/resolv.conf")
            .is_file()
            .then(|| dir.join("resolv.conf")),
    };
    std::fs::write(&files.passwd, passwd)?;
    std::fs::write(&files.group, group)?;
    if let Some(resolv) = &files.resolv_conf {
        std::fs::write(
            resolv,
            format!("nameserver {}\n", super::network::SLIRP_DNS),
        )?;
    }
    Ok(files)
}

/// `/etc/passwd` and `/etc/group` for a sandbox run as `uid`:`gid`: root,
/// and the user and group with their host names (home: the sandbox's).
fn identity(uid: u32, gid: u32, host_passwd: &str, host_group: &str) -> (String, String) {
    let name_of = |table: &str, id: u32| {
        table.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let _ = f.next()?;
            (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
        })
    };
    let home = super::bwrap::SANDBOX_HOME;
    let mut passwd = String::from("root:x:0:0:root:/root:/bin/sh\n");
    if uid != 0 {
        let name = name_of(host_passwd, uid).unwrap_or_else(|| "user".into());
        passwd.push_str(&format!("{name}:x:{uid}:{gid}:{name}:{home}:/bin/sh\n"));
    }
    let mut group = String::from("root:x:0:\n");
    if gid != 0 {
        let name = name_of(host_group, gid).unwrap_or_else(|| "user".into());
        group.push_str(&format!("{name}:x:{gid}:\n"));
    }
    (passwd, group)
}

/// Remove the synthetic-file directories of daemons that are gone.
fn remove_stale_synthetic_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SYNTHETIC_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    /// This thread's voluntary context switches so far (each sleep or
    /// blocking wait that gave the CPU up).
    fn wake_ups() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn the_trial_waits_for_its_child_without_polling() {
        // A 300 ms child: polling every 5 ms would wake the waiting thread
        // some 60 times (and end up to a poll after the child); a wait the
        // kernel ends wakes it a handful of times (the spawn's own pipe
        // read, the end).
        let script = vec!["-c".to_string(), "sleep 0.3".to_string()];
        let before = wake_ups();
        let started = std::time::Instant::now();
        super::trial(std::path::Path::new("/bin/sh"), &script).unwrap();
        let took = started.elapsed();
        let woken = wake_ups() - before;
        assert!(took >= std::time::Duration::from_millis(300), "{took:?}");
        assert!(
            woken <= 10,
            "the waiting thread woke {woken} times in {took:?}"
        );
        // A failing child's words still come back.
        let script = vec!["-c".to_string(), "echo refused >&2; exit 3".to_string()];
        let err = super::trial(std::path::Path::new("/bin/sh"), &script).unwrap_err();
        assert_eq!(err.to_string(), "refused");
    }

    #[test]
    fn the_trial_that_outlives_its_time_is_killed() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5"])
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = super::wait_within(&mut child, std::time::Duration::from_millis(50)).unwrap();
        assert!(status.is_none());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn synthetic_identity_holds_root_and_the_user_only() {
        let host_passwd = "root:x:0:0:root:/root:/bin/bash\n\
                           daemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n\
                           ada:x:1000:1000:Ada L,,,:/home/ada:/bin/zsh\n\
                           bob:x:1001:1001::/home/bob:/bin/bash\n";
        let host_group = "root:x:0:\nsudo:x:27:ada\nada:x:1000:\nbob:x:1001:\n";
        let (passwd, group) = identity(1000, 1000, host_passwd, host_group);
        assert_eq!(
            passwd,
            "root:x:0:0:root:/root:/bin/sh\nada:x:1000:1000:ada:/tmp/home:/bin/sh\n"
        );
        assert_eq!(group, "root:x:0:\nada:x:1000:\n");
        let (passwd, group) = identity(0, 0, host_passwd, host_group);
        assert_eq!(passwd, "root:x:0:0:root:/root:/bin/sh\n");
        assert_eq!(group, "root:x:0:\n");
    }

    use super::*;

    #[test]
    fn every_limit_is_named_with_how_it_is_enforced() {
        let rows = limit_diagnostics(&ResourceLimits::default());
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "processes",
                "memory",
                "file_size",
                "cpu",
                "open_files",
                "disk_write",
                "tmp_size",
                "output",
                "network"
            ]
        );
        assert!(rows.iter().all(|r| !r.how.is_empty()));
        let memory = &rows[1];
        assert_eq!((memory.value.as_str(), memory.enforced), ("4 GiB", true));
        let none = limit_diagnostics(&ResourceLimits::none());
        assert!(!none[1].enforced, "{:?}", none[1]);
        let text = render_limit_diagnostics(&rows);
        assert!(text.contains("  + memory      4 GiB"), "{text}");
    }

    #[test]
    fn missing_binary_says_how_to_install() {
        let status = probe_with(Path::new("/nonexistent/bwrap"));
        match status {
            SandboxStatus::Unavailable { reason, fix } => {
                assert!(
                    reason.starts_with("cannot run `/nonexistent/bwrap`: "),
                    "{reason}"
                );
                assert_eq!(fix, INSTALL_FIX);
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn apparmor_restriction_names_the_sysctl_and_quotes_bwrap() {
        let sysctls = Sysctls {
            unprivileged_userns_clone: None,
            max_user_namespaces: Some(63000),
            apparmor_restrict_unprivileged_userns: Some(1),
        };
        let (reason, fix) = classify_failure(
            "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
            &sysctls,
        );
        assert_eq!(
            reason,
            "bubblewrap cannot create the namespaces it needs; bwrap said: bwrap: loopback: \
             Failed RTM_NEWADDR: Operation not permitted"
        );
        assert!(fix.contains("sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"));
        assert!(fix.contains("AppArmor profile for bwrap"));
        assert!(!fix.contains("max_user_namespaces"));
    }

    #[test]
    fn disabled_userns_names_each_knob() {
        let sysctls = Sysctls {
            unprivileged_userns_clone: Some(0),
            max_user_namespaces: Some(0),
            apparmor_restrict_unprivileged_userns: Some(0),
        };
        let (_, fix) = classify_failure(
            "bwrap: No permissions to create new namespace, likely because the kernel does not \
             allow non-privileged user namespaces.",
            &sysctls,
        );
        assert_eq!(
            fix,
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): \
             run `sudo sysctl -w kernel.unprivileged_userns_clone=1`; user namespaces are \
             disabled (user.max_user_namespaces = 0): run \
             `sudo sysctl -w user.max_user_namespaces=15000`"
        );
    }

    #[test]
    fn permissive_kernel_points_at_the_container() {
        let (_, fix) = classify_failure(
            "bwrap: Creating new namespace failed: Operation not permitted",
            &Sysctls::default(),
        );
        assert!(fix.contains("inside a container"), "{fix}");
    }

    #[test]
    fn unknown_failure_quotes_stderr() {
        let (reason, fix) = classify_failure(
            "bwrap: Can't find source path /usr: No such file",
            &Sysctls::default(),
        );
        assert_eq!(
            reason,
            "bubblewrap failed its trial run; bwrap said: bwrap: Can't find source path /usr: \
             No such file"
        );
        assert!(fix.starts_with("run `bwrap --unshare-all"));
    }

    #[test]
    fn sysctls_read_from_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/kernel")).unwrap();
        std::fs::create_dir_all(dir.path().join("sys/user")).unwrap();
        std::fs::write(
            dir.path()
                .join("sys/kernel/apparmor_restrict_unprivileged_userns"),
            "1\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("sys/user/max_user_namespaces"), "0\n").unwrap();
        assert_eq!(
            Sysctls::read(dir.path()),
            Sysctls {
                unprivileged_userns_clone: None,
                max_user_namespaces: Some(0),
                apparmor_restrict_unprivileged_userns: Some(1),
            }
        );
    }
}
