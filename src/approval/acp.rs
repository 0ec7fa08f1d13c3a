//! The ACP permission prompt: `session/request_permission` for clients
//! that do not take flight plans, and the choices a person asked to be
//! remembered ("always allow / always reject this exact action").
//!
//! "Always" is kept per session and keyed by the action's content hash in
//! its working directory, never by a tool name: it covers exactly what the
//! person saw (command text, interpreter, environment, network grant, time
//! limit, directory), and anything else is asked again. The memory lives as
//! long as the daemon.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentEnv, ApprovalOutcome, ApprovalRequest};
use crate::audit::{AuditRecord, PlanOutcome};
use crate::protocol::{self as proto, acp};
use crate::rpc::Outgoing;

use crate::util::sync::lock;

/// Asks an ACP client, and remembers the "always" answers.
pub struct AcpPrompt {
    env: Arc<AgentEnv>,
    out: Outgoing,
    /// Per session: action content hash → allow (`true`) or reject.
    remembered: Mutex<HashMap<String, HashMap<String, bool>>>,
}

impl AcpPrompt {
    pub fn new(env: Arc<AgentEnv>, out: Outgoing) -> AcpPrompt {
        AcpPrompt {
            env,
            out,
            remembered: Mutex::default(),
        }
    }

    /// Ask an ACP client through `session/request_permission`.
    pub async fn ask(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        // "Always" covers exactly what the person saw: the same command
        // text, interpreter, environment, network grant, time limit and
        // directory. Anything else is asked again.
        let key = request.action.content_hash_in(&request.cwd);
        let remembered = lock(&self.remembered)
            .get(&request.session_id)
            .and_then(|m| m.get(&key).copied());
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
                    comment: Some("the person chose to always reject this exact action".into()),
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
        // A file change is shown as ACP diffs before the person decides.
        let mut content = vec![acp::ToolCallContent::from(format!(
            "Why approval is needed: {}",
            reasons.join("; ")
        ))];
        // Every argument the model gave, whatever the tool: what runs is
        // decided by them (a skill's script reads them as variables).
        content.extend(
            arguments_content(&request.action.arguments)
                .into_iter()
                .map(acp::ToolCallContent::from),
        );
        // An MCP tool: what its server says it does (marked untrusted).
        content.extend(
            crate::mcp::tool::description_of(&request.action.effect)
                .map(acp::ToolCallContent::from),
        );
        content.extend(proposed_changes(&self.env, &request.cwd, &request.action).await);
        let fields = acp::ToolCallUpdateFields::new()
            .title(crate::agent::act::title(
                &request.action.tool,
                &request.action.arguments,
            ))
            .raw_input(serde_json::to_value(&request.action.effect).unwrap_or(Value::Null))
            .content(content);
        let what = match request.action.effect {
            crate::action::Effect::Run { .. } => "command",
            _ => "action",
        };
        let options = vec![
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("allow_once"),
                "Allow once",
                acp::PermissionOptionKind::AllowOnce,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("allow_always"),
                format!("Always allow this exact {what}"),
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("reject_once"),
                "Reject",
                acp::PermissionOptionKind::RejectOnce,
            ),
            acp::PermissionOption::new(
                acp::PermissionOptionId::new("reject_always"),
                format!("Always reject this exact {what}"),
                acp::PermissionOptionKind::RejectAlways,
            ),
        ];
        let params = acp::RequestPermissionRequest::new(
            acp::SessionId::new(request.session_id.clone()),
            acp::ToolCallUpdate::new(acp::ToolCallId::new(request.tool_call_id.clone()), fields),
            options,
        );
        // Shown, not read back: the person's secret values stay hidden from
        // the client, as in the flight plan (`plans::shown`).
        let mut params = serde_json::to_value(params).unwrap_or(Value::Null);
        crate::plans::shown::hide_in_json(&mut params, &self.env.secret_values_in(&request.cwd));
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
                .insert(key.clone(), allow);
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

/// The longest argument value shown whole in the arguments summary, in
/// characters of its escaped form; a longer one is cut there and given
/// whole in a block of its own after the summary.
pub const FOLD_CHARS: usize = 200;

/// The model's arguments as a person reads them before deciding: a
/// summary block `Arguments:` with one `name: value` line per argument,
/// each value as JSON (quotes, line breaks and control characters escaped,
/// direction marks shown as `\u{202e}`), and after it, for each value
/// longer than [`FOLD_CHARS`], a block with the whole value. No arguments:
/// no blocks.
pub fn arguments_content(arguments: &Value) -> Vec<String> {
    let escaped = |v: &Value| crate::util::terminal::escape_line(&v.to_string()).into_owned();
    let entries: Vec<(String, String)> = match arguments {
        Value::Object(map) if map.is_empty() => return Vec::new(),
        Value::Null => return Vec::new(),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), escaped(v))).collect(),
        other => vec![("(arguments)".to_string(), escaped(other))],
    };
    let mut summary = String::from("Arguments:");
    let mut whole = Vec::new();
    for (name, value) in entries {
        let name = crate::util::terminal::escape_line(&name).into_owned();
        let length = value.chars().count();
        if length <= FOLD_CHARS {
            summary.push_str(&format!("\n  {name}: {value}"));
        } else {
            let head: String = value.chars().take(FOLD_CHARS).collect();
            summary.push_str(&format!(
                "\n  {name}: {head}… (folded: {length} characters, whole below)"
            ));
            whole.push(format!(
                "Whole value of {name} ({length} characters):\n{value}"
            ));
        }
    }
    let mut blocks = vec![summary];
    blocks.extend(whole);
    blocks
}

