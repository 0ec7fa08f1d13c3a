//! The OpenAI Responses API, streamed (`kind = "openai-responses"`): the
//! wire format of current OpenAI models and Codex.
//!
//! The request is one POST to `{base_url}/responses` with `"stream": true`
//! and the conversation as `input` items: messages, the model's
//! `function_call`s and their `function_call_output`s. The answer is SSE
//! whose `data:` lines are JSON objects with a `type`:
//! `response.output_text.delta` (text), `response.reasoning_*.delta`
//! (reasoning), `response.output_item.added` (a function call opens: its
//! `call_id` and name), `response.function_call_arguments.delta` (its
//! arguments in pieces, keyed by `output_index`), and a final
//! `response.completed` (or `response.incomplete`) carrying the usage.

use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Event;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::config::ProviderConfig;
use super::image::text_with_note;
use super::sse::{json_error_message, snippet, DecodeError, Endpoint, Flow, WireDecoder};
use super::{
    ChatMessage, ChatRequest, EventStream, FinishReason, Image, Provider, ProviderError, Role,
    StreamEvent, ToolCall, ToolSpec, Usage,
};

/// A provider speaking the OpenAI Responses API.
pub struct ResponsesProvider {
    endpoint: Endpoint,
    context_window: Option<u64>,
}

impl ResponsesProvider {
    /// Builds the provider from its configuration.
    pub fn new(config: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(ResponsesProvider {
            endpoint: Endpoint::from_config(config)?,
            context_window: config.context_window,
        })
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.endpoint.model,
            "input": input(&request.messages, self.endpoint.images, &self.endpoint.model),
            "stream": true,
            // Nothing is kept on the server: every request carries the
            // whole conversation, as with the other wire formats.
            "store": false,
        });
        if !request.tools.is_empty() {
            body["tools"] = request.tools.iter().map(wire_tool).collect();
        }
        if let Some(max_tokens) = request.max_tokens.or(self.endpoint.max_tokens) {
            body["max_output_tokens"] = json!(max_tokens);
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        body
    }
}

#[async_trait::async_trait]
impl Provider for ResponsesProvider {
    endpoint_provider_methods!();

    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        let url = self.endpoint.url("/responses");
        let headers = self.endpoint.bearer_headers()?;
        let body = self.request_body(request);
        let response = self.endpoint.post(&url, headers, &body, &cancel).await?;
        Ok(self
            .endpoint
            .decode(url, response, ResponsesDecoder::default(), cancel))
    }
}

/// The conversation as `input` items. A function call's output is text:
/// the images of a round's tool results follow its last output, in one
/// user message.
fn input(messages: &[ChatMessage], images: bool, model: &str) -> Vec<Value> {
    let mut items = Vec::with_capacity(messages.len());
    let mut waiting: Vec<&Image> = Vec::new();
    let flush = |items: &mut Vec<Value>, waiting: &mut Vec<&Image>| {
        if !waiting.is_empty() {
            let mut content = vec![json!({
                "type": "input_text",
                "text": "The images the tool calls above returned:",
            })];
            content.extend(waiting.drain(..).map(input_image));
            items.push(json!({"type": "message", "role": "user", "content": content}));
        }
    };
    for message in messages {
        if message.role != Role::Tool {
            flush(&mut items, &mut waiting);
        }
        items.extend(input_items(message, images, model));
        if message.role == Role::Tool && images {
            waiting.extend(message.images.iter());
        }
    }
    flush(&mut items, &mut waiting);
    items
}

fn input_image(image: &Image) -> Value {
    json!({"type": "input_image", "image_url": image.data_url()})
}

