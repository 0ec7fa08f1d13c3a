//! Deterministic gates: pure judges of an [`Action`].
//!
//! Every gate returns at most one [`Verdict`]; the engine runs all that apply
//! and the strictest decision wins (`Decision` is `Ord`: allow < ask < deny).
//! The whole trace is kept with the action, so a flight plan can show why a
//! person is being asked.

pub mod approval;
pub mod consequence;
pub mod destructive;
pub mod effect;
pub mod engine;
pub mod exfiltration;
pub mod git_refs;
pub mod history;
pub mod injection;
pub mod known_values;
pub mod protected_paths;
pub mod runtime_plants;
pub mod secret_reads;
pub mod secret_rules;
pub mod secret_values;
pub mod secrets;
pub mod shell;
pub mod verdict;

pub use engine::{GateEngine, Judgement};
pub use verdict::{Decision, Verdict};

use std::path::PathBuf;

use crate::action::Action;

/// What gates may know about the surroundings of an action.
#[derive(Debug, Clone, Default)]
pub struct GateContext {
    /// The session's working directory: writes outside it need approval.
    pub cwd: PathBuf,
    /// The person's home directory, for `~` and protected paths.
    pub home: Option<PathBuf>,
    /// Hosts the network-exfiltration gate lets through without asking.
    pub network_allow: Vec<String>,
    /// The daemon's own directories: writes to them ask.
    pub host_paths: Vec<crate::control_surface::HostPath>,
    /// The action runs contained: a sandboxed command without network
    /// into an overlay, or a file tool whose one write is recorded, so its
    /// changeset is judged before it reaches the project and undo can
    /// restore it. The text rules that only guess at what a command writes
    /// (interpreter code, scripts written and run, recursive deletes,
    /// writes to the sandbox's private `/tmp`) then leave the decision to
    /// the changeset (`gates::consequence`).
    pub contained: bool,
}

/// A deterministic judge. Pure: no I/O, no clock, same action → same verdict.
pub trait Gate: Send + Sync {
    /// Name shown in traces and flight plans.
    fn name(&self) -> &str;
    /// Lower runs first; the order only affects how the trace reads, since
    /// the strictest verdict wins regardless.
    fn priority(&self) -> i32 {
        100
    }
    /// `None` when the gate has nothing to say about this action.
    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict>;
}
