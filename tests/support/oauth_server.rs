//! A local OAuth 2.1 authorization server and the MCP server it protects,
//! on one real HTTP listener on 127.0.0.1, for `tests/suite/mcp_oauth.rs`.
//!
//! - `/.well-known/oauth-protected-resource[/mcp]` (RFC 9728) names the
//!   authorization server; `/.well-known/oauth-authorization-server`
//!   (RFC 8414) its endpoints;
//! - `POST /register` registers a client dynamically (RFC 7591);
//! - `GET /authorize` approves at once (the test plays the browser) and
//!   redirects to the client's `redirect_uri` with a code and the `state`;
//! - `POST /token` exchanges a code (checking the PKCE S256 verifier and
//!   the redirect URI) or a refresh token (rotated) for a bearer token
//!   that expires after [`OAuthServer::token_lifetime`] seconds;
//! - `/mcp` is MCP streamable HTTP (the [`Echo`] tool) for a valid,
//!   unexpired bearer token; anything else gets 401 with a
//!   `WWW-Authenticate` challenge naming the resource metadata.
//!
//! [`OAuthServer::expire_access_tokens`] ends every access token's life;
//! [`OAuthServer::revoke_all`] forgets every token, as a server does when
//! the person revokes the app.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use sha2::Digest;

use super::mcp_echo::Echo;

#[derive(Default)]
struct Tokens {
    clients: HashMap<String, Vec<String>>,
    /// code → (client id, redirect URI, PKCE challenge)
    codes: HashMap<String, (String, String, String)>,
    access: HashMap<String, Instant>,
    refresh: HashSet<String>,
    next: u64,
}

pub struct Shared {
    base: String,
    tokens: Mutex<Tokens>,
    lifetime: u64,
    pub registrations: AtomicUsize,
    pub code_exchanges: AtomicUsize,
    pub refreshes: AtomicUsize,
    /// Requests to `/mcp` refused for the token they carried (discovery's
    /// requests without one are not counted).
    pub rejected_tokens: AtomicUsize,
    /// Tool calls that reached the MCP server.
    pub calls: Arc<AtomicUsize>,
}

pub struct OAuthServer {
    pub shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OAuthServer {
    /// Start on a free port; access tokens live `token_lifetime` seconds.
    pub async fn start(token_lifetime: u64) -> OAuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Shared {
            base,
            tokens: Mutex::default(),
            lifetime: token_lifetime,
            registrations: AtomicUsize::new(0),
            code_exchanges: AtomicUsize::new(0),
            refreshes: AtomicUsize::new(0),
            rejected_tokens: AtomicUsize::new(0),
            calls: calls.clone(),
        });
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let echo = Echo::new(calls);
        let mcp = StreamableHttpService::new(
            move || Ok(echo.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let protected =
            Router::new()
                .nest_service("/mcp", mcp)
                .layer(axum::middleware::from_fn_with_state(
                    shared.clone(),
                    require_token,
                ));
        let app = Router::new()
            .route(
                "/.well-known/oauth-protected-resource",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(server_metadata),
            )
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(shared.clone())
            .merge(protected);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        OAuthServer { shared, task }
    }

    /// The protected MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.shared.base)
    }

    /// Let every access token expire now (refresh tokens stay good).
    pub fn expire_access_tokens(&self) {
        let mut t = self.shared.tokens.lock().unwrap();
        let now = Instant::now();
        t.access.values_mut().for_each(|expiry| *expiry = now);
    }

    /// Forget every access and refresh token.
    pub fn revoke_all(&self) {
        let mut t = self.shared.tokens.lock().unwrap();
        t.access.clear();
        t.refresh.clear();
    }

    pub fn refreshes(&self) -> usize {
        self.shared.refreshes.load(Ordering::SeqCst)
    }

    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }
}

fn query(uri: &Uri) -> HashMap<String, String> {
    pairs(uri.query().unwrap_or(""))
}

