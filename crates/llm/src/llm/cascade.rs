//! The provider cascade: try each configured provider in order until one
//! answers, retrying transient failures with backoff along the way.
//!
//! A provider counts as having answered only once its stream has yielded a
//! first event: a server that accepts the request and then drops the
//! connection at once is a failed attempt like a refused connection, so the
//! next provider gets its turn. After the first event the stream belongs to
//! the caller, errors included — replaying half an answer from another model
//! would be worse than reporting the break.
//!
//! A provider that timed out (no answer within its idle timeout) is not
//! retried at the same address: a server that sat silent for the whole
//! timeout will most likely do it again, and three silent tries made a
//! hung server cost the person three timeouts before the next provider or
//! an error. It moves straight on to the next provider.
//!
//! A non-retryable failure (a 4xx other than 429, a configuration error)
//! stops the cascade at once: a bad key or a malformed request will not get
//! better at the next address, and the provider's own message is what the
//! user needs to read.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{ChatRequest, EventStream, Provider, ProviderError};

/// How often and how patiently one provider is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt before moving to the next provider.
    pub max_retries: u32,
    /// The wait before the first retry; each later retry doubles it.
    pub base_backoff: Duration,
    /// The longest wait, also the cap on a server's `Retry-After`.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), honouring the
    /// server's `Retry-After` seconds up to the cap.
    pub fn delay(&self, retry: u32, retry_after: Option<u64>) -> Duration {
        let doubled = self
            .base_backoff
            .saturating_mul(2u32.saturating_pow(retry.min(16)));
        let wanted = match retry_after {
            Some(seconds) => doubled.max(Duration::from_secs(seconds)),
            None => doubled,
        };
        wanted.min(self.max_backoff)
    }
}

/// A provider that answered: the stream starts with its first event.
pub struct Answered {
    /// The provider's label (name and base URL).
    pub provider: String,
    /// Whether this provider takes tools natively.
    pub native_tools: bool,
    pub events: EventStream,
}

impl fmt::Debug for Answered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answered")
            .field("provider", &self.provider)
            .field("native_tools", &self.native_tools)
            .finish_non_exhaustive()
    }
}

/// Why no provider answered.
#[derive(Debug, thiserror::Error)]
pub enum CascadeError {
    /// The turn was cancelled (while waiting, streaming the first event, or
    /// sleeping between retries).
    #[error("cancelled")]
    Cancelled,
    /// A provider refused the request in a way no retry or other provider
    /// would fix (bad key, unknown model, malformed request).
    #[error("{provider} refused the request: {error}")]
    Rejected {
        provider: String,
        error: ProviderError,
    },
    /// Every provider was tried and none answered.
    #[error("{}", all_failed_message(.attempts))]
    AllFailed {
        /// Each provider in order: its label and how its last try failed.
        attempts: Vec<(String, ProviderError)>,
    },
}

/// How to point passepartout at a model, repeated wherever it gives up.
fn configure_hint() -> String {
    format!(
        "To use another model server, pass --provider-url URL and \
--model NAME, set PASSEPARTOUT_PROVIDER_URL and PASSEPARTOUT_MODEL, or add a \
[[providers]] table (name, kind = \"openai\" or \"anthropic\", base_url, model) to \
{}.",
        crate::paths::config_file_shown()
    )
}

fn all_failed_message(attempts: &[(String, ProviderError)]) -> String {
    if attempts.is_empty() {
        return format!("no model provider is configured. {}", configure_hint());
    }
    let mut text = String::from("no model provider answered. Tried:");
    for (label, error) in attempts {
        text.push_str(&format!("\n  - {label}: {error}"));
    }
    text.push('\n');
    text.push_str(&configure_hint());
    text
}

struct Entry {
    provider: Arc<dyn Provider>,
    policy: RetryPolicy,
}

/// An ordered list of providers, each with its retry policy.
#[derive(Default)]
pub struct Cascade {
    entries: Vec<Entry>,
}

impl fmt::Debug for Cascade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| e.provider.label()))
            .finish()
    }
}

impl Cascade {
    /// An empty cascade (every request fails with a configuration hint).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `provider`, tried after those already present.
    pub fn with_provider(mut self, provider: Arc<dyn Provider>, policy: RetryPolicy) -> Self {
        self.entries.push(Entry { provider, policy });
        self
    }

    /// Sets the base backoff of every provider (tests use a few ms).
    pub fn with_backoff(mut self, base: Duration) -> Self {
        for entry in &mut self.entries {
            entry.policy.base_backoff = base;
        }
        self
    }

