//! Provider and model for one session, chosen from the editor.
//!
//! `_passepartout/providers` lists the configured providers (after the
//! editor's own settings and keys from `initialize`), each with the models
//! its server offers when it answers `GET …/models` within
//! [`MODELS_TIMEOUT`]; `_passepartout/session/configure` gives one session a
//! cascade of its own — a provider, its model replaced, its output limit
//! set — for its next turns. With no provider configured, the list is the
//! one [`Discovery`] found. Nothing is written to the configuration file
//! and the daemon keeps running: other sessions are untouched.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::llm::cascade::Cascade;
use crate::llm::config::{build_cascade, ProviderConfig, ProviderKind};
use crate::llm::discovery::{list_models, Discovery};
use crate::llm::ProviderConfigExt;

pub use crate::llm::discovery::{MAX_MODELS, MODELS_TIMEOUT};

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

/// The providers of the configuration, or, when it names none, the one
/// discovery found (none while nothing answers).
pub fn configured(config: &crate::config::Config) -> Vec<ProviderConfig> {
    if !config.providers.is_empty() {
        return config.providers.clone();
    }
    config
        .discovery
        .as_ref()
        .and_then(|d| d.current_config())
        .into_iter()
        .collect()
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
            p.key_origin = Some(format!(
                "the key the editor sent for {} in `initialize` (apiKeys, e.g. from auth-source)",
                p.name
            ));
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
/// when its server lists them in time (asked all at once). With
/// `discovery` (no provider configured, none sent by the editor), the
/// provider it found is marked `"discovered": true` and the whole report
/// is under `discovery`.
pub async fn list(providers: &[ProviderConfig], discovery: Option<&Discovery>) -> Value {
    let lookups = providers.iter().map(list_models);
    let models = futures::future::join_all(lookups).await;
    let entries: Vec<Value> = providers
        .iter()
        .zip(models)
        .map(|(p, found)| {
            let (models, error) = match found {
                Ok(m) => (m, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            json!({
                "name": p.name,
                "kind": match p.kind { ProviderKind::OpenAi => "openai", ProviderKind::Anthropic => "anthropic", ProviderKind::OpenAiResponses => "openai-responses" },
                "baseUrl": p.effective_base_url(),
                "model": p.model,
                "maxTokens": p.max_tokens,
                "models": models,
                "modelsError": error,
                "discovered": discovery.is_some(),
            })
        })
        .collect();
    match discovery {
        Some(d) => json!({ "providers": entries, "discovery": d.report().to_json() }),
        None => json!({ "providers": entries }),
    }
}

/// `passepartout providers`: the configured providers, or what discovery
/// found (every candidate, found or not and why), each with the models its
/// server lists. Exit status 1 when there is no provider at all.
pub async fn providers_command(
    config: &crate::config::Config,
    as_json: bool,
    out: &mut impl std::io::Write,
) -> i32 {
    let providers = configured(config);
    let discovery = match config.providers.is_empty() {
        true => config.discovery.as_deref(),
        false => None,
    };
    let mut listing = list(&providers, discovery).await;
    listing["configured"] = json!(!config.providers.is_empty());
    let limits = crate::sandbox::probe::limit_diagnostics(&config.sandbox_limits);
    listing["limits"] = json!(limits);
    let status = if providers.is_empty() { 1 } else { 0 };
    if as_json {
        let _ = writeln!(out, "{listing}");
        return status;
    }
    let _ = match discovery {
        None => writeln!(out, "configured providers, in cascade order:"),
        Some(_) => writeln!(
            out,
            "no provider configured; looked for one (the first found is used):"
        ),
    };
    if let Some(d) = discovery {
        for (c, o) in &d.report().entries {
            let found = matches!(o, crate::llm::discovery::Outcome::Found { .. });
            let _ = writeln!(
                out,
                "  {} {:<17} {:<32} {}",
                if found { "+" } else { "-" },
                c.name,
                c.base_url,
                o.describe()
            );
            if !found {
                let _ = writeln!(out, "      fix: {}", crate::llm::discovery::fix_for(c, o));
            }
        }
    }
    for p in listing["providers"].as_array().into_iter().flatten() {
        let text = |key: &str| p[key].as_str().unwrap_or("").to_string();
        let _ = writeln!(
            out,
            "{} {} ({}) at {}, model {}",
            if discovery.is_some() {
                "using"
            } else {
                "provider"
            },
            text("name"),
            text("kind"),
            text("baseUrl"),
            text("model")
        );
        let models: Vec<&str> = p["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let _ = match p["modelsError"].as_str() {
            Some(why) => writeln!(out, "    models: cannot list them ({why})"),
            None => writeln!(out, "    models: {}", models.join(", ")),
        };
    }
    if let (Some(_), true) = (discovery, providers.is_empty()) {
        let _ = writeln!(
            out,
            "none found: start one of the above, or set a key.\n{}",
            crate::llm::discovery::pin_hint()
        );
    }
    let text = crate::sandbox::probe::render_limit_diagnostics(&limits);
    let _ = out.write_all(text.as_bytes());
    status
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
}
