//! The legacy HTTP+SSE transport of MCP 2024-11-05, still spoken by many
//! deployed servers: GET the SSE URL and keep the event stream open; its
//! first `endpoint` event names (relative to the SSE URL) where to POST
//! each JSON-RPC message; answers, requests and notifications arrive as
//! `message` events on the stream.
//!
//! rmcp 3.11 has no client for it, so this is an rmcp [`Transport`] over
//! reqwest. The event stream is parsed here rather than by `sse-stream`
//! (which buffers an event of any size): one event's data is held up to
//! the message cap (`mcp.max_message_bytes`); past it the rest is scanned
//! in constant memory for the JSON-RPC `id`, and an answer over the cap
//! becomes an error answer for that call, as over the other transports.
//!
//! Bounds: connecting [`CONNECT_TIMEOUT`], each POST [`POST_TIMEOUT`], an
//! event name [`MAX_EVENT_NAME`] bytes, a line that is not `data` at most
//! the cap. The endpoint must be on the SSE URL's origin (a server cannot
//! make the daemon post its headers elsewhere). No reconnection: when the
//! stream ends the server is stopped, and says so.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{NumberOrString, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;

use super::transport::{too_large_answer, IdScanner};

/// How long connecting to the server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one POST of a message may take (its answer comes on the
/// stream; the POST itself is only acknowledged).
pub const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longer event names are cut (none of the ones read is long).
pub const MAX_EVENT_NAME: usize = 64;

/// Why a message could not be posted.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("posting to {endpoint}: {reason}")]
    Post { endpoint: String, reason: String },
}

/// Why the event stream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot make an HTTP client: {0}")]
    Client(String),
    #[error("`{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status} to the event stream's GET")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error(
        "{url} ended its event stream before naming its endpoint (not a legacy SSE MCP server?)"
    )]
    NoEndpoint { url: String },
    #[error("{url} named the endpoint `{endpoint}`: {reason}")]
    BadEndpoint {
        url: String,
        endpoint: String,
        reason: String,
    },
    #[error("{url} named an endpoint on another origin ({endpoint}); refused")]
    OtherOrigin { url: String, endpoint: reqwest::Url },
}

/// A connected legacy SSE server.
pub struct SseTransport {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    headers: HeaderMap,
    events: EventReader,
    cap: usize,
    name: String,
}

/// The innermost cause of a reqwest error, in words.
fn cause(error: &reqwest::Error) -> String {
    let mut inner: &(dyn std::error::Error + 'static) = error;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let text = inner.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_lowercase(),
        None => text,
    }
}

