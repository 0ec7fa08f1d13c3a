//! Act: one proposed tool call, from the model's arguments to an observation.
//!
//! plan (tool → concrete action) → gates → a person, when a gate asks →
//! last-mile check of the exact action about to run → the actuator chosen by
//! the action's target. Every failure on the way becomes an observation the
//! model reads next round; nothing here ends the turn except cancellation.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::actuators::ActContext;
use crate::audit::AuditRecord;
use crate::gates::engine::Judgement;
use crate::gates::Decision;
use crate::llm::ToolCall;
use crate::protocol::acp;
use crate::tools::PlanContext;

use super::perceive::Observation;
use super::{AgentEnv, ApprovalOutcome, ApprovalRequest, Approver, Session, Toolset, TurnSink};

/// What happened to a call, for the trace and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActStatus {
    Executed,
    Failed,
    Denied,
    Rejected,
    Cancelled,
}

pub struct Acted {
    pub observation: Observation,
    pub status: ActStatus,
}

/// Everything `act` needs besides the call.
pub struct ActEnv<'a> {
    pub env: &'a AgentEnv,
    pub session: &'a Session,
    pub toolset: &'a Toolset,
    pub sink: &'a dyn TurnSink,
    pub approver: &'a dyn Approver,
    pub cancel: CancellationToken,
    /// The text the model wrote before its calls: its own explanation.
    pub explanation: &'a str,
    /// The sink again, owned, for actuators that speak to the person.
    pub sink_handle: Arc<dyn TurnSink>,
}

pub async fn act(call: &ToolCall, a: &ActEnv<'_>) -> Acted {
    let id = call.id.clone();
    let Some(tool) = a.toolset.tools.get(&call.name) else {
        let names: Vec<&str> = a.toolset.tools.names().collect();
        let text = format!(
            "unknown tool `{}`; available tools: {}",
            call.name,
            names.join(", ")
        );
        announce(a.sink, call, &call.name, acp::ToolKind::Other);
        return finish(a.sink, &id, text, ActStatus::Failed);
    };
    announce(a.sink, call, &title(&call.name, &call.arguments), tool.kind);

    if let Value::String(raw) = &call.arguments {
        let text = format!("the arguments are not valid JSON: {raw}");
        return finish(a.sink, &id, text, ActStatus::Failed);
    }
    let action = match tool.plan(
        &call.arguments,
        &PlanContext {
            cwd: a.session.cwd.clone(),
        },
    ) {
        Ok(action) => action,
        Err(e) => return finish(a.sink, &id, e.to_string(), ActStatus::Failed),
    };
    a.env
        .record(AuditRecord::proposed(&a.session.id, &id, &action));

    let gate_ctx = a.env.gate_context(&a.session.cwd);
    let judgement = a.toolset.gates.evaluate(&action, &gate_ctx);
    a.env
        .record(AuditRecord::verdict(&a.session.id, &id, &judgement));
    tracing::info!(session = %a.session.id, tool = %call.name, decision = %judgement.decision, "gated");
    let mut asked = false;
    let (approved, approved_hash) = match judgement.decision {
        Decision::Deny => return refuse(a, &id, denial(&judgement), ActStatus::Denied),
        Decision::Allow => {
            let hash = action.content_hash();
            (action, hash)
        }
        Decision::Ask => {
            super::report_status(a.sink, a.session, "waiting");
            let request = ApprovalRequest {
                session_id: a.session.id.clone(),
                cwd: a.session.cwd.clone(),
                tool_call_id: id.clone(),
                explanation: a.explanation.to_string(),
                action: action.clone(),
                trace: judgement.trace.clone(),
            };
            let outcome = a.approver.approve(request, a.cancel.clone()).await;
            super::report_status(a.sink, a.session, "acting");
            match outcome {
                ApprovalOutcome::Cancelled => {
                    return finish(a.sink, &id, "cancelled".into(), ActStatus::Cancelled)
                }
                ApprovalOutcome::Rejected { comment, by } => {
                    let text = match comment.filter(|c| !c.trim().is_empty()) {
                        Some(c) => format!("the person ({by}) rejected this action: {c}"),
                        None => format!("the person ({by}) rejected this action"),
                    };
                    return refuse(a, &id, text, ActStatus::Rejected);
                }
                ApprovalOutcome::Approved {
                    action: approved,
                    hash,
                    ..
                } => {
                    let approved = *approved;
                    if approved != action {
                        // An edited action is judged again; the person's
                        // approval covers "ask" but never overrides "deny".
                        let again = a.toolset.gates.evaluate(&approved, &gate_ctx);
                        if again.decision == Decision::Deny {
                            return settled(
                                a,
                                &id,
                                refuse(a, &id, denial(&again), ActStatus::Denied),
                            );
                        }
                    }
                    asked = true;
                    (approved, hash)
                }
            }
        }
    };

    // Last mile: the exact action about to run must be the one approved,
    // and is judged once more.
    let outcome = if approved.content_hash() != approved_hash {
        let text =
            "last-mile check failed: the action changed after it was approved; it was not run"
                .to_string();
        refuse(a, &id, text, ActStatus::Denied)
    } else {
        let last = a.toolset.gates.evaluate(&approved, &gate_ctx);
        if last.decision == Decision::Deny {
            refuse(
                a,
                &id,
                format!("last-mile check failed: {}", denial(&last)),
                ActStatus::Denied,
            )
        } else if let Err(why) = begin(a, asked, &id, &approved) {
            refuse(a, &id, why, ActStatus::Denied)
        } else {
            execute(&id, &approved, a).await
        }
    };
    if asked {
        settled(a, &id, outcome)
    } else {
        outcome
    }
}

