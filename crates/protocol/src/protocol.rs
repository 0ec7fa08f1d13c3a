//! The wire protocol in one place: ACP v1 types (re-exported from
//! `agent-client-protocol-schema`, never re-declared), the method names the
//! daemon answers, and the `_passepartout/...` extension types.
//! `docs/protocol.md` documents every message with an example exchange.

use std::collections::BTreeMap;
use std::fmt;

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
/// ACP method (daemon → client): read a text file through the client.
pub const FS_READ_TEXT_FILE: &str = "fs/read_text_file";
/// ACP method (daemon → client): write a text file through the client.
pub const FS_WRITE_TEXT_FILE: &str = "fs/write_text_file";

/// ACP's error code for an unknown resource (a session, a flight plan, a
/// checkpoint).
pub const RESOURCE_NOT_FOUND: i32 = crate::rpc::message::codes::RESOURCE_NOT_FOUND;

/// Extension methods.
pub const EXT_PLAN_OFFER: &str = "_passepartout/plan/offer";
pub const EXT_PLAN_DECIDE: &str = "_passepartout/plan/decide";
pub const EXT_PLAN_RESOLVED: &str = "_passepartout/plan/resolved";
pub const EXT_PLANS_LIST: &str = "_passepartout/plans/list";
pub const EXT_PLANS_GET: &str = "_passepartout/plans/get";
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
pub const EXT_USAGE: &str = "_passepartout/usage";
/// Daemon → client: a session's history was compacted.
pub const EXT_SESSION_COMPACTED: &str = "_passepartout/session/compacted";
/// Daemon → client: the audit log or a session journal started (or
/// stopped) losing records, e.g. on a full disk.
pub const EXT_RECORDS: &str = "_passepartout/records";
/// Daemon → client: the session journals passed their quota and the
/// oldest were removed (once per removal).
pub const EXT_SESSIONS_PRUNED: &str = "_passepartout/sessions/pruned";
/// Daemon → client: one of a session's MCP servers changed state while the
/// session ran (it stopped during a call, or refused the session's token and
/// needs a login); its tools are no longer offered.
pub const EXT_MCP_SERVER: &str = "_passepartout/mcp/server";
/// Client → daemon: change the budgets of this daemon.
pub const EXT_BUDGET_SET: &str = "_passepartout/budget/set";
/// Client → daemon: trust a project's MCP configuration, by the hash of
/// the bytes the person was shown.
pub const EXT_MCP_TRUST: &str = "_passepartout/mcp/trust";
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
    pub providers: Option<Vec<ProviderConfig>>,
    /// API keys by provider name (e.g. from auth-source). Never logged.
    #[serde(skip_serializing)]
    pub api_keys: std::collections::BTreeMap<String, String>,
}

/// `_passepartout/sessions/pruned`: a new session took the session
/// journals past their quota (`[sessions]`), and the oldest were removed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionsPruned {
    /// The writer whose records were removed (`session`), as in
    /// `_passepartout/records`.
    pub writer: &'static str,
    /// The journals' directory.
    pub path: std::path::PathBuf,
    /// Each journal removed, oldest first.
    pub removed: Vec<PrunedJournal>,
    /// Bytes freed.
    pub freed: u64,
    /// Journals left, and their bytes.
    pub kept: usize,
    pub kept_bytes: u64,
    /// Sessions past the quota kept because they are open.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub open_kept: Vec<String>,
    /// The same, in one line for the person, naming the settings.
    pub message: String,
}

/// One journal removed by the quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrunedJournal {
    pub session_id: String,
    pub bytes: u64,
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

