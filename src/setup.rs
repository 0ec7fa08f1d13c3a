//! Assembling a working agent from a [`Config`]: providers, toolsets,
//! gates, actuators. Shared by `serve` and `run`.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::actuators::files::FilesActuator;
use crate::actuators::shell::{SandboxMode, ShellActuator};
use crate::actuators::ActuatorRegistry;
use crate::agent::{AgentEnv, Toolset, ToolsetSource};
use crate::config::{Config, SandboxSetting};
use crate::gates::engine::GateEngine;
use crate::protocol::SandboxReport;
use crate::sandbox::runner::RunLimits;
use crate::tools::{builtin, ToolRegistry};

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("provider configuration: {0}")]
    Provider(#[from] crate::llm::ProviderError),
}

/// Toolsets from the built-in Rust tools only.
pub struct BuiltinToolsets {
    gates: Arc<GateEngine>,
}

impl ToolsetSource for BuiltinToolsets {
    fn toolset(&self, _cwd: &Path, _user_message: &str) -> Toolset {
        let mut tools = ToolRegistry::new();
        builtin::register(&mut tools);
        Toolset {
            tools,
            prompt: String::new(),
            gates: self.gates.clone(),
        }
    }
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
    let toolsets = Arc::new(BuiltinToolsets {
        gates: Arc::new(GateEngine::with_builtin_gates()),
    });
    Ok(AgentEnv {
        config,
        models: RwLock::new(Arc::new(cascade)),
        toolsets,
        actuators,
        sandbox,
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
