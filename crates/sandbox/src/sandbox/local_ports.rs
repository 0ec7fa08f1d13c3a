//! The person's local services by opt-in: `[sandbox] localhost_ports`.
//!
//! The sandbox's 127.0.0.1 is its own (see [`super::network`]): a database
//! or dev server listening on the host's loopback is out of reach. The
//! ports the person lists are brought in, and nothing else of the host's
//! loopback is:
//!
//! 1. Before bwrap is unblocked (`--block-fd`), a fresh process of our own
//!    binary ([`HELPER_ARG`], see [`helper_main`]) joins the sandbox's user
//!    and network namespaces, binds a listening socket on 127.0.0.1:PORT
//!    there for each port, and sends the sockets back over a Unix socket
//!    (`SCM_RIGHTS`). A fresh process, because joining a user namespace
//!    needs a single-threaded one and the daemon is not; our own binary,
//!    because that needs no `unsafe` and no other program.
//! 2. A socket stays in the namespace it was made in: the daemon accepts
//!    on them and relays each connection to the host's 127.0.0.1:PORT,
//!    at most [`CONNECTION_LIMIT`] at a time per run (further ones wait in
//!    the listen queue until one ends).
//! 3. When the run ends, the listeners and relays go with it.
//!
//! A port not listed has no listener inside: a connection to it is refused
//! as on a machine where nothing listens there. The registries proxy
//! ([`super::registry_proxy`]) is reached inside the same way, on
//! [`super::registry_proxy::PROXY_PORT`].

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The hidden first argument that makes our binary the listener helper.
pub const HELPER_ARG: &str = "__sandbox-listen";

/// The most ports `localhost_ports` may hold.
pub const PORTS_LIMIT: usize = 32;

/// The most connections one run has open to the person's local services
/// at a time; more wait in the listen queue until one ends.
pub const CONNECTION_LIMIT: usize = 64;

/// How long a relay to a local service may wait for the host to accept.
pub const HOST_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of the helper's stderr quoted when it fails.
const STDERR_LIMIT: usize = 2048;

/// Why the person's ports could not be brought into the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("localhost_ports holds more than {PORTS_LIMIT} ports (limit PORTS_LIMIT)")]
    TooMany,
    #[error("localhost_ports: 0 is not a port")]
    Zero,
    #[error(
        "localhost_ports: {0} is the port the registries proxy listens on inside the \
         sandbox; it cannot be one of the person's services too"
    )]
    ProxyPort(u16),
    #[error("cannot make the socket that brings the sandbox's listeners back: {0}")]
    Socket(std::io::Error),
    #[error("cannot start the listener helper (this program, as `{HELPER_ARG}`): {0}")]
    Start(std::io::Error),
    #[error("receiving the sandbox's listeners: {0}")]
    Receive(std::io::Error),
    #[error("the listener helper could not listen on the sandbox's 127.0.0.1 ({status}): {said}")]
    Helper { status: String, said: String },
    #[error("the listener helper sent {got} listeners for {want} ports")]
    Count { got: usize, want: usize },
    #[error("cannot serve the sandbox's listeners: {0}")]
    Serve(std::io::Error),
}

/// The person's ports, checked: at most [`PORTS_LIMIT`], none 0, none the
/// registries proxy's.
pub fn check_ports(ports: &[u16]) -> Result<(), LocalError> {
    if ports.len() > PORTS_LIMIT {
        return Err(LocalError::TooMany);
    }
    if ports.contains(&0) {
        return Err(LocalError::Zero);
    }
    if ports.contains(&super::registry_proxy::PROXY_PORT) {
        return Err(LocalError::ProxyPort(super::registry_proxy::PROXY_PORT));
    }
    Ok(())
}

static PORTS: OnceLock<Vec<u16>> = OnceLock::new();

/// Set, once at startup, the ports of `[sandbox] localhost_ports`.
pub fn set_ports(ports: &[u16]) -> Result<(), LocalError> {
    check_ports(ports)?;
    let mut ports = ports.to_vec();
    ports.sort_unstable();
    ports.dedup();
    let _ = PORTS.set(ports);
    Ok(())
}

/// The ports of the host's loopback every sandboxed run reaches (none
/// unless [`set_ports`] was called).
pub fn ports() -> &'static [u16] {
    PORTS.get().map(Vec::as_slice).unwrap_or(&[])
}

/// What a listener made inside the sandbox leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// The host's 127.0.0.1 at this port.
    Forward(u16),
    /// The registries proxy ([`super::registry_proxy`]).
    Proxy,
}

