//! `passepartout run` (and `sessions resume`): one headless turn on the
//! terminal. The answer streams to stdout; reasoning, tool calls and their
//! results go to stderr, so the answer can be piped. Everything the model
//! or a tool wrote is escaped first (`util::terminal`): it never drives the
//! terminal.
//!
//! An action that needs a person becomes a flight plan, the same object
//! every front end decides (`plans/`, docs/plans.md): written to the plan
//! store first, then
//! - with a terminal (stdin and stderr), shown as its Org rendering with
//!   the choice approve / reject / edit in `$EDITOR` (the edit is gated
//!   again; a denied edit leaves the plan pending and asks again) / leave
//!   it pending;
//! - without one, or when left pending: the gate and its reason and the
//!   exact `passepartout plans show|approve|reject ID` lines are printed,
//!   the turn stops, and `run` exits with [`EXIT_WAITING`].
//!
//! `run --continue` (and `sessions resume`) first runs the session's plans
//! approved since, through the normal plan path (`FlightDesk::run_approved`),
//! and tells the model what became of every plan its earlier turns left.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::{load_discovered_config, CliError, ConfigFlags};
use crate::action::Action;
use crate::agent::act::ActStatus;
use crate::agent::{turn, AgentEnv, Session};
use crate::agent::{ApprovalOutcome, ApprovalRequest, Approver, NotBegun, TurnSink};
use crate::approval::flight::{judge_edit, FlightDesk};
use crate::gates::{Decision, Judgement};
use crate::modes::Mode;
use crate::plans::evidence::decision_record;
use crate::plans::store::{EditDenied, StoreError};
use crate::plans::FlightPlan;
use crate::protocol::{acp, SessionStatus};
use crate::util::sync::lock;
use crate::util::terminal::{escape_line, escape_text};

/// The exit status of a `run` whose turn stopped at an action waiting for
/// a person (a flight plan left pending): decide it with `passepartout
/// plans approve|reject ID`, then `passepartout run --continue`.
pub const EXIT_WAITING: u8 = 3;

/// The client name decisions made at `run`'s terminal are recorded with.
const RUN_CLIENT: &str = "run";

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
    crate::logging::init_cli();
    let config = match load_discovered_config(&flags).await {
        Ok(c) => c,
        Err(e) => return e.report(),
    };
    super::log_to_file(&config);
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
        Ok(env) => Arc::new(env),
        Err(e) => return CliError::from(e).report(),
    };
    for r in crate::checkpoint::intent::take_reports() {
        eprintln!("passepartout: {}", r.message());
    }
    let earlier = !matches!(which, Which::New);
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
    let desk = FlightDesk::standalone(env.clone());
    let prompt = if earlier {
        discard_rejected_changes(&env, &desk, &session.id).await;
        run_approved_plans(&desk, &session.id).await;
        desk.with_news(&session.id, prompt)
    } else {
        prompt
    };
    let (_, cancel) = session.begin_turn();
    let ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            ctrl_c.cancel();
        }
    });
    let left_calls: LeftCalls = Arc::default();
    let approver = RunApprover {
        desk,
        env: env.clone(),
        terminal: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
        left_pending: Mutex::default(),
        left_calls: left_calls.clone(),
    };
    let result = turn::run_turn(
        &env,
        &session,
        prompt,
        Arc::new(TerminalSink { left_calls }),
        &approver,
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
    let waiting = std::mem::take(&mut *lock(&approver.left_pending));
    if !waiting.is_empty() {
        let store = &approver.desk.store;
        for plan in &waiting {
            let text = waiting_text(plan, &store.org_path(&plan.id));
            eprint!("{}", store.shown(plan, &text));
        }
        eprintln!(
            "passepartout: {} waiting for a person (exit status {EXIT_WAITING}); once decided, \
             `passepartout run --continue PROMPT` runs what was approved and tells the model \
             what happened",
            if waiting.len() == 1 {
                "one action is".to_string()
            } else {
                format!("{} actions are", waiting.len())
            }
        );
        return ExitCode::from(EXIT_WAITING);
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
pub struct TerminalSink {
    /// The calls whose plans were left for a person: their end is shown
    /// as waiting, not as a failure.
    pub left_calls: LeftCalls,
}

/// Tool call id → the id of the flight plan left pending for it.
pub type LeftCalls = Arc<Mutex<std::collections::BTreeMap<String, String>>>;

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
                let _ = out.write_all(escape_text(&text_of(&c)).as_bytes());
                let _ = out.flush();
            }
            acp::SessionUpdate::AgentThoughtChunk(c) => eprint!("{}", escape_text(&text_of(&c))),
            acp::SessionUpdate::ToolCall(call) => eprintln!("\n⚙ {}", escape_line(&call.title)),
            acp::SessionUpdate::ToolCallUpdate(u) => {
                if let Some(status) = u.fields.status {
                    if let Some(plan) = lock(&self.left_calls).get(&u.tool_call_id.to_string()) {
                        eprintln!("  ⏸ waiting for a person: flight plan {plan}");
                        return;
                    }
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
                    eprintln!("  {mark} {}", escape_line(&first.unwrap_or_default()));
                }
            }
            _ => {}
        }
    }

    fn status(&self, _status: SessionStatus) {}

    fn notify(&self, method: &str, params: serde_json::Value) {
        if method == crate::protocol::EXT_SESSION_COMPACTED {
            eprintln!("{}", compacted_line(&params));
        }
    }
}

