//! Effect gates: the second gate stage, judging what an action *did* to the
//! working tree rather than what its text seemed to say. Pure functions over
//! an observed effect; the strictest verdict wins, as with the text gates.

use std::path::Path;

use crate::action::{Action, Effect};
use crate::control_surface::control_entry;
use crate::gates::verdict::Verdict;
use crate::gates::Decision;

use crate::checkpoint::effect::{ChangeKind, ObservedEffect};
use crate::checkpoint::CheckpointConfig;

/// Judge an observed effect. Returns every verdict that is not *allow*
/// (empty: allow).
///
/// `contained`: the effect is a changeset (or a file tool's one recorded
/// write) whose every deleted or emptied project file has its pre-image in
/// the record, so the bulk thresholds (`max_deleted_files`,
/// `max_removed_bytes`, an emptied file) give way to what undo can
/// restore: only pre-images the checkpoint quota cannot hold are asked
/// (`gates::consequence::over_quota`, the loss class). Observed after the
/// fact (long-running, `observe`), the thresholds still ask.
pub fn judge(
    effect: &ObservedEffect,
    action: &Action,
    cwd: &Path,
    cfg: &CheckpointConfig,
    contained: bool,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    if contained {
        out.extend(crate::gates::consequence::over_quota(
            effect,
            cfg.max_store_bytes,
        ));
    } else {
        bulk(effect, cfg, &mut out);
    }
    judge_rest(effect, action, cwd, out)
}

/// The bulk thresholds of an effect observed after the fact.
fn bulk(effect: &ObservedEffect, cfg: &CheckpointConfig, out: &mut Vec<Verdict>) {
    let deleted: Vec<_> = effect
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Deleted)
        .collect();
    if deleted.len() > cfg.max_deleted_files {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-deletes",
            format!(
                "the action deleted {} files (more than {}): {}",
                deleted.len(),
                cfg.max_deleted_files,
                sample(deleted.iter().map(|c| c.path.as_str()))
            ),
        ));
    }
    let removed = effect.bytes_removed();
    if removed > cfg.max_removed_bytes {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-deletes",
            format!(
                "the action removed {removed} bytes from the project (more than {})",
                cfg.max_removed_bytes
            ),
        ));
    }
    let emptied: Vec<&str> = effect
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Modified)
        .filter(|c| c.old_size.unwrap_or(0) > 0 && c.new_size == Some(0))
        .map(|c| c.path.as_str())
        .collect();
    if !emptied.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-truncates",
            format!("the action emptied {}", sample(emptied.into_iter())),
        ));
    }
}

/// The verdicts that do not depend on containment.
fn judge_rest(
    effect: &ObservedEffect,
    action: &Action,
    cwd: &Path,
    mut out: Vec<Verdict>,
) -> Vec<Verdict> {
    if let Effect::WriteFile { path, .. } = &action.effect {
        let named = crate::util::path::normalize(&if path.is_absolute() {
            path.clone()
        } else {
            cwd.join(path)
        });
        let others: Vec<&str> = effect
            .changes
            .iter()
            .filter(|c| crate::util::path::normalize(&cwd.join(&c.path)) != named)
            .map(|c| c.path.as_str())
            .collect();
        if !others.is_empty() {
            out.push(Verdict::new(
                Decision::Ask,
                "effect-unnamed",
                format!(
                    "write_file named {} but also changed {}",
                    path.display(),
                    sample(others.into_iter())
                ),
            ));
        }
    }
    if !effect.git_damage.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-project-git",
            format!(
                "the action deleted {} of the project's .git; checkpoints restore the \
                 working tree, not the repository",
                effect.git_damage.join(", ")
            ),
        ));
    }
    if !effect.precious.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-precious",
            format!(
                "the action modified or deleted ignored-but-precious {} (`[checkpoints] precious`)",
                sample(effect.precious.iter().map(String::as_str))
            ),
        ));
    }
    for c in &effect.changes {
        if let Some(entry) = control_entry(Path::new(&c.path)) {
            out.push(Verdict::new(
                Decision::Ask,
                "effect-control-surface",
                format!("the action changed {} ({})", c.path, entry.why),
            ));
        }
    }
    out
}

