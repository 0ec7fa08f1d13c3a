//! The MCP client: each session's MCP servers, started when the session
//! is created (the global config's `[[mcp.servers]]` plus the ACP client's
//! `mcpServers`), listed, called by the `mcp` actuator, and stopped with
//! the daemon.
//!
//! A server is a child process speaking MCP on stdio, a streamable HTTP
//! endpoint (with OAuth tokens from `mcp login`, [`oauth`]) or a legacy
//! HTTP+SSE one ([`sse`]); all through the `rmcp` crate. Nothing a server
//! does can take the daemon down: a server that fails to start, hangs, or dies mid-call
//! becomes a state (`failed: …`, with the tail of its stderr) that `mcp
//! list` and the tool result report.
//!
//! Limits: servers per session (`mcp.max_servers_per_session`), startup
//! time (`mcp.startup_timeout_secs`), call time (`mcp.call_timeout_secs`),
//! one message's size before it is decoded (`mcp.max_message_bytes`, see
//! [`transport`]) and result size (`mcp.output_cap_tokens`), each named in
//! its error. The chapter is docs/mcp.md.
//!
//! A server's questions for the person (`elicitation/create`) go to the
//! session's ACP client through [`elicitation`]; while one waits, the
//! call that caused it does not time out.

pub mod binding;
pub mod client;
pub mod config;
pub mod elicitation;
pub mod oauth;
pub mod project;
pub mod sse;
pub mod tool;
pub mod transport;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService};
use rmcp::{RoleClient, ServiceExt};

use client::{Catalog, PassepartoutClient};
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

pub use config::{McpConfig, McpServerConfig, Origin, ServerSpec, Transport};

use crate::protocol as proto;
use crate::tools::ToolRegistry;
use crate::util::sync::lock;

/// How much of a server's stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 2048;
/// Most MCP resources one prompt's `@`-mentions read.
pub const MAX_MENTIONED: usize = 8;
/// How long a server gets to exit when it is stopped.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Environment variables a stdio server inherits from the daemon; all
/// others (API keys among them) are withheld unless the entry names them.
const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR",
    "TZ",
];

/// Why servers could not be started for a session.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Spec(#[from] config::SpecError),
    #[error("MCP server `{name}` failed to start: {reason}")]
    Start { name: String, reason: String },
    #[error("{count} MCP servers asked for, more than the limit of {limit} per session (mcp.max_servers_per_session)")]
    TooMany { count: usize, limit: usize },
    #[error("two MCP servers are both named `{0}` in tool names; give them distinct names")]
    DuplicateName(String),
}

/// Why one tool call did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("no MCP server `{0}` in this session")]
    UnknownServer(String),
    #[error("MCP server `{name}` is not running: {reason}")]
    NotRunning { name: String, reason: String },
    #[error("MCP server `{name}` did not answer within {secs} s (mcp.call_timeout_secs)")]
    Timeout { name: String, secs: u64 },
    #[error("MCP server `{name}`: {reason}")]
    Failed { name: String, reason: String },
    #[error("cancelled")]
    Cancelled,
}

