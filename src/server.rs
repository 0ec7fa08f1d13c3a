//! The daemon: ACP methods and `_passepartout/...` extensions over one
//! JSON-RPC connection, many sessions at once.
//!
//! Handlers are registered on a jsonrpsee [`RpcModule`]; [`crate::rpc::serve`]
//! runs each request in its own task, so a long `session/prompt` never blocks
//! `session/cancel` or a plan decision.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Params};
use jsonrpsee::RpcModule;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{turn, AgentEnv, ApprovalOutcome, ApprovalRequest, Approver, Session, TurnSink};
use crate::audit::{AuditRecord, PlanOutcome};
use crate::flight::{DecideError, FlightDesk};
use crate::protocol::{self as proto, acp, ClientSettings, SessionStatus};
use crate::rpc::message::codes;
use crate::rpc::Outgoing;

/// Daemon state shared by all handlers.
pub struct Daemon {
    pub env: Arc<AgentEnv>,
    pub out: Outgoing,
    pub desk: Arc<FlightDesk>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    settings: Mutex<ClientSettings>,
    /// Tools a person chose "allow always" / "reject always" for, per session.
    remembered: Mutex<HashMap<String, HashMap<String, bool>>>,
    next_session: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn rpc_error(code: i32, message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObject::owned(code, message.into(), None::<()>)
}

fn invalid_params(message: impl Into<String>) -> ErrorObjectOwned {
    rpc_error(codes::INVALID_PARAMS, message)
}

impl Daemon {
    pub fn new(env: Arc<AgentEnv>, out: Outgoing) -> Arc<Daemon> {
        let desk = FlightDesk::new(env.clone(), out.clone());
        Arc::new(Daemon {
            env,
            out,
            desk,
            sessions: Mutex::default(),
            settings: Mutex::default(),
            remembered: Mutex::default(),
            next_session: AtomicU64::new(1),
        })
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, ErrorObjectOwned> {
        lock(&self.sessions).get(id).cloned().ok_or_else(|| {
            invalid_params(format!(
                "unknown session `{id}`: create one with session/new, or load a stored one with session/load"
            ))
        })
    }

    /// Cancel every running turn (the client went away).
    pub fn cancel_all(&self) {
        for s in lock(&self.sessions).values() {
            s.cancel();
        }
    }

    pub fn uses_flight_plans(&self) -> bool {
        lock(&self.settings).flight_plans
    }

    fn initialize(
        &self,
        req: acp::InitializeRequest,
    ) -> Result<acp::InitializeResponse, ErrorObjectOwned> {
        let settings = proto::client_settings(req.meta.as_ref()).map_err(invalid_params)?;
        let mut providers = settings
            .providers
            .clone()
            .unwrap_or_else(|| self.env.config.providers.clone());
        for p in &mut providers {
            if let Some(key) = settings.api_keys.get(&p.name) {
                p.api_key = Some(key.clone());
            }
        }
        if settings.providers.is_some() || !settings.api_keys.is_empty() {
            let cascade = crate::llm::config::build_cascade(&providers)
                .map_err(|e| invalid_params(format!("provider settings from the editor: {e}")))?;
            self.env.set_models(cascade);
        }
        tracing::info!(
            client = ?req.client_info.as_ref().map(|c| c.name.clone()),
            flight_plans = settings.flight_plans,
            "initialize"
        );
        let flight_plans = settings.flight_plans;
        if settings.emacs {
            self.env.editor.connect(self.out.clone());
        }
        *lock(&self.settings) = settings;
        self.out
            .notify(proto::EXT_SANDBOX_STATUS, &self.env.sandbox);
        if flight_plans {
            // Plans outlive daemons and editors: offer the pending ones again.
            self.desk.offer_pending();
        }
        let caps = acp::AgentCapabilities::new()
            .prompt_capabilities(acp::PromptCapabilities::new().embedded_context(true))
            .load_session(self.env.sessions.is_some())
            .session_capabilities(
                acp::SessionCapabilities::new().list(acp::SessionListCapabilities::new()),
            );
        let mut meta = serde_json::Map::new();
        meta.insert(
            "passepartout".into(),
            serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "providers": providers.iter().map(|p| format!("{} ({})", p.name, p.base_url)).collect::<Vec<_>>(),
            }),
        );
        Ok(
            acp::InitializeResponse::new(agent_client_protocol_schema::ProtocolVersion::V1)
                .agent_capabilities(caps)
                .agent_info(acp::Implementation::new(
                    "passepartout",
                    env!("CARGO_PKG_VERSION"),
                ))
                .meta(meta),
        )
    }

