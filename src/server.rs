//! The daemon: ACP methods and `_passepartout/...` extensions over one
//! JSON-RPC connection, many sessions at once.
//!
//! Handlers are registered, typed, on a [`Router`]; [`crate::rpc::serve`]
//! runs each request in its own task, so a long `session/prompt` never blocks
//! `session/cancel` or a plan decision. Prompts to one session are queued in
//! the order they arrived (a ticket taken on the reader task, see
//! [`PromptOrder`] and [`Router::ordered`]), at most [`MAX_QUEUED_PROMPTS`]
//! deep. Asking a person is the approval module's job
//! ([`crate::approval`]).
//!
//! Streamed text is coalesced per session by [`RpcSink`]: the first chunk of
//! a run goes out at once, later ones are merged and sent every
//! [`COALESCE_WINDOW`] or [`COALESCE_BYTES`], whichever comes first, and always
//! before any other update of the session and at the end of the turn.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{turn, AgentEnv, Session, TurnSink};
use crate::approval::{Approvals, DecideError};
use crate::protocol::{self as proto, acp, ClientSettings, SessionStatus};
use crate::rpc::{Outgoing, Router, RpcError};
use crate::util::sync::lock;

/// Daemon state shared by all handlers.
pub struct Daemon {
    pub env: Arc<AgentEnv>,
    pub out: Outgoing,
    /// The flight desk and the ACP permission prompt.
    pub approvals: Arc<Approvals>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    settings: Mutex<ClientSettings>,
    next_session: AtomicU64,
    /// The arrival order of prompts, per session.
    orders: Mutex<HashMap<String, Arc<PromptOrder>>>,
    /// The slash commands last announced to each session.
    commands_sent: Mutex<HashMap<String, Vec<acp::AvailableCommand>>>,
}

/// A skill command as ACP announces it.
fn wire_command(c: &crate::skills::Command) -> acp::AvailableCommand {
    let mut wire = acp::AvailableCommand::new(c.name.clone(), c.description.clone());
    if let Some(hint) = &c.input_hint {
        wire = wire.input(acp::AvailableCommandInput::Unstructured(
            acp::UnstructuredCommandInput::new(hint.clone()),
        ));
    }
    wire
}

/// Prompts a session may have waiting behind its running turn.
pub const MAX_QUEUED_PROMPTS: u64 = 64;

/// First come, first served, per session: each prompt takes a ticket on
/// the reader task (so in arrival order) and its turn starts when every
/// earlier ticket is done.
#[derive(Default)]
pub struct PromptOrder {
    issued: AtomicU64,
    /// Tickets below `.0` are all done; `.1` holds later ones done early
    /// (a prompt refused before its turn).
    done: Mutex<(u64, std::collections::BTreeSet<u64>)>,
    changed: tokio::sync::Notify,
}

impl PromptOrder {
    fn take(&self) -> u64 {
        self.issued.fetch_add(1, Ordering::SeqCst)
    }

    fn waiting(&self) -> u64 {
        let done = lock(&self.done);
        self.issued.load(Ordering::SeqCst) - done.0 - done.1.len() as u64
    }

    async fn wait_for(&self, ticket: u64) {
        loop {
            let changed = self.changed.notified();
            if lock(&self.done).0 >= ticket {
                return;
            }
            changed.await;
        }
    }

    fn finish(&self, ticket: u64) {
        let mut done = lock(&self.done);
        done.1.insert(ticket);
        loop {
            let next = done.0;
            if !done.1.remove(&next) {
                break;
            }
            done.0 += 1;
        }
        drop(done);
        self.changed.notify_waiters();
    }
}

/// A prompt's place in its session's queue, taken when the request was
/// read. Dropping it (the prompt finished or failed) lets the next one go.
pub struct PromptTicket {
    order: Arc<PromptOrder>,
    ticket: u64,
    turn: u64,
    cancel: CancellationToken,
    session: Arc<Session>,
    /// Decided when the ticket was taken, in arrival order, so that a full
    /// queue refuses the newest prompt and never an earlier one.
    over_limit: bool,
}

impl PromptTicket {
    fn take(order: Arc<PromptOrder>, session: Arc<Session>) -> PromptTicket {
        let (turn, cancel) = session.begin_turn();
        let ticket = order.take();
        // Counts this prompt and the running one: MAX_QUEUED_PROMPTS may
        // wait behind the turn that runs.
        let over_limit = order.waiting() > MAX_QUEUED_PROMPTS;
        PromptTicket {
            order,
            ticket,
            turn,
            cancel,
            session,
            over_limit,
        }
    }
}

impl Drop for PromptTicket {
    fn drop(&mut self) {
        self.session.end_turn(self.turn);
        self.order.finish(self.ticket);
    }
}

fn invalid_params(message: impl Into<String>) -> RpcError {
    RpcError::invalid_params(message)
}

impl Daemon {
    pub fn new(env: Arc<AgentEnv>, out: Outgoing) -> Arc<Daemon> {
        Arc::new_cyclic(|me: &std::sync::Weak<Daemon>| {
            let me = me.clone();
            let modes: crate::approval::ModeSource =
                Arc::new(move |id: &str| me.upgrade().and_then(|d| d.live_mode(id)));
            Daemon {
                approvals: Arc::new(Approvals::new(env.clone(), out.clone(), modes)),
                env,
                out,
                sessions: Mutex::default(),
                settings: Mutex::default(),
                next_session: AtomicU64::new(1),
                orders: Mutex::default(),
                commands_sent: Mutex::default(),
            }
        })
    }

