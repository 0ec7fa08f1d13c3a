//! Configuration: defaults, then the TOML file, then environment variables,
//! then command-line flags (later wins); the editor may add provider settings
//! and API keys at `initialize`.
//!
//! The defaults need no file at all: no provider (so one is discovered at
//! startup, see [`crate::llm::discovery`]), the bubblewrap sandbox, ten
//! rounds per turn.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::llm::config::{ProviderConfig, ProviderKind};
use crate::llm::ProviderConfigExt;
use crate::paths;

/// How shell actions are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxSetting {
    /// bubblewrap; fail closed when it cannot run.
    #[default]
    Bwrap,
    /// No sandbox at all: only by explicit choice, announced in every result.
    None,
}

/// `sandbox = "bwrap"` (or `"none"`), or a `[sandbox]` table with the mode
/// and the person's own extra paths (see `docs/sandbox.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SandboxConfig {
    pub mode: SandboxSetting,
    /// Further paths every command sees read-only at their own path.
    pub read_only: Vec<PathBuf>,
    /// Further paths every command may change (not in read-only mode).
    pub writable: Vec<PathBuf>,
    /// Ports of the host's 127.0.0.1 every command reaches at its own
    /// 127.0.0.1 (the person's database, dev server).
    pub localhost_ports: Vec<u16>,
    /// Hosts (`host` or `host:port`) added to the package registries the
    /// `registries` grant reaches.
    pub registries: Vec<String>,
    /// Grant `registries` to every command: installers reach the package
    /// registries, and nothing else, through the daemon's proxy.
    pub grant_registries: bool,
}

impl PartialEq<SandboxSetting> for SandboxConfig {
    fn eq(&self, other: &SandboxSetting) -> bool {
        self.mode == *other
    }
}

impl From<SandboxSetting> for SandboxConfig {
    fn from(mode: SandboxSetting) -> Self {
        SandboxConfig {
            mode,
            ..SandboxConfig::default()
        }
    }
}

impl<'de> Deserialize<'de> for SandboxConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(default, deny_unknown_fields)]
        struct Table {
            mode: SandboxSetting,
            read_only: Vec<PathBuf>,
            writable: Vec<PathBuf>,
            localhost_ports: Vec<u16>,
            registries: Vec<String>,
            grant_registries: bool,
        }
        impl Default for Table {
            fn default() -> Self {
                Table {
                    mode: SandboxSetting::Bwrap,
                    read_only: Vec::new(),
                    writable: Vec::new(),
                    localhost_ports: Vec::new(),
                    registries: Vec::new(),
                    grant_registries: false,
                }
            }
        }
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = SandboxConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"bwrap\", \"none\" or a [sandbox] table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SandboxConfig, E> {
                SandboxSetting::deserialize(serde::de::value::StrDeserializer::<E>::new(v))
                    .map(SandboxConfig::from)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<SandboxConfig, A::Error> {
                // Through the table's own derive: an unknown key is named.
                let t = Table::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(SandboxConfig {
                    mode: t.mode,
                    read_only: t.read_only,
                    writable: t.writable,
                    localhost_ports: t.localhost_ports,
                    registries: t.registries,
                    grant_registries: t.grant_registries,
                })
            }
        }
        d.deserialize_any(Visit)
    }
}

/// `[git]`: git inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GitConfig {
    /// `"Name <email>"`: the identity of commits made in the sandbox,
    /// instead of the person's `user.name`/`user.email`.
    pub author: Option<String>,
}

