//! Anthropic Messages, streamed.
//!
//! The request is one POST to `{base_url}/v1/messages` with `"stream": true`.
//! System text goes to the top-level `system` field; tool calls and results
//! are content blocks (`tool_use` in assistant messages, `tool_result` in a
//! user message — consecutive results share one message, as the API wants).
//! The answer is SSE with named events: content blocks open, receive deltas
//! and close; a `tool_use` block's input arrives as `input_json_delta`
//! fragments and is emitted as one whole call when the block closes.

use std::collections::{HashMap, VecDeque};

use eventsource_stream::Event;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::config::ProviderConfig;
use super::image::text_with_note;
use super::sse::{json_error_message, snippet, DecodeError, Endpoint, Flow, WireDecoder};
use super::{
    api_key_header, ChatMessage, ChatRequest, EventStream, FinishReason, Provider, ProviderError,
    Role, StreamEvent, ToolCall, Usage,
};

/// The API version header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when neither the request nor the configuration sets one (the
/// Messages API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider speaking the Anthropic Messages API.
pub struct AnthropicProvider {
    endpoint: Endpoint,
    context_window: Option<u64>,
}

impl AnthropicProvider {
    /// Builds the provider from its configuration.
    pub fn new(config: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(AnthropicProvider {
            endpoint: Endpoint::from_config(config)?,
            context_window: config.context_window,
        })
    }

    /// The messages endpoint. A base URL already ending in `/v1` is accepted
    /// too, since that is how OpenAI-style URLs are usually written.
    fn messages_url(&self) -> String {
        if self
            .endpoint
            .base_url
            .trim_end_matches('/')
            .ends_with("/v1")
        {
            self.endpoint.url("/messages")
        } else {
            self.endpoint.url("/v1/messages")
        }
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut body = json!({
            "model": self.endpoint.model,
            "max_tokens": request
                .max_tokens
                .or(self.endpoint.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            "stream": true,
            "messages": wire_messages(request, self.endpoint.images, &self.endpoint.model),
        });
        // Prompt caching: the prefix (tools, then system, as Anthropic
        // orders them) is stable between rounds, so breakpoints go on the
        // last tool, on the system block, and on the last message: the
        // next round reads everything up to there from the cache.
        if !system.is_empty() {
            body["system"] = json!([{
                "type": "text",
                "text": system.join("\n\n"),
                "cache_control": {"type": "ephemeral"},
            }]);
        }
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "input_schema": tool.parameters,
                    })
                })
                .collect();
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = json!({"type": "ephemeral"});
            }
            body["tools"] = Value::Array(tools);
        }
        mark_last_message_cached(&mut body["messages"]);
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicProvider {
    endpoint_provider_methods!();

    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        let url = self.messages_url();
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &self.endpoint.api_key {
            let value = api_key_header(&self.endpoint.name, key)?;
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        let body = self.request_body(request);
        let response = self.endpoint.post(&url, headers, &body, &cancel).await?;
        Ok(self
            .endpoint
            .decode(url, response, AnthropicDecoder::default(), cancel))
    }
}

/// The conversation without system messages, in Messages shape.
fn wire_messages(request: &ChatRequest, images: bool, model: &str) -> Vec<Value> {
    // Text, then the images as blocks; or the text with a note saying
    // what was left out, for a model without images.
    let content = |message: &ChatMessage| -> Value {
        if message.images.is_empty() {
            return Value::String(message.content.clone());
        }
        if !images {
            return Value::String(text_with_note(&message.content, &message.images, model));
        }
        let mut blocks = vec![json!({"type": "text", "text": message.content})];
        blocks.extend(message.images.iter().map(|image| {
            json!({"type": "image", "source": {
                "type": "base64", "media_type": image.mime_type, "data": image.data,
            }})
        }));
        Value::Array(blocks)
    };
    let mut wire: Vec<Value> = Vec::new();
    // True while the last wire message is a user message made of tool
    // results, which the next result joins.
    let mut open_results = false;
    for message in &request.messages {
        match message.role {
            Role::System => {}
            Role::User => {
                wire.push(json!({"role": "user", "content": content(message)}));
                open_results = false;
            }
            Role::Assistant if message.tool_calls.is_empty() => {
                wire.push(json!({"role": "assistant", "content": message.content}));
                open_results = false;
            }
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": message.content}));
                }
                for call in &message.tool_calls {
                    // The API takes only objects as input; arguments that
                    // never parsed are answered by the tool result instead.
                    let input = match &call.arguments {
                        Value::Object(_) => call.arguments.clone(),
                        _ => Value::Object(Map::new()),
                    };
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": input,
                    }));
                }
                wire.push(json!({"role": "assistant", "content": blocks}));
                open_results = false;
            }
            Role::Tool => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": content(message),
                    "is_error": message.is_error,
                });
                match wire.last_mut().and_then(|m| m["content"].as_array_mut()) {
                    Some(blocks) if open_results => blocks.push(block),
                    _ => wire.push(json!({"role": "user", "content": [block]})),
                }
                open_results = true;
            }
        }
    }
    wire
}

