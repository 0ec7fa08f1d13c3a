//! The git-refs gate: judged on the changeset, not the command.
//!
//! A commit, branch, tag or stash made inside the sandbox comes back as ref
//! changes (`ObservedEffect::refs`); undo moves refs back and objects stay,
//! so growing history runs unasked. Two changes are asked, each with its
//! ref diff: deleting a ref (its commits are then reachable only until
//! git's garbage collection, and a person may rely on the name), and
//! moving a ref so that commits a remote-tracking ref already contains
//! drop out of it (a rewrite of what others may have).

use crate::checkpoint::effect::ObservedEffect;
use crate::gates::{Decision, Verdict};

/// The gate's name in traces and flight plans.
pub const NAME: &str = "effect-git-refs";

/// The verdicts on the refs an action changed (none: nothing to ask).
pub fn judge_changes(effect: &ObservedEffect) -> Vec<Verdict> {
    let mut deleted = Vec::new();
    let mut rewritten = Vec::new();
    for r in &effect.refs {
        if r.name == "HEAD" {
            continue;
        }
        if r.deleted() {
            deleted.push(r.line());
        } else if r.rewrites_pushed.is_some() {
            rewritten.push(r.line());
        }
    }
    let mut out = Vec::new();
    if !deleted.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            NAME,
            format!(
                "the action deletes git refs ({}): their commits stay only until git's garbage \
                 collection; approving deletes them in the project (undo can make them again \
                 while the commits are there), rejecting keeps them",
                deleted.join("; ")
            ),
        ));
    }
    if !rewritten.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            NAME,
            format!(
                "the action rewrites commits a remote already has ({}): approving moves the \
                 refs in the project, rejecting keeps them",
                rewritten.join("; ")
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::effect::RefChange;

    fn change(name: &str, old: Option<&str>, new: Option<&str>) -> RefChange {
        RefChange {
            name: name.into(),
            old: old.map(str::to_string),
            new: new.map(str::to_string),
            subject: None,
            rewrites_pushed: None,
        }
    }

    #[test]
    fn a_new_commit_runs_and_a_deleted_branch_is_asked_with_its_diff() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let grown = ObservedEffect {
            refs: vec![change("refs/heads/main", Some(&a), Some(&b))],
            ..Default::default()
        };
        assert!(judge_changes(&grown).is_empty());
        let deleted = ObservedEffect {
            refs: vec![change("refs/heads/topic", Some(&a), None)],
            ..Default::default()
        };
        let v = judge_changes(&deleted);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].decision, Decision::Ask);
        assert!(
            v[0].reason.contains("ref topic: aaaaaaa → (deleted)"),
            "{}",
            v[0].reason
        );
        let mut pushed = change("refs/heads/main", Some(&a), Some(&b));
        pushed.rewrites_pushed = Some("refs/remotes/origin/main".into());
        let rewritten = ObservedEffect {
            refs: vec![pushed],
            ..Default::default()
        };
        let v = judge_changes(&rewritten);
        assert!(v[0].reason.contains("origin/main"), "{}", v[0].reason);
    }
}
