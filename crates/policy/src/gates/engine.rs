//! The gate engine: runs every gate over an action and keeps the strictest
//! verdict.
//!
//! Order never changes the outcome (the decision is the maximum of all
//! verdicts), only how the trace reads: gates are kept sorted by priority,
//! ties in the order they were added, so built-ins come before rules from
//! Org skills and the user's policy file added later with [`GateEngine::add`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::action::Action;
use crate::gates::secrets::redact;
use crate::gates::{
    approval::ApprovalGate, consequence::ConsequenceGate, destructive::DestructiveGate,
    exfiltration::ExfiltrationGate, history::HistoryGate, injection::InjectionGate,
    protected_paths::ProtectedPathsGate, runtime_plants::RuntimePlantsGate, secrets::SecretsGate,
    shell::ShellGate, Decision, Gate, GateContext, Verdict,
};

/// The outcome of running every gate over one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    /// The strictest decision in `trace`; `Deny` when nobody spoke.
    pub decision: Decision,
    /// Every verdict, in the order the gates ran.
    pub trace: Vec<Verdict>,
}

impl Judgement {
    /// Combine verdicts: the strictest wins. An empty trace is a denial,
    /// because an action nobody judged must not run.
    pub fn from_trace(trace: Vec<Verdict>) -> Self {
        let decision = trace
            .iter()
            .map(|v| v.decision)
            .max()
            .unwrap_or(Decision::Deny);
        Judgement { decision, trace }
    }

    /// The verdicts that decided the outcome (those equal to the decision).
    pub fn deciding(&self) -> impl Iterator<Item = &Verdict> {
        self.trace
            .iter()
            .filter(move |v| v.decision == self.decision)
    }

    /// One paragraph naming the deciding gate(s) and their reasons, for the
    /// model and for people: "denied by gate `destructive`: rm -rf on /".
    pub fn reason(&self) -> String {
        let verb = match self.decision {
            Decision::Allow => "allowed",
            Decision::Ask => "held for approval",
            Decision::Deny => "denied",
        };
        let parts: Vec<String> = self
            .deciding()
            .map(|v| format!("gate `{}`: {}", v.gate, v.reason))
            .collect();
        if parts.is_empty() {
            return format!("{verb}: no gate judged this action");
        }
        format!("{verb} by {}", parts.join("; and by "))
    }
}

/// An ordered set of gates.
#[derive(Clone, Default)]
pub struct GateEngine {
    gates: Vec<Arc<dyn Gate>>,
}

impl std::fmt::Debug for GateEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.gates.iter().map(|g| g.name().to_string()))
            .finish()
    }
}

impl GateEngine {
    /// An engine with no gates at all (every action is denied until one is
    /// added, since an empty trace is a denial).
    pub fn new() -> Self {
        GateEngine { gates: Vec::new() }
    }

    /// The approval gate and every built-in safety gate.
    pub fn with_builtin_gates() -> Self {
        let mut engine = GateEngine::new();
        engine.add(Arc::new(ApprovalGate));
        engine.add(Arc::new(DestructiveGate));
        engine.add(Arc::new(HistoryGate));
        engine.add(Arc::new(ShellGate));
        engine.add(Arc::new(InjectionGate));
        engine.add(Arc::new(ExfiltrationGate));
        engine.add(Arc::new(ProtectedPathsGate));
        engine.add(Arc::new(SecretsGate));
        engine.add(Arc::new(RuntimePlantsGate));
        engine.add(Arc::new(ConsequenceGate));
        engine
    }

    /// Add a gate, keeping priority order (stable for equal priorities).
    pub fn add(&mut self, gate: Arc<dyn Gate>) {
        let at = self
            .gates
            .iter()
            .position(|g| g.priority() > gate.priority())
            .unwrap_or(self.gates.len());
        self.gates.insert(at, gate);
    }

    /// The names of the gates, in the order they run.
    pub fn gate_names(&self) -> Vec<String> {
        self.gates.iter().map(|g| g.name().to_string()).collect()
    }

    /// Run every gate; the strictest verdict decides, the trace keeps all.
    pub fn evaluate(&self, action: &Action, ctx: &GateContext) -> Judgement {
        let trace = self
            .gates
            .iter()
            .filter_map(|g| g.check(action, ctx))
            .collect();
        Judgement::from_trace(trace)
    }
}