/// One message as `input` items: a message item, and for an assistant
/// message its function calls after it.
fn input_items(message: &ChatMessage, images: bool, model: &str) -> Vec<Value> {
    let text = |role: &str| json!({"type": "message", "role": role, "content": message.content});
    match message.role {
        Role::System => vec![text("system")],
        Role::User if message.images.is_empty() => vec![text("user")],
        Role::User if images => {
            let mut content = vec![json!({"type": "input_text", "text": message.content})];
            content.extend(message.images.iter().map(input_image));
            vec![json!({"type": "message", "role": "user", "content": content})]
        }
        Role::User => vec![json!({
            "type": "message",
            "role": "user",
            "content": text_with_note(&message.content, &message.images, model),
        })],
        Role::Assistant => {
            let mut items = Vec::new();
            if !message.content.is_empty() {
                items.push(text("assistant"));
            }
            items.extend(message.tool_calls.iter().map(|call| {
                // Arguments that never parsed go back as the model wrote them.
                let arguments = match &call.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": arguments,
                })
            }));
            items
        }
        Role::Tool => vec![json!({
            "type": "function_call_output",
            "call_id": message.tool_call_id.clone().unwrap_or_default(),
            "output": if images {
                message.content.clone()
            } else {
                text_with_note(&message.content, &message.images, model)
            },
        })],
    }
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    })
}

/// A function call still being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    call_id: Option<String>,
    name: String,
    arguments: super::BoundedArguments,
    /// Pieces came as deltas: the `done` events' whole text is not added.
    streamed: bool,
}

/// Decodes Responses API events into [`StreamEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct ResponsesDecoder {
    /// Calls by their `output_index`, in order.
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<FinishReason>,
}

impl ResponsesDecoder {
    fn call(&mut self, event: &Value) -> &mut PartialCall {
        let index = event["output_index"].as_u64().unwrap_or(0);
        self.calls.entry(index).or_default()
    }

    /// A function call item (added or done): its id and name, and its
    /// whole arguments when no delta brought them.
    fn function_item(&mut self, event: &Value) {
        let item = &event["item"];
        if item["type"] != "function_call" {
            return;
        }
        let call = self.call(event);
        if call.call_id.is_none() {
            call.call_id = item["call_id"]
                .as_str()
                .or_else(|| item["id"].as_str())
                .map(str::to_string);
        }
        if call.name.is_empty() {
            call.name = item["name"].as_str().unwrap_or_default().to_string();
        }
        if let Some(whole) = item["arguments"].as_str().filter(|a| !a.is_empty()) {
            if !call.streamed {
                call.arguments.push(whole);
                call.streamed = true;
            }
        }
    }

    fn completed(&mut self, event: &Value, out: &mut VecDeque<StreamEvent>) {
        let response = &event["response"];
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            out.push_back(StreamEvent::Usage(Usage {
                input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
                cache_read_tokens: usage["input_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
                cache_write_tokens: 0,
            }));
        }
        self.finish = Some(match response["incomplete_details"]["reason"].as_str() {
            Some("max_output_tokens") => FinishReason::Length,
            Some("content_filter") => FinishReason::Refusal,
            Some(other) => FinishReason::Other(other.to_string()),
            None => FinishReason::Stop,
        });
    }
}