    /// On the reader task, in arrival order: a queue place for a prompt.
    /// `None` for anything the prompt handler will refuse anyway.
    fn ticket_for(&self, req: &acp::PromptRequest) -> Option<PromptTicket> {
        let session = lock(&self.sessions).get(&*req.session_id.0)?.clone();
        let order = lock(&self.orders)
            .entry(session.id.clone())
            .or_default()
            .clone();
        // The turn (and its cancel token) exists from now on, so a cancel
        // that arrives before the turn starts still stops it.
        Some(PromptTicket::take(order, session))
    }

    /// The `available_commands_update` for `session` when its commands
    /// differ from the last ones announced (always, with `force`).
    fn commands_update(&self, session: &Session, force: bool) -> Option<acp::SessionUpdate> {
        let commands: Vec<acp::AvailableCommand> = (self.env.toolsets.commands(&session.cwd))
            .iter()
            .map(wire_command)
            .chain(self.env.mcp.prompt_commands(&session.id))
            .collect();
        let mut sent = lock(&self.commands_sent);
        if !force && sent.get(&session.id) == Some(&commands) {
            return None;
        }
        sent.insert(session.id.clone(), commands.clone());
        Some(acp::SessionUpdate::AvailableCommandsUpdate(
            acp::AvailableCommandsUpdate::new(commands),
        ))
    }