fn sample<'a>(paths: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = paths.collect();
    let mut shown = all.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 5 {
        shown.push_str(&format!(" and {} more", all.len() - 5));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::effect::FileChange;
    use serde_json::json;

    fn change(path: &str, kind: ChangeKind, old: Option<u64>, new: Option<u64>) -> FileChange {
        FileChange {
            path: path.into(),
            kind,
            old_size: old,
            new_size: new,
            old: None,
            new: None,
        }
    }

    fn action(effect: Effect) -> Action {
        Action {
            tool: "t".into(),
            target: "files".into(),
            arguments: json!({}),
            effect,
            approval: crate::action::Approval::Auto,
            timeout_secs: None,
        }
    }

    fn shell() -> Action {
        action(Effect::Run {
            interpreter: "bash".into(),
            script: "x".into(),
            argv: vec![],
            env: Default::default(),
            network: false,
        })
    }

    fn gates(changes: Vec<FileChange>, a: &Action) -> Vec<String> {
        let e = ObservedEffect {
            changes,
            ..Default::default()
        };
        judge(&e, a, Path::new("/p"), &CheckpointConfig::default(), false)
            .into_iter()
            .map(|v| v.gate)
            .collect()
    }

    /// Contained, the bulk thresholds give way to what undo can restore:
    /// only pre-images over the checkpoint quota ask, as a loss.
    #[test]
    fn contained_bulk_deletes_are_undoable_unless_over_the_quota() {
        let many: Vec<_> = (0..25)
            .map(|i| change(&format!("f{i}"), ChangeKind::Deleted, Some(4096), None))
            .chain([change("src/a.rs", ChangeKind::Modified, Some(9), Some(0))])
            .collect();
        let e = ObservedEffect {
            changes: many,
            ..Default::default()
        };
        let judged = |cfg: &CheckpointConfig| -> Vec<String> {
            judge(&e, &shell(), Path::new("/p"), cfg, true)
                .into_iter()
                .map(|v| v.gate)
                .collect()
        };
        assert!(judged(&CheckpointConfig::default()).is_empty());
        let small = CheckpointConfig {
            max_store_bytes: 64 * 1024,
            ..CheckpointConfig::default()
        };
        assert_eq!(judged(&small), ["effect-loss"]);
        let unbounded = CheckpointConfig {
            max_store_bytes: 0,
            ..small
        };
        assert!(judged(&unbounded).is_empty());
    }

    #[test]
    fn a_few_small_changes_pass() {
        let changes = vec![
            change("a", ChangeKind::Created, None, Some(3)),
            change("b", ChangeKind::Modified, Some(3), Some(4)),
            change("c", ChangeKind::Deleted, Some(3), None),
        ];
        assert!(gates(changes, &shell()).is_empty());
    }

    #[test]
    fn bulk_deletes_and_emptied_files_ask() {
        let many: Vec<_> = (0..21)
            .map(|i| change(&format!("f{i}"), ChangeKind::Deleted, Some(1), None))
            .collect();
        assert_eq!(gates(many, &shell()), ["effect-deletes"]);
        let big = vec![change("big", ChangeKind::Deleted, Some(2 << 20), None)];
        assert_eq!(gates(big, &shell()), ["effect-deletes"]);
        let emptied = vec![change("src/a.rs", ChangeKind::Modified, Some(9), Some(0))];
        assert_eq!(gates(emptied, &shell()), ["effect-truncates"]);
    }

    #[test]
    fn write_file_may_change_only_the_path_it_named() {
        let w = action(Effect::WriteFile {
            path: "./a.txt".into(),
            content: "x".into(),
        });
        let own = vec![change("a.txt", ChangeKind::Created, None, Some(1))];
        assert!(gates(own, &w).is_empty());
        let other = vec![
            change("a.txt", ChangeKind::Created, None, Some(1)),
            change("b.txt", ChangeKind::Created, None, Some(1)),
        ];
        assert_eq!(gates(other, &w), ["effect-unnamed"]);
    }

    #[test]
    fn control_surface_changes_ask() {
        let c = vec![change(".dir-locals.el", ChangeKind::Created, None, Some(1))];
        assert_eq!(gates(c, &shell()), ["effect-control-surface"]);
    }
}