fn pairs(text: &str) -> HashMap<String, String> {
    reqwest::Url::parse(&format!("http://x/?{text}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect()
}

fn json_response(status: StatusCode, value: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn resource_metadata(State(s): State<Arc<Shared>>) -> Response {
    json_response(
        StatusCode::OK,
        json!({
            "resource": format!("{}/mcp", s.base),
            "authorization_servers": [s.base],
            "bearer_methods_supported": ["header"],
        }),
    )
}

async fn server_metadata(State(s): State<Arc<Shared>>) -> Response {
    json_response(
        StatusCode::OK,
        json!({
            "issuer": s.base,
            "authorization_endpoint": format!("{}/authorize", s.base),
            "token_endpoint": format!("{}/token", s.base),
            "registration_endpoint": format!("{}/register", s.base),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
        }),
    )
}

async fn register(State(s): State<Arc<Shared>>, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or_default();
    let uris: Vec<String> = request["redirect_uris"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    s.registrations.fetch_add(1, Ordering::SeqCst);
    let id = {
        let mut t = s.tokens.lock().unwrap();
        t.next += 1;
        let id = format!("client-{}", t.next);
        t.clients.insert(id.clone(), uris.clone());
        id
    };
    json_response(
        StatusCode::CREATED,
        json!({
            "client_id": id,
            "redirect_uris": uris,
            "client_name": request["client_name"],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }),
    )
}

async fn authorize(State(s): State<Arc<Shared>>, uri: Uri) -> Response {
    let q = query(&uri);
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let (client, redirect, state) = (get("client_id"), get("redirect_uri"), get("state"));
    let mut t = s.tokens.lock().unwrap();
    let known = t
        .clients
        .get(&client)
        .is_some_and(|uris| uris.contains(&redirect));
    if !known || get("response_type") != "code" || get("code_challenge_method") != "S256" {
        return (StatusCode::BAD_REQUEST, "unknown client or redirect URI").into_response();
    }
    t.next += 1;
    let code = format!("code-{}", t.next);
    t.codes.insert(
        code.clone(),
        (client, redirect.clone(), get("code_challenge")),
    );
    let mut location = reqwest::Url::parse(&redirect).unwrap();
    location
        .query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &state);
    Response::builder()
        .status(StatusCode::FOUND)
        .header("location", location.as_str())
        .body(Body::empty())
        .unwrap()
}

/// base64url without padding (RFC 7636's S256 challenge).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn issue(s: &Shared, t: &mut Tokens) -> Response {
    t.next += 1;
    let access = format!("access-{}", t.next);
    let refresh = format!("refresh-{}", t.next);
    t.access.insert(
        access.clone(),
        Instant::now() + Duration::from_secs(s.lifetime),
    );
    t.refresh.insert(refresh.clone());
    json_response(
        StatusCode::OK,
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": s.lifetime,
            "refresh_token": refresh,
        }),
    )
}

async fn token(State(s): State<Arc<Shared>>, body: String) -> Response {
    let form = pairs(&body);
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let invalid = || json_response(StatusCode::BAD_REQUEST, json!({ "error": "invalid_grant" }));
    let mut t = s.tokens.lock().unwrap();
    match get("grant_type").as_str() {
        "authorization_code" => {
            let Some((client, redirect, challenge)) = t.codes.remove(&get("code")) else {
                return invalid();
            };
            let verifier = get("code_verifier");
            let computed = base64url(&sha2::Sha256::digest(verifier.as_bytes()));
            if client != get("client_id")
                || redirect != get("redirect_uri")
                || computed != challenge
            {
                return invalid();
            }
            s.code_exchanges.fetch_add(1, Ordering::SeqCst);
            issue(&s, &mut t)
        }
        "refresh_token" => {
            if !t.refresh.remove(&get("refresh_token")) {
                return invalid();
            }
            s.refreshes.fetch_add(1, Ordering::SeqCst);
            issue(&s, &mut t)
        }
        _ => json_response(
            StatusCode::BAD_REQUEST,
            json!({ "error": "unsupported_grant_type" }),
        ),
    }
}

async fn require_token(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(String::from);
    let sent = token.is_some();
    let valid = token.is_some_and(|tok| {
        s.tokens
            .lock()
            .unwrap()
            .access
            .get(&tok)
            .is_some_and(|expiry| Instant::now() < *expiry)
    });
    if valid {
        return next.run(request).await;
    }
    if sent {
        s.rejected_tokens.fetch_add(1, Ordering::SeqCst);
    }
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(
            "www-authenticate",
            format!(
                "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                s.base
            ),
        )
        .body(Body::empty())
        .unwrap()
}

#[test]
fn base64url_is_rfc_4648() {
    assert_eq!(base64url(b"foob"), "Zm9vYg");
    assert_eq!(base64url(b"fooba"), "Zm9vYmE");
    assert_eq!(base64url(b"foobar"), "Zm9vYmFy");
}
