//! `passepartout run` (and `sessions resume`): one headless turn on the
//! terminal. The answer streams to stdout; reasoning, tool calls and their
//! results go to stderr, so the answer can be piped. Approvals are asked on
//! the terminal when there is one.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{load_discovered_config, CliError, ConfigFlags};
use crate::agent::{turn, AgentEnv, Session};
use crate::agent::{ApprovalOutcome, ApprovalRequest, Approver, TurnSink};
use crate::modes::Mode;
use crate::protocol::{acp, SessionStatus};

/// `passepartout run [--continue] [--mode MODE] PROMPT`.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Continue the most recent session of this directory.
    #[arg(long = "continue", short = 'c')]
    pub continue_last: bool,
    /// Session mode: read-only, ask or auto (default: `default_mode`
    /// in config.toml, else auto).
    #[arg(long)]
    pub mode: Option<Mode>,
    /// What to ask.
    pub prompt: String,
}

/// Which session a headless turn runs in.
pub enum Which {
    New,
    /// The most recent session of the current directory.
    Latest,
    Id(String),
}

/// `passepartout run`.
pub async fn command(args: RunArgs) -> ExitCode {
    let which = if args.continue_last {
        Which::Latest
    } else {
        Which::New
    };
    run(args.flags, args.prompt, which, args.mode).await
}

/// One turn in the session `which` names, on the terminal.
pub async fn run(flags: ConfigFlags, prompt: String, which: Which, mode: Option<Mode>) -> ExitCode {
    crate::logging::init_stderr("warn");
    let config = match load_discovered_config(&flags).await {
        Ok(c) => c,
        Err(e) => return e.report(),
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
    let env = match crate::setup::build_env(config) {
        Ok(env) => env,
        Err(e) => return CliError::from(e).report(),
    };
    let session = match super::current_dir().and_then(|cwd| open_session(&env, cwd, which)) {
        Ok(s) => s,
        Err(e) => return e.report(),
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
            crate::budget::CURRENCY
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
fn open_session(env: &AgentEnv, cwd: PathBuf, which: Which) -> Result<Session, CliError> {
    let Some(store) = &env.sessions else {
        return match which {
            Which::New => Ok(Session::new("run", cwd).with_mode(env.config.default_mode)),
            _ => Err(CliError::SessionsNotStored),
        };
    };
    let id = match which {
        Which::New => {
            let id = crate::sessions::new_id(1);
            let journal = store.create(&id, &cwd)?;
            return Ok(Session::new(id, cwd)
                .with_mode(env.config.default_mode)
                .with_journal(journal));
        }
        Which::Latest => match store.latest(&cwd) {
            Some(s) => s.id,
            None => return Err(CliError::NoStoredSession(cwd)),
        },
        Which::Id(id) => id,
    };
    let loaded = store.load(&id)?;
    let journal = store.reopen(&id)?;
    let dir = loaded.cwd.clone();
    let recorded = loaded.mode;
    let session = Session::restored(loaded, dir, Some(journal));
    // Never switched: the configured default, as for a new session.
    Ok(match recorded {
        Some(_) => session,
        None => session.with_mode(env.config.default_mode),
    })
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

/// Streams the answer to stdout and the rest to stderr.
pub struct TerminalSink;

fn text_of(chunk: &acp::ContentChunk) -> String {
    match &chunk.content {
        acp::ContentBlock::Text(t) => t.text.clone(),
        _ => String::new(),
    }
}

impl TurnSink for TerminalSink {
    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        None // stdout writes block by themselves
    }
    fn update(&self, update: acp::SessionUpdate) {
        match update {
            acp::SessionUpdate::AgentMessageChunk(c) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text_of(&c).as_bytes());
                let _ = out.flush();
            }
            acp::SessionUpdate::AgentThoughtChunk(c) => eprint!("{}", text_of(&c)),
            acp::SessionUpdate::ToolCall(call) => eprintln!("\n⚙ {}", call.title),
            acp::SessionUpdate::ToolCallUpdate(u) => {
                if let Some(status) = u.fields.status {
                    let mark = match status {
                        acp::ToolCallStatus::Completed => "✓",
                        acp::ToolCallStatus::Failed => "✗",
                        _ => return,
                    };
                    let first =
                        u.fields
                            .content
                            .as_ref()
                            .and_then(|c| c.first())
                            .map(|c| match c {
                                acp::ToolCallContent::Content(inner) => match &inner.content {
                                    acp::ContentBlock::Text(t) => {
                                        t.text.lines().next().unwrap_or("").to_string()
                                    }
                                    _ => String::new(),
                                },
                                _ => String::new(),
                            });
                    eprintln!("  {mark} {}", first.unwrap_or_default());
                }
            }
            _ => {}
        }
    }

    fn status(&self, _status: SessionStatus) {}
}

/// Asks on the terminal when there is one; otherwise rejects with a reason
/// the model (and the log) can read.
pub struct TerminalApprover;

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        if !std::io::stdin().is_terminal() {
            return ApprovalOutcome::Rejected {
                comment: Some("this action needs a person's approval and `passepartout run` has no terminal to ask on; run it in Emacs (M-x passepartout) or interactively".into()),
                by: "run".into(),
            };
        }
        eprintln!("\nApproval needed for {}:", request.action.tool);
        eprintln!(
            "{}",
            serde_json::to_string_pretty(&request.action.effect).unwrap_or_default()
        );
        for v in &request.trace {
            eprintln!("  {} {}: {}", v.decision, v.gate, v.reason);
        }
        eprint!("Run it? [y/N] ");
        let answer = tokio::select! {
            _ = cancel.cancelled() => return ApprovalOutcome::Cancelled,
            line = tokio::task::spawn_blocking(|| {
                let mut s = String::new();
                std::io::stdin().read_line(&mut s).map(|_| s)
            }) => line,
        };
        match answer {
            Ok(Ok(line)) if matches!(line.trim(), "y" | "Y" | "yes") => {
                let hash = request.action.content_hash();
                ApprovalOutcome::Approved {
                    action: Box::new(request.action),
                    hash,
                    by: "terminal".into(),
                }
            }
            _ => ApprovalOutcome::Rejected {
                comment: None,
                by: "terminal".into(),
            },
        }
    }
}
