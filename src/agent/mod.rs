//! The agent loop: perceive → reason → act, one file per stage, and
//! [`turn`] tying them into a small state machine.
//!
//! The loop talks to the outside only through traits: a [`TurnSink`] receives
//! what the person should see (streamed text, tool calls, status), and an
//! [`Approver`] answers when a gate asks for a person. The daemon implements
//! both over JSON-RPC; `passepartout run` implements them on the terminal.

pub mod act;
pub mod perceive;
pub mod reason;
pub mod session;
pub mod turn;

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::action::Action;
use crate::actuators::ActuatorRegistry;
use crate::config::Config;
use crate::gates::engine::GateEngine;
use crate::gates::{GateContext, Verdict};
use crate::llm::cascade::Cascade;
use crate::protocol::{acp, SessionStatus};
use crate::tools::ToolRegistry;

pub use session::Session;

/// Where a session's updates go.
pub trait TurnSink: Send + Sync {
    /// An ACP `session/update` for the session.
    fn update(&self, update: acp::SessionUpdate);
    /// The session's state changed (for mode lines).
    fn status(&self, status: SessionStatus);
    /// An extension notification about the session (`_passepartout/usage`,
    /// `_passepartout/session/compacted`). Default: dropped.
    fn notify(&self, _method: &str, _params: serde_json::Value) {}
    /// Backpressure: `Some(wait)` when the person's side is behind and the
    /// turn should wait before taking more from the model. The reason loop
    /// awaits it (racing the cancel token) before each provider event.
    /// Required, so that a sink wrapping another cannot forget to pass it
    /// on (one did, and a client that stopped reading grew the daemon
    /// without bound).
    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>>;
}

/// A sink for work nobody watches live (a plan run after a restart: its
/// outcome is announced by the flight desk).
pub struct NullSink;

impl TurnSink for NullSink {
    fn update(&self, _update: acp::SessionUpdate) {}
    fn status(&self, _status: SessionStatus) {}
    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        None // never behind: nothing is shown
    }
}

/// A question to a person about one action.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub session_id: String,
    /// The session's working directory (where the action would run).
    pub cwd: std::path::PathBuf,
    pub tool_call_id: String,
    /// The model's own explanation (the text it wrote before the call).
    pub explanation: String,
    pub action: Action,
    pub trace: Vec<Verdict>,
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalOutcome {
    /// Run this action (possibly edited by the person). `hash` is the
    /// content hash of what the person saw when approving; the last-mile
    /// check refuses to run anything else.
    Approved {
        action: Box<Action>,
        hash: String,
        by: String,
    },
    Rejected {
        comment: Option<String>,
        by: String,
    },
    /// The turn was cancelled while waiting.
    Cancelled,
}

/// Why an approved action may not run after all: the flight desk's
/// exactly-once guard refused it.
#[derive(Debug, thiserror::Error)]
pub enum NotBegun {
    /// The action about to run is not the one the live turn's plan holds.
    #[error("not run: the action about to run differs from the approved flight plan")]
    Differs,
    /// The live turn's plan could not be begun (already begun elsewhere, no
    /// longer approved, unreadable).
    #[error("{0}")]
    Store(crate::plans::store::StoreError),
    /// A plan run after its turn: the action differs from its record.
    #[error("not run: the action differs from the approved plan")]
    DiffersFromRecord,
    /// A plan run after its turn could not be begun.
    #[error("not run: {0}")]
    Taken(crate::plans::store::StoreError),
}

/// Asks a person, and hears what became of what they approved.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> ApprovalOutcome;

    /// An approved action is about to run. `Err(why)` stops it (for
    /// example: the same approval already ran elsewhere). Default: go.
    fn begin(
        &self,
        _session_id: &str,
        _tool_call_id: &str,
        _action: &Action,
    ) -> Result<(), NotBegun> {
        Ok(())
    }

    /// Whether a person can answer questions now (false: `run` without a
    /// terminal). A question that offers a convenience rather than guards
    /// an action (the once-per-session `registries` grant) is only asked
    /// when one can. Default: yes.
    fn can_ask(&self) -> bool {
        true
    }

    /// The flight plan an approved call runs under (for the audit record).
    fn plan_id(&self, _session_id: &str, _tool_call_id: &str) -> Option<String> {
        None
    }

    /// What became of an approved action (ran, failed, or was stopped by
    /// the gates after an edit or at the last mile).
    fn settle(
        &self,
        _session_id: &str,
        _tool_call_id: &str,
        _status: &act::ActStatus,
        _text: &str,
    ) {
    }
}

