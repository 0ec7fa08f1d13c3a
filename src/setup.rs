//! Assembling a working agent from a [`Config`]: providers, toolsets,
//! gates, actuators. Shared by `serve` and `run`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::actuators::emacs::{EditorLink, EmacsActuator};
use crate::actuators::files::FilesActuator;
use crate::actuators::memex::MemexActuator;
use crate::actuators::shell::{SandboxMode, ShellActuator};
use crate::actuators::system::SystemActuator;
use crate::actuators::ActuatorRegistry;
use crate::agent::AgentEnv;
use crate::audit::AuditLog;
use crate::config::{Config, SandboxSetting};
use crate::protocol::SandboxReport;
use crate::sandbox::runner::RunLimits;
use crate::toolsets::{SkillSources, SkillToolsets};

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("provider configuration: {0}")]
    Provider(#[from] crate::llm::ProviderError),
}

/// Build the agent environment.
pub fn build_env(config: Config) -> Result<AgentEnv, SetupError> {
    // reqwest is built without a default crypto provider: install ring's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cascade = crate::llm::config::build_cascade(&config.providers)?;
    let mut actuators = ActuatorRegistry::new();
    actuators.register(Arc::new(FilesActuator));
    let mode = match config.sandbox {
        SandboxSetting::Bwrap => SandboxMode::Bwrap,
        SandboxSetting::None => SandboxMode::Unsandboxed,
    };
    let limits = RunLimits {
        timeout: Duration::from_secs(config.shell_timeout_secs),
        output_cap: config.output_cap_bytes,
    };
    let shell = ShellActuator::new(mode, limits);
    let sandbox = sandbox_report(&shell);
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
    let memex_dir = config.memex_dir();
    actuators.register(Arc::new(MemexActuator::new(memex_dir)));
    let toolsets = Arc::new(SkillToolsets::new(SkillSources {
        builtin: config.builtin_skills,
        user_dir: Some(config.user_skills_dir()),
        policy_file: Some(config.policy_file()),
    }));
    let audit_path = config.state_dir().join("audit.jsonl");
    let audit = match AuditLog::open(&audit_path) {
        Ok(log) => Some(Arc::new(log)),
        Err(e) => {
            tracing::error!(
                "cannot open the audit log {}: {e}; actions will not be audited",
                audit_path.display()
            );
            None
        }
    };
    let state = config.state_dir();
    let accounts = Arc::new(crate::budget::Accounts::new(
        config.budget.clone(),
        crate::budget::Prices::new(config.prices.clone()),
        Some(state.join("usage")),
    ));
    let sessions = if config.sessions.persist {
        match crate::sessions::SessionStore::open(
            state.join("sessions"),
            config.sessions.max_file_bytes,
        ) {
            Ok(store) => Some(Arc::new(store)),
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
    })
}

/// What to tell the person about the shell sandbox.
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
