//! The two MCP transports with a cap on one message (`mcp.max_message_bytes`),
//! enforced *before* rmcp decodes anything, and an answer for the caller
//! when a message is over it.
//!
//! rmcp bounds a message too (16 MiB), but it drops an oversized stdio line
//! silently — the call then waits for its time limit and the model is told
//! the server timed out — and over HTTP an oversized event ends the stream,
//! which closes the session: a healthy server is declared dead. Here an
//! oversized *response* is replaced by a JSON-RPC error for the same request
//! id, naming the cap; the server stays up and the call gets its answer at
//! once.
//!
//! - stdio: [`BoundedChild`] spawns the server and pumps its stdout through
//!   a bounded line reader into an in-memory pipe that rmcp's line
//!   transport reads. An oversized line is scanned (constant memory) for a
//!   top-level `id` and `result`/`error`, and becomes the error answer.
//! - streamable HTTP: [`BoundedHttp`] wraps reqwest's client; a JSON body
//!   or an SSE event over the cap becomes the error answer to the request
//!   that was posted.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use process_wrap::tokio::ChildWrapper;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ErrorData, NumberOrString, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use sse_stream::Sse;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The default cap on one MCP message, in bytes (rmcp's own limit).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The pipe between the stdout pump and rmcp's reader.
const PIPE_BYTES: usize = 64 * 1024;
/// How long a stopped server gets to exit after its stdin closes, and
/// again after SIGTERM, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// The JSON-RPC error code of an answer over the cap (implementation-defined
/// server error range).
const TOO_LARGE_CODE: i32 = -32001;

/// The error text of an answer over the cap, said the same way for both
/// transports.
pub fn too_large_message(size: Option<usize>, cap: usize) -> String {
    match size {
        Some(n) => format!(
            "the server's answer ({n} bytes) is over the MCP message cap of {cap} bytes (mcp.max_message_bytes); it was dropped"
        ),
        None => format!(
            "the server's answer is over the MCP message cap of {cap} bytes (mcp.max_message_bytes); it was dropped"
        ),
    }
}

/// A custom header that cannot be sent (the value is never quoted back).
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("header `{name}`: {source}")]
    Name {
        name: String,
        source: reqwest::header::InvalidHeaderName,
    },
    #[error("header `{name}`: {source}")]
    Value {
        name: String,
        source: reqwest::header::InvalidHeaderValue,
    },
}

/// The custom headers of an HTTP entry, checked (a bad name or value is
/// refused with the header's name).
pub fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HashMap<HeaderName, HeaderValue>, HeaderError> {
    let mut map = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|source| HeaderError::Name {
            name: k.clone(),
            source,
        })?;
        let value = HeaderValue::from_str(v).map_err(|source| HeaderError::Value {
            name: k.clone(),
            source,
        })?;
        map.insert(name, value);
    }
    Ok(map)
}

/// A stdio server: the child process, and rmcp's line transport reading
/// the bounded copy of its stdout.
pub struct BoundedChild {
    child: Option<Box<dyn ChildWrapper>>,
    inner: AsyncRwTransport<RoleClient, tokio::io::DuplexStream, tokio::process::ChildStdin>,
    pump: tokio::task::JoinHandle<()>,
}

impl BoundedChild {
    /// Spawn `command` (stdin/stdout piped; stderr as the command says)
    /// and return the transport and the child's stderr.
    pub fn spawn(
        mut command: process_wrap::tokio::CommandWrap,
        cap: usize,
        name: String,
    ) -> std::io::Result<(BoundedChild, Option<tokio::process::ChildStderr>)> {
        command
            .command_mut()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn()?;
        let stdin = child
            .stdin()
            .take()
            .ok_or_else(|| std::io::Error::other("the server's stdin was not piped"))?;
        let stdout = child
            .stdout()
            .take()
            .ok_or_else(|| std::io::Error::other("the server's stdout was not piped"))?;
        let stderr = child.stderr().take();
        let (reader, writer) = tokio::io::duplex(PIPE_BYTES);
        let pump = tokio::spawn(pump_lines(stdout, writer, cap, name));
        // The pump already refused anything over the cap; what reaches rmcp
        // is at most the cap plus the newline.
        let inner = AsyncRwTransport::new(reader, stdin).with_max_line_length(cap + 2);
        Ok((
            BoundedChild {
                child: Some(child),
                inner,
                pump,
            },
            stderr,
        ))
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // Closing stdin is how MCP asks a stdio server to stop.
        let _ = self.inner.close().await;
        if tokio::time::timeout(EXIT_GRACE, child.wait())
            .await
            .is_err()
        {
            let _ = child.signal(libc::SIGTERM);
            if tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
            {
                Box::into_pin(child.kill()).await?;
            }
        }
        self.pump.abort();
        Ok(())
    }
}

impl Drop for BoundedChild {
    fn drop(&mut self) {
        self.pump.abort();
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
        }
    }
}