/// A refusal (gates, last mile, a person): recorded, then reported.
fn refuse(a: &ActEnv<'_>, id: &str, text: String, status: ActStatus) -> Acted {
    a.env.record(AuditRecord::denied(&a.session.id, id, &text));
    finish(a.sink, id, text, status)
}

fn begin(a: &ActEnv<'_>, asked: bool, id: &str, action: &Action) -> Result<(), String> {
    if asked {
        a.approver.begin(&a.session.id, id, action)
    } else {
        Ok(())
    }
}

/// Tell the approver what became of an action a person approved.
fn settled(a: &ActEnv<'_>, id: &str, acted: Acted) -> Acted {
    a.approver
        .settle(&a.session.id, id, &acted.status, &acted.observation.text);
    acted
}

async fn execute(id: &str, action: &Action, a: &ActEnv<'_>) -> Acted {
    let actuator = match a.env.actuators.resolve(Some(&action.target), None) {
        Ok(act) => act,
        Err(e) => return finish(a.sink, id, e.to_string(), ActStatus::Failed),
    };
    let fields = acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress);
    a.sink.update(acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(acp::ToolCallId::new(id.to_string()), fields),
    ));
    let sink = a.sink_handle.clone();
    let ctx = ActContext {
        session_id: a.session.id.clone(),
        cwd: a.session.cwd.clone(),
        cancel: a.cancel.clone(),
        say: Some(Arc::new(move |text: &str| {
            let chunk = acp::ContentChunk::new(format!("\n{text}\n").into());
            sink.update(acp::SessionUpdate::AgentMessageChunk(chunk));
        })),
    };
    let result = actuator.execute(action, &ctx).await;
    match &result {
        Ok(out) => a
            .env
            .record(AuditRecord::executed(id, out.is_error, &out.text)),
        Err(e) => a
            .env
            .record(AuditRecord::executed(id, true, &e.to_string())),
    }
    match result {
        Ok(out) if !actuator.feeds_back() && !out.is_error => {
            // The person has seen it; the model only hears it was delivered.
            let text = format!(
                "delivered to the person ({} characters)",
                out.text.chars().count()
            );
            finish(a.sink, id, text, ActStatus::Executed)
        }
        Ok(out) => {
            let status = if out.is_error {
                ActStatus::Failed
            } else {
                ActStatus::Executed
            };
            finish(a.sink, id, a.env.redact_output(out.text), status)
        }
        Err(crate::actuators::ActError::Cancelled) => {
            finish(a.sink, id, "cancelled".into(), ActStatus::Cancelled)
        }
        Err(e) => finish(a.sink, id, e.to_string(), ActStatus::Failed),
    }
}

fn denial(j: &Judgement) -> String {
    format!(
        "denied: {}. Choose a different, safer way, or explain to the person what you need.",
        j.reason()
    )
}

fn announce(sink: &dyn TurnSink, call: &ToolCall, title: &str, kind: acp::ToolKind) {
    sink.update(acp::SessionUpdate::ToolCall(
        acp::ToolCall::new(acp::ToolCallId::new(call.id.clone()), title.to_string())
            .name(call.name.clone())
            .kind(kind)
            .status(acp::ToolCallStatus::Pending)
            .raw_input(call.arguments.clone()),
    ));
}

fn finish(sink: &dyn TurnSink, id: &str, text: String, status: ActStatus) -> Acted {
    let acp_status = if status == ActStatus::Executed {
        acp::ToolCallStatus::Completed
    } else {
        acp::ToolCallStatus::Failed
    };
    let fields = acp::ToolCallUpdateFields::new()
        .status(acp_status)
        .content(vec![acp::ToolCallContent::from(text.clone())])
        .raw_output(serde_json::json!({ "outcome": format!("{status:?}").to_lowercase() }));
    sink.update(acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(acp::ToolCallId::new(id.to_string()), fields),
    ));
    Acted {
        observation: Observation {
            call_id: id.to_string(),
            is_error: status != ActStatus::Executed,
            text,
        },
        status,
    }
}

/// A one-line title for a tool call: the tool and its most telling argument.
pub fn title(tool: &str, args: &Value) -> String {
    let key = ["command", "path", "query", "code", "text"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str));
    match key {
        Some(v) => {
            let line = v.lines().next().unwrap_or("");
            let short: String = line.chars().take(80).collect();
            if short.len() < v.len() {
                format!("{tool}: {short}…")
            } else {
                format!("{tool}: {short}")
            }
        }
        None => tool.to_string(),
    }
}
