//! Finding a model server when the configuration names none.
//!
//! A newcomer may run Ollama, a llama.cpp server, LM Studio or vLLM, or
//! have a hosted key in the environment. With no `[[providers]]` (and no
//! `--provider-url`), the daemon tries a fixed list of [`Candidate`]s, in
//! this order, and uses the first that answers:
//!
//! | name         | where                              | found when                      |
//! |--------------|------------------------------------|---------------------------------|
//! | `ollama`     | `http://127.0.0.1:11434/v1`        | `GET /v1/models` lists a model  |
//! | `llama.cpp`  | `http://127.0.0.1:8080/v1`         | idem (`llama-server` default)   |
//! | `lmstudio`   | `http://127.0.0.1:1234/v1`         | idem (LM Studio's server)       |
//! | `vllm`       | `http://127.0.0.1:8000/v1`         | idem (`vllm serve` default)     |
//! | `anthropic`  | `https://api.anthropic.com`        | `ANTHROPIC_API_KEY` is set      |
//! | `openai`     | `https://api.openai.com/v1`        | `OPENAI_API_KEY` is set         |
//! | `openrouter` | `https://openrouter.ai/api/v1`     | `OPENROUTER_API_KEY` is set     |
//! | `deepseek`   | `https://api.deepseek.com`         | `DEEPSEEK_API_KEY` is set       |
//!
//! Local servers are asked all at once, each with a [`CONNECT_TIMEOUT`] to
//! connect and the whole probe bounded by [`PROBE_BUDGET`]; local ones win
//! over hosted ones whatever answers first (local-first). A hosted key is
//! enough to offer its provider: discovery never sends a request to the
//! internet. The model of a local server is the first it lists that is not
//! an embedding, reranking or speech model ([`pick_model`]); a hosted
//! provider gets the default model of its row in [`candidates`].
//!
//! The base URLs can be redirected with [`HOSTS_VAR`]
//! (`PASSEPARTOUT_DISCOVERY_HOSTS="ollama=http://10.0.0.2:11434/v1,vllm="`;
//! an empty URL drops that candidate): a hook for tests and for a server on
//! another machine, not a substitute for `[[providers]]`.
//!
//! One [`Discovery`] lives as long as the daemon and caches its result. Its
//! [`provider`](Discovery::provider) is what the cascade holds: when the
//! server it found stops answering, or nothing was found yet, it probes
//! again — at most once per [`REPROBE_INTERVAL`] and switching provider at
//! most [`MAX_SWITCHES`] times per daemon.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::config::{ProviderConfig, ProviderKind};
use super::{ChatRequest, EventStream, Provider, ProviderError};
use crate::llm::ProviderConfigExt;
use crate::util::sync::lock;

/// The longest wait for a local server to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// The longest the whole local probe may take (every server at once).
pub const PROBE_BUDGET: Duration = Duration::from_millis(1500);

/// At most one probe per this interval, however many prompts fail.
pub const REPROBE_INTERVAL: Duration = Duration::from_secs(5);

/// A daemon switches to a newly found server at most this many times.
pub const MAX_SWITCHES: usize = 8;

/// How long one provider may take to list its models (`passepartout
/// providers`, `_passepartout/providers`).
pub const MODELS_TIMEOUT: Duration = Duration::from_secs(3);

/// At most this many models are kept per provider.
pub const MAX_MODELS: usize = 500;

/// The environment variable redirecting candidates: `name=url` pairs
/// separated by commas; an empty URL drops the candidate.
pub const HOSTS_VAR: &str = "PASSEPARTOUT_DISCOVERY_HOSTS";

/// How to stop guessing: the last lines of every "nothing found".
pub fn pin_hint() -> String {
    format!(
        "Or pin one in {}:{PIN_TABLE}",
        crate::paths::config_file_shown()
    )
}

/// The table [`pin_hint`] shows.
const PIN_TABLE: &str = "
  [[providers]]
  name = \"local\"
  kind = \"openai\"
  base_url = \"http://127.0.0.1:8080/v1\"
  model = \"MODEL\"";

/// Model ids containing one of these are not chat models.
const NOT_CHAT: &[&str] = &["embed", "rerank", "whisper", "tts", "moderation", "dall-e"];

/// Why the candidate list could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{HOSTS_VAR}: `{0}` is not name=url (names: {names})", names = candidate_names())]
    BadOverride(String),
    #[error("{HOSTS_VAR}: no candidate is named `{0}` (names: {names})", names = candidate_names())]
    UnknownCandidate(String),
}

/// One place a model server may be found.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The provider name it gets when chosen, e.g. `llama.cpp`.
    pub name: String,
    /// What a person calls it, e.g. `llama.cpp server`.
    pub title: String,
    pub kind: ProviderKind,
    pub base_url: String,
    /// For a hosted provider: the variable holding its key.
    pub key_env: Option<String>,
    /// For a hosted provider: the model used unless `--model` says otherwise.
    pub default_model: Option<String>,
    /// One line telling a person how to make this candidate answer.
    pub fix: String,
}

