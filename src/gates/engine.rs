//! TEMPORARY stub until the gates branch lands.
use super::{Decision, Gate, GateContext, Verdict};
use crate::action::{Action, Approval};
use std::sync::Arc;
#[derive(Default, Clone)]
pub struct GateEngine {
    gates: Vec<Arc<dyn Gate>>,
}
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub decision: Decision,
    pub trace: Vec<Verdict>,
}
impl Judgement {
    pub fn reason(&self) -> String {
        self.trace
            .iter()
            .filter(|v| v.decision == self.decision)
            .map(|v| format!("{}: {}", v.gate, v.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
impl GateEngine {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_builtin_gates() -> Self {
        Self::default()
    }
    pub fn add(&mut self, g: Arc<dyn Gate>) {
        self.gates.push(g)
    }
    pub fn evaluate(&self, action: &Action, ctx: &GateContext) -> Judgement {
        let mut trace = vec![Verdict::new(
            match action.approval {
                Approval::Auto => Decision::Allow,
                Approval::Ask => Decision::Ask,
                Approval::Never => Decision::Deny,
            },
            "approval",
            "declared",
        )];
        trace.extend(self.gates.iter().filter_map(|g| g.check(action, ctx)));
        let decision = trace.iter().map(|v| v.decision).max().unwrap_or_default();
        Judgement { decision, trace }
    }
}