/// The one line `run` prints when the history was compacted.
fn compacted_line(params: &serde_json::Value) -> String {
    let number = |key: &str| {
        params
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let how = if params.get("summary").is_some_and(|s| !s.is_null()) {
        "earlier turns summarised"
    } else {
        "old tool outputs trimmed"
    };
    format!(
        "⋯ compacted the conversation to fit the model's window: about {} → {} tokens \
         (window {}; {how})",
        number("tokensBefore"),
        number("tokensAfter"),
        number("window"),
    )
}

/// The approver of `run`: every question becomes a flight plan (see the
/// module documentation).
pub struct RunApprover {
    desk: Arc<FlightDesk>,
    env: Arc<AgentEnv>,
    /// stdin and stderr are a terminal: the person can answer here.
    terminal: bool,
    /// Plans this turn left for a person to decide later.
    left_pending: Mutex<Vec<FlightPlan>>,
    /// The same plans by tool call, for the sink.
    left_calls: LeftCalls,
}

/// What the person chose at the terminal.
enum Choice {
    Approve,
    Reject,
    Edit,
    Leave,
}

impl RunApprover {
    /// Stop the turn at `plan`: it stays pending, and `run` exits with
    /// [`EXIT_WAITING`] after saying how to decide it.
    fn leave(&self, plan: FlightPlan) -> ApprovalOutcome {
        lock(&self.left_calls).insert(plan.tool_call_id.clone(), plan.id.clone());
        lock(&self.left_pending).push(plan);
        ApprovalOutcome::Cancelled
    }

    /// Ask at the terminal until the person decides or leaves the plan.
    async fn ask_here(&self, plan: FlightPlan, cancel: &CancellationToken) -> ApprovalOutcome {
        let org = self.desk.store.rendering(&plan);
        eprintln!("\n{}", escape_text(&org));
        loop {
            eprint!(
                "Flight plan {}: [a]pprove, [r]eject, [e]dit in $EDITOR, [l]eave it pending? ",
                plan.id
            );
            let Some(line) = read_line(cancel).await else {
                return self.cancelled(&plan);
            };
            let choice = match line.as_deref().map(str::trim) {
                Some("a" | "A" | "approve" | "y" | "yes") => Choice::Approve,
                Some("r" | "R" | "reject" | "n" | "no") => Choice::Reject,
                Some("e" | "E" | "edit") => Choice::Edit,
                Some("l" | "L" | "leave" | "") | None => Choice::Leave,
                Some(other) => {
                    eprintln!("`{}` is not one of a, r, e, l.", escape_line(other));
                    continue;
                }
            };
            let decided = match choice {
                Choice::Leave => return self.leave(plan),
                Choice::Approve => self.decide(&plan, true, None, None),
                Choice::Reject => {
                    eprint!("Why (optional, the model reads it)? ");
                    let comment = match read_line(cancel).await {
                        None => return self.cancelled(&plan),
                        Some(line) => line.map(|l| l.trim().to_string()).filter(|l| !l.is_empty()),
                    };
                    self.decide(&plan, false, None, comment)
                }
                Choice::Edit => match edit_in_editor(&plan, &org).await {
                    Ok(org) => self.decide(&plan, true, Some(&org), None),
                    Err(why) => Err(NotDecided::Editor(why)),
                },
            };
            match decided {
                Ok(outcome) => return outcome,
                // A refused edit, a bad edit, an editor that failed: the
                // plan stays pending; the person chooses again.
                Err(why) => eprintln!("{}", escape_text(&why.to_string())),
            }
        }
    }

    /// Record the person's decision (an edit is gated first; a denied
    /// edit records nothing) and the audit evidence.
    fn decide(
        &self,
        plan: &FlightPlan,
        approve: bool,
        edited_org: Option<&str>,
        comment: Option<String>,
    ) -> Result<ApprovalOutcome, NotDecided> {
        let judged: Mutex<Option<Judgement>> = Mutex::new(None);
        let cwd = plan.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
        let check = |action: &Action| -> Result<(), EditDenied> {
            if action == &plan.action {
                return Ok(()); // the model's proposal: judged already
            }
            let judgement = judge_edit(&self.env, &cwd, action);
            let verdict = match judgement.decision {
                Decision::Deny => Err(EditDenied::Gates(judgement.reason())),
                _ => Ok(()),
            };
            *lock(&judged) = Some(judgement);
            verdict
        };
        let outcome = self
            .desk
            .store
            .decide_checked(
                &plan.id,
                approve,
                edited_org,
                RUN_CLIENT,
                comment.clone(),
                &check,
            )
            .map_err(|e| match e {
                StoreError::Refused(reason) => NotDecided::EditDenied {
                    reason,
                    id: plan.id.clone(),
                },
                error => NotDecided::Store {
                    error,
                    id: plan.id.clone(),
                },
            })?;
        let judgement = lock(&judged).take();
        self.env
            .record(decision_record(&outcome.plan, judgement.as_ref()));
        let _ = self.desk.store.mark_reported(&plan.id);
        if !outcome.approved {
            return Ok(ApprovalOutcome::Rejected {
                comment,
                by: RUN_CLIENT.into(),
            });
        }
        // Followed through begin and settle like any approved plan.
        self.desk.track(&outcome.plan);
        Ok(ApprovalOutcome::Approved {
            hash: outcome.action.content_hash(),
            action: Box::new(outcome.action),
            by: RUN_CLIENT.into(),
        })
    }

    /// Ctrl-C while asking: the plan is rejected by `cancel`, as when a
    /// daemon's turn is cancelled while its plan waits.
    fn cancelled(&self, plan: &FlightPlan) -> ApprovalOutcome {
        let why = Some("the turn was cancelled".to_string());
        if let Ok(outcome) = self.desk.store.decide(&plan.id, false, None, "cancel", why) {
            self.env.record(decision_record(&outcome.plan, None));
            let _ = self.desk.store.mark_reported(&plan.id);
        }
        ApprovalOutcome::Cancelled
    }
}

#[async_trait::async_trait]
impl Approver for RunApprover {
    async fn approve(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        let plan = FlightPlan::new(
            request.session_id,
            request.tool_call_id,
            request.explanation,
            request.action,
            request.trace,
        )
        .in_cwd(request.cwd);
        if let Err(e) = self.desk.store.create(&plan) {
            // Fail closed: a plan that could not be saved is not offered.
            return ApprovalOutcome::Rejected {
                comment: Some(format!("the flight plan could not be saved: {e}")),
                by: RUN_CLIENT.into(),
            };
        }
        if self.terminal {
            self.ask_here(plan, &cancel).await
        } else {
            self.leave(plan)
        }
    }

    fn begin(&self, session_id: &str, tool_call_id: &str, action: &Action) -> Result<(), NotBegun> {
        self.desk.begin(session_id, tool_call_id, action)
    }

    fn can_ask(&self) -> bool {
        self.terminal
    }

    fn plan_id(&self, session_id: &str, tool_call_id: &str) -> Option<String> {
        self.desk.plan_of(session_id, tool_call_id)
    }

    fn settle(&self, session_id: &str, tool_call_id: &str, status: &ActStatus, text: &str) {
        self.desk.settle(session_id, tool_call_id, status, text)
    }
}

/// One line from stdin: `Some(None)` at end of input, `None` when the turn
/// was cancelled first.
async fn read_line(cancel: &CancellationToken) -> Option<Option<String>> {
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    });
    tokio::select! {
        _ = cancel.cancelled() => None,
        line = read => Some(line.ok().flatten()),
    }
}

