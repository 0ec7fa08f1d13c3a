//! MCP elicitation routed to the person: a server's `elicitation/create`
//! (a form, or a URL to visit) becomes the ACP client's `elicitation/create`
//! for the session the server belongs to, and the person's answer goes back.
//!
//! Nothing here trusts the server. Its name and message reach the person
//! marked as its words ([`shown_message`]); the form is refused before it is
//! shown when it is large ([`MAX_SCHEMA_BYTES`], [`MAX_FIELDS`]) or not the
//! flat kind MCP allows (string, number, integer, boolean, enum,
//! multi-select); the answer is checked against the form ([`check_answer`])
//! before it goes back, and a wrong one is asked again, at most
//! [`MAX_ATTEMPTS`] times in all, then declined.
//!
//! Nothing here hangs the server either: a client that did not advertise
//! elicitation in `initialize` (or not the mode asked for) means an
//! immediate `decline`, and a line to the person and to the model saying
//! the server asked for input the client cannot show; a session has at most
//! one question waiting (a second is declined with that reason); a question
//! not answered within [`ANSWER_TIMEOUT`] is `cancel`led; a URL is shown,
//! never opened by the daemon.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::protocol::{self as proto, acp};
use crate::rpc::Outgoing;
use crate::util::sync::lock;

/// The ACP method (client side) that asks the person.
pub const ELICITATION_CREATE: &str = "elicitation/create";
/// The ACP notification that a URL elicitation was completed.
pub const ELICITATION_COMPLETE: &str = "elicitation/complete";
/// The MCP notification a server sends when a URL elicitation completed.
pub const MCP_ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";
/// How long the person has to answer one question before it is cancelled.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);
/// Largest form (its JSON schema, serialised) shown to the person.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Most fields in one form.
pub const MAX_FIELDS: usize = 32;
/// The server's message is cut here before it is shown.
pub const MAX_MESSAGE_BYTES: usize = 2048;
/// How many times the person is asked when the answers do not fit the form.
pub const MAX_ATTEMPTS: usize = 3;
/// Notes kept for the model per server until a tool result carries them.
pub const MAX_NOTES: usize = 8;
/// URL elicitation ids remembered per server (to forward their completion).
const MAX_URL_IDS: usize = 16;

/// What the ACP client said it can show, and the connection to it.
#[derive(Clone)]
struct Offered {
    out: Outgoing,
    form: bool,
    url: bool,
}

/// The connection's elicitation support, shared by every MCP server of
/// the daemon: set at `initialize`, and the sessions with a question
/// waiting.
pub struct ElicitationLink {
    client: RwLock<Option<Offered>>,
    waiting: Mutex<HashSet<String>>,
    timeout: Duration,
}

impl Default for ElicitationLink {
    fn default() -> Self {
        ElicitationLink::with_timeout(ANSWER_TIMEOUT)
    }
}

impl ElicitationLink {
    /// A link whose questions are cancelled after `timeout` (tests use a
    /// short one; the daemon [`ANSWER_TIMEOUT`]).
    pub fn with_timeout(timeout: Duration) -> Self {
        ElicitationLink {
            client: RwLock::new(None),
            waiting: Mutex::default(),
            timeout,
        }
    }

    /// Record the client's `elicitation` capability (absent: every
    /// question is declined, and the person told on `out`).
    pub fn connect(&self, out: Outgoing, caps: Option<&acp::ElicitationCapabilities>) {
        // ACP: an empty object (`"elicitation": {}`) offers no mode.
        let (form, url) = caps.map_or((false, false), |c| (c.supports_form(), c.supports_url()));
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Offered { out, form, url });
    }

    /// Send a notification to the client, when one is connected: the link
    /// is also how a server's other news (a state change mid-session)
    /// reaches the person. `_`-prefixed methods reach only a client that
    /// asked for them.
    pub fn announce(&self, method: &str, params: serde_json::Value) {
        if let Some(offered) = self.offered() {
            offered.out.notify(method, params);
        }
    }

    fn offered(&self) -> Option<Offered> {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Take the session's one waiting place; false when a question waits.
    fn take_turn(&self, session: &str) -> bool {
        lock(&self.waiting).insert(session.to_string())
    }

    fn give_turn_back(&self, session: &str) {
        lock(&self.waiting).remove(session);
    }
}

