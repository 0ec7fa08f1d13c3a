//! A fake model server for tests: real HTTP on 127.0.0.1, real wire formats,
//! real chunk timing, replaying a script of replies.
//!
//! Each incoming request takes the next [`Reply`] of the script, whatever its
//! route (`POST /v1/chat/completions`, `POST /chat/completions`,
//! `POST /v1/messages`, `POST /v1/responses`). Every request is recorded (method, path, headers,
//! JSON body) for assertions. Once the script is exhausted the server answers
//! 500 with an OpenAI-style error whose message is
//! `fake provider: script exhausted`.
//!
//! # Script format
//!
//! A script is a JSON array of replies, each an object tagged by `type`, so
//! Rust tests and the Emacs ERT tests share the same files:
//!
//! ```json
//! [
//!   {"type": "open_ai", "chunks": [{"choices": [{"index": 0, "delta": {"content": "Hi"}}]},
//!                                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}],
//!    "delay_ms": 5, "done": true},
//!   {"type": "anthropic", "events": [{"type": "message_start", "message": {"usage": {"input_tokens": 3}}},
//!                                    {"type": "message_stop"}], "delay_ms": 5},
//!   {"type": "status", "status": 429, "body": {"error": {"message": "slow down"}}, "retry_after": 1},
//!   {"type": "disconnect", "chunks": [{"choices": [{"index": 0, "delta": {"content": "Hal"}}]}], "after": 1},
//!   {"type": "hang"}
//! ]
//! ```
//!
//! - `open_ai`: each chunk is sent as `data: JSON` followed by a blank line,
//!   `delay_ms` apart; `done: true` ends with `data: [DONE]`. A chunk that
//!   is a JSON string is sent verbatim (`data: TEXT`), to script malformed
//!   lines.
//! - `anthropic`: each event (which must have a `type`) is sent as
//!   `event: TYPE` / `data: JSON`, `delay_ms` apart.
//! - `responses`: OpenAI Responses API events, framed the same way
//!   (`response.output_text.delta`, `response.completed`, …).
//! - `status`: an error status with a JSON body and an optional
//!   `Retry-After` header (seconds).
//! - `disconnect`: streams the first `after` chunks (framed as Anthropic
//!   events on `/v1/messages`, as OpenAI chunks elsewhere), then closes the
//!   connection abruptly, without `[DONE]` or a final empty chunk.
//! - `hang`: sends the response head, then nothing, until the client goes
//!   away or the server stops.
//!
//! The builders below ([`openai_text`], [`openai_tool_calls`],
//! [`anthropic_text`], ...) make realistic replies: text split over several
//! chunks, tool-call arguments split over at least three chunks and
//! interleaved between calls, usage reported as [`FAKE_INPUT_TOKENS`] in and
//! [`FAKE_OUTPUT_TOKENS`] out.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Input tokens reported by every builder's usage.
pub const FAKE_INPUT_TOKENS: u64 = 11;
/// Output tokens reported by every builder's usage.
pub const FAKE_OUTPUT_TOKENS: u64 = 7;
/// Pause between chunks in the builders' replies.
pub const BUILDER_DELAY_MS: u64 = 2;

/// The models the fake server lists at `GET /v1/models` (OpenAI's shape).
pub const FAKE_MODELS: [&str; 2] = ["fake-model", "fake-large"];

async fn models() -> axum::Json<Value> {
    let data: Vec<Value> = FAKE_MODELS
        .iter()
        .map(|id| json!({ "id": id, "object": "model" }))
        .collect();
    axum::Json(json!({ "object": "list", "data": data }))
}