/// Why a decision at the terminal did not take: the plan stays pending
/// and the person chooses again.
#[derive(Debug, thiserror::Error)]
enum NotDecided {
    #[error(
        "The gates deny the edited action: {reason}\nNothing was recorded; {id} is still \
         pending. Edit again, or reject it."
    )]
    EditDenied { reason: EditDenied, id: String },
    #[error("{error}; {id} is still pending.")]
    Store { error: StoreError, id: String },
    #[error(transparent)]
    Editor(EditorError),
}

/// Why the editor gave back no edited plan.
#[derive(Debug, thiserror::Error)]
enum EditorError {
    #[error("cannot make a file to edit: {0}")]
    TempFile(std::io::Error),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the editor `{editor}`: {source}")]
    Start {
        editor: String,
        source: std::io::Error,
    },
    #[error("the editor `{editor}` failed ({status}); nothing was decided")]
    Failed {
        editor: String,
        status: std::process::ExitStatus,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Let the person edit the plan's Org text in `$VISUAL` / `$EDITOR`
/// (default `vi`); the edited text, or why there is none.
async fn edit_in_editor(plan: &FlightPlan, org: &str) -> Result<String, EditorError> {
    let file = tempfile::Builder::new()
        .prefix(&format!("{}-", plan.id))
        .suffix(".org")
        .tempfile()
        .map_err(EditorError::TempFile)?;
    std::fs::write(file.path(), org).map_err(|source| EditorError::Write {
        path: file.path().to_path_buf(),
        source,
    })?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    // The editor setting is the person's own and may carry arguments
    // ("emacs -nw"): the shell splits it; the file name is an argument.
    let status = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .await
    {
        Ok(status) => status,
        Err(source) => return Err(EditorError::Start { editor, source }),
    };
    if !status.success() {
        return Err(EditorError::Failed { editor, status });
    }
    std::fs::read_to_string(file.path()).map_err(|source| EditorError::Read {
        path: file.path().to_path_buf(),
        source,
    })
}

/// What to print for a plan left waiting: the gate and its reason, the
/// plan file, and the exact commands that decide it.
pub fn waiting_text(plan: &FlightPlan, org: &std::path::Path) -> String {
    let mut out = format!(
        "\npassepartout: waiting for a person: {}: {}\n",
        escape_line(&plan.action.tool),
        escape_line(&plan.summary())
    );
    for v in plan.trace.iter().filter(|v| v.decision != Decision::Allow) {
        out.push_str(&format!(
            "  gate `{}` says {}: {}\n",
            escape_line(&v.gate),
            v.decision,
            escape_line(&v.reason)
        ));
    }
    out.push_str(&format!(
        "  flight plan: {}\n  passepartout plans show {id}\n  passepartout plans approve {id}\n  \
         passepartout plans reject {id} --comment \"why\"\n",
        escape_line(&org.to_string_lossy()),
        id = plan.id
    ));
    out
}

/// Before a turn of an earlier session: a held change whose plan a person
/// rejected since (`plans reject`) is discarded, its upper layer removed;
/// the project never held it.
async fn discard_rejected_changes(env: &AgentEnv, desk: &FlightDesk, session: &str) {
    let Ok(plans) = desk.store.of_session(session) else {
        return;
    };
    let rejected = plans.into_iter().filter(|p| {
        p.status == crate::plans::PlanStatus::Rejected
            && p.action.target == crate::checkpoint::watch::TARGET
    });
    for plan in rejected {
        let (Some(cwd), Some(id)) = (
            plan.cwd.clone(),
            (plan.action.arguments.get("checkpoint"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
        ) else {
            continue;
        };
        let (state, cfg, at) = (
            env.config.state_dir(),
            env.config.checkpoints.clone(),
            cwd.clone(),
        );
        let discarded = crate::checkpoint::watch::locked(&cwd, move || {
            crate::checkpoint::Project::open(&state, &at, &cfg)?.reject(&id)
        })
        .await;
        if let Err(e) = discarded {
            tracing::warn!(plan = %plan.id, "the rejected change could not be discarded: {e}");
        }
    }
}

/// Before a turn of an earlier session: run its plans approved since its
/// last turn (unless a living process owns them), through the normal plan
/// path, and say how each ended.
async fn run_approved_plans(desk: &Arc<FlightDesk>, session: &str) {
    use crate::state_lock::process_alive;
    let Ok(plans) = desk.store.approved() else {
        return;
    };
    for plan in plans.into_iter().filter(|p| p.session_id == session) {
        let owned_elsewhere = plan
            .owner()
            .is_some_and(|pid| pid != std::process::id() && process_alive(pid));
        if owned_elsewhere {
            continue;
        }
        eprintln!(
            "passepartout: running approved flight plan {}: {}",
            plan.id,
            escape_line(&plan.summary())
        );
        if let Some(ended) = desk.run_approved(plan).await {
            eprintln!("  {}: {}", ended.id, ended.status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_text_names_the_gate_and_the_commands() {
        let action = Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({}),
            effect: crate::action::Effect::Message {
                text: "hi\u{1b}]52;c;eA==\u{7}".into(),
            },
            approval: crate::action::Approval::Ask,
            timeout_secs: None,
        };
        let plan = FlightPlan::new(
            "s",
            "c",
            "",
            action,
            vec![crate::gates::Verdict::new(
                Decision::Ask,
                "destructive",
                "rm -rf",
            )],
        );
        let text = waiting_text(&plan, std::path::Path::new("/p/x.org"));
        assert!(
            text.contains("gate `destructive` says ask: rm -rf"),
            "{text}"
        );
        assert!(text.contains(&format!("passepartout plans approve {}\n", plan.id)));
        assert!(!text.contains('\u{1b}'), "{text}");
    }
}
