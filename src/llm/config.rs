//! TEMPORARY stub until the llm branch lands.
use super::cascade::Cascade;
use super::{Provider, ProviderError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    Openai,
    Anthropic,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "yes")]
    pub native_tools: bool,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}
fn yes() -> bool {
    true
}
impl ProviderConfig {
    pub fn default_local() -> Self {
        ProviderConfig {
            name: "ollama".into(),
            kind: ProviderKind::Openai,
            base_url: "http://127.0.0.1:11434/v1".into(),
            model: "llama3.2".into(),
            api_key: None,
            api_key_env: None,
            native_tools: true,
            headers: BTreeMap::new(),
        }
    }
    pub fn build(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        Err(ProviderError::Config("stub".into()))
    }
}
pub fn build_cascade(_configs: &[ProviderConfig]) -> Result<Cascade, ProviderError> {
    Ok(Cascade)
}
