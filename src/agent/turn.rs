//! One turn: the person's prompt in, the final answer out.
//!
//! States: `Perceive` (build the request) → `Reason` (stream the model's
//! answer) → `Act` (run each proposed call) → back to `Perceive` with the
//! observations, until the model answers without calls, the round limit is
//! reached, or the turn is cancelled. Each transition is traced.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::llm::{ChatMessage, FinishReason};
use crate::protocol::acp;

use super::act::{act, ActEnv, ActStatus};
use super::reason::{reason, ReasonError};
use super::{perceive, report_status, AgentEnv, Approver, Session, TurnSink};

/// Why a turn ended without an answer.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The provider cascade failed; the message says which providers were
    /// tried and how to configure one.
    #[error("{0}")]
    Provider(String),
}

/// Run one turn for `prompt` in `session`.
pub async fn run_turn(
    env: &AgentEnv,
    session: &Session,
    prompt: String,
    sink_handle: Arc<dyn TurnSink>,
    approver: &dyn Approver,
    cancel: CancellationToken,
) -> Result<acp::StopReason, TurnError> {
    let sink: &dyn TurnSink = sink_handle.as_ref();
    let mut history = session.history.lock().await;
    let mut toolset = env.toolsets.toolset(&session.cwd, &prompt);
    env.mcp.register_tools(&session.id, &mut toolset.tools);
    history.push(ChatMessage::user(prompt));
    let max_rounds = env.config.max_rounds;
    let result = async {
        let mut problems: Option<String> = None;
        for round in 1..=max_rounds {
            if cancel.is_cancelled() {
                return Ok(acp::StopReason::Cancelled);
            }
            tracing::debug!(session = %session.id, round, "perceive");
            let request = perceive::request(&history, &toolset, &session.cwd);
            report_status(sink, session, "thinking");
            tracing::debug!(session = %session.id, round, "reason");
            let models = session.models().unwrap_or_else(|| env.models());
            let reasoned = match reason(
                &models,
                &request,
                sink,
                cancel.clone(),
                env.config.max_answer_bytes,
            )
            .await
            {
                Ok(r) => r,
                Err(ReasonError::Cancelled) => return Ok(acp::StopReason::Cancelled),
                Err(ReasonError::Provider { message, partial }) => {
                    if !partial.text.is_empty() {
                        history.push(ChatMessage::assistant(partial.text.clone(), Vec::new()));
                    }
                    return Err(TurnError::Provider(message));
                }
            };
            session.add_usage(reasoned.usage);
            session.set_provider(reasoned.provider.clone());
            history.push(ChatMessage::assistant(
                reasoned.text.clone(),
                reasoned.calls.clone(),
            ));
            if !reasoned.call_errors.is_empty() {
                // Unreadable text-protocol calls: tell the model what was
                // wrong (after the results of the calls that did parse).
                problems = Some(crate::tools::text_protocol::format_results(
                    &[],
                    &reasoned.call_errors,
                ));
            }
            if reasoned.calls.is_empty() {
                if let Some(p) = problems.take() {
                    history.push(ChatMessage::user(p));
                    continue;
                }
                return Ok(match reasoned.finish {
                    Some(FinishReason::Length) => acp::StopReason::MaxTokens,
                    Some(FinishReason::Refusal) => acp::StopReason::Refusal,
                    _ => acp::StopReason::EndTurn,
                });
            }
            report_status(sink, session, "acting");
            tracing::debug!(session = %session.id, round, calls = reasoned.calls.len(), "act");
            let act_env = ActEnv {
                env,
                session,
                toolset: &toolset,
                sink,
                approver,
                cancel: cancel.clone(),
                explanation: &reasoned.text,
                sink_handle: sink_handle.clone(),
            };
            let mut cancelled = false;
            // Several calls in one round: show them as the round's plan.
            let mut plan = RoundPlan::new(&reasoned.calls);
            plan.publish(sink);
            for (i, call) in reasoned.calls.iter().enumerate() {
                // Every call gets an answer in the history, even the ones
                // skipped by a cancel: providers reject dangling calls.
                if cancelled || cancel.is_cancelled() {
                    history.push(ChatMessage::tool_result(call.id.clone(), "cancelled", true));
                    cancelled = true;
                    continue;
                }
                plan.mark(i, acp::PlanEntryStatus::InProgress, sink);
                let acted = act(call, &act_env).await;
                plan.mark(i, acp::PlanEntryStatus::Completed, sink);
                cancelled |= acted.status == ActStatus::Cancelled;
                history.push(acted.observation.into_message());
            }
            if cancelled {
                return Ok(acp::StopReason::Cancelled);
            }
            if let Some(p) = problems.take() {
                history.push(ChatMessage::user(p));
            }
        }
        tracing::info!(session = %session.id, max_rounds, "round limit reached");
        Ok(acp::StopReason::MaxTurnRequests)
    }
    .await;
    report_status(sink, session, "idle");
    result
}

/// The ACP `plan` of a round with several tool calls: one entry per call,
/// updated as they run. A single call needs no plan (its `tool_call`
/// updates say it all).
struct RoundPlan {
    entries: Vec<acp::PlanEntry>,
}

impl RoundPlan {
    fn new(calls: &[crate::llm::ToolCall]) -> Self {
        let entries = if calls.len() < 2 {
            Vec::new()
        } else {
            calls
                .iter()
                .map(|c| {
                    acp::PlanEntry::new(
                        super::act::title(&c.name, &c.arguments),
                        acp::PlanEntryPriority::Medium,
                        acp::PlanEntryStatus::Pending,
                    )
                })
                .collect()
        };
        RoundPlan { entries }
    }

    fn publish(&self, sink: &dyn TurnSink) {
        if !self.entries.is_empty() {
            sink.update(acp::SessionUpdate::Plan(acp::Plan::new(
                self.entries.clone(),
            )));
        }
    }

    fn mark(&mut self, i: usize, status: acp::PlanEntryStatus, sink: &dyn TurnSink) {
        if let Some(e) = self.entries.get_mut(i) {
            e.status = status;
            self.publish(sink);
        }
    }
}