impl Service {
    /// The port it listens on inside the sandbox.
    pub fn port(self) -> u16 {
        match self {
            Service::Forward(p) => p,
            Service::Proxy => super::registry_proxy::PROXY_PORT,
        }
    }
}

/// In the daemon, blocking: listening sockets on 127.0.0.1 of the network
/// namespace of process `pid` (the sandbox, blocked before its command),
/// one per service, made by the listener helper. The caller bounds it.
pub fn listen_in(pid: u32, services: &[Service]) -> Result<Vec<std::net::TcpListener>, LocalError> {
    use std::io::Read;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(LocalError::Socket)?;
    ours.set_read_timeout(Some(super::network::ATTACH_TIMEOUT))
        .map_err(LocalError::Socket)?;
    let mut child = {
        // The command (and with it the helper's end of the socket) is
        // dropped at once: a helper that fails gives EOF, not a wait.
        let mut cmd = std::process::Command::new("/proc/self/exe");
        cmd.arg(HELPER_ARG)
            .arg(pid.to_string())
            .args(services.iter().map(|s| s.port().to_string()))
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().map_err(LocalError::Start)?
    };
    let mut byte = [0u8; 1];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(services.len()))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        &ours,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        rustix::net::RecvFlags::CMSG_CLOEXEC,
    );
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let mut said = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        let _ = stderr.take(STDERR_LIMIT as u64).read_to_end(&mut said);
    }
    let status = child.wait().map_err(LocalError::Receive)?;
    let received = received.map_err(|e| LocalError::Receive(e.into()))?;
    if !status.success() || received.bytes != 1 {
        return Err(LocalError::Helper {
            status: status.to_string(),
            said: String::from_utf8_lossy(&said).trim().to_string(),
        });
    }
    if fds.len() != services.len() {
        return Err(LocalError::Count {
            got: fds.len(),
            want: services.len(),
        });
    }
    Ok(fds.into_iter().map(std::net::TcpListener::from).collect())
}

/// In the daemon: accept on `listeners` (made by [`listen_in`] for
/// `services`, in the same order) until `stop` is cancelled.
pub fn serve(
    listeners: Vec<std::net::TcpListener>,
    services: &[Service],
    stop: &CancellationToken,
) -> Result<(), LocalError> {
    let forwards = Arc::new(tokio::sync::Semaphore::new(CONNECTION_LIMIT));
    let proxied = Arc::new(tokio::sync::Semaphore::new(
        super::registry_proxy::CONNECTION_LIMIT,
    ));
    for (listener, &service) in listeners.into_iter().zip(services) {
        listener.set_nonblocking(true).map_err(LocalError::Serve)?;
        let listener = TcpListener::from_std(listener).map_err(LocalError::Serve)?;
        let limit = match service {
            Service::Forward(_) => forwards.clone(),
            Service::Proxy => proxied.clone(),
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = accept_loop(listener, service, limit, stop.clone()) => {}
                () = stop.cancelled() => {}
            }
        });
    }
    Ok(())
}

/// Accept while a permit is free; each connection is served until it
/// ends or `stop` is cancelled.
async fn accept_loop(
    listener: TcpListener,
    service: Service,
    limit: Arc<tokio::sync::Semaphore>,
    stop: CancellationToken,
) {
    loop {
        let permit = match limit.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tracing::warn!(
                    "a sandboxed run has {} connections open to port {} (limit {}); \
                     further ones wait",
                    limit_of(service),
                    service.port(),
                    limit_name(service)
                );
                match limit.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                }
            }
        };
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                () = handle(stream, service) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

fn limit_of(service: Service) -> usize {
    match service {
        Service::Forward(_) => CONNECTION_LIMIT,
        Service::Proxy => super::registry_proxy::CONNECTION_LIMIT,
    }
}

fn limit_name(service: Service) -> &'static str {
    match service {
        Service::Forward(_) => "local_ports::CONNECTION_LIMIT",
        Service::Proxy => "registry_proxy::CONNECTION_LIMIT",
    }
}

async fn handle(mut inside: TcpStream, service: Service) {
    match service {
        Service::Proxy => super::registry_proxy::serve(inside).await,
        Service::Forward(port) => {
            let host = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            match tokio::time::timeout(HOST_CONNECT_TIMEOUT, TcpStream::connect(host)).await {
                Ok(Ok(mut host)) => {
                    let _ = tokio::io::copy_bidirectional(&mut inside, &mut host).await;
                }
                // Nothing listens there on the host: reset, as the
                // closest a relay can come to "connection refused".
                _ => {
                    let _ = inside.set_zero_linger();
                }
            }
        }
    }
}