/// One server's side of elicitation: whether it is asking now (a tool call
/// waiting on the person does not time out meanwhile), and the lines the
/// model reads with the call's result.
#[derive(Default)]
pub struct ServerQuestions {
    /// The question being asked now, cancelled when the call that caused
    /// it ends (timeout or cancel).
    asking: Mutex<Option<CancellationToken>>,
    /// When the last question was answered: the call's clock restarts.
    answered_at: Mutex<Option<Instant>>,
    notes: Mutex<Vec<String>>,
    url_ids: Mutex<Vec<String>>,
}

impl ServerQuestions {
    /// Whether the person is being asked now.
    pub fn asking(&self) -> bool {
        lock(&self.asking).is_some()
    }

    /// When the last question was answered (or given up).
    pub fn answered_at(&self) -> Option<Instant> {
        *lock(&self.answered_at)
    }

    /// Stop asking (the call that caused the question is gone).
    pub fn cancel(&self) {
        if let Some(token) = lock(&self.asking).as_ref() {
            token.cancel();
        }
    }

    /// The lines for the model, taken once.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.notes))
    }

    fn note(&self, line: String) {
        let mut notes = lock(&self.notes);
        if notes.len() < MAX_NOTES {
            notes.push(line);
        }
    }
}

/// Who asks, for whom.
#[derive(Clone)]
pub struct Asker {
    pub server: String,
    pub session: String,
    pub link: Arc<ElicitationLink>,
    pub questions: Arc<ServerQuestions>,
}

/// The server's message as the person sees it: marked as its words, cut
/// at [`MAX_MESSAGE_BYTES`].
pub fn shown_message(server: &str, message: &str) -> String {
    let mut text = message.trim().to_string();
    if text.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(" […]");
    }
    format!("MCP server `{server}` asks (its words, untrusted): {text}")
}

fn answer(action: ElicitationAction) -> ElicitResult {
    ElicitResult::new(action)
}