/// The default candidates, in the order they are preferred. Hosted default
/// models were chosen in November 2026; `passepartout providers` lists what
/// each offers today.
pub fn default_candidates() -> Vec<Candidate> {
    let local = |name: &str, title: &str, url: &str, fix: &str| Candidate {
        name: name.into(),
        title: title.into(),
        kind: ProviderKind::OpenAi,
        base_url: url.into(),
        key_env: None,
        default_model: None,
        fix: fix.into(),
    };
    let hosted = |name: &str, title: &str, kind, url: &str, var: &str, model: &str| Candidate {
        name: name.into(),
        title: title.into(),
        kind,
        base_url: url.into(),
        key_env: Some(var.into()),
        default_model: Some(model.into()),
        fix: format!("export {var}=…"),
    };
    vec![
        local(
            "ollama",
            "Ollama",
            "http://127.0.0.1:11434/v1",
            "ollama serve   (and `ollama pull llama3.2` for a model)",
        ),
        local(
            "llama.cpp",
            "llama.cpp server",
            "http://127.0.0.1:8080/v1",
            "llama-server -m model.gguf --port 8080",
        ),
        local(
            "lmstudio",
            "LM Studio",
            "http://127.0.0.1:1234/v1",
            "lms server start   (or LM Studio → Developer → Start Server)",
        ),
        local(
            "vllm",
            "vLLM",
            "http://127.0.0.1:8000/v1",
            "vllm serve MODEL   (listens on port 8000)",
        ),
        hosted(
            "anthropic",
            "Anthropic",
            ProviderKind::Anthropic,
            "https://api.anthropic.com",
            "ANTHROPIC_API_KEY",
            "claude-sonnet-4-5",
        ),
        hosted(
            "openai",
            "OpenAI",
            ProviderKind::OpenAi,
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
            "gpt-4.1-mini",
        ),
        hosted(
            "openrouter",
            "OpenRouter",
            ProviderKind::OpenAi,
            "https://openrouter.ai/api/v1",
            "OPENROUTER_API_KEY",
            "openrouter/auto",
        ),
        hosted(
            "deepseek",
            "DeepSeek",
            ProviderKind::OpenAi,
            "https://api.deepseek.com",
            "DEEPSEEK_API_KEY",
            "deepseek-chat",
        ),
    ]
}

fn candidate_names() -> String {
    default_candidates()
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidates, redirected by `overrides` (the value of [`HOSTS_VAR`]).
pub fn candidates(overrides: Option<&str>) -> Result<Vec<Candidate>, DiscoveryError> {
    let mut list = default_candidates();
    let Some(text) = overrides else {
        return Ok(list);
    };
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = pair
            .split_once('=')
            .ok_or_else(|| DiscoveryError::BadOverride(pair.to_string()))?;
        let (name, url) = (name.trim(), url.trim());
        let position = list
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| DiscoveryError::UnknownCandidate(name.to_string()))?;
        if url.is_empty() {
            list.remove(position);
        } else {
            list[position].base_url = url.trim_end_matches('/').to_string();
        }
    }
    Ok(list)
}

/// The candidates as the process environment redirects them.
pub fn candidates_from_env() -> Result<Vec<Candidate>, DiscoveryError> {
    candidates(std::env::var(HOSTS_VAR).ok().as_deref())
}

/// What one candidate said.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum Outcome {
    /// It answers; `model` is the one that would be used.
    Found { model: String, models: Vec<String> },
    /// The server answers but lists no model.
    NoModels,
    /// A hosted provider whose key variable is unset or empty.
    NoKey,
    /// Nothing accepted the connection (usually: not running).
    Unreachable { reason: String },
    /// No answer within the probe's time.
    TimedOut,
    /// An HTTP error status.
    Http {
        #[serde(rename = "httpStatus")]
        status: u16,
    },
    /// Something answered, but not with a model list.
    NotAModelList { reason: String },
    /// `/v1/models` did not answer with a model list (`v1` says how), but
    /// the server's own endpoint did: it runs without the OpenAI-compatible
    /// API passepartout speaks, so it is not used.
    Running {
        endpoint: String,
        models: Vec<String>,
        v1: String,
    },
}