/// Why one server did not start (the reason a person reads).
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("cannot run {}: {source}", command.display())]
    Spawn {
        command: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Its `initialize` failed, or it needs a login (the hint says how).
    #[error("{0}")]
    Init(String),
    #[error(transparent)]
    Headers(#[from] transport::HeaderError),
    #[error(transparent)]
    OAuth(#[from] oauth::OAuthError),
    #[error(transparent)]
    Sse(#[from] sse::ConnectError),
    #[error(transparent)]
    List(#[from] client::ListError),
}

/// A server's state, for `mcp list` and the client.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub origin: String,
    /// `stdio: COMMAND ARGS` or `http: URL`.
    pub transport: String,
    /// `running`, `failed: REASON` or `stopped`.
    pub state: String,
    /// The tool names the model sees.
    pub tools: Vec<String>,
}

/// The limits every server of a daemon runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub startup: Duration,
    pub call: Duration,
    /// The output cap in bytes, and the setting that set it.
    pub output_cap: usize,
    pub output_cap_setting: &'static str,
    pub max_message: usize,
    pub max_servers: usize,
}

impl From<&McpConfig> for Limits {
    fn from(c: &McpConfig) -> Self {
        let (output_cap, output_cap_setting) = c.output_cap();
        Limits {
            startup: Duration::from_secs(c.startup_timeout_secs),
            call: Duration::from_secs(c.call_timeout_secs),
            output_cap,
            output_cap_setting,
            max_message: c.max_message_bytes,
            max_servers: c.max_servers_per_session,
        }
    }
}

type Service = RunningService<RoleClient, PassepartoutClient>;

/// One connected (or failed) server.
pub struct Server {
    pub spec: ServerSpec,
    /// What it offers, as last listed (re-listed on `list_changed`).
    catalog: Arc<Mutex<Catalog>>,
    /// The progress of the call in flight (see [`client::ProgressSlot`]).
    progress: client::ProgressSlot,
    peer: Option<Peer<RoleClient>>,
    service: tokio::sync::Mutex<Option<Service>>,
    failure: Mutex<Option<String>>,
    stderr: Arc<Mutex<String>>,
    /// Its questions for the person, and the lines about them the model
    /// reads with the next result.
    questions: Arc<elicitation::ServerQuestions>,
    /// Its session and the link to the client, to announce a state change
    /// mid-session ([`proto::EXT_MCP_SERVER`]).
    session: Option<(String, Arc<elicitation::ElicitationLink>)>,
}

impl Server {
    /// The failure, with the tail of the server's stderr when it said
    /// anything.
    fn failure_with_stderr(&self, reason: &str) -> String {
        let tail = lock(&self.stderr).trim().to_string();
        if tail.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}; its stderr ends with: {tail}")
        }
    }

    fn fail(&self, reason: &str) -> String {
        let message = self.failure_with_stderr(reason);
        *lock(&self.failure) = Some(message.clone());
        message
    }

    /// Tell the client that this server, running until now, stopped or
    /// needs a login: its state there (the session's `mcpServers`) would
    /// otherwise say "running" until the session is loaded again. Called
    /// once, when the failure is first noticed (later calls return the
    /// failure before reaching the server).
    fn announce_state(&self) {
        if let Some((session, link)) = &self.session {
            link.announce(
                proto::EXT_MCP_SERVER,
                serde_json::json!({ "sessionId": session, "server": self.status() }),
            );
        }
    }

    /// Started, not failed, and its connection still open.
    pub fn is_running(&self) -> bool {
        self.failure().is_none() && self.peer.as_ref().is_some_and(|p| !p.is_transport_closed())
    }

    pub fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    pub fn status(&self) -> ServerStatus {
        let state = match (self.failure(), &self.peer) {
            (Some(f), _) => format!("failed: {f}"),
            (None, Some(p)) if p.is_transport_closed() => "stopped".into(),
            (None, Some(_)) => "running".into(),
            (None, None) => "stopped".into(),
        };
        ServerStatus {
            name: self.spec.name.clone(),
            origin: self.spec.origin.to_string(),
            transport: describe(&self.spec.transport),
            state,
            tools: lock(&self.catalog)
                .tools
                .iter()
                .filter_map(|t| tool::tool_name(&self.spec.prefix, &t.name))
                .collect(),
        }
    }

    /// The daemon's lines about this server's questions (declined, not
    /// shown), added after a result the model reads: outside the result's
    /// untrusted wrapper, since they are the daemon's words.
    pub fn with_notes(&self, text: String) -> String {
        let notes = self.questions.take_notes();
        if notes.is_empty() {
            return text;
        }
        format!("{text}\n{}", notes.join("\n"))
    }

    /// Call one tool with a time limit; cancellation wins. The time a
    /// question waits for the person does not count: the clock restarts
    /// when it is answered.
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Value,
        timeout: Duration,
        cancel: &CancellationToken,
        progress: Option<client::ProgressFn>,
    ) -> Result<CallToolResult, CallError> {
        let name = self.spec.name.clone();
        if let Some(reason) = self.failure() {
            return Err(CallError::NotRunning { name, reason });
        }
        let Some(peer) = &self.peer else {
            return Err(CallError::NotRunning {
                name,
                reason: "it was stopped".into(),
            });
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let serde_json::Value::Object(map) = arguments {
            params = params.with_arguments(map);
        }
        // Kept until the call is over: the server's progress notifications
        // (rmcp sends every request with a progress token) go to `progress`.
        let _route = progress.map(|to| client::ProgressRoute::new(&self.progress, to));
        let answer = tokio::select! {
            _ = cancel.cancelled() => {
                self.questions.cancel();
                return Err(CallError::Cancelled);
            }
            answer = self.timed(timeout, peer.call_tool(params)) => answer,
        };
        if answer.is_err() {
            self.questions.cancel();
        }
        match answer {
            Err(_) => Err(CallError::Timeout {
                name,
                secs: timeout.as_secs(),
            }),
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => {
                if let Some(reason) = self.refused_login(&e) {
                    Err(CallError::NotRunning { name, reason })
                } else if peer.is_transport_closed()
                    || matches!(e, rmcp::ServiceError::TransportClosed)
                {
                    // Give the stderr reader a moment to catch the last words.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let reason = self.fail(&format!(
                        "it stopped during the call ({})",
                        readable_service_error(&e)
                    ));
                    self.announce_state();
                    Err(CallError::NotRunning { name, reason })
                } else {
                    Err(CallError::Failed {
                        name,
                        reason: readable_service_error(&e),
                    })
                }
            }
        }
    }

    /// `call` within `timeout`, the clock paused while the person is asked
    /// and restarted when they answer.
    async fn timed<T>(
        &self,
        timeout: Duration,
        call: impl std::future::Future<Output = T>,
    ) -> Result<T, tokio::time::error::Elapsed> {
        let started = tokio::time::Instant::now();
        let mut deadline = started + timeout;
        tokio::pin!(call);
        loop {
            match tokio::time::timeout_at(deadline, &mut call).await {
                Ok(done) => return Ok(done),
                Err(elapsed) => {
                    if self.questions.asking() {
                        deadline = tokio::time::Instant::now() + Duration::from_millis(200);
                        continue;
                    }
                    let answered = self
                        .questions
                        .answered_at()
                        .map(tokio::time::Instant::from_std);
                    match answered {
                        Some(at) if at > started && at + timeout > deadline => {
                            deadline = at + timeout;
                        }
                        _ => return Err(elapsed),
                    }
                }
            }
        }
    }

    /// Read one resource with a time limit; cancellation wins.
    pub async fn read_resource(
        &self,
        uri: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<rmcp::model::ReadResourceResult, CallError> {
        let name = self.spec.name.clone();
        if let Some(reason) = self.failure() {
            return Err(CallError::NotRunning { name, reason });
        }
        let Some(peer) = &self.peer else {
            return Err(CallError::NotRunning {
                name,
                reason: "it was stopped".into(),
            });
        };
        let params = rmcp::model::ReadResourceRequestParams::new(uri.to_string());
        let answer = tokio::select! {
            _ = cancel.cancelled() => return Err(CallError::Cancelled),
            answer = tokio::time::timeout(timeout, peer.read_resource(params)) => answer,
        };
        match answer {
            Err(_) => Err(CallError::Timeout {
                name,
                secs: timeout.as_secs(),
            }),
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => match self.refused_login(&e) {
                Some(reason) => Err(CallError::NotRunning { name, reason }),
                None => Err(CallError::Failed {
                    name,
                    reason: readable_service_error(&e),
                }),
            },
        }
    }

    /// When a request failed because the server refused the session's
    /// token (expired or revoked mid-session, and the refresh refused too):
    /// the server's state becomes the same "needs login" a server without
    /// a token gets at start — it did not crash, and what fixes it is
    /// `mcp login` — and that state is returned.
    fn refused_login(&self, error: &rmcp::ServiceError) -> Option<String> {
        if !(error.is_authorization_required() || oauth::needs_login(error)) {
            return None;
        }
        let hint = oauth::login_hint(login_name(&self.spec));
        *lock(&self.failure) = Some(hint.clone());
        tracing::warn!(target: crate::logging::REPORTED_STATE, server = %self.spec.name, "MCP server refused the session's token: {hint}");
        self.announce_state();
        Some(hint)
    }

    async fn stop(&self) {
        let service = self.service.lock().await.take();
        if let Some(service) = service {
            if tokio::time::timeout(STOP_GRACE, service.cancel())
                .await
                .is_err()
            {
                tracing::warn!(server = %self.spec.name, "MCP server did not stop in time; killed");
            }
        }
    }
}

