//! HTTP and server-sent-events plumbing shared by the wire formats.
//!
//! Both OpenAI-compatible and Anthropic endpoints take one JSON POST and
//! answer with an SSE body. What differs is only how each SSE event turns into
//! [`StreamEvent`]s, so that part is a [`WireDecoder`] and everything else —
//! sending with a deadline for the response head, turning HTTP error bodies
//! into [`ProviderError::Http`], the per-chunk idle deadline, and stopping at
//! once on cancellation — lives here, once.

use std::collections::VecDeque;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::config::{ProviderConfig, ProviderConfigExt};
use super::{EventStream, ProviderError, StreamEvent};

/// What a decoder says after reading one SSE event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// More events are expected.
    Continue,
    /// The response is complete (`[DONE]`, `message_stop`): stop reading.
    Complete,
}

/// Why a decoder cannot go on with a response. The transport wraps it into
/// [`ProviderError::Stream`] with the endpoint's URL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// A `data:` line that does not parse (`snippet` is its start).
    #[error("data line is not JSON ({error}): {snippet}")]
    NotJson {
        error: serde_json::Error,
        snippet: String,
    },
    /// A `data:` line that parses to something other than an object.
    #[error("data line is not a JSON object: {0}")]
    NotObject(String),
    /// The provider sent an error event; its message.
    #[error("provider reported an error: {0}")]
    Reported(String),
    /// The body ended before the event that closes a response (named).
    #[error("stream ended unexpectedly (no {0})")]
    Ended(&'static str),
}

impl DecodeError {
    /// A data line that is not JSON: the parser's reason and its start.
    pub(crate) fn not_json(error: serde_json::Error, data: &str) -> DecodeError {
        DecodeError::NotJson {
            error,
            snippet: snippet(data, 120),
        }
    }
}

/// Turns one wire format's SSE events into normalised [`StreamEvent`]s.
pub(crate) trait WireDecoder: Send + 'static {
    /// Reads one SSE event, pushing whatever it completes onto `out`.
    fn event(
        &mut self,
        event: &Event,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Flow, DecodeError>;

    /// Called once when reading stops: `complete` is true after
    /// [`Flow::Complete`], false when the body simply ended. Pushes the
    /// trailing events (reassembled tool calls, `Finish`) or says why the
    /// response is unusable.
    fn finish(
        &mut self,
        complete: bool,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), DecodeError>;
}

/// One configured HTTP endpoint: the client, its deadlines and fixed headers.
pub(crate) struct Endpoint {
    pub name: String,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub native_tools: bool,
    pub max_tokens: Option<u32>,
    /// Images go to the model (else it is told they were left out).
    pub images: bool,
    idle_timeout: Duration,
    /// Appended to a 401/403: which key was sent and from where.
    key_hint: String,
    headers: HeaderMap,
    connect_timeout: Duration,
    /// Built at the first request, not at startup: building it loads the
    /// system's CA certificates, which cost most of a cold start.
    client: std::sync::OnceLock<reqwest::Client>,
}

impl Endpoint {
    /// Validates the configuration and builds the HTTP client.
    pub fn from_config(config: &ProviderConfig) -> Result<Self, ProviderError> {
        let base_url = config.effective_base_url();
        let parsed = reqwest::Url::parse(&base_url).map_err(|e| {
            ProviderError::Config(format!(
                "provider {}: base_url {base_url:?} is not a URL like \
                 http://127.0.0.1:8080/v1: {e}",
                config.name
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ProviderError::Config(format!(
                "provider {}: base_url {base_url:?} must start with http:// or https://",
                config.name
            )));
        }
        if config.model.trim().is_empty() {
            return Err(ProviderError::Config(format!(
                "provider {}: no model configured",
                config.name
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ProviderError::Config(format!(
                    "provider {}: invalid header name {name:?}",
                    config.name
                ))
            })?;
            // The value is never quoted back: extra headers often carry keys.
            let mut header_value = HeaderValue::from_str(value).map_err(|_| {
                ProviderError::Config(format!(
                    "provider {}: invalid value for header {name:?}",
                    config.name
                ))
            })?;
            header_value.set_sensitive(true);
            headers.insert(header_name, header_value);
        }
        Ok(Endpoint {
            name: config.name.clone(),
            base_url,
            model: config.model.clone(),
            api_key: config.required_key()?,
            native_tools: config.native_tools,
            max_tokens: config.max_tokens,
            images: config
                .images
                .unwrap_or_else(|| super::image::guess_accepts_images(config.kind, &config.model)),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs.max(1)),
            key_hint: config.key_hint(),
            headers,
            connect_timeout: Duration::from_secs(config.connect_timeout_secs.max(1)),
            client: std::sync::OnceLock::new(),
        })
    }

    /// The HTTP client, built on first use.
    fn client(&self) -> Result<&reqwest::Client, ProviderError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let tls = self.base_url.starts_with("https:");
        let built = http_client(self.connect_timeout, tls)?;
        Ok(self.client.get_or_init(|| built))
    }

    /// `name (base_url)`, the label every log line and error uses.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.base_url)
    }