/// One scripted answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// An OpenAI-compatible SSE stream of chat-completion chunks.
    OpenAi {
        chunks: Vec<Value>,
        #[serde(default)]
        delay_ms: u64,
        /// Send `data: [DONE]` after the chunks.
        #[serde(default)]
        done: bool,
    },
    /// An Anthropic Messages SSE stream; each event has a `type`.
    Anthropic {
        events: Vec<Value>,
        #[serde(default)]
        delay_ms: u64,
    },
    /// An OpenAI Responses API SSE stream; each event has a `type`.
    Responses {
        events: Vec<Value>,
        #[serde(default)]
        delay_ms: u64,
    },
    /// An HTTP error status with a JSON body.
    Status {
        status: u16,
        body: Value,
        #[serde(default)]
        retry_after: Option<u64>,
    },
    /// Stream `after` of the chunks, then cut the connection.
    Disconnect {
        chunks: Vec<Value>,
        after: usize,
        #[serde(default)]
        delay_ms: u64,
    },
    /// Send the head, then nothing.
    Hang {},
}

/// A request as the fake server saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names in lower case; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A header's value, by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    log: Option<PathBuf>,
    shutdown: CancellationToken,
}

/// A running fake server; it stops when dropped.
pub struct FakeProvider {
    /// `http://127.0.0.1:PORT`; OpenAI clients use `{base_url}/v1`.
    pub base_url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeProvider {
    /// Starts a server replaying `script`.
    pub async fn start(script: Vec<Reply>) -> FakeProvider {
        Self::start_with_log(script, None).await
    }

    /// Like [`start`](Self::start), also appending each request as one JSON
    /// line to `log` before answering it.
    pub async fn start_with_log(script: Vec<Reply>, log: Option<PathBuf>) -> FakeProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let address = listener
            .local_addr()
            .expect("local address of a bound socket");
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
            log,
            shutdown: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/chat/completions", post(answer))
            .route("/v1/messages", post(answer))
            .route("/v1/responses", post(answer))
            .route("/responses", post(answer))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeProvider {
            base_url: format!("http://{address}"),
            shared,
            server,
        }
    }

    /// The base URL an OpenAI-compatible client is configured with.
    pub fn openai_url(&self) -> String {
        format!("{}/v1", self.base_url)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The contents of the tool results request `n` carried back to the
    /// model, in order.
    pub fn tool_results(&self, n: usize) -> Vec<String> {
        let requests = self.requests();
        let request = requests
            .get(n)
            .unwrap_or_else(|| panic!("no request {n}: only {}", requests.len()));
        request.body["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("request {n} has no messages: {}", request.body))
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// [`FakeProvider::tool_results`] of the last request.
    pub fn last_tool_results(&self) -> Vec<String> {
        let n = self.requests().len().checked_sub(1).expect("a request");
        self.tool_results(n)
    }

    /// How many scripted replies are still unused.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        // Ends hanging replies too, whose connections outlive the listener.
        self.shared.shutdown.cancel();
        self.server.abort();
    }
}

/// A poisoned lock only means another test thread panicked; the data is
/// still what was recorded.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut recorded_headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        recorded_headers
            .entry(name.as_str().to_string())
            .and_modify(|existing| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers: recorded_headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    if let Some(log) = &shared.log {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(file, "{}", json!(request));
        }
    }
    // Anthropic and Responses events share one framing (`event:` + `data:`).
    let anthropic = request.path.ends_with("/messages") || request.path.ends_with("/responses");
    lock(&shared.requests).push(request);
    let reply = lock(&shared.script).pop_front();
    let shutdown = shared.shutdown.clone();
    match reply {
        None => json_response(
            500,
            json!({"error": {"message": "fake provider: script exhausted", "type": "server_error"}}),
            None,
        ),
        Some(Reply::Status {
            status,
            body,
            retry_after,
        }) => json_response(status, body, retry_after),
        Some(Reply::OpenAi {
            chunks,
            delay_ms,
            done,
        }) => {
            let mut frames: Vec<Bytes> = chunks.iter().map(openai_frame).collect();
            if done {
                frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            sse_response(paced(frames, delay_ms, Ending::Close, shutdown))
        }
        Some(Reply::Anthropic { events, delay_ms })
        | Some(Reply::Responses { events, delay_ms }) => {
            let frames = events.iter().map(anthropic_frame).collect();
            sse_response(paced(frames, delay_ms, Ending::Close, shutdown))
        }
        Some(Reply::Disconnect {
            chunks,
            after,
            delay_ms,
        }) => {
            let frame = if anthropic {
                anthropic_frame
            } else {
                openai_frame
            };
            let frames = chunks.iter().take(after).map(frame).collect();
            sse_response(paced(frames, delay_ms, Ending::Abort, shutdown))
        }
        Some(Reply::Hang {}) => sse_response(paced(Vec::new(), 0, Ending::Hang, shutdown)),
    }
}

fn openai_frame(chunk: &Value) -> Bytes {
    match chunk {
        Value::String(raw) => Bytes::from(format!("data: {raw}\n\n")),
        _ => Bytes::from(format!("data: {chunk}\n\n")),
    }
}

fn anthropic_frame(event: &Value) -> Bytes {
    let kind = event["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {event}\n\n"))
}

fn json_response(status: u16, body: Value, retry_after: Option<u64>) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// How a paced body ends once its frames are sent.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// A normal end of the body.
    Close,
    /// A body error, which makes the server drop the connection mid-body.
    Abort,
    /// Nothing more, ever (until shutdown).
    Hang,
}

