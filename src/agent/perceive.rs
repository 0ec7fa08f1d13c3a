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
    /// Images the tool returned (an MCP server's screenshot).
    pub images: Vec<crate::llm::Image>,
}

impl Observation {
    pub fn into_message(self) -> ChatMessage {
        ChatMessage::tool_result(self.call_id, self.text, self.is_error).with_images(self.images)
    }
}

/// The context window of a model we know (tokens), by name prefix; hosted
/// models only — a local model's window depends on how it was started.
pub fn known_window(model: &str) -> Option<u64> {
    const KNOWN: &[(&str, u64)] = &[
        ("claude-", 200_000),
        ("gpt-4.1", 1_000_000),
        ("gpt-4o", 128_000),
        ("gpt-5", 400_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("deepseek-", 64_000),
    ];
    KNOWN
        .iter()
        .filter(|(p, _)| model.starts_with(p))
        .max_by_key(|(p, _)| p.len())
        .map(|(_, w)| *w)
}

/// Characters of an old tool result kept when compaction trims it.
pub const TRIMMED_TOOL_OUTPUT_CHARS: usize = 300;

/// Stage one of compaction: shorten the tool results in `history[..upto]`
/// to their first [`TRIMMED_TOOL_OUTPUT_CHARS`] characters, saying how much
/// was cut. Returns how many results were trimmed.
pub fn trim_tool_outputs(history: &mut [ChatMessage], upto: usize) -> usize {
    let mut trimmed = 0;
    for m in history.iter_mut().take(upto) {
        if m.role != crate::llm::Role::Tool {
            continue;
        }
        if !m.images.is_empty() {
            m.content.push_str(&format!(
                "\n[{} image(s) of this result dropped to save context]",
                m.images.len()
            ));
            m.images.clear();
            trimmed += 1;
        }
        let total = m.content.chars().count();
        if total <= TRIMMED_TOOL_OUTPUT_CHARS + 64 {
            continue;
        }
        let kept: String = m.content.chars().take(TRIMMED_TOOL_OUTPUT_CHARS).collect();
        m.content = format!(
            "{kept}\n[… {} more characters trimmed to save context]",
            total - TRIMMED_TOOL_OUTPUT_CHARS
        );
        trimmed += 1;
    }
    trimmed
}

/// What the model is asked when older turns are summarised.
pub const SUMMARY_PROMPT: &str = "You are compacting a conversation between a person and an assistant (you) so it fits the context window. \
Summarise the transcript below for your own later use: the person's goals and requests, decisions taken, facts learned, \
files and commands involved, results of tool calls that still matter, and open questions. \
Be concise and concrete; write only the summary.";

/// Stage two: the request that summarises `older` (rendered as one
/// transcript, tool structure flattened, at most `max_chars` characters —
/// the most recent part when longer).
pub fn summary_request(older: &[ChatMessage], max_chars: usize) -> ChatRequest {
    let mut transcript = String::new();
    for m in older {
        let who = match m.role {
            crate::llm::Role::System => continue,
            crate::llm::Role::User => "person",
            crate::llm::Role::Assistant => "assistant",
            crate::llm::Role::Tool => "tool result",
        };
        transcript.push_str(&format!("[{who}] {}\n", m.content));
        for c in &m.tool_calls {
            transcript.push_str(&format!("[assistant calls {}] {}\n", c.name, c.arguments));
        }
    }
    if transcript.len() > max_chars {
        let mut start = transcript.len() - max_chars;
        while !transcript.is_char_boundary(start) {
            start += 1;
        }
        transcript = format!("[… earlier part omitted]\n{}", &transcript[start..]);
    }
    ChatRequest {
        messages: vec![
            ChatMessage::system(SUMMARY_PROMPT),
            ChatMessage::user(transcript),
        ],
        tools: Vec::new(),
        max_tokens: None,
        temperature: None,
    }
}

/// The history after a summary: the summary, an acknowledgement (so roles
/// keep alternating), then the turns kept whole.
pub fn compacted_history(summary: &str, kept: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out = vec![
        ChatMessage::user(format!(
            "[Summary of the earlier conversation, compacted to fit the context window]\n{summary}"
        )),
        ChatMessage::assistant("Understood; I will continue from this summary.", Vec::new()),
    ];
    out.extend(kept.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_tool_outputs_are_trimmed_and_recent_ones_kept() {
        let long = "x".repeat(5000);
        let mut h = vec![
            ChatMessage::user("go"),
            ChatMessage::tool_result("a", long.clone(), false),
            ChatMessage::tool_result("b", "short", false),
            ChatMessage::tool_result("c", long.clone(), false),
        ];
        assert_eq!(trim_tool_outputs(&mut h, 3), 1);
        assert!(h[1].content.len() < 400, "{}", h[1].content.len());
        assert!(h[1].content.contains("4700 more characters trimmed"));
        assert_eq!(h[2].content, "short");
        assert_eq!(h[3].content, long);
    }

    #[test]
    fn the_summary_request_keeps_the_most_recent_part() {
        let h = vec![
            ChatMessage::user("a".repeat(1000)),
            ChatMessage::assistant("the end", vec![]),
        ];
        let r = summary_request(&h, 100);
        assert!(r.tools.is_empty());
        let text = &r.messages[1].content;
        assert!(text.starts_with("[… earlier part omitted]"));
        assert!(text.ends_with("[assistant] the end\n"));
    }

    #[test]
    fn known_windows_match_by_prefix() {
        assert_eq!(known_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_window("gpt-4.1-mini"), Some(1_000_000));
        assert_eq!(known_window("llama3.2"), None);
    }
}