impl SseTransport {
    /// Open the event stream at `url` and wait for its `endpoint` event
    /// (the caller's startup limit bounds the wait).
    pub async fn connect(
        url: &str,
        headers: HashMap<HeaderName, HeaderValue>,
        cap: usize,
        name: String,
    ) -> Result<SseTransport, ConnectError> {
        let headers: HeaderMap = headers.into_iter().collect();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| ConnectError::Client(cause(&e)))?;
        let base = reqwest::Url::parse(url).map_err(|e| ConnectError::BadUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        let response = client
            .get(base.clone())
            .headers(headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| ConnectError::Unreachable {
                url: url.to_string(),
                reason: cause(&e),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ConnectError::Status {
                url: url.to_string(),
                status,
            });
        }
        let mut events = EventReader::new(response.bytes_stream().boxed(), cap);
        let endpoint = loop {
            match events.next().await {
                None => {
                    return Err(ConnectError::NoEndpoint {
                        url: url.to_string(),
                    })
                }
                Some(Event {
                    name,
                    data: Data::Text(text),
                }) if name == "endpoint" => break text,
                Some(_) => continue,
            }
        };
        let endpoint = base
            .join(endpoint.trim())
            .map_err(|e| ConnectError::BadEndpoint {
                url: url.to_string(),
                endpoint: endpoint.clone(),
                reason: e.to_string(),
            })?;
        if endpoint.origin() != base.origin() {
            return Err(ConnectError::OtherOrigin {
                url: url.to_string(),
                endpoint,
            });
        }
        tracing::debug!(server = %name, %endpoint, "legacy SSE endpoint");
        Ok(SseTransport {
            client,
            endpoint,
            headers,
            events,
            cap,
            name,
        })
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .timeout(POST_TIMEOUT)
            .json(&item);
        let endpoint = self.endpoint.to_string();
        async move {
            let response = request.send().await.map_err(|e| SseError::Post {
                endpoint: endpoint.clone(),
                reason: if e.is_timeout() {
                    format!("no answer within {} s", POST_TIMEOUT.as_secs())
                } else {
                    cause(&e)
                },
            })?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(SseError::Post {
                    endpoint,
                    reason: format!("the server answered {status}"),
                })
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let event = self.events.next().await;
            let Some(event) = event else {
                tracing::info!(server = %self.name, "the legacy SSE stream ended: the server stopped");
                return None;
            };
            if event.name != "message" {
                continue;
            }
            match event.data {
                Data::Text(text) => match serde_json::from_str::<ServerJsonRpcMessage>(&text) {
                    Ok(message) => return Some(message),
                    Err(e) => {
                        tracing::info!(server = %self.name, "a legacy SSE message that is not JSON-RPC was dropped: {e}");
                    }
                },
                Data::Oversized { size, id } => {
                    let id = id.and_then(|raw| serde_json::from_str::<NumberOrString>(&raw).ok());
                    match id {
                        Some(id) => {
                            tracing::info!(server = %self.name, size, cap = self.cap, "MCP answer over the message cap; the call is told");
                            return Some(too_large_answer(id, Some(size), self.cap));
                        }
                        None => {
                            tracing::info!(server = %self.name, size, cap = self.cap, "MCP message over the message cap dropped (not an answer to a call)");
                        }
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        // Dropping the stream closes the connection: the server's session ends.
        self.events.close();
        std::future::ready(Ok(()))
    }
}

/// One event's data: whole, or over the cap (its size and, when it is an
/// answer, the raw JSON of its id).
#[derive(Debug, PartialEq)]
enum Data {
    Text(String),
    Oversized { size: usize, id: Option<String> },
}

#[derive(Debug, PartialEq)]
struct Event {
    name: String,
    data: Data,
}

/// What the rest of the current line is for.
enum Line {
    /// Held (at most the cap) until its end.
    Held(Vec<u8>),
    /// The rest of an oversized `data` line: scanned, not kept.
    OversizedData,
    /// The rest of an oversized line of another field: skipped.
    Skipped,
}

/// A bounded parser of a `text/event-stream` body.
struct EventReader {
    body: Option<BoxStream<'static, reqwest::Result<bytes::Bytes>>>,
    chunk: bytes::Bytes,
    cap: usize,
    line: Line,
    name: String,
    /// The data of the event being read, while under the cap.
    data: Vec<u8>,
    has_data: bool,
    /// Set once the event's data went over the cap.
    oversized: Option<(IdScanner, usize)>,
}

impl EventReader {
    fn new(body: BoxStream<'static, reqwest::Result<bytes::Bytes>>, cap: usize) -> EventReader {
        EventReader {
            body: Some(body),
            chunk: bytes::Bytes::new(),
            cap,
            line: Line::Held(Vec::new()),
            name: String::new(),
            data: Vec::new(),
            has_data: false,
            oversized: None,
        }
    }

    fn close(&mut self) {
        self.body = None;
    }

    /// The next event, or `None` when the stream ended (or failed).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if self.chunk.is_empty() {
                let body = self.body.as_mut()?;
                match body.next().await {
                    Some(Ok(bytes)) => self.chunk = bytes,
                    Some(Err(e)) => {
                        tracing::debug!("the legacy SSE stream failed: {}", cause(&e));
                        self.body = None;
                        return None;
                    }
                    None => {
                        self.body = None;
                        return None;
                    }
                }
            }
            if let Some(event) = self.step() {
                return Some(event);
            }
        }
    }

    /// Consume the current chunk up to the end of one line (or all of it);
    /// an event when that line was the blank one ending it.
    fn step(&mut self) -> Option<Event> {
        let newline = self.chunk.iter().position(|b| *b == b'\n');
        let take = newline.map_or(self.chunk.len(), |i| i + 1);
        let piece = self.chunk.split_to(take);
        let body = &piece[..newline.map_or(piece.len(), |i| i)];
        let cap = self.cap;
        match &mut self.line {
            Line::Held(held) => {
                held.extend_from_slice(body);
                // A field name and a space past the cap: the line is too long.
                if held.len() > cap + 16 {
                    let held = std::mem::take(held);
                    self.line = match held.strip_prefix(b"data:") {
                        Some(value) => {
                            let value = value.strip_prefix(b" ").unwrap_or(value);
                            self.begin_data_line();
                            self.data_bytes(value);
                            Line::OversizedData
                        }
                        None => Line::Skipped,
                    };
                }
            }
            Line::OversizedData => {
                let body = body.to_vec();
                self.data_bytes(&body);
            }
            Line::Skipped => {}
        }
        newline?;
        // The line ended.
        let line = std::mem::replace(&mut self.line, Line::Held(Vec::new()));
        match line {
            Line::Held(mut held) => {
                if held.last() == Some(&b'\r') {
                    held.pop();
                }
                self.field(&held)
            }
            Line::OversizedData | Line::Skipped => None,
        }
    }

    /// One whole line of the stream.
    fn field(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(b":") {
            return None;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.begin_data_line();
                self.data_bytes(value);
            }
            b"event" => {
                let end = value.len().min(MAX_EVENT_NAME);
                self.name = String::from_utf8_lossy(&value[..end]).into_owned();
            }
            _ => {}
        }
        None
    }