impl Asker {
    /// Ask the person, and say so to them and the model when they cannot be.
    pub async fn ask(
        &self,
        request: ElicitRequestParams,
        server_gone: CancellationToken,
    ) -> ElicitResult {
        let offered = self.link.offered();
        let (message, mode) = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => (message.clone(), "form"),
            ElicitRequestParams::UrlElicitationParams { message, .. } => (message.clone(), "url"),
            _ => (String::new(), "unknown"),
        };
        let supported = offered.as_ref().is_some_and(|o| match mode {
            "form" => o.form,
            "url" => o.url,
            _ => false,
        });
        if !supported {
            let url = match &request {
                ElicitRequestParams::UrlElicitationParams { url, .. } => {
                    format!(" (the page it named, not opened: {url})")
                }
                _ => String::new(),
            };
            self.refused(
                offered.as_ref(),
                &format!(
                    "MCP server `{}` asked for input ({mode} mode) that this client cannot show{url}; it was declined. {}",
                    self.server,
                    shown_message(&self.server, &message)
                ),
            );
            return answer(ElicitationAction::Decline);
        }
        let Some(offered) = offered else {
            return answer(ElicitationAction::Decline);
        };
        if !self.link.take_turn(&self.session) {
            self.refused(
                Some(&offered),
                &format!(
                    "MCP server `{}` asked a question while another is waiting for the person (one at a time per session); it was declined",
                    self.server
                ),
            );
            return answer(ElicitationAction::Decline);
        }
        let token = server_gone.child_token();
        *lock(&self.questions.asking) = Some(token.clone());
        let result = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => {
                let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
                self.ask_form(&offered, &message, schema, &token).await
            }
            ElicitRequestParams::UrlElicitationParams {
                message,
                url,
                elicitation_id,
                ..
            } => {
                self.ask_url(&offered, &message, url, elicitation_id, &token)
                    .await
            }
            _ => answer(ElicitationAction::Decline),
        };
        *lock(&self.questions.asking) = None;
        *lock(&self.questions.answered_at) = Some(Instant::now());
        self.link.give_turn_back(&self.session);
        result
    }

    /// Tell the person (a message in the session) and the model (with the
    /// call's result) why a question was not shown.
    fn refused(&self, offered: Option<&Offered>, line: &str) {
        tracing::info!(server = %self.server, session = %self.session, "{line}");
        self.questions.note(format!("[{line}]"));
        if let Some(o) = offered {
            let chunk = acp::ContentChunk::new(format!("\n[{line}]\n").into());
            o.out.notify(
                proto::SESSION_UPDATE,
                acp::SessionNotification::new(
                    acp::SessionId::new(self.session.clone()),
                    acp::SessionUpdate::AgentMessageChunk(chunk),
                ),
            );
        }
    }

    async fn ask_form(
        &self,
        offered: &Offered,
        message: &str,
        schema: Value,
        token: &CancellationToken,
    ) -> ElicitResult {
        let form = check_form(&schema).and_then(|()| {
            Ok(serde_json::from_value::<acp::ElicitationSchema>(
                schema.clone(),
            )?)
        });
        let form = match form {
            Ok(f) => f,
            Err(why) => {
                self.refused(
                    Some(offered),
                    &format!(
                        "MCP server `{}` asked for input, but {why}; it was declined",
                        self.server
                    ),
                );
                return answer(ElicitationAction::Decline);
            }
        };
        let mut problem: Option<String> = None;
        for _ in 0..MAX_ATTEMPTS {
            let mut shown = shown_message(&self.server, message);
            if let Some(p) = &problem {
                shown = format!(
                    "Your last answer did not fit the form: {p}. Please answer again.\n\n{shown}"
                );
            }
            let params = acp::CreateElicitationRequest::new(
                acp::ElicitationFormMode::new(
                    acp::ElicitationSessionScope::new(acp::SessionId::new(self.session.clone())),
                    form.clone(),
                ),
                shown,
            );
            let response = match self.send(offered, params, token).await {
                Ok(r) => r,
                Err(result) => return result,
            };
            match response.action {
                acp::ElicitationAction::Accept(accepted) => {
                    let content = serde_json::to_value(accepted.content.unwrap_or_default())
                        .unwrap_or(Value::Null);
                    match check_answer(&schema, &content) {
                        Ok(()) => return answer(ElicitationAction::Accept).with_content(content),
                        Err(p) => problem = Some(p.to_string()),
                    }
                }
                acp::ElicitationAction::Decline => return answer(ElicitationAction::Decline),
                acp::ElicitationAction::Cancel => return answer(ElicitationAction::Cancel),
                _ => return answer(ElicitationAction::Decline),
            }
        }
        self.refused(
            Some(offered),
            &format!(
                "the answers to MCP server `{}` did not fit its form {MAX_ATTEMPTS} times (last: {}); it was declined",
                self.server,
                problem.unwrap_or_default()
            ),
        );
        answer(ElicitationAction::Decline)
    }

    async fn ask_url(
        &self,
        offered: &Offered,
        message: &str,
        url: String,
        elicitation_id: String,
        token: &CancellationToken,
    ) -> ElicitResult {
        let id = if elicitation_id.is_empty() {
            format!("{}-{}", self.server, crate::util::time::now_rfc3339())
        } else {
            elicitation_id
        };
        {
            let mut ids = lock(&self.questions.url_ids);
            if ids.len() >= MAX_URL_IDS {
                ids.remove(0);
            }
            ids.push(id.clone());
        }
        let params = acp::CreateElicitationRequest::new(
            acp::ElicitationUrlMode::new(
                acp::ElicitationSessionScope::new(acp::SessionId::new(self.session.clone())),
                id,
                url,
            ),
            shown_message(&self.server, message),
        );
        match self.send(offered, params, token).await {
            Ok(response) => match response.action {
                acp::ElicitationAction::Accept(_) => answer(ElicitationAction::Accept),
                acp::ElicitationAction::Cancel => answer(ElicitationAction::Cancel),
                _ => answer(ElicitationAction::Decline),
            },
            Err(result) => result,
        }
    }

    /// Forward a server's `notifications/elicitation/complete` for a URL
    /// question this server asked (any other id is ignored).
    pub fn completed(&self, params: &Value) {
        let Some(id) = params.get("elicitationId").and_then(Value::as_str) else {
            return;
        };
        if !lock(&self.questions.url_ids)
            .iter()
            .any(|known| known == id)
        {
            return;
        }
        if let Some(o) = self.link.offered().filter(|o| o.url) {
            o.out.notify(
                ELICITATION_COMPLETE,
                acp::CompleteElicitationNotification::new(id.to_string()),
            );
        }
    }

    /// Send one ACP request; the server's answer when the client gave none
    /// (it failed, timed out, or the call went away).
    async fn send(
        &self,
        offered: &Offered,
        params: acp::CreateElicitationRequest,
        token: &CancellationToken,
    ) -> Result<acp::CreateElicitationResponse, ElicitResult> {
        let request = offered.out.request(ELICITATION_CREATE, params);
        let answered = tokio::select! {
            _ = token.cancelled() => return Err(answer(ElicitationAction::Cancel)),
            a = tokio::time::timeout(self.link.timeout, request) => a,
        };
        let value = match answered {
            Err(_) => {
                self.refused(
                    None,
                    &format!(
                        "the person did not answer MCP server `{}` within {} s; it was cancelled",
                        self.server,
                        self.link.timeout.as_secs()
                    ),
                );
                return Err(answer(ElicitationAction::Cancel));
            }
            Ok(Err(e)) => {
                self.refused(
                    Some(offered),
                    &format!(
                        "the client could not ask the person for MCP server `{}` ({}); it was declined",
                        self.server, e.message
                    ),
                );
                return Err(answer(ElicitationAction::Decline));
            }
            Ok(Ok(v)) => v,
        };
        serde_json::from_value::<acp::CreateElicitationResponse>(value).map_err(|e| {
            self.refused(
                Some(offered),
                &format!(
                    "the client's answer for MCP server `{}` was unreadable ({e}); it was declined",
                    self.server
                ),
            );
            answer(ElicitationAction::Decline)
        })
    }
}