/// The tools, prompt and gates a turn works with.
#[derive(Clone)]
pub struct Toolset {
    pub tools: ToolRegistry,
    /// Extra system-prompt text (active skills' prompt sections).
    pub prompt: String,
    pub gates: Arc<GateEngine>,
    /// What the person must hear before the turn (skill files that failed
    /// to load), shown as a thought so `run` prints it on stderr.
    pub notices: Vec<String>,
}

/// Gives each turn its toolset (skills may differ per project and reload
/// between turns).
pub trait ToolsetSource: Send + Sync {
    fn toolset(&self, cwd: &Path, user_message: &str) -> Toolset;

    /// Re-read skills now; the skill names in effect for `cwd` and every
    /// diagnostic. Sources without skills return nothing.
    fn reload(&self, _cwd: Option<&Path>) -> (Vec<String>, Vec<crate::skills::Diagnostic>) {
        (Vec::new(), Vec::new())
    }

    /// The slash commands skills declare for `cwd`. Sources without
    /// skills have none.
    fn commands(&self, _cwd: &Path) -> Vec<crate::skills::Command> {
        Vec::new()
    }

    /// What is loaded for `cwd`, for `skills list`.
    fn list(
        &self,
        _cwd: &Path,
    ) -> (
        Vec<crate::skills::SkillSummary>,
        Vec<crate::skills::Diagnostic>,
    ) {
        (Vec::new(), Vec::new())
    }
}

/// Shared by every session of a daemon.
pub struct AgentEnv {
    pub config: Config,
    pub models: RwLock<Arc<Cascade>>,
    pub toolsets: Arc<dyn ToolsetSource>,
    pub actuators: ActuatorRegistry,
    /// Whether shell actions can run, for `_passepartout/sandbox/status`.
    pub sandbox: crate::protocol::SandboxReport,
    /// The append-only audit log (None only when it could not be opened;
    /// that is reported at startup).
    pub audit: Option<Arc<crate::audit::AuditLog>>,
    /// The connected Emacs, for the emacs actuator.
    pub editor: crate::actuators::emacs::EditorLink,
    /// The client's `fs/*` methods, when it offers them (files actuator).
    pub client_fs: crate::actuators::client_fs::ClientFsLink,
    /// Each session's MCP servers (their tools join every turn's toolset).
    pub mcp: Arc<crate::mcp::McpManager>,
    /// Budgets, prices and the day's usage ledger.
    pub accounts: Arc<crate::budget::Accounts>,
    /// Where session journals live (None: sessions are not persisted).
    pub sessions: Option<Arc<crate::sessions::SessionStore>>,
    /// What output redaction remembers between tool calls.
    pub redaction: Redaction,
}

/// What output redaction remembers between tool calls: the person's
/// secret values per file (by stamp) and the compiled search for the last
/// set of known values, so a call pays neither a scan of the project nor a
/// compilation when nothing changed.
#[derive(Default)]
pub struct Redaction {
    pub values: crate::gates::secret_values::SecretValues,
    pub patterns: crate::gates::secrets::KnownPatterns,
    /// The project the gates last judged an action in (the audit log's
    /// records are redacted with its values).
    pub cwd: std::sync::Mutex<Option<std::path::PathBuf>>,
}