/// Why the listener helper failed, printed on its stderr.
#[derive(Debug, thiserror::Error)]
enum HelperError {
    #[error("usage: {HELPER_ARG} PID PORT...")]
    Usage,
    #[error("cannot open the sandbox's {ns} namespace: {source}")]
    Open {
        ns: &'static str,
        source: std::io::Error,
    },
    #[error("cannot enter the sandbox's {ns} namespace: {source}")]
    Enter {
        ns: &'static str,
        source: std::io::Error,
    },
    #[error("cannot listen on 127.0.0.1:{port} inside the sandbox: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("cannot send the listeners back: {0}")]
    Send(std::io::Error),
}

/// The listener helper, when this process was started as one (its first
/// argument is [`HELPER_ARG`]): call first thing in `main`, while the
/// process is single-threaded. `None` otherwise.
pub fn helper_main() -> Option<ExitCode> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some(HELPER_ARG) {
        return None;
    }
    Some(match helper(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    })
}

/// Join the sandbox's namespaces, listen, send the sockets on stdin.
fn helper(mut args: impl Iterator<Item = String>) -> Result<(), HelperError> {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    let pid: u32 = args
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or(HelperError::Usage)?;
    let ports = args
        .map(|p| p.parse::<u16>().map_err(|_| HelperError::Usage))
        .collect::<Result<Vec<_>, _>>()?;
    if ports.is_empty() || ports.len() > PORTS_LIMIT + 1 {
        return Err(HelperError::Usage);
    }
    let open = |ns: &'static str| {
        std::fs::File::open(format!("/proc/{pid}/ns/{ns}"))
            .map_err(|source| HelperError::Open { ns, source })
    };
    let user = open("user")?;
    let net = open("net")?;
    // Joining the user namespace we are in already is refused (EINVAL):
    // bwrap made none (a daemon run as root may keep the host's).
    if !same_namespace(&user, "user") {
        move_into_link_name_space(user.as_fd(), Some(LinkNameSpaceType::User)).map_err(|e| {
            HelperError::Enter {
                ns: "user",
                source: e.into(),
            }
        })?;
    }
    move_into_link_name_space(net.as_fd(), Some(LinkNameSpaceType::Network)).map_err(|e| {
        HelperError::Enter {
            ns: "network",
            source: e.into(),
        }
    })?;
    let listeners = ports
        .iter()
        .map(|&port| {
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                .map_err(|source| HelperError::Bind { port, source })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fds: Vec<_> = listeners.iter().map(AsFd::as_fd).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err(HelperError::Send(std::io::Error::other(
            "the listeners do not fit the message",
        )));
    }
    let stdin = std::io::stdin();
    rustix::net::sendmsg(
        stdin.as_fd(),
        &[std::io::IoSlice::new(b"1")],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .map_err(|e| HelperError::Send(e.into()))?;
    Ok(())
}

/// Whether `ns` (an open `/proc/PID/ns/...` file) is this process's own.
fn same_namespace(ns: &std::fs::File, kind: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ours = std::fs::metadata(format!("/proc/self/ns/{kind}")).map(|m| (m.dev(), m.ino()));
    let theirs = ns.metadata().map(|m| (m.dev(), m.ino()));
    matches!((ours, theirs), (Ok(a), Ok(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_checked() {
        assert!(check_ports(&[5432, 8000]).is_ok());
        assert!(matches!(check_ports(&[0]), Err(LocalError::Zero)));
        let many: Vec<u16> = (1..=PORTS_LIMIT as u16 + 1).collect();
        let e = check_ports(&many).unwrap_err();
        assert!(e.to_string().contains("PORTS_LIMIT"), "{e}");
        let proxy = super::super::registry_proxy::PROXY_PORT;
        assert!(matches!(
            check_ports(&[proxy]),
            Err(LocalError::ProxyPort(p)) if p == proxy
        ));
    }

    #[test]
    fn the_helper_refuses_nonsense() {
        let args = ["x".to_string()];
        assert!(matches!(helper(args.into_iter()), Err(HelperError::Usage)));
        let args = ["1".to_string()];
        assert!(matches!(helper(args.into_iter()), Err(HelperError::Usage)));
    }
}
