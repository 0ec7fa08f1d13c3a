//! OAuth for streamable HTTP MCP servers, the way Codex and Claude Code do
//! it: `passepartout mcp login NAME` runs the authorization-code flow with
//! PKCE once, the tokens are kept in the state directory, and the daemon
//! sends them (refreshing them when they expire) to that server.
//!
//! The protocol work is rmcp's `auth` feature (`AuthorizationManager`):
//! protected-resource metadata (RFC 9728) and authorization-server metadata
//! (RFC 8414) discovery, dynamic client registration (RFC 7591), PKCE, the
//! state check, token exchange and refresh. Its HTTP client already times
//! out every request (30 s), caps every metadata and token answer at 1 MiB
//! and refuses discovered hosts on private or loopback addresses unless the
//! server itself is on one. What is ours:
//!
//! - [`FileStore`]: the tokens of one server URL in
//!   `<state_dir>/mcp-oauth/<sha256(url)[..32]>.json` (0600, in a 0700
//!   directory; at most [`MAX_TOKEN_FILE_BYTES`] read back), with an
//!   advisory lock so the daemon and `mcp login` never refresh at once;
//! - [`login`]: the one-shot callback listener on 127.0.0.1 (a random
//!   port; one request read, at most [`MAX_CALLBACK_REQUEST_BYTES`], within
//!   [`CALLBACK_READ_TIMEOUT`]; its `state` must be the one sent), the
//!   authorization URL printed (and opened with `xdg-open` only when a
//!   display exists);
//! - [`authorized_client`]: the daemon's HTTP client for a server with
//!   stored tokens;
//! - [`needs_login`]: a 401 without usable tokens, said as
//!   ``needs login: run `passepartout mcp login NAME` ``.

use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationRequest,
    AuthorizationSession, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::transport::BoundedHttp;
use crate::util::fs::{write_atomic, Atomic};

/// A token file larger than this is not read (a real one is a few KiB).
pub const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;
/// The most of the browser's callback request that is read.
pub const MAX_CALLBACK_REQUEST_BYTES: usize = 8 * 1024;
/// How long the callback's request may take to arrive once connected.
pub const CALLBACK_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `mcp login` waits for the person to finish in the browser.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(300);
/// The probe that fetches the server's 401 challenge.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// The client name sent in dynamic client registration.
const CLIENT_NAME: &str = "passepartout";

/// The advice for a server that needs a login. `who` is the config name,
/// or the URL for a server an ACP client named (not in config.toml).
pub fn login_hint(who: &str) -> String {
    format!("needs login: run `passepartout mcp login {who}`")
}

