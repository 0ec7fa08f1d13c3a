//! `passepartout plans …`: flight plans from a terminal.
//!
//! `list` shows one line per plan, `show ID` prints the Org rendering,
//! `approve ID` and `reject ID` record a decision (by `cli`) and its audit
//! record (the proposal, the edit and a diff, the verdicts). An edit
//! (`approve --edited FILE`) is judged by the gates of the plan's directory
//! before anything is recorded: an edit they deny leaves the plan pending,
//! says why, and fails (exit 1). Text the model wrote is escaped on a
//! terminal (`show` prints it exactly when piped, to be edited). Approving
//! here does not run anything: a daemon does, and `approve` says which one
//! and when, from the state directory's lock (`daemon.lock`): the daemon
//! whose turn made the plan if it still runs, else the lock holder within a
//! second or two, else the next daemon at its start. Output goes to the
//! given writer; the return value is the process exit code (0 ok, 1 failed,
//! 2 bad usage).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Subcommand};

use super::{exit_code, load_config, ConfigFlags};
use crate::action::Action;
use crate::audit::AuditRecord;
use crate::gates::{Decision, Judgement};
use crate::plans::evidence::decision_record;
use crate::plans::store::{EditDenied, PlanStore, StoreError};
use crate::plans::FlightPlan;
use crate::util::terminal::{escape_line, escape_text};

/// The gates' judgement of an edited action in its plan's directory.
pub type Judge<'a> = dyn Fn(&Path, &Action) -> Judgement + 'a;

/// How `plans` checks, records and prints a decision.
pub struct Deciding<'a> {
    /// Judges an edited action; `None` (the gates could not be loaded):
    /// an edit is refused, never approved unchecked.
    pub judge: Option<&'a Judge<'a>>,
    /// Where decisions go as audit records (`None`: not audited).
    pub audit: Option<&'a (dyn Fn(AuditRecord) + 'a)>,
    /// The output is a terminal: model-written text is escaped.
    pub terminal: bool,
}

/// `passepartout plans [SUBCOMMAND]`.
#[derive(Args, Debug)]
pub struct PlansArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    // None: the usage, and exit code 2, as before clap.
    #[command(subcommand)]
    pub command: Option<PlansCommand>,
}

/// The `plans` subcommands.
#[derive(Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum PlansCommand {
    /// One line per plan: id, status, when, tool, what it does.
    List,
    /// A plan's Org rendering (what `approve --edited` reads back).
    Show {
        /// The plan id, like fp-0123456789ab.
        id: String,
    },
    /// Approve a plan; a daemon runs it (this says which one and when).
    Approve {
        /// The plan id, like fp-0123456789ab.
        id: String,
        /// A note kept with the decision.
        #[arg(long)]
        comment: Option<String>,
        /// Read the action from FILE, an edited copy of `passepartout plans
        /// show ID`; the gates check it again before it runs.
        #[arg(long, value_name = "FILE")]
        edited: Option<PathBuf>,
    },
    /// Reject a plan; it will not run.
    Reject {
        /// The plan id, like fp-0123456789ab.
        id: String,
        /// A note kept with the decision.
        #[arg(long)]
        comment: Option<String>,
    },
}

/// Run `passepartout plans …` with the store of the configured state
/// directory.
pub fn command(args: PlansArgs) -> ExitCode {
    let config = match load_config(&args.flags) {
        Ok(c) => c,
        Err(e) => return e.report(),
    };
    let plans_dir = config.state().plans();
    // The gates and the audit log, as the daemon has them.
    let env = crate::setup::build_env(config).map(std::sync::Arc::new);
    if let Err(e) = &env {
        eprintln!("passepartout: cannot load the gates: {e}; edited plans are refused");
    }
    let store = match &env {
        Ok(env) => PlanStore::new(plans_dir).hiding(env.plan_values()),
        Err(_) => PlanStore::new(plans_dir),
    };
    for r in crate::checkpoint::intent::take_reports() {
        eprintln!("passepartout: {}", r.message());
    }
    let env = env.ok();
    let judge = |cwd: &Path, action: &Action| match &env {
        Some(env) => crate::approval::flight::judge_edit(env, cwd, action),
        None => Judgement::from_trace(vec![]),
    };
    let audit = |record: AuditRecord| {
        if let Some(env) = &env {
            env.record(record);
            if let Some(log) = &env.audit {
                log.flush();
            }
        }
    };
    let deciding = Deciding {
        judge: env.is_some().then_some(&judge as &Judge),
        audit: Some(&audit),
        terminal: std::io::stdout().is_terminal(),
    };
    exit_code(plans_command(
        &store,
        args.command.as_ref(),
        &mut std::io::stdout(),
        &deciding,
    ))
}