/// A body sending `frames` with `delay_ms` before each one.
fn paced(frames: Vec<Bytes>, delay_ms: u64, ending: Ending, shutdown: CancellationToken) -> Body {
    let state = (VecDeque::from(frames), false);
    let stream = futures::stream::unfold(state, move |(mut frames, ended)| {
        let shutdown = shutdown.clone();
        async move {
            if ended {
                return None;
            }
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            if let Some(frame) = frames.pop_front() {
                return Some((Ok(frame), (frames, false)));
            }
            match ending {
                Ending::Close => None,
                Ending::Abort => Some((
                    Err(std::io::Error::other("scripted disconnect")),
                    (frames, true),
                )),
                Ending::Hang => {
                    shutdown.cancelled().await;
                    Some((
                        Err(std::io::Error::other("fake provider stopped")),
                        (frames, true),
                    ))
                }
            }
        }
    });
    Body::from_stream(stream)
}

fn openai_chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
}

fn openai_usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "fake-model",
        "choices": [],
        "usage": {
            "prompt_tokens": FAKE_INPUT_TOKENS,
            "completion_tokens": FAKE_OUTPUT_TOKENS,
            "total_tokens": FAKE_INPUT_TOKENS + FAKE_OUTPUT_TOKENS,
        },
    })
}

/// Splits `text` into pieces the way a model streams it: at word boundaries
/// (spaces stay with the word before), and a lone word in two halves.
pub fn pieces(text: &str) -> Vec<String> {
    let words: Vec<String> = text.split_inclusive(' ').map(str::to_string).collect();
    if words.len() > 1 {
        return words;
    }
    split_in(text, 2)
}