    /// Announce `session`'s slash commands now, when they changed.
    fn announce_commands(&self, session: &Session, force: bool) {
        if let Some(update) = self.commands_update(session, force) {
            let sink = RpcSink::new(self.out.clone(), session.id.clone());
            sink.update(update);
            sink.flush();
        }
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, RpcError> {
        lock(&self.sessions).get(id).cloned().ok_or_else(|| {
            let hint = "create one with session/new, or load a stored one with session/load";
            RpcError::not_found(format!("unknown session `{id}`: {hint}"))
        })
    }

    /// Cancel every running turn (the client went away).
    pub fn cancel_all(&self) {
        for s in lock(&self.sessions).values() {
            s.cancel();
        }
    }

    /// A live session's mode, for the flight desk's last mile.
    fn live_mode(&self, id: &str) -> Option<crate::modes::Mode> {
        lock(&self.sessions).get(id).map(|s| s.mode())
    }

    /// The daemon's provider discovery, when it is what serves prompts: no
    /// provider configured and none sent by the editor.
    fn discovery(&self) -> Option<&crate::llm::discovery::Discovery> {
        if lock(&self.settings).providers.is_some() {
            return None;
        }
        self.env.config.discovery.as_deref()
    }

    fn initialize(&self, req: acp::InitializeRequest) -> Result<acp::InitializeResponse, RpcError> {
        let settings =
            proto::client_settings(req.meta.as_ref()).map_err(|e| invalid_params(e.to_string()))?;
        let configured = crate::session_config::configured(&self.env.config);
        let providers = crate::session_config::effective_providers(&configured, &settings);
        // Keys alone for a discovered provider change nothing: its key comes
        // from the environment, and rebuilding would drop the re-probing.
        if settings.providers.is_some()
            || (!settings.api_keys.is_empty() && !self.env.config.providers.is_empty())
        {
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
        // Reads and writes go through the client's buffers when offered.
        self.env
            .client_fs
            .connect(self.out.clone(), &req.client_capabilities.fs);
        // MCP servers' questions go to the person when the client shows them.
        self.env.mcp.elicitation().connect(
            self.out.clone(),
            req.client_capabilities.elicitation.as_ref(),
        );
        self.approvals.set_flight_plans(settings.flight_plans);
        // `_passepartout/*` notifications only for a client that asked
        // (ACP: custom capabilities live in the capability's `_meta`); a
        // client that takes flight plans or answers emacs/eval speaks them.
        let extensions = proto::wants_extensions(req.client_capabilities.meta.as_ref())
            || settings.flight_plans
            || settings.emacs;
        self.out.allow_extensions(extensions);
        *lock(&self.settings) = settings;
        if extensions {
            // After the `initialize` reply (nothing comes before it).
            self.out
                .notify_after_reply(proto::EXT_SANDBOX_STATUS, &self.env.sandbox);
        }
        if flight_plans {
            // Plans outlive daemons and editors: offer the pending ones again.
            self.approvals.desk.offer_pending();
        }
        let caps = acp::AgentCapabilities::new()
            .prompt_capabilities(
                acp::PromptCapabilities::new()
                    .embedded_context(true)
                    // Sent to a model that takes images; any other is told
                    // in words what was left out (`llm::image`).
                    .image(true),
            )
            // stdio, streamable HTTP and legacy HTTP+SSE MCP servers (src/mcp).
            .mcp_capabilities(acp::McpCapabilities::new().http(true).sse(true))
            .load_session(self.env.sessions.is_some())
            .session_capabilities(
                acp::SessionCapabilities::new().list(acp::SessionListCapabilities::new()),
            );
        let mut meta = serde_json::Map::new();
        meta.insert(
            "passepartout".into(),
            serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "sandbox": &self.env.sandbox,
                "extensionNotifications": extensions,
                "providers": providers.iter().map(|p| format!("{} ({})", p.name, p.base_url)).collect::<Vec<_>>(),
                "discovery": self.discovery().map(|d| d.report().to_json()),
                // Each sandbox limit and whether this host enforces it.
                "limits": crate::sandbox::probe::limit_diagnostics(&self.env.config.sandbox_limits),
                // Where INFO lines go (stderr carries warnings only).
                "logFile": self.env.config.log_file.clone().unwrap_or_else(|| {
                    crate::logging::default_log_file(&self.env.config.state_dir())
                }),
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

    async fn new_session(
        &self,
        req: acp::NewSessionRequest,
    ) -> Result<acp::NewSessionResponse, RpcError> {
        let cwd = usable_cwd(req.cwd)?;
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        let id = crate::sessions::new_id(n);
        tracing::info!(session = %id, cwd = %cwd.display(), "session/new");
        // A server the client named that cannot start fails the request;
        // the config's servers are reported in `_meta` whatever their state.
        let mcp = self
            .env
            .mcp
            .start_session(&id, &cwd, &req.mcp_servers)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        warm_up_session(&self.env.config, &cwd);
        let mode = self.env.config.default_mode;
        let mut session = Session::new(id.clone(), cwd.clone()).with_mode(mode);
        if let Some(store) = &self.env.sessions {
            match store.create_noting(&id, &cwd) {
                Ok((journal, pruned)) => {
                    // The person loses old sessions: told once, not only logged.
                    if let Some(pruned) = pruned {
                        self.out.notify(proto::EXT_SESSIONS_PRUNED, pruned);
                    }
                    session = session.with_journal(journal)
                }
                Err(e) => tracing::error!(session = %id, "session will not be saved: {e}"),
            }
        }
        let session = Arc::new(session);
        lock(&self.sessions).insert(id.clone(), session.clone());
        if let Some(update) = self.commands_update(&session, true) {
            // The client learns the session id from the reply: after it.
            self.out.notify_after_reply(
                proto::SESSION_UPDATE,
                acp::SessionNotification::new(acp::SessionId::new(id.clone()), update),
            );
        }
        // What recovery finished or reversed here (a killed apply or undo)
        // is told to the person in the chat, once.
        for r in crate::checkpoint::intent::take_reports_for(&cwd) {
            let line = format!("passepartout: {}\n", r.message());
            self.out.notify_after_reply(
                proto::SESSION_UPDATE,
                acp::SessionNotification::new(
                    acp::SessionId::new(id.clone()),
                    acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(line.into())),
                ),
            );
        }
        let mut response =
            acp::NewSessionResponse::new(acp::SessionId::new(id)).modes(mode.state());
        if !mcp.is_empty() {
            let mut meta = serde_json::Map::new();
            meta.insert(
                "passepartout".into(),
                serde_json::json!({ "mcpServers": mcp }),
            );
            response = response.meta(meta);
        }
        Ok(response)
    }

    /// ACP `session/load`: read the journal, replay it as `session/update`s
    /// (before this response), make the session live again, and start the
    /// MCP servers the request names (and config.toml's), as `session/new`.
    async fn load_session(
        &self,
        req: acp::LoadSessionRequest,
    ) -> Result<acp::LoadSessionResponse, RpcError> {
        let id = req.session_id.0.to_string();
        let cwd = usable_cwd(req.cwd)?;
        let store = self.env.sessions.as_ref().ok_or_else(|| {
            RpcError::not_found(format!("session `{id}` not found: this daemon keeps no sessions ([sessions] persist = false)"),
            )
        })?;
        let loaded = store.load(&id).map_err(|e| match e {
            crate::sessions::StoreError::NotFound(_) => RpcError::not_found(format!(
                "session `{id}` not found (session/list shows the stored ones)"
            )),
            crate::sessions::StoreError::BadId(_) => invalid_params(e.to_string()),
            other => RpcError::internal(format!("session `{id}`: {other}")),
        })?;
        tracing::info!(session = %id, cwd = %cwd.display(), messages = loaded.history.len(), "session/load");
        // A session loaded again gets the servers of this request, not the
        // earlier ones (those stop first).
        self.env.mcp.stop_session(&id).await;
        let mcp = self
            .env
            .mcp
            .start_session(&id, &cwd, &req.mcp_servers)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        warm_up_session(&self.env.config, &cwd);
        let replay = loaded.replay.clone();
        let skipped = loaded.warnings.clone();
        let session_mode_recorded = loaded.mode;
        let live = lock(&self.sessions).get(&id).cloned();
        let mode = match live {
            Some(session) => session.mode(),
            None => {
                let journal = store
                    .reopen(&id)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                let session = Session::restored(loaded, cwd, Some(journal));
                // Never switched: the configured default, as for a new one.
                let session = match session_mode_recorded {
                    Some(_) => session,
                    None => session.with_mode(self.env.config.default_mode),
                };
                let mode = session.mode();
                lock(&self.sessions).insert(id.clone(), Arc::new(session));
                mode
            }
        };
        let sink = RpcSink::new(self.out.clone(), id.clone());
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
        // The replay comes before the response (clients rely on it):
        // nothing may stay behind in the coalescing buffer.
        sink.flush();
        let live = lock(&self.sessions).get(&id).cloned();
        if let Some(session) = live {
            // The client knows this id already: no need to wait.
            self.announce_commands(&session, true);
        }
        let mut response = acp::LoadSessionResponse::new().modes(mode.state());
        let mut ours = serde_json::Map::new();
        if !mcp.is_empty() {
            ours.insert("mcpServers".into(), serde_json::json!(mcp));
        }
        // Records the journal could not read: the load succeeded without
        // them, and the client is told which.
        if !skipped.is_empty() {
            ours.insert("skippedRecords".into(), serde_json::json!(skipped));
        }
        if !ours.is_empty() {
            let mut meta = serde_json::Map::new();
            meta.insert("passepartout".into(), Value::Object(ours));
            response = response.meta(meta);
        }
        Ok(response)
    }

    /// ACP `session/set_mode`: switch, record it, tell the client. The next
    /// action is judged in the new mode (a running turn included).
    fn set_mode(
        &self,
        req: acp::SetSessionModeRequest,
    ) -> Result<acp::SetSessionModeResponse, RpcError> {
        let session = self.session(&req.session_id.0)?;
        let mode: crate::modes::Mode = req
            .mode_id
            .0
            .parse()
            .map_err(|e: crate::modes::UnknownMode| invalid_params(e.to_string()))?;
        session.set_mode(mode);
        tracing::info!(session = %session.id, mode = %mode, "session/set_mode");
        let sink = RpcSink::new(self.out.clone(), session.id.clone());
        sink.update(acp::SessionUpdate::CurrentModeUpdate(
            acp::CurrentModeUpdate::new(mode.id()),
        ));
        sink.flush();
        Ok(acp::SetSessionModeResponse::new())
    }

    /// ACP `session/list`: stored sessions, most recently active first.
    fn list_sessions(
        &self,
        req: acp::ListSessionsRequest,
    ) -> Result<acp::ListSessionsResponse, RpcError> {
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
        ticket: Option<PromptTicket>,
    ) -> Result<acp::PromptResponse, RpcError> {
        let session = self.session(&req.session_id.0)?;
        let ticket = match ticket.filter(|t| t.session.id == session.id) {
            Some(t) => t,
            None => {
                let order = lock(&self.orders)
                    .entry(session.id.clone())
                    .or_default()
                    .clone();
                PromptTicket::take(order, session.clone())
            }
        };
        let text = prompt_text(&req.prompt);
        let (images, left_out) = prompt_images(&req.prompt);
        if text.trim().is_empty() && images.is_empty() {
            return Err(invalid_params("the prompt has no text"));
        }
        let text = std::iter::once(text)
            .chain(left_out)
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        // Skill files edited since: the client's `/` completion follows.
        self.announce_commands(&session, false);
        if ticket.over_limit {
            return Err(RpcError::refused(format!(
                "too many prompts queued for session {} (limit {MAX_QUEUED_PROMPTS}); wait for \
                     the running ones or cancel them",
                session.id
            )));
        }
        tokio::select! {
            _ = ticket.order.wait_for(ticket.ticket) => {}
            // Cancelled while queued: it never starts.
            _ = ticket.cancel.cancelled() => {
                return Ok(acp::PromptResponse::new(acp::StopReason::Cancelled));
            }
        }
        // Nothing configured and nothing found yet: look again (bounded),
        // else fail with every candidate tried and its fix.
        if session.models().is_none() {
            if let Some(discovery) = self.discovery() {
                if let Err(why) = discovery.ensure().await {
                    let tried: Vec<String> = discovery
                        .report()
                        .entries
                        .iter()
                        .map(|(c, _)| format!("{} ({})", c.name, c.base_url))
                        .collect();
                    return Err(RpcError::internal(why.to_string()).with_data(
                        serde_json::json!({ "kind": "provider_failed", "providers": tried }),
                    ));
                }
            }
        }
        let sink = Arc::new(RpcSink::new(self.out.clone(), session.id.clone()));
        // The turn's own token: cancelled by a person, or by the clock.
        let turn_cancel = ticket.cancel.child_token();
        let limit = Duration::from_secs(self.env.config.max_turn_secs);
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let timer = {
            let (token, flag) = (turn_cancel.clone(), timed_out.clone());
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                flag.store(true, Ordering::SeqCst);
                token.cancel();
            })
        };
        let usage_before = session.usage();
        // `@`-mentioned MCP resources join the prompt, read as actions.
        let text = self
            .mentioned_resources(&session, &req.prompt, text, &turn_cancel)
            .await;
        // What became of this session's plans whose turn was gone.
        let text = self.approvals.desk.with_news(&session.id, text);
        let result = turn::run_prompt(
            &self.env,
            &session,
            turn::Prompt { text, images },
            sink.clone(),
            &*self.approvals,
            turn_cancel,
        )
        .await;
        timer.abort();
        sink.flush();
        drop(ticket);
        if timed_out.load(Ordering::SeqCst) {
            return Err(RpcError::refused(format!(
                "the turn was stopped after {} s: it reached max_turn_secs",
                limit.as_secs()
            )));
        }
        match result {
            Ok(stop) => {
                let mut response = acp::PromptResponse::new(stop)
                    .usage(turn_usage(&usage_before, &session.usage()));
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
            // ACP has no code for "the model failed": an internal error
            // whose `data.kind` says so (docs/protocol.md, error codes).
            Err(e) => {
                // The cascade the turn used, as each provider labels itself.
                let cascade = session.models().unwrap_or_else(|| self.env.models());
                let names: Vec<String> = cascade.providers().map(|p| p.label()).collect();
                Err(RpcError::internal(e.to_string())
                    .with_data(serde_json::json!({ "kind": e.kind(), "providers": names })))
            }
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
                            tracing::warn!(target: crate::logging::CLIENT_CAUSED, session = %n.session_id.0, "cancel for an unknown session")
                        }
                    },
                    Err(e) => {
                        tracing::warn!(target: crate::logging::CLIENT_CAUSED, "invalid session/cancel: {e}")
                    }
                }
            }
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }
}

