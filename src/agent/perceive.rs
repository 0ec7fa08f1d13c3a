//! Perceive: turn what happened (the person's prompt, tool results, tool
//! errors, denials) into messages, and build the next request for the model.

use crate::llm::{ChatMessage, ChatRequest};

use super::Toolset;

/// The fixed part of the system prompt.
pub const BASE_PROMPT: &str = "You are passepartout, a careful assistant working beside the person's Emacs. \
You act only through the tools you are given. Every action passes deterministic safety gates; \
some need the person's approval, and a denial comes back to you with its reason: then try another, safer way \
or explain what you need. Keep answers short and concrete.";

/// Build the request for the next round.
pub fn request(history: &[ChatMessage], toolset: &Toolset, cwd: &std::path::Path) -> ChatRequest {
    let mut system = format!("{BASE_PROMPT}\n\nWorking directory: {}", cwd.display());
    if !toolset.prompt.trim().is_empty() {
        system.push_str("\n\n");
        system.push_str(toolset.prompt.trim());
    }
    let mut messages = Vec::with_capacity(history.len() + 1);
    messages.push(ChatMessage::system(system));
    messages.extend(history.iter().cloned());
    ChatRequest {
        messages,
        tools: toolset.tools.specs(),
        max_tokens: None,
        temperature: None,
    }
}

/// The outcome of one tool call as the model will read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub call_id: String,
    pub text: String,
    pub is_error: bool,
}

impl Observation {
    pub fn into_message(self) -> ChatMessage {
        ChatMessage::tool_result(self.call_id, self.text, self.is_error)
    }
}
