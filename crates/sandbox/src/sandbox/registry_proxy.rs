//! The `registries` grant: installers reach the package registries, and
//! nothing else.
//!
//! A run granted `registries` (and not the whole network) gets a listener
//! on its own 127.0.0.1:[`PROXY_PORT`] ([`super::local_ports`]), and
//! `HTTPS_PROXY`, `HTTP_PROXY` (both cases) and npm's proxy settings
//! pointing at it ([`proxy_env`]). The daemon serves what arrives there as
//! an HTTP proxy: `CONNECT host:port` for https, an absolute-form request
//! (`GET http://host/path`) for plain http. Only the hosts of
//! [`registries.toml`](registries.toml) (each with where it is stated)
//! and those the person adds with `[sandbox] registries` are let through;
//! any other is answered `403` with a body naming the host and the key
//! that would allow it. The check is on the name the installer asked
//! for; the daemon resolves and connects, so the sandbox needs no DNS.
//!
//! The proxy is small and bounded rather than a crate: the maintained
//! proxy crates found (hudsucker, http-mitm-proxy) intercept TLS, which is
//! the opposite of what is wanted, and an allow-list CONNECT proxy is a
//! request head parsed by `httparse` and two sockets copied. Bounds: the
//! head is at most [`HEAD_LIMIT`] bytes read within [`HEAD_TIMEOUT`], at
//! most [`CONNECTION_LIMIT`] connections per run, each closed after
//! [`IDLE_TIMEOUT`] without a byte either way.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The port the proxy listens on inside the sandbox (squid's customary
/// one): the sandbox's 127.0.0.1 is its own, so no host port is taken.
pub const PROXY_PORT: u16 = 3128;

/// The most bytes of a request head the proxy reads.
pub const HEAD_LIMIT: usize = 16 * 1024;
/// The most header lines a request head may have.
pub const HEADERS_LIMIT: usize = 100;
/// How long the proxy waits for a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the proxy waits for a registry to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a proxied connection may pass no byte either way.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The most proxied connections one run has open at a time; more wait in
/// the listen queue until one ends.
pub const CONNECTION_LIMIT: usize = 32;
/// The most bytes read and dropped after a refusal (see [`serve`]).
pub const DRAIN_LIMIT: usize = 64 * 1024;
/// How long the proxy reads what follows a refusal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// The most hosts `[sandbox] registries` may add.
pub const EXTRA_LIMIT: usize = 64;

/// One registry of [`registries.toml`](registries.toml).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Registry {
    pub name: String,
    pub hosts: Vec<String>,
    /// Where the hosts are stated.
    pub source: String,
}

#[derive(serde::Deserialize)]
struct RegistryFile {
    registry: Vec<Registry>,
}

/// The registries let through by default (parsed once from the file
/// compiled in; a test checks it parses).
pub fn builtin() -> &'static [Registry] {
    static LIST: OnceLock<Vec<Registry>> = OnceLock::new();
    LIST.get_or_init(|| {
        toml::from_str::<RegistryFile>(include_str!("registries.toml"))
            .map(|f| f.registry)
            .unwrap_or_default()
    })
}

/// A host the proxy lets through, on `port` or (none given) 443 and 80.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub host: String,
    pub port: Option<u16>,
}

/// Why an entry of `[sandbox] registries` was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("registries: `{0}` is not a host name or `host:port` (no scheme, path or spaces)")]
    Entry(String),
    #[error("registries holds more than {EXTRA_LIMIT} hosts (limit EXTRA_LIMIT)")]
    TooMany,
}

/// Parse one entry: `host`, `host:port`, `[v6]:port`.
pub fn parse_entry(entry: &str) -> Result<Allowed, RegistryError> {
    let bad = || RegistryError::Entry(entry.to_string());
    let (host, port) = split_host_port(entry.trim()).ok_or_else(bad)?;
    let host = normal_host(host);
    if host.is_empty()
        || host
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_')))
    {
        return Err(bad());
    }
    Ok(Allowed { host, port })
}

/// `host[:port]` (IPv6 in brackets): the host and the port, if any.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            p => Some((host, Some(p.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match s.rsplit_once(':') {
        // More than one colon and no brackets: an IPv6 address alone.
        Some((host, _)) if host.contains(':') => Some((s, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((s, None)),
    }
}

fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

static EXTRA: OnceLock<Vec<Allowed>> = OnceLock::new();