    fn new_session(
        &self,
        req: acp::NewSessionRequest,
    ) -> Result<acp::NewSessionResponse, ErrorObjectOwned> {
        let cwd = usable_cwd(req.cwd)?;
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        let id = crate::sessions::new_id(n);
        tracing::info!(session = %id, cwd = %cwd.display(), "session/new");
        let mut session = Session::new(id.clone(), cwd.clone());
        if let Some(store) = &self.env.sessions {
            match store.create(&id, &cwd) {
                Ok(journal) => session = session.with_journal(journal),
                Err(e) => tracing::error!(session = %id, "session will not be saved: {e}"),
            }
        }
        lock(&self.sessions).insert(id.clone(), Arc::new(session));
        Ok(acp::NewSessionResponse::new(acp::SessionId::new(id)))
    }

    /// ACP `session/load`: read the journal, replay it as `session/update`s
    /// (before this response), and make the session live again.
    fn load_session(
        &self,
        req: acp::LoadSessionRequest,
    ) -> Result<acp::LoadSessionResponse, ErrorObjectOwned> {
        let id = req.session_id.0.to_string();
        let cwd = usable_cwd(req.cwd)?;
        let store = self.env.sessions.as_ref().ok_or_else(|| {
            rpc_error(
                proto::RESOURCE_NOT_FOUND,
                format!("session `{id}` not found: this daemon keeps no sessions ([sessions] persist = false)"),
            )
        })?;
        let loaded = store.load(&id).map_err(|e| match e {
            crate::sessions::StoreError::NotFound(_) => rpc_error(
                proto::RESOURCE_NOT_FOUND,
                format!("session `{id}` not found (session/list shows the stored ones)"),
            ),
            crate::sessions::StoreError::BadId(_) => invalid_params(e.to_string()),
            other => rpc_error(codes::INTERNAL_ERROR, format!("session `{id}`: {other}")),
        })?;
        tracing::info!(session = %id, cwd = %cwd.display(), messages = loaded.history.len(), "session/load");
        let replay = loaded.replay.clone();
        let live = lock(&self.sessions).get(&id).cloned();
        if live.is_none() {
            let journal = store
                .reopen(&id)
                .map_err(|e| rpc_error(codes::INTERNAL_ERROR, e.to_string()))?;
            let session = Session::restored(loaded, cwd, Some(journal));
            lock(&self.sessions).insert(id.clone(), Arc::new(session));
        }
        let sink = RpcSink {
            out: self.out.clone(),
            session_id: id,
        };
        for item in replay {
            match item {
                crate::sessions::Replay::User(t) => sink.update(
                    acp::SessionUpdate::UserMessageChunk(acp::ContentChunk::new(t.into())),
                ),
                crate::sessions::Replay::Agent(t) => sink.update(
                    acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(t.into())),
                ),
                crate::sessions::Replay::Thought(t) => sink.update(
                    acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(t.into())),
                ),
                crate::sessions::Replay::Update(v) => {
                    match serde_json::from_value::<acp::SessionUpdate>(v) {
                        Ok(u) => sink.update(u),
                        Err(e) => tracing::warn!("a stored update no longer reads: {e}"),
                    }
                }
            }
        }
        Ok(acp::LoadSessionResponse::new())
    }

    /// ACP `session/list`: stored sessions, most recently active first.
    fn list_sessions(
        &self,
        req: acp::ListSessionsRequest,
    ) -> Result<acp::ListSessionsResponse, ErrorObjectOwned> {
        let Some(store) = &self.env.sessions else {
            return Ok(acp::ListSessionsResponse::new(Vec::new()));
        };
        let all = store.list(req.cwd.as_deref());
        let start: usize = match &req.cursor {
            Some(c) => c
                .parse()
                .map_err(|_| invalid_params(format!("invalid cursor `{c}`")))?,
            None => 0,
        };
        let page: Vec<acp::SessionInfo> = all
            .iter()
            .skip(start)
            .take(LIST_PAGE)
            .map(|s| {
                let mut meta = serde_json::Map::new();
                meta.insert(
                    "passepartout".into(),
                    serde_json::to_value(s).unwrap_or_default(),
                );
                acp::SessionInfo::new(acp::SessionId::new(s.id.clone()), s.cwd.clone())
                    .title(s.title.clone())
                    .updated_at(s.updated_at.clone())
                    .meta(meta)
            })
            .collect();
        let next = (start + LIST_PAGE < all.len()).then(|| (start + LIST_PAGE).to_string());
        Ok(acp::ListSessionsResponse::new(page).next_cursor(next))
    }

    /// `_passepartout/budget/set`: change this daemon's budgets (until it
    /// exits; config.toml keeps them for good). Returns the budgets now.
    fn budget_set(&self, patch: crate::budget::BudgetPatch) -> Value {
        let budget = self.env.accounts.set_budget(&patch);
        tracing::info!(?budget, "budget changed");
        serde_json::to_value(crate::budget::BudgetPatch::from(&budget)).unwrap_or_default()
    }

    async fn prompt(
        self: Arc<Self>,
        req: acp::PromptRequest,
    ) -> Result<acp::PromptResponse, ErrorObjectOwned> {
        let session = self.session(&req.session_id.0)?;
        let text = prompt_text(&req.prompt);
        if text.trim().is_empty() {
            return Err(invalid_params("the prompt has no text"));
        }
        let (turn_no, cancel) = session.begin_turn();
        let sink = RpcSink {
            out: self.out.clone(),
            session_id: session.id.clone(),
        };
        let approver = DaemonApprover {
            daemon: self.clone(),
        };
        let result =
            turn::run_turn(&self.env, &session, text, Arc::new(sink), &approver, cancel).await;
        session.end_turn(turn_no);
        match result {
            Ok(stop) => {
                let mut response = acp::PromptResponse::new(stop);
                if let Some(detail) = session.stop_detail() {
                    let mut meta = serde_json::Map::new();
                    meta.insert(
                        "passepartout".into(),
                        serde_json::json!({ "stopReason": detail }),
                    );
                    response = response.meta(meta);
                }
                Ok(response)
            }
            Err(e) => Err(rpc_error(codes::PROVIDER_FAILED, e.to_string())),
        }
    }

    fn on_notification(&self, method: &str, params: Value) {
        match method {
            proto::SESSION_CANCEL => {
                match serde_json::from_value::<acp::CancelNotification>(params) {
                    Ok(n) => match lock(&self.sessions).get(n.session_id.0.as_ref()) {
                        Some(s) => {
                            tracing::info!(session = %s.id, "cancel");
                            s.cancel();
                        }
                        None => {
                            tracing::warn!(session = %n.session_id.0, "cancel for an unknown session")
                        }
                    },
                    Err(e) => tracing::warn!("invalid session/cancel: {e}"),
                }
            }
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }

    /// Ask an ACP client through `session/request_permission`.
    async fn ask_acp_client(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        let remembered = lock(&self.remembered)
            .get(&request.session_id)
            .and_then(|m| m.get(&request.action.tool).copied());
        match remembered {
            Some(true) => {
                let hash = request.action.content_hash();
                return ApprovalOutcome::Approved {
                    action: Box::new(request.action),
                    hash,
                    by: "acp-client (allow always)".into(),
                };
            }
            Some(false) => {
                return ApprovalOutcome::Rejected {
                    comment: Some("the person chose to always reject this tool".into()),
                    by: "acp-client".into(),
                }
            }
            None => {}
        }
        let reasons: Vec<String> = request
            .trace
            .iter()
            .filter(|v| v.decision != crate::gates::Decision::Allow)
            .map(|v| format!("{}: {}", v.gate, v.reason))
            .collect();
        let fields = acp::ToolCallUpdateFields::new()
            .title(crate::agent::act::title(
                &request.action.tool,
                &request.action.arguments,
            ))
            .raw_input(serde_json::to_value(&request.action.effect).unwrap_or(Value::Null))
            .content(vec![acp::ToolCallContent::from(format!(
                "Why approval is needed: {}",
                reasons.join("; ")
            ))]);
        let options = vec![
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("allow_once"),
                "Allow once",
                acp::PermissionOptionKind::AllowOnce,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("allow_always"),
                "Always allow this tool",
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("reject_once"),
                "Reject",
                acp::PermissionOptionKind::RejectOnce,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("reject_always"),
                "Always reject this tool",
                acp::PermissionOptionKind::RejectAlways,
            ),
        ];
        let params = acp::RequestPermissionRequest::new(
            acp::SessionId::new(request.session_id.clone()),
            acp::ToolCallUpdate::new(acp::ToolCallId::new(request.tool_call_id.clone()), fields),
            options,
        );
        let answer = tokio::select! {
            _ = cancel.cancelled() => return ApprovalOutcome::Cancelled,
            answer = self.out.request(proto::SESSION_REQUEST_PERMISSION, params) => answer,
        };
        let response = match answer.map(serde_json::from_value::<acp::RequestPermissionResponse>) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return ApprovalOutcome::Rejected {
                    comment: Some(format!(
                        "the client's permission answer was unreadable: {e}"
                    )),
                    by: "acp-client".into(),
                }
            }
            Err(e) => {
                return ApprovalOutcome::Rejected {
                    comment: Some(format!("the client could not be asked: {}", e.message)),
                    by: "acp-client".into(),
                }
            }
        };
        let option = match response.outcome {
            acp::RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
            _ => return ApprovalOutcome::Cancelled,
        };
        let verdict = if option.starts_with("allow") {
            PlanOutcome::Approved
        } else {
            PlanOutcome::Rejected
        };
        self.env.record(AuditRecord::decision(
            &request.tool_call_id,
            verdict,
            "acp-client",
            Some(&option),
        ));
        let remember = |allow: bool| {
            lock(&self.remembered)
                .entry(request.session_id.clone())
                .or_default()
                .insert(request.action.tool.clone(), allow);
        };
        match option.as_str() {
            "allow_once" | "allow_always" => {
                if option == "allow_always" {
                    remember(true);
                }
                let hash = request.action.content_hash();
                ApprovalOutcome::Approved {
                    action: Box::new(request.action),
                    hash,
                    by: "acp-client".into(),
                }
            }
            other => {
                if other == "reject_always" {
                    remember(false);
                }
                ApprovalOutcome::Rejected {
                    comment: None,
                    by: "acp-client".into(),
                }
            }
        }
    }
}

