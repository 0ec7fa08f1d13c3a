//! Verdicts and their ordering. The safe choice is the default: a decision
//! that was never made is `Deny`.

use serde::{Deserialize, Serialize};

/// What a gate decides. Ordered so that `max` picks the strictest.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Ask,
    #[default]
    Deny,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        })
    }
}

/// One gate's judgement, with its name and a reason a person (and the model)
/// can read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub decision: Decision,
    pub gate: String,
    pub reason: String,
}

impl Verdict {
    pub fn new(decision: Decision, gate: impl Into<String>, reason: impl Into<String>) -> Self {
        Verdict {
            decision,
            gate: gate.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictest_decision_wins() {
        assert_eq!(Decision::default(), Decision::Deny);
        let all = [Decision::Allow, Decision::Deny, Decision::Ask];
        assert_eq!(all.iter().max(), Some(&Decision::Deny));
        assert_eq!(
            [Decision::Allow, Decision::Ask].iter().max(),
            Some(&Decision::Ask)
        );
    }
}
