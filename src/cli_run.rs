//! `passepartout run`: one headless turn on the terminal. The answer streams
//! to stdout; reasoning, tool calls and their results go to stderr, so the
//! answer can be piped.

use std::io::{IsTerminal, Write};

use tokio_util::sync::CancellationToken;

use crate::agent::{ApprovalOutcome, ApprovalRequest, Approver, TurnSink};
use crate::protocol::{acp, SessionStatus};

pub struct TerminalSink;

fn text_of(chunk: &acp::ContentChunk) -> String {
    match &chunk.content {
        acp::ContentBlock::Text(t) => t.text.clone(),
        _ => String::new(),
    }
}

impl TurnSink for TerminalSink {
    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        None // stdout writes block by themselves
    }
    fn update(&self, update: acp::SessionUpdate) {
        match update {
            acp::SessionUpdate::AgentMessageChunk(c) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text_of(&c).as_bytes());
                let _ = out.flush();
            }
            acp::SessionUpdate::AgentThoughtChunk(c) => eprint!("{}", text_of(&c)),
            acp::SessionUpdate::ToolCall(call) => eprintln!("\n⚙ {}", call.title),
            acp::SessionUpdate::ToolCallUpdate(u) => {
                if let Some(status) = u.fields.status {
                    let mark = match status {
                        acp::ToolCallStatus::Completed => "✓",
                        acp::ToolCallStatus::Failed => "✗",
                        _ => return,
                    };
                    let first =
                        u.fields
                            .content
                            .as_ref()
                            .and_then(|c| c.first())
                            .map(|c| match c {
                                acp::ToolCallContent::Content(inner) => match &inner.content {
                                    acp::ContentBlock::Text(t) => {
                                        t.text.lines().next().unwrap_or("").to_string()
                                    }
                                    _ => String::new(),
                                },
                                _ => String::new(),
                            });
                    eprintln!("  {mark} {}", first.unwrap_or_default());
                }
            }
            _ => {}
        }
    }

    fn status(&self, _status: SessionStatus) {}
}

/// Asks on the terminal when there is one; otherwise rejects with a reason
/// the model (and the log) can read.
pub struct TerminalApprover;

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        if !std::io::stdin().is_terminal() {
            return ApprovalOutcome::Rejected {
                comment: Some("this action needs a person's approval and `passepartout run` has no terminal to ask on; run it in Emacs (M-x passepartout) or interactively".into()),
                by: "run".into(),
            };
        }
        eprintln!("\nApproval needed for {}:", request.action.tool);
        eprintln!(
            "{}",
            serde_json::to_string_pretty(&request.action.effect).unwrap_or_default()
        );
        for v in &request.trace {
            eprintln!("  {} {}: {}", v.decision, v.gate, v.reason);
        }
        eprint!("Run it? [y/N] ");
        let answer = tokio::select! {
            _ = cancel.cancelled() => return ApprovalOutcome::Cancelled,
            line = tokio::task::spawn_blocking(|| {
                let mut s = String::new();
                std::io::stdin().read_line(&mut s).map(|_| s)
            }) => line,
        };
        match answer {
            Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes") => {
                let hash = request.action.content_hash();
                ApprovalOutcome::Approved {
                    action: Box::new(request.action),
                    hash,
                    by: "terminal".into(),
                }
            }
            _ => ApprovalOutcome::Rejected {
                comment: None,
                by: "terminal".into(),
            },
        }
    }
}