/// `stdio: COMMAND ARGS` or `http: URL` (headers and env are not shown:
/// they may hold secrets).
pub fn describe(t: &Transport) -> String {
    match t {
        Transport::Stdio { command, args, .. } => {
            let mut s = format!("stdio: {}", command.display());
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        Transport::Http { url, .. } => format!("http: {url}"),
        Transport::Sse { url, .. } => format!("sse: {url}"),
    }
}

/// The name `mcp login` knows a server by: its config name, or its URL
/// for a server an ACP client named (not in config.toml).
fn login_name(spec: &ServerSpec) -> &str {
    match &spec.transport {
        Transport::Http { url, .. } | Transport::Sse { url, .. }
            if spec.origin == Origin::Client =>
        {
            url.as_str()
        }
        _ => spec.name.as_str(),
    }
}

/// Start one server and list its tools within the startup limit. Never
/// fails: a failure is kept in the server's state.
pub async fn start(
    spec: ServerSpec,
    cwd: &Path,
    limits: Limits,
    asking: Option<(String, Arc<elicitation::ElicitationLink>)>,
) -> Server {
    let stderr = Arc::new(Mutex::new(String::new()));
    let catalog = Arc::new(Mutex::new(Catalog::default()));
    let progress = client::ProgressSlot::default();
    let questions = Arc::new(elicitation::ServerQuestions::default());
    let session = asking.clone();
    let asker = asking.map(|(session, link)| elicitation::Asker {
        server: spec.name.clone(),
        session,
        link,
        questions: questions.clone(),
    });
    let connected = tokio::time::timeout(
        limits.startup,
        connect(
            &spec,
            cwd,
            limits,
            stderr.clone(),
            catalog.clone(),
            asker,
            progress.clone(),
        ),
    )
    .await;
    let (service, failure) = match connected {
        Ok(Ok(service)) => (Some(service), None),
        Ok(Err(reason)) => (None, Some(reason.to_string())),
        Err(_) => (
            None,
            Some(format!(
                "it did not start within {} s (mcp.startup_timeout_secs)",
                limits.startup.as_secs()
            )),
        ),
    };
    let server = Server {
        peer: service.as_ref().map(|s| s.peer().clone()),
        spec,
        catalog,
        progress,
        service: tokio::sync::Mutex::new(service),
        failure: Mutex::new(None),
        stderr,
        questions,
        session,
    };
    if let Some(reason) = failure {
        // The stderr reader may still be draining the child's last words.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let message = server.fail(&reason);
        if reason == oauth::login_hint(login_name(&server.spec)) {
            // A state, not a fault: the client is told through the server
            // states, and stderr is shown by ACP clients as an error.
            tracing::warn!(target: crate::logging::REPORTED_STATE, server = %server.spec.name, "MCP server {message}");
        } else {
            tracing::warn!(server = %server.spec.name, "MCP server failed to start: {message}");
        }
    } else {
        tracing::info!(server = %server.spec.name, tools = lock(&server.catalog).tools.len(), "MCP server started");
    }
    server
}

async fn connect(
    spec: &ServerSpec,
    cwd: &Path,
    limits: Limits,
    stderr: Arc<Mutex<String>>,
    catalog: Arc<Mutex<Catalog>>,
    asker: Option<elicitation::Asker>,
    progress: client::ProgressSlot,
) -> Result<Service, StartError> {
    let handler = PassepartoutClient::new(&spec.name, cwd, catalog.clone(), asker, progress);
    let service = match &spec.transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).current_dir(cwd).env_clear();
            for key in INHERITED_ENV {
                if let Some(v) = std::env::var_os(key) {
                    cmd.env(key, v);
                }
            }
            cmd.envs(env);
            let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
            // Its own process group, killed whole when the server goes.
            wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
            wrapped.wrap(process_wrap::tokio::KillOnDrop);
            wrapped.command_mut().stderr(std::process::Stdio::piped());
            let (process, err) =
                transport::BoundedChild::spawn(wrapped, limits.max_message, spec.name.clone())
                    .map_err(|source| StartError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
            if let Some(err) = err {
                tokio::spawn(keep_stderr_tail(spec.name.clone(), err, stderr));
            }
            handler
                .serve(process)
                .await
                .map_err(|e| StartError::Init(readable_init_error(&e, None)))?
        }
        Transport::Http {
            url,
            headers,
            token_dir,
        } => {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            use rmcp::transport::StreamableHttpClientTransport;
            // reqwest is built without a default crypto provider (see
            // setup.rs); `mcp list` does not go through setup, so make sure.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(transport::header_map(headers)?)
                .max_sse_event_size(limits.max_message)
                .max_json_response_size(limits.max_message);
            let client = transport::BoundedHttp {
                client: reqwest::Client::new(),
                cap: limits.max_message,
            };
            // A server answering 401 needs `mcp login`: said so, with the
            // name `mcp login` knows it by.
            let who = login_name(spec);
            let init_error = |e: rmcp::service::ClientInitializeError| {
                StartError::Init(if oauth::needs_login(&e) {
                    oauth::login_hint(who)
                } else {
                    readable_init_error(&e, Some(url))
                })
            };
            let authorized = match token_dir {
                Some(dir) => oauth::authorized_client(dir, url, client.clone()).await?,
                None => None,
            };
            match authorized {
                Some(client) => handler
                    .serve(StreamableHttpClientTransport::with_client(client, config))
                    .await
                    .map_err(init_error)?,
                None => handler
                    .serve(StreamableHttpClientTransport::with_client(client, config))
                    .await
                    .map_err(init_error)?,
            }
        }
        Transport::Sse { url, headers } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let sse = sse::SseTransport::connect(
                url,
                transport::header_map(headers)?,
                limits.max_message,
                spec.name.clone(),
            )
            .await?;
            handler
                .serve(sse)
                .await
                .map_err(|e| StartError::Init(readable_init_error(&e, Some(url))))?
        }
    };
    let listed = client::list_catalog(service.peer()).await?;
    *lock(&catalog) = listed;
    Ok(service)
}

