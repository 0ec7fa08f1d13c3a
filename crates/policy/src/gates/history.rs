//! The history gate: git history may only grow without a person.
//!
//! Checkpoints restore the working tree, not the repository: a commit lost
//! to `git branch -f main <orphan>`, an expired reflog, a prune or a
//! rewritten `.git/HEAD` or `objects/info/alternates` cannot be brought
//! back by undo. So adding to history (add, commit, a new branch, stash)
//! runs without asking, and anything that can lose a commit — moving or
//! deleting a ref backwards, expiring reflogs, pruning or deleting objects,
//! rewriting HEAD, alternates, config or hooks — is *ask*. (`git config`
//! keys that run programs are the shell gate's control-surface check.) It is judged
//! twice: from the command (git subcommands and flags, and any write into a
//! `.git` directory by any program) here, and from the changeset (the
//! `.git/` paths an action actually changed) by [`judge_changes`], which the
//! effect stage calls with the observed effect.

use std::path::{Component, Path};

use crate::action::{Action, Effect};
use crate::checkpoint::effect::{ChangeKind, ObservedEffect};
use crate::gates::engine::verdict_from_findings;
use crate::gates::shell::{resolve_path, script_of, Command};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// Holds commands and writes that can lose git history.
#[derive(Debug, Clone, Copy, Default)]
pub struct HistoryGate;

impl Gate for HistoryGate {
    fn name(&self) -> &str {
        "history"
    }

    fn priority(&self) -> i32 {
        12
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = Vec::new();
        if let Some(script) = script_of(&action.effect, ctx) {
            for cmd in &script.commands {
                if cmd.program == "git" {
                    if let Some(why) = git_loses_history(cmd) {
                        findings.push((Decision::Ask, why));
                    }
                    if let Some(why) = git_exports_history(cmd) {
                        findings.push((Decision::Ask, why));
                    }
                }
                for target in cmd.write_targets() {
                    let path = cmd.resolve(&target, ctx);
                    if let Some(why) = git_internal(&path) {
                        findings.push((
                            Decision::Ask,
                            format!("{} writes or removes `{target}`: {why}", cmd.label()),
                        ));
                    }
                }
            }
        }
        if let Effect::WriteFile { path, .. } = &action.effect {
            let shown = path.to_string_lossy();
            if let Some(why) = git_internal(&resolve_path(&shown, ctx)) {
                findings.push((Decision::Ask, format!("writes `{shown}`: {why}")));
            }
        }
        verdict_from_findings(self.name(), findings)
    }
}

/// The git subcommand and the words after it, skipping global options
/// (`-C dir`, `-c k=v`, `--git-dir=...`).
fn subcommand(cmd: &Command) -> Option<(&str, &[String])> {
    let mut i = 0;
    while i < cmd.args.len() {
        let a = cmd.args[i].as_str();
        if matches!(a, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace") {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some((a, &cmd.args[i + 1..]));
        }
    }
    None
}

fn has(rest: &[String], short: &[char], long: &[&str]) -> bool {
    rest.iter().any(|a| {
        if let Some(name) = a.strip_prefix("--") {
            long.contains(&name.split('=').next().unwrap_or(name))
        } else if let Some(cluster) = a.strip_prefix('-') {
            !cluster.is_empty()
                && cluster.chars().all(|c| c.is_ascii_alphabetic())
                && cluster.chars().any(|c| short.contains(&c))
        } else {
            false
        }
    })
}

fn operands(rest: &[String]) -> Vec<&str> {
    rest.iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect()
}

/// Why this git command can lose a commit, or `None` when it only adds.
pub fn git_loses_history(cmd: &Command) -> Option<String> {
    let (sub, rest) = subcommand(cmd)?;
    let ops = operands(rest);
    let why = match sub {
        "branch" if has(rest, &['D', 'M', 'C', 'f'], &["force"]) => {
            "`git branch` with force moves or deletes a branch whatever commits it leaves behind"
        }
        "tag" if has(rest, &['d', 'f'], &["delete", "force"]) => {
            "`git tag -d/-f` deletes or moves a tag"
        }
        "update-ref" => "`git update-ref` sets or deletes a ref to any commit",
        "symbolic-ref" if ops.len() >= 2 || has(rest, &['d'], &["delete"]) => {
            "`git symbolic-ref` rewrites what HEAD points to"
        }
        "reflog" if matches!(ops.first(), Some(&"expire") | Some(&"delete")) => {
            "`git reflog expire/delete` removes the record that recovers lost commits"
        }
        "gc" => "`git gc` expires reflogs and prunes unreachable commits",
        "prune" => "`git prune` deletes unreachable objects",
        "repack" if has(rest, &['d'], &[]) => "`git repack -d` drops unreachable objects",
        "filter-branch" | "filter-repo" => "rewrites every commit of the history",
        "rebase" => "`git rebase` moves a branch to rewritten commits",
        "reset" if !has(rest, &[], &["hard"]) && resets_a_ref(rest) => {
            "`git reset` to another commit moves the branch backwards"
        }
        "stash" if matches!(ops.first(), Some(&"drop") | Some(&"clear")) => {
            "`git stash drop/clear` deletes stashed work"
        }
        "push"
            if has(
                rest,
                &['f', 'd'],
                &["force", "force-with-lease", "delete", "mirror", "prune"],
            ) || ops
                .iter()
                .skip(1)
                .any(|o| o.starts_with('+') || o.starts_with(':')) =>
        {
            "a forced or deleting push rewrites the remote's history"
        }
        "replace" => "`git replace` swaps one commit for another",
        "worktree" if ops.first() == Some(&"remove") && has(rest, &['f'], &["force"]) => {
            "`git worktree remove --force` deletes a worktree with its changes"
        }
        _ => return None,
    };
    Some(why.to_string())
}

