//! The model side of the loop: provider-neutral chat types, the streaming
//! [`Provider`] trait, and the concrete wire formats (OpenAI-compatible chat
//! completions, Anthropic Messages) plus the [`cascade`] that tries providers
//! in order.
//!
//! Everything a provider streams is normalised into [`StreamEvent`]s, so the
//! agent loop never sees a wire format. Tool-call arguments that arrive in
//! fragments are reassembled by the provider before a [`StreamEvent::ToolCall`]
//! is emitted: the loop only ever sees whole calls.

use std::pin::Pin;

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use image::Image;

/// Who said a message in the conversation history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call, fed back to the model.
    Tool,
}

/// One message of the conversation, in a provider-neutral shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// Plain text of the message (may be empty for an assistant message that
    /// only calls tools).
    #[serde(default)]
    pub content: String,
    /// Tool calls the assistant made in this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `Role::Tool`: true when the content describes an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Images beside the text (a prompt's, a tool result's): sent to a
    /// provider that accepts images, described in words to any other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::plain(Role::System, text)
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain(Role::User, text)
    }
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            tool_calls,
            ..Self::plain(Role::Assistant, text)
        }
    }
    pub fn tool_result(
        call_id: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            is_error,
            ..Self::plain(Role::Tool, text)
        }
    }
    fn plain(role: Role, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            images: Vec::new(),
        }
    }

    /// The message with `images` beside its text.
    pub fn with_images(mut self, images: Vec<Image>) -> Self {
        self.images = images;
        self
    }
}

/// A tool as the model sees it: a name, prose, and a JSON Schema for its
/// arguments (an `"type": "object"` schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// The most bytes of arguments one tool call may stream. Past it the
/// arguments are dropped as they arrive (memory stays bounded) and the call
/// reaches the turn as [`oversized_arguments`], which the model is told
/// instead of running it.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 8 * 1024 * 1024;

/// The stand-in for arguments that passed [`MAX_TOOL_ARGUMENT_BYTES`]: not
/// JSON, so the call is not run, and it says why.
pub fn oversized_arguments(bytes: usize) -> Value {
    Value::String(format!(
        "(not run: the call streamed {bytes} bytes of arguments, over the limit of \
         {MAX_TOOL_ARGUMENT_BYTES} bytes for one tool call; split the work into smaller calls)"
    ))
}

/// Arguments text being assembled, bounded by [`MAX_TOOL_ARGUMENT_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct BoundedArguments {
    text: String,
    /// Bytes received in all, kept counting past the limit.
    received: usize,
}

impl BoundedArguments {
    pub(crate) fn push(&mut self, piece: &str) {
        self.received += piece.len();
        if self.received > MAX_TOOL_ARGUMENT_BYTES {
            self.text = String::new();
        } else {
            self.text.push_str(piece);
        }
    }

    /// The arguments as JSON (or raw text, or the oversized stand-in).
    pub(crate) fn finish(self) -> Value {
        if self.received > MAX_TOOL_ARGUMENT_BYTES {
            oversized_arguments(self.received)
        } else {
            openai::parse_arguments(self.text)
        }
    }
}

/// A complete tool call proposed by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id (synthesised when the provider gives none).
    pub id: String,
    pub name: String,
    /// The arguments as parsed JSON. When the model produced text that is not
    /// valid JSON, this is `Value::String` holding the raw text, so the act
    /// stage can report the problem back to the model instead of failing.
    pub arguments: Value,
}

/// Token accounting reported by a provider, from its own usage fields.
///
/// `input_tokens` counts every prompt token, cached or not; the cache
/// figures say how many of them were read from (or written to) the
/// provider's prompt cache: Anthropic `cache_read_input_tokens` /
/// `cache_creation_input_tokens`, OpenAI
/// `prompt_tokens_details.cached_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Add `other` to these totals.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// Why the model stopped producing this response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model wants the tool calls it emitted to be run.
    ToolCalls,
    /// The output token limit was hit.
    Length,
    /// The provider refused (content filter, safety).
    Refusal,
    /// Anything else the provider said, kept verbatim.
    Other(String),
}

/// One normalised event of a streamed response.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A fragment of the answer text.
    TextDelta(String),
    /// A fragment of the model's visible reasoning ("thinking").
    ReasoningDelta(String),
    /// A whole tool call, arguments reassembled.
    ToolCall(ToolCall),
    /// Token usage (may arrive more than once; later values replace earlier).
    Usage(Usage),
    /// The end of the response. Always the last event of a healthy stream.
    Finish(FinishReason),
}