/// A prompt's arguments from the text after its command: `name=value`
/// words for the names it declares; otherwise, for a prompt with one
/// argument, the whole text.
fn prompt_arguments(
    prompt: &rmcp::model::Prompt,
    text: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let declared: Vec<&str> = prompt
        .arguments
        .iter()
        .flatten()
        .map(|a| a.name.as_str())
        .collect();
    let mut map = serde_json::Map::new();
    for word in text.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            if declared.contains(&k) {
                map.insert(k.to_string(), serde_json::Value::String(v.to_string()));
            }
        }
    }
    if map.is_empty() && declared.len() == 1 && !text.is_empty() {
        map.insert(
            declared[0].to_string(),
            serde_json::Value::String(text.to_string()),
        );
    }
    map
}

/// The innermost cause of an error: what went wrong, without the type
/// names of the layers (rmcp, reqwest, hyper) it passed through.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut cause = error;
    loop {
        // rmcp's HTTP client error does not name its cause as a source.
        if let Some(StreamableHttpError::Client(inner)) =
            cause.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            cause = inner;
            continue;
        }
        match cause.source() {
            Some(next) => cause = next,
            None => break,
        }
    }
    let text = cause.to_string();
    // "Connection refused (os error 111)" reads as "connection refused".
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Why the MCP handshake failed, said for a person.
fn readable_init_error(error: &rmcp::service::ClientInitializeError, url: Option<&str>) -> String {
    use rmcp::service::ClientInitializeError as E;
    match error {
        E::ConnectionClosed(_) => {
            "it closed the connection before answering `initialize`".to_string()
        }
        E::JsonRpcError(e) => format!("it refused `initialize`: {}", e.message),
        E::TransportError { error, .. } => match url {
            Some(url) => format!("cannot reach {url}: {}", root_cause(error)),
            None => format!("its connection failed: {}", root_cause(error)),
        },
        E::LegacyFallbackFailed { fallback, .. } => readable_init_error(fallback, url),
        E::Cancelled => "cancelled".to_string(),
        _ => root_cause(error),
    }
}