/// The file changes `action` would make, as ACP `diff` items (old and new
/// text), for a permission request or a flight plan: a `write_file` against
/// the file as it is now, a held effect (checkpoint apply) from its
/// checkpoint. Empty for anything that changes no file. Bounded by
/// `[checkpoints] max_diff_bytes` per file and `max_diff_files`.
pub async fn proposed_changes(
    env: &AgentEnv,
    cwd: &std::path::Path,
    action: &crate::action::Action,
) -> Vec<acp::ToolCallContent> {
    let cfg = env.config.checkpoints.clone();
    match &action.effect {
        crate::action::Effect::WriteFile { path, content } => {
            let max = cfg.max_diff_bytes;
            let (cwd, path, content) = (cwd.to_path_buf(), cwd.join(path), content.clone());
            tokio::task::spawn_blocking(move || write_diff(&cwd, &path, &content, max))
                .await
                .unwrap_or_default()
        }
        crate::action::Effect::Op { op, args } if op == crate::checkpoint::watch::APPLY_OP => {
            let Some(id) = args["checkpoint"].as_str().map(str::to_string) else {
                return Vec::new();
            };
            let (state, cwd) = (env.config.state_dir(), cwd.to_path_buf());
            tokio::task::spawn_blocking(move || {
                let project = crate::checkpoint::Project::open(&state, &cwd, &cfg).ok()?;
                let cp = project.load(&id).ok()?;
                Some(cp.effect.acp_content(
                    &project.store,
                    &cwd,
                    cfg.max_diff_files,
                    cfg.max_diff_bytes,
                ))
            })
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// The diff of writing `new` to `path`: old text = the file now (none for
/// a new file). A file that is too big, not text, or not a regular file is
/// named in a text item instead.
fn write_diff(
    cwd: &std::path::Path,
    path: &std::path::Path,
    new: &str,
    max_bytes: u64,
) -> Vec<acp::ToolCallContent> {
    match old_text(cwd, path, new, max_bytes) {
        Ok(old) => vec![acp::ToolCallContent::from(
            acp::Diff::new(path.to_path_buf(), new.to_string()).old_text(old),
        )],
        Err(why) => vec![acp::ToolCallContent::from(format!(
            "{}: {why}; no diff shown",
            path.display()
        ))],
    }
}

/// Why no diff can be shown for a file change.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoDiff {
    /// The new content or the file is over `max_diff_bytes`.
    #[error("{what} (limit max_diff_bytes = {max_bytes} in [checkpoints])")]
    TooLarge { what: &'static str, max_bytes: u64 },
    #[error("outside the working directory")]
    Outside,
    #[error("the working directory cannot be opened ({0})")]
    Open(std::io::Error),
    /// The file could not be read beneath the working directory (why).
    #[error("{0}")]
    Unreadable(String),
    #[error("not text")]
    NotText,
}

/// The text at `path` now, before `new` is written there: `Ok(None)` for
/// no file, `Err(why)` when no diff can be shown (outside the working
/// directory `cwd`, too large for `max_bytes`, not text, not a regular
/// file, unreadable). Resolved beneath `cwd` like the files actuator
/// resolves it (no symlink followed, no `..` out), opened non-blocking.
pub(crate) fn old_text(
    cwd: &std::path::Path,
    path: &std::path::Path,
    new: &str,
    max_bytes: u64,
) -> Result<Option<String>, NoDiff> {
    let limit = |what: &'static str| NoDiff::TooLarge { what, max_bytes };
    if new.len() as u64 > max_bytes {
        return Err(limit("the new content is too large"));
    }
    let rel = match path.strip_prefix(cwd) {
        Ok(rel) => rel,
        Err(_) if path.is_relative() => path,
        Err(_) => return Err(NoDiff::Outside),
    };
    let beneath = crate::checkpoint::beneath::Beneath::open(cwd).map_err(NoDiff::Open)?;
    let old = beneath
        .read_capped(&rel.to_string_lossy(), max_bytes)
        .map_err(|why| match why {
            crate::checkpoint::beneath::ReadCappedError::TooLarge { .. } => {
                limit("the file is too large")
            }
            other => NoDiff::Unreadable(other.to_string()),
        })?;
    match old.map(String::from_utf8) {
        None => Ok(None),
        Some(Ok(text)) if !text.contains('\0') => Ok(Some(text)),
        Some(_) => Err(NoDiff::NotText),
    }
}

/// A unified diff of what `action` changes, for a flight plan's Org text:
/// a `write_file` against the file now. `None` for other actions, or when
/// no diff can be shown (the reason is then the diff's one line).
pub(crate) fn proposed_unified_diff(
    cwd: &std::path::Path,
    action: &crate::action::Action,
    max_bytes: u64,
) -> Option<String> {
    let crate::action::Effect::WriteFile { path, content } = &action.effect else {
        return None;
    };
    let shown = path.strip_prefix(cwd).unwrap_or(path).display().to_string();
    match old_text(cwd, path, content, max_bytes) {
        Ok(old) => {
            let old = old.unwrap_or_default();
            let text = crate::util::diff::unified(&old, content, &shown);
            (!text.is_empty()).then_some(text)
        }
        Err(why) => Some(format!("{shown}: {why}; no diff shown\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_argument_is_shown_escaped_and_a_long_one_folded_but_whole_below() {
        let long = "x".repeat(FOLD_CHARS + 50);
        let blocks = arguments_content(&json!({
            "greeting": "Héllo Wörld; rm -rf / $(id)",
            "evil": "a\u{1b}[2Kb\u{202e}c\nd",
            "count": 3,
            "body": long,
        }));
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        let summary = &blocks[0];
        assert!(
            summary.contains("\n  greeting: \"Héllo Wörld; rm -rf / $(id)\""),
            "{summary}"
        );
        assert!(
            summary.contains(r#"evil: "a\u001b[2Kb\u{202e}c\nd""#),
            "{summary}"
        );
        assert!(summary.contains("\n  count: 3"), "{summary}");
        assert!(
            summary.contains(&format!(
                "body: \"{}… (folded: {} characters, whole below)",
                "x".repeat(FOLD_CHARS - 1),
                FOLD_CHARS + 52
            )),
            "{summary}"
        );
        assert!(!summary.contains('\u{1b}') && !summary.contains('\u{202e}'));
        assert_eq!(
            blocks[1],
            format!(
                "Whole value of body ({} characters):\n\"{}\"",
                FOLD_CHARS + 52,
                "x".repeat(FOLD_CHARS + 50)
            )
        );
        assert!(arguments_content(&json!({})).is_empty());
    }
}