/// Sessions per `session/list` page.
const LIST_PAGE: usize = 200;

/// A client-given working directory: absolute, existing, a directory.
fn usable_cwd(cwd: PathBuf) -> Result<PathBuf, ErrorObjectOwned> {
    if !cwd.is_absolute() {
        return Err(invalid_params(format!(
            "cwd must be an absolute path, got {}",
            cwd.display()
        )));
    }
    let cwd = cwd
        .canonicalize()
        .map_err(|e| invalid_params(format!("cwd {} is not usable: {e}", cwd.display())))?;
    if !cwd.is_dir() {
        return Err(invalid_params(format!(
            "cwd {} is not a directory",
            cwd.display()
        )));
    }
    Ok(cwd)
}

fn wire_diagnostics(diagnostics: &[crate::skills::Diagnostic]) -> Vec<proto::WireDiagnostic> {
    diagnostics
        .iter()
        .map(|d| proto::WireDiagnostic {
            path: d.path.display().to_string(),
            line: d.line,
            column: d.column,
            severity: d.severity.to_string(),
            message: d.message.clone(),
        })
        .collect()
}

impl Daemon {
    fn skills_check(&self, p: proto::SkillsCheckParams) -> Value {
        let diagnostics = crate::skills::check_text(std::path::Path::new(&p.path), &p.text);
        serde_json::json!({ "diagnostics": wire_diagnostics(&diagnostics) })
    }

