//! Provider configuration: one `[[providers]]` entry of the config file,
//! turned into a live [`Provider`] and, for a list of them, a [`Cascade`].
//!
//! Every field but the name, kind, URL and model has a default, so the
//! smallest useful entry is four lines:
//!
//! ```toml
//! [[providers]]
//! name = "ollama"
//! kind = "openai"
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "llama3.2"
//! ```
//!
//! API keys are read from the entry (`api_key`) or, better, from the
//! environment variable it names (`api_key_env`). `Debug` masks them, so a
//! configuration can be logged whole.

use std::sync::Arc;

use super::anthropic::AnthropicProvider;
use super::cascade::{Cascade, RetryPolicy};
use super::openai::OpenAiProvider;
use super::{Provider, ProviderError};

pub use crate::protocol::{ProviderConfig, ProviderKind};

/// What the daemon does with a provider entry beyond its wire form: the
/// entry is a protocol type (the editor sends it), its behaviour lives here.
pub trait ProviderConfigExt {
    /// Ollama's OpenAI-compatible endpoint on this machine with `llama3.2`.
    /// Not a default any more: with no provider configured, one is
    /// discovered instead ([`super::discovery`]).
    fn default_local() -> Self;

    /// An entry for a bare URL and model, as given by `--provider-url` and
    /// `--model`: Anthropic when the host is `api.anthropic.com` or the URL
    /// ends in `/v1/messages`, OpenAI-compatible otherwise; named after the
    /// host (after the text given, when it names none).
    fn from_url(base_url: &str, model: &str) -> Self;

    /// `base_url`, or the kind's default when it is empty.
    fn effective_base_url(&self) -> String;

    /// The key to send: `api_key`, else the (non-empty) value of the variable
    /// named by `api_key_env`. `None` when neither gives one; local servers
    /// need no key.
    fn resolved_key(&self) -> Option<String>;

    /// Like [`resolved_key`](Self::resolved_key), but naming a variable that
    /// is unset or empty is an error rather than a silent keyless request:
    /// the provider would only answer 401 later, further from the cause.
    fn required_key(&self) -> Result<Option<String>, ProviderError>;

    /// What to check after a 401 or 403: the key variable and where the
    /// key sent was read, or that none was sent and how to give one.
    fn key_hint(&self) -> String;

    /// Builds the provider this entry describes.
    fn build(&self) -> Result<Arc<dyn Provider>, ProviderError>;

    /// This entry's retry policy with the default backoff.
    fn retry_policy(&self) -> RetryPolicy;
}

impl ProviderConfigExt for ProviderConfig {
    fn default_local() -> Self {
        Self::new(
            "ollama",
            ProviderKind::OpenAi,
            ProviderKind::OpenAi.default_base_url(),
            "llama3.2",
        )
    }

    fn from_url(base_url: &str, model: &str) -> Self {
        let trimmed = base_url.trim().trim_end_matches('/');
        let host = reqwest::Url::parse(trimmed)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
            .unwrap_or_else(|| trimmed.to_string());
        let (kind, base) = if let Some(base) = trimmed.strip_suffix("/v1/messages") {
            (ProviderKind::Anthropic, base)
        } else if host == "api.anthropic.com" {
            (ProviderKind::Anthropic, trimmed)
        } else {
            (ProviderKind::OpenAi, trimmed)
        };
        Self::new(host, kind, base, model)
    }

    fn effective_base_url(&self) -> String {
        let url = self.base_url.trim();
        if url.is_empty() {
            self.kind.default_base_url().to_string()
        } else {
            url.trim_end_matches('/').to_string()
        }
    }

    fn resolved_key(&self) -> Option<String> {
        if let Some(key) = self.api_key.as_ref().filter(|k| !k.is_empty()) {
            return Some(key.clone());
        }
        let var = self.api_key_env.as_ref()?;
        std::env::var(var)
            .ok()
            .map(|key| key.trim().to_string())
            .filter(|key| !key.is_empty())
    }

    fn required_key(&self) -> Result<Option<String>, ProviderError> {
        match (self.resolved_key(), &self.api_key_env) {
            (None, Some(var)) => Err(ProviderError::Config(format!(
                "provider {}: environment variable {var} (its api_key_env) is not set",
                self.name
            ))),
            (key, _) => Ok(key),
        }
    }

    fn key_hint(&self) -> String {
        if self.api_key.as_ref().is_some_and(|k| !k.is_empty()) {
            let origin = self
                .key_origin
                .clone()
                .unwrap_or_else(|| format!("`api_key` of provider {}", self.name));
            return format!("check the API key: it was read from {origin}");
        }
        match &self.api_key_env {
            Some(var) => format!(
                "check the API key: it was read from the environment variable {var} \
                 (api_key_env of provider {}); is it the key for {}?",
                self.name,
                self.effective_base_url()
            ),
            None => format!(
                "no API key was sent: set api_key_env = \"VARIABLE\" (the variable holding the \
                 key) in the [[providers]] entry of {} ({}), or set PASSEPARTOUT_API_KEY",
                self.name,
                crate::paths::config_file_shown()
            ),
        }
    }