    /// `Authorization: Bearer KEY` when the entry has a key (the OpenAI
    /// wire formats), else no header.
    pub fn bearer_headers(&self) -> Result<HeaderMap, ProviderError> {
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            let value = super::api_key_header(&self.name, &format!("Bearer {key}"))?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Ok(headers)
    }

    /// The base URL joined with `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url.trim_end_matches('/'))
    }

    /// POSTs `body` and waits for a successful response head.
    ///
    /// Waiting is bounded by the idle timeout and cut short by `cancel`. A
    /// non-success status becomes [`ProviderError::Http`] carrying the
    /// provider's own error message.
    pub async fn post(
        &self,
        url: &str,
        mut headers: HeaderMap,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, ProviderError> {
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        let send = self.client()?.post(url).headers(headers).json(body).send();
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            sent = tokio::time::timeout(self.idle_timeout, send) => match sent {
                Err(_) => return Err(ProviderError::Timeout {
                    url: url.to_string(),
                    message: format!("no response within {} s", self.idle_timeout.as_secs()),
                }),
                Ok(Err(e)) => return Err(request_error(url, &e)),
                Ok(Ok(response)) => response,
            },
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        // The error body is read under the same deadlines: a server that sends
        // a status and then stalls must not hold the turn.
        let text = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            text = tokio::time::timeout(self.idle_timeout, response.text()) => match text {
                Ok(Ok(text)) => text,
                _ => String::new(),
            },
        };
        let mut message = error_message(&text, status.canonical_reason().unwrap_or("error"));
        if matches!(status.as_u16(), 401 | 403) {
            message = format!("{message}; {}", self.key_hint);
        }
        Err(ProviderError::Http {
            url: url.to_string(),
            status: status.as_u16(),
            message,
            retry_after,
        })
    }

    /// Decodes `response` as SSE with `decoder`, applying the idle deadline to
    /// every chunk and ending with `Err(Cancelled)` as soon as `cancel` fires.
    pub fn decode<D: WireDecoder>(
        &self,
        url: String,
        response: reqwest::Response,
        decoder: D,
        cancel: CancellationToken,
    ) -> EventStream {
        let state = Decoding {
            events: Some(
                bounded_events(response.bytes_stream())
                    .eventsource()
                    .boxed(),
            ),
            decoder,
            pending: VecDeque::new(),
            url,
            idle_timeout: self.idle_timeout,
            cancel,
        };
        Box::pin(futures::stream::unfold(state, Decoding::next))
    }
}

/// Builds a reqwest client with our connect deadline. Without `tls` (a
/// plain `http://` provider) it trusts no certificate at all: loading the
/// system's CA store opens every file of `/etc/ssl/certs` (a good part of
/// the daemon's cold start), which a local server never needs; a redirect
/// to https then fails closed.
fn http_client(connect_timeout: Duration, tls: bool) -> Result<reqwest::Client, ProviderError> {
    // reqwest is built without a default crypto provider; installing one twice
    // is harmless (the second call reports the first is in place).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder().connect_timeout(connect_timeout);
    let builder = if tls {
        builder
    } else {
        builder.tls_certs_only(std::iter::empty())
    };
    builder
        .build()
        .map_err(|e| ProviderError::Config(format!("cannot build HTTP client: {}", chain(&e))))
}