    fn skills_reload(&self, cwd: Option<PathBuf>) -> Value {
        let cwd = cwd.or_else(|| lock(&self.sessions).values().next().map(|s| s.cwd.clone()));
        let (names, diagnostics) = self.env.toolsets.reload(cwd.as_deref());
        serde_json::json!({ "skills": names, "diagnostics": wire_diagnostics(&diagnostics) })
    }

    fn skills_list(&self, cwd: Option<PathBuf>) -> Value {
        let cwd = cwd
            .or_else(|| lock(&self.sessions).values().next().map(|s| s.cwd.clone()))
            .unwrap_or_else(|| PathBuf::from("/"));
        let (skills, diagnostics) = self.env.toolsets.list(&cwd);
        let skills: Vec<Value> = skills
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "description": s.description,
                    "origin": s.origin.to_string(),
                    "path": s.path.display().to_string(),
                    "tools": s.tools,
                    "rules": s.rules,
                })
            })
            .collect();
        serde_json::json!({ "skills": skills, "diagnostics": wire_diagnostics(&diagnostics) })
    }
}

/// Optional `{"cwd": ...}` params (null or absent is fine).
#[derive(serde::Deserialize, Default)]
struct CwdParams {
    #[serde(default)]
    cwd: Option<PathBuf>,
}

