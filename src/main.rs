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
        /// Session mode: read-only, ask or auto (default: `default_mode`
        /// in config.toml, else auto).
        #[arg(long)]
        mode: Option<passepartout::modes::Mode>,
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
    /// Check, list, trust or untrust skills.
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
    /// MCP servers from config.toml: `mcp list` starts them, shows their
    /// state and tools, and stops them.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Revert a checkpoint (an action's observed change) in the current
    /// directory: ID like `c12`, or the last applied one. Refuses, changing
    /// nothing, when the files changed since. An undo is itself a checkpoint.
    Undo {
        #[command(flatten)]
        flags: ConfigFlags,
        /// The checkpoint to undo (default: the last applied one).
        id: Option<String>,
        /// Undo a whole turn (all its checkpoints, all or nothing): TURN
        /// from `history`, default the last turn that changed the directory.
        #[arg(long, value_name = "TURN", num_args = 0..=1, default_missing_value = "last", conflicts_with = "id")]
        turn: Option<String>,
    },
    /// List the checkpoints of the current directory, newest first, with
    /// their effects.
    History {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Only the newest N.
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON (one object per line) instead of text.
        #[arg(long)]
        json: bool,
        /// Prune the store first (`[checkpoints] keep_records`, `keep_days`).
        #[arg(long)]
        prune: bool,
    },
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