    fn build(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        Ok(match self.kind {
            ProviderKind::OpenAi => Arc::new(OpenAiProvider::new(self)?),
            ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(self)?),
            ProviderKind::OpenAiResponses => {
                Arc::new(super::responses::ResponsesProvider::new(self)?)
            }
        })
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            ..RetryPolicy::default()
        }
    }
}

/// Builds the cascade for `configs`, in order. Any entry that cannot be built
/// (bad URL, missing key variable) fails the whole call with its reason: a
/// half-built cascade would silently skip a provider the user asked for.
pub fn build_cascade(configs: &[ProviderConfig]) -> Result<Cascade, ProviderError> {
    let mut cascade = Cascade::new();
    for config in configs {
        cascade = cascade.with_provider(config.build()?, config.retry_policy());
    }
    Ok(cascade)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn minimal_toml_entry_takes_the_defaults() {
        #[derive(Deserialize)]
        struct File {
            providers: Vec<ProviderConfig>,
        }
        let file: File = toml::from_str(
            r#"
            [[providers]]
            name = "ollama"
            kind = "openai"
            base_url = "http://127.0.0.1:11434/v1"
            model = "qwen3"

            [[providers]]
            name = "claude"
            kind = "anthropic"
            model = "claude-sonnet-4-5"
            api_key_env = "ANTHROPIC_API_KEY"
            max_retries = 0
            headers = { "x-proxy" = "yes" }
            "#,
        )
        .unwrap();
        let ollama = &file.providers[0];
        assert_eq!(ollama.kind, ProviderKind::OpenAi);
        assert!(ollama.native_tools);
        assert_eq!(ollama.connect_timeout_secs, 5);
        assert_eq!(ollama.idle_timeout_secs, 120);
        assert_eq!(ollama.max_retries, 2);
        assert_eq!(ollama.max_tokens, None);
        let claude = &file.providers[1];
        assert_eq!(claude.kind, ProviderKind::Anthropic);
        assert_eq!(claude.effective_base_url(), "https://api.anthropic.com");
        assert_eq!(claude.max_retries, 0);
        assert_eq!(
            claude.headers.get("x-proxy").map(String::as_str),
            Some("yes")
        );
    }

    #[test]
    fn from_url_guesses_the_kind() {
        let local = ProviderConfig::from_url("http://127.0.0.1:8080/v1/", "qwen3");
        assert_eq!(local.kind, ProviderKind::OpenAi);
        assert_eq!(local.name, "127.0.0.1");
        assert_eq!(local.effective_base_url(), "http://127.0.0.1:8080/v1");
        assert_eq!(local.model, "qwen3");
        let claude = ProviderConfig::from_url("https://api.anthropic.com", "claude-x");
        assert_eq!(claude.kind, ProviderKind::Anthropic);
        let proxy = ProviderConfig::from_url("http://10.0.0.2:9000/v1/messages", "m");
        assert_eq!(proxy.kind, ProviderKind::Anthropic);
        assert_eq!(proxy.effective_base_url(), "http://10.0.0.2:9000");
    }

    #[test]
    fn debug_masks_keys_and_header_values() {
        let mut config = ProviderConfig::default_local();
        config.api_key = Some("sk-secret-123".into());
        config
            .headers
            .insert("authorization".into(), "Bearer sk-other-456".into());
        let printed = format!("{config:?}");
        assert!(printed.contains(r#"api_key: Some("***")"#), "{printed}");
        assert!(!printed.contains("secret"), "{printed}");
        assert!(!printed.contains("sk-other"), "{printed}");
        assert!(printed.contains("authorization"), "{printed}");
    }

    #[test]
    fn key_comes_from_the_named_variable() {
        let mut config = ProviderConfig::default_local();
        assert_eq!(config.resolved_key(), None);
        assert_eq!(config.required_key().unwrap(), None);
        config.api_key_env = Some("PASSEPARTOUT_TEST_KEY_SURELY_UNSET".into());
        assert_eq!(config.resolved_key(), None);
        let err = config.required_key().unwrap_err();
        assert!(
            err.to_string()
                .contains("PASSEPARTOUT_TEST_KEY_SURELY_UNSET"),
            "{err}"
        );
        assert!(matches!(config.build(), Err(ProviderError::Config(_))));
        // PATH is set wherever cargo runs.
        config.api_key_env = Some("PATH".into());
        assert_eq!(config.resolved_key(), std::env::var("PATH").ok());
        config.api_key = Some("direct".into());
        assert_eq!(config.resolved_key().as_deref(), Some("direct"));
    }

    #[test]
    fn build_rejects_a_bad_url_and_labels_with_the_url() {
        let mut config = ProviderConfig::default_local();
        config.base_url = "127.0.0.1:11434".into();
        assert!(matches!(config.build(), Err(ProviderError::Config(_))));
        config.base_url = "http://127.0.0.1:11434/v1/".into();
        let provider = config.build().unwrap();
        assert_eq!(provider.label(), "ollama (http://127.0.0.1:11434/v1)");
        assert_eq!(provider.model(), "llama3.2");
    }
}