/// Put a cache breakpoint on the last content block of the last message
/// (a plain string content becomes one text block to carry it). Anthropic
/// allows four breakpoints; we use three.
fn mark_last_message_cached(messages: &mut Value) {
    let Some(last) = messages.as_array_mut().and_then(|m| m.last_mut()) else {
        return;
    };
    if let Some(text) = last["content"].as_str().map(str::to_string) {
        if text.is_empty() {
            return;
        }
        last["content"] = json!([{"type": "text", "text": text}]);
    }
    if let Some(block) = last["content"].as_array_mut().and_then(|b| b.last_mut()) {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
}

/// A `tool_use` block being filled by `input_json_delta` fragments.
#[derive(Debug)]
struct OpenToolUse {
    id: String,
    name: String,
    input: super::BoundedArguments,
}

/// Decodes Messages stream events into [`StreamEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct AnthropicDecoder {
    tool_uses: HashMap<u64, OpenToolUse>,
    usage: Usage,
    /// `input_tokens` as Anthropic reports it: without cache reads/writes.
    uncached_input: u64,
    stop_reason: Option<FinishReason>,
}

impl AnthropicDecoder {
    /// Read the prompt-cache counters when a usage object carries them.
    fn cache_usage(&mut self, usage: &Value) {
        if let Some(read) = usage["cache_read_input_tokens"].as_u64() {
            self.usage.cache_read_tokens = read;
        }
        if let Some(written) = usage["cache_creation_input_tokens"].as_u64() {
            self.usage.cache_write_tokens = written;
        }
    }
}