/// Run a `plans` subcommand (None: none was given) against `store`, writing
/// to `out`. Returns the exit code.
pub fn plans_command(
    store: &PlanStore,
    command: Option<&PlansCommand>,
    out: &mut dyn Write,
    deciding: &Deciding<'_>,
) -> i32 {
    let Some(command) = command else {
        let _ = writeln!(out, "error: which plans command?\n\n{}", usage());
        return 2;
    };
    match run(store, command, out, deciding) {
        Ok(()) => 0,
        Err(message) => {
            let _ = writeln!(out, "error: {}", escape_text(&message.to_string()));
            1
        }
    }
}

/// The help of `passepartout plans`, as `passepartout plans --help` prints it.
pub fn usage() -> String {
    let mut cli = super::Cli::command();
    cli.build();
    cli.find_subcommand_mut("plans")
        .map(|plans| plans.render_help().to_string())
        .unwrap_or_default()
}

/// Why a plans command failed (exit code 1).
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot read {}: {source}", path.display())]
    Edited {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Store(String),
    #[error(
        "the gates deny the edited action: {reason}\n{id} is still pending: nothing was \
         approved. Edit it again (`passepartout plans show {id}`), or reject it."
    )]
    EditDenied { id: String, reason: String },
    #[error(
        "the edited action cannot be checked: the gates could not be loaded (see the warning \
         above); {0} is still pending"
    )]
    NoGates(String),
}

fn run(
    store: &PlanStore,
    command: &PlansCommand,
    out: &mut dyn Write,
    deciding: &Deciding<'_>,
) -> Result<(), Failure> {
    match command {
        PlansCommand::List => list(store, out, deciding.terminal),
        PlansCommand::Show { id } => {
            let plan = store.load(id).map_err(|e| store_failure(id, e))?;
            let text = store.rendering(&plan);
            // Piped, exactly (what `approve --edited` reads back); on a
            // terminal, nothing the model wrote may drive it.
            let text = if deciding.terminal {
                escape_text(&text)
            } else {
                text.into()
            };
            out.write_all(text.as_bytes())?;
            Ok(())
        }
        PlansCommand::Approve {
            id,
            comment,
            edited,
        } => {
            let edited = match edited {
                Some(path) => {
                    Some(
                        std::fs::read_to_string(path).map_err(|source| Failure::Edited {
                            path: path.clone(),
                            source,
                        })?,
                    )
                }
                None => None,
            };
            let judged: std::sync::Mutex<Option<Judgement>> = Default::default();
            let cwd = store
                .load(id)
                .ok()
                .and_then(|p| p.cwd)
                .unwrap_or_else(|| PathBuf::from("/"));
            let check = |action: &Action| -> Result<(), EditDenied> {
                let original = store.load(id).map(|p| p.action).ok();
                if original.as_ref() == Some(action) {
                    return Ok(()); // the proposal itself: already judged
                }
                let Some(judge) = deciding.judge else {
                    return Err(EditDenied::NoGates);
                };
                let judgement = judge(&cwd, action);
                let verdict = match judgement.decision {
                    Decision::Deny => Err(EditDenied::Gates(judgement.reason())),
                    _ => Ok(()),
                };
                *crate::util::sync::lock(&judged) = Some(judgement);
                verdict
            };
            let outcome = store
                .decide_checked(id, true, edited.as_deref(), "cli", comment.clone(), &check)
                .map_err(|e| match e {
                    StoreError::Refused(EditDenied::NoGates) => Failure::NoGates(id.clone()),
                    StoreError::Refused(EditDenied::Gates(reason)) => Failure::EditDenied {
                        id: id.clone(),
                        reason,
                    },
                    other => store_failure(id, other),
                })?;
            let judgement = crate::util::sync::lock(&judged).take();
            if let Some(audit) = deciding.audit {
                audit(decision_record(&outcome.plan, judgement.as_ref()));
            }
            let edits = if outcome.edited {
                " with your edits (the gates check the edited action again before it runs)"
            } else {
                ""
            };
            writeln!(
                out,
                "{id} approved{edits}; {}",
                who_runs(store, &outcome.plan)
            )?;
            Ok(())
        }
        PlansCommand::Reject { id, comment } => {
            let outcome = store
                .decide(id, false, None, "cli", comment.clone())
                .map_err(|e| store_failure(id, e))?;
            if let Some(audit) = deciding.audit {
                audit(decision_record(&outcome.plan, None));
            }
            writeln!(out, "{id} rejected; it will not run.")?;
            Ok(())
        }
    }
}

