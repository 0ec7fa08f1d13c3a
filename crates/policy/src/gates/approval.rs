//! The tool author's declared approval, as a gate. It always speaks, so a
//! judgement's trace is never empty and the engine can only make the
//! author's choice stricter, never looser.

use crate::action::{Action, Approval};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// Auto → allow, Ask → ask, Never → deny.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApprovalGate;

impl Gate for ApprovalGate {
    fn name(&self) -> &str {
        "approval"
    }

    fn priority(&self) -> i32 {
        0
    }

    fn check(&self, action: &Action, _ctx: &GateContext) -> Option<Verdict> {
        let tool = &action.tool;
        let (decision, reason) = match action.approval {
            Approval::Auto => (
                Decision::Allow,
                format!("the tool `{tool}` runs without asking"),
            ),
            Approval::Ask => (
                Decision::Ask,
                format!("the tool `{tool}` asks for approval"),
            ),
            Approval::Never => (
                Decision::Deny,
                format!("the tool `{tool}` is declared never to run"),
            ),
        };
        Some(Verdict::new(decision, self.name(), reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Effect;

    fn with(approval: Approval) -> Verdict {
        let action = Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({}),
            effect: Effect::Message {
                text: String::new(),
            },
            approval,
            timeout_secs: None,
        };
        ApprovalGate
            .check(&action, &GateContext::default())
            .expect("always speaks")
    }

    #[test]
    fn maps_each_level() {
        assert_eq!(
            with(Approval::Auto),
            Verdict::new(
                Decision::Allow,
                "approval",
                "the tool `shell` runs without asking"
            )
        );
        assert_eq!(
            with(Approval::Ask),
            Verdict::new(
                Decision::Ask,
                "approval",
                "the tool `shell` asks for approval"
            )
        );
        assert_eq!(
            with(Approval::Never),
            Verdict::new(
                Decision::Deny,
                "approval",
                "the tool `shell` is declared never to run"
            )
        );
    }
}
