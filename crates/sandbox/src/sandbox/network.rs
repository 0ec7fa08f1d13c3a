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
//! The same attachment gives a run, granted network or not, listeners on
//! its own 127.0.0.1 for the person's local services and the registries
//! proxy ([`super::local_ports`], [`super::registry_proxy`]): what a run
//! is given is a [`Plan`], carried in its bwrap arguments.
//!
//! The wiring, per run:
//! 1. [`Plan::bwrap_flags`] asks bwrap to report the sandbox's pid on one pipe
//!    (`--info-fd`) and to wait, namespaces made but before the command is
//!    executed, until a byte arrives on another (`--block-fd`). The argument
//!    builder writes placeholders; [`Attachment::prepare`] makes the two
//!    pipes and puts their numbers in.
//! 2. After the spawn, [`Attachment::attach`] reads the pid, waits for
//!    bwrap to set up the namespace's loopback, starts slirp4netns on it, waits for it to report the interface
//!    configured (`--ready-fd`), makes the listeners of the plan, and only
//!    then unblocks bwrap. Each wait is bounded by [`ATTACH_TIMEOUT`].
//! 3. [`Attached`] lives as long as the run; dropping it closes slirp's
//!    `--exit-fd` and kills it, and closes the listeners.
//!
//! When slirp4netns is missing, a run granted network fails closed with the
//! reason and [`SLIRP_INSTALL_FIX`]; it never falls back to the host's
//! network. slirp4netns is not started with `--enable-sandbox`: that puts
//! it in a pid namespace of its own, where its netlink socket can take the
//! port id bwrap's loopback set-up expects (`getpid()` = 1 there), and
//! bwrap then fails with `loopback: Failed RTM_NEWADDR` (seen 1 run in 15).
//!
//! Private ranges and the host's own addresses are out of reach too: once
//! slirp4netns has configured the interface and before bwrap is unblocked,
//! [`routes::install`] adds `unreachable` routes to the sandbox's routing
//! table for the private, link-local and shared ranges ([`BLOCKED_RANGES`]:
//! the LAN, the cloud metadata service at 169.254.169.254, a carrier's
//! NAT) and for every address of the host's own interfaces (a service bound
//! to the host's 192.168.1.5 or public address, which slirp would otherwise
//! reach as the host itself). slirp's own network (10.0.2.0/24: its
//! gateway and DNS forwarder) keeps its more specific route. The kernel
//! answers a connection to a blocked address with "No route to host"
//! whatever name led to it, so no text gate has to see the address. A route
//! that cannot be installed refuses the run with the reason (fail closed).
//! The person lifts a range with the `network_reach` setting of the
//! daemon's configuration (`network_reach = ["10.1.2.0/24"]`): each range
//! named there gets a route through slirp's gateway, more specific than the
//! block, and nothing else changes. IPv6 has no way out at all (slirp4netns
//! runs without `--enable-ipv6`); its private and link-local ranges are
//! blocked anyway, so enabling it later cannot open them.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::local_ports::Service;

/// Placeholder for the fd bwrap reports the sandbox's pid on.
pub const INFO_FD_ARG: &str = "{passepartout:net-info-fd}";
/// How the placeholder for the fd bwrap waits on before running the
/// command begins; the rest says what the run is given ([`Plan`]).
pub const BLOCK_FD_PREFIX: &str = "{passepartout:net-block-fd";

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

/// Why a run's network could not be given to it (the run is refused).
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("{}", missing_reason())]
    SlirpMissing,
    #[error("cannot make a pipe for {what}: {source}")]
    Pipe {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("reading {what}: {source}")]
    Step {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("{what} took more than {} s (limit ATTACH_TIMEOUT)", ATTACH_TIMEOUT.as_secs())]
    Timeout { what: &'static str },
    #[error("cannot start {}: {source}", program.display())]
    Start {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("slirp4netns could not give the sandbox its network ({why}): {said}")]
    Slirp { why: String, said: String },
    #[error(
        "the sandbox's network could not be kept from private ranges and the host's own \
         addresses, so the run was refused: {0}"
    )]
    Routes(String),
    #[error("the person's local services or the registries proxy: {0}")]
    Local(#[from] super::local_ports::LocalError),
    #[error("the sandbox ended before its network was ready: {0}")]
    Unblock(std::io::Error),
}