impl WireDecoder for AnthropicDecoder {
    fn event(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, DecodeError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let json: Value = serde_json::from_str(data).map_err(|e| DecodeError::not_json(e, data))?;
        // The JSON's own `type` is authoritative; the SSE event name is a
        // fallback for servers that leave it out.
        let kind = json["type"].as_str().unwrap_or(event.event.as_str());
        let index = json["index"].as_u64().unwrap_or(0);
        match kind {
            "message_start" => {
                let usage = &json["message"]["usage"];
                self.cache_usage(usage);
                self.uncached_input = usage["input_tokens"].as_u64().unwrap_or(0);
                self.usage.input_tokens = self.uncached_input
                    + self.usage.cache_read_tokens
                    + self.usage.cache_write_tokens;
                self.usage.output_tokens = usage["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let block = &json["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        self.tool_uses.insert(
                            index,
                            OpenToolUse {
                                id: block["id"].as_str().unwrap_or_default().to_string(),
                                name: block["name"].as_str().unwrap_or_default().to_string(),
                                input: Default::default(),
                            },
                        );
                    }
                    Some("text") => push_text(out, &block["text"], StreamEvent::TextDelta),
                    Some("thinking") => {
                        push_text(out, &block["thinking"], StreamEvent::ReasoningDelta)
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &json["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => push_text(out, &delta["text"], StreamEvent::TextDelta),
                    Some("thinking_delta") => {
                        push_text(out, &delta["thinking"], StreamEvent::ReasoningDelta)
                    }
                    Some("input_json_delta") => {
                        if let (Some(open), Some(piece)) = (
                            self.tool_uses.get_mut(&index),
                            delta["partial_json"].as_str(),
                        ) {
                            open.input.push(piece);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(open) = self.tool_uses.remove(&index) {
                    let id = if open.id.is_empty() {
                        format!("call_{index}")
                    } else {
                        open.id
                    };
                    out.push_back(StreamEvent::ToolCall(ToolCall {
                        id,
                        name: open.name,
                        arguments: open.input.finish(),
                    }));
                }
            }
            "message_delta" => {
                if let Some(reason) = json["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(stop_reason(reason));
                }
                let usage = &json["usage"];
                if let Some(output) = usage["output_tokens"].as_u64() {
                    self.usage.output_tokens = output;
                }
                self.cache_usage(usage);
                if let Some(input) = usage["input_tokens"].as_u64() {
                    self.uncached_input = input;
                }
                // Anthropic's `input_tokens` leaves out the cached part;
                // ours counts every prompt token.
                self.usage.input_tokens = self.uncached_input
                    + self.usage.cache_read_tokens
                    + self.usage.cache_write_tokens;
                out.push_back(StreamEvent::Usage(self.usage));
            }
            "message_stop" => return Ok(Flow::Complete),
            "error" => {
                let message = json_error_message(&json).unwrap_or_else(|| snippet(data, 200));
                return Err(DecodeError::Reported(message));
            }
            // `ping` and event types added after this was written.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        complete: bool,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), DecodeError> {
        if !complete && self.stop_reason.is_none() {
            return Err(DecodeError::Ended("message_stop"));
        }
        let reason = self.stop_reason.take().unwrap_or(FinishReason::Stop);
        out.push_back(StreamEvent::Finish(reason));
        Ok(())
    }
}

fn push_text(out: &mut VecDeque<StreamEvent>, text: &Value, wrap: fn(String) -> StreamEvent) {
    if let Some(text) = text.as_str().filter(|t| !t.is_empty()) {
        out.push_back(wrap(text.to_string()));
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_tool_results_share_one_user_message() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: json!({"path": id}),
        };
        let request = ChatRequest {
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("hi"),
                ChatMessage::assistant("looking", vec![call("a"), call("b")]),
                ChatMessage::tool_result("a", "A", false),
                ChatMessage::tool_result("b", "no such file", true),
                ChatMessage::user("thanks"),
            ],
            tools: vec![],
            max_tokens: None,
            temperature: None,
        };
        assert_eq!(
            wire_messages(&request, true, "m"),
            vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "looking"},
                    {"type": "tool_use", "id": "a", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "b", "name": "read", "input": {"path": "b"}},
                ]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "b", "content": "no such file", "is_error": true},
                ]}),
                json!({"role": "user", "content": "thanks"}),
            ]
        );
    }

    #[test]
    fn images_are_blocks_of_the_prompt_and_of_the_tool_result() {
        let png = crate::llm::Image::new("image/png", "iVBORw0KGgo=").unwrap();
        let request = ChatRequest {
            messages: vec![
                ChatMessage::user("look").with_images(vec![png.clone()]),
                ChatMessage::assistant(
                    "",
                    vec![ToolCall {
                        id: "a".into(),
                        name: "shot".into(),
                        arguments: json!({}),
                    }],
                ),
                ChatMessage::tool_result("a", "shot", false).with_images(vec![png]),
            ],
            tools: vec![],
            max_tokens: None,
            temperature: None,
        };
        let image = json!({"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}});
        let wire = wire_messages(&request, true, "m");
        assert_eq!(
            wire[0]["content"],
            json!([{"type": "text", "text": "look"}, image])
        );
        assert_eq!(
            wire[2]["content"][0]["content"],
            json!([{"type": "text", "text": "shot"}, image])
        );
        let plain = wire_messages(&request, false, "m");
        assert!(plain[0]["content"]
            .as_str()
            .unwrap()
            .contains("1 image left out"));
    }

    #[test]
    fn cache_reads_and_writes_are_reported_and_counted_as_input() {
        let mut decoder = AnthropicDecoder::default();
        let mut out = VecDeque::new();
        for data in [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":20,"output_tokens":1,"cache_read_input_tokens":1000,"cache_creation_input_tokens":300}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":42}}"#,
        ] {
            let event = Event {
                data: data.to_string(),
                ..Event::default()
            };
            decoder.event(&event, &mut out).unwrap();
        }
        assert_eq!(
            out.pop_back(),
            Some(StreamEvent::Usage(Usage {
                input_tokens: 1320,
                output_tokens: 42,
                cache_read_tokens: 1000,
                cache_write_tokens: 300,
            }))
        );
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason("end_turn"), FinishReason::Stop);
        assert_eq!(stop_reason("tool_use"), FinishReason::ToolCalls);
        assert_eq!(stop_reason("max_tokens"), FinishReason::Length);
        assert_eq!(stop_reason("refusal"), FinishReason::Refusal);
        assert_eq!(
            stop_reason("pause_turn"),
            FinishReason::Other("pause_turn".into())
        );
    }
}
