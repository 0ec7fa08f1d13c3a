//! What a decision on a plan leaves behind as evidence, and what its
//! session's model is told about it afterwards.
//!
//! [`decision_record`] is the audit record of a decision: the proposed
//! action, the approved one when a person edited it, a line diff between
//! the two ([`action_diff`]), who decided through which client, and the
//! gate verdicts of both. [`outcome_note`] is what the model of the plan's
//! session reads at its next turn when the plan ended after its own turn
//! was gone (`run` left it waiting, or its daemon stopped): the same status
//! name the plan file, `plans show`, the audit log and the notification use.

use std::fmt::Write as _;

use super::{summary, FlightPlan, PlanStatus};
use crate::action::{Action, Effect};
use crate::audit::{AuditRecord, DecisionEvidence, PlanOutcome};
use crate::gates::Judgement;

/// Largest diff kept in an audit record, in bytes.
pub const DIFF_LIMIT: usize = 8192;
/// Output of a plan quoted back to the model, in characters.
const NOTE_OUTPUT_CHARS: usize = 2000;

/// The audit record of the decision stored in `plan` (after
/// `PlanStore::decide`): `edit_judgement` is the gates' verdict on the
/// edited action, when there was an edit.
pub fn decision_record(plan: &FlightPlan, edit_judgement: Option<&Judgement>) -> AuditRecord {
    let (approved, by, comment) = match &plan.decision {
        Some(d) => (d.approved, d.by.as_str(), d.comment.as_deref()),
        None => (false, "unknown", None),
    };
    let proposed = plan.original.as_ref().unwrap_or(&plan.action);
    let edit = plan.original.as_ref().map(|original| {
        (
            &plan.action,
            action_diff(original, &plan.action),
            edit_judgement,
        )
    });
    let evidence = DecisionEvidence::new(
        &plan.session_id,
        &plan.tool_call_id,
        proposed,
        &plan.trace,
        edit,
    );
    let outcome = if approved {
        PlanOutcome::Approved
    } else {
        PlanOutcome::Rejected
    };
    AuditRecord::decision_with(&plan.id, outcome, by, comment, evidence)
}

/// A line diff from `proposed` to `approved` (` ` kept, `-` removed, `+`
/// added), at most [`DIFF_LIMIT`] bytes.
pub fn action_diff(proposed: &Action, approved: &Action) -> String {
    let old = action_text(proposed);
    let new = action_text(approved);
    let mut out = String::new();
    for (mark, line) in crate::util::diff::marked_lines(&old, &new) {
        if out.len() + line.len() + 2 > DIFF_LIMIT {
            out.push_str("… (diff truncated)\n");
            break;
        }
        let _ = writeln!(out, "{mark}{line}");
    }
    out
}

/// The parts of an action a person can change, one per line, with the
/// script or file content as its own lines so a diff shows them.
fn action_text(action: &Action) -> String {
    let mut out = String::new();
    if let Some(secs) = action.timeout_secs {
        let _ = writeln!(out, "timeout: {secs}s");
    }
    match &action.effect {
        Effect::Run {
            interpreter,
            script,
            argv,
            env,
            network,
        } => {
            let _ = writeln!(out, "interpreter: {interpreter}");
            let _ = writeln!(out, "argv: {argv:?}");
            let _ = writeln!(out, "env: {env:?}");
            let _ = writeln!(out, "network: {network}");
            out.push_str("script:\n");
            out.push_str(script);
        }
        Effect::WriteFile { path, content } => {
            let _ = writeln!(out, "path: {}", path.display());
            out.push_str("content:\n");
            out.push_str(content);
        }
        other => {
            out.push_str(&serde_json::to_string_pretty(other).unwrap_or_default());
        }
    }
    out
}

/// What the model is told about `plan`, a call of an earlier turn that
/// waited for a person, now that its outcome is known (or that it still
/// waits).
pub fn outcome_note(plan: &FlightPlan) -> String {
    let mut note = format!(
        "- Your call {} ({}: {}) became flight plan {}: ",
        plan.tool_call_id,
        plan.action.tool,
        summary(plan.original.as_ref().unwrap_or(&plan.action)),
        plan.id
    );
    let decided = plan.decision.as_ref().map(|d| {
        let mut who = format!("by {}", d.by);
        if let Some(c) = d.comment.as_deref().filter(|c| !c.trim().is_empty()) {
            let _ = write!(who, " (\"{}\")", c.trim());
        }
        who
    });
    let decided = decided.unwrap_or_default();
    let edited = if plan.original.is_some() {
        format!(
            " The person edited it first; what was approved is their version, not your \
             proposal: {}.",
            summary(&plan.action)
        )
    } else {
        String::new()
    };
    let _ = match plan.status {
        PlanStatus::Pending => write!(
            note,
            "still pending: it waits for a person's decision and has not run."
        ),
        PlanStatus::Approved | PlanStatus::Executing => {
            write!(note, "approved {decided}; it has not finished yet.{edited}")
        }
        PlanStatus::Rejected => write!(note, "rejected {decided}; it did not run."),
        PlanStatus::Executed => write!(note, "approved {decided} and executed.{edited}"),
        PlanStatus::Failed => write!(note, "approved {decided}; it ran and failed.{edited}"),
        PlanStatus::Denied => write!(
            note,
            "approved {decided}, but denied at the last check; it did not run.{edited}"
        ),
        PlanStatus::Interrupted => write!(
            note,
            "approved {decided}; it was interrupted while running, so its outcome is \
             unknown (check before asking again).{edited}"
        ),
    };
    if let Some(result) = &plan.result {
        let shown: String = result.output.chars().take(NOTE_OUTPUT_CHARS).collect();
        let more = if shown.len() < result.output.len() {
            "…"
        } else {
            ""
        };
        let _ = write!(note, "\n  Result:\n  {}{more}", shown.replace('\n', "\n  "));
    }
    note.push('\n');
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Action {
        Action::shell_for_tests(script)
    }

    #[test]
    fn the_diff_shows_the_changed_lines() {
        let diff = action_diff(&shell("cd build\nrm -rf out\nls"), &shell("cd build\nls"));
        assert!(diff.contains(" cd build\n-rm -rf out\n ls\n"), "{diff}");
        let diff = action_diff(&shell("a"), &shell("b"));
        assert!(diff.contains("-a\n+b\n"), "{diff}");
    }

    #[test]
    fn a_huge_diff_is_bounded() {
        let big = "x\n".repeat(20_000);
        let diff = action_diff(&shell(&big), &shell("y"));
        assert!(diff.len() <= DIFF_LIMIT + 32, "{}", diff.len());
        assert!(diff.ends_with("… (diff truncated)\n"));
    }
}