/// The property types a form may have.
const FIELD_TYPES: &[&str] = &["string", "number", "integer", "boolean", "array"];

/// Why a server's form is not shown to the person.
#[derive(Debug, thiserror::Error)]
pub enum FormError {
    #[error("its form is {0} bytes, over the limit of {MAX_SCHEMA_BYTES} (elicitation MAX_SCHEMA_BYTES)")]
    TooBig(usize),
    #[error("its form has no `properties`")]
    NoProperties,
    #[error("its form has {0} fields, over the limit of {MAX_FIELDS} (elicitation MAX_FIELDS)")]
    TooManyFields(usize),
    #[error("its field `{name}` has type `{kind}`; a form holds only {types}", types = FIELD_TYPES.join(", "))]
    FieldType { name: String, kind: String },
    #[error("its form is not one ACP can carry: {0}")]
    NotAcp(#[from] serde_json::Error),
}

/// Why an answer does not fit its form, said for the person.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    #[error("the answer is not a set of fields")]
    NotFields,
    #[error("`{0}` is required")]
    Required(String),
    #[error("`{0}` is not a field of the form")]
    NotAField(String),
    #[error("`{0}` must be text")]
    NotText(String),
    #[error("`{name}` must be one of {allowed}")]
    NotAllowed { name: String, allowed: String },
    #[error("`{name}` is shorter than {min} characters")]
    TooShort { name: String, min: u64 },
    #[error("`{name}` is longer than {max} characters")]
    TooLong { name: String, max: u64 },
    #[error("`{0}` must be a number")]
    NotNumber(String),
    #[error("`{0}` must be a whole number")]
    NotWhole(String),
    #[error("`{name}` must be at least {min}")]
    BelowMinimum { name: String, min: f64 },
    #[error("`{name}` must be at most {max}")]
    AboveMaximum { name: String, max: f64 },
    #[error("`{0}` must be true or false")]
    NotBoolean(String),
    #[error("`{0}` must be a list of choices")]
    NotList(String),
    #[error("`{0}` must be a list of text choices")]
    NotTextChoices(String),
    #[error("`{name}`: `{choice}` is not one of {allowed}")]
    ChoiceNotAllowed {
        name: String,
        choice: String,
        allowed: String,
    },
    #[error("`{name}` has {count} choices, outside the number allowed")]
    ChoiceCount { name: String, count: u64 },
    #[error("`{name}` has a type (`{kind}`) a form cannot hold")]
    FieldType { name: String, kind: String },
}

