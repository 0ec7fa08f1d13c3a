//! The `passepartout` command line: the clap tree of every subcommand and
//! the dispatch from a parsed command to the code that does it.
//!
//! This is the outermost layer: it loads the configuration the flags name,
//! calls into the library, prints to the terminal and turns the outcome into
//! an exit code (0 ok, 1 failed, 2 bad usage or configuration). Nothing
//! below it prints to a terminal or knows about exit codes, so the daemon,
//! the RPC surface and the tests can use the same code. `src/main.rs` only
//! parses and calls [`run`]. One file per subcommand family; each owns its
//! part of the clap tree.

pub mod checkpoints;
pub mod mcp;
pub mod plans;
pub mod run;
pub mod serve;
pub mod sessions;
pub mod skills;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Config, ConfigError, Overrides};
use crate::setup::SetupError;

/// The whole command line.
#[derive(Parser, Debug)]
#[command(
    name = "passepartout",
    version,
    about = "A local-first, safety-first LLM agent that lives beside Emacs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// This process's command line. `passepartout serve` alone, what
    /// editors launch, is known without building clap's tree of every
    /// subcommand (a fifth of a millisecond before the daemon's first
    /// reply); anything else goes through clap.
    pub fn from_env() -> Cli {
        let mut args = std::env::args_os().skip(1);
        match (args.next(), args.next()) {
            (Some(only), None) if only == "serve" => Cli {
                command: Command::Serve(ConfigFlags::default()),
            },
            _ => Cli::parse(),
        }
    }
}

/// The flags that choose and override the configuration, accepted by every
/// subcommand that reads it.
#[derive(Args, Clone, Debug, Default)]
pub struct ConfigFlags {
    /// Configuration file (default: $XDG_CONFIG_HOME/passepartout/config.toml).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Use this one provider (base URL, e.g. http://127.0.0.1:8080/v1).
    #[arg(long, global = true)]
    pub provider_url: Option<String>,
    /// Wire format of --provider-url: openai, anthropic or openai-responses.
    #[arg(long, global = true)]
    pub provider_kind: Option<String>,
    /// Model name for the first provider.
    #[arg(long, global = true)]
    pub model: Option<String>,
    /// Most reason→act rounds in one turn.
    #[arg(long, global = true)]
    pub max_rounds: Option<u32>,
    /// Shell sandbox: bwrap (default) or none.
    #[arg(long, global = true)]
    pub sandbox: Option<String>,
    /// Directory for plans, the audit log and logs.
    #[arg(long, global = true)]
    pub state_dir: Option<PathBuf>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Speak JSON-RPC (ACP) on stdin/stdout; what editors launch.
    Serve(ConfigFlags),
    /// Run one turn in the current directory and stream the answer.
    Run(run::RunArgs),
    /// Stored sessions: list, show ID, resume ID PROMPT.
    Sessions(sessions::SessionsArgs),
    /// Check, list, trust or untrust skills.
    Skills {
        #[command(subcommand)]
        command: skills::SkillsCommand,
    },
    /// Flight plans waiting for (or past) a decision: list, show, approve
    /// (as written or edited) or reject them.
    Plans(plans::PlansArgs),
    /// MCP servers from config.toml: `mcp list` starts them, shows their
    /// state and tools, and stops them; `mcp trust` trusts a project's.
    Mcp {
        #[command(subcommand)]
        command: mcp::McpCommand,
    },
    /// Revert a checkpoint (an action's observed change) in the current
    /// directory: ID like `c12`, or the last applied one. Refuses, changing
    /// nothing, when the files changed since. An undo is itself a checkpoint.
    Undo(checkpoints::UndoArgs),
    /// List the checkpoints of the current directory, newest first, with
    /// their effects.
    History(checkpoints::HistoryArgs),
    /// The model providers: the configured ones, or (none configured) what
    /// discovery finds — every candidate, found or not and why — each with
    /// the models its server lists.
    Providers {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show the audit log.
    Audit {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Only the last N records.
        #[arg(long)]
        tail: Option<usize>,
    },
}

/// Why a command could not get as far as doing its work. Each is reported
/// as `passepartout: …` on stderr with exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Sessions(#[from] crate::sessions::StoreError),
    #[error("sessions are not stored ([sessions] persist = false)")]
    SessionsNotStored,
    #[error("no stored session in {}; run without --continue to start one", .0.display())]
    NoStoredSession(PathBuf),
    #[error("cannot use the current directory: {0}")]
    CurrentDir(std::io::Error),
    #[error("{} is neither a project directory nor its {}", .0.display(), crate::mcp::project::PROJECT_CONFIG)]
    NotAProject(PathBuf),
}

