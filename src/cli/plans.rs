//! `passepartout plans …`: flight plans from a terminal.
//!
//! `list` shows one line per plan, `show ID` prints the Org rendering,
//! `approve ID` and `reject ID` record a decision (by `cli`). Approving
//! here does not run anything: a daemon does, and `approve` says which one
//! and when, from the state directory's lock (`daemon.lock`): the daemon
//! whose turn made the plan if it still runs, else the lock holder within a
//! second or two, else the next daemon at its start. Output goes to the
//! given writer; the return value is the process exit code (0 ok, 1 failed,
//! 2 bad usage).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Subcommand};

use super::{exit_code, load_config, ConfigFlags};
use crate::plans::render::render;
use crate::plans::store::{PlanStore, StoreError};
use crate::plans::FlightPlan;

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
    let store = PlanStore::new(config.state().plans());
    exit_code(plans_command(
        &store,
        args.command.as_ref(),
        &mut std::io::stdout(),
    ))
}

/// Run a `plans` subcommand (None: none was given) against `store`, writing
/// to `out`. Returns the exit code.
pub fn plans_command(
    store: &PlanStore,
    command: Option<&PlansCommand>,
    out: &mut dyn Write,
) -> i32 {
    let Some(command) = command else {
        let _ = writeln!(out, "error: which plans command?\n\n{}", usage());
        return 2;
    };
    match run(store, command, out) {
        Ok(()) => 0,
        Err(message) => {
            let _ = writeln!(out, "error: {message}");
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
}

fn run(store: &PlanStore, command: &PlansCommand, out: &mut dyn Write) -> Result<(), Failure> {
    match command {
        PlansCommand::List => list(store, out),
        PlansCommand::Show { id } => {
            let plan = store.load(id).map_err(|e| store_failure(id, e))?;
            out.write_all(render(&plan).as_bytes())?;
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
            let outcome = store
                .decide(id, true, edited.as_deref(), "cli", comment.clone())
                .map_err(|e| store_failure(id, e))?;
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
            store
                .decide(id, false, None, "cli", comment.clone())
                .map_err(|e| store_failure(id, e))?;
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
            "no daemon is running: it runs when `passepartout serve` next starts (e.g. when \
             Emacs connects)."
                .to_string()
        }
        (None, Err(e)) => format!("cannot tell whether a daemon is running ({e})."),
    }
}

fn list(store: &PlanStore, out: &mut dyn Write) -> Result<(), Failure> {
    let scan = store.scan().map_err(|e| Failure::Store(e.to_string()))?;
    if scan.plans.is_empty() {
        writeln!(out, "No flight plans in {}.", store.dir().display())?;
    }
    let tool_width = scan
        .plans
        .iter()
        .map(|p| p.action.tool.chars().count())
        .max()
        .unwrap_or(0);
    for plan in &scan.plans {
        writeln!(
            out,
            "{}  {:<11}  {}  {:<tool_width$}  {}",
            plan.id,
            plan.status.as_str(),
            plan.created_at,
            plan.action.tool,
            plan.summary()
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
