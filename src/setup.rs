//! Assembling a working agent from a [`Config`]: providers, toolsets,
//! gates, actuators. Shared by `serve` and `run`. With no provider
//! configured, [`discover_if_unconfigured`] finds one first (the only step
//! that may wait, at most [`crate::llm::discovery::PROBE_BUDGET`]).
//!
//! Nothing slow happens here: the sandbox's trial run (a bwrap process)
//! waits for the first shell action ([`LazyShell`]) and is cached
//! for the life of the process; with `sandbox = "none"` it never happens.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::action::Action;
use crate::actuators::emacs::{EditorLink, EmacsActuator};
use crate::actuators::files::FilesActuator;
use crate::actuators::memex::MemexActuator;
use crate::actuators::shell::{SandboxMode, ShellActuator};
use crate::actuators::system::SystemActuator;
use crate::actuators::{ActContext, ActError, ActOutput, Actuator, ActuatorRegistry};
use crate::agent::AgentEnv;
use crate::audit::AuditLog;
use crate::config::{Config, SandboxSetting};
use crate::control_surface::HostPath;
use crate::protocol::SandboxReport;
use crate::sandbox::limits::ResourceLimits;
use crate::sandbox::runner::RunLimits;
use crate::toolsets::{SkillSources, SkillToolsets};

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// Its text names the provider already (`provider misconfigured: …`).
    #[error("{0}")]
    Provider(#[from] crate::llm::ProviderError),
    #[error("provider discovery: {0}")]
    Discovery(#[from] crate::llm::discovery::DiscoveryError),
    /// No action runs unaudited: a state directory the audit log cannot be
    /// written in stops the agent before it starts.
    #[error(
        "cannot write the audit log ({0}); no action runs unaudited. Make the state directory \
         writable, or choose another with --state-dir or `state_dir` in config.toml"
    )]
    Audit(#[from] crate::audit::AuditError),
}

/// With no provider configured, probe the usual servers and keys (see
/// [`crate::llm::discovery`]) and keep the result in `config.discovery`;
/// a configuration that names providers is left untouched. Finding
/// nothing is not an error here: `run` reports it, a daemon reports it at
/// each prompt (and probes again then).
pub async fn discover_if_unconfigured(config: &mut Config) -> Result<(), SetupError> {
    if !config.providers.is_empty() || config.discovery.is_some() {
        return Ok(());
    }
    let candidates = crate::llm::discovery::candidates_from_env()?;
    let discovery =
        crate::llm::discovery::Discovery::start(candidates, config.discovery_model.clone()).await;
    config.discovery = Some(discovery);
    Ok(())
}