/// Maps a failure of `send()` onto our error kinds.
fn request_error(url: &str, error: &reqwest::Error) -> ProviderError {
    let message = chain(error);
    if error.is_timeout() {
        ProviderError::Timeout {
            url: url.to_string(),
            message,
        }
    } else {
        // Refused, reset, DNS, TLS: all mean "this address did not take the
        // request", which is what the cascade needs to know.
        ProviderError::Connect {
            url: url.to_string(),
            message,
        }
    }
}

/// An error with its sources, `outer: inner: innermost` (reqwest's own
/// Display hides the interesting part, e.g. "connection refused").
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

/// The provider's own words from an error body: `error.message` (OpenAI,
/// Anthropic), a string `error`, a top-level `message`, else the raw body.
pub(crate) fn error_message(body: &str, fallback: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        if let Some(message) = json_error_message(&json) {
            return message;
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        fallback.to_string()
    } else {
        snippet(trimmed, 300)
    }
}

/// The message inside a JSON error object, if `json` is one.
pub(crate) fn json_error_message(json: &Value) -> Option<String> {
    match json.get("error") {
        Some(Value::String(message)) => Some(message.clone()),
        Some(error @ Value::Object(_)) => Some(
            error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| snippet(&error.to_string(), 300)),
        ),
        _ => json
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

type SseStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

/// The most bytes one SSE event may carry: room for a tool call's whole
/// arguments ([`super::MAX_TOOL_ARGUMENT_BYTES`]) sent as one JSON string,
/// with its escapes. The SSE parser holds an event whole until its blank
/// line, so without this a provider could grow the daemon without bound.
pub const MAX_SSE_EVENT_BYTES: usize = 2 * super::MAX_TOOL_ARGUMENT_BYTES + 64 * 1024;

/// Why a response body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    #[error("one server-sent event passed {MAX_SSE_EVENT_BYTES} bytes (the limit for one event)")]
    EventTooLarge,
}

/// The body's bytes, cut with [`BodyError::EventTooLarge`] as soon as one
/// event (the bytes between two blank lines) passes [`MAX_SSE_EVENT_BYTES`].
fn bounded_events(
    body: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
) -> impl Stream<Item = Result<bytes::Bytes, BodyError>> + Send + 'static {
    // (bytes in the event so far, the last byte that was not `\r`)
    let mut run = (0usize, 0u8);
    let mut over = false;
    body.map(move |chunk| {
        let chunk = chunk?;
        if over {
            return Err(BodyError::EventTooLarge);
        }
        let (mut size, mut last) = run;
        for &b in chunk.iter() {
            if b == b'\r' {
                continue;
            }
            if b == b'\n' && last == b'\n' {
                size = 0;
            } else {
                size += 1;
            }
            last = b;
        }
        run = (size, last);
        if size > MAX_SSE_EVENT_BYTES {
            over = true;
            return Err(BodyError::EventTooLarge);
        }
        Ok(chunk)
    })
}

/// The state of one decoded response while it is being read.
struct Decoding<D> {
    /// `None` once reading has stopped; dropping it closes the connection.
    events: Option<SseStream>,
    decoder: D,
    pending: VecDeque<StreamEvent>,
    url: String,
    idle_timeout: Duration,
    cancel: CancellationToken,
}