/// The tokens one turn spent (the session's totals after it minus before),
/// as the `usage` of the `session/prompt` result.
fn turn_usage(before: &crate::llm::Usage, after: &crate::llm::Usage) -> acp::Usage {
    let input = after.input_tokens.saturating_sub(before.input_tokens);
    let output = after.output_tokens.saturating_sub(before.output_tokens);
    let read = after
        .cache_read_tokens
        .saturating_sub(before.cache_read_tokens);
    let write = after
        .cache_write_tokens
        .saturating_sub(before.cache_write_tokens);
    acp::Usage::new(input + output, input, output)
        .cached_read_tokens((read > 0).then_some(read))
        .cached_write_tokens((write > 0).then_some(write))
}

/// Sessions per `session/list` page.
const LIST_PAGE: usize = 200;

/// A client-given working directory: absolute, existing, a directory.
fn usable_cwd(cwd: PathBuf) -> Result<PathBuf, RpcError> {
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
        let live: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for session in live {
            self.announce_commands(&session, false);
        }
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
                    "trusted": s.trusted,
                })
            })
            .collect();
        serde_json::json!({ "skills": skills, "diagnostics": wire_diagnostics(&diagnostics) })
    }
}

impl Daemon {
    /// `_passepartout/skills/trust`: the person (through the editor, never
    /// the model) trusts project skill files with exactly their current
    /// content; then the project's skills are reloaded.
    fn skills_trust(&self, p: proto::SkillsTrustParams) -> Result<Value, RpcError> {
        if !p.cwd.is_absolute() {
            return Err(invalid_params(format!(
                "cwd must be an absolute path, got {}",
                p.cwd.display()
            )));
        }
        let config = &self.env.config;
        let keep_auto = config.trust_project_tool_approval;
        let store = crate::skills::TrustStore::new(config.trust_file());
        let project = crate::skills::project_dir(&p.cwd);
        let files: Vec<(String, PathBuf)> = match &p.paths {
            Some(paths) => paths
                .iter()
                .map(|given| (given.display().to_string(), p.cwd.join(given)))
                .collect(),
            None => crate::skills::loader::skill_files(&project)
                .into_iter()
                .map(|f| (f.display().to_string(), f))
                .collect(),
        };
        let mut trusted = Vec::new();
        let mut refused = Vec::new();
        for (given, path) in files {
            let review = match crate::skills::Review::read(&path, keep_auto) {
                Ok(r) => r,
                Err(e) => {
                    refused.push(serde_json::json!({ "path": given, "reason": e.to_string() }));
                    continue;
                }
            };
            if let Some(expected) = p.expected_sha256.get(&given) {
                if !expected.eq_ignore_ascii_case(&review.sha256) {
                    refused.push(serde_json::json!({
                        "path": given,
                        "reason": format!(
                            "the file changed since it was shown (sha256 {} now, {expected} shown); look at it again",
                            review.sha256
                        ),
                    }));
                    continue;
                }
            }
            if review.has_errors() {
                refused.push(serde_json::json!({
                    "path": given,
                    "reason": "it has errors and would not load; fix them first",
                }));
                continue;
            }
            match store.trust(&review.canonical, &review.bytes) {
                Ok(sha256) => trusted.push(serde_json::json!({
                    "path": review.path.display().to_string(),
                    "sha256": sha256,
                    "name": review.skill.as_ref().map(|s| s.name.clone()),
                })),
                Err(e) => return Err(RpcError::internal(e.to_string())),
            }
        }
        let (names, diagnostics) = self.env.toolsets.reload(Some(&p.cwd));
        Ok(serde_json::json!({
            "trusted": trusted,
            "refused": refused,
            "skills": names,
            "diagnostics": wire_diagnostics(&diagnostics),
        }))
    }
}