/// Everything the daemon reads from its configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Providers in cascade order. Empty: discover one at startup.
    pub providers: Vec<ProviderConfig>,
    /// Set at startup when `providers` is empty: what discovery found (never
    /// read from the file).
    #[serde(skip)]
    pub discovery: Option<std::sync::Arc<crate::llm::discovery::Discovery>>,
    /// The model `--model` or `PASSEPARTOUT_MODEL` asked for when no
    /// provider is configured: discovery uses it for what it finds.
    #[serde(skip)]
    pub discovery_model: Option<String>,
    /// Most reason→act rounds in one turn.
    pub max_rounds: u32,
    /// Most bytes of text and reasoning one model answer may stream; past
    /// it the answer is cut and the turn ends with `max_tokens`.
    pub max_answer_bytes: usize,
    /// Longest a turn may run, waiting for a person included, in seconds;
    /// past it the turn is stopped and the prompt fails with a message
    /// naming this setting.
    pub max_turn_secs: u64,
    pub sandbox: SandboxConfig,
    /// `[git]`: the identity of commits made in the sandbox.
    pub git: GitConfig,
    /// The mode a new session starts in (`read-only`, `ask`, `auto`; see
    /// [`crate::modes`]). `auto`: the gates decide, as before modes.
    pub default_mode: crate::modes::Mode,
    /// Resource limits of every sandboxed run (`[sandbox_limits]`; a table
    /// of its own because `sandbox` is already a string).
    pub sandbox_limits: crate::sandbox::limits::ResourceLimits,
    /// Default time limit for a shell action, in seconds.
    pub shell_timeout_secs: u64,
    /// Cap on captured stdout and stderr, each, in bytes.
    pub output_cap_bytes: usize,
    /// Hosts network commands may reach without approval.
    pub network_allow: Vec<String>,
    /// Private ranges and host addresses a run granted network may reach
    /// (`["10.1.2.0/24"]`); all others are blocked in the sandbox, see
    /// [`crate::sandbox::network`].
    pub network_reach: Vec<String>,
    /// Where plans, the audit log and logs live.
    pub state_dir: Option<PathBuf>,
    /// Where memex notes live.
    pub memex_dir: Option<PathBuf>,
    /// The user's skill directory.
    pub skills_dir: Option<PathBuf>,
    /// Load the skills embedded in the binary.
    pub builtin_skills: bool,
    /// The daemon's log file (stderr only gets warnings); `None`:
    /// `<state_dir>/logs/passepartout.log`. Rotated at 10 MiB, 3 kept.
    pub log_file: Option<PathBuf>,
    /// Whether messages shown to the person (the system actuator) are also
    /// fed back to the model as the tool result. Off: the person already
    /// sees them; the model only hears they were delivered.
    pub feed_back_messages: bool,
    /// Let tools of trusted project skills keep a declared `:APPROVAL:
    /// auto`. Off (the default): they ask before every run. Only this file,
    /// outside every project, can turn it on.
    pub trust_project_tool_approval: bool,
    /// MCP servers for every session, and the limits they run under.
    pub mcp: crate::mcp::McpConfig,
    /// Checkpoints, effect gates and undo (`[checkpoints]`).
    pub checkpoints: crate::checkpoint::CheckpointConfig,
    /// `[budget]`: hard limits in tokens and USD per turn, session, day.
    pub budget: crate::budget::BudgetConfig,
    /// `[prices."model"]`: USD per million tokens, over the defaults.
    pub prices: BTreeMap<String, crate::budget::Price>,
    /// `[context]`: when to compact a session's history.
    pub context: ContextConfig,
    /// `[sessions]`: the session journals.
    pub sessions: SessionsConfig,
}

/// `[context]`: context-window management.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Compact when a request would fill more than this share of the
    /// provider's context window.
    pub compact_at: f64,
    /// The window assumed for a provider with no `context_window` and a
    /// model we know nothing about (conservative).
    pub default_window: u64,
    /// What a prompt too long for the window becomes: refused with an
    /// error (the default: nothing is sent that the model cannot read), or
    /// cut to its beginning with a note saying so.
    pub over_window: OverWindow,
}

/// `[context] over_window`: what happens to a prompt that cannot fit the
/// context window even alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverWindow {
    #[default]
    Refuse,
    Cut,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            compact_at: 0.75,
            default_window: 16_384,
            over_window: OverWindow::Refuse,
        }
    }
}

/// `[sessions]`: where and how much history is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// Keep sessions on disk (`<state>/sessions`).
    pub persist: bool,
    /// A journal past this size is rewritten as one snapshot record.
    pub max_file_bytes: u64,
    /// All journals together past this size: the oldest are removed (see
    /// [`crate::sessions::Quota`]).
    pub max_total_bytes: u64,
    /// More journals than this: the oldest are removed.
    pub max_journals: usize,
    /// The newest journals never removed by the quota, whatever their size.
    pub keep_newest: usize,
}

