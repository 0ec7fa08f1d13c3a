//! Provider and model for one session, chosen from the editor.
//!
//! `_passepartout/providers` lists the configured providers (after the
//! editor's own settings and keys from `initialize`), each with the models
//! its server offers when it answers `GET …/models` within
//! [`MODELS_TIMEOUT`]; `_passepartout/session/configure` gives one session a
//! cascade of its own — a provider, its model replaced, its output limit
//! set — for its next turns. Nothing is written to the configuration file
//! and the daemon keeps running: other sessions are untouched.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::llm::cascade::Cascade;
use crate::llm::config::{build_cascade, ProviderConfig, ProviderKind};

/// How long one provider may take to list its models.
pub const MODELS_TIMEOUT: Duration = Duration::from_secs(3);

/// At most this many models are listed per provider.
pub const MAX_MODELS: usize = 500;

/// `_passepartout/session/configure` params.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigureParams {
    pub session_id: String,
    /// A provider name from `_passepartout/providers`; default: the first.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model to ask for; default: the provider's configured model.
    #[serde(default)]
    pub model: Option<String>,
    /// The output token limit; default: the provider's.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigureError {
    #[error("unknown provider `{name}`; configured: {known}")]
    UnknownProvider { name: String, known: String },
    #[error("the model name is empty")]
    EmptyModel,
    #[error("cannot use this provider: {0}")]
    Build(String),
}

/// The providers a session may choose from: the editor's list when it
/// sent one, else the configuration's, with the editor's API keys.
pub fn effective_providers(
    configured: &[ProviderConfig],
    settings: &crate::protocol::ClientSettings,
) -> Vec<ProviderConfig> {
    let mut providers = settings
        .providers
        .clone()
        .unwrap_or_else(|| configured.to_vec());
    for p in &mut providers {
        if let Some(key) = settings.api_keys.get(&p.name) {
            p.api_key = Some(key.clone());
        }
    }
    providers
}

/// A cascade of one provider for a session, and its label for the status.
pub fn configure(
    providers: &[ProviderConfig],
    params: &ConfigureParams,
) -> Result<(Cascade, ProviderConfig), ConfigureError> {
    let chosen = match &params.provider {
        Some(name) => providers.iter().find(|p| &p.name == name).ok_or_else(|| {
            ConfigureError::UnknownProvider {
                name: name.clone(),
                known: names(providers),
            }
        })?,
        None => providers
            .first()
            .ok_or_else(|| ConfigureError::UnknownProvider {
                name: String::new(),
                known: "none".into(),
            })?,
    };
    let mut chosen = chosen.clone();
    if let Some(model) = &params.model {
        if model.trim().is_empty() {
            return Err(ConfigureError::EmptyModel);
        }
        chosen.model = model.trim().to_string();
    }
    if let Some(max) = params.max_tokens {
        chosen.max_tokens = Some(max);
    }
    let cascade = build_cascade(std::slice::from_ref(&chosen))
        .map_err(|e| ConfigureError::Build(e.to_string()))?;
    Ok((cascade, chosen))
}

fn names(providers: &[ProviderConfig]) -> String {
    if providers.is_empty() {
        return "none".into();
    }
    providers
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `_passepartout/providers` answer: every provider, with its models
/// when its server lists them in time (asked all at once).
pub async fn list(providers: &[ProviderConfig]) -> Value {
    let lookups = providers.iter().map(models_of);
    let models = futures::future::join_all(lookups).await;
    let entries: Vec<Value> = providers
        .iter()
        .zip(models)
        .map(|(p, found)| {
            let (models, error) = match found {
                Ok(m) => (m, None),
                Err(e) => (Vec::new(), Some(e)),
            };
            json!({
                "name": p.name,
                "kind": match p.kind { ProviderKind::OpenAi => "openai", ProviderKind::Anthropic => "anthropic" },
                "baseUrl": p.effective_base_url(),
                "model": p.model,
                "maxTokens": p.max_tokens,
                "models": models,
                "modelsError": error,
            })
        })
        .collect();
    json!({ "providers": entries })
}

/// Ask a provider's server for its models; a clear reason when it cannot.
async fn models_of(p: &ProviderConfig) -> Result<Vec<String>, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(MODELS_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let base = p.effective_base_url();
    let (url, request) = match p.kind {
        ProviderKind::OpenAi => {
            let url = format!("{base}/models");
            let mut r = client.get(&url);
            if let Some(key) = p.resolved_key() {
                r = r.bearer_auth(key);
            }
            (url, r)
        }
        ProviderKind::Anthropic => {
            let url = format!("{base}/v1/models");
            let mut r = client.get(&url).header("anthropic-version", "2023-06-01");
            if let Some(key) = p.resolved_key() {
                r = r.header("x-api-key", key);
            }
            (url, r)
        }
    };
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url}: HTTP {}", response.status()));
    }
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("{url}: not a model list: {e}"))?;
    Ok(model_ids(&body))
}

/// The ids in an OpenAI or Anthropic model list (`{"data": [{"id": …}]}`).
fn model_ids(body: &Value) -> Vec<String> {
    body.get("data")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str))
                .take(MAX_MODELS)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, model: &str) -> ProviderConfig {
        ProviderConfig::from_url("http://127.0.0.1:9/v1", model).renamed(name)
    }

    trait Renamed {
        fn renamed(self, name: &str) -> Self;
    }
    impl Renamed for ProviderConfig {
        fn renamed(mut self, name: &str) -> Self {
            self.name = name.into();
            self
        }
    }

    fn params(provider: Option<&str>, model: Option<&str>) -> ConfigureParams {
        ConfigureParams {
            session_id: "s1".into(),
            provider: provider.map(str::to_string),
            model: model.map(str::to_string),
            max_tokens: Some(64),
        }
    }

    #[test]
    fn configure_picks_the_named_provider_and_replaces_its_model() {
        let providers = [provider("a", "m1"), provider("b", "m2")];
        let (_, chosen) = configure(&providers, &params(Some("b"), Some("big"))).unwrap();
        assert_eq!(
            (
                chosen.name.as_str(),
                chosen.model.as_str(),
                chosen.max_tokens
            ),
            ("b", "big", Some(64))
        );
        let (_, first) = configure(&providers, &params(None, None)).unwrap();
        assert_eq!((first.name.as_str(), first.model.as_str()), ("a", "m1"));
    }

    #[test]
    fn configure_refuses_unknown_providers_and_empty_models() {
        let providers = [provider("a", "m1")];
        let e = configure(&providers, &params(Some("zz"), None)).unwrap_err();
        assert_eq!(e.to_string(), "unknown provider `zz`; configured: a");
        let e = configure(&providers, &params(None, Some("  "))).unwrap_err();
        assert_eq!(e.to_string(), "the model name is empty");
    }

    #[test]
    fn model_ids_read_both_wire_formats() {
        let body: Value =
            serde_json::from_str(r#"{"object":"list","data":[{"id":"a"},{"id":"b","x":1},{}]}"#)
                .unwrap();
        assert_eq!(model_ids(&body), vec!["a", "b"]);
        assert!(model_ids(&json!({"error": "no"})).is_empty());
    }
}