/// Set, once at startup, the hosts `[sandbox] registries` adds to the
/// built-in list. A refused entry adds nothing; the others still do.
pub fn set_extra(entries: &[String]) -> Result<(), RegistryError> {
    let mut hosts = Vec::new();
    let mut first_error = None;
    if entries.len() > EXTRA_LIMIT {
        first_error = Some(RegistryError::TooMany);
    }
    for entry in entries.iter().take(EXTRA_LIMIT) {
        match parse_entry(entry) {
            Ok(a) => hosts.push(a),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let _ = EXTRA.set(hosts);
    first_error.map_or(Ok(()), Err)
}

/// Check `[sandbox] registries` without setting it (configuration check).
pub fn check_extra(entries: &[String]) -> Result<(), RegistryError> {
    if entries.len() > EXTRA_LIMIT {
        return Err(RegistryError::TooMany);
    }
    entries.iter().try_for_each(|e| parse_entry(e).map(drop))
}

/// Every host the grant lets through, as `host` or `host:port`: the
/// built-in registries', then the person's.
pub fn hosts() -> Vec<String> {
    let mut out: Vec<String> = builtin()
        .iter()
        .flat_map(|r| r.hosts.iter().cloned())
        .collect();
    for a in EXTRA.get().into_iter().flatten() {
        out.push(match a.port {
            Some(p) => format!("{}:{p}", a.host),
            None => a.host.clone(),
        });
    }
    out
}

/// Whether the proxy lets a connection to `host:port` through.
pub fn allowed(host: &str, port: u16) -> bool {
    let host = normal_host(host);
    let default_port = port == 443 || port == 80;
    builtin()
        .iter()
        .flat_map(|r| &r.hosts)
        .any(|h| default_port && *h == host)
        || EXTRA
            .get()
            .into_iter()
            .flatten()
            .any(|a| a.host == host && a.port.map_or(default_port, |p| p == port))
}

static GRANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set, at startup, whether every run is granted `registries`
/// (`[sandbox] grant_registries`).
pub fn set_granted(granted: bool) {
    GRANTED.store(granted, std::sync::atomic::Ordering::Relaxed);
}

/// Whether every run is granted `registries`.
pub fn granted() -> bool {
    GRANTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A session's answer to the once-per-session question for the
/// `registries` grant (asked when an installer runs in a session where a
/// person can be asked and config does not grant it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionGrant {
    /// Approved: every run of the session gets the proxy.
    Granted,
    /// Rejected: the session's installers run without network and the
    /// question is not asked again.
    Declined,
}

/// Most sessions whose answer a daemon keeps; past it the oldest answer
/// is forgotten (that session is asked again).
pub const SESSION_GRANTS_LIMIT: usize = 4096;

type Grants = std::collections::HashMap<String, (u64, SessionGrant)>;

fn session_grants() -> std::sync::MutexGuard<'static, (u64, Grants)> {
    static GRANTS: OnceLock<std::sync::Mutex<(u64, Grants)>> = OnceLock::new();
    GRANTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Record a session's answer.
pub fn set_session_grant(session: &str, grant: SessionGrant) {
    let mut g = session_grants();
    let (next, map) = &mut *g;
    if map.len() >= SESSION_GRANTS_LIMIT && !map.contains_key(session) {
        if let Some(oldest) = map
            .iter()
            .min_by_key(|(_, (n, _))| *n)
            .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
    }
    *next += 1;
    map.insert(session.to_string(), (*next, grant));
}

/// A session's answer, if it gave one.
pub fn session_grant(session: &str) -> Option<SessionGrant> {
    session_grants().1.get(session).map(|(_, g)| *g)
}

/// Whether runs of `session` are granted `registries`: by config, or by
/// the session's answer.
pub fn granted_for(session: &str) -> bool {
    granted() || session_grant(session) == Some(SessionGrant::Granted)
}

/// The proxy address, as the tools inside are told.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{PROXY_PORT}")
}

/// The variables a run granted `registries` gets: every installer's proxy
/// setting, and the sandbox's own loopback (where the person's listed
/// ports and servers the command starts itself are) kept direct.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = proxy_url();
    let direct = "localhost,127.0.0.1,::1".to_string();
    vec![
        ("HTTPS_PROXY", url.clone()),
        ("HTTP_PROXY", url.clone()),
        ("https_proxy", url.clone()),
        ("http_proxy", url.clone()),
        ("npm_config_proxy", url.clone()),
        ("npm_config_https_proxy", url),
        ("NO_PROXY", direct.clone()),
        ("no_proxy", direct),
    ]
}

/// The body of a refusal: the host and the key that would allow it.
pub fn refusal(host: &str, port: u16) -> String {
    format!(
        "passepartout: `{host}:{port}` is not a package registry the sandbox may reach \
         (the `registries` grant lets installers reach only the registries' hosts). To allow \
         it, add \"{host}\" to `registries` in the `[sandbox]` table of config.toml.\n"
    )
}

/// A request the proxy could not serve.
#[derive(Debug)]
struct Refusal {
    status: &'static str,
    body: String,
}