impl SessionsConfig {
    /// The total quota of the session journals these settings give.
    pub fn quota(&self) -> crate::sessions::Quota {
        crate::sessions::Quota {
            max_total_bytes: self.max_total_bytes,
            max_journals: self.max_journals,
            keep_newest: self.keep_newest,
        }
    }
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            persist: true,
            max_file_bytes: crate::sessions::DEFAULT_CAP_BYTES,
            max_total_bytes: crate::sessions::Quota::DEFAULT.max_total_bytes,
            max_journals: crate::sessions::Quota::DEFAULT.max_journals,
            keep_newest: crate::sessions::Quota::DEFAULT.keep_newest,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            providers: Vec::new(),
            discovery: None,
            discovery_model: None,
            max_rounds: 10,
            max_answer_bytes: 1024 * 1024,
            max_turn_secs: 3600,
            sandbox: SandboxConfig::default(),
            git: GitConfig::default(),
            default_mode: crate::modes::Mode::Auto,
            sandbox_limits: Default::default(),
            shell_timeout_secs: 30,
            output_cap_bytes: 100 * 1024,
            network_allow: Vec::new(),
            network_reach: Vec::new(),
            state_dir: None,
            memex_dir: None,
            skills_dir: None,
            builtin_skills: true,
            log_file: None,
            feed_back_messages: false,
            trust_project_tool_approval: false,
            mcp: crate::mcp::McpConfig::default(),
            checkpoints: crate::checkpoint::CheckpointConfig::default(),
            budget: crate::budget::BudgetConfig::default(),
            prices: BTreeMap::new(),
            context: ContextConfig::default(),
            sessions: SessionsConfig::default(),
        }
    }
}

/// A TOML error. An unknown key becomes `FILE:LINE: unknown key `k` in
/// [table]; did you mean `key`? (valid keys: ...)` (`api_keyenv` →
/// `api_key_env`); anything else keeps toml's own report.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim();
    let Some((unknown, hint)) = unknown_key_message(message) else {
        // Anything else: toml's own report (line, column and the line).
        return ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
    };
    let start = e.span().map(|s| s.start.min(text.len()));
    let table = start
        .and_then(|at| {
            text[..at]
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| l.starts_with('['))
        })
        .map(|header| format!(" in {header}"))
        .unwrap_or_else(|| " at the top level".into());
    let at = match start {
        Some(at) => format!(
            "{}:{}",
            path.display(),
            text[..at].matches('\n').count() + 1
        ),
        None => path.display().to_string(),
    };
    ConfigError::Parse {
        path: PathBuf::from(at),
        message: format!("{unknown}{table}{hint}"),
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" as
/// ("unknown key `x`", "; did you mean `a`? (valid keys: ...)").
pub fn unknown_key_message(message: &str) -> Option<(String, String)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let closest = valid
        .iter()
        .map(|v| (strsim::damerau_levenshtein(key, v), *v))
        .filter(|(distance, v)| *distance <= (v.len().max(key.len()) / 3).max(2))
        .min();
    let suggestion = match closest {
        Some((_, name)) => format!("; did you mean `{name}`?"),
        None => String::new(),
    };
    let listed = if valid.is_empty() {
        String::new()
    } else {
        format!(" (valid keys: {})", valid.join(", "))
    };
    Some((
        format!("unknown key `{key}`"),
        format!("{suggestion}{listed}"),
    ))
}

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// Values given on the command line (all optional).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub provider_url: Option<String>,
    pub provider_kind: Option<ProviderKind>,
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub max_rounds: Option<u32>,
    pub sandbox: Option<SandboxSetting>,
    pub state_dir: Option<PathBuf>,
}