impl Outcome {
    /// A few words for a person.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Found { model, models } if models.is_empty() => {
                format!("found (key set), model {model}")
            }
            Outcome::Found { model, models } => {
                format!("found, {} model(s), using {model}", models.len())
            }
            Outcome::NoModels => "answers but lists no model".into(),
            Outcome::NoKey => "no key in the environment".into(),
            Outcome::Unreachable { reason } => format!("not reachable ({reason})"),
            Outcome::TimedOut => format!("no answer within {} ms", PROBE_BUDGET.as_millis()),
            Outcome::Http { status } => format!("answered HTTP {status}"),
            Outcome::NotAModelList { reason } => format!("not a model list ({reason})"),
            Outcome::Running {
                endpoint,
                models,
                v1,
            } => {
                let listed = match models.len() {
                    0 => "answers".to_string(),
                    n => format!("lists {n} model(s): {}", models.join(", ")),
                };
                format!("running ({endpoint} {listed}), but /v1/models {v1}: not used")
            }
        }
    }
}

/// Every candidate and what it said, in the order of preference.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub entries: Vec<(Candidate, Outcome)>,
}

/// The one-line fix for a candidate that was not used, given what it said.
/// A server that refuses us is running: starting it is not the fix.
pub fn fix_for(c: &Candidate, o: &Outcome) -> String {
    match o {
        Outcome::Http { status: 401 | 403 } => format!(
            "it is running but wants an API key: add it as a [[providers]] entry with \
             base_url = \"{}\" and api_key_env = \"VARIABLE\" (the variable holding the key)",
            c.base_url
        ),
        Outcome::Running { .. } => format!(
            "it is running without the OpenAI-compatible API at {}: update {} or turn that \
             API on, then `passepartout providers` again",
            c.base_url, c.title
        ),
        _ => c.fix.clone(),
    }
}

/// The endpoint of a known server kind's own API that says it runs, beside
/// `/v1/models`: Ollama's model list, llama.cpp's server properties.
fn native_endpoint(name: &str) -> Option<&'static str> {
    match name {
        "ollama" => Some("/api/tags"),
        "llama.cpp" => Some("/props"),
        _ => None,
    }
}

/// The models a native endpoint's answer names: Ollama's `models[].name`,
/// llama.cpp's `model_alias` or the file name of `model_path`.
fn native_models(body: &Value) -> Vec<String> {
    if let Some(models) = body.get("models").and_then(Value::as_array) {
        return models
            .iter()
            .filter_map(|m| m.get("name").and_then(Value::as_str))
            .take(MAX_MODELS)
            .map(str::to_string)
            .collect();
    }
    let alias = body.get("model_alias").and_then(Value::as_str);
    let path = body
        .get("model_path")
        .and_then(Value::as_str)
        .map(|p| p.rsplit('/').next().unwrap_or(p));
    alias.or(path).map(str::to_string).into_iter().collect()
}

/// When `/v1/models` gave `v1` (not a model list), ask the candidate's own
/// endpoint: an answer there means the server runs.
async fn native_outcome(client: &reqwest::Client, c: &Candidate, v1: Outcome) -> Outcome {
    let Some(endpoint) = native_endpoint(&c.name) else {
        return v1;
    };
    let root = c.base_url.trim_end_matches('/').trim_end_matches("/v1");
    let answered = match client
        .get(format!("{root}{endpoint}"))
        .timeout(PROBE_BUDGET)
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
        _ => None,
    };
    match answered {
        Some(body) if body.is_object() => Outcome::Running {
            endpoint: endpoint.to_string(),
            models: native_models(&body),
            v1: v1.describe(),
        },
        _ => v1,
    }
}

impl Report {
    /// The first candidate found, with its model.
    pub fn chosen(&self) -> Option<(&Candidate, &str)> {
        self.entries.iter().find_map(|(c, o)| match o {
            Outcome::Found { model, .. } => Some((c, model.as_str())),
            _ => None,
        })
    }

    /// The provider entry for the chosen candidate.
    pub fn chosen_config(&self) -> Option<ProviderConfig> {
        self.chosen().map(|(c, model)| config_for(c, model))
    }

    /// What `run` prints, and `initialize` reports, once something is found.
    pub fn announcement(&self) -> Option<String> {
        self.chosen().map(|(c, model)| {
            format!(
                "using {} at {}, model {model} (found; configure [[providers]] to choose)",
                c.title, c.base_url
            )
        })
    }

    /// The error when nothing was found: every candidate, what it said, and
    /// the one-line fix for each.
    pub fn failure_message(&self) -> String {
        let mut text =
            String::from("no model provider is configured and none was found. Tried, in order:");
        for (c, o) in &self.entries {
            let fix = fix_for(c, o);
            text.push_str(&format!(
                "\n  - {} at {}: {}\n      fix: {}",
                c.title,
                c.base_url,
                o.describe(),
                fix
            ));
        }
        text.push('\n');
        text.push_str(&pin_hint());
        text
    }