/// Build the agent environment.
pub fn build_env(config: Config) -> Result<AgentEnv, SetupError> {
    // reqwest is built without a default crypto provider: install ring's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cascade = match (&config.discovery, config.providers.is_empty()) {
        (Some(discovery), true) => crate::llm::Cascade::new()
            .with_provider(discovery.provider(), crate::llm::RetryPolicy::default()),
        _ => crate::llm::config::build_cascade(&config.providers)?,
    };
    // The daemon's own directories, protected by every layer: given to
    // the actuators here and to the gates through `AgentEnv::gate_context`.
    let hosts = crate::control_surface::host_paths_of(&config.host_dirs());
    let mut actuators = ActuatorRegistry::new();
    let client_fs = crate::actuators::client_fs::ClientFsLink::default();
    actuators.register(Arc::new(
        FilesActuator::new(client_fs.clone()).with_host_paths(hosts.clone()),
    ));
    let mode = match config.sandbox.mode {
        SandboxSetting::Bwrap => SandboxMode::Bwrap,
        SandboxSetting::None => SandboxMode::Unsandboxed,
    };
    let limits = RunLimits {
        timeout: Duration::from_secs(config.shell_timeout_secs),
        output_cap: config.output_cap_bytes,
    };
    if let Err(why) = crate::sandbox::network::set_reach(&config.network_reach) {
        tracing::warn!("{why}");
    }
    // Checked with the configuration: what is refused here was refused there.
    if let Err(why) = crate::sandbox::local_ports::set_ports(&config.sandbox.localhost_ports) {
        tracing::warn!("{why}");
    }
    if let Err(why) = crate::sandbox::registry_proxy::set_extra(&config.sandbox.registries) {
        tracing::warn!("{why}");
    }
    crate::sandbox::registry_proxy::set_granted(config.sandbox.grant_registries);
    let shell = LazyShell::new(mode, limits, config.sandbox_limits)
        .with_host_paths(hosts)
        .with_person(Person {
            read_only: config.sandbox.read_only.clone(),
            writable: config.sandbox.writable.clone(),
            git_author: config
                .git
                .author
                .as_deref()
                .and_then(|a| crate::sandbox::git_identity::GitIdentity::parse_author(a).ok()),
        });
    let sandbox = startup_report(mode);
    if sandbox.available {
        tracing::info!("{}", sandbox.message);
    } else {
        tracing::warn!("{}", sandbox.message);
    }
    actuators.register(Arc::new(shell));
    actuators.register(Arc::new(SystemActuator::new(config.feed_back_messages)));
    // An action that names no target goes to the person.
    actuators.set_default("system");
    let editor = EditorLink::default();
    actuators.register(Arc::new(EmacsActuator::new(editor.clone())));
    let mcp = Arc::new(
        crate::mcp::McpManager::new(&config.mcp)
            .with_project_trust(config.trust_file(), config.trust_project_tool_approval)
            .with_oauth_tokens(config.state().mcp_oauth()),
    );
    actuators.register(Arc::new(crate::actuators::mcp::McpActuator::new(
        mcp.clone(),
    )));
    let memex_dir = config.memex_dir();
    actuators.register(Arc::new(MemexActuator::new(memex_dir)));
    actuators.register(Arc::new(
        crate::actuators::checkpoint::CheckpointActuator::new(
            config.state_dir(),
            config.checkpoints.clone(),
        ),
    ));
    let toolsets = Arc::new(SkillToolsets::new(SkillSources {
        builtin: config.builtin_skills,
        user_dir: Some(config.user_skills_dir()),
        policy_file: Some(config.policy_file()),
        trust_file: Some(config.trust_file()),
        project_auto_approval: config.trust_project_tool_approval,
    }));
    let audit_path = config.state().audit_log();
    let audit = Some(Arc::new(AuditLog::open(&audit_path)?));
    // Before anything runs: what a killed daemon or CLI left half applied
    // or half undone is finished or reversed (and logged), and audited
    // here (the reports stay queued for a command line to print).
    for r in crate::checkpoint::intent::recover_all(&config.state_dir(), &config.checkpoints) {
        if let (Some(log), Some(cp)) = (&audit, &r.record) {
            let _ = log.append(&crate::audit::AuditRecord::effect(cp));
        }
    }
    let accounts = Arc::new(crate::budget::Accounts::new(
        config.budget.clone(),
        crate::budget::Prices::new(config.prices.clone()),
        Some(config.state().usage()),
    ));
    let sessions = if config.sessions.persist {
        match crate::sessions::SessionStore::open(
            config.state().sessions(),
            config.sessions.max_file_bytes,
        ) {
            Ok(store) => Some(Arc::new(store.with_quota(config.sessions.quota()))),
            Err(e) => {
                tracing::error!("cannot open the session store: {e}; sessions will not be saved");
                None
            }
        }
    } else {
        None
    };
    Ok(AgentEnv {
        accounts,
        sessions,
        config,
        models: RwLock::new(Arc::new(cascade)),
        toolsets,
        actuators,
        sandbox,
        audit,
        editor,
        client_fs,
        mcp,
        redaction: Default::default(),
    })
}

/// The shell actuator, built (and the sandbox probed, in a blocking task)
/// at its first action rather than at startup.
pub struct LazyShell {
    mode: SandboxMode,
    limits: RunLimits,
    resources: ResourceLimits,
    hosts: Vec<HostPath>,
    person: Person,
    shell: OnceCell<ShellActuator>,
}