fn cwd_param(params: &Params<'_>) -> Result<Option<PathBuf>, ErrorObjectOwned> {
    if params.as_str().is_none() {
        return Ok(None);
    }
    Ok(params.parse::<Option<CwdParams>>()?.unwrap_or_default().cwd)
}

/// Concatenate the text of a prompt's content blocks.
fn prompt_text(blocks: &[acp::ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            acp::ContentBlock::Text(t) => parts.push(t.text.clone()),
            acp::ContentBlock::ResourceLink(l) => parts.push(format!("[{}]({})", l.name, l.uri)),
            acp::ContentBlock::Resource(r) => {
                if let acp::EmbeddedResourceResource::TextResourceContents(t) = &r.resource {
                    parts.push(format!("Contents of {}:\n{}", t.uri, t.text));
                }
            }
            _ => parts.push("[unsupported content omitted]".into()),
        }
    }
    parts.join("\n\n")
}

/// Sends a session's updates as ACP notifications.
pub struct RpcSink {
    out: Outgoing,
    session_id: String,
}

impl TurnSink for RpcSink {
    fn update(&self, update: acp::SessionUpdate) {
        self.out.notify(
            proto::SESSION_UPDATE,
            acp::SessionNotification::new(acp::SessionId::new(self.session_id.clone()), update),
        );
    }
    fn status(&self, status: SessionStatus) {
        self.out.notify(proto::EXT_SESSION_STATUS, status);
    }
    fn notify(&self, method: &str, params: Value) {
        self.out.notify(method, params);
    }
}