impl CliError {
    /// Report on stderr; the exit code for a command that could not start.
    pub fn report(&self) -> ExitCode {
        eprintln!("passepartout: {self}");
        ExitCode::from(2)
    }
}

/// Run a parsed command to its exit code.
pub async fn run(cli: Cli) -> ExitCode {
    let code = dispatch(cli).await;
    crate::logging::flush_cli();
    code
}

async fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(flags) => serve::serve(flags).await,
        Command::Run(args) => run::command(args).await,
        Command::Sessions(args) => sessions::command(args).await,
        Command::Skills { command } => skills::command(command),
        Command::Plans(args) => plans::command(args),
        Command::Mcp { command } => mcp::command(command).await,
        Command::Undo(args) => checkpoints::undo(args),
        Command::History(args) => checkpoints::history(args),
        Command::Providers { flags, json } => providers(flags, json).await,
        Command::Audit { flags, tail } => match load_config(&flags) {
            Ok(config) => {
                let path = config.state().audit_log();
                exit_code(crate::audit::print_command(
                    &path,
                    &mut std::io::stdout(),
                    tail,
                ))
            }
            Err(e) => e.report(),
        },
    }
}

async fn providers(flags: ConfigFlags, json: bool) -> ExitCode {
    crate::logging::init_cli();
    match load_discovered_config(&flags).await {
        Ok(config) => exit_code({
            log_to_file(&config);
            crate::session_config::providers_command(&config, json, &mut std::io::stdout()).await
        }),
        Err(e) => e.report(),
    }
}

/// The configuration overrides the flags give.
pub fn overrides(f: &ConfigFlags) -> Result<Overrides, ConfigError> {
    Ok(Overrides {
        config_file: f.config.clone(),
        provider_url: f.provider_url.clone(),
        provider_kind: f
            .provider_kind
            .as_deref()
            .map(config::parse_kind)
            .transpose()?,
        model: f.model.clone(),
        api_key: None,
        max_rounds: f.max_rounds,
        sandbox: f
            .sandbox
            .as_deref()
            .map(config::parse_sandbox)
            .transpose()?,
        state_dir: f.state_dir.clone(),
    })
}

/// Keep a one-shot command's full log in the log file `config` names
/// (see [`crate::logging::init_cli`]).
pub fn log_to_file(config: &Config) {
    let path = config
        .log_file
        .clone()
        .unwrap_or_else(|| crate::logging::default_log_file(&config.state_dir()));
    if let Err(e) = crate::logging::cli_log_to(&path) {
        tracing::warn!("{e}; this command's log is not kept");
    }
}

/// The configuration the flags name.
pub fn load_config(flags: &ConfigFlags) -> Result<Config, CliError> {
    Ok(Config::load(&overrides(flags)?)?)
}

/// The configuration, with a provider discovered when it names none.
pub async fn load_discovered_config(flags: &ConfigFlags) -> Result<Config, CliError> {
    let mut config = load_config(flags)?;
    crate::setup::discover_if_unconfigured(&mut config).await?;
    Ok(config)
}

/// The current directory, canonical (checkpoints and sessions key on it).
pub fn current_dir() -> Result<PathBuf, CliError> {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(CliError::CurrentDir)
}

/// A library command's status as the process exit code.
pub fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_tree_is_consistent_and_every_subcommand_has_help() {
        Cli::command().debug_assert();
        fn walk(cmd: &clap::Command, path: &str) {
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                assert!(sub.get_about().is_some(), "`{name}` has no help text");
                walk(sub, &name);
            }
        }
        walk(&Cli::command(), "passepartout");
    }

    #[test]
    fn bare_serve_parses_to_what_the_shortcut_gives() {
        // `Cli::from_env` answers `serve` alone without clap: clap must
        // agree (a default or an environment variable added to a flag
        // would make them differ).
        let parsed = Cli::try_parse_from(["passepartout", "serve"]).unwrap();
        let shortcut = Cli {
            command: Command::Serve(ConfigFlags::default()),
        };
        assert_eq!(format!("{parsed:?}"), format!("{shortcut:?}"));
    }

    #[test]
    fn global_config_flags_reach_every_subcommand() {
        let cli = Cli::try_parse_from(["passepartout", "plans", "list", "--state-dir", "/tmp/x"])
            .unwrap();
        match cli.command {
            Command::Plans(args) => {
                assert_eq!(args.flags.state_dir, Some(PathBuf::from("/tmp/x")));
            }
            other => panic!("{other:?}"),
        }
    }
}