impl AgentEnv {
    pub fn models(&self) -> Arc<Cascade> {
        self.models
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn set_models(&self, cascade: Cascade) {
        *self
            .models
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(cascade);
    }

    /// Append to the audit log (through its writer thread, so the fsync
    /// stays off the async runtime); a failure is logged, never fatal to a
    /// turn.
    pub fn record(&self, record: crate::audit::AuditRecord) {
        if let Some(log) = &self.audit {
            // The person's secret values as the last tool output was
            // redacted with (by value; the record is redacted by rule).
            // (The `executed` record is made before the output is
            // redacted, so the values are looked up here for the project
            // the gates last judged an action in.)
            let cwd = crate::util::sync::lock(&self.redaction.cwd).clone();
            let values = match cwd {
                Some(cwd) => Some(self.redaction.patterns.of(&self.known_values(&cwd))),
                None => self.redaction.patterns.last(),
            };
            let record = match values {
                Some(values) => record.without_values(&values),
                None => record,
            };
            if let Err(e) = log.record(&record) {
                tracing::error!("audit log: {e}");
            }
        }
    }

    /// Tool output as the model may read it: configured provider keys, the
    /// project's secret values in any common encoding, and
    /// credential shapes replaced by `[redacted: …]`, with a note saying
    /// how many were taken out.
    pub fn redact_output(&self, text: String, cwd: &Path) -> String {
        let known = self.known_values(cwd);
        let r = crate::gates::secrets::redact_output_with(&text, &known, &self.redaction.patterns);
        if r.hits == 0 {
            return text;
        }
        format!(
            "{}\n[passepartout: {} secret(s) redacted from this output]",
            r.text, r.hits
        )
    }

    /// The person's secret values a flight plan made in a directory must
    /// not show (see [`crate::plans::shown`]), as tool output hides them.
    /// Holds the environment weakly: a store outliving it hides nothing.
    pub fn plan_values(self: &Arc<Self>) -> crate::plans::store::SecretValuesOf {
        let env = Arc::downgrade(self);
        crate::plans::store::SecretValuesOf(Arc::new(move |cwd: Option<&Path>| {
            let env = env.upgrade()?;
            match cwd {
                Some(cwd) => Some(env.secret_values_in(cwd)),
                None => env.redaction.patterns.last(),
            }
        }))
    }

    /// The person's secret values known in `cwd`, compiled for hiding
    /// (kept between calls while they stay the same).
    pub fn secret_values_in(&self, cwd: &Path) -> Arc<crate::gates::known_values::ValueMatcher> {
        self.redaction.patterns.of(&self.known_values(cwd))
    }

    /// The secret values known for a call in `cwd`: the configured provider
    /// keys and the person's values (see [`Self::redact_output`]).
    fn known_values(&self, cwd: &Path) -> Vec<crate::gates::known_values::KnownValue> {
        let mut known: Vec<crate::gates::known_values::KnownValue> = self
            .config
            .providers
            .iter()
            .filter_map(passepartout_llm::llm::ProviderConfigExt::resolved_key)
            .map(|key| crate::gates::known_values::KnownValue::new(key, "configured API key"))
            .collect();
        // The person's secret values, read host-side, so a value that went
        // through base64, hex or rev is still found: the project's secret
        // files (those the sandbox surface's walk finds, at any depth, kept
        // current by its watch) and the credential files in their home;
        // each is stat'ed every call and read again when it changed.
        let files = crate::sandbox::surface::redactable_files(cwd);
        let home = crate::paths::home_dir();
        known.extend(self.redaction.values.values(cwd, &files, Some(&home)));
        known.sort();
        known.dedup_by(|a, b| a.value == b.value);
        known
    }

    pub fn gate_context(&self, cwd: &Path) -> GateContext {
        *crate::util::sync::lock(&self.redaction.cwd) = Some(cwd.to_path_buf());
        GateContext {
            cwd: cwd.to_path_buf(),
            home: Some(crate::paths::home_dir()),
            network_allow: self.config.network_allow.clone(),
            host_paths: crate::control_surface::host_paths_of(&self.config.host_dirs()),
            // Whether this action runs contained is `agent::act`'s to say.
            contained: false,
        }
    }
}

/// Tell the sink the session's state, provider and token totals.
pub(crate) fn report_status(sink: &dyn TurnSink, session: &Session, state: &str) {
    let usage = session.usage();
    sink.status(SessionStatus {
        session_id: session.id.clone(),
        state: state.into(),
        provider: session.provider(),
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
    });
}