/// `{"planId": ...}`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PlanIdParams {
    plan_id: String,
}

/// Optional `{"cwd": ...}` params (null or absent is fine).
#[derive(serde::Deserialize, Default)]
struct CwdParams {
    #[serde(default)]
    cwd: Option<PathBuf>,
}

impl Daemon {
    /// `_passepartout/undo`: revert a checkpoint; a refusal (files changed
    /// since, nothing to undo) is a `REFUSED` error with the reason.
    async fn undo(&self, params: proto::UndoParams) -> Result<Value, RpcError> {
        let (state, cfg) = (
            self.env.config.state_dir(),
            self.env.config.checkpoints.clone(),
        );
        let cwd = params.cwd.clone();
        // A chat's undo is recorded as its session's, like its actions.
        let session = params.session_id.clone().filter(|s| !s.is_empty());
        let origin = crate::checkpoint::Origin {
            session_id: session.clone().unwrap_or_else(|| "editor".into()),
            tool_call_id: String::new(),
            tool: "undo".into(),
            turn: None,
        };
        if let Some(turn) = params.turn.clone() {
            let turn = Some(turn).filter(|t| !t.is_empty() && t != "last");
            // A chat's last turn is its own, never another session's.
            let (state, cfg, cwd, origin, session) = (
                state.clone(),
                cfg.clone(),
                cwd.clone(),
                origin.clone(),
                session.clone(),
            );
            let (turn, undone, undo) = crate::checkpoint::watch::locked(&params.cwd, move || {
                let (turn, session) = (turn.as_deref(), session.as_deref());
                crate::checkpoint::undo_turn(&state, &cfg, &cwd, turn, session, &origin)
            })
            .await
            .map_err(|e| RpcError::refused(e.to_string()))?;
            if let Some(u) = &undo {
                self.env.record(crate::audit::AuditRecord::effect(u));
            }
            let ids: Vec<&str> = undone.iter().map(|c| c.id.as_str()).collect();
            return Ok(serde_json::json!({
                "turn": turn,
                "undone": ids.join(","),
                "checkpoint": undo.as_ref().map(|u| u.id.clone()),
                "summary": undo.as_ref().map_or_else(|| "nothing left to change".to_string(), passepartout_transactions::checkpoint::Checkpoint::summary),
            }));
        }
        let done = crate::checkpoint::watch::locked(&params.cwd, move || {
            let id = params.id.as_deref();
            crate::checkpoint::undo(&state, &cfg, &cwd, id, session.as_deref(), &origin)
        })
        .await
        .map_err(|e| match e {
            crate::checkpoint::CheckpointError::Unknown(_) => RpcError::not_found(e.to_string()),
            other => RpcError::refused(other.to_string()),
        })?;
        let (undone, undo) = done;
        self.env.record(crate::audit::AuditRecord::effect(&undo));
        // Named: which action was undone, so an undo never surprises.
        Ok(serde_json::json!({
            "undone": undone.id,
            "tool": undone.tool,
            "createdAt": undone.created_at,
            "checkpoint": undo.id,
            "summary": undo.summary(),
        }))
    }