/// Why this git command copies the history out of the repository, or
/// `None`: a bundle, a fast-export stream or a mirror holds every version
/// of every file ever committed — a secret committed once and removed
/// since included — so it is judged like reading the secret files
/// (issue 17: history leaving the project).
pub fn git_exports_history(cmd: &Command) -> Option<String> {
    let (sub, rest) = subcommand(cmd)?;
    let ops = operands(rest);
    let why = match sub {
        "bundle" if ops.first() == Some(&"create") => {
            "`git bundle create` writes the whole history (every version of every file, secrets \
             committed once included) to one file"
        }
        "fast-export" => {
            "`git fast-export` prints the whole history (every version of every file, secrets \
             committed once included)"
        }
        "clone" if has(rest, &[], &["mirror", "bare"]) => {
            "a bare or mirror clone copies the whole history (every version of every file)"
        }
        _ => return None,
    };
    Some(why.to_string())
}

/// `git reset --soft/--mixed/--keep REV` or `git reset HEAD~1`: the branch
/// moves; `git reset FILE` and `git reset` alone only unstage.
fn resets_a_ref(rest: &[String]) -> bool {
    has(rest, &[], &["soft", "mixed", "keep", "merge"])
        || operands(rest)
            .iter()
            .any(|o| o.contains('~') || o.contains('^') || o.contains("@{") || o.len() == 40)
}

/// Why a path inside a `.git` directory is part of the history, or `None`
/// when it is not in one.
pub fn git_internal(path: &Path) -> Option<&'static str> {
    let comps: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let at = comps.iter().position(|c| *c == ".git")?;
    Some(git_part(&comps[at + 1..]))
}

fn git_part(inside: &[&str]) -> &'static str {
    match inside {
        [] => "the repository itself; checkpoints cannot restore it",
        ["HEAD"] => "what the repository's HEAD points to",
        ["objects", "info", "alternates"] => {
            "objects/info/alternates, which makes history depend on another store"
        }
        ["objects", ..] => "the repository's objects: deleted commits cannot be restored",
        ["refs", ..] | ["packed-refs"] => "a ref: moving or deleting it loses commits",
        ["logs", ..] => "a reflog, the record that recovers lost commits",
        ["config"] => "the repository's config, which names programs git runs",
        ["hooks", ..] => "a git hook, which runs on the host at the next commit",
        _ => "the repository's internals",
    }
}

