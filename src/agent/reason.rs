//! Reason: ask the model (through the provider cascade) and stream what it
//! says to the person as it arrives. Returns the whole answer: text, visible
//! reasoning, and the tool calls it proposes.

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::llm::cascade::{Cascade, CascadeError};
use crate::llm::{ChatRequest, FinishReason, StreamEvent, ToolCall, Usage};
use crate::protocol::acp;

use super::TurnSink;

/// One round's answer.
#[derive(Debug, Clone, Default)]
pub struct Reasoned {
    pub provider: String,
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    pub finish: Option<FinishReason>,
    pub usage: Usage,
    /// Problems reading calls written in text (text tool protocol only),
    /// fed back to the model next round.
    pub call_errors: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReasonError {
    /// Cancelled; `partial` holds the text streamed before (the person saw
    /// it, so it is kept in the history and the journal).
    #[error("cancelled")]
    Cancelled { partial: String },
    /// No provider answered, or the answer broke off. `partial` holds what
    /// had streamed (kept in history so nothing is lost).
    #[error("{message}")]
    Provider {
        message: String,
        partial: Box<Reasoned>,
    },
}

/// Stream one answer. At most `max_answer_bytes` of text and reasoning are
/// taken: past that the answer is cut (finish reason `Length`, calls
/// dropped) and the person is told which setting cut it. Before each
/// provider event the sink may ask the loop to wait (the client is behind);
/// the wait races the cancel token, so a cancel is never held up.
pub async fn reason(
    models: &Cascade,
    request: &ChatRequest,
    sink: &dyn TurnSink,
    cancel: CancellationToken,
    max_answer_bytes: usize,
) -> Result<Reasoned, ReasonError> {
    let answered = match models.stream(request, cancel.clone()).await {
        Ok(a) => a,
        Err(CascadeError::Cancelled) => {
            return Err(ReasonError::Cancelled {
                partial: String::new(),
            })
        }
        Err(e) => {
            return Err(ReasonError::Provider {
                message: e.to_string(),
                partial: Box::default(),
            })
        }
    };
    let native_tools = answered.native_tools;
    let mut out = Reasoned {
        provider: answered.provider.clone(),
        ..Reasoned::default()
    };
    let mut events = answered.events;
    loop {
        if let Some(room) = sink.room() {
            tokio::select! {
                _ = cancel.cancelled() => return Err(ReasonError::Cancelled { partial: out.text }),
                _ = room => {}
            }
        }
        if out.text.len() + out.reasoning.len() > max_answer_bytes {
            let notice = format!(
                "\n\n[answer cut: it passed max_answer_bytes = {max_answer_bytes} bytes]\n"
            );
            sink.update(acp::SessionUpdate::AgentMessageChunk(
                acp::ContentChunk::new(notice.into()),
            ));
            tracing::warn!(provider = %out.provider, max_answer_bytes, "answer cut at its size limit");
            out.calls.clear();
            out.finish = Some(FinishReason::Length);
            return Ok(out);
        }
        let next = tokio::select! {
            _ = cancel.cancelled() => return Err(ReasonError::Cancelled { partial: out.text }),
            next = events.next() => next,
        };
        match next {
            None => break,
            Some(Ok(StreamEvent::TextDelta(t))) => {
                sink.update(acp::SessionUpdate::AgentMessageChunk(
                    acp::ContentChunk::new(t.clone().into()),
                ));
                out.text.push_str(&t);
            }
            Some(Ok(StreamEvent::ReasoningDelta(t))) => {
                sink.update(acp::SessionUpdate::AgentThoughtChunk(
                    acp::ContentChunk::new(t.clone().into()),
                ));
                out.reasoning.push_str(&t);
            }
            Some(Ok(StreamEvent::ToolCall(call))) => out.calls.push(call),
            Some(Ok(StreamEvent::Usage(u))) => out.usage = u,
            Some(Ok(StreamEvent::Finish(f))) => {
                out.finish = Some(f);
                break;
            }
            Some(Err(crate::llm::ProviderError::Cancelled)) => {
                return Err(ReasonError::Cancelled { partial: out.text })
            }
            Some(Err(e)) => {
                let message = format!("{} (answer from {} broke off)", e, out.provider);
                return Err(ReasonError::Provider {
                    message,
                    partial: Box::new(out),
                });
            }
        }
    }
    if !native_tools && !request.tools.is_empty() {
        // The calls are in the text (the text tool protocol).
        let parsed = crate::llm::text_protocol::parse_calls(&out.text, &request.tools);
        out.calls = parsed.calls;
        out.call_errors = parsed.errors;
    }
    Ok(out)
}