    /// `_passepartout/history`: the checkpoints of a working directory.
    async fn history(&self, params: proto::HistoryParams) -> Result<Value, RpcError> {
        let (state, cfg) = (
            self.env.config.state_dir(),
            self.env.config.checkpoints.clone(),
        );
        let cwd = params.cwd.clone();
        let list = crate::checkpoint::watch::locked(&params.cwd, move || {
            crate::checkpoint::history(&state, &cfg, &cwd, params.limit)
        })
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
        Ok(serde_json::json!({
            "checkpoints": list.iter().map(passepartout_transactions::checkpoint::Checkpoint::wire).collect::<Vec<_>>()
        }))
    }
}

impl Daemon {
    /// `prompt` followed by the text of each MCP resource its
    /// `resource_link`s name (a resource a running server of the session
    /// lists; other links stay links). Each is read as an
    /// `mcp_read_resource` action the person approved by mentioning it:
    /// recorded in the audit log, judged again at the last mile (a gate's
    /// or the mode's deny still wins), its text capped like a tool result
    /// and inside the server's untrusted-data wrapper.
    async fn mentioned_resources(
        &self,
        session: &Session,
        blocks: &[acp::ContentBlock],
        prompt: String,
        cancel: &CancellationToken,
    ) -> String {
        use crate::agent::act::{execute_action, ExecContext, LastMile};
        let uris: Vec<&str> = blocks
            .iter()
            .filter_map(|b| match b {
                acp::ContentBlock::ResourceLink(l) => Some(l.uri.as_str()),
                _ => None,
            })
            .collect();
        let mentioned = self.env.mcp.mentioned_resources(&session.id, &uris);
        if mentioned.is_empty() {
            return prompt;
        }
        let mut toolset = self.env.toolsets.toolset(&session.cwd, "");
        self.env.mcp.register_tools(&session.id, &mut toolset.tools);
        let mut parts = vec![prompt];
        for (reader, uri) in mentioned {
            let Some(tool) = toolset.tools.get(&reader) else {
                continue;
            };
            let context = crate::tools::PlanContext {
                cwd: session.cwd.clone(),
            };
            let Ok(action) = tool.plan(&serde_json::json!({ "uri": uri }), &context) else {
                continue;
            };
            let id = session.unique_call_id("mention");
            self.env.record(crate::audit::AuditRecord::proposed(
                &session.id,
                &id,
                &action,
            ));
            let hash = action.content_hash();
            let x = ExecContext {
                env: &self.env,
                session_id: &session.id,
                cwd: &session.cwd,
                plan_id: None,
                sink: &crate::agent::NullSink,
                sink_handle: None,
                cancel: cancel.clone(),
                approved_by: Some("the person (an @-mention in the prompt)".into()),
                last_mile: LastMile {
                    approved_hash: &hash,
                    toolset: &toolset,
                    mode: session.mode(),
                    recorded: None,
                    begin: None,
                },
                limits: Default::default(),
                live: None,
            };
            let acted = execute_action(&id, &action, &x).await;
            parts.push(format!(
                "[the MCP resource {uri}, mentioned by the person]\n{}",
                acted.observation.text
            ));
        }
        parts.join("\n\n")
    }
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
            // Travel beside the text (see `prompt_images`).
            acp::ContentBlock::Image(_) => {}
            _ => parts.push("[unsupported content omitted]".into()),
        }
    }
    parts.join("\n\n")
}

/// A prompt's images, and a line for each that cannot travel (its
/// format, its size, too many).
fn prompt_images(blocks: &[acp::ContentBlock]) -> (Vec<crate::llm::Image>, Vec<String>) {
    crate::llm::image::collect(blocks.iter().filter_map(|block| match block {
        acp::ContentBlock::Image(i) => Some(crate::llm::Image::new(&i.mime_type, &i.data)),
        _ => None,
    }))
}

/// Text chunks are merged for at most this long (the first of a run is
/// never held back).
pub const COALESCE_WINDOW: Duration = Duration::from_millis(20);
/// ... or until this many bytes are waiting.
pub const COALESCE_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkKind {
    Message,
    Thought,
}

/// Text waiting to be sent, and whether a run of chunks is going on.
#[derive(Default)]
struct Coalesced {
    kind: Option<ChunkKind>,
    text: String,
    in_run: bool,
    timer_armed: bool,
}

/// Sends a session's updates as ACP notifications, coalescing text chunks.
pub struct RpcSink {
    inner: Arc<SinkInner>,
}

struct SinkInner {
    out: Outgoing,
    session_id: String,
    /// Held while sending, so the timer's flush and the turn's own updates
    /// cannot overtake each other.
    pending: Mutex<Coalesced>,
}