/// Why a request failed, said for a person (no Rust type names).
pub fn readable_service_error(error: &rmcp::ServiceError) -> String {
    use rmcp::ServiceError as E;
    match error {
        E::McpError(e) => e.message.to_string(),
        E::TransportClosed => "the connection closed".to_string(),
        E::Timeout { timeout } => format!("no answer within {} s", timeout.as_secs()),
        E::Cancelled { .. } => "cancelled".to_string(),
        E::TransportSend(e) => format!("sending to it failed: {}", root_cause(e)),
        _ => root_cause(error),
    }
}

/// Keep the last [`STDERR_TAIL_BYTES`] of a server's stderr and log it.
async fn keep_stderr_tail(
    name: String,
    err: tokio::process::ChildStderr,
    tail: Arc<Mutex<String>>,
) {
    let mut lines = tokio::io::BufReader::new(err).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %name, "stderr: {line}");
        let mut t = lock(&tail);
        if !t.is_empty() {
            t.push('\n');
        }
        t.push_str(&line);
        if t.len() > STDERR_TAIL_BYTES {
            let mut cut = t.len() - STDERR_TAIL_BYTES;
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            t.drain(..cut);
        }
    }
}

/// The servers of every session of a daemon.
pub struct McpManager {
    limits: Limits,
    /// Global config.toml servers, started for every session.
    configured: Vec<ServerSpec>,
    /// Configured entries that were refused, with why.
    invalid: Vec<String>,
    sessions: Mutex<HashMap<String, Vec<Arc<Server>>>>,
    /// The trust store project configs are judged against (None: no
    /// project server ever starts).
    trust_file: Option<std::path::PathBuf>,
    /// Whether trusted project entries keep `approval = "auto"`.
    project_auto_approval: bool,
    /// Where servers' questions for the person go (set at `initialize`).
    elicitation: Arc<elicitation::ElicitationLink>,
    /// Where `mcp login` keeps OAuth tokens (None: none are sent).
    oauth_dir: Option<std::path::PathBuf>,
}

