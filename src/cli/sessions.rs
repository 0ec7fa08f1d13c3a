//! `passepartout sessions list | show ID | prune | resume ID PROMPT`: the stored
//! sessions (`sessions/` in the state directory) from a terminal.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::run::{run, Which};
use super::{load_config, CliError, ConfigFlags};
use crate::sessions::{Replay, SessionStore};
use crate::util::terminal::{escape_line, escape_text};

/// `passepartout sessions …`.
#[derive(Args, Debug)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    #[command(subcommand)]
    pub command: SessionsCommand,
}

/// The `sessions` subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Every stored session, most recently active first.
    List {
        /// Only sessions of the current directory.
        #[arg(long)]
        here: bool,
    },
    /// A session's transcript and totals.
    Show {
        /// The session id (from `sessions list`).
        id: String,
    },
    /// Remove the oldest journals until the rest fit the `[sessions]`
    /// quota (never an open session or the newest `keep_newest`), and say
    /// what was freed.
    Prune,
    /// Run one more turn in a stored session (in its directory).
    Resume {
        /// The session id (from `sessions list`).
        id: String,
        /// What to ask.
        prompt: String,
    },
}

/// Run a `sessions` subcommand.
pub async fn command(args: SessionsArgs) -> ExitCode {
    let SessionsArgs { flags, command } = args;
    if let SessionsCommand::Resume { id, prompt } = command {
        return run(flags, prompt, Which::Id(id), None).await;
    }
    let store = match load_config(&flags).and_then(|config| {
        Ok(
            SessionStore::open(config.state().sessions(), config.sessions.max_file_bytes)?
                .with_quota(config.sessions.quota()),
        )
    }) {
        Ok(s) => s,
        Err(e) => return e.report(),
    };
    let mut out = std::io::stdout().lock();
    match command {
        SessionsCommand::List { here } => {
            let cwd = super::current_dir().ok();
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
                    crate::budget::CURRENCY,
                    escape_line(&s.cwd.to_string_lossy()),
                    escape_line(&s.title.unwrap_or_default())
                );
            }
            ExitCode::SUCCESS
        }
        SessionsCommand::Show { id } => match store.load(&id) {
            Ok(l) => {
                let _ = writeln!(
                    out,
                    "session {} in {}",
                    escape_line(&l.id),
                    escape_line(&l.cwd.to_string_lossy())
                );
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
                    crate::budget::CURRENCY
                );
                // Everything below was written by the person, the model or
                // a tool: escaped, so none of it drives the terminal.
                for item in &l.replay {
                    let _ = match item {
                        Replay::User(t) => {
                            writeln!(out, "> {}", escape_text(t).replace('\n', "\n> "))
                        }
                        Replay::Agent(t) => writeln!(out, "{}", escape_text(t)),
                        Replay::Thought(t) => writeln!(out, "({})", escape_text(t)),
                        Replay::Update(u) => match u["sessionUpdate"].as_str() {
                            Some("tool_call") => writeln!(
                                out,
                                "  ⚙ {}",
                                escape_line(u["title"].as_str().unwrap_or(""))
                            ),
                            Some("tool_call_update") => match u["status"].as_str() {
                                Some(status @ ("completed" | "failed")) => {
                                    writeln!(out, "    {status}")
                                }
                                _ => Ok(()),
                            },
                            Some("agent_message_chunk") => writeln!(
                                out,
                                "{}",
                                escape_text(u["content"]["text"].as_str().unwrap_or(""))
                            ),
                            _ => Ok(()),
                        },
                    };
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("passepartout: {}", CliError::from(e));
                ExitCode::from(1)
            }
        },
        SessionsCommand::Prune => {
            let pruned = store.prune();
            for (id, len) in &pruned.removed {
                let _ = writeln!(
                    out,
                    "removed {}  {}",
                    escape_line(id),
                    crate::sessions::human_bytes(*len)
                );
            }
            let _ = writeln!(out, "{}", pruned.summary(&store.quota()));
            ExitCode::SUCCESS
        }
        SessionsCommand::Resume { .. } => ExitCode::SUCCESS,
    }
}