/// Judge an action's changeset by its `.git/` paths (relative to the
/// project): history may grow (new objects, new refs, longer reflogs), but
/// deleted objects, refs or reflogs, shrunken reflogs, and changes to HEAD,
/// alternates, config or hooks are held for a person.
pub fn judge_changes(effect: &ObservedEffect) -> Vec<Verdict> {
    let mut lost: Vec<String> = Vec::new();
    for c in &effect.changes {
        let Some(inside) = c.path.strip_prefix(".git/") else {
            continue;
        };
        let parts: Vec<&str> = inside.split('/').collect();
        let shrank = matches!(
            (c.old_size, c.new_size),
            (Some(old), Some(new)) if new < old
        );
        let loses = match (parts.as_slice(), c.kind) {
            (["objects", "info", "alternates"], _) => true,
            (["objects", ..], ChangeKind::Deleted) => !is_packed_elsewhere(&c.path, effect),
            (["refs", ..] | ["packed-refs"], ChangeKind::Deleted) => true,
            (["logs", ..], ChangeKind::Deleted) => true,
            (["logs", ..], ChangeKind::Modified) => shrank,
            (["HEAD"] | ["config"], ChangeKind::Modified | ChangeKind::Deleted) => true,
            (["hooks", ..], _) => !c.path.ends_with(".sample"),
            _ => false,
        };
        if loses {
            lost.push(c.path.clone());
        }
    }
    if lost.is_empty() {
        return Vec::new();
    }
    let shown: Vec<&str> = lost.iter().take(5).map(String::as_str).collect();
    let more = lost.len().saturating_sub(shown.len());
    vec![Verdict::new(
        Decision::Ask,
        "effect-history",
        format!(
            "the action changed git history in a way checkpoints cannot undo: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    )]
}

/// A loose object deleted while a pack was written in the same action
/// (`git gc` without pruning, `git repack`) moved, it was not lost.
fn is_packed_elsewhere(path: &str, effect: &ObservedEffect) -> bool {
    !path.starts_with(".git/objects/pack/")
        && effect.changes.iter().any(|c| {
            c.kind == ChangeKind::Created
                && c.path.starts_with(".git/objects/pack/")
                && c.path.ends_with(".pack")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::effect::FileChange;
    use crate::gates::shell::parse;

    fn loses(script: &str) -> bool {
        parse(script, None)
            .commands
            .iter()
            .any(|c| c.program == "git" && git_loses_history(c).is_some())
    }

    #[test]
    fn growing_history_passes_and_losing_it_does_not() {
        for ok in [
            "git add -A",
            "git commit -m wip",
            "git checkout -b feature",
            "git branch feature",
            "git stash",
            "git stash pop",
            "git reset",
            "git reset src/main.rs",
            "git config user.email dev@example.com",
            "git push origin main",
            "git tag v1.0",
            "git log --oneline",
        ] {
            assert!(!loses(ok), "{ok} only adds to history");
        }
        for bad in [
            "git branch -f main deadbeef",
            "git branch -D feature",
            "git -C . update-ref -d refs/heads/main",
            "git update-ref refs/heads/main HEAD~5",
            "git reflog expire --expire=now --all",
            "git gc --prune=now",
            "git prune",
            "git symbolic-ref HEAD refs/heads/orphan",
            "git reset --soft HEAD~3",
            "git push --force origin main",
            "git push origin +main",
            "git stash clear",
            "git filter-branch --tree-filter true HEAD",
        ] {
            assert!(loses(bad), "{bad} can lose a commit");
        }
    }

    #[test]
    fn history_leaving_the_repository_is_named() {
        let exports = |script: &str| {
            parse(script, None)
                .commands
                .iter()
                .any(|c| c.program == "git" && git_exports_history(c).is_some())
        };
        for bad in [
            "git bundle create /tmp/x --all",
            "git -C . bundle create repo.bundle HEAD",
            "git fast-export --all > /tmp/h",
            "git clone --mirror . /tmp/m",
        ] {
            assert!(exports(bad), "{bad} copies the history out");
        }
        for ok in [
            "git bundle verify x.bundle",
            "git bundle list-heads x.bundle",
            "git clone https://example.org/r.git",
            "git log --oneline",
        ] {
            assert!(!exports(ok), "{ok} copies nothing out");
        }
    }

    #[test]
    fn git_internals_are_named() {
        assert!(git_internal(Path::new("/p/.git/HEAD")).is_some());
        assert!(git_internal(Path::new("/p/.git/objects/info/alternates")).is_some());
        assert!(git_internal(Path::new("/p/src/git.rs")).is_none());
        assert!(git_internal(Path::new("/p/.gitignore")).is_none());
    }

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

    fn effect(changes: Vec<FileChange>) -> ObservedEffect {
        ObservedEffect {
            changes,
            ..ObservedEffect::default()
        }
    }

    #[test]
    fn changesets_that_grow_history_pass_and_losses_are_held() {
        let commit = effect(vec![
            change(".git/objects/ab/cdef", ChangeKind::Created, None, Some(50)),
            change(
                ".git/refs/heads/main",
                ChangeKind::Modified,
                Some(41),
                Some(41),
            ),
            change(".git/logs/HEAD", ChangeKind::Modified, Some(100), Some(200)),
            change(".git/index", ChangeKind::Modified, Some(100), Some(120)),
        ]);
        assert!(judge_changes(&commit).is_empty());
        for lost in [
            change(".git/objects/ab/cdef", ChangeKind::Deleted, Some(50), None),
            change(".git/refs/heads/topic", ChangeKind::Deleted, Some(41), None),
            change(".git/logs/HEAD", ChangeKind::Modified, Some(200), Some(0)),
            change(".git/HEAD", ChangeKind::Modified, Some(21), Some(25)),
            change(
                ".git/objects/info/alternates",
                ChangeKind::Created,
                None,
                Some(9),
            ),
            change(".git/hooks/pre-commit", ChangeKind::Created, None, Some(9)),
        ] {
            let shown = lost.path.clone();
            assert_eq!(
                judge_changes(&effect(vec![lost])).len(),
                1,
                "{shown} loses history"
            );
        }
    }
}