/// A chunk made of plain text only (anything richer is sent as it is).
fn plain_chunk(update: &acp::SessionUpdate) -> Option<(ChunkKind, &str)> {
    let (kind, chunk) = match update {
        acp::SessionUpdate::AgentMessageChunk(c) => (ChunkKind::Message, c),
        acp::SessionUpdate::AgentThoughtChunk(c) => (ChunkKind::Thought, c),
        _ => return None,
    };
    if chunk.message_id.is_some() || chunk.meta.is_some() {
        return None;
    }
    match &chunk.content {
        acp::ContentBlock::Text(t) if t.annotations.is_none() && t.meta.is_none() => {
            Some((kind, t.text.as_str()))
        }
        _ => None,
    }
}

impl SinkInner {
    fn send(&self, update: acp::SessionUpdate) {
        self.out.notify(
            proto::SESSION_UPDATE,
            acp::SessionNotification::new(acp::SessionId::new(self.session_id.clone()), update),
        );
    }

    fn send_text(&self, kind: ChunkKind, text: String) {
        let chunk = acp::ContentChunk::new(text.into());
        self.send(match kind {
            ChunkKind::Message => acp::SessionUpdate::AgentMessageChunk(chunk),
            ChunkKind::Thought => acp::SessionUpdate::AgentThoughtChunk(chunk),
        });
    }

    /// Send what is waiting (caller holds the lock).
    fn flush_locked(&self, pending: &mut Coalesced) {
        if let Some(kind) = pending.kind {
            if !pending.text.is_empty() {
                self.send_text(kind, std::mem::take(&mut pending.text));
            }
        }
    }
}

impl RpcSink {
    pub fn new(out: Outgoing, session_id: String) -> Self {
        RpcSink {
            inner: Arc::new(SinkInner {
                out,
                session_id,
                pending: Mutex::default(),
            }),
        }
    }

    /// Send any text still waiting and end the run (end of turn).
    pub fn flush(&self) {
        let mut pending = lock(&self.inner.pending);
        self.inner.flush_locked(&mut pending);
        pending.in_run = false;
    }

    fn chunk(&self, kind: ChunkKind, text: &str) {
        let mut pending = lock(&self.inner.pending);
        if pending.in_run && pending.kind == Some(kind) {
            pending.text.push_str(text);
            if pending.text.len() >= COALESCE_BYTES {
                self.inner.flush_locked(&mut pending);
            } else if !pending.timer_armed {
                pending.timer_armed = true;
                let inner = self.inner.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(COALESCE_WINDOW).await;
                    let mut pending = lock(&inner.pending);
                    pending.timer_armed = false;
                    inner.flush_locked(&mut pending);
                });
            }
            return;
        }
        // A new run (or the other kind of text): what waited goes first,
        // and this first chunk is not held back.
        self.inner.flush_locked(&mut pending);
        pending.kind = Some(kind);
        pending.in_run = true;
        self.inner.send_text(kind, text.to_string());
    }
}

impl TurnSink for RpcSink {
    fn update(&self, update: acp::SessionUpdate) {
        if let Some((kind, text)) = plain_chunk(&update) {
            return self.chunk(kind, text);
        }
        let mut pending = lock(&self.inner.pending);
        self.inner.flush_locked(&mut pending);
        pending.in_run = false;
        self.inner.send(update);
    }

    fn status(&self, status: SessionStatus) {
        let mut pending = lock(&self.inner.pending);
        self.inner.flush_locked(&mut pending);
        pending.in_run = false;
        self.inner.out.notify(proto::EXT_SESSION_STATUS, status);
    }

    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        if !self.inner.out.congested() {
            return None;
        }
        let out = self.inner.out.clone();
        Some(Box::pin(async move { out.room().await }))
    }
    fn notify(&self, method: &str, params: Value) {
        // After the text before it, like every other update.
        self.flush();
        self.inner.out.notify(method, params);
    }
}

/// `_passepartout/mcp/trust`: the project, and the SHA-256 of the
/// `.passepartout/config.toml` bytes the person was shown.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpTrustParams {
    cwd: PathBuf,
    expected_sha256: String,
}