impl<D: WireDecoder> Decoding<D> {
    async fn next(mut self) -> Option<(Result<StreamEvent, ProviderError>, Self)> {
        loop {
            if self.cancel.is_cancelled() && self.events.is_some() {
                return self.fail(ProviderError::Cancelled);
            }
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            let events = self.events.as_mut()?;
            let read = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                read = tokio::time::timeout(self.idle_timeout, events.next()) => Some(read),
            };
            let Some(read) = read else {
                return self.fail(ProviderError::Cancelled);
            };
            let outcome = match read {
                Err(_) => Err(ProviderError::Timeout {
                    url: self.url.clone(),
                    message: format!(
                        "no data for {} s in the middle of the response",
                        self.idle_timeout.as_secs()
                    ),
                }),
                Ok(None) => self.finish(false),
                Ok(Some(Err(e))) => Err(self.transport_error(e)),
                Ok(Some(Ok(event))) => match self.decoder.event(&event, &mut self.pending) {
                    Ok(Flow::Continue) => Ok(()),
                    Ok(Flow::Complete) => self.finish(true),
                    Err(e) => Err(self.stream_error(e.to_string())),
                },
            };
            if let Err(error) = outcome {
                return self.fail(error);
            }
        }
    }

    /// Stops reading and lets the decoder push its trailing events.
    fn finish(&mut self, complete: bool) -> Result<(), ProviderError> {
        self.events = None;
        self.decoder
            .finish(complete, &mut self.pending)
            .map_err(|e| self.stream_error(e.to_string()))
    }

    /// Yields `error` as the last item: nothing queued is delivered after it.
    fn fail(mut self, error: ProviderError) -> Option<(Result<StreamEvent, ProviderError>, Self)> {
        self.events = None;
        self.pending.clear();
        Some((Err(error), self))
    }

    fn stream_error(&self, message: String) -> ProviderError {
        ProviderError::Stream {
            url: self.url.clone(),
            message,
        }
    }

    fn transport_error(&self, error: EventStreamError<BodyError>) -> ProviderError {
        match error {
            EventStreamError::Transport(BodyError::EventTooLarge) => {
                self.stream_error(BodyError::EventTooLarge.to_string())
            }
            EventStreamError::Transport(BodyError::Transport(e)) if e.is_timeout() => {
                ProviderError::Timeout {
                    url: self.url.clone(),
                    message: chain(&e),
                }
            }
            EventStreamError::Transport(BodyError::Transport(e)) => {
                self.stream_error(format!("connection broke off: {}", chain(&e)))
            }
            EventStreamError::Utf8(e) => self.stream_error(format!("body is not UTF-8: {e}")),
            EventStreamError::Parser(e) => self.stream_error(format!("malformed SSE: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_keep_their_wording() {
        let bad = serde_json::from_str::<Value>("{").unwrap_err();
        let reason = bad.to_string();
        assert_eq!(
            DecodeError::not_json(bad, "{").to_string(),
            format!("data line is not JSON ({reason}): {{")
        );
        assert_eq!(
            DecodeError::NotObject("[1]".into()).to_string(),
            "data line is not a JSON object: [1]"
        );
        assert_eq!(
            DecodeError::Reported("overloaded".into()).to_string(),
            "provider reported an error: overloaded"
        );
        assert_eq!(
            DecodeError::Ended("message_stop").to_string(),
            "stream ended unexpectedly (no message_stop)"
        );
    }

    #[test]
    fn connect_timeout_secs_from_config_toml_is_the_endpoints_connect_deadline() {
        // A config.toml's `[[providers]]` table, as the root crate's Config
        // reads it (each entry is a ProviderConfig).
        #[derive(serde::Deserialize)]
        struct Providers {
            providers: Vec<ProviderConfig>,
        }
        let config: Providers = toml::from_str(
            "[[providers]]\nname = \"slow\"\nkind = \"openai\"\n\
             base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nconnect_timeout_secs = 17\n",
        )
        .unwrap();
        let endpoint = Endpoint::from_config(&config.providers[0]).unwrap();
        assert_eq!(endpoint.connect_timeout, Duration::from_secs(17));
        let defaulted = Endpoint::from_config(&ProviderConfig::default_local()).unwrap();
        assert_eq!(defaulted.connect_timeout, Duration::from_secs(5));
    }

    #[test]
    fn error_message_prefers_the_providers_own_words() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key","type":"auth"}}"#, "x"),
            "bad key"
        );
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                "x"
            ),
            "Overloaded"
        );
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#, "x"),
            "model not found"
        );
        assert_eq!(error_message("  plain text\n", "x"), "plain text");
        assert_eq!(error_message("", "Not Found"), "Not Found");
    }

    #[test]
    fn snippet_cuts_on_characters() {
        assert_eq!(snippet("héllo", 2), "hé…");
        assert_eq!(snippet("hé", 2), "hé");
    }
}