/// Splits `text` into `parts` pieces of nearly equal length (fewer when the
/// text is shorter than that; none for empty text).
pub fn split_in(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Text streamed over several chunks, then the `stop` finish chunk, the usage
/// chunk (empty `choices`, as OpenAI sends it) and `[DONE]`.
pub fn openai_text(text: &str) -> Reply {
    openai_reasoning_then_text("", text)
}

/// Reasoning (`delta.reasoning_content`) streamed first, then the text, as
/// DeepSeek and vLLM send it.
pub fn openai_reasoning_then_text(reasoning: &str, text: &str) -> Reply {
    let mut chunks = vec![openai_chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    for piece in pieces(reasoning) {
        chunks.push(openai_chunk(json!({"reasoning_content": piece}), None));
    }
    for piece in pieces(text) {
        chunks.push(openai_chunk(json!({"content": piece}), None));
    }
    chunks.push(openai_chunk(json!({}), Some("stop")));
    chunks.push(openai_usage_chunk());
    Reply::OpenAi {
        chunks,
        delay_ms: BUILDER_DELAY_MS,
        done: true,
    }
}

/// Tool calls as OpenAI streams them: each call's id and name in its first
/// fragment, its arguments split over at least three further fragments, the
/// calls interleaved by `index`; then `finish_reason: tool_calls`, usage and
/// `[DONE]`. Each tuple is `(id, name, arguments as JSON text)`.
/// The model calls the `shell` tool with `command`.
pub fn shell_call(id: &str, command: &str) -> Reply {
    let args = json!({ "command": command }).to_string();
    openai_tool_calls(&[(id, "shell", &args)])
}

/// The model calls the `write_file` tool.
pub fn write_call(id: &str, path: &str, content: &str) -> Reply {
    let args = json!({ "path": path, "content": content }).to_string();
    openai_tool_calls(&[(id, "write_file", &args)])
}

pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Reply {
    let mut chunks = vec![openai_chunk(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (index, (id, name, _)) in calls.iter().enumerate() {
        chunks.push(openai_chunk(
            json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""},
            }]}),
            None,
        ));
    }
    let split: Vec<Vec<String>> = calls
        .iter()
        .map(|(_, _, arguments)| split_in(arguments, 3))
        .collect();
    let rounds = split.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..rounds {
        for (index, parts) in split.iter().enumerate() {
            if let Some(part) = parts.get(round) {
                chunks.push(openai_chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                    None,
                ));
            }
        }
    }
    chunks.push(openai_chunk(json!({}), Some("tool_calls")));
    chunks.push(openai_usage_chunk());
    Reply::OpenAi {
        chunks,
        delay_ms: BUILDER_DELAY_MS,
        done: true,
    }
}

fn anthropic_message_start() -> Value {
    json!({
        "type": "message_start",
        "message": {
            "id": "msg_fake", "type": "message", "role": "assistant",
            "model": "fake-model", "content": [], "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": FAKE_INPUT_TOKENS, "output_tokens": 1},
        },
    })
}

fn anthropic_message_end(stop_reason: &str) -> [Value; 2] {
    [
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": FAKE_OUTPUT_TOKENS},
        }),
        json!({"type": "message_stop"}),
    ]
}

fn anthropic_text_block(index: usize, text: &str) -> Vec<Value> {
    let mut events = vec![json!({
        "type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""},
    })];
    for piece in pieces(text) {
        events.push(json!({
            "type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": piece},
        }));
    }
    events.push(json!({"type": "content_block_stop", "index": index}));
    events
}