/// Who will run an approved plan, and when (the truth at this moment).
fn who_runs(store: &PlanStore, plan: &FlightPlan) -> String {
    use crate::state_lock::{holder, process_alive, Holder};
    let owner = plan.owner().filter(|pid| process_alive(*pid));
    let state_dir = store.dir().parent().unwrap_or(store.dir());
    match (owner, holder(state_dir)) {
        (Some(pid), _) => {
            format!("the daemon whose turn made it (pid {pid}) is running and runs it now.")
        }
        (None, Ok(Holder::Daemon(Some(pid)))) => format!(
            "its turn is gone; the running daemon (pid {pid}) runs it within a few seconds."
        ),
        (None, Ok(Holder::Daemon(None))) => {
            "its turn is gone; the running daemon runs it within a few seconds.".to_string()
        }
        (None, Ok(Holder::Nobody)) => {
            let place = match &plan.cwd {
                Some(cwd) => format!(" in {}", escape_line(&cwd.display().to_string())),
                None => String::new(),
            };
            format!(
                "no daemon is running: `passepartout run --continue PROMPT`{place} runs it now \
                 and tells the model, or it runs when `passepartout serve` next starts (e.g. \
                 when Emacs connects)."
            )
        }
        (None, Err(e)) => format!("cannot tell whether a daemon is running ({e})."),
    }
}

fn list(store: &PlanStore, out: &mut dyn Write, terminal: bool) -> Result<(), Failure> {
    let shown = |text: &str| -> String {
        if terminal {
            escape_line(text).into_owned()
        } else {
            text.to_string()
        }
    };
    let scan = store.scan().map_err(|e| Failure::Store(e.to_string()))?;
    if scan.plans.is_empty() {
        writeln!(out, "No flight plans in {}.", store.dir().display())?;
    }
    let tool_width = scan
        .plans
        .iter()
        .map(|p| shown(&p.action.tool).chars().count())
        .max()
        .unwrap_or(0);
    for plan in &scan.plans {
        writeln!(
            out,
            "{}  {:<11}  {}  {:<tool_width$}  {}",
            plan.id,
            plan.status.as_str(),
            shown(&plan.created_at),
            shown(&plan.action.tool),
            shown(&store.shown(plan, &plan.summary()))
        )?;
    }
    for problem in &scan.problems {
        writeln!(out, "warning: skipped {problem}")?;
    }
    Ok(())
}

fn store_failure(id: &str, error: StoreError) -> Failure {
    Failure::Store(match error {
        StoreError::NotFound(_) => {
            format!("no flight plan with id `{id}`; see `passepartout plans list`")
        }
        StoreError::InvalidId(_) => format!(
            "`{id}` is not a flight plan id (they look like fp-0123456789ab); see \
             `passepartout plans list`"
        ),
        StoreError::AlreadyDecided(status) => {
            format!("{id} was already decided (it is {status})")
        }
        other => other.to_string(),
    })
}