/// What a run is given besides its own loopback: slirp4netns's way out
/// (a network grant), listeners for the person's local services, the
/// registries proxy. Carried in the bwrap arguments (the block-fd
/// placeholder) so the runner needs nothing else to attach it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The whole network, through slirp4netns.
    pub slirp: bool,
    /// Ports of the host's 127.0.0.1 brought in.
    pub ports: Vec<u16>,
    /// The registries proxy on [`super::registry_proxy::PROXY_PORT`].
    pub proxy: bool,
}

impl Plan {
    /// Whether the run needs attaching at all.
    pub fn is_empty(&self) -> bool {
        !self.slirp && self.ports.is_empty() && !self.proxy
    }

    /// The bwrap options: bwrap reports the sandbox's pid and waits until
    /// it is attached.
    pub fn bwrap_flags(&self) -> [String; 4] {
        [
            "--info-fd".into(),
            INFO_FD_ARG.into(),
            "--block-fd".into(),
            self.placeholder(),
        ]
    }

    /// The block-fd placeholder: `{passepartout:net-block-fd slirp
    /// ports=5432,8000 proxy}`.
    pub fn placeholder(&self) -> String {
        let mut s = BLOCK_FD_PREFIX.to_string();
        if self.slirp {
            s.push_str(" slirp");
        }
        if !self.ports.is_empty() {
            let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
            s.push_str(&format!(" ports={}", ports.join(",")));
        }
        if self.proxy {
            s.push_str(" proxy");
        }
        s.push('}');
        s
    }

    /// The plan a placeholder holds; `None` if `arg` is none.
    pub fn parse(arg: &str) -> Option<Plan> {
        let body = arg.strip_prefix(BLOCK_FD_PREFIX)?.strip_suffix('}')?;
        let mut plan = Plan::default();
        for word in body.split_whitespace() {
            match word {
                "slirp" => plan.slirp = true,
                "proxy" => plan.proxy = true,
                w => {
                    let ports = w.strip_prefix("ports=")?;
                    plan.ports = ports
                        .split(',')
                        .map(|p| p.parse().ok())
                        .collect::<Option<_>>()?;
                }
            }
        }
        Some(plan)
    }