#[derive(Subcommand)]
enum McpCommand {
    /// Start the configured MCP servers, list their state and tools, stop them.
    List(ConfigFlags),
    /// Trust a project's `.passepartout/config.toml` (its `[[mcp.servers]]`)
    /// with exactly its current content, after showing what it starts.
    Trust {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        /// The project directory or its `.passepartout/config.toml`
        /// (default: the current directory).
        path: Option<PathBuf>,
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
    /// Show the skills loaded for the current directory, and from where;
    /// untrusted project skills are marked and not loaded.
    List(ConfigFlags),
    /// Trust project skills (default: every file in ./.passepartout/skills)
    /// with exactly their current content, after showing what each adds.
    Trust {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        paths: Vec<PathBuf>,
    },
    /// Forget the trust in project skills (default: every file in
    /// ./.passepartout/skills).
    Untrust {
        #[command(flatten)]
        flags: ConfigFlags,
        paths: Vec<PathBuf>,
    },
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

fn load_config(flags: &ConfigFlags) -> Result<Config, String> {
    let o = overrides(flags).map_err(|e| e.to_string())?;
    Config::load(&o).map_err(|e| e.to_string())
}

/// The configuration, with a provider discovered when it names none.
async fn load_discovered_config(flags: &ConfigFlags) -> Result<Config, String> {
    let mut config = load_config(flags)?;
    passepartout::setup::discover_if_unconfigured(&mut config)
        .await
        .map_err(|e| e.to_string())?;
    Ok(config)
}

async fn providers(flags: ConfigFlags, json: bool) -> ExitCode {
    passepartout::logging::init_stderr("warn");
    match load_discovered_config(&flags).await {
        Ok(config) => exit_code(
            passepartout::session_config::providers_command(&config, json, &mut std::io::stdout())
                .await,
        ),
        Err(e) => config_error(&e),
    }
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
                mode,
                prompt,
            } => {
                let which = if continue_last {
                    Which::Latest
                } else {
                    Which::New
                };
                run(flags, prompt, which, mode).await
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
            Command::Skills {
                command: SkillsCommand::Trust { flags, yes, paths },
            } => match skill_dirs(&flags) {
                Ok(dirs) => exit_code(passepartout::skills::trust_command(
                    &dirs,
                    &paths,
                    yes,
                    &mut std::io::stdin().lock(),
                    &mut std::io::stdout(),
                )),
                Err(e) => config_error(&e),
            },
            Command::Skills {
                command: SkillsCommand::Untrust { flags, paths },
            } => match skill_dirs(&flags) {
                Ok(dirs) => exit_code(passepartout::skills::untrust_command(
                    &dirs,
                    &paths,
                    &mut std::io::stdout(),
                )),
                Err(e) => config_error(&e),
            },
            Command::Plans { flags, args } => plans(flags, args),
            Command::Mcp {
                command: McpCommand::List(flags),
            } => mcp_list(flags).await,
            Command::Mcp {
                command: McpCommand::Trust { flags, yes, path },
            } => mcp_trust(flags, yes, path),
            Command::Undo { flags, id, turn } => undo(flags, id, turn),
            Command::History {
                flags,
                limit,
                json,
                prune,
            } => history(flags, limit, json, prune),
            Command::Providers { flags, json } => providers(flags, json).await,
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
    let config = match load_discovered_config(&flags).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    // Warnings to stderr (ACP clients show each stderr line as an error),
    // everything else to the log file.
    let log_path = config
        .log_file
        .clone()
        .unwrap_or_else(|| passepartout::logging::default_log_file(&config.state_dir()));
    let (log_guard, opened) = passepartout::logging::init_daemon(&log_path);
    if let Err(e) = opened {
        tracing::warn!("{e}; logging to stderr only");
    }
    if let Some(report) = config.discovery.as_ref().map(|d| d.report()) {
        match report.announcement() {
            Some(text) => tracing::info!("{text}"),
            // Not fatal, and not for stderr (ACP clients show every stderr
            // line as an error): the editor may send providers or a server
            // may start; a prompt that finds none fails with this same list.
            None => tracing::info!("{}", report.failure_message()),
        }
    }
    let env = match passepartout::setup::build_env(config) {
        Ok(env) => Arc::new(env),
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving on stdio");
    let audit = env.audit.clone();
    passepartout::server::serve_on(env, tokio::io::stdin(), tokio::io::stdout()).await;
    if let Some(log) = audit {
        // Records queued by the last turn reach the disk before we exit.
        log.flush();
    }
    tracing::info!("stopped");
    // `exit` runs no destructors: write out the queued log lines first.
    drop(log_guard);
    // Exit now: the runtime would otherwise wait for its blocking stdin
    // reader, and nothing is left to do.
    std::process::exit(0)
}

/// Which session a headless turn runs in.
enum Which {
    New,
    /// The most recent session of the current directory.
    Latest,
    Id(String),
}

async fn run(
    flags: ConfigFlags,
    prompt: String,
    which: Which,
    mode: Option<passepartout::modes::Mode>,
) -> ExitCode {
    passepartout::logging::init_stderr("warn");
    let config = match load_discovered_config(&flags).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(report) = config.discovery.as_ref().map(|d| d.report()) {
        match report.announcement() {
            Some(text) => eprintln!("passepartout: {text}"),
            None => {
                eprintln!("passepartout: {}", report.failure_message());
                return ExitCode::from(2);
            }
        }
    }
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
    if let Some(mode) = mode {
        session.set_mode(mode);
    }
    if let Err(e) = env.mcp.start_session(&session.id, &session.cwd, &[]).await {
        eprintln!("passepartout: {e}");
    }
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
    env.mcp.shutdown().await;
    if let Some(log) = &env.audit {
        // The records of this turn reach the disk before the process ends.
        log.flush();
    }
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
            Which::New => Ok(Session::new("run", cwd).with_mode(env.config.default_mode)),
            _ => Err("sessions are not stored ([sessions] persist = false)".into()),
        };
    };
    let id = match which {
        Which::New => {
            let id = passepartout::sessions::new_id(1);
            let journal = store.create(&id, &cwd).map_err(|e| e.to_string())?;
            return Ok(Session::new(id, cwd)
                .with_mode(env.config.default_mode)
                .with_journal(journal));
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
    let recorded = loaded.mode;
    let session = Session::restored(loaded, dir, Some(journal));
    // Never switched: the configured default, as for a new session.
    Ok(match recorded {
        Some(_) => session,
        None => session.with_mode(env.config.default_mode),
    })
}

async fn sessions(flags: ConfigFlags, command: SessionsCommand) -> ExitCode {
    if let SessionsCommand::Resume { id, prompt } = command {
        return run(flags, prompt, Which::Id(id), None).await;
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

/// The skill directories and trust store for the current directory.
fn skill_dirs(flags: &ConfigFlags) -> Result<passepartout::skills::SkillDirs, String> {
    let config = load_config(flags)?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Ok(passepartout::skills::SkillDirs {
        builtin: config.builtin_skills,
        user: Some(config.user_skills_dir()),
        project: Some(passepartout::skills::project_dir(&cwd)),
        trust: Some(config.trust_file()),
        project_auto_approval: config.trust_project_tool_approval,
    })
}

fn skills_list(flags: ConfigFlags) -> ExitCode {
    match skill_dirs(&flags) {
        Ok(dirs) => exit_code(passepartout::skills::list_command(
            &dirs,
            &mut std::io::stdout(),
        )),
        Err(e) => config_error(&e),
    }
}

async fn mcp_list(flags: ConfigFlags) -> ExitCode {
    passepartout::logging::init_stderr("warn");
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    exit_code(
        passepartout::mcp::list_command(
            &config.mcp,
            config.trust_file(),
            config.trust_project_tool_approval,
            &cwd,
            &mut std::io::stdout(),
        )
        .await,
    )
}

fn mcp_trust(flags: ConfigFlags, yes: bool, path: Option<PathBuf>) -> ExitCode {
    passepartout::logging::init_stderr("warn");
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let given = path.map_or(cwd.clone(), |p| cwd.join(p));
    // The project file names its project: <project>/.passepartout/config.toml.
    let project = if given.is_dir() {
        given
    } else {
        match given.parent().and_then(std::path::Path::parent) {
            Some(p) if given.ends_with(passepartout::mcp::project::PROJECT_CONFIG) => {
                p.to_path_buf()
            }
            _ => {
                eprintln!(
                    "passepartout: {} is neither a project directory nor its {}",
                    given.display(),
                    passepartout::mcp::project::PROJECT_CONFIG
                );
                return ExitCode::from(2);
            }
        }
    };
    exit_code(passepartout::mcp::project::trust_command(
        &project,
        &config.trust_file(),
        config.trust_project_tool_approval,
        yes,
        &mut std::io::stdin().lock(),
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

fn current_dir() -> Result<PathBuf, ExitCode> {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| {
            eprintln!("passepartout: cannot use the current directory: {e}");
            ExitCode::from(2)
        })
}

fn undo(flags: ConfigFlags, id: Option<String>, turn: Option<String>) -> ExitCode {
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let cwd = match current_dir() {
        Ok(d) => d,
        Err(code) => return code,
    };
    let origin = passepartout::checkpoint::Origin {
        session_id: "cli".into(),
        tool_call_id: String::new(),
        tool: "undo".into(),
        turn: None,
    };
    if let Some(turn) = turn {
        let turn = Some(turn).filter(|t| t != "last");
        return match passepartout::checkpoint::undo_turn(
            &config.state_dir(),
            &config.checkpoints,
            &cwd,
            turn.as_deref(),
            &origin,
        ) {
            Ok((turn, undone, undo)) => {
                let ids: Vec<&str> = undone.iter().map(|c| c.id.as_str()).collect();
                match undo {
                    Some(u) => {
                        if let Ok(log) = passepartout::audit::AuditLog::open(
                            config.state_dir().join("audit.jsonl"),
                        ) {
                            let _ = log.append(&passepartout::audit::AuditRecord::effect(&u));
                        }
                        println!("undid turn {turn} ({}): {}", ids.join(", "), u.summary());
                    }
                    None => println!(
                        "undid turn {turn} ({}): nothing left to change",
                        ids.join(", ")
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("passepartout: {e}");
                ExitCode::from(1)
            }
        };
    }
    match passepartout::checkpoint::undo(
        &config.state_dir(),
        &config.checkpoints,
        &cwd,
        id.as_deref(),
        &origin,
    ) {
        Ok((undone, undo)) => {
            if let Ok(log) =
                passepartout::audit::AuditLog::open(config.state_dir().join("audit.jsonl"))
            {
                let _ = log.append(&passepartout::audit::AuditRecord::effect(&undo));
            }
            println!("undid {}: {}", undone.id, undo.summary());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("passepartout: {e}");
            ExitCode::from(1)
        }
    }
}

fn history(flags: ConfigFlags, limit: Option<usize>, json: bool, prune: bool) -> ExitCode {
    let config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    let cwd = match current_dir() {
        Ok(d) => d,
        Err(code) => return code,
    };
    if prune {
        match passepartout::checkpoint::prune(&config.state_dir(), &config.checkpoints, &cwd) {
            Ok(ids) => eprintln!("pruned {} checkpoint(s)", ids.len()),
            Err(e) => {
                eprintln!("passepartout: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let list = match passepartout::checkpoint::history(
        &config.state_dir(),
        &config.checkpoints,
        &cwd,
        limit,
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("passepartout: {e}");
            return ExitCode::from(1);
        }
    };
    if list.is_empty() {
        println!("no checkpoints for {}", cwd.display());
    }
    for cp in list {
        if json {
            println!("{}", cp.wire());
            continue;
        }
        let undoes = cp
            .undoes
            .as_deref()
            .map(|u| format!(" (undoes {u})"))
            .unwrap_or_default();
        println!(
            "{}  {}  {}  {}  {}{undoes}  {}",
            cp.id,
            cp.status.as_str(),
            cp.created_at,
            cp.turn.as_deref().unwrap_or("-"),
            cp.tool,
            cp.summary()
        );
        for c in cp.effect.changes.iter().take(10) {
            let mark = match c.kind {
                passepartout::checkpoint::ChangeKind::Created => '+',
                passepartout::checkpoint::ChangeKind::Modified => '~',
                passepartout::checkpoint::ChangeKind::Deleted => '-',
            };
            println!("    {mark} {}", c.path);
        }
        if cp.effect.changes.len() > 10 {
            println!("    … {} more", cp.effect.changes.len() - 10);
        }
    }
    ExitCode::SUCCESS
}