    /// A `data` line starts: lines of one event's data join with `\n`.
    fn begin_data_line(&mut self) {
        if self.has_data {
            self.data_bytes(b"\n");
        }
        self.has_data = true;
    }

    /// Add to the event's data, switching to scanning past the cap.
    fn data_bytes(&mut self, bytes: &[u8]) {
        match &mut self.oversized {
            Some((scanner, size)) => {
                scanner.feed(bytes);
                *size += bytes.len();
            }
            None if self.data.len() + bytes.len() > self.cap => {
                let mut scanner = IdScanner::default();
                scanner.feed(&self.data);
                scanner.feed(bytes);
                let size = self.data.len() + bytes.len();
                self.data = Vec::new();
                self.oversized = Some((scanner, size));
            }
            None => self.data.extend_from_slice(bytes),
        }
    }

    /// The blank line: the event is complete (one without data is none).
    fn dispatch(&mut self) -> Option<Event> {
        let name = match std::mem::take(&mut self.name) {
            n if n.is_empty() => "message".to_string(),
            n => n,
        };
        let has_data = std::mem::take(&mut self.has_data);
        let data = match self.oversized.take() {
            Some((scanner, size)) => Data::Oversized {
                size,
                id: scanner.response_id(),
            },
            None if has_data => {
                Data::Text(String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned())
            }
            None => return None,
        };
        Some(Event { name, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(chunks: Vec<&'static str>, cap: usize) -> EventReader {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok(bytes::Bytes::from_static(c.as_bytes()))),
        );
        EventReader::new(stream.boxed(), cap)
    }

    #[tokio::test]
    async fn events_are_read_across_chunks_and_line_endings() {
        let mut r = reader(
            vec![
                ": hello\r\nevent: endpoint\r\ndata: /messages?session",
                "Id=1\r\n\r\ndata: {\"a\":\ndata: 1}\n\nevent: ping\n\n",
            ],
            1024,
        );
        assert_eq!(
            r.next().await,
            Some(Event {
                name: "endpoint".into(),
                data: Data::Text("/messages?sessionId=1".into())
            })
        );
        assert_eq!(
            r.next().await,
            Some(Event {
                name: "message".into(),
                data: Data::Text("{\"a\":\n1}".into())
            })
        );
        // An event without data is none; then the stream ends.
        assert_eq!(r.next().await, None);
    }

    #[tokio::test]
    async fn an_event_over_the_cap_is_scanned_for_its_id_not_kept() {
        let big: &'static str = Box::leak(
            format!(
                "data: {{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"t\":\"{}\"}}}}\n\ndata: {{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{}}}}\n\n",
                "x".repeat(5000)
            )
            .into_boxed_str(),
        );
        let mut r = reader(vec![big], 100);
        match r.next().await {
            Some(Event {
                data: Data::Oversized { size, id },
                ..
            }) => {
                assert_eq!(id.as_deref(), Some("7"));
                assert!(size > 5000, "{size}");
            }
            other => panic!("{other:?}"),
        }
        assert!(r.data.capacity() <= 200);
        assert_eq!(
            r.next().await,
            Some(Event {
                name: "message".into(),
                data: Data::Text("{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}".into())
            })
        );
    }
}