/// What the loop asks a provider for.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// Tools offered natively. Empty when the provider is used with the text
    /// tool protocol (the tool belt then lives in the system prompt).
    pub tools: Vec<ToolSpec>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

/// Failures a provider reports. The cascade uses [`ProviderError::is_retryable`]
/// to decide between retrying, moving to the next provider, and giving up.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Could not connect (refused, DNS, TLS) or the connect timed out.
    #[error("cannot connect to {url}: {message}")]
    Connect { url: String, message: String },
    /// No response (or no further data) within the configured time.
    #[error("{url} timed out: {message}")]
    Timeout { url: String, message: String },
    /// The server answered with an HTTP error status; `message` is the
    /// provider's own error text when it sent one.
    #[error("{url} answered HTTP {status}: {message}")]
    Http {
        url: String,
        status: u16,
        message: String,
        /// Seconds from a `Retry-After` header, when present.
        retry_after: Option<u64>,
    },
    /// The stream broke off or carried something we cannot read.
    #[error("stream from {url} failed: {message}")]
    Stream { url: String, message: String },
    /// The turn was cancelled while waiting on the provider.
    #[error("cancelled")]
    Cancelled,
    /// Misconfiguration (missing key, bad URL) detected before sending.
    #[error("provider misconfigured: {0}")]
    Config(String),
}

impl ProviderError {
    /// Connect failures, timeouts, 429 and 5xx are worth another try (here or
    /// at the next provider); 4xx other than 429 and config errors are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Connect { .. } | ProviderError::Timeout { .. } => true,
            ProviderError::Http { status, .. } => *status == 429 || *status >= 500,
            ProviderError::Stream { .. } => true,
            ProviderError::Cancelled | ProviderError::Config(_) => false,
        }
    }
}

/// A stream of normalised events; an `Err` item ends the stream.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>;

/// A model endpoint that can stream a chat response.
///
/// Implementations must stop promptly when `cancel` fires: the returned stream
/// ends with `Err(ProviderError::Cancelled)` and the HTTP connection is dropped.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// A short human label, e.g. `ollama (http://127.0.0.1:11434/v1)`.
    fn label(&self) -> String;
    /// The model name sent to the endpoint.
    fn model(&self) -> &str;
    /// Whether the model takes tools natively (function calling). When false
    /// the loop uses the text tool protocol instead.
    fn native_tools(&self) -> bool;
    /// The configured context window in tokens, when there is one.
    fn context_window(&self) -> Option<u64> {
        None
    }
    /// Send the request; `Ok` means the server accepted it and streaming began.
    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError>;
}

/// The [`Provider`] methods an HTTP provider answers from its `endpoint`
/// (an `sse::Endpoint`) and `context_window` fields: the same for every
/// wire format, so said once.
macro_rules! endpoint_provider_methods {
    () => {
        fn label(&self) -> String {
            self.endpoint.label()
        }

        fn model(&self) -> &str {
            &self.endpoint.model
        }

        fn native_tools(&self) -> bool {
            self.endpoint.native_tools
        }

        fn context_window(&self) -> Option<u64> {
            self.context_window
        }
    };
}

/// A provider's API key as a header value (`value` is the key in the shape
/// the header wants), marked sensitive so it never shows in debug output.
/// A key a header cannot carry is a configuration error naming `provider`.
pub(crate) fn api_key_header(
    provider: &str,
    value: &str,
) -> Result<reqwest::header::HeaderValue, ProviderError> {
    let mut header = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
        ProviderError::Config(format!(
            "provider {provider}: the API key contains characters not allowed in a header"
        ))
    })?;
    header.set_sensitive(true);
    Ok(header)
}

pub mod anthropic;
pub mod cascade;
pub mod config;
pub mod discovery;
pub mod image;
pub mod openai;
pub mod responses;
mod sse;
pub mod text_protocol;

pub use anthropic::AnthropicProvider;
pub use cascade::{Answered, Cascade, CascadeError, RetryPolicy};
pub use config::{build_cascade, ProviderConfig, ProviderConfigExt, ProviderKind};
pub use openai::OpenAiProvider;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_key_header_is_sensitive_and_a_bad_key_names_its_provider() {
        let header = api_key_header("hosted", "Bearer sk-123").unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), "Bearer sk-123");
        match api_key_header("hosted", "sk-1\n23") {
            Err(ProviderError::Config(why)) => assert_eq!(
                why,
                "provider hosted: the API key contains characters not allowed in a header"
            ),
            other => panic!("{other:?}"),
        }
    }
}