/// Whether a form is small and flat enough to show.
pub fn check_form(schema: &Value) -> Result<(), FormError> {
    let bytes = schema.to_string().len();
    if bytes > MAX_SCHEMA_BYTES {
        return Err(FormError::TooBig(bytes));
    }
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or(FormError::NoProperties)?;
    if properties.len() > MAX_FIELDS {
        return Err(FormError::TooManyFields(properties.len()));
    }
    for (name, field) in properties {
        let kind = field.get("type").and_then(Value::as_str).unwrap_or("");
        if !FIELD_TYPES.contains(&kind) {
            return Err(FormError::FieldType {
                name: name.clone(),
                kind: kind.to_string(),
            });
        }
    }
    Ok(())
}

/// The values a string (or multi-select item) may take, when limited.
fn allowed_values(field: &Value) -> Option<Vec<String>> {
    let strings = |v: &Value, key: &str| -> Option<Vec<String>> {
        v.get(key).and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|x| match x {
                    Value::String(s) => Some(s.clone()),
                    Value::Object(o) => o.get("const").and_then(Value::as_str).map(String::from),
                    _ => None,
                })
                .collect()
        })
    };
    strings(field, "enum")
        .or_else(|| strings(field, "oneOf"))
        .or_else(|| strings(field, "anyOf"))
}

/// Whether `content` answers the form `schema`: an object with the
/// required fields, no others, each of its declared type and within its
/// bounds. The reason, said for the person, when not.
pub fn check_answer(schema: &Value, content: &Value) -> Result<(), AnswerError> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let Value::Object(answers) = content else {
        return Err(AnswerError::NotFields);
    };
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !answers.contains_key(required) {
            return Err(AnswerError::Required(required.to_string()));
        }
    }
    for (name, value) in answers {
        let Some(field) = properties.get(name) else {
            return Err(AnswerError::NotAField(name.clone()));
        };
        check_field(name, field, value)?;
    }
    Ok(())
}