    /// The report as JSON (for `--json` and `_passepartout/providers`).
    pub fn to_json(&self) -> Value {
        let candidates: Vec<Value> = self
            .entries
            .iter()
            .map(|(c, o)| {
                let mut entry = serde_json::to_value(c).unwrap_or(Value::Null);
                if let (Some(map), Ok(Value::Object(outcome))) =
                    (entry.as_object_mut(), serde_json::to_value(o))
                {
                    map.extend(outcome);
                    map.insert("found".into(), json!(matches!(o, Outcome::Found { .. })));
                    map.insert("detail".into(), json!(o.describe()));
                    map.insert("fix".into(), json!(fix_for(c, o)));
                }
                entry
            })
            .collect();
        json!({
            "chosen": self.chosen().map(|(c, _)| c.name.clone()),
            "announcement": self.announcement(),
            "candidates": candidates,
        })
    }
}

/// The provider entry a found candidate becomes.
fn config_for(c: &Candidate, model: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(c.name.clone(), c.kind, c.base_url.clone(), model);
    config.api_key_env = c.key_env.clone();
    config
}

/// The model to use from a server's list: `preferred` when given, else the
/// first that is not an embedding, reranking or speech model, else the first.
pub fn pick_model(models: &[String], preferred: Option<&str>) -> Option<String> {
    if let Some(p) = preferred {
        return Some(p.to_string());
    }
    models
        .iter()
        .find(|m| {
            let m = m.to_ascii_lowercase();
            !NOT_CHAT.iter().any(|word| m.contains(word))
        })
        .or_else(|| models.first())
        .cloned()
}

/// Ask every candidate, local ones at once; `preferred` is the model a
/// person asked for with `--model` or `PASSEPARTOUT_MODEL`.
///
/// A local candidate at an IP address is first asked for a TCP connection
/// alone: when nothing listens (the usual case of a daemon started with
/// nothing configured) the refusal is its outcome, and no HTTP client is
/// built at all, before a daemon's first reply. One that accepts is then
/// asked for its models over HTTP, as before.
pub async fn probe(candidates: &[Candidate], preferred: Option<&str>) -> Report {
    // A CA store only when some local candidate is https: loading it opens
    // every file of /etc/ssl/certs, before a daemon's first reply.
    let tls = candidates
        .iter()
        .any(|c| c.key_env.is_none() && c.base_url.starts_with("https:"));
    let asks = candidates.iter().map(|c| async move {
        let Some(var) = &c.key_env else {
            if let Some(refused) = refused_at_connect(&c.base_url).await {
                return refused;
            }
            return match probe_client(tls) {
                Ok(client) => local_outcome(client, c, preferred).await,
                Err(e) => {
                    tracing::error!("discovery: {e}");
                    Outcome::Unreachable {
                        reason: "no HTTP client".into(),
                    }
                }
            };
        };
        hosted_outcome(var, c, preferred)
    });
    let outcomes = futures::future::join_all(asks).await;
    Report {
        entries: candidates.iter().cloned().zip(outcomes).collect(),
    }
}

/// The outcome of a local candidate whose address takes no TCP connection
/// within [`CONNECT_TIMEOUT`] (the words are the ones the HTTP client's
/// error ends in: "Connection refused (os error 111)"); `None` when one is
/// accepted, or when the host is a name (the HTTP client resolves it).
async fn refused_at_connect(base_url: &str) -> Option<Outcome> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url.host_str()?;
    // An IPv6 literal comes bracketed.
    let ip: std::net::IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    let port = url.port_or_known_default()?;
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect((ip, port))).await {
        // Something listens: the HTTP probe connects again and asks.
        Ok(Ok(_listening)) => None,
        Ok(Err(e)) => Some(Outcome::Unreachable {
            reason: e.to_string(),
        }),
        Err(_) => Some(Outcome::TimedOut),
    }
}

fn hosted_outcome(var: &str, c: &Candidate, preferred: Option<&str>) -> Outcome {
    match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => Outcome::Found {
            model: preferred
                .map(str::to_string)
                .or_else(|| c.default_model.clone())
                .unwrap_or_default(),
            models: Vec::new(),
        },
        _ => Outcome::NoKey,
    }
}

async fn local_outcome(
    client: &reqwest::Client,
    c: &Candidate,
    preferred: Option<&str>,
) -> Outcome {
    let url = format!("{}/models", c.base_url);
    let response = match client.get(&url).timeout(PROBE_BUDGET).send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Outcome::TimedOut,
        Err(e) => {
            return Outcome::Unreachable {
                reason: root_cause(&e),
            }
        }
    };
    if !response.status().is_success() {
        let status = response.status().as_u16();
        if matches!(status, 401 | 403) {
            return Outcome::Http { status };
        }
        return native_outcome(client, c, Outcome::Http { status }).await;
    }
    let body: Value = match response.json().await {
        Ok(b) => b,
        Err(e) if e.is_timeout() => return Outcome::TimedOut,
        Err(e) => {
            let v1 = Outcome::NotAModelList {
                reason: root_cause(&e),
            };
            return native_outcome(client, c, v1).await;
        }
    };
    if body.get("data").is_none() {
        let v1 = Outcome::NotAModelList {
            reason: "no `data` field".into(),
        };
        return native_outcome(client, c, v1).await;
    }
    let models = model_ids(&body);
    match pick_model(&models, preferred) {
        Some(model) if !models.is_empty() => Outcome::Found { model, models },
        _ => Outcome::NoModels,
    }
}