/// The token file of a server URL under `dir` (`<state_dir>/mcp-oauth`).
pub fn token_file(dir: &Path, url: &str) -> PathBuf {
    let digest = sha2::Sha256::digest(url.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{}.json", &hex[..32]))
}

/// What a token file holds: the URL it belongs to (checked on load) and
/// rmcp's credentials (client id, token response, when it was received).
#[derive(Serialize, Deserialize)]
struct TokenFile {
    url: String,
    credentials: StoredCredentials,
}

/// rmcp's credential store on one token file.
pub struct FileStore {
    path: PathBuf,
    url: String,
}

impl FileStore {
    pub fn new(dir: &Path, url: &str) -> FileStore {
        FileStore {
            path: token_file(dir, url),
            url: url.to_string(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<Option<StoredCredentials>, TokenFileError> {
        let file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(TokenFileError::io(&self.path, e)),
        };
        let mut bytes = Vec::new();
        std::io::Read::take(file, MAX_TOKEN_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| TokenFileError::io(&self.path, e))?;
        if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
            return Err(TokenFileError::TooBig {
                path: self.path.clone(),
            });
        }
        let file: TokenFile =
            serde_json::from_slice(&bytes).map_err(|source| TokenFileError::Unreadable {
                path: self.path.clone(),
                source,
            })?;
        // Another URL's tokens are never sent here.
        Ok((file.url == self.url).then_some(file.credentials))
    }

    fn write(&self, credentials: StoredCredentials) -> Result<(), TokenFileError> {
        if let Some(dir) = self.path.parent() {
            crate::paths::create_private_dir(dir).map_err(|e| TokenFileError::io(dir, e))?;
        }
        let file = TokenFile {
            url: self.url.clone(),
            credentials,
        };
        let bytes = serde_json::to_vec_pretty(&file)?;
        // write_atomic creates the file 0600.
        write_atomic(&self.path, &bytes, Atomic::DURABLE)
            .map_err(|e| TokenFileError::io(&self.path, e))
    }

    /// Remove the tokens; whether there were any.
    pub fn remove(&self) -> std::io::Result<bool> {
        let _ = std::fs::remove_file(self.path.with_extension("lock"));
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }
}

/// What the token file (or its lock) could not do.
#[derive(Debug, thiserror::Error)]
enum TokenFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is over {MAX_TOKEN_FILE_BYTES} bytes (MAX_TOKEN_FILE_BYTES); run `passepartout mcp logout` and log in again", path.display())]
    TooBig { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

impl TokenFileError {
    fn io(path: &Path, source: impl Into<std::io::Error>) -> TokenFileError {
        TokenFileError::Io {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}

fn store_error(e: impl ToString) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.read().map_err(store_error)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.write(credentials).map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove()
            .map(|_| ())
            .map_err(|e| store_error(TokenFileError::io(&self.path, e)))
    }

    /// An exclusive `flock` on `<file>.lock`, held through a refresh and
    /// its save: the daemon's sessions and `mcp login` share the file.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock_path = self.path.with_extension("lock");
        let locked =
            tokio::task::spawn_blocking(move || -> Result<std::fs::File, TokenFileError> {
                if let Some(dir) = lock_path.parent() {
                    crate::paths::create_private_dir(dir)
                        .map_err(|e| TokenFileError::io(dir, e))?;
                }
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
                    .map_err(|e| TokenFileError::io(&lock_path, e))?;
                rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
                    .map_err(|e| TokenFileError::io(&lock_path, e))?;
                Ok(file)
            })
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        // The lock goes with the file when the guard is dropped.
        Ok(Some(CredentialRefreshGuard::new(locked)))
    }
}

/// The daemon's HTTP client for a server with stored tokens: a bearer token
/// on every request, refreshed when it expires (or when the server refuses
/// it). `Ok(None)` when nobody logged in to `url`.
pub async fn authorized_client(
    dir: &Path,
    url: &str,
    base: BoundedHttp,
) -> Result<Option<AuthClient<BoundedHttp>>, OAuthError> {
    let store = FileStore::new(dir, url);
    if !store.exists() {
        return Ok(None);
    }
    let failed = |reason: String| OAuthError {
        url: url.to_string(),
        reason,
    };
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| failed(e.to_string()))?;
    manager.set_credential_store(store);
    match manager.initialize_from_store().await {
        Ok(true) => Ok(Some(AuthClient::new(base, manager))),
        // No token in the file, or the authorization server changed.
        Ok(false) => Ok(None),
        Err(e) => Err(failed(readable_auth_error(&e))),
    }
}

/// The stored tokens of a server could not be put to use.
#[derive(Debug, thiserror::Error)]
#[error("OAuth for {url}: {reason}")]
pub struct OAuthError {
    pub url: String,
    pub reason: String,
}

/// Whether an MCP connection failed because the server wants a login it
/// does not have: a 401 with a challenge, and no token (or one that could
/// not be refreshed).
pub fn needs_login(error: &(dyn std::error::Error + 'static)) -> bool {
    use rmcp::transport::streamable_http_client::{AuthRequiredError, StreamableHttpError};
    use rmcp::transport::worker::WorkerQuitReason;
    type HttpError = StreamableHttpError<reqwest::Error>;
    fn auth_says_login(e: &AuthError) -> bool {
        matches!(
            e,
            AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)
        )
    }
    fn http_says_login(e: &HttpError) -> bool {
        match e {
            StreamableHttpError::AuthRequired(_) => true,
            StreamableHttpError::Auth(a) => auth_says_login(a),
            _ => false,
        }
    }
    use rmcp::service::ClientInitializeError;
    let mut cause = Some(error);
    while let Some(e) = cause {
        // rmcp's handshake error does not name its transport error as a
        // source.
        if let Some(ClientInitializeError::TransportError { error, .. }) =
            e.downcast_ref::<ClientInitializeError>()
        {
            return needs_login(error);
        }
        // rmcp's worker reports the 401 as the source of its own error.
        if e.downcast_ref::<AuthRequiredError>().is_some() {
            return true;
        }
        if let Some(h) = e.downcast_ref::<HttpError>() {
            if http_says_login(h) {
                return true;
            }
        }
        if let Some(WorkerQuitReason::Fatal { error, .. }) =
            e.downcast_ref::<WorkerQuitReason<HttpError>>()
        {
            if http_says_login(error) {
                return true;
            }
        }
        if let Some(a) = e.downcast_ref::<AuthError>() {
            if auth_says_login(a) {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// An OAuth error said for a person (rmcp's own messages are plain words).
fn readable_auth_error(e: &AuthError) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Why a login did not complete.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoginError(pub String);

fn login_error(what: &str, e: &AuthError) -> LoginError {
    LoginError(format!("{what}: {}", readable_auth_error(e)))
}

/// Run the authorization-code flow with PKCE for the server at `url` and
/// store its tokens under `dir`. The authorization URL is written to
/// `out`; the person (or a test playing the browser) opens it, and the
/// authorization server redirects to the one-shot listener. Returns the
/// token file.
pub async fn login(
    url: &str,
    dir: &Path,
    timeout: Duration,
    out: &mut (dyn Write + Send),
) -> Result<PathBuf, LoginError> {
    // reqwest is built without a default crypto provider (see setup.rs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let challenge = probe_challenge(url).await;
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| login_error("OAuth", &e))?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(|e| login_error("discovering the authorization server", &e))?;
    manager.set_metadata(resolution.metadata);
    let store = FileStore::new(dir, url);
    let path = store.path().to_path_buf();
    manager.set_credential_store(store);

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| LoginError(format!("cannot listen on 127.0.0.1 for the callback: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| LoginError(e.to_string()))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let request = AuthorizationRequest::new(redirect_uri).with_client_name(CLIENT_NAME);
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| login_error("starting the authorization", &e))?;
    let auth_url = session.get_authorization_url().to_string();
    let expected_state = reqwest::Url::parse(&auth_url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or_else(|| LoginError("the authorization URL carries no state".into()))?;
    let _ = writeln!(out, "Open this URL in a browser to log in:\n{auth_url}");
    let _ = out.flush();
    open_browser(&auth_url);

    let (callback, mut browser) =
        match tokio::time::timeout(timeout, receive_callback(&listener, &expected_state)).await {
            Ok(received) => received?,
            Err(_) => {
                return Err(LoginError(format!(
                    "no answer from the browser within {} s (--timeout)",
                    timeout.as_secs()
                )))
            }
        };
    // The one request is read: nothing else is accepted.
    drop(listener);
    let exchanged = session
        .handle_callback_with_issuer(
            &callback.code,
            &callback.csrf_token,
            callback.issuer.as_deref(),
        )
        .await;
    let page = match &exchanged {
        Ok(_) => "passepartout is logged in; you can close this page.",
        Err(_) => "passepartout could not complete the login; see the terminal.",
    };
    let _ = respond(&mut browser, "200 OK", page).await;
    exchanged.map_err(|e| login_error("exchanging the code for tokens", &e))?;
    Ok(path)
}

/// The `WWW-Authenticate` challenge of an unauthenticated `initialize`,
/// when the server answers 401 with one (its `resource_metadata` names the
/// protected-resource metadata, RFC 9728).
async fn probe_challenge(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .ok()?;
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") }
        }
    });
    let response = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

/// Open the URL in the person's browser when there is a display to open it
/// on; never required (the URL is printed).
fn open_browser(url: &str) {
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    // The URL comes from the server's metadata: only a web address is
    // handed to the opener (never `file:` or another scheme's handler).
    let web = url.starts_with("https://") || url.starts_with("http://");
    if !display || !web {
        return;
    }
    // The URL is one argument, never shell text.
    let _ = std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// Accept one connection, read one request (bounded in size and time),
/// and take the code from it when its `state` is the one sent. Any other
/// request ends the login: the listener answers exactly one.
async fn receive_callback(
    listener: &tokio::net::TcpListener,
    expected_state: &str,
) -> Result<(AuthorizationCallback, tokio::net::TcpStream), LoginError> {
    let (mut stream, _) = listener
        .accept()
        .await
        .map_err(|e| LoginError(format!("the callback listener failed: {e}")))?;
    let head = match tokio::time::timeout(CALLBACK_READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(e)) => {
            let _ = respond(&mut stream, "400 Bad Request", &e.to_string()).await;
            return Err(LoginError(format!("the callback request: {e}")));
        }
        Err(_) => {
            return Err(LoginError(format!(
                "the callback request did not arrive within {} s",
                CALLBACK_READ_TIMEOUT.as_secs()
            )))
        }
    };
    let target = head
        .lines()
        .next()
        .and_then(|line| {
            let mut words = line.split(' ');
            (words.next() == Some("GET"))
                .then(|| words.next())
                .flatten()
        })
        .unwrap_or("");
    let parsed = reqwest::Url::parse(&format!("http://127.0.0.1{target}"))
        .map_err(|_| LoginError("the callback request is not a GET of a URL".into()));
    let refuse = |stream: tokio::net::TcpStream, why: String| async move {
        let mut stream = stream;
        let _ = respond(&mut stream, "400 Bad Request", &why).await;
        Err(LoginError(why))
    };
    let url = match parsed {
        Ok(u) if u.path() == "/callback" => u,
        Ok(u) => return refuse(stream, format!("unexpected callback path {}", u.path())).await,
        Err(e) => return refuse(stream, e.0).await,
    };
    let param = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    if let Some(error) = param("error") {
        let detail = param("error_description").unwrap_or_default();
        return refuse(
            stream,
            format!("the authorization server refused: {error} {detail}")
                .trim_end()
                .to_string(),
        )
        .await;
    }
    if param("state").as_deref() != Some(expected_state) {
        return refuse(
            stream,
            "the callback's state is not the one sent (a forged or stale redirect)".into(),
        )
        .await;
    }
    match AuthorizationCallback::from_redirect_url(url.as_str()) {
        Ok(callback) => Ok((callback, stream)),
        Err(e) => refuse(stream, readable_auth_error(&e)).await,
    }
}

/// Why the callback's request head could not be read.
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error("reading it: {0}")]
    Read(std::io::Error),
    #[error("it is over {MAX_CALLBACK_REQUEST_BYTES} bytes (MAX_CALLBACK_REQUEST_BYTES)")]
    TooBig,
}

/// Read an HTTP request head (to the blank line), at most
/// [`MAX_CALLBACK_REQUEST_BYTES`].
async fn read_head(stream: &mut tokio::net::TcpStream) -> Result<String, HeadError> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await.map_err(HeadError::Read)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break;
        }
        if head.len() > MAX_CALLBACK_REQUEST_BYTES {
            return Err(HeadError::TooBig);
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    text: &str,
) -> std::io::Result<()> {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>passepartout</title><p>{}</p>\n",
        html_escape(text)
    );
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(answer.as_bytes()).await?;
    stream.shutdown().await
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn tokens_are_kept_private_per_url_and_never_sent_to_another() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("mcp-oauth");
        let a = FileStore::new(&tokens, "http://127.0.0.1:1/mcp");
        assert!(a.load().await.unwrap().is_none());
        a.save(StoredCredentials::new(
            "client".into(),
            None,
            vec![],
            Some(1),
        ))
        .await
        .unwrap();
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(a.load().await.unwrap().unwrap().client_id, "client");
        let b = FileStore::new(&tokens, "http://127.0.0.1:2/mcp");
        assert_ne!(a.path(), b.path());
        // A file moved under another URL's name is not believed.
        std::fs::copy(a.path(), b.path()).unwrap();
        assert!(b.load().await.unwrap().is_none());
        assert!(a.remove().unwrap());
        assert!(!a.remove().unwrap());
    }

    #[tokio::test]
    async fn the_callback_listener_refuses_a_wrong_state_and_answers_once() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let browser = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            s.write_all(b"GET /callback?code=c&state=forged HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            answer
        });
        let err = receive_callback(&listener, "sent").await.unwrap_err();
        assert!(err.0.contains("state is not the one sent"), "{err}");
        let answer = browser.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }

    #[test]
    fn a_server_error_without_a_challenge_is_no_login_hint() {
        let e = std::io::Error::other("connection refused");
        assert!(!needs_login(&e));
        assert!(needs_login(&AuthError::AuthorizationRequired));
        assert_eq!(
            login_hint("docs"),
            "needs login: run `passepartout mcp login docs`"
        );
    }
}