struct DaemonApprover {
    daemon: Arc<Daemon>,
}

#[async_trait::async_trait]
impl Approver for DaemonApprover {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        if self.daemon.uses_flight_plans() {
            self.daemon.desk.ask(request, cancel).await
        } else {
            self.daemon.ask_acp_client(request, cancel).await
        }
    }

    fn begin(
        &self,
        session_id: &str,
        tool_call_id: &str,
        action: &crate::action::Action,
    ) -> Result<(), String> {
        self.daemon.desk.begin(session_id, tool_call_id, action)
    }

    fn settle(
        &self,
        session_id: &str,
        tool_call_id: &str,
        status: &crate::agent::act::ActStatus,
        text: &str,
    ) {
        self.daemon
            .desk
            .settle(session_id, tool_call_id, status, text)
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    params.parse::<T>()
}

/// Build the method table.
pub fn methods(daemon: Arc<Daemon>) -> RpcModule<Daemon> {
    let mut module = RpcModule::from_arc(daemon);
    let registered = [
        module
            .register_method(proto::INITIALIZE, |p, d, _| d.initialize(parse(&p)?))
            .map(|_| ()),
        module
            .register_method(proto::SESSION_NEW, |p, d, _| d.new_session(parse(&p)?))
            .map(|_| ()),
        module
            .register_method(proto::SESSION_LOAD, |p, d, _| d.load_session(parse(&p)?))
            .map(|_| ()),
        module
            .register_method(proto::SESSION_LIST, |p, d, _| {
                let req = if p.as_str().is_none() {
                    acp::ListSessionsRequest::new()
                } else {
                    p.parse::<Option<acp::ListSessionsRequest>>()?
                        .unwrap_or_default()
                };
                d.list_sessions(req)
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_BUDGET_SET, |p, d, _| {
                Ok::<_, ErrorObjectOwned>(d.budget_set(parse(&p)?))
            })
            .map(|_| ()),
        module
            .register_async_method(proto::SESSION_PROMPT, |p, d, _| async move {
                d.prompt(parse(&p)?).await
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_PLAN_DECIDE, |p, d, _| {
                d.desk.decide(parse(&p)?, "emacs").map_err(|e| match e {
                    DecideError::Refused(m) => rpc_error(codes::REFUSED, m),
                    DecideError::BadEdit(m) => invalid_params(m),
                })
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_PLANS_LIST, |_, d, _| {
                d.desk
                    .list()
                    .map_err(|m| rpc_error(codes::INTERNAL_ERROR, m))
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_SKILLS_CHECK, |p, d, _| {
                Ok::<_, ErrorObjectOwned>(d.skills_check(parse(&p)?))
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_SKILLS_RELOAD, |p, d, _| {
                Ok::<_, ErrorObjectOwned>(d.skills_reload(cwd_param(&p)?))
            })
            .map(|_| ()),
        module
            .register_method(proto::EXT_SKILLS_LIST, |p, d, _| {
                Ok::<_, ErrorObjectOwned>(d.skills_list(cwd_param(&p)?))
            })
            .map(|_| ()),
    ];
    for r in registered {
        // Names are static and distinct; a clash is a programming error.
        if let Err(e) = r {
            tracing::error!("method registration failed: {e}");
        }
    }
    module
}

/// Serve the daemon on a reader/writer pair until input ends.
pub async fn serve_on<R, W>(env: Arc<AgentEnv>, reader: R, writer: W)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (out, rx) = Outgoing::channel();
    let daemon = Daemon::new(env, out.clone());
    daemon.desk.recover();
    let notify_daemon = daemon.clone();
    let on_note: crate::rpc::NotificationHandler =
        Arc::new(move |m: &str, p: Value| notify_daemon.on_notification(m, p));
    crate::rpc::serve(reader, writer, out, rx, methods(daemon.clone()), on_note).await;
    daemon.env.editor.disconnect();
    daemon.cancel_all();
}