/// `initialize`'s `_meta.passepartout` does not have the settings' shape.
#[derive(Debug, thiserror::Error)]
#[error("invalid _meta.passepartout: {0}")]
pub struct InvalidSettings(#[from] serde_json::Error);

/// Extract our settings from `initialize`'s `_meta`.
pub fn client_settings(
    meta: Option<&serde_json::Map<String, Value>>,
) -> Result<ClientSettings, InvalidSettings> {
    match meta.and_then(|m| m.get("passepartout")) {
        None | Some(Value::Null) => Ok(ClientSettings::default()),
        Some(v) => Ok(serde_json::from_value(v.clone())?),
    }
}

/// Whether `initialize`'s `clientCapabilities._meta.passepartout.notifications`
/// is `true`: the client wants the `_passepartout/*` notifications (status,
/// usage, sandbox, compaction, records). A plain ACP client leaves it out
/// and gets the schema-defined notifications only.
pub fn wants_extensions(capabilities_meta: Option<&serde_json::Map<String, Value>>) -> bool {
    capabilities_meta
        .and_then(|m| m.get("passepartout"))
        .and_then(|p| p.get("notifications"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
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
    /// Without `id`: undo the newest change of this session (a chat's),
    /// not of the whole project; refused, naming the newest change, when
    /// the session has none. With `turn: "last"`: the session's last turn.
    /// Ignored with `id`.
    #[serde(default)]
    pub session_id: Option<String>,
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

// Provider entries: the editor sends them in `initialize`
// (`ClientSettings::providers`), the config file holds the same; `llm`
// turns them into live providers.

/// Which wire format an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions (Ollama, llama.cpp, vLLM,
    /// LM Studio, OpenAI, DeepSeek, OpenRouter, ...).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// The OpenAI Responses API (`/responses`: current OpenAI models,
    /// Codex).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl ProviderKind {
    /// The address used when an entry leaves `base_url` empty.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "http://127.0.0.1:11434/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::OpenAiResponses => "https://api.openai.com/v1",
        }
    }
}

/// One model endpoint as configured by the user. Unknown keys are errors
/// (a misspelt `api_keyenv` must not be ignored).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// A short name for logs and errors, e.g. `ollama`.
    pub name: String,
    pub kind: ProviderKind,
    /// For `openai`, the URL that `/chat/completions` is appended to (usually
    /// ending in `/v1`); for `anthropic`, the host (`/v1/messages` is
    /// appended). Empty means [`ProviderKind::default_base_url`].
    #[serde(default)]
    pub base_url: String,
    pub model: String,
    /// The key itself. Prefer `api_key_env`: config files get shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The environment variable holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Whether the model takes tools natively; false selects the text tool
    /// protocol.
    #[serde(default = "default_true")]
    pub native_tools: bool,
    /// The longest wait for a TCP (and TLS) connection (0 counts as 1).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// The longest wait for the response head or for the next chunk
    /// (0 counts as 1).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: u64,
    /// Retries on this provider before the cascade moves on.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Output token limit sent with each request (Anthropic requires one and
    /// defaults to 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The model's context window in tokens; when absent, known hosted
    /// models get theirs and anything else `[context] default_window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Whether the model accepts images; when absent, guessed from the
    /// wire format and the model's name (`llm::image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
    /// Extra HTTP headers sent with every request (e.g. for a proxy).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Where `api_key` was read (the config file and line, a flag, the
    /// editor), for the advice on a 401/403; never read from a file.
    #[serde(skip)]
    pub key_origin: Option<String>,
}

fn default_true() -> bool {
    true
}
fn default_connect_timeout() -> u64 {
    5
}
fn default_idle_timeout() -> u64 {
    120
}
fn default_max_retries() -> u32 {
    2
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values are masked too: `Authorization` lives there as often
        // as in `api_key`.
        let headers: BTreeMap<&str, &str> =
            self.headers.keys().map(|k| (k.as_str(), "***")).collect();
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("api_key_env", &self.api_key_env)
            .field("native_tools", &self.native_tools)
            .field("connect_timeout_secs", &self.connect_timeout_secs)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("max_tokens", &self.max_tokens)
            .field("context_window", &self.context_window)
            .field("images", &self.images)
            .field("headers", &headers)
            .finish()
    }
}

impl ProviderConfig {
    /// An entry with every optional field at its default.
    pub fn new(
        name: impl Into<String>,
        kind: ProviderKind,
        base_url: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        ProviderConfig {
            name: name.into(),
            kind,
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            api_key_env: None,
            native_tools: default_true(),
            connect_timeout_secs: default_connect_timeout(),
            idle_timeout_secs: default_idle_timeout(),
            max_retries: default_max_retries(),
            max_tokens: None,
            context_window: None,
            images: None,
            headers: BTreeMap::new(),
            key_origin: None,
        }
    }
}