impl Refusal {
    fn bad(why: impl Into<String>) -> Self {
        Refusal {
            status: "400 Bad Request",
            body: format!("passepartout: {}\n", why.into()),
        }
    }
}

/// Serve one connection from the sandbox.
pub async fn serve(mut inside: TcpStream) {
    if let Err(refusal) = serve_or_refuse(&mut inside).await {
        let response = format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{}",
            refusal.status,
            refusal.body.len(),
            refusal.body
        );
        let _ = inside.write_all(response.as_bytes()).await;
        let _ = inside.shutdown().await;
        // What the client sent past the refusal is read and dropped, a
        // bounded amount for a bounded time: closing with unread bytes
        // resets the connection, and the client could lose the answer.
        let mut sink = [0u8; 4096];
        let mut left = DRAIN_LIMIT;
        let drain = async {
            while left > 0 {
                match inside.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
    }
}

/// What the head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// `CONNECT host:port`: a tunnel.
    Tunnel { host: String, port: u16 },
    /// An absolute-form http request, rewritten to origin-form (what a
    /// server expects) with `Connection: close`.
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

async fn serve_or_refuse(inside: &mut TcpStream) -> Result<(), Refusal> {
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(inside)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Refusal {
                status: "408 Request Timeout",
                body: format!(
                    "passepartout: no request within {} s (limit HEAD_TIMEOUT)\n",
                    HEAD_TIMEOUT.as_secs()
                ),
            })
        }
    };
    let ask = parse_head(&head)?;
    let (host, port) = match &ask {
        Ask::Tunnel { host, port } | Ask::Forward { host, port, .. } => (host.clone(), *port),
    };
    if !allowed(&host, port) {
        return Err(Refusal {
            status: "403 Forbidden",
            body: refusal(&host, port),
        });
    }
    let connect = TcpStream::connect((host.as_str(), port));
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(Refusal {
                status: "502 Bad Gateway",
                body: format!("passepartout: cannot reach {host}:{port}: {e}\n"),
            })
        }
        Err(_) => {
            return Err(Refusal {
                status: "504 Gateway Timeout",
                body: format!(
                    "passepartout: {host}:{port} did not answer within {} s \
                     (limit CONNECT_TIMEOUT)\n",
                    CONNECT_TIMEOUT.as_secs()
                ),
            })
        }
    };
    let sent = match &ask {
        Ask::Tunnel { .. } => {
            inside
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Ask::Forward { head, .. } => upstream.write_all(head).await,
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return Ok(());
    }
    relay(inside, &mut upstream, IDLE_TIMEOUT).await;
    Ok(())
}

