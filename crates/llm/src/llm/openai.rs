//! OpenAI-compatible chat completions, streamed: the format spoken by Ollama,
//! llama.cpp, vLLM, LM Studio, OpenAI itself and most hosted gateways.
//!
//! The request is one POST to `{base_url}/chat/completions` with
//! `"stream": true`; the answer is SSE whose `data:` lines are JSON chunks,
//! ended by `data: [DONE]`. Tool calls arrive as fragments keyed by `index`
//! (id and name first, the arguments text in pieces, several calls possibly
//! interleaved); the decoder reassembles them and emits whole calls just
//! before the single `Finish`. Reasoning text is read from
//! `reasoning_content` (DeepSeek, vLLM) or `reasoning` (Ollama, OpenRouter).

use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Event;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::config::ProviderConfig;
use super::image::text_with_note;
use super::sse::{json_error_message, snippet, DecodeError, Endpoint, Flow, WireDecoder};
use super::{
    ChatMessage, ChatRequest, EventStream, FinishReason, Image, Provider, ProviderError, Role,
    StreamEvent, ToolCall, ToolSpec, Usage,
};

/// A provider speaking OpenAI-compatible streaming chat completions.
pub struct OpenAiProvider {
    endpoint: Endpoint,
    context_window: Option<u64>,
}

impl OpenAiProvider {
    /// Builds the provider from its configuration (the `kind` is not checked:
    /// this is the OpenAI wire format whatever the entry says).
    pub fn new(config: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(OpenAiProvider {
            endpoint: Endpoint::from_config(config)?,
            context_window: config.context_window,
        })
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.endpoint.model,
            "messages": wire_messages(&request.messages, self.endpoint.images, &self.endpoint.model),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            body["tools"] = request.tools.iter().map(wire_tool).collect();
        }
        if let Some(max_tokens) = request.max_tokens.or(self.endpoint.max_tokens) {
            body["max_tokens"] = json!(max_tokens);
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
    endpoint_provider_methods!();

    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        let url = self.endpoint.url("/chat/completions");
        let headers = self.endpoint.bearer_headers()?;
        let body = self.request_body(request);
        let response = self.endpoint.post(&url, headers, &body, &cancel).await?;
        Ok(self
            .endpoint
            .decode(url, response, OpenAiDecoder::default(), cancel))
    }
}

/// The conversation in the chat-completions shape. A tool message carries
/// only text, and nothing may come between the results of one round: the
/// images of tool results follow the round's last result, in one user
/// message.
fn wire_messages(messages: &[ChatMessage], images: bool, model: &str) -> Vec<Value> {
    let mut wire = Vec::with_capacity(messages.len());
    let mut waiting: Vec<(&str, &Image)> = Vec::new();
    for message in messages {
        if message.role != Role::Tool {
            flush_result_images(&mut wire, &mut waiting);
        }
        wire.push(wire_message(message, images, model));
        if message.role == Role::Tool && images {
            let id = message.tool_call_id.as_deref().unwrap_or_default();
            waiting.extend(message.images.iter().map(|i| (id, i)));
        }
    }
    flush_result_images(&mut wire, &mut waiting);
    wire
}

/// The user message that shows the model the images of the tool results
/// just before it.
fn flush_result_images(wire: &mut Vec<Value>, waiting: &mut Vec<(&str, &Image)>) {
    if waiting.is_empty() {
        return;
    }
    let mut calls: Vec<&str> = waiting.iter().map(|(id, _)| *id).collect();
    calls.dedup();
    let mut parts = vec![json!({
        "type": "text",
        "text": format!("The images the tool calls returned ({}):", calls.join(", ")),
    })];
    parts.extend(waiting.drain(..).map(|(_, image)| image_part(image)));
    wire.push(json!({"role": "user", "content": parts}));
}

fn image_part(image: &Image) -> Value {
    json!({"type": "image_url", "image_url": {"url": image.data_url()}})
}

/// One message in the chat-completions shape.
fn wire_message(message: &ChatMessage, images: bool, model: &str) -> Value {
    match message.role {
        Role::System => json!({"role": "system", "content": message.content}),
        Role::User if message.images.is_empty() => {
            json!({"role": "user", "content": message.content})
        }
        Role::User if images => {
            let mut parts = vec![json!({"type": "text", "text": message.content})];
            parts.extend(message.images.iter().map(image_part));
            json!({"role": "user", "content": parts})
        }
        Role::User => json!({
            "role": "user",
            "content": text_with_note(&message.content, &message.images, model),
        }),
        Role::Assistant => {
            let content = if message.content.is_empty() {
                Value::Null
            } else {
                Value::String(message.content.clone())
            };
            let mut wire = json!({"role": "assistant", "content": content});
            if !message.tool_calls.is_empty() {
                wire["tool_calls"] = message.tool_calls.iter().map(wire_tool_call).collect();
            }
            wire
        }
        Role::Tool => {
            let content = if images {
                message.content.clone()
            } else {
                text_with_note(&message.content, &message.images, model)
            };
            json!({
                "role": "tool",
                "tool_call_id": message.tool_call_id.clone().unwrap_or_default(),
                "content": content,
            })
        }
    }
}