impl WireDecoder for ResponsesDecoder {
    fn event(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, DecodeError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Flow::Continue);
        }
        let value: Value =
            serde_json::from_str(data).map_err(|e| DecodeError::not_json(e, data))?;
        let kind = value["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = value["delta"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::TextDelta(text.to_string()));
                }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let Some(text) = value["delta"].as_str().filter(|t| !t.is_empty()) {
                    out.push_back(StreamEvent::ReasoningDelta(text.to_string()));
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                self.function_item(&value)
            }
            "response.function_call_arguments.delta" => {
                if let Some(piece) = value["delta"].as_str() {
                    let call = self.call(&value);
                    call.arguments.push(piece);
                    call.streamed = true;
                }
            }
            "response.completed" | "response.incomplete" => {
                self.completed(&value, out);
                return Ok(Flow::Complete);
            }
            "response.failed" | "error" => {
                let message = json_error_message(&value)
                    .or_else(|| json_error_message(&value["response"]))
                    .unwrap_or_else(|| snippet(data, 200));
                return Err(DecodeError::Reported(message));
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        complete: bool,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), DecodeError> {
        if !complete && self.finish.is_none() {
            return Err(DecodeError::Ended("response.completed"));
        }
        let has_calls = !self.calls.is_empty();
        for (index, call) in std::mem::take(&mut self.calls) {
            out.push_back(StreamEvent::ToolCall(ToolCall {
                id: call.call_id.unwrap_or_else(|| format!("call_{index}")),
                name: call.name,
                arguments: call.arguments.finish(),
            }));
        }
        let reason = match self.finish.take() {
            Some(FinishReason::Stop) | None if has_calls => FinishReason::ToolCalls,
            Some(reason) => reason,
            None => FinishReason::Stop,
        };
        out.push_back(StreamEvent::Finish(reason));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[Value]) -> Vec<StreamEvent> {
        let mut decoder = ResponsesDecoder::default();
        let mut out = VecDeque::new();
        let mut complete = false;
        for e in events {
            let event = Event {
                data: e.to_string(),
                ..Event::default()
            };
            complete = decoder.event(&event, &mut out).unwrap() == Flow::Complete;
        }
        decoder.finish(complete, &mut out).unwrap();
        out.into_iter().collect()
    }

    #[test]
    fn text_calls_and_usage_are_decoded_from_the_stream() {
        let events = decode(&[
            json!({"type": "response.created", "response": {"id": "r1"}}),
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Let me "}),
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "look."}),
            json!({"type": "response.output_item.added", "output_index": 1,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{\"command\":"}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "\"ls\"}"}),
            json!({"type": "response.output_item.done", "output_index": 1,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "shell", "arguments": "{\"command\":\"ls\"}"}}),
            json!({"type": "response.completed", "response": {"status": "completed",
                   "usage": {"input_tokens": 30, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 4}}}}),
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta("Let me ".into()),
                StreamEvent::TextDelta("look.".into()),
                StreamEvent::Usage(Usage {
                    input_tokens: 30,
                    output_tokens: 7,
                    cache_read_tokens: 4,
                    cache_write_tokens: 0,
                }),
                StreamEvent::ToolCall(ToolCall {
                    id: "call_a".into(),
                    name: "shell".into(),
                    arguments: json!({"command": "ls"}),
                }),
                StreamEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_cut_answer_finishes_with_length_and_a_failure_is_an_error() {
        let events = decode(&[
            json!({"type": "response.output_text.delta", "delta": "abc"}),
            json!({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"}}}),
        ]);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finish(FinishReason::Length))
        );
        let mut decoder = ResponsesDecoder::default();
        let event = Event {
            data:
                json!({"type": "response.failed", "response": {"error": {"message": "overloaded"}}})
                    .to_string(),
            ..Event::default()
        };
        let error = decoder.event(&event, &mut VecDeque::new()).unwrap_err();
        assert!(error.to_string().contains("overloaded"), "{error}");
        assert!(ResponsesDecoder::default()
            .finish(false, &mut VecDeque::new())
            .is_err());
    }

    #[test]
    fn the_conversation_becomes_input_items() {
        let provider = ResponsesProvider::new(&ProviderConfig::new(
            "o",
            super::super::config::ProviderKind::OpenAiResponses,
            "https://api.openai.com/v1",
            "gpt-5",
        ))
        .unwrap();
        let assistant = ChatMessage::assistant(
            "",
            vec![ToolCall {
                id: "call_a".into(),
                name: "shell".into(),
                arguments: json!({"command": "ls"}),
            }],
        );
        let request = ChatRequest {
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("list"),
                assistant,
                ChatMessage::tool_result("call_a", "a.txt", false),
            ],
            tools: Vec::new(),
            max_tokens: None,
            temperature: None,
        };
        let body = provider.request_body(&request);
        assert_eq!(
            body["input"],
            json!([
                {"type": "message", "role": "system", "content": "be brief"},
                {"type": "message", "role": "user", "content": "list"},
                {"type": "function_call", "call_id": "call_a", "name": "shell", "arguments": "{\"command\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "a.txt"},
            ])
        );
        assert_eq!(body["stream"], true);
    }
}