/// Read up to the end of the head: the head, and what came after it.
async fn read_head(inside: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = find_end(&buf) {
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
        if buf.len() >= HEAD_LIMIT {
            return Err(Refusal {
                status: "431 Request Header Fields Too Large",
                body: format!(
                    "passepartout: a request head over {HEAD_LIMIT} bytes (limit HEAD_LIMIT)\n"
                ),
            });
        }
        let n = inside
            .read(&mut chunk)
            .await
            .map_err(|e| Refusal::bad(format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(Refusal::bad("the connection closed before a request"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The headers a proxy consumes, not passed on.
const HOP_HEADERS: [&str; 5] = [
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
    "te",
];

fn parse_head(head: &[u8]) -> Result<Ask, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_LIMIT];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::bad("an incomplete request head")),
        Err(e) => return Err(Refusal::bad(format!("a malformed request head: {e}"))),
    }
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target)
            .and_then(|(h, p)| Some((h, p?)))
            .ok_or_else(|| Refusal::bad(format!("CONNECT to `{target}`: not host:port")))?;
        return Ok(Ask::Tunnel {
            host: normal_host(host),
            port,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(Refusal::bad(format!(
            "`{method} {target}`: this proxy takes CONNECT (https) and absolute http:// \
             requests only"
        )));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| Refusal::bad(format!("`{authority}`: not a host")))?;
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    for h in request.headers.iter() {
        if HOP_HEADERS.iter().any(|x| h.name.eq_ignore_ascii_case(x)) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Ask::Forward {
        host: normal_host(host),
        port: port.unwrap_or(80),
        head: out,
    })
}

/// Copy both ways until both sides have closed, or nothing passed for
/// `idle`.
async fn relay(a: &mut TcpStream, b: &mut TcpStream, idle: Duration) {
    let (mut ar, mut aw) = a.split();
    let (mut br, mut bw) = b.split();
    let mut from_a = vec![0u8; 16 * 1024];
    let mut from_b = vec![0u8; 16 * 1024];
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        tokio::select! {
            r = ar.read(&mut from_a), if a_open => match r {
                Ok(0) | Err(_) => {
                    a_open = false;
                    let _ = bw.shutdown().await;
                }
                Ok(n) => {
                    if bw.write_all(&from_a[..n]).await.is_err() {
                        return;
                    }
                }
            },
            r = br.read(&mut from_b), if b_open => match r {
                Ok(0) | Err(_) => {
                    b_open = false;
                    let _ = aw.shutdown().await;
                }
                Ok(n) => {
                    if aw.write_all(&from_b[..n]).await.is_err() {
                        return;
                    }
                }
            },
            () = tokio::time::sleep(idle) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_list_parses_and_names_its_sources() {
        let list = builtin();
        let names: Vec<&str> = list.iter().map(|r| r.name.as_str()).collect();
        for name in [
            "PyPI",
            "npm",
            "crates.io",
            "Go module proxy",
            "Debian",
            "RubyGems",
            "Maven Central",
        ] {
            assert!(names.contains(&name), "{names:?}");
        }
        for r in list {
            assert!(r.source.contains("https://"), "{}", r.name);
            assert!(!r.hosts.is_empty());
        }
        assert!(allowed("files.pythonhosted.org", 443));
        assert!(allowed("Static.Crates.IO.", 443));
        assert!(!allowed("pypi.org", 22));
        assert!(!allowed("example.org", 443));
    }

    #[test]
    fn entries_parse_with_and_without_a_port() {
        assert_eq!(
            parse_entry("pypi.internal:8080").unwrap(),
            Allowed {
                host: "pypi.internal".into(),
                port: Some(8080)
            }
        );
        assert_eq!(
            parse_entry("Mirror.Example.").unwrap().host,
            "mirror.example"
        );
        assert_eq!(parse_entry("[::1]:81").unwrap().port, Some(81));
        for bad in [
            "https://pypi.org",
            "a b",
            "",
            "host:notaport",
            "pypi.org/simple",
        ] {
            assert!(parse_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connect_and_absolute_requests_are_understood() {
        let ask = parse_head(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n");
        assert_eq!(
            ask.unwrap(),
            Ask::Tunnel {
                host: "pypi.org".into(),
                port: 443
            }
        );
        let ask = parse_head(
            b"GET http://127.0.0.2:8081/simple/pkg/ HTTP/1.1\r\nHost: 127.0.0.2:8081\r\n\
              Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        let Ask::Forward { host, port, head } = ask else {
            panic!("{ask:?}")
        };
        assert_eq!((host.as_str(), port), ("127.0.0.2", 8081));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /simple/pkg/ HTTP/1.1\r\nHost: 127.0.0.2:8081\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        assert!(parse_head(b"GET /relative HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"CONNECT pypi.org HTTP/1.1\r\n\r\n").is_err());
    }

    /// The one test that sets the person's extra hosts (a process-wide
    /// setting): a tunnel to a listed host carries bytes both ways; an
    /// unlisted host, a listed host on another port and an oversized head
    /// are refused with their status.
    #[tokio::test]
    async fn a_tunnel_reaches_a_listed_host_and_nothing_else() {
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        set_extra(&[format!("127.0.0.1:{port}")]).unwrap();
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = proxy.accept().await {
                tokio::spawn(serve(s));
            }
        });
        let ask = |head: Vec<u8>| async move {
            let mut s = TcpStream::connect(proxy_addr).await.unwrap();
            s.write_all(&head).await.unwrap();
            s
        };
        let mut tunnel = ask(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").into()).await;
        let mut reply = vec![0u8; 39];
        tunnel.read_exact(&mut reply).await.unwrap();
        assert_eq!(reply, b"HTTP/1.1 200 Connection established\r\n\r\n");
        tunnel.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tunnel.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");

        let answer = |head: Vec<u8>| async move {
            let mut s = ask(head).await;
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let out = answer(b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n".to_vec()).await;
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        assert!(
            out.contains("`evil.example:443`") && out.contains("`registries`"),
            "{out}"
        );
        let other = port.wrapping_add(1);
        let out = answer(format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n").into()).await;
        assert!(out.starts_with("HTTP/1.1 403 Forbidden"), "{out}");
        let mut huge = b"GET http://pypi.org/ HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', HEAD_LIMIT + 1));
        let out = answer(huge).await;
        assert!(out.starts_with("HTTP/1.1 431"), "{out}");
        assert!(out.contains("HEAD_LIMIT"), "{out}");
    }

    #[test]
    fn a_refusal_names_the_host_and_the_key() {
        let body = refusal("evil.example", 443);
        assert!(body.contains("evil.example"), "{body}");
        assert!(body.contains("`registries`"), "{body}");
        assert!(body.contains("[sandbox]"), "{body}");
    }
}
