//! The `passepartout` command: the daemon (`serve`), a headless turn
//! (`run`, `run --continue`), and the terminal side of sessions, skills,
//! plans and the audit log.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use std::io::Write as _;

use clap::{Args, Parser, Subcommand};
use passepartout::agent::{turn, Session};
use passepartout::cli_run::{TerminalApprover, TerminalSink};
use passepartout::config::{self, Config, Overrides};
use passepartout::protocol::acp;
use passepartout::sessions::Replay;

#[derive(Parser)]
#[command(
    name = "passepartout",
    version,
    about = "A local-first, safety-first LLM agent that lives beside Emacs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone, Default)]
struct ConfigFlags {
    /// Configuration file (default: $XDG_CONFIG_HOME/passepartout/config.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Use this one provider (base URL, e.g. http://127.0.0.1:8080/v1).
    #[arg(long, global = true)]
    provider_url: Option<String>,
    /// Wire format of --provider-url: openai or anthropic.
    #[arg(long, global = true)]
    provider_kind: Option<String>,
    /// Model name for the first provider.
    #[arg(long, global = true)]
    model: Option<String>,
    /// Most reason→act rounds in one turn.
    #[arg(long, global = true)]
    max_rounds: Option<u32>,
    /// Shell sandbox: bwrap (default) or none.
    #[arg(long, global = true)]
    sandbox: Option<String>,
    /// Directory for plans, the audit log and logs.
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Speak JSON-RPC (ACP) on stdin/stdout; what editors launch.
    Serve(ConfigFlags),
    /// Run one turn in the current directory and stream the answer.
    Run {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Continue the most recent session of this directory.
        #[arg(long = "continue", short = 'c')]
        continue_last: bool,
        /// What to ask.
        prompt: String,
    },
    /// Stored sessions: list, show ID, resume ID PROMPT.
    Sessions {
        #[command(flatten)]
        flags: ConfigFlags,
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Check or list skills.
    Skills {
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// Flight plans waiting for (or past) a decision: list, show ID,
    /// approve ID [--comment TEXT] [--edited FILE], reject ID [--comment TEXT].
    Plans {
        #[command(flatten)]
        flags: ConfigFlags,
        /// The plans subcommand and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
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

#[derive(Subcommand)]
enum SessionsCommand {
    /// Every stored session, most recently active first.
    List {
        /// Only sessions of the current directory.
        #[arg(long)]
        here: bool,
    },
    /// A session's transcript and totals.
    Show { id: String },
    /// Run one more turn in a stored session (in its directory).
    Resume { id: String, prompt: String },
}

#[derive(Subcommand)]
enum SkillsCommand {
    /// Check skill files (or directories of them); prints
    /// `file:line:col: severity: message` and fails on errors.
    Check {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Show the skills loaded for the current directory, and from where.
    List(ConfigFlags),
}

fn overrides(f: &ConfigFlags) -> Result<Overrides, config::ConfigError> {
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

fn init_logging(default: &str) {
    let filter = std::env::var("PASSEPARTOUT_LOG")
        .ok()
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    // Logs go to stderr only: stdout carries protocol frames.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

fn load_config(flags: &ConfigFlags) -> Result<Config, String> {
    let o = overrides(flags).map_err(|e| e.to_string())?;
    Config::load(&o).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("passepartout: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(flags) => serve(flags).await,
            Command::Run {
                flags,
                continue_last,
                prompt,
            } => {
                let which = if continue_last {
                    Which::Latest
                } else {
                    Which::New
                };
                run(flags, prompt, which).await
            }
            Command::Sessions { flags, command } => sessions(flags, command).await,
            Command::Skills {
                command: SkillsCommand::Check { paths },
            } => exit_code(passepartout::skills::check_command(
                &paths,
                &mut std::io::stdout(),
            )),
            Command::Skills {
                command: SkillsCommand::List(flags),
            } => skills_list(flags),
            Command::Plans { flags, args } => plans(flags, args),
            Command::Audit { flags, tail } => match load_config(&flags) {
                Ok(config) => {
                    let path = config.state_dir().join("audit.jsonl");
                    exit_code(passepartout::audit::print_command(
                        &path,
                        &mut std::io::stdout(),
                        tail,
                    ))
                }
                Err(e) => config_error(&e),
            },
        }
    })
}

async fn serve(flags: ConfigFlags) -> ExitCode {
    init_logging("warn,passepartout=info");
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    let env = match passepartout::setup::build_env(config) {
        Ok(env) => Arc::new(env),
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving on stdio");
    passepartout::server::serve_on(env, tokio::io::stdin(), tokio::io::stdout()).await;
    ExitCode::SUCCESS
}

/// Which session a headless turn runs in.
enum Which {
    New,
    /// The most recent session of the current directory.
    Latest,
    Id(String),
}

async fn run(flags: ConfigFlags, prompt: String, which: Which) -> ExitCode {
    init_logging("warn");
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    let env = match passepartout::setup::build_env(config) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    let cwd = match std::env::current_dir().and_then(|d| d.canonicalize()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("passepartout: cannot use the current directory: {e}");
            return ExitCode::from(2);
        }
    };
    let session = match open_session(&env, cwd, which) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    let (_, cancel) = session.begin_turn();
    let ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            ctrl_c.cancel();
        }
    });
    let result = turn::run_turn(
        &env,
        &session,
        prompt,
        Arc::new(TerminalSink),
        &TerminalApprover,
        cancel,
    )
    .await;
    println!();
    if session.journal().is_some() {
        let spent = session.spent();
        eprintln!(
            "session {} ({} tokens, {:.4} {} so far; continue with `passepartout run --continue PROMPT`)",
            session.id,
            spent.tokens(),
            spent.cost,
            passepartout::budget::CURRENCY
        );
    }
    match result {
        Ok(acp::StopReason::EndTurn) => ExitCode::SUCCESS,
        Ok(_) if session.stop_detail().as_deref() == Some(turn::BUDGET_STOP) => {
            eprintln!("passepartout: stopped by a budget (see the message above)");
            ExitCode::from(1)
        }
        Ok(other) => {
            eprintln!(
                "passepartout: the turn ended early: {}",
                stop_reason_text(&other)
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("passepartout: {e}");
            ExitCode::from(1)
        }
    }
}

/// The session a headless turn runs in: a new journaled one, the latest
/// of `cwd`, or a stored one by id (which keeps its own directory).
fn open_session(
    env: &passepartout::agent::AgentEnv,
    cwd: PathBuf,
    which: Which,
) -> Result<Session, String> {
    let Some(store) = &env.sessions else {
        return match which {
            Which::New => Ok(Session::new("run", cwd)),
            _ => Err("sessions are not stored ([sessions] persist = false)".into()),
        };
    };
    let id = match which {
        Which::New => {
            let id = passepartout::sessions::new_id(1);
            let journal = store.create(&id, &cwd).map_err(|e| e.to_string())?;
            return Ok(Session::new(id, cwd).with_journal(journal));
        }
        Which::Latest => match store.latest(&cwd) {
            Some(s) => s.id,
            None => {
                return Err(format!(
                    "no stored session in {}; run without --continue to start one",
                    cwd.display()
                ))
            }
        },
        Which::Id(id) => id,
    };
    let loaded = store.load(&id).map_err(|e| e.to_string())?;
    let journal = store.reopen(&id).map_err(|e| e.to_string())?;
    let dir = loaded.cwd.clone();
    Ok(Session::restored(loaded, dir, Some(journal)))
}

async fn sessions(flags: ConfigFlags, command: SessionsCommand) -> ExitCode {
    if let SessionsCommand::Resume { id, prompt } = command {
        return run(flags, prompt, Which::Id(id)).await;
    }
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let store = match passepartout::sessions::SessionStore::open(
        config.state_dir().join("sessions"),
        config.sessions.max_file_bytes,
    ) {
        Ok(s) => s,
        Err(e) => return config_error(&e.to_string()),
    };
    let mut out = std::io::stdout().lock();
    match command {
        SessionsCommand::List { here } => {
            let cwd = std::env::current_dir().and_then(|d| d.canonicalize()).ok();
            let list = store.list(if here { cwd.as_deref() } else { None });
            if list.is_empty() {
                let _ = writeln!(out, "no stored sessions in {}", store.dir().display());
            }
            for s in list {
                let _ = writeln!(
                    out,
                    "{}  {}  {} turns  {} tokens  {:.4} {}  {}  {}",
                    s.id,
                    s.updated_at,
                    s.turns,
                    s.input_tokens + s.output_tokens,
                    s.cost,
                    passepartout::budget::CURRENCY,
                    s.cwd.display(),
                    s.title.unwrap_or_default()
                );
            }
            ExitCode::SUCCESS
        }
        SessionsCommand::Show { id } => match store.load(&id) {
            Ok(l) => {
                let _ = writeln!(out, "session {} in {}", l.id, l.cwd.display());
                let _ = writeln!(
                    out,
                    "created {}, last active {}, {} turns, {} in / {} out tokens ({} cached), {:.4} {}\n",
                    l.created_at,
                    l.updated_at,
                    l.turns,
                    l.usage.input_tokens,
                    l.usage.output_tokens,
                    l.usage.cache_read_tokens,
                    l.cost,
                    passepartout::budget::CURRENCY
                );
                for item in &l.replay {
                    let _ = match item {
                        Replay::User(t) => writeln!(out, "> {}", t.replace('\n', "\n> ")),
                        Replay::Agent(t) => writeln!(out, "{t}"),
                        Replay::Thought(t) => writeln!(out, "({t})"),
                        Replay::Update(u) => match u["sessionUpdate"].as_str() {
                            Some("tool_call") => {
                                writeln!(out, "  ⚙ {}", u["title"].as_str().unwrap_or(""))
                            }
                            Some("tool_call_update") => match u["status"].as_str() {
                                Some(status @ ("completed" | "failed")) => {
                                    writeln!(out, "    {status}")
                                }
                                _ => Ok(()),
                            },
                            Some("agent_message_chunk") => {
                                writeln!(out, "{}", u["content"]["text"].as_str().unwrap_or(""))
                            }
                            _ => Ok(()),
                        },
                    };
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("passepartout: {e}");
                ExitCode::from(1)
            }
        },
        SessionsCommand::Resume { .. } => ExitCode::SUCCESS,
    }
}

fn stop_reason_text(r: &acp::StopReason) -> &'static str {
    match r {
        acp::StopReason::EndTurn => "end of turn",
        acp::StopReason::MaxTokens => "the model hit its output token limit",
        acp::StopReason::MaxTurnRequests => {
            "the round limit was reached (raise it with --max-rounds)"
        }
        acp::StopReason::Refusal => "the model refused",
        acp::StopReason::Cancelled => "cancelled",
        _ => "unknown reason",
    }
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn config_error(e: &str) -> ExitCode {
    eprintln!("passepartout: {e}");
    ExitCode::from(2)
}

fn skills_list(flags: ConfigFlags) -> ExitCode {
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let dirs = passepartout::skills::SkillDirs {
        builtin: config.builtin_skills,
        user: Some(config.user_skills_dir()),
        project: Some(cwd.join(".passepartout").join("skills")),
    };
    exit_code(passepartout::skills::list_command(
        &dirs,
        &mut std::io::stdout(),
    ))
}

fn plans(flags: ConfigFlags, args: Vec<String>) -> ExitCode {
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let store = passepartout::plans::store::PlanStore::new(config.state_dir().join("plans"));
    exit_code(passepartout::plans::cli::plans_command(
        &store,
        &args,
        &mut std::io::stdout(),
    ))
}