/// The innermost error's text ("Connection refused (os error 111)"),
/// which says more than reqwest's "error sending request".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

/// Logged (at debug) when the probes' HTTP client is built: only once a
/// local candidate accepted a connection, or is named by host name.
pub const PROBE_CLIENT_BUILT: &str = "discovery: an HTTP client for the probes is built";

/// The HTTP client could not be built (its TLS set-up failed). Kept as the
/// message: the client is built once per process and the answer shared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot build an HTTP client: {0}")]
pub struct ClientError(String);

/// The client of the probes: a short connect timeout, no proxy (the
/// candidates are on this machine); without `tls`, no certificate is
/// trusted (plain-http candidates need none).
fn probe_client(tls: bool) -> Result<&'static reqwest::Client, ClientError> {
    static CLIENTS: [OnceLock<Result<reqwest::Client, ClientError>>; 2] =
        [OnceLock::new(), OnceLock::new()];
    CLIENTS[usize::from(tls)]
        .get_or_init(|| {
            tracing::debug!("{PROBE_CLIENT_BUILT}");
            let _ = rustls::crypto::ring::default_provider().install_default();
            let builder = reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .no_proxy();
            let builder = if tls {
                builder
            } else {
                builder.tls_certs_only(std::iter::empty())
            };
            builder.build().map_err(|e| ClientError(e.to_string()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The client that lists models, shared by every listing of the process
/// (servers may be remote: a longer connect timeout than the probes').
fn listing_client() -> Result<&'static reqwest::Client, ClientError> {
    static CLIENT: OnceLock<Result<reqwest::Client, ClientError>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .timeout(MODELS_TIMEOUT)
                .build()
                .map_err(|e| ClientError(e.to_string()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// No model server answered discovery, even after looking again. The
/// message lists every candidate tried and how to configure one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NoProvider {
    pub message: String,
}

/// Why a provider's server did not list its models.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListModelsError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{url}: {message}")]
    Request { url: String, message: String },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: String },
    #[error("{url}: not a model list: {message}")]
    NotAList { url: String, message: String },
}

/// Ask a provider's server for its models; a clear reason when it cannot.
pub async fn list_models(p: &ProviderConfig) -> Result<Vec<String>, ListModelsError> {
    let client = listing_client()?;
    let base = p.effective_base_url();
    let (url, request) = match p.kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
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
    let response = request.send().await.map_err(|e| ListModelsError::Request {
        url: url.clone(),
        message: e.to_string(),
    })?;
    if !response.status().is_success() {
        return Err(ListModelsError::Status {
            url,
            status: response.status().to_string(),
        });
    }
    let body: Value = response
        .json()
        .await
        .map_err(|e| ListModelsError::NotAList {
            url,
            message: e.to_string(),
        })?;
    Ok(model_ids(&body))
}

/// The ids in an OpenAI or Anthropic model list (`{"data": [{"id": …}]}`).
pub fn model_ids(body: &Value) -> Vec<String> {
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

/// A provider found by a probe.
struct Found {
    config: ProviderConfig,
    provider: Arc<dyn Provider>,
}

/// The daemon's discovery: the latest report and the providers it chose.
pub struct Discovery {
    candidates: Vec<Candidate>,
    preferred_model: Option<String>,
    /// At most one probe per this interval ([`REPROBE_INTERVAL`]).
    reprobe_interval: Duration,
    report: Mutex<(Report, Instant)>,
    /// Serialises probes: prompts failing together wait for one probe.
    probing: tokio::sync::Mutex<()>,
    /// Each provider switched to, in order; the last filled is current.
    /// Fixed slots, so a `&str` model can be lent out while later probes
    /// add more (bounded by [`MAX_SWITCHES`]).
    found: [OnceLock<Found>; MAX_SWITCHES],
    switches: AtomicUsize,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery")
            .field("chosen", &self.current_config().map(|c| c.name))
            .field("switches", &self.switches.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Discovery {
    /// Probe `candidates` once and keep the result.
    pub async fn start(candidates: Vec<Candidate>, preferred_model: Option<String>) -> Arc<Self> {
        Self::start_with_interval(candidates, preferred_model, REPROBE_INTERVAL).await
    }

    /// [`start`](Self::start) with another re-probe interval (tests).
    pub async fn start_with_interval(
        candidates: Vec<Candidate>,
        preferred_model: Option<String>,
        reprobe_interval: Duration,
    ) -> Arc<Self> {
        let report = probe(&candidates, preferred_model.as_deref()).await;
        let discovery = Arc::new(Discovery {
            candidates,
            preferred_model,
            reprobe_interval,
            report: Mutex::new((report.clone(), Instant::now())),
            probing: tokio::sync::Mutex::new(()),
            found: std::array::from_fn(|_| OnceLock::new()),
            switches: AtomicUsize::new(0),
        });
        discovery.adopt(&report);
        discovery
    }

    /// The latest report.
    pub fn report(&self) -> Report {
        lock(&self.report).0.clone()
    }

    /// The provider entry in use, if any was found.
    pub fn current_config(&self) -> Option<ProviderConfig> {
        self.current().map(|f| f.config.clone())
    }

    fn current(&self) -> Option<&Found> {
        match self.switches.load(Ordering::SeqCst) {
            0 => None,
            n => self.found[n - 1].get(),
        }
    }

    /// Use the report's choice when it differs from the current one.
    /// A chosen entry that cannot be built is logged and skipped.
    fn adopt(&self, report: &Report) -> bool {
        let Some(config) = report.chosen_config() else {
            return false;
        };
        if self.current().map(|f| &f.config) == Some(&config) {
            return false;
        }
        let n = self.switches.load(Ordering::SeqCst);
        if n >= MAX_SWITCHES {
            tracing::warn!(
                "discovery: found {} but already switched {MAX_SWITCHES} times (MAX_SWITCHES); restart to use it",
                config.name
            );
            return false;
        }
        let provider = match config.build() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("discovery: cannot use {}: {e}", config.name);
                return false;
            }
        };
        if self.found[n].set(Found { config, provider }).is_ok() {
            self.switches.store(n + 1, Ordering::SeqCst);
        }
        if let Some(text) = report.announcement() {
            tracing::info!("{text}");
        }
        true
    }

    /// Probe again unless the last probe is younger than
    /// [`REPROBE_INTERVAL`]; true when the provider in use changed.
    pub async fn reprobe(&self) -> bool {
        let _guard = self.probing.lock().await;
        if lock(&self.report).1.elapsed() < self.reprobe_interval {
            return false;
        }
        let report = probe(&self.candidates, self.preferred_model.as_deref()).await;
        *lock(&self.report) = (report.clone(), Instant::now());
        self.adopt(&report)
    }

    /// The provider `failed` stopped answering: probe again now, whatever
    /// the interval (the next prompt must not fail while another server
    /// is up), unless another prompt's probe already moved on from it.
    /// Probes are serialised, so prompts failing together probe once.
    /// True when the provider in use changed.
    pub async fn reprobe_after_failure(&self, failed: &ProviderConfig) -> bool {
        let _guard = self.probing.lock().await;
        if self.current().map(|f| &f.config) != Some(failed) {
            return self.current().is_some();
        }
        tracing::info!(provider = %failed.name, "discovery: the server in use stopped answering; probing again");
        let report = probe(&self.candidates, self.preferred_model.as_deref()).await;
        *lock(&self.report) = (report.clone(), Instant::now());
        self.adopt(&report)
    }

    /// The provider in use, probing again (bounded) when none was found;
    /// the failure message listing every candidate when there still is none.
    pub async fn ensure(&self) -> Result<ProviderConfig, NoProvider> {
        if let Some(config) = self.current_config() {
            return Ok(config);
        }
        self.reprobe().await;
        self.current_config().ok_or_else(|| NoProvider {
            message: self.report().failure_message(),
        })
    }

    /// The provider the cascade holds: whatever discovery currently uses.
    pub fn provider(self: &Arc<Self>) -> Arc<dyn Provider> {
        Arc::new(DiscoveredProvider(self.clone()))
    }
}

/// The cascade's view of [`Discovery`]: streams from the provider found,
/// and looks again when it stops answering.
struct DiscoveredProvider(Arc<Discovery>);

#[async_trait::async_trait]
impl Provider for DiscoveredProvider {
    fn label(&self) -> String {
        match self.0.current() {
            Some(f) => f.provider.label(),
            None => "discovery (no model server found)".into(),
        }
    }

    fn model(&self) -> &str {
        self.0
            .current()
            .map(|f| f.config.model.as_str())
            .unwrap_or("")
    }

    fn native_tools(&self) -> bool {
        self.0
            .current()
            .map(|f| f.provider.native_tools())
            .unwrap_or(true)
    }

    fn context_window(&self) -> Option<u64> {
        self.0.current().and_then(|f| f.provider.context_window())
    }

    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        let Some(found) = self.0.current() else {
            self.0
                .ensure()
                .await
                .map_err(|e| ProviderError::Config(e.message))?;
            return match self.0.current() {
                Some(found) => found.provider.stream(request, cancel).await,
                None => Err(ProviderError::Config(self.0.report().failure_message())),
            };
        };
        match found.provider.stream(request, cancel.clone()).await {
            // The server went away: another may have come up meanwhile.
            Err(e @ ProviderError::Connect { .. }) => {
                if self.0.reprobe_after_failure(&found.config).await {
                    if let Some(next) = self.0.current() {
                        return next.provider.stream(request, cancel).await;
                    }
                }
                Err(e)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn the_default_order_is_local_first() {
        let names: Vec<String> = default_candidates().into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "ollama",
                "llama.cpp",
                "lmstudio",
                "vllm",
                "anthropic",
                "openai",
                "openrouter",
                "deepseek"
            ]
        );
    }

    #[test]
    fn overrides_redirect_and_drop_candidates() {
        let list = candidates(Some(
            "llama.cpp=http://127.0.0.1:5/v1/, vllm=,ollama=http://x:1/v1",
        ))
        .unwrap();
        let find = |n: &str| {
            list.iter()
                .find(|c| c.name == n)
                .map(|c| c.base_url.clone())
        };
        assert_eq!(find("llama.cpp").as_deref(), Some("http://127.0.0.1:5/v1"));
        assert_eq!(find("ollama").as_deref(), Some("http://x:1/v1"));
        assert_eq!(find("vllm"), None);
        assert_eq!(list.len(), 7);
        let e = candidates(Some("llamacpp=http://x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`llamacpp`") && e.contains("llama.cpp"), "{e}");
        let e = candidates(Some("ollama")).unwrap_err().to_string();
        assert!(e.contains("not name=url"), "{e}");
    }

    #[test]
    fn the_model_is_the_first_chat_model_unless_one_is_asked_for() {
        let models = ids(&["nomic-embed-text", "bge-reranker", "qwen3:8b", "llama3.2"]);
        assert_eq!(pick_model(&models, None).as_deref(), Some("qwen3:8b"));
        assert_eq!(
            pick_model(&models, Some("llama3.2")).as_deref(),
            Some("llama3.2")
        );
        let only_embeddings = ids(&["text-embedding-3-small"]);
        assert_eq!(
            pick_model(&only_embeddings, None).as_deref(),
            Some("text-embedding-3-small")
        );
        assert_eq!(pick_model(&[], None), None);
    }

    fn entry(name: &str, outcome: Outcome) -> (Candidate, Outcome) {
        let c = default_candidates()
            .into_iter()
            .find(|c| c.name == name)
            .unwrap();
        (c, outcome)
    }

    #[test]
    fn the_first_found_candidate_is_chosen_and_announced() {
        let report = Report {
            entries: vec![
                entry(
                    "ollama",
                    Outcome::Unreachable {
                        reason: "Connection refused".into(),
                    },
                ),
                entry("llama.cpp", Outcome::NoModels),
                entry(
                    "vllm",
                    Outcome::Found {
                        model: "qwen".into(),
                        models: ids(&["qwen"]),
                    },
                ),
                entry(
                    "anthropic",
                    Outcome::Found {
                        model: "claude-sonnet-4-5".into(),
                        models: vec![],
                    },
                ),
            ],
        };
        let config = report.chosen_config().unwrap();
        assert_eq!(
            (
                config.name.as_str(),
                config.model.as_str(),
                config.base_url.as_str()
            ),
            ("vllm", "qwen", "http://127.0.0.1:8000/v1")
        );
        assert_eq!(
            report.announcement().unwrap(),
            "using vLLM at http://127.0.0.1:8000/v1, model qwen (found; configure [[providers]] to choose)"
        );
        let json = report.to_json();
        assert_eq!(json["chosen"], "vllm");
        assert_eq!(json["candidates"][0]["status"], "unreachable");
        assert_eq!(json["candidates"][0]["found"], false);
        assert_eq!(json["candidates"][2]["models"], json!(["qwen"]));
    }

    #[test]
    fn a_hosted_choice_reads_its_key_from_the_environment() {
        let report = Report {
            entries: vec![entry(
                "anthropic",
                Outcome::Found {
                    model: "claude-sonnet-4-5".into(),
                    models: vec![],
                },
            )],
        };
        let config = report.chosen_config().unwrap();
        assert_eq!(config.kind, ProviderKind::Anthropic);
        assert_eq!(config.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(config.api_key, None, "the key itself is never copied");
    }

    #[test]
    fn the_failure_lists_every_candidate_with_its_fix() {
        let report = Report {
            entries: vec![
                entry(
                    "ollama",
                    Outcome::Unreachable {
                        reason: "Connection refused (os error 111)".into(),
                    },
                ),
                entry("llama.cpp", Outcome::TimedOut),
                entry("lmstudio", Outcome::Http { status: 404 }),
                entry("anthropic", Outcome::NoKey),
            ],
        };
        assert_eq!(report.chosen(), None);
        let text = report.failure_message();
        for needle in [
            "Ollama at http://127.0.0.1:11434/v1: not reachable (Connection refused (os error 111))",
            "fix: ollama serve",
            "llama.cpp server at http://127.0.0.1:8080/v1: no answer within 1500 ms",
            "fix: llama-server -m model.gguf --port 8080",
            "LM Studio at http://127.0.0.1:1234/v1: answered HTTP 404",
            "Anthropic at https://api.anthropic.com: no key in the environment",
            "fix: export ANTHROPIC_API_KEY=…",
            "[[providers]]",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[tokio::test]
    async fn a_closed_port_is_reported_unreachable() {
        // Bind then drop: the port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let list = candidates(Some(&format!(
            "ollama=http://127.0.0.1:{port}/v1,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek="
        )))
        .unwrap();
        let started = Instant::now();
        let report = probe(&list, None).await;
        assert!(started.elapsed() < PROBE_BUDGET + Duration::from_millis(500));
        assert_eq!(report.entries.len(), 1);
        match &report.entries[0].1 {
            Outcome::Unreachable { reason } => {
                assert!(reason.to_lowercase().contains("refused"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A one-route HTTP server on `port` answering `GET /v1/models` with
    /// `models`, until dropped.
    async fn model_server(port: u16, models: &'static str) -> tokio::task::JoinHandle<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 2048];
                let _ = stream.read(&mut buf).await;
                let body = format!(r#"{{"object":"list","data":[{{"id":"{models}"}}]}}"#);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            }
        })
    }

    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn only_ollama_at(port: u16) -> Vec<Candidate> {
        candidates(Some(&format!(
            "ollama=http://127.0.0.1:{port}/v1,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek="
        )))
        .unwrap()
    }

    #[tokio::test]
    async fn a_server_started_later_is_found_by_the_next_probe() {
        let port = closed_port();
        let discovery =
            Discovery::start_with_interval(only_ollama_at(port), None, Duration::ZERO).await;
        assert_eq!(discovery.current_config(), None);
        let provider = discovery.provider();
        assert_eq!(provider.model(), "");
        let server = model_server(port, "qwen3").await;
        let found = discovery.ensure().await.unwrap();
        assert_eq!(
            (found.name.as_str(), found.model.as_str()),
            ("ollama", "qwen3")
        );
        assert_eq!(provider.model(), "qwen3");
        assert_eq!(
            provider.label(),
            format!("ollama (http://127.0.0.1:{port}/v1)")
        );
        server.abort();
    }

    #[tokio::test]
    async fn when_the_server_in_use_goes_away_the_next_one_found_takes_over() {
        let (first, second) = (closed_port(), closed_port());
        let list = candidates(Some(&format!(
            "ollama=http://127.0.0.1:{first}/v1,llama.cpp=http://127.0.0.1:{second}/v1,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek="
        )))
        .unwrap();
        let ollama = model_server(first, "qwen3").await;
        let discovery = Discovery::start_with_interval(list, None, Duration::ZERO).await;
        let provider = discovery.provider();
        assert_eq!(provider.model(), "qwen3");
        ollama.abort();
        let _ = ollama.await;
        let llama = model_server(second, "gemma3").await;
        let request = ChatRequest {
            messages: vec![super::super::ChatMessage::user("hi")],
            tools: Vec::new(),
            max_tokens: None,
            temperature: None,
        };
        // The chat goes to the new server (which only knows model lists, so
        // the stream itself may fail): what matters is who is asked.
        let _ = provider.stream(&request, CancellationToken::new()).await;
        assert_eq!(provider.model(), "gemma3");
        assert_eq!(
            discovery.current_config().map(|c| c.name),
            Some("llama.cpp".to_string())
        );
        llama.abort();
    }

    #[tokio::test]
    async fn probes_are_rate_limited() {
        let port = closed_port();
        let discovery =
            Discovery::start_with_interval(only_ollama_at(port), None, Duration::from_secs(3600))
                .await;
        let server = model_server(port, "qwen3").await;
        // Within the interval the cached "nothing found" stands.
        let why = discovery.ensure().await.unwrap_err();
        assert!(why.message.contains("fix: ollama serve"), "{why}");
        assert!(!discovery.reprobe().await);
        server.abort();
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out_within_the_budget() {
        // Accepted by the kernel (backlog), never read: the request hangs.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let report = probe(&only_ollama_at(port), None).await;
        assert_eq!(report.entries[0].1, Outcome::TimedOut);
        drop(silent);
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