fn wire_tool_call(call: &ToolCall) -> Value {
    // Arguments that never parsed are sent back exactly as the model wrote
    // them, so the model sees its own mistake.
    let arguments = match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    })
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}

/// A tool call still being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: super::BoundedArguments,
}

/// Decodes chat-completion chunks into [`StreamEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct OpenAiDecoder {
    /// Calls by their `index`, kept in index order for emission.
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<FinishReason>,
}

impl OpenAiDecoder {
    fn chunk(&mut self, chunk: &Value, out: &mut VecDeque<StreamEvent>) {
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push_back(StreamEvent::Usage(Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
                // OpenAI caches long prompt prefixes by itself and reports
                // the hits here; DeepSeek says `prompt_cache_hit_tokens`.
                cache_read_tokens: usage["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .or_else(|| usage["prompt_cache_hit_tokens"].as_u64())
                    .unwrap_or(0),
                cache_write_tokens: 0,
            }));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return;
        };
        let delta = &choice["delta"];
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
                out.push_back(StreamEvent::ReasoningDelta(text.to_string()));
            }
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.push_back(StreamEvent::TextDelta(text.to_string()));
        }
        if let Some(fragments) = delta["tool_calls"].as_array() {
            for fragment in fragments {
                self.tool_call_fragment(fragment);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(finish_reason(reason));
        }
    }

    fn tool_call_fragment(&mut self, fragment: &Value) {
        let id = fragment["id"].as_str().filter(|id| !id.is_empty());
        // Some servers omit `index` and send each call whole; give those a
        // slot of their own (or the slot already holding their id).
        let index = match fragment["index"].as_u64() {
            Some(index) => index,
            None => self
                .calls
                .iter()
                .find(|(_, call)| id.is_some() && call.id.as_deref() == id)
                .map(|(index, _)| *index)
                .unwrap_or_else(|| self.calls.keys().next_back().map_or(0, |last| last + 1)),
        };
        let call = self.calls.entry(index).or_default();
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        let function = &fragment["function"];
        // Names come whole in the first fragment; some servers repeat them.
        if let Some(name) = function["name"].as_str().filter(|n| !n.is_empty()) {
            if call.name.is_empty() {
                call.name = name.to_string();
            }
        }
        match &function["arguments"] {
            Value::String(piece) => call.arguments.push(piece),
            // A few servers send the arguments as an object already.
            Value::Object(object) => call
                .arguments
                .push(&Value::Object(object.clone()).to_string()),
            _ => {}
        }
    }
}

impl WireDecoder for OpenAiDecoder {
    fn event(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, DecodeError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        if data == "[DONE]" {
            return Ok(Flow::Complete);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| DecodeError::not_json(e, data))?;
        if !chunk.is_object() {
            return Err(DecodeError::NotObject(snippet(data, 120)));
        }
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            let message = json_error_message(&chunk).unwrap_or_default();
            return Err(DecodeError::Reported(message));
        }
        self.chunk(&chunk, out);
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        complete: bool,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), DecodeError> {
        if !complete && self.finish.is_none() {
            return Err(DecodeError::Ended("finish_reason and no [DONE]"));
        }
        let has_calls = !self.calls.is_empty();
        for (index, call) in std::mem::take(&mut self.calls) {
            out.push_back(StreamEvent::ToolCall(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{index}")),
                name: call.name,
                arguments: call.arguments.finish(),
            }));
        }
        let reason = match self.finish.take() {
            // Some local servers say "stop" after emitting calls; the calls
            // are what the loop must act on.
            Some(FinishReason::Stop) | None if has_calls => FinishReason::ToolCalls,
            Some(reason) => reason,
            None => FinishReason::Stop,
        };
        out.push_back(StreamEvent::Finish(reason));
        Ok(())
    }
}