impl McpManager {
    /// Check the configured servers; a bad entry is logged and left out.
    pub fn new(config: &McpConfig) -> McpManager {
        let mut configured = Vec::new();
        let mut invalid = Vec::new();
        for entry in &config.servers {
            match entry.to_spec() {
                Ok(Some(spec)) => configured.push(spec),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!("config.toml: {e}; the server is left out");
                    invalid.push(e.to_string());
                }
            }
        }
        McpManager {
            limits: Limits::from(config),
            configured,
            invalid,
            sessions: Mutex::default(),
            trust_file: None,
            project_auto_approval: false,
            elicitation: Arc::default(),
            oauth_dir: None,
        }
    }

    /// Where the servers' questions for the person go: the server connects
    /// it at `initialize` with the client's `elicitation` capability.
    pub fn elicitation(&self) -> &elicitation::ElicitationLink {
        &self.elicitation
    }

    /// Send the OAuth tokens `mcp login` stored in `dir` to their servers.
    pub fn with_oauth_tokens(mut self, dir: std::path::PathBuf) -> Self {
        self.oauth_dir = Some(dir);
        self
    }

    /// The config.toml entries that were refused, with why.
    pub fn invalid(&self) -> &[String] {
        &self.invalid
    }

    /// Whether config.toml names any server that can start.
    pub fn has_configured(&self) -> bool {
        !self.configured.is_empty()
    }

    /// Start the servers of a project's `.passepartout/config.toml` when
    /// the trust store at `trust_file` trusts its exact content.
    pub fn with_project_trust(mut self, trust_file: std::path::PathBuf, keep_auto: bool) -> Self {
        self.trust_file = Some(trust_file);
        self.project_auto_approval = keep_auto;
        self
    }

    /// The project's trusted servers whose names are free, and the status
    /// lines of those that will not start (untrusted, invalid, name taken).
    fn project_specs(
        &self,
        cwd: &Path,
        taken: &[ServerSpec],
    ) -> (Vec<ServerSpec>, Vec<ServerStatus>) {
        let refused = |name: String, state: String| ServerStatus {
            name,
            origin: Origin::Project.to_string(),
            transport: String::new(),
            state,
            tools: Vec::new(),
        };
        match project::project_servers(cwd, self.trust_file.as_deref(), self.project_auto_approval)
        {
            project::ProjectServers::None => (Vec::new(), Vec::new()),
            project::ProjectServers::Invalid { path, problem } => {
                tracing::warn!(
                    "{}: {problem}; no project MCP server starts",
                    path.display()
                );
                (
                    Vec::new(),
                    vec![refused(
                        path.display().to_string(),
                        format!("invalid: {problem}"),
                    )],
                )
            }
            project::ProjectServers::Untrusted {
                path,
                names,
                changed,
                bound,
            } => {
                let why = if changed && bound.is_empty() {
                    format!("changed since trusted; {}", project::trust_hint(&path))
                } else if changed {
                    let files: Vec<String> =
                        bound.iter().map(|p| p.display().to_string()).collect();
                    format!(
                        "changed since trusted (the config or a file its servers run: {}); {}",
                        files.join(", "),
                        project::trust_hint(&path)
                    )
                } else {
                    project::trust_hint(&path)
                };
                let statuses = names.into_iter().map(|n| refused(n, why.clone())).collect();
                (Vec::new(), statuses)
            }
            project::ProjectServers::Trusted(specs) => {
                let mut keep = Vec::new();
                let mut statuses = Vec::new();
                for spec in specs {
                    if taken.iter().any(|t| t.prefix == spec.prefix) {
                        statuses.push(refused(
                            spec.name.clone(),
                            format!(
                                "refused: the name `{}` is already used by the global config or the client; a project entry never replaces one",
                                spec.name
                            ),
                        ));
                    } else {
                        keep.push(spec);
                    }
                }
                (keep, statuses)
            }
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Start the configured servers and the client's for a session.
    /// A client server that fails to start fails the whole call (and stops
    /// the others); a configured server that fails stays listed as failed.
    pub async fn start_session(
        &self,
        session_id: &str,
        cwd: &Path,
        client: &[crate::protocol::acp::McpServer],
    ) -> Result<Vec<ServerStatus>, McpError> {
        let mut specs = self.configured.clone();
        for s in client {
            specs.push(config::from_acp(s)?);
        }
        let (project_specs, not_started) = self.project_specs(cwd, &specs);
        specs.extend(project_specs);
        if let Some(dir) = &self.oauth_dir {
            for spec in &mut specs {
                spec.transport.set_token_dir(dir);
            }
        }
        if specs.len() > self.limits.max_servers {
            return Err(McpError::TooMany {
                count: specs.len(),
                limit: self.limits.max_servers,
            });
        }
        let mut seen = BTreeMap::new();
        for s in &specs {
            if seen.insert(s.prefix.clone(), ()).is_some() {
                return Err(McpError::DuplicateName(s.prefix.clone()));
            }
        }
        if specs.is_empty() {
            return Ok(not_started);
        }
        // Each server on its own task, with its own whole startup time:
        // slow starters do not wait on each other.
        let limits = self.limits;
        let tasks = specs.into_iter().map(|s| {
            let cwd = cwd.to_path_buf();
            let asking = Some((session_id.to_string(), self.elicitation.clone()));
            tokio::spawn(async move { start(s, &cwd, limits, asking).await })
        });
        let mut started: Vec<Server> = Vec::new();
        for joined in futures::future::join_all(tasks).await {
            match joined {
                Ok(server) => started.push(server),
                Err(e) => tracing::error!("an MCP server's start task failed: {e}"),
            }
        }
        let started: Vec<Arc<Server>> = started.into_iter().map(Arc::new).collect();
        let failed_client = started
            .iter()
            .find(|s| s.spec.origin == Origin::Client && s.failure().is_some());
        if let Some(bad) = failed_client {
            let error = McpError::Start {
                name: bad.spec.name.clone(),
                reason: bad.failure().unwrap_or_default(),
            };
            for s in &started {
                s.stop().await;
            }
            return Err(error);
        }
        let mut statuses: Vec<ServerStatus> = started.iter().map(|s| s.status()).collect();
        statuses.extend(not_started);
        lock(&self.sessions).insert(session_id.to_string(), started);
        Ok(statuses)
    }

    /// Add the session's MCP tools to a turn's toolset.
    pub fn register_tools(&self, session_id: &str, tools: &mut ToolRegistry) {
        let sessions = lock(&self.sessions);
        let Some(servers) = sessions.get(session_id) else {
            return;
        };
        for server in servers.iter().filter(|s| s.is_running()) {
            let (listed, resources) = {
                let catalog = lock(&server.catalog);
                (catalog.tools.clone(), catalog.resources.clone())
            };
            let own_reader = listed.iter().any(|t| t.name == tool::READ_RESOURCE_TOOL);
            if !own_reader {
                if let Some(reader) = tool::resource_tool(
                    &server.spec.name,
                    &server.spec.prefix,
                    server.spec.approval,
                    self.limits.call.as_secs(),
                    &resources,
                ) {
                    tools.register(reader);
                }
            }
            for t in &listed {
                match tool::to_tool(
                    &server.spec.name,
                    &server.spec.prefix,
                    server.spec.approval,
                    self.limits.call.as_secs(),
                    t,
                ) {
                    Some(tool) => tools.register(tool),
                    None => tracing::warn!(
                        server = %server.spec.name,
                        "MCP tool `{}` left out: its name does not fit in 64 characters",
                        t.name
                    ),
                }
            }
        }
    }

    /// The session's MCP prompts as slash commands (`/mcp__<server>__<prompt>`),
    /// for `available_commands_update`; the description is the server's,
    /// marked untrusted.
    pub fn prompt_commands(&self, session_id: &str) -> Vec<crate::protocol::acp::AvailableCommand> {
        use crate::protocol::acp;
        let sessions = lock(&self.sessions);
        let Some(servers) = sessions.get(session_id) else {
            return Vec::new();
        };
        let mut commands = Vec::new();
        for server in servers.iter().filter(|s| s.is_running()) {
            for p in &lock(&server.catalog).prompts {
                let Some(name) = tool::tool_name(&server.spec.prefix, &p.name) else {
                    continue;
                };
                let description =
                    tool::marked_description(&server.spec.name, p.description.as_deref());
                let mut command = acp::AvailableCommand::new(name, description);
                let arguments: Vec<String> = p
                    .arguments
                    .iter()
                    .flatten()
                    .map(|a| format!("{}=…", a.name))
                    .collect();
                if !arguments.is_empty() {
                    command = command.input(acp::AvailableCommandInput::Unstructured(
                        acp::UnstructuredCommandInput::new(arguments.join(" ")),
                    ));
                }
                commands.push(command);
            }
        }
        commands
    }

    /// `prompt` with a leading `/mcp__<server>__<prompt> ARGS` replaced by
    /// that prompt's messages, fetched from the server (`ARGS` as
    /// `name=value` words, or all of it for a prompt's single argument);
    /// unchanged when it names no prompt of the session. A failure becomes
    /// the text, so the person sees why.
    pub async fn expand_prompt(&self, session_id: &str, prompt: String) -> String {
        let Some((name, args)) = crate::skills::slash_command(&prompt) else {
            return prompt;
        };
        let found = {
            let sessions = lock(&self.sessions);
            sessions.get(session_id).and_then(|servers| {
                servers.iter().find_map(|server| {
                    let catalog = lock(&server.catalog);
                    catalog
                        .prompts
                        .iter()
                        .find(|p| {
                            tool::tool_name(&server.spec.prefix, &p.name).as_deref() == Some(name)
                        })
                        .map(|p| (server.clone(), p.clone()))
                })
            })
        };
        let Some((server, listed)) = found else {
            return prompt;
        };
        let arguments = prompt_arguments(&listed, args.trim());
        let Some(peer) = server.peer.clone() else {
            return prompt;
        };
        let params =
            rmcp::model::GetPromptRequestParams::new(listed.name.clone()).with_arguments(arguments);
        let answer = tokio::time::timeout(self.limits.call, peer.get_prompt(params)).await;
        let text = match answer {
            Ok(Ok(result)) => result
                .messages
                .iter()
                .filter_map(|m| match &m.content {
                    rmcp::model::ContentBlock::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n\n"),
            Ok(Err(e)) => {
                return format!(
                    "{prompt}\n\n[the MCP prompt could not be fetched: {}]",
                    readable_service_error(&e)
                )
            }
            Err(_) => {
                return format!(
                    "{prompt}\n\n[the MCP prompt could not be fetched: no answer within {} s (mcp.call_timeout_secs)]",
                    self.limits.call.as_secs()
                )
            }
        };
        let text = tool::cap_text(text, self.limits.output_cap, self.limits.output_cap_setting);
        format!(
            "[prompt `{}` from MCP server `{}`, as the server wrote it]\n{text}",
            listed.name, server.spec.name
        )
    }

    /// The resources among `uris` (a prompt's `resource_link`s, an
    /// `@`-mention) that a running server of the session lists: the
    /// reader tool's name for each (`mcp__<server>__read_resource`) and
    /// the URI, at most [`MAX_MENTIONED`], in the prompt's order.
    pub fn mentioned_resources(&self, session_id: &str, uris: &[&str]) -> Vec<(String, String)> {
        let sessions = lock(&self.sessions);
        let Some(servers) = sessions.get(session_id) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for uri in uris {
            let reader = servers
                .iter()
                .filter(|s| s.is_running())
                .find_map(|server| {
                    let catalog = lock(&server.catalog);
                    let own_reader = catalog
                        .tools
                        .iter()
                        .any(|t| t.name == tool::READ_RESOURCE_TOOL);
                    let listed = catalog.resources.iter().any(|r| r.uri == *uri);
                    (listed && !own_reader)
                        .then(|| tool::tool_name(&server.spec.prefix, tool::READ_RESOURCE_TOOL))
                        .flatten()
                });
            if let Some(reader) = reader {
                if !found.iter().any(|(_, u)| u == uri) && found.len() < MAX_MENTIONED {
                    found.push((reader, uri.to_string()));
                }
            }
        }
        found
    }

    /// A server of a session, by its prefix.
    pub fn server(&self, session_id: &str, prefix: &str) -> Result<Arc<Server>, CallError> {
        lock(&self.sessions)
            .get(session_id)
            .and_then(|servers| servers.iter().find(|s| s.spec.prefix == prefix).cloned())
            .ok_or_else(|| CallError::UnknownServer(prefix.to_string()))
    }

    /// The servers of a session (all sessions' when None).
    pub fn status(&self, session_id: Option<&str>) -> Vec<ServerStatus> {
        let sessions = lock(&self.sessions);
        sessions
            .iter()
            .filter(|(id, _)| session_id.is_none_or(|s| s == id.as_str()))
            .flat_map(|(_, servers)| servers.iter().map(|s| s.status()))
            .collect()
    }

    /// Stop a session's servers.
    pub async fn stop_session(&self, session_id: &str) {
        let servers = lock(&self.sessions).remove(session_id);
        for s in servers.into_iter().flatten() {
            s.stop().await;
        }
    }

    /// Stop every server (the daemon is going away).
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Server>> = lock(&self.sessions)
            .drain()
            .flat_map(|(_, servers)| servers)
            .collect();
        futures::future::join_all(all.iter().map(|s| s.stop())).await;
    }
}