/// Build the method table.
pub fn methods(daemon: Arc<Daemon>) -> Router<Daemon> {
    let mut r = Router::new(daemon);
    r.method(proto::INITIALIZE, Daemon::initialize)
        .async_method(proto::SESSION_NEW, |d, p| async move {
            d.new_session(p).await
        })
        .async_method(proto::SESSION_LOAD, |d, p| async move {
            d.load_session(p).await
        })
        .method(proto::SESSION_SET_MODE, Daemon::set_mode)
        .method(
            proto::SESSION_LIST,
            |d, p: Option<acp::ListSessionsRequest>| d.list_sessions(p.unwrap_or_default()),
        )
        .method(proto::EXT_BUDGET_SET, |d, p| Ok(d.budget_set(p)))
        .ordered(
            proto::SESSION_PROMPT,
            |d: &Daemon, p: &acp::PromptRequest| d.ticket_for(p),
            Daemon::prompt,
        )
        .method(proto::EXT_PLAN_DECIDE, |d, p| {
            d.approvals.desk.decide(p, "emacs").map_err(|e| match e {
                DecideError::Refused(m) => RpcError::refused(m),
                DecideError::NotFound(m) => RpcError::not_found(m),
                DecideError::BadEdit(m) => RpcError::invalid_params(m),
            })
        })
        .method(proto::EXT_PLANS_LIST, |d, _: Option<Value>| {
            d.approvals.desk.list().map_err(|e| RpcError::internal(e.to_string()))
        })
        .method(proto::EXT_PLANS_GET, |d, p: PlanIdParams| {
            use crate::plans::store::StoreError;
            d.approvals.desk.get(&p.plan_id).map_err(|e| match e {
                StoreError::NotFound(_) => RpcError::not_found(e.to_string()),
                StoreError::InvalidId(_) => RpcError::invalid_params(e.to_string()),
                other => RpcError::internal(other.to_string()),
            })
        })
        .method(proto::EXT_SKILLS_CHECK, |d, p| Ok(d.skills_check(p)))
        .method(proto::EXT_SKILLS_RELOAD, |d, p: Option<CwdParams>| {
            Ok(d.skills_reload(p.unwrap_or_default().cwd))
        })
        .method(proto::EXT_SKILLS_LIST, |d, p: Option<CwdParams>| {
            Ok(d.skills_list(p.unwrap_or_default().cwd))
        })
        .method(proto::EXT_SKILLS_TRUST, Daemon::skills_trust)
        .method(
            crate::mcp::project::EXT_MCP_TRUST,
            |d, params: McpTrustParams| {
                let cwd = usable_cwd(params.cwd)?;
                let config = &d.env.config;
                crate::mcp::project::trust_shown(
                    &cwd,
                    &config.trust_file(),
                    config.trust_project_tool_approval,
                    &params.expected_sha256,
                )
                .map_err(|e| RpcError::refused(e.to_string()))
            },
        )
        .async_method(proto::EXT_PROVIDERS, |d, _: Option<Value>| async move {
            let providers = crate::session_config::effective_providers(
                &crate::session_config::configured(&d.env.config),
                &lock(&d.settings),
            );
            Ok(crate::session_config::list(&providers, d.discovery()).await)
        })
        .method(
            proto::EXT_SESSION_CONFIGURE,
            |d, params: crate::session_config::ConfigureParams| {
                let session = d.session(&params.session_id)?;
                let providers = crate::session_config::effective_providers(
                    &crate::session_config::configured(&d.env.config),
                    &lock(&d.settings),
                );
                let (cascade, chosen) = crate::session_config::configure(&providers, &params)
                    .map_err(|e| invalid_params(e.to_string()))?;
                session.set_models(cascade);
                tracing::info!(session = %session.id, provider = %chosen.name, model = %chosen.model, "session configured");
                Ok(serde_json::json!({
                    "sessionId": session.id,
                    "provider": chosen.name,
                    "model": chosen.model,
                    "maxTokens": chosen.max_tokens,
                }))
            },
        )
        .async_method(proto::EXT_UNDO, |d, p| async move { d.undo(p).await })
        .async_method(proto::EXT_HISTORY, |d, p| async move { d.history(p).await });
    r
}

/// Serve the daemon on a reader/writer pair until input ends.
pub async fn serve_on<R, W>(env: Arc<AgentEnv>, reader: R, writer: W)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (out, queue) = Outgoing::channel();
    let daemon = Daemon::new(env, out.clone());
    let records_out = out.clone();
    crate::util::jsonl::on_loss(Arc::new(move |loss| {
        records_out.notify(proto::EXT_RECORDS, loss);
    }));
    daemon.approvals.desk.recover();
    let notify_daemon = daemon.clone();
    let eof_daemon = daemon.clone();
    let hooks = crate::rpc::Hooks {
        on_notification: Arc::new(move |m: &str, p: Value| notify_daemon.on_notification(m, p)),
        on_eof: Some(Arc::new(move || {
            // The editor went away (quit, restart): stop the turns, but a
            // plan waiting for a person stays pending for the next daemon.
            eof_daemon.approvals.desk.shut_down();
            eof_daemon.env.editor.disconnect();
            eof_daemon.env.client_fs.disconnect();
            eof_daemon.cancel_all();
        })),
    };
    crate::rpc::serve(reader, writer, out, queue, methods(daemon.clone()), hooks).await;
    daemon.env.editor.disconnect();
    daemon.cancel_all();
    daemon.env.mcp.shutdown().await;
    // What the sessions queued for their journals (a mode set just before
    // the client left) reaches the disk before the process exits, which
    // runs no destructors.
    let journals: Vec<_> = lock(&daemon.sessions)
        .values()
        .filter_map(|s| s.journal().cloned())
        .collect();
    for journal in journals {
        if let Err(e) = journal.sync().await {
            tracing::warn!(session = %journal.id(), "the session journal could not be synced at exit: {e}");
        }
    }
}

/// A session opened in `cwd`: its first shell action's one-time work
/// starts now, in the background, while the person writes the first
/// prompt: the transaction's store, overlay probe and first overlay
/// (`checkpoint::txn::warm_up`), and the control surface's first walk of
/// the project, which puts it under the inotify watch (paid by the first
/// call otherwise, and long in a large repository). A call that comes
/// first waits on the walk's lock and takes its result. The sandbox's
/// trial run stays with the first shell action: a session that never runs
/// a command should not pay for it. `passepartout run` does not warm up:
/// its one turn starts at once, and the work would only compete with it.
fn warm_up_session(config: &crate::config::Config, cwd: &std::path::Path) {
    if config.sandbox != crate::config::SandboxSetting::Bwrap {
        return;
    }
    crate::checkpoint::txn::warm_up(&config.state_dir(), &config.checkpoints, cwd);
    let cwd = cwd.to_path_buf();
    // The PATH search too is off the request's path.
    let spawned = std::thread::Builder::new()
        .name("surface-warm-up".into())
        .spawn(move || {
            if crate::sandbox::probe::locate_bwrap().is_some() {
                crate::sandbox::surface::walk_ahead(&cwd);
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("control surface warm-up: {e}");
    }
}