    /// The listeners to make inside.
    fn services(&self) -> Vec<Service> {
        let mut out: Vec<Service> = self.ports.iter().copied().map(Service::Forward).collect();
        if self.proxy {
            out.push(Service::Proxy);
        }
        out
    }
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

/// The pipes of a run to attach, and what it is given.
#[derive(Debug)]
struct Pipes {
    plan: Plan,
    /// Where slirp4netns is, when the plan has it.
    slirp: Option<PathBuf>,
    info_read: std::io::PipeReader,
    /// The child's ends: inherited by bwrap, closed here after the spawn.
    info_write: OwnedFd,
    block_read: OwnedFd,
    block_write: std::io::PipeWriter,
}

impl<'a> Attachment<'a> {
    /// When `args` hold the placeholders of [`Plan::bwrap_flags`]: the
    /// pipes, and the arguments with the placeholders replaced by their fd
    /// numbers. Otherwise (nothing to attach, or not bwrap) the arguments
    /// as they are, at no cost.
    pub fn prepare(args: &'a [String]) -> Result<Attachment<'a>, NetworkError> {
        let Some(plan) = args.iter().find_map(|a| Plan::parse(a)) else {
            return Ok(Attachment {
                args: std::borrow::Cow::Borrowed(args),
                pipes: None,
            });
        };
        let slirp = match plan.slirp {
            true => Some(slirp4netns().ok_or(NetworkError::SlirpMissing)?),
            false => None,
        };
        let pipe_error = |source| NetworkError::Pipe {
            what: "the network",
            source,
        };
        let (info_read, info_write) = std::io::pipe().map_err(pipe_error)?;
        let (block_read, block_write) = std::io::pipe().map_err(pipe_error)?;
        let info_write = OwnedFd::from(info_write);
        let block_read = OwnedFd::from(block_read);
        let args = args
            .iter()
            .map(|a| {
                if a == INFO_FD_ARG {
                    info_write.as_raw_fd().to_string()
                } else if a.starts_with(BLOCK_FD_PREFIX) {
                    block_read.as_raw_fd().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        Ok(Attachment {
            args: std::borrow::Cow::Owned(args),
            pipes: Some(Pipes {
                plan,
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
    /// no other program started meanwhile holds them): the child clears
    /// close-on-exec on them.
    pub fn install(&self, cmd: &mut super::spawn::Command) {
        let Some(p) = &self.pipes else {
            return;
        };
        for fd in [p.info_write.as_raw_fd(), p.block_read.as_raw_fd()] {
            cmd.step(super::spawn::Step::Inherit(fd));
        }
    }

    /// After the spawn: give the sandbox its network, then let it run.
    /// `None` when nothing was asked for.
    pub async fn attach(self) -> Result<Option<Attached>, NetworkError> {
        match self.pipes {
            Some(pipes) => pipes.attach().await.map(Some),
            None => Ok(None),
        }
    }
}

impl Pipes {
    /// After the spawn: give the sandbox its network, then let it run.
    async fn attach(self) -> Result<Attached, NetworkError> {
        let Pipes {
            plan,
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
        let slirp = match slirp {
            Some(program) => Some(start_slirp(program, pid).await?),
            None => None,
        };
        // The listeners go in before the command runs, or the run is
        // refused: a command that finds its database refused would be
        // misleading.
        let stop = tokio_util::sync::CancellationToken::new();
        let services = plan.services();
        if !services.is_empty() {
            let wanted = services.clone();
            let made = tokio::time::timeout(
                ATTACH_TIMEOUT,
                tokio::task::spawn_blocking(move || super::local_ports::listen_in(pid, &wanted)),
            )
            .await;
            let listeners = match made {
                Ok(Ok(made)) => made?,
                Ok(Err(e)) => {
                    return Err(NetworkError::Step {
                        what: "the sandbox's listeners",
                        source: std::io::Error::other(e),
                    })
                }
                Err(_) => {
                    return Err(NetworkError::Timeout {
                        what: "making the sandbox's listeners",
                    })
                }
            };
            super::local_ports::serve(listeners, &services, &stop)?;
        }
        // Unblock bwrap: the command runs from here on, with its network.
        use std::io::Write;
        block_write.write_all(b"1").map_err(NetworkError::Unblock)?;
        Ok(Attached {
            slirp,
            stop: Some(stop),
        })
    }
}

/// Start slirp4netns on the sandbox of `pid`, wait until it has configured
/// the interface, and install the routes.
async fn start_slirp(slirp: PathBuf, pid: u32) -> Result<Slirp, NetworkError> {
    let pipe_error = |source| NetworkError::Pipe {
        what: "slirp4netns",
        source,
    };
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
    // SAFETY: runs in the forked child before exec; fcntl is
    // async-signal-safe and the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || inherit(&fds));
    }
    let mut child = cmd.spawn().map_err(|source| NetworkError::Start {
        program: slirp.clone(),
        source,
    })?;
    drop(ready_write);
    drop(exit_read);
    let ready = blocking_bounded("slirp4netns configuring the sandbox's network", move || {
        let mut byte = [0u8; 1];
        ready_read
            .read(&mut byte)
            .map(|n| n == 1 && byte[0] == b'1')
    })
    .await;
    if !matches!(ready, Ok(true)) {
        let _ = child.start_kill();
        let mut said = Vec::new();
        if let Some(mut stderr) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let mut limited = (&mut stderr).take(STDERR_LIMIT as u64);
            let _ = tokio::time::timeout(ATTACH_TIMEOUT, limited.read_to_end(&mut said)).await;
        }
        let why = match ready {
            Err(e) => e.to_string(),
            Ok(_) => "it exited".into(),
        };
        return Err(NetworkError::Slirp {
            why,
            said: String::from_utf8_lossy(&said).trim().to_string(),
        });
    }
    // The routes go in before the command runs, or the run is refused.
    let routes = routes::plan(&reach(), &routes::host_addresses());
    if let Err(why) = blocking_bounded("installing the sandbox's routes", move || {
        routes::install(pid, &routes).map_err(std::io::Error::other)
    })
    .await
    {
        let _ = child.start_kill();
        return Err(NetworkError::Routes(why.to_string()));
    }
    let stderr = child.stderr.take();
    Ok(Slirp {
        _child: child,
        _exit: exit_write,
        _stderr: stderr,
    })
}

/// The ranges a run granted network cannot reach unless the person's
/// `network_reach` names them: private (RFC 1918, unique local), link-local
/// (169.254/16 holds the cloud metadata service), and shared address space
/// (RFC 6598, a carrier's or a VPN's NAT).
pub const BLOCKED_RANGES: [&str; 7] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
    "fe80::/10",
];

/// slirp4netns's virtual network: its gateway (10.0.2.2, the host's
/// loopback, refused by `--disable-host-loopback`), DNS forwarder
/// (10.0.2.3) and the sandbox's own address. Its connected route is more
/// specific than the 10/8 block, so it keeps working.
pub const SLIRP_NETWORK: &str = "10.0.2.0/24";

/// slirp4netns's gateway, the next hop of a lifted range.
pub const SLIRP_GATEWAY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 2, 2);

/// The most entries `network_reach` may hold (each is one route per run).
pub const REACH_LIMIT: usize = 64;

static REACH: std::sync::OnceLock<Vec<ipnet::IpNet>> = std::sync::OnceLock::new();

/// Set, once at startup, the ranges the person's `network_reach` lifts.
/// Each entry is a range (`10.1.2.0/24`) or an address (`192.168.1.5`).
/// Returns why an entry was refused; a refused entry lifts nothing.
pub fn set_reach(entries: &[String]) -> Result<(), ReachError> {
    let (nets, errors) = parse_reach(entries);
    let _ = REACH.set(nets);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ReachError(errors))
    }
}

/// The entries of `network_reach` that were refused, each with why.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct ReachError(pub Vec<String>);

/// Parse `network_reach`: ranges and addresses; at most [`REACH_LIMIT`].
pub fn parse_reach(entries: &[String]) -> (Vec<ipnet::IpNet>, Vec<String>) {
    let mut nets = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        if nets.len() == REACH_LIMIT {
            errors.push(format!(
                "network_reach holds more than {REACH_LIMIT} entries (limit REACH_LIMIT); \
                 `{entry}` and the rest lift nothing"
            ));
            break;
        }
        let entry = entry.trim();
        match entry
            .parse::<ipnet::IpNet>()
            .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        {
            Ok(net) => nets.push(net.trunc()),
            Err(_) => errors.push(format!(
                "network_reach: `{entry}` is not an address or range like 10.1.2.0/24"
            )),
        }
    }
    (nets, errors)
}

/// The ranges the person lifted (none unless [`set_reach`] was called).
fn reach() -> Vec<ipnet::IpNet> {
    REACH.get().cloned().unwrap_or_default()
}

/// The routes of a sandbox's network namespace, and how they go in.
pub mod routes {
    use ipnet::IpNet;
    use std::net::IpAddr;

    /// One route to add.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Route {
        /// Connections to the range fail with "No route to host".
        Unreachable(IpNet),
        /// The range goes out through slirp (a lifted part of a block).
        ViaSlirp(IpNet),
    }

    /// The routes for a run: [`super::BLOCKED_RANGES`] and each host
    /// address (as a /32 or /128) unreachable, except what `reach` covers;
    /// each `reach` range inside a remaining block through slirp.
    pub fn plan(reach: &[IpNet], host: &[IpAddr]) -> Vec<Route> {
        let slirp: IpNet = super::SLIRP_NETWORK
            .parse()
            .unwrap_or_else(|_| IpNet::from(IpAddr::from(super::SLIRP_GATEWAY)));
        let mut blocked: Vec<IpNet> = super::BLOCKED_RANGES
            .iter()
            .filter_map(|r| r.parse().ok())
            .collect();
        for addr in host {
            if addr.is_loopback() || addr.is_unspecified() || slirp.contains(addr) {
                // The sandbox's loopback is its own; slirp's network is
                // slirp's, never routed to the host.
                continue;
            }
            // One inside a blocked range is unreachable already.
            if !blocked.iter().any(|b| b.contains(addr)) {
                blocked.push(IpNet::from(*addr));
            }
        }
        blocked.retain(|b| !reach.iter().any(|r| r.contains(b)));
        let mut routes: Vec<Route> = blocked.iter().copied().map(Route::Unreachable).collect();
        for r in reach {
            // slirp's own network is slirp's (its gateway stays refused):
            // a route there would only clash with its interface's.
            if slirp.contains(r) {
                continue;
            }
            if matches!(r, IpNet::V4(_)) && blocked.iter().any(|b| b.contains(r)) {
                routes.push(Route::ViaSlirp(*r));
            }
        }
        routes
    }

    /// Every address of the host's interfaces (the daemon's namespace).
    pub fn host_addresses() -> Vec<IpAddr> {
        let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
            return Vec::new();
        };
        let mut out: Vec<IpAddr> = interfaces
            .filter_map(|i| i.address)
            .filter_map(|a| {
                a.as_sockaddr_in()
                    .map(|v4| IpAddr::V4(v4.ip()))
                    .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The most routes one run gets (the blocked ranges, the host's own
    /// addresses outside them, the lifted ranges); past it the run is
    /// refused rather than left with some of the host unblocked.
    pub const ROUTE_LIMIT: usize = 4096;

    /// `route` as a line of `ip -batch`.
    pub fn batch_line(route: &Route) -> String {
        match route {
            Route::Unreachable(net) => format!("route add unreachable {net}"),
            Route::ViaSlirp(net) => format!("route add {net} via {}", super::SLIRP_GATEWAY),
        }
    }

    /// Add `routes` to the network namespace of process `pid` (the
    /// sandbox, still blocked before its command): `ip -batch -`, run in
    /// the sandbox's user and network namespaces (entered before exec, as
    /// slirp4netns enters them), with one line per route. IPv6 routes go in
    /// a batch of their own whose "address family not supported" (a kernel
    /// without IPv6: nothing to block) is no failure. Blocking; the caller
    /// bounds it.
    pub fn install(pid: u32, routes: &[Route]) -> Result<(), RouteError> {
        use std::os::fd::AsRawFd;
        if routes.len() > ROUTE_LIMIT {
            return Err(RouteError::TooMany(routes.len()));
        }
        let open = |ns: &'static str| {
            std::fs::File::open(format!("/proc/{pid}/ns/{ns}"))
                .map_err(|source| RouteError::Namespace { ns, source })
        };
        let userns = open("user")?;
        let netns = open("net")?;
        let same_user_ns = {
            use std::os::unix::fs::MetadataExt;
            let ours = std::fs::metadata("/proc/self/ns/user").map(|m| (m.dev(), m.ino()));
            let theirs = userns.metadata().map(|m| (m.dev(), m.ino()));
            matches!((ours, theirs), (Ok(a), Ok(b)) if a == b)
        };
        let mut steps = Vec::new();
        if !same_user_ns {
            steps.push(super::super::spawn::Step::EnterNamespace {
                fd: userns.as_raw_fd(),
                kind: libc::CLONE_NEWUSER,
            });
        }
        steps.push(super::super::spawn::Step::EnterNamespace {
            fd: netns.as_raw_fd(),
            kind: libc::CLONE_NEWNET,
        });
        let (v6, v4): (Vec<&Route>, Vec<&Route>) = routes.iter().partition(|r| {
            matches!(
                r,
                Route::Unreachable(IpNet::V6(_)) | Route::ViaSlirp(IpNet::V6(_))
            )
        });
        run_batch(&steps, &v4, false)?;
        run_batch(&steps, &v6, true)
    }

    /// One `ip -batch -` of `routes` in the namespaces `steps` enter.
    fn run_batch(
        steps: &[super::super::spawn::Step],
        routes: &[&Route],
        v6: bool,
    ) -> Result<(), RouteError> {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        if routes.is_empty() {
            return Ok(());
        }
        let mut cmd = std::process::Command::new("ip");
        if v6 {
            // Every line is tried, so each failure is seen and judged.
            cmd.arg("-force");
        }
        cmd.args(["-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // SAFETY: the steps are async-signal-safe system calls on fds that
        // `install` keeps open until the child has exited.
        unsafe {
            cmd.pre_exec(super::super::spawn::as_pre_exec(steps.to_vec()));
        }
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RouteError::IpMissing,
            _ => RouteError::IpStart(e),
        })?;
        let batch: String = routes.iter().map(|r| batch_line(r) + "\n").collect();
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(batch.as_bytes());
        }
        let output = child.wait_with_output().map_err(RouteError::IpStart)?;
        let said = String::from_utf8_lossy(&output.stderr);
        let refused: Vec<&str> = said
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("Command failed"))
            .filter(|l| !(v6 && l.contains("Address family not supported")))
            .collect();
        if (output.status.success() || v6) && refused.is_empty() {
            return Ok(());
        }
        Err(RouteError::Refused {
            status: output.status.to_string(),
            said: if refused.is_empty() {
                said.trim().to_string()
            } else {
                refused.join("; ")
            },
        })
    }

    /// Why the routes could not be installed (the run is refused).
    #[derive(Debug, thiserror::Error)]
    pub enum RouteError {
        #[error(
            "{0} routes to install (the host has many addresses), more than {ROUTE_LIMIT} \
             (limit ROUTE_LIMIT)"
        )]
        TooMany(usize),
        #[error("cannot open the sandbox's {ns} namespace: {source}")]
        Namespace {
            ns: &'static str,
            source: std::io::Error,
        },
        #[error("`ip` (iproute2) is not installed; it sets the sandbox's routes")]
        IpMissing,
        #[error("running `ip` to set the routes: {0}")]
        IpStart(std::io::Error),
        #[error("the kernel refused a route ({status}): {said}")]
        Refused { status: String, said: String },
    }
}

/// How long slirp4netns outlives the run: what the run wrote just before
/// it ended (`echo data > /dev/tcp/host/port; exit`) is still on its way
/// through slirp, and would be lost if it were killed at once.
pub const LINGER: Duration = Duration::from_secs(1);

/// What a run was given (slirp4netns, the listeners and their relays),
/// alive for the run and [`LINGER`] after it.
#[derive(Debug)]
pub struct Attached {
    slirp: Option<Slirp>,
    /// Cancelled: the listeners close and their relays end.
    stop: Option<tokio_util::sync::CancellationToken>,
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
        let slirp = self.slirp.take();
        let stop = self.stop.take();
        if slirp.is_none() && stop.is_none() {
            return;
        }
        // Off the caller's path: the run's result does not wait.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                drop(slirp);
                if let Some(stop) = stop {
                    stop.cancel();
                }
            });
        } else if let Some(stop) = stop {
            stop.cancel();
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
    what: &'static str,
    read: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, NetworkError> {
    match tokio::time::timeout(ATTACH_TIMEOUT, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(Ok(v))) => Ok(v),
        Ok(Ok(Err(source))) => Err(NetworkError::Step { what, source }),
        Ok(Err(e)) => Err(NetworkError::Step {
            what,
            source: std::io::Error::other(e),
        }),
        Err(_) => Err(NetworkError::Timeout { what }),
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
    fn private_ranges_and_host_addresses_are_blocked_unless_reached() {
        use routes::Route;
        let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
        let host: Vec<std::net::IpAddr> = [
            "127.0.0.1",
            "203.0.113.1",
            "10.0.2.15",
            "::1",
            "192.168.1.5",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        let plan = routes::plan(&[], &host);
        for range in BLOCKED_RANGES {
            assert!(plan.contains(&Route::Unreachable(net(range))), "{range}");
        }
        assert!(plan.contains(&Route::Unreachable(net("203.0.113.1/32"))));
        // Loopback is the sandbox's own; slirp's network is slirp's.
        assert_eq!(plan.len(), BLOCKED_RANGES.len() + 1, "{plan:?}");

        let (reach, errors) = parse_reach(&[
            "10.1.2.0/24".into(),
            "192.168.0.0/16".into(),
            "203.0.113.1".into(),
            "nonsense".into(),
        ]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let plan = routes::plan(&reach, &host);
        assert!(plan.contains(&Route::ViaSlirp(net("10.1.2.0/24"))));
        assert!(plan.contains(&Route::Unreachable(net("10.0.0.0/8"))));
        assert!(!plan.contains(&Route::Unreachable(net("192.168.0.0/16"))));
        assert!(!plan.contains(&Route::ViaSlirp(net("192.168.0.0/16"))));
        assert!(!plan.contains(&Route::Unreachable(net("203.0.113.1/32"))));
        let (reach, _) = parse_reach(&["10.0.2.2".into()]);
        assert_eq!(routes::plan(&reach, &host), routes::plan(&[], &host));
    }

    #[test]
    fn a_route_is_one_line_of_ip_batch() {
        let via = routes::Route::ViaSlirp("10.1.2.0/24".parse().unwrap());
        assert_eq!(
            routes::batch_line(&via),
            "route add 10.1.2.0/24 via 10.0.2.2"
        );
        let v6 = routes::Route::Unreachable("fc00::/7".parse().unwrap());
        assert_eq!(routes::batch_line(&v6), "route add unreachable fc00::/7");
    }

    #[test]
    fn too_many_reach_entries_are_refused_by_name() {
        let many: Vec<String> = (0..REACH_LIMIT + 3)
            .map(|i| format!("10.9.{i}.0/24"))
            .collect();
        let (nets, errors) = parse_reach(&many);
        assert_eq!(nets.len(), REACH_LIMIT);
        assert!(errors[0].contains("REACH_LIMIT"), "{errors:?}");
    }

    #[test]
    fn a_plan_travels_in_its_placeholder() {
        for plan in [
            Plan {
                slirp: true,
                ..Plan::default()
            },
            Plan {
                slirp: false,
                ports: vec![5432, 8000],
                proxy: true,
            },
            Plan {
                slirp: true,
                ports: vec![80],
                proxy: false,
            },
        ] {
            let flags = plan.bwrap_flags();
            assert_eq!(flags[1], INFO_FD_ARG);
            assert_eq!(Plan::parse(&flags[3]), Some(plan.clone()), "{flags:?}");
        }
        assert!(Plan::default().is_empty());
        assert_eq!(Plan::parse("{passepartout:net-block-fd ports=x}"), None);
        assert_eq!(Plan::parse("--unshare-all"), None);
    }

    #[test]
    fn the_missing_tool_is_named_with_the_fix() {
        let why = missing_reason();
        assert!(why.contains("slirp4netns"));
        assert!(why.contains("apt-get install slirp4netns"));
    }
}