impl Transport<RoleClient> for BoundedChild {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.shutdown()
    }
}

/// Copy the server's stdout to `out` line by line, holding at most `cap`
/// bytes of one line; a line over the cap is replaced by an error answer
/// (when it is a response) or dropped (anything else), and logged.
async fn pump_lines<R, W>(stdout: R, mut out: W, cap: usize, name: String)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut reader = BufReader::with_capacity(PIPE_BYTES, stdout);
    let mut line: Vec<u8> = Vec::new();
    // Set while the rest of an oversized line is skipped.
    let mut oversized: Option<(IdScanner, usize)> = None;
    loop {
        let (consumed, ended) = {
            let available = match reader.fill_buf().await {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::debug!(server = %name, "reading the server's stdout: {e}");
                    break;
                }
            };
            if available.is_empty() {
                break;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let chunk = &available[..take];
            match &mut oversized {
                Some((scanner, size)) => {
                    scanner.feed(chunk);
                    *size += chunk.len();
                }
                None if line.len() + chunk.len() > cap + 1 => {
                    let mut scanner = IdScanner::default();
                    scanner.feed(&line);
                    scanner.feed(chunk);
                    oversized = Some((scanner, line.len() + chunk.len()));
                    line = Vec::new();
                }
                None => line.extend_from_slice(chunk),
            }
            (take, newline.is_some())
        };
        reader.consume(consumed);
        if !ended {
            continue;
        }
        let sent = match oversized.take() {
            Some((scanner, size)) => {
                let size = size.saturating_sub(1);
                match scanner.response_id() {
                    Some(id) => {
                        tracing::info!(server = %name, size, cap, "MCP answer over the message cap; the call is told");
                        let answer = error_line(&id, &too_large_message(Some(size), cap));
                        out.write_all(answer.as_bytes()).await
                    }
                    None => {
                        tracing::info!(server = %name, size, cap, "MCP message over the message cap dropped (not an answer to a call)");
                        Ok(())
                    }
                }
            }
            None => {
                let result = out.write_all(&line).await;
                line.clear();
                result
            }
        };
        if sent.is_err() {
            // rmcp stopped reading: the session is over.
            break;
        }
    }
    let _ = out.shutdown().await;
}

/// A JSON-RPC error line answering the request `id` (raw JSON).
pub(super) fn error_line(raw_id: &str, message: &str) -> String {
    let error = serde_json::json!({ "code": TOO_LARGE_CODE, "message": message });
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{raw_id},\"error\":{error}}}\n")
}

/// Finds, in one JSON object streamed through it, the raw text of the
/// top-level `id` and whether it is a response (`result` or `error` at the
/// top level, no `method`), in constant memory.
#[derive(Default)]
pub(super) struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1: a key is being read (between `{`/`,` and `:`).
    reading_key: bool,
    key: Vec<u8>,
    key_overflow: bool,
    /// The top-level value being read belongs to `id`.
    capturing_id: bool,
    value: Vec<u8>,
    id: Option<String>,
    has_method: bool,
    has_outcome: bool,
}

/// Longer top-level keys are none of the ones looked for.
const MAX_KEY: usize = 8;
/// A longer id is not believed.
const MAX_ID: usize = 256;

impl IdScanner {
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            if self.depth == 1 {
                self.keep(b);
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 {
                    self.keep(b);
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.reading_key = b == b'{';
                } else if self.depth == 2 {
                    // An object or array is no id.
                    self.capturing_id = false;
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.end_value();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 && self.reading_key => {
                self.reading_key = false;
                let key = if self.key_overflow {
                    &b""[..]
                } else {
                    &self.key[..]
                };
                match key {
                    b"\"id\"" => {
                        self.capturing_id = true;
                        self.value.clear();
                    }
                    b"\"method\"" => self.has_method = true,
                    b"\"result\"" | b"\"error\"" => self.has_outcome = true,
                    _ => {}
                }
                self.key.clear();
                self.key_overflow = false;
            }
            b',' if self.depth == 1 => {
                self.end_value();
                self.reading_key = true;
            }
            _ if self.depth == 1 && !b.is_ascii_whitespace() => self.keep(b),
            _ => {}
        }
    }

    fn keep(&mut self, b: u8) {
        if self.reading_key {
            if self.key.len() < MAX_KEY {
                self.key.push(b);
            } else {
                self.key_overflow = true;
            }
        } else if self.capturing_id {
            if self.value.len() < MAX_ID {
                self.value.push(b);
            } else {
                self.capturing_id = false;
            }
        }
    }

    fn end_value(&mut self) {
        if self.capturing_id {
            self.capturing_id = false;
            let raw = String::from_utf8_lossy(&self.value).into_owned();
            // Only a number or a string is an id.
            if serde_json::from_str::<NumberOrString>(&raw).is_ok() {
                self.id = Some(raw);
            }
        }
    }