fn check_field(name: &str, field: &Value, value: &Value) -> Result<(), AnswerError> {
    let name = name.to_string();
    let kind = field.get("type").and_then(Value::as_str).unwrap_or("");
    let number = |key: &str| field.get(key).and_then(Value::as_f64);
    let count = |key: &str| field.get(key).and_then(Value::as_u64);
    match kind {
        "string" => {
            let Some(text) = value.as_str() else {
                return Err(AnswerError::NotText(name));
            };
            if let Some(allowed) = allowed_values(field) {
                if !allowed.iter().any(|a| a == text) {
                    return Err(AnswerError::NotAllowed {
                        name,
                        allowed: allowed.join(", "),
                    });
                }
            }
            let chars = text.chars().count() as u64;
            if count("minLength").is_some_and(|min| chars < min) {
                return Err(AnswerError::TooShort {
                    name,
                    min: count("minLength").unwrap_or(0),
                });
            }
            if count("maxLength").is_some_and(|max| chars > max) {
                return Err(AnswerError::TooLong {
                    name,
                    max: count("maxLength").unwrap_or(0),
                });
            }
            Ok(())
        }
        "number" | "integer" => {
            let Some(n) = value.as_f64() else {
                return Err(AnswerError::NotNumber(name));
            };
            if kind == "integer" && !(value.is_i64() || value.is_u64()) {
                return Err(AnswerError::NotWhole(name));
            }
            if number("minimum").is_some_and(|min| n < min) {
                return Err(AnswerError::BelowMinimum {
                    name,
                    min: number("minimum").unwrap_or(0.0),
                });
            }
            if number("maximum").is_some_and(|max| n > max) {
                return Err(AnswerError::AboveMaximum {
                    name,
                    max: number("maximum").unwrap_or(0.0),
                });
            }
            Ok(())
        }
        "boolean" => match value {
            Value::Bool(_) => Ok(()),
            _ => Err(AnswerError::NotBoolean(name)),
        },
        "array" => {
            let Some(items) = value.as_array() else {
                return Err(AnswerError::NotList(name));
            };
            let allowed = field.get("items").and_then(allowed_values);
            for item in items {
                let Some(text) = item.as_str() else {
                    return Err(AnswerError::NotTextChoices(name));
                };
                if let Some(allowed) = &allowed {
                    if !allowed.iter().any(|a| a == text) {
                        return Err(AnswerError::ChoiceNotAllowed {
                            name,
                            choice: text.to_string(),
                            allowed: allowed.join(", "),
                        });
                    }
                }
            }
            let n = items.len() as u64;
            if count("minItems").is_some_and(|min| n < min)
                || count("maxItems").is_some_and(|max| n > max)
            {
                return Err(AnswerError::ChoiceCount { name, count: n });
            }
            Ok(())
        }
        other => Err(AnswerError::FieldType {
            name,
            kind: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "size": {"type": "string", "enum": ["small", "large"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 9},
                "ratio": {"type": "number"},
                "ok": {"type": "boolean"}
            },
            "required": ["name"]
        })
    }

    #[test]
    fn answers_are_checked_against_the_form() {
        let f = form();
        assert_eq!(
            check_answer(
                &f,
                &json!({"name": "Ada", "size": "small", "count": 3, "ratio": 0.5, "ok": true})
            ),
            Ok(())
        );
        assert_eq!(
            check_answer(&f, &json!({})).map_err(|e| e.to_string()),
            Err("`name` is required".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": 7})).map_err(|e| e.to_string()),
            Err("`name` must be text".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": "a", "size": "huge"})).map_err(|e| e.to_string()),
            Err("`size` must be one of small, large".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": "a", "count": 2.5})).map_err(|e| e.to_string()),
            Err("`count` must be a whole number".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": "a", "count": 10})).map_err(|e| e.to_string()),
            Err("`count` must be at most 9".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": "a", "ok": "yes"})).map_err(|e| e.to_string()),
            Err("`ok` must be true or false".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": "a", "extra": 1})).map_err(|e| e.to_string()),
            Err("`extra` is not a field of the form".to_string())
        );
        assert_eq!(
            check_answer(&f, &json!({"name": ""})).map_err(|e| e.to_string()),
            Err("`name` is shorter than 1 characters".to_string())
        );
    }

    #[test]
    fn large_or_nested_forms_are_refused() {
        assert!(check_form(&form()).is_ok());
        let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        assert!(check_form(&nested)
            .unwrap_err()
            .to_string()
            .contains("has type `object`"));
        let mut many = Map::new();
        for i in 0..=MAX_FIELDS {
            many.insert(format!("f{i}"), json!({"type": "string"}));
        }
        let wide = json!({"type": "object", "properties": many});
        assert!(check_form(&wide)
            .unwrap_err()
            .to_string()
            .contains("MAX_FIELDS"));
        let long = json!({"type": "object", "properties": {"a": {"type": "string", "description": "x".repeat(MAX_SCHEMA_BYTES)}}});
        assert!(check_form(&long)
            .unwrap_err()
            .to_string()
            .contains("MAX_SCHEMA_BYTES"));
    }

    #[test]
    fn the_message_is_marked_and_cut() {
        let shown = shown_message("evil", &"é".repeat(MAX_MESSAGE_BYTES));
        assert!(shown.starts_with("MCP server `evil` asks (its words, untrusted): "));
        assert!(shown.ends_with(" […]"));
        assert!(shown.len() < MAX_MESSAGE_BYTES + 100);
    }

    #[tokio::test]
    async fn an_unanswered_question_is_cancelled_at_the_timeout() {
        let link = Arc::new(ElicitationLink::with_timeout(Duration::from_millis(50)));
        let (out, _queue) = Outgoing::channel();
        link.connect(
            out.clone(),
            Some(
                &acp::ElicitationCapabilities::new().form(acp::ElicitationFormCapabilities::new()),
            ),
        );
        let asker = Asker {
            server: "s".into(),
            session: "sess".into(),
            link: link.clone(),
            questions: Arc::default(),
        };
        let schema = serde_json::from_value(form()).unwrap();
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "Your name?".into(),
            requested_schema: schema,
        };
        let result = asker.ask(request, CancellationToken::new()).await;
        assert_eq!(result.action, ElicitationAction::Cancel);
        assert!(
            asker.questions.take_notes()[0].contains("did not answer MCP server `s` within 0 s")
        );
        // The session's place is free again.
        assert!(link.take_turn("sess"));
        // And the request the client never answered is forgotten.
        assert_eq!(out.waiting(), 0);
    }
}
