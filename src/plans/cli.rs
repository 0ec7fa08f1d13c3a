//! `passepartout plans …`: flight plans from a terminal.
//!
//! `list` shows one line per plan, `show ID` prints the Org rendering,
//! `approve ID` and `reject ID` record a decision (by `cli`). Approving
//! here does not run anything: a daemon does, and `approve` says which one
//! and when, from the state directory's lock (`daemon.lock`): the daemon
//! whose turn made the plan if it still runs, else the lock holder within a
//! second or two, else the next daemon at its start. Output goes to the given writer; the
//! return value is the process exit code (0 ok, 1 failed, 2 bad usage).

use std::io::Write;
use std::path::PathBuf;

use super::render::render;
use super::store::{PlanStore, StoreError};

/// Usage text for `passepartout plans`.
pub const USAGE: &str = "\
usage: passepartout plans list
       passepartout plans show ID
       passepartout plans approve ID [--comment TEXT] [--edited FILE]
       passepartout plans reject ID [--comment TEXT]

approve --edited FILE reads the action from FILE, an edited copy of
`passepartout plans show ID`; the gates check it again before it runs.
";

/// Run `passepartout plans ARGS…` (ARGS without the word `plans`) against
/// `store`, writing to `out`. Returns the exit code.
pub fn plans_command(store: &PlanStore, args: &[String], out: &mut dyn Write) -> i32 {
    match run(store, args, out) {
        Ok(()) => 0,
        Err(Failure::Usage(message)) => {
            let _ = writeln!(out, "error: {message}\n");
            let _ = out.write_all(USAGE.as_bytes());
            2
        }
        Err(Failure::Failed(message)) => {
            let _ = writeln!(out, "error: {message}");
            1
        }
    }
}

enum Failure {
    Usage(String),
    Failed(String),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Failed(format!("cannot write output: {e}"))
    }
}

fn run(store: &PlanStore, args: &[String], out: &mut dyn Write) -> Result<(), Failure> {
    let Some((command, rest)) = args.split_first() else {
        return Err(Failure::Usage("which plans command?".to_string()));
    };
    match command.as_str() {
        "list" => {
            if let Some(extra) = rest.first() {
                return Err(Failure::Usage(format!(
                    "`list` takes no argument, got `{extra}`"
                )));
            }
            list(store, out)
        }
        "show" => {
            let options = Options::parse(rest, &[])?;
            let plan = store
                .load(&options.id)
                .map_err(|e| store_failure(&options.id, e))?;
            out.write_all(render(&plan).as_bytes())?;
            Ok(())
        }
        "approve" => {
            let options = Options::parse(rest, &["--comment", "--edited"])?;
            let edited = match &options.edited {
                Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                    Failure::Failed(format!("cannot read {}: {e}", path.display()))
                })?),
                None => None,
            };
            let outcome = store
                .decide(&options.id, true, edited.as_deref(), "cli", options.comment)
                .map_err(|e| store_failure(&options.id, e))?;
            let edits = if outcome.edited {
                " with your edits (the gates check the edited action again before it runs)"
            } else {
                ""
            };
            writeln!(
                out,
                "{} approved{edits}; {}",
                options.id,
                who_runs(store, &outcome.plan)
            )?;
            Ok(())
        }
        "reject" => {
            let options = Options::parse(rest, &["--comment"])?;
            store
                .decide(&options.id, false, None, "cli", options.comment)
                .map_err(|e| store_failure(&options.id, e))?;
            writeln!(out, "{} rejected; it will not run.", options.id)?;
            Ok(())
        }
        "help" | "--help" | "-h" => {
            out.write_all(USAGE.as_bytes())?;
            Ok(())
        }
        other => Err(Failure::Usage(format!("unknown plans command `{other}`"))),
    }
}

/// Who will run an approved plan, and when (the truth at this moment).
fn who_runs(store: &PlanStore, plan: &super::FlightPlan) -> String {
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
    let scan = store.scan().map_err(|e| Failure::Failed(e.to_string()))?;
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
    Failure::Failed(match error {
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

/// The plan id and the options of `show`, `approve` and `reject`.
struct Options {
    id: String,
    comment: Option<String>,
    edited: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Self, Failure> {
        let mut options = Options {
            id: String::new(),
            comment: None,
            edited: None,
        };
        let mut id = None;
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            if arg.starts_with("--") {
                let (name, inline) = match arg.split_once('=') {
                    Some((name, value)) => (name, Some(value.to_string())),
                    None => (arg.as_str(), None),
                };
                if !allowed.contains(&name) {
                    return Err(Failure::Usage(format!("unknown option `{name}`")));
                }
                let value = match inline {
                    Some(v) => v,
                    None => iter
                        .next()
                        .cloned()
                        .ok_or_else(|| Failure::Usage(format!("`{name}` needs a value")))?,
                };
                match name {
                    "--comment" => options.comment = Some(value),
                    _ => options.edited = Some(PathBuf::from(value)),
                }
            } else if id.is_none() {
                id = Some(arg.clone());
            } else {
                return Err(Failure::Usage(format!("unexpected argument `{arg}`")));
            }
        }
        options.id = id.ok_or_else(|| Failure::Usage("which plan? give its id".to_string()))?;
        Ok(options)
    }
}