    /// The raw id of a response (never of a request or notification the
    /// server sent: answering those with an error under their id would
    /// resolve one of *our* requests that happens to share it).
    pub(super) fn response_id(&self) -> Option<String> {
        (self.has_outcome && !self.has_method)
            .then(|| self.id.clone())
            .flatten()
    }
}

/// reqwest's streamable HTTP client with the message cap turned into an
/// answer: a response body or SSE event over the cap becomes a JSON-RPC
/// error for the request that was posted.
#[derive(Clone)]
pub struct BoundedHttp {
    pub client: reqwest::Client,
    pub cap: usize,
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

pub(super) fn too_large_answer(
    id: NumberOrString,
    size: Option<usize>,
    cap: usize,
) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(
        ErrorData::new(
            rmcp::model::ErrorCode(TOO_LARGE_CODE),
            too_large_message(size, cap),
            None,
        ),
        Some(id),
    )
}

/// Whether an SSE error is rmcp's event-size limit (its type is private;
/// its message is what can be seen).
fn is_too_large(error: &SseError) -> bool {
    error.to_string().contains("exceeded the maximum size")
}

impl StreamableHttpClient for BoundedHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = self.cap;
        limits.max_json_response_size = self.cap;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        mut limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        limits.max_sse_event_size = limits.max_sse_event_size.min(self.cap);
        limits.max_json_response_size = limits.max_json_response_size.min(self.cap);
        let id = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        let cap = self.cap;
        let answer = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id.clone(),
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        match (answer, id) {
            (Err(StreamableHttpError::ResponseBodyTooLarge { .. }), Some(id)) => {
                tracing::info!(cap, "MCP answer over the message cap; the call is told");
                Ok(StreamableHttpPostResponse::Json(
                    too_large_answer(id, None, cap),
                    session_id.map(|s| s.to_string()),
                ))
            }
            (Ok(StreamableHttpPostResponse::Sse(stream, sid)), Some(id)) => Ok(
                StreamableHttpPostResponse::Sse(answer_oversized_events(stream, id, cap), sid),
            ),
            (other, _) => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                self.cap,
            )
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        _max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, SseError>>> {
        self.get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }
}

/// The SSE stream answering request `id`, with an event over the cap
/// replaced by the error answer, after which the stream ends (the answer
/// was the event the request waited for).
fn answer_oversized_events(
    stream: BoxStream<'static, Result<Sse, SseError>>,
    id: NumberOrString,
    cap: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    stream
        .scan(false, move |ended, event| {
            // Nothing after the substituted answer: it was what the
            // request waited for.
            if *ended {
                return futures::future::ready(None);
            }
            let event = match event {
                Err(e) if is_too_large(&e) => {
                    tracing::info!(cap, "MCP answer over the message cap; the call is told");
                    *ended = true;
                    let answer = serde_json::to_string(&too_large_answer(id.clone(), None, cap))
                        .unwrap_or_default();
                    Ok(Sse::default().event("message").data(answer))
                }
                other => other,
            };
            futures::future::ready(Some(event))
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> IdScanner {
        let mut s = IdScanner::default();
        s.feed(text.as_bytes());
        s
    }

    #[test]
    fn the_scanner_finds_the_id_of_a_response_wherever_it_is() {
        let head = scan(r#"{"jsonrpc":"2.0","id":7,"result":{"id":99,"text":"x"}}"#);
        assert_eq!(head.response_id().as_deref(), Some("7"));
        let tail =
            scan(r#"{"result":{"content":[{"text":"}\"id\":3"}]},"jsonrpc":"2.0","id":"a\"b"}"#);
        assert_eq!(tail.response_id().as_deref(), Some(r#""a\"b""#));
        let error = scan(r#"{"jsonrpc":"2.0","error":{"code":1,"message":"m"},"id":12}"#);
        assert_eq!(error.response_id().as_deref(), Some("12"));
    }

    #[test]
    fn requests_notifications_and_odd_ids_are_not_answered() {
        let request = scan(
            r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"result":1}}"#,
        );
        assert_eq!(request.response_id(), None);
        let note = scan(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
        assert_eq!(note.response_id(), None);
        let object_id = scan(r#"{"id":{"x":1},"result":{}}"#);
        assert_eq!(object_id.response_id(), None);
    }

    #[tokio::test]
    async fn an_oversized_line_becomes_an_error_answer_and_the_next_line_passes() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{{\"text\":\"{}\"}}}}\n",
            "A".repeat(5000)
        );
        let small = "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}\n";
        let input = format!("{big}{small}");
        let mut out = Vec::new();
        pump_lines(input.as_bytes(), &mut out, 1000, "t".into()).await;
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let answer: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(answer["id"], 4);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("cap of 1000 bytes (mcp.max_message_bytes)"),
            "{message}"
        );
        assert!(
            message.contains(&format!("({} bytes)", big.len() - 1)),
            "{message}"
        );
        assert_eq!(lines[1], small.trim_end());
    }
}
