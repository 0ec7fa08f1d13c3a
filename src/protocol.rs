//! The wire protocol in one place: ACP v1 types (re-exported from
//! `agent-client-protocol-schema`, never re-declared), the method names the
//! daemon answers, and the `_passepartout/...` extension types.
//! `docs/protocol.md` documents every message with an example exchange.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use agent_client_protocol_schema::v1 as acp;

/// ACP methods (client → daemon).
pub const INITIALIZE: &str = "initialize";
pub const SESSION_NEW: &str = "session/new";
pub const SESSION_PROMPT: &str = "session/prompt";
pub const SESSION_CANCEL: &str = "session/cancel";
pub const SESSION_LOAD: &str = "session/load";
pub const SESSION_LIST: &str = "session/list";
pub const SESSION_SET_MODE: &str = "session/set_mode";
/// ACP notifications and requests (daemon → client).
pub const SESSION_UPDATE: &str = "session/update";
pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";

/// ACP's error code for an unknown resource (a session, a flight plan, a
/// checkpoint).
pub const RESOURCE_NOT_FOUND: i32 = crate::rpc::message::codes::RESOURCE_NOT_FOUND;

/// Extension methods.
pub const EXT_PLAN_OFFER: &str = "_passepartout/plan/offer";
pub const EXT_PLAN_DECIDE: &str = "_passepartout/plan/decide";
pub const EXT_PLAN_RESOLVED: &str = "_passepartout/plan/resolved";
pub const EXT_PLANS_LIST: &str = "_passepartout/plans/list";
pub const EXT_SKILLS_CHECK: &str = "_passepartout/skills/check";
pub const EXT_SKILLS_RELOAD: &str = "_passepartout/skills/reload";
pub const EXT_SKILLS_LIST: &str = "_passepartout/skills/list";
/// Client → daemon: the person trusts project skill files (exact content).
pub const EXT_SKILLS_TRUST: &str = "_passepartout/skills/trust";
pub const EXT_SESSION_STATUS: &str = "_passepartout/session/status";
pub const EXT_SANDBOX_STATUS: &str = "_passepartout/sandbox/status";
/// Request: the configured providers and the models each offers.
pub const EXT_PROVIDERS: &str = "_passepartout/providers";
/// Request: provider, model and output limit for one session's next turns.
pub const EXT_SESSION_CONFIGURE: &str = "_passepartout/session/configure";
/// Revert an applied checkpoint (request; see docs/checkpoints.md).
pub const EXT_UNDO: &str = "_passepartout/undo";
/// List a working directory's checkpoints (request).
pub const EXT_HISTORY: &str = "_passepartout/history";
/// Daemon → client after every provider request: tokens and cost.
pub const EXT_USAGE: &str = crate::agent::turn::USAGE_NOTIFICATION;
/// Daemon → client: a session's history was compacted.
pub const EXT_SESSION_COMPACTED: &str = crate::agent::turn::COMPACTED_NOTIFICATION;
/// Client → daemon: change the budgets of this daemon.
pub const EXT_BUDGET_SET: &str = "_passepartout/budget/set";
/// Daemon → Emacs: evaluate a form (the emacs actuator).
pub const EXT_EMACS_EVAL: &str = "_passepartout/emacs/eval";

/// What the editor may put under `_meta.passepartout` in `initialize`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientSettings {
    /// The client shows flight plans itself (`_passepartout/plan/offer`)
    /// instead of receiving `session/request_permission`.
    pub flight_plans: bool,
    /// The client is the passepartout Emacs package and answers
    /// `_passepartout/emacs/eval` (the emacs actuator).
    pub emacs: bool,
    /// Providers in cascade order; replaces the configured list.
    pub providers: Option<Vec<crate::llm::config::ProviderConfig>>,
    /// API keys by provider name (e.g. from auth-source). Never logged.
    #[serde(skip_serializing)]
    pub api_keys: std::collections::BTreeMap<String, String>,
}

/// `_passepartout/session/status`: a session's state for a mode line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    pub session_id: String,
    /// `idle`, `thinking`, `acting`, `waiting` (for a person).
    pub state: String,
    /// The provider that answered last, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// `_passepartout/plan/decide` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanDecideParams {
    pub plan_id: String,
    /// `approve` or `reject`.
    pub decision: PlanVerdict,
    /// The plan's Org text, possibly edited; its action block is parsed back.
    #[serde(default)]
    pub org: Option<String>,
    #[serde(default)]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanVerdict {
    Approve,
    Reject,
}

/// `_passepartout/skills/check` parameters: a skill file's (unsaved) text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillsCheckParams {
    pub path: String,
    pub text: String,
}

/// `_passepartout/skills/trust` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillsTrustParams {
    /// The project (absolute): its `.passepartout/skills` are meant.
    pub cwd: std::path::PathBuf,
    /// Files to trust (relative ones are under `cwd`); absent: every skill
    /// file of the project.
    #[serde(default)]
    pub paths: Option<Vec<std::path::PathBuf>>,
    /// Optional SHA-256 per path (as given) of the content the person saw:
    /// a file whose bytes now hash differently is refused, not trusted.
    #[serde(default)]
    pub expected_sha256: std::collections::BTreeMap<String, String>,
}

/// A diagnostic as sent to the editor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireDiagnostic {
    pub path: String,
    pub line: usize,
    pub column: usize,
    /// `error` or `warning`.
    pub severity: String,
    pub message: String,
}

/// Extract our settings from `initialize`'s `_meta`.
pub fn client_settings(
    meta: Option<&serde_json::Map<String, Value>>,
) -> Result<ClientSettings, String> {
    match meta.and_then(|m| m.get("passepartout")) {
        None | Some(Value::Null) => Ok(ClientSettings::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| format!("invalid _meta.passepartout: {e}")),
    }
}

/// `_passepartout/sandbox/status`: can shell actions run, and if not, why
/// and how to fix it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxReport {
    pub available: bool,
    pub message: String,
}

/// `_passepartout/undo` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndoParams {
    /// The working directory whose checkpoint to undo.
    pub cwd: std::path::PathBuf,
    /// The checkpoint (`c12`); absent: the last applied one.
    #[serde(default)]
    pub id: Option<String>,
    /// Undo a whole turn instead: its id (`t…`, from the history), or
    /// `"last"` for the last turn that changed the directory.
    #[serde(default)]
    pub turn: Option<String>,
}

/// `_passepartout/history` parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryParams {
    pub cwd: std::path::PathBuf,
    /// At most this many, newest first.
    #[serde(default)]
    pub limit: Option<usize>,
}