    /// The providers, in the order they are tried.
    pub fn providers(&self) -> impl Iterator<Item = &Arc<dyn Provider>> {
        self.entries.iter().map(|e| &e.provider)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Streams `request` from the first provider that answers.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<Answered, CascadeError> {
        let mut attempts = Vec::new();
        for (position, entry) in self.entries.iter().enumerate() {
            let label = entry.provider.label();
            let mut retry = 0;
            loop {
                // A model without function calling gets the text tool protocol.
                let rewritten;
                let request = if entry.provider.native_tools() {
                    request
                } else {
                    rewritten = crate::llm::text_protocol::to_text_request(request);
                    &rewritten
                };
                let error = match attempt(entry.provider.as_ref(), request, &cancel).await {
                    Ok(events) => {
                        if position > 0 || retry > 0 {
                            tracing::info!(provider = %label, "provider answered after failover");
                        }
                        return Ok(Answered {
                            provider: label,
                            native_tools: entry.provider.native_tools(),
                            events,
                        });
                    }
                    Err(error) => error,
                };
                if matches!(error, ProviderError::Cancelled) || cancel.is_cancelled() {
                    return Err(CascadeError::Cancelled);
                }
                if !error.is_retryable() {
                    tracing::warn!(provider = %label, %error, "provider refused the request");
                    return Err(CascadeError::Rejected {
                        provider: label,
                        error,
                    });
                }
                let retry_after = match &error {
                    ProviderError::Http { retry_after, .. } => *retry_after,
                    _ => None,
                };
                let silent = matches!(error, ProviderError::Timeout { .. });
                if retry >= entry.policy.max_retries || silent {
                    tracing::warn!(
                        provider = %label,
                        %error,
                        tries = retry + 1,
                        "provider failed; moving to the next one"
                    );
                    // Only the last failure is kept: retries of one address
                    // usually fail the same way, and the report stays short.
                    attempts.push((label, error));
                    break;
                }
                tracing::debug!(provider = %label, %error, "provider attempt failed");
                let delay = entry.policy.delay(retry, retry_after);
                tracing::info!(
                    provider = %label,
                    retry = retry + 1,
                    delay_ms = delay.as_millis() as u64,
                    "retrying provider"
                );
                tokio::select! {
                    _ = cancel.cancelled() => return Err(CascadeError::Cancelled),
                    _ = tokio::time::sleep(delay) => {}
                }
                retry += 1;
            }
        }
        Err(CascadeError::AllFailed { attempts })
    }
}

/// One try: the request is accepted *and* the first event arrives.
async fn attempt(
    provider: &dyn Provider,
    request: &ChatRequest,
    cancel: &CancellationToken,
) -> Result<EventStream, ProviderError> {
    let mut events = provider.stream(request, cancel.clone()).await?;
    let first = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
        first = events.next() => first,
    };
    match first {
        Some(Ok(event)) => {
            let replay = futures::stream::once(async move { Ok(event) });
            Ok(Box::pin(replay.chain(events)))
        }
        Some(Err(error)) => Err(error),
        None => Err(ProviderError::Stream {
            url: provider.label(),
            message: "the stream ended before any event".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(0, None), Duration::from_millis(200));
        assert_eq!(policy.delay(1, None), Duration::from_millis(400));
        assert_eq!(policy.delay(2, None), Duration::from_millis(800));
        assert_eq!(policy.delay(10, None), Duration::from_secs(5));
        assert_eq!(policy.delay(0, Some(2)), Duration::from_secs(2));
        assert_eq!(policy.delay(0, Some(3600)), Duration::from_secs(5));
    }

    #[test]
    fn all_failed_names_each_address_and_the_ways_to_configure() {
        let error = CascadeError::AllFailed {
            attempts: vec![(
                "ollama (http://127.0.0.1:11434/v1)".into(),
                ProviderError::Connect {
                    url: "http://127.0.0.1:11434/v1/chat/completions".into(),
                    message: "connection refused".into(),
                },
            )],
        };
        let text = error.to_string();
        assert!(
            text.contains("ollama (http://127.0.0.1:11434/v1): cannot connect"),
            "{text}"
        );
        assert!(text.contains("connection refused"), "{text}");
        for hint in [
            "--provider-url",
            "--model",
            "PASSEPARTOUT_PROVIDER_URL",
            "PASSEPARTOUT_MODEL",
            "[[providers]]",
            &crate::paths::config_file_shown(),
        ] {
            assert!(text.contains(hint), "missing {hint}: {text}");
        }
    }
}