/// A Responses API text answer: `response.created`, the text as
/// `response.output_text.delta` pieces, `response.completed` with usage.
pub fn responses_text(text: &str) -> Reply {
    let mut events = vec![json!({"type": "response.created", "response": {"id": "resp_1"}})];
    for piece in pieces(text) {
        events
            .push(json!({"type": "response.output_text.delta", "output_index": 0, "delta": piece}));
    }
    events.push(json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
        "usage": {"input_tokens": 12, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 0}}}}));
    Reply::Responses {
        events,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// A Responses API function call: the item added, its arguments in pieces,
/// then `response.completed`.
pub fn responses_tool_call(call_id: &str, name: &str, args_json: &str) -> Reply {
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": "resp_2"}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": ""}}),
    ];
    for piece in split_in(args_json, 3) {
        events.push(json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": piece}));
    }
    events.push(
        json!({"type": "response.completed", "response": {"id": "resp_2", "status": "completed",
        "usage": {"input_tokens": 20, "output_tokens": 9}}}),
    );
    Reply::Responses {
        events,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// A text answer: `message_start`, a `ping`, one text block streamed in
/// pieces, `message_delta` (end_turn, usage) and `message_stop`.
pub fn anthropic_text(text: &str) -> Reply {
    let mut events = vec![anthropic_message_start(), json!({"type": "ping"})];
    events.extend(anthropic_text_block(0, text));
    events.extend(anthropic_message_end("end_turn"));
    Reply::Anthropic {
        events,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// A `thinking` block streamed in pieces, then a text block.
pub fn anthropic_thinking_then_text(thinking: &str, text: &str) -> Reply {
    let mut events = vec![
        anthropic_message_start(),
        json!({
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        }),
    ];
    for piece in pieces(thinking) {
        events.push(json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": piece},
        }));
    }
    events.push(json!({
        "type": "content_block_delta", "index": 0,
        "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"},
    }));
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.extend(anthropic_text_block(1, text));
    events.extend(anthropic_message_end("end_turn"));
    Reply::Anthropic {
        events,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// One `tool_use` block whose input arrives as at least three
/// `input_json_delta` pieces; stop reason `tool_use`.
pub fn anthropic_tool_use(id: &str, name: &str, args_json: &str) -> Reply {
    let mut events = vec![
        anthropic_message_start(),
        json!({
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
        }),
        // Anthropic opens every input with an empty fragment.
        json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        }),
    ];
    for piece in split_in(args_json, 3) {
        events.push(json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.extend(anthropic_message_end("tool_use"));
    Reply::Anthropic {
        events,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// An HTTP error with an OpenAI-style body (`error.message`, which is also
/// where Anthropic puts it).
pub fn status(code: u16, message: &str) -> Reply {
    Reply::Status {
        status: code,
        body: json!({"error": {"message": message, "type": "fake_error", "code": code}}),
        retry_after: None,
    }
}

/// The first `after` chunks of `reply`'s stream, then an abrupt disconnect.
pub fn disconnect_after(reply: Reply, after: usize) -> Reply {
    let chunks = match reply {
        Reply::OpenAi { chunks, .. } => chunks,
        Reply::Anthropic { events, .. } | Reply::Responses { events, .. } => events,
        Reply::Disconnect { chunks, .. } => chunks,
        Reply::Status { .. } | Reply::Hang {} => Vec::new(),
    };
    Reply::Disconnect {
        chunks,
        after,
        delay_ms: BUILDER_DELAY_MS,
    }
}

/// `reply` with its usage replaced, as a provider with prompt caching
/// reports it: for OpenAI streams `prompt_tokens` / `completion_tokens` and
/// `prompt_tokens_details.cached_tokens`; for Anthropic streams
/// `input_tokens` (the uncached part, as Anthropic counts it),
/// `cache_read_input_tokens` and `cache_creation_input_tokens` in
/// `message_start`, `output_tokens` in `message_delta`. Other replies are
/// returned unchanged.
pub fn with_usage(
    reply: Reply,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
) -> Reply {
    match reply {
        Reply::OpenAi {
            mut chunks,
            delay_ms,
            done,
        } => {
            for chunk in &mut chunks {
                if chunk.get("usage").is_some_and(Value::is_object) {
                    chunk["usage"] = json!({
                        "prompt_tokens": input,
                        "completion_tokens": output,
                        "total_tokens": input + output,
                        "prompt_tokens_details": {"cached_tokens": cache_read},
                    });
                }
            }
            Reply::OpenAi {
                chunks,
                delay_ms,
                done,
            }
        }
        Reply::Anthropic {
            mut events,
            delay_ms,
        } => {
            for event in &mut events {
                match event["type"].as_str() {
                    Some("message_start") => {
                        event["message"]["usage"] = json!({
                            "input_tokens": input.saturating_sub(cache_read + cache_write),
                            "output_tokens": 1,
                            "cache_read_input_tokens": cache_read,
                            "cache_creation_input_tokens": cache_write,
                        });
                    }
                    Some("message_delta") => {
                        event["usage"] = json!({"output_tokens": output});
                    }
                    _ => {}
                }
            }
            Reply::Anthropic { events, delay_ms }
        }
        other => other,
    }
}
