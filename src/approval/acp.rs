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
            let path = cwd.join(path);
            let max = cfg.max_diff_bytes;
            let (path, content) = (path.clone(), content.clone());
            tokio::task::spawn_blocking(move || write_diff(&path, &content, max))
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
/// named in a text item instead (never opened when not regular: a FIFO
/// would block).
fn write_diff(path: &std::path::Path, new: &str, max_bytes: u64) -> Vec<acp::ToolCallContent> {
    use std::io::Read;
    let shown = |old: Option<String>| {
        vec![acp::ToolCallContent::from(
            acp::Diff::new(path.to_path_buf(), new.to_string()).old_text(old),
        )]
    };
    let too_big = |what: &str| {
        vec![acp::ToolCallContent::from(format!(
            "{}: {what}; no diff shown (limit max_diff_bytes = {max_bytes} in [checkpoints])",
            path.display()
        ))]
    };
    if new.len() as u64 > max_bytes {
        return too_big("the new content is too large");
    }
    // Opened without following a link or waiting on a FIFO (the path may
    // be swapped after a check), then judged by what was opened.
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return shown(None),
        Err(e) => {
            return vec![acp::ToolCallContent::from(format!(
                "{}: cannot be read ({e}); no diff shown",
                path.display()
            ))]
        }
    };
    match file.metadata() {
        Ok(m) if !m.is_file() => {
            return vec![acp::ToolCallContent::from(format!(
                "{}: not a regular file; no diff shown",
                path.display()
            ))]
        }
        Ok(m) if m.len() > max_bytes => return too_big("the file is too large"),
        _ => {}
    }
    let mut old = Vec::new();
    let read = file.take(max_bytes + 1).read_to_end(&mut old);
    match (read, String::from_utf8(old)) {
        (Ok(_), Ok(text)) if !text.contains('\0') => shown(Some(text)),
        _ => vec![acp::ToolCallContent::from(format!(
            "{}: not text; no diff shown",
            path.display()
        ))],
    }
}