/// Fold one gate's findings into its verdict: the strictest decision, with
/// the reasons at that level joined (duplicates dropped) and any credential
/// they quote redacted. `None` when the gate found nothing.
pub fn verdict_from_findings(gate: &str, findings: Vec<(Decision, String)>) -> Option<Verdict> {
    let decision = findings.iter().map(|(d, _)| *d).max()?;
    let mut reasons: Vec<String> = Vec::new();
    for (d, r) in findings {
        let r = redact(&r);
        if d == decision && !reasons.contains(&r) {
            reasons.push(r);
        }
    }
    Some(Verdict::new(decision, gate, reasons.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Approval, Effect};

    struct Fixed(&'static str, i32, Option<Decision>);

    impl Gate for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn priority(&self) -> i32 {
            self.1
        }
        fn check(&self, _: &Action, _: &GateContext) -> Option<Verdict> {
            self.2
                .map(|d| Verdict::new(d, self.0, format!("{} says {d}", self.0)))
        }
    }

    fn action() -> Action {
        Action {
            tool: "t".into(),
            target: "system".into(),
            arguments: serde_json::json!({}),
            effect: Effect::Message { text: "hi".into() },
            approval: Approval::Auto,
            timeout_secs: None,
        }
    }

    fn engine(gates: Vec<Fixed>) -> GateEngine {
        let mut e = GateEngine::new();
        for g in gates {
            e.add(Arc::new(g));
        }
        e
    }

    #[test]
    fn one_deny_among_allows_wins() {
        let e = engine(vec![
            Fixed("a", 1, Some(Decision::Allow)),
            Fixed("b", 2, Some(Decision::Deny)),
            Fixed("c", 3, Some(Decision::Allow)),
        ]);
        let j = e.evaluate(&action(), &GateContext::default());
        assert_eq!(j.decision, Decision::Deny);
        assert_eq!(j.reason(), "denied by gate `b`: b says deny");
    }

    #[test]
    fn ask_beats_allow_and_all_deciders_are_named() {
        let e = engine(vec![
            Fixed("a", 1, Some(Decision::Ask)),
            Fixed("b", 2, Some(Decision::Allow)),
            Fixed("c", 3, Some(Decision::Ask)),
        ]);
        let j = e.evaluate(&action(), &GateContext::default());
        assert_eq!(j.decision, Decision::Ask);
        assert_eq!(
            j.reason(),
            "held for approval by gate `a`: a says ask; and by gate `c`: c says ask"
        );
    }

    #[test]
    fn trace_follows_priority_then_insertion_and_skips_silent_gates() {
        let e = engine(vec![
            Fixed("late", 50, Some(Decision::Allow)),
            Fixed("early", 1, Some(Decision::Allow)),
            Fixed("silent", 10, None),
            Fixed("late2", 50, Some(Decision::Allow)),
        ]);
        assert_eq!(e.gate_names(), ["early", "silent", "late", "late2"]);
        let j = e.evaluate(&action(), &GateContext::default());
        let names: Vec<&str> = j.trace.iter().map(|v| v.gate.as_str()).collect();
        assert_eq!(names, ["early", "late", "late2"]);
        assert_eq!(j.decision, Decision::Allow);
    }

    #[test]
    fn nobody_speaking_is_a_denial() {
        let j = GateEngine::new().evaluate(&action(), &GateContext::default());
        assert_eq!(j.decision, Decision::Deny);
        assert!(j.trace.is_empty());
        assert_eq!(j.reason(), "denied: no gate judged this action");
    }

    #[test]
    fn builtin_engine_always_has_the_approval_verdict() {
        let e = GateEngine::with_builtin_gates();
        assert_eq!(
            e.gate_names(),
            [
                "approval",
                "destructive",
                "history",
                "shell",
                "injection",
                "exfiltration",
                "protected_paths",
                "runtime_plants",
                "consequence",
                "secrets"
            ]
        );
        let j = e.evaluate(&action(), &GateContext::default());
        assert_eq!(j.decision, Decision::Allow);
        assert_eq!(j.trace.len(), 1);
        assert_eq!(j.trace[0].gate, "approval");
    }

    #[test]
    fn findings_fold_to_the_strictest() {
        let v = verdict_from_findings(
            "g",
            vec![
                (Decision::Ask, "x".into()),
                (Decision::Deny, "y".into()),
                (Decision::Deny, "y".into()),
                (Decision::Deny, "z".into()),
            ],
        );
        assert_eq!(v, Some(Verdict::new(Decision::Deny, "g", "y; z")));
        assert_eq!(verdict_from_findings("g", vec![]), None);
    }
}