/// What the sandbox shows of the person beyond the system: their extra
/// paths (`[sandbox] read_only`/`writable`) and commit identity (`[git]
/// author`); see `docs/sandbox.md`.
#[derive(Debug, Clone, Default)]
pub struct Person {
    pub read_only: Vec<std::path::PathBuf>,
    pub writable: Vec<std::path::PathBuf>,
    pub git_author: Option<crate::sandbox::git_identity::GitIdentity>,
}

impl LazyShell {
    pub fn new(mode: SandboxMode, limits: RunLimits, resources: ResourceLimits) -> Self {
        LazyShell {
            mode,
            limits,
            resources,
            hosts: Vec::new(),
            person: Person::default(),
            shell: OnceCell::new(),
        }
    }

    /// The person's extra paths and commit identity.
    pub fn with_person(mut self, person: Person) -> Self {
        self.person = person;
        self
    }

    /// The daemon's own directories, hidden from every sandboxed run.
    pub fn with_host_paths(mut self, hosts: Vec<HostPath>) -> Self {
        self.hosts = hosts;
        self
    }

    async fn shell(&self) -> Result<&ShellActuator, ActError> {
        self.shell
            .get_or_try_init(|| async {
                // clone, not copy: the limits may grow fields that are not Copy.
                #[allow(clippy::clone_on_copy)]
                let (mode, limits) = (self.mode, self.limits.clone());
                let resources = self.resources;
                let hosts = self.hosts.clone();
                let person = self.person.clone();
                let built = tokio::task::spawn_blocking(move || match mode {
                    SandboxMode::Bwrap => ShellActuator::new(mode, limits),
                    // No sandbox: nothing to probe.
                    SandboxMode::Unsandboxed => ShellActuator::with_status(
                        mode,
                        limits,
                        crate::sandbox::probe::SandboxStatus::Unavailable {
                            reason: "not probed: sandbox = \"none\"".into(),
                            fix: "set sandbox = \"bwrap\"".into(),
                        },
                        crate::sandbox::bwrap::SystemLayout::probe(),
                    ),
                })
                .await
                .map_err(|e| ActError::Unavailable(format!("the sandbox probe failed: {e}")))?
                .with_resources(resources)
                .with_host_paths(hosts)
                .with_person(
                    &person.read_only,
                    &person.writable,
                    person.git_author,
                );
                let report = sandbox_report(&built);
                if built.mode() == SandboxMode::Bwrap {
                    tracing::info!("first shell action: {}", report.message);
                }
                Ok(built)
            })
            .await
    }
}

#[async_trait::async_trait]
impl Actuator for LazyShell {
    fn target(&self) -> &str {
        "shell"
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        self.shell().await?.execute(action, ctx).await
    }
}

/// What to tell the person about the shell sandbox at startup, without
/// running bwrap: whether it is on `PATH` (its trial run comes with the
/// first shell action, which fails closed with the reason if it fails).
fn startup_report(mode: SandboxMode) -> SandboxReport {
    match mode {
        SandboxMode::Unsandboxed => SandboxReport {
            available: true,
            message:
                "shell actions run WITHOUT a sandbox (sandbox = \"none\"); every result says so"
                    .into(),
        },
        SandboxMode::Bwrap => match crate::sandbox::probe::locate_bwrap() {
            Some(path) => SandboxReport {
                available: true,
                message: format!(
                    "sandbox: bubblewrap at {} (checked by a trial run at the first shell action)",
                    path.display()
                ),
            },
            None => SandboxReport {
                available: false,
                message: format!(
                    "shell actions are refused: bubblewrap (`bwrap`) was not found on PATH\nfix: {}",
                    crate::sandbox::probe::INSTALL_FIX
                ),
            },
        },
    }
}

/// What to tell the person about the shell sandbox once probed.
fn sandbox_report(shell: &ShellActuator) -> SandboxReport {
    let status = shell.sandbox_status();
    match shell.mode() {
        SandboxMode::Unsandboxed => SandboxReport {
            available: true,
            message:
                "shell actions run WITHOUT a sandbox (sandbox = \"none\"); every result says so"
                    .into(),
        },
        SandboxMode::Bwrap => SandboxReport {
            available: status.is_available(),
            message: if status.is_available() {
                status.describe()
            } else {
                format!("shell actions are refused: {}", status.describe())
            },
        },
    }
}