/// Parses reassembled arguments: empty means `{}`, invalid JSON is kept raw.
pub(crate) fn parse_arguments(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(&raw).unwrap_or(Value::String(raw))
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(decoder: &mut OpenAiDecoder, data: &str, out: &mut VecDeque<StreamEvent>) -> Flow {
        let event = Event {
            data: data.to_string(),
            ..Event::default()
        };
        decoder.event(&event, out).unwrap()
    }

    #[test]
    fn cached_prompt_tokens_are_reported() {
        let mut decoder = OpenAiDecoder::default();
        let mut out = VecDeque::new();
        feed(
            &mut decoder,
            r#"{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":768}}}"#,
            &mut out,
        );
        assert_eq!(
            out.pop_front(),
            Some(StreamEvent::Usage(Usage {
                input_tokens: 900,
                output_tokens: 5,
                cache_read_tokens: 768,
                cache_write_tokens: 0,
            }))
        );
    }

    #[test]
    fn reassembles_interleaved_tool_calls() {
        let mut decoder = OpenAiDecoder::default();
        let mut out = VecDeque::new();
        for data in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"name":"ls","arguments":"{\"di"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"r\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        ] {
            assert_eq!(feed(&mut decoder, data, &mut out), Flow::Continue);
        }
        assert!(out.is_empty());
        assert_eq!(feed(&mut decoder, "[DONE]", &mut out), Flow::Complete);
        decoder.finish(true, &mut out).unwrap();
        assert_eq!(
            Vec::from(out),
            vec![
                StreamEvent::ToolCall(ToolCall {
                    id: "a".into(),
                    name: "read".into(),
                    arguments: json!({"path": "x"}),
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "ls".into(),
                    arguments: json!({"dir": 1}),
                }),
                StreamEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn arguments_keep_raw_text_when_not_json() {
        assert_eq!(parse_arguments(String::new()), json!({}));
        assert_eq!(parse_arguments("{\"a\":".into()), json!("{\"a\":"));
    }

    #[test]
    fn body_end_without_finish_is_an_error() {
        let mut decoder = OpenAiDecoder::default();
        let mut out = VecDeque::new();
        feed(
            &mut decoder,
            r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
            &mut out,
        );
        let err = decoder.finish(false, &mut out).unwrap_err();
        assert!(err.to_string().contains("ended unexpectedly"), "{err}");
    }

    #[test]
    fn messages_map_to_the_wire_shape() {
        let call = ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: json!({"path": "a"}),
        };
        assert_eq!(
            wire_message(&ChatMessage::assistant("", vec![call]), false, "m"),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
            ]})
        );
        assert_eq!(
            wire_message(&ChatMessage::tool_result("c1", "text", false), false, "m"),
            json!({"role": "tool", "tool_call_id": "c1", "content": "text"})
        );
    }

    fn png() -> Image {
        Image::new("image/png", "iVBORw0KGgo=").unwrap()
    }

    #[test]
    fn images_go_as_parts_and_tool_images_follow_the_round() {
        let messages = vec![
            ChatMessage::user("what is this?").with_images(vec![png()]),
            ChatMessage::tool_result("c1", "[image image/png]", false).with_images(vec![png()]),
            ChatMessage::tool_result("c2", "plain", false),
            ChatMessage::user("next"),
        ];
        let wire = wire_messages(&messages, true, "gpt-4o");
        let url = "data:image/png;base64,iVBORw0KGgo=";
        assert_eq!(
            wire[0]["content"],
            json!([{"type": "text", "text": "what is this?"},
                   {"type": "image_url", "image_url": {"url": url}}])
        );
        // Both results stay together; their images come after them.
        assert_eq!(wire[1]["role"], "tool");
        assert_eq!(wire[2]["role"], "tool");
        assert_eq!(wire[3]["role"], "user");
        assert_eq!(wire[3]["content"][1]["image_url"]["url"], url);
        assert!(wire[3]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("c1"));
        assert_eq!(wire[4]["content"], "next");
    }

    #[test]
    fn a_model_without_images_is_told_what_was_left_out() {
        let messages = vec![
            ChatMessage::user("what is this?").with_images(vec![png()]),
            ChatMessage::tool_result("c1", "shot", false).with_images(vec![png()]),
        ];
        let wire = wire_messages(&messages, false, "llama3");
        assert_eq!(wire.len(), 2);
        for m in &wire {
            let text = m["content"].as_str().unwrap();
            assert!(
                text.contains("1 image left out (image/png, 8 bytes)"),
                "{text}"
            );
            assert!(
                text.contains("the model llama3 is not known to accept images"),
                "{text}"
            );
            assert!(!text.contains("iVBOR"), "{text}");
        }
    }
}