impl Config {
    /// Load with the full precedence chain, reading the process environment.
    pub fn load(cli: &Overrides) -> Result<Config, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("PASSEPARTOUT_"))
            .collect();
        Self::load_with(cli, &env)
    }

    /// Load with an explicit environment (for tests).
    pub fn load_with(
        cli: &Overrides,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let explicit = cli
            .config_file
            .clone()
            .or_else(|| env.get("PASSEPARTOUT_CONFIG").map(PathBuf::from));
        let mut config = match &explicit {
            Some(path) => Self::from_file(path)?,
            None => {
                let path = paths::config_file(&paths::config_dir());
                if path.exists() {
                    Self::from_file(&path)?
                } else {
                    Config::default()
                }
            }
        };
        let from_env = Overrides {
            config_file: None,
            provider_url: env.get("PASSEPARTOUT_PROVIDER_URL").cloned(),
            provider_kind: match env.get("PASSEPARTOUT_PROVIDER_KIND") {
                Some(k) => Some(parse_kind(k)?),
                None => None,
            },
            model: env.get("PASSEPARTOUT_MODEL").cloned(),
            api_key: env.get("PASSEPARTOUT_API_KEY").cloned(),
            max_rounds: match env.get("PASSEPARTOUT_MAX_ROUNDS") {
                Some(v) => Some(v.parse().map_err(|_| {
                    ConfigError::Invalid(format!(
                        "PASSEPARTOUT_MAX_ROUNDS must be a whole number, got {v:?}"
                    ))
                })?),
                None => None,
            },
            sandbox: match env.get("PASSEPARTOUT_SANDBOX") {
                Some(v) => Some(parse_sandbox(v)?),
                None => None,
            },
            state_dir: env.get("PASSEPARTOUT_STATE_DIR").map(PathBuf::from),
        };
        config.apply(&from_env);
        let origin = |c: &mut Config, from: &str| {
            if let Some(first) = c.providers.first_mut() {
                first.key_origin = Some(from.to_string());
            }
        };
        if from_env.api_key.is_some() {
            origin(&mut config, "the environment variable PASSEPARTOUT_API_KEY");
        }
        config.apply(cli);
        if cli.provider_url.is_some() && cli.api_key.is_none() {
            // --provider-url replaced the provider list, and with it the
            // key PASSEPARTOUT_API_KEY had put on the first provider.
            if let (Some(key), Some(first)) = (&from_env.api_key, config.providers.first_mut()) {
                first.api_key = Some(key.clone());
                first.key_origin = Some("the environment variable PASSEPARTOUT_API_KEY".into());
            }
        }
        config.validate()?;
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|e| parse_error(path, &text, &e))?;
        for p in &mut config.providers {
            if p.api_key.is_some() {
                p.key_origin = Some(format!(
                    "`api_key` of provider {} in {}",
                    p.name,
                    path.display()
                ));
            }
        }
        Ok(config)
    }

    /// Apply overrides. A provider URL replaces the provider list with that
    /// one provider; a model or key alone adjusts the first provider.
    pub fn apply(&mut self, o: &Overrides) {
        if let Some(url) = &o.provider_url {
            let mut p = ProviderConfig::from_url(url, "llama3.2");
            if let Some(kind) = o.provider_kind {
                p.kind = kind;
            }
            if p.kind == ProviderKind::Anthropic && o.model.is_none() {
                p.model = "claude-sonnet-4-5".into();
            }
            self.providers = vec![p];
        }
        if self.providers.is_empty() && o.model.is_some() {
            self.discovery_model = o.model.clone();
        }
        if let Some(first) = self.providers.first_mut() {
            if let Some(model) = &o.model {
                first.model = model.clone();
            }
            if let Some(key) = &o.api_key {
                first.api_key = Some(key.clone());
            }
        }
        if let Some(n) = o.max_rounds {
            self.max_rounds = n;
        }
        if let Some(s) = o.sandbox {
            self.sandbox.mode = s;
        }
        if let Some(d) = &o.state_dir {
            self.state_dir = Some(d.clone());
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_rounds == 0 {
            return Err(ConfigError::Invalid("max_rounds must be at least 1".into()));
        }
        if self.max_answer_bytes == 0 || self.max_turn_secs == 0 {
            return Err(ConfigError::Invalid(
                "max_answer_bytes and max_turn_secs must be at least 1".into(),
            ));
        }
        if !(self.context.compact_at > 0.0 && self.context.compact_at <= 1.0) {
            return Err(ConfigError::Invalid(format!(
                "[context] compact_at must be a share between 0 and 1, got {}",
                self.context.compact_at
            )));
        }
        if let Some(author) = &self.git.author {
            crate::sandbox::git_identity::GitIdentity::parse_author(author)
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        crate::sandbox::toolchains::check_extra_paths(
            &self.sandbox.read_only,
            &self.sandbox.writable,
            home.as_deref(),
        )
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        crate::sandbox::local_ports::check_ports(&self.sandbox.localhost_ports)
            .map_err(|e| ConfigError::Invalid(format!("[sandbox] {e}")))?;
        crate::sandbox::registry_proxy::check_extra(&self.sandbox.registries)
            .map_err(|e| ConfigError::Invalid(format!("[sandbox] {e}")))?;
        Ok(())
    }

    /// The layout of [`Config::state_dir`].
    pub fn state(&self) -> paths::StateDir {
        paths::StateDir::new(self.state_dir())
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(paths::default_state_dir)
    }

    pub fn memex_dir(&self) -> PathBuf {
        self.memex_dir
            .clone()
            .unwrap_or_else(|| paths::memex_dir(&paths::default_data_dir()))
    }

    pub fn user_skills_dir(&self) -> PathBuf {
        self.skills_dir
            .clone()
            .unwrap_or_else(|| paths::user_skills_dir(&paths::config_dir()))
    }

    /// The trust store for project skills (`STATE/trusted-skills.json`).
    pub fn trust_file(&self) -> PathBuf {
        self.state().trust_file()
    }

    /// The daemon's own directories, which its tools must not touch.
    pub fn host_dirs(&self) -> crate::control_surface::HostDirs {
        crate::control_surface::HostDirs {
            config: paths::config_dir(),
            user_skills: self.user_skills_dir(),
            state: self.state_dir(),
            memex: self.memex_dir(),
        }
    }

    pub fn policy_file(&self) -> PathBuf {
        paths::policy_file(&paths::config_dir())
    }
}

pub fn parse_kind(s: &str) -> Result<ProviderKind, ConfigError> {
    match s.to_ascii_lowercase().as_str() {
        "openai" => Ok(ProviderKind::OpenAi),
        "anthropic" => Ok(ProviderKind::Anthropic),
        "openai-responses" => Ok(ProviderKind::OpenAiResponses),
        other => Err(ConfigError::Invalid(format!(
            "unknown provider kind {other:?}: use \"openai\", \"anthropic\" or \"openai-responses\""
        ))),
    }
}

pub fn parse_sandbox(s: &str) -> Result<SandboxSetting, ConfigError> {
    match s {
        "bwrap" => Ok(SandboxSetting::Bwrap),
        "none" => Ok(SandboxSetting::None),
        other => Err(ConfigError::Invalid(format!(
            "unknown sandbox {other:?}: use \"bwrap\" or \"none\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn precedence_is_flags_over_env_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            r#"max_rounds = 4
[[providers]]
name = "vllm"
kind = "openai"
base_url = "http://10.0.0.1:8000/v1"
model = "qwen"
"#,
        )
        .unwrap();
        let cli = Overrides {
            config_file: Some(file),
            ..Default::default()
        };
        let c = Config::load_with(&cli, &env(&[])).unwrap();
        assert_eq!(
            (
                c.max_rounds,
                c.providers[0].name.as_str(),
                c.providers[0].model.as_str()
            ),
            (4, "vllm", "qwen")
        );

        let c = Config::load_with(
            &cli,
            &env(&[
                ("PASSEPARTOUT_MODEL", "llama"),
                ("PASSEPARTOUT_MAX_ROUNDS", "6"),
            ]),
        )
        .unwrap();
        assert_eq!((c.max_rounds, c.providers[0].model.as_str()), (6, "llama"));

        let cli = Overrides {
            max_rounds: Some(2),
            model: Some("mistral".into()),
            ..cli
        };
        let c = Config::load_with(
            &cli,
            &env(&[
                ("PASSEPARTOUT_MODEL", "llama"),
                ("PASSEPARTOUT_MAX_ROUNDS", "6"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (c.max_rounds, c.providers[0].model.as_str()),
            (2, "mistral")
        );
    }

    #[test]
    fn a_provider_url_replaces_the_list() {
        let cli = Overrides {
            config_file: Some("/nonexistent/none.toml".into()),
            ..Default::default()
        };
        assert!(matches!(
            Config::load_with(&cli, &env(&[])),
            Err(ConfigError::Read { .. })
        ));
        let mut c = Config::default();
        c.apply(&Overrides {
            provider_url: Some("http://127.0.0.1:9/v1".into()),
            ..Default::default()
        });
        assert_eq!(c.providers.len(), 1);
        assert_eq!(c.providers[0].base_url, "http://127.0.0.1:9/v1");
    }

    #[test]
    fn bad_values_are_explained() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "max_rounds = \"lots\"\n").unwrap();
        let err = Config::from_file(&file).unwrap_err().to_string();
        assert!(
            err.contains("c.toml") && err.contains("max_rounds"),
            "{err}"
        );
        std::fs::write(&file, "unknown_key = 1\n").unwrap();
        assert!(Config::from_file(&file)
            .unwrap_err()
            .to_string()
            .contains("unknown_key"));
        let cli = Overrides {
            config_file: Some("/dev/null".into()),
            ..Default::default()
        };
        let err = Config::load_with(&cli, &env(&[("PASSEPARTOUT_SANDBOX", "docker")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown sandbox \"docker\": use \"bwrap\" or \"none\""
        );
    }

    #[test]
    fn the_api_key_from_the_environment_reaches_a_provider_url_flag() {
        let cli = Overrides {
            config_file: Some("/dev/null".into()),
            provider_url: Some("http://127.0.0.1:9/v1".into()),
            ..Default::default()
        };
        let c = Config::load_with(&cli, &env(&[("PASSEPARTOUT_API_KEY", "sk-from-env")])).unwrap();
        assert_eq!(c.providers[0].base_url, "http://127.0.0.1:9/v1");
        assert_eq!(c.providers[0].api_key.as_deref(), Some("sk-from-env"));
    }

    #[test]
    fn the_default_configures_no_provider_so_one_is_discovered() {
        let c = Config::default();
        assert!(c.providers.is_empty());
        let cli = Overrides {
            config_file: Some("/dev/null".into()),
            ..Default::default()
        };
        let c = Config::load_with(&cli, &env(&[("PASSEPARTOUT_MODEL", "qwen3")])).unwrap();
        assert!(c.providers.is_empty());
        assert_eq!(c.discovery_model.as_deref(), Some("qwen3"));
        assert_eq!(
            (c.max_rounds, c.shell_timeout_secs, c.output_cap_bytes),
            (10, 30, 102400)
        );
    }

    #[test]
    fn sandbox_is_a_mode_or_a_table_with_the_persons_paths() {
        let parse = |text: &str| toml::from_str::<Config>(text).map(|c| c.sandbox);
        assert_eq!(parse("sandbox = \"none\"").unwrap(), SandboxSetting::None);
        let t =
            parse("[sandbox]\nread_only = [\"/srv/data\"]\nwritable = [\"/srv/out\"]\n").unwrap();
        assert_eq!(t.mode, SandboxSetting::Bwrap);
        assert_eq!(t.read_only, vec![PathBuf::from("/srv/data")]);
        assert_eq!(t.writable, vec![PathBuf::from("/srv/out")]);
        let t = parse("[sandbox]\nmode = \"none\"\n").unwrap();
        assert_eq!(t, SandboxSetting::None);
        let e = parse("[sandbox]\nreadonly = []\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `readonly`"), "{e}");
        let e = parse("sandbox = \"docker\"").unwrap_err().to_string();
        assert!(e.contains("unknown variant `docker`"), "{e}");
    }

    #[test]
    fn local_ports_and_registries_are_read_and_checked() {
        let config = |text: &str| toml::from_str::<Config>(text).unwrap();
        let c = config(
            "[sandbox]\nlocalhost_ports = [5432, 8000]\nregistries = [\"pypi.example:8080\"]\n\
             grant_registries = true\n",
        );
        assert_eq!(c.sandbox.localhost_ports, vec![5432, 8000]);
        assert_eq!(c.sandbox.registries, vec!["pypi.example:8080".to_string()]);
        assert!(c.sandbox.grant_registries);
        assert!(c.validate().is_ok());
        assert!(!Config::default().sandbox.grant_registries);
        let proxy = crate::sandbox::registry_proxy::PROXY_PORT;
        let e = config(&format!("[sandbox]\nlocalhost_ports = [{proxy}]\n"))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("registries proxy"), "{e}");
        let e = config("[sandbox]\nregistries = [\"https://pypi.org/simple\"]\n")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("https://pypi.org/simple"), "{e}");
    }

    #[test]
    fn extra_paths_and_the_git_author_are_validated() {
        let mut c = Config::default();
        c.sandbox.read_only = vec![PathBuf::from("relative")];
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            ConfigError::Invalid(
                "[sandbox] read_only: `relative` is not absolute; write the full path".into()
            )
            .to_string()
        );
        let mut c = Config::default();
        c.git.author = Some("nobody".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("is not of the form \"Name <email>\""));
        c.git.author = Some("Ada <ada@example.org>".into());
        assert!(c.validate().is_ok());
    }
}
