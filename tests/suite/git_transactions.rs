//! Issue 37's git part through the real binary, real bubblewrap and a
//! scripted model: a commit made inside comes back through the overlay of
//! `.git`, `history` shows the ref move, `undo` moves the ref back, and a
//! ref deletion is asked with the ref diff.

use crate::harness;
use crate::suite::changeset_consequences::{project, Turn};

use std::path::Path;

/// `git rev-parse` in `dir`.
fn rev(dir: &Path, what: &str) -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "-q", what])
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn log(dir: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "--format=%s", "main"])
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const COMMIT: &str = "echo more >> a.txt && git add a.txt && \
     git -c user.name=Agent -c user.email=agent@example.org commit -qm 'agent work'";

/// A commit made inside shows in the host's `git log`; `history` shows the
/// ref move with the subject; `undo` moves `main` back.
#[tokio::test]
async fn a_commit_made_inside_lands_and_undo_removes_it_from_the_branch() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let before = rev(p, "main");
    let turn = Turn::run(p, &[COMMIT], "allow_once").await;
    let after = rev(p, "main");
    assert_ne!(before, after, "no commit landed: {}", turn.told());
    assert!(log(p).starts_with("agent work\n"), "{}", log(p));
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok, "{history}");
    let line = format!(
        "ref main: {} → {} \"agent work\"",
        &before[..7],
        &after[..7]
    );
    assert!(history.contains(&line), "{line:?} not in:\n{history}");
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert_eq!(rev(p, "main"), before, "{out}");
    assert_eq!(log(p), "init\n");
    // The objects stay: the commit can still be read.
    assert_eq!(rev(p, &format!("{after}^{{commit}}")), after);
}

/// `git branch -D` of a branch is asked, with the ref diff; rejected, the
/// branch stays.
#[tokio::test]
async fn deleting_a_branch_is_asked_with_the_ref_diff() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    harness::git(p, &["branch", "topic"]);
    let topic = rev(p, "topic");
    let turn = Turn::run(p, &["git branch -d topic"], "reject_once").await;
    let asks = turn.asks();
    assert!(
        asks.contains(&format!("ref topic: {} → (deleted)", &topic[..7])),
        "not asked with the ref diff: {asks}\n{}",
        turn.told()
    );
    assert_eq!(rev(p, "topic"), topic, "the branch is gone");
}

/// Amending a commit `origin/main` already holds is asked with the ref
/// diff, naming the remote-tracking ref; a new commit on top is not.
#[tokio::test]
async fn rewriting_a_pushed_commit_is_asked_and_a_new_commit_is_not() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    harness::git(p, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    let turn = Turn::run(p, &[COMMIT], "allow_once").await;
    assert!(turn.asked.is_empty(), "{}", turn.asks());
    let pushed = rev(p, "main");
    harness::git(p, &["update-ref", "refs/remotes/origin/main", "main"]);
    let amend = "git -c user.name=Agent -c user.email=agent@example.org \
                 commit -q --amend -m rewritten";
    let turn = Turn::run(p, &[amend], "allow_once").await;
    let asks = turn.asks();
    assert!(
        asks.contains(&format!("ref main: {} → ", &pushed[..7]))
            && asks.contains("drops commits remotes/origin/main already has"),
        "{asks}\n{}",
        turn.told()
    );
}

/// Growing history — a tag, a stash, a branch merged back — runs unasked,
/// lands in the host repository and shows as ref moves in `history`;
/// `undo` of the merge moves `main` back.
#[tokio::test]
async fn tags_stashes_and_merges_land_unasked_and_show_as_ref_moves() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let id = "git -c user.name=Agent -c user.email=agent@example.org";
    let before = rev(p, "main");
    let commands = [
        "git tag v1".to_string(),
        "echo wip >> a.txt && git stash -q".to_string(),
        format!(
            "git checkout -q -b topic && echo t > t.txt && git add t.txt && \
             {id} commit -qm topic && git checkout -q main && {id} merge -q --no-ff -m merged topic"
        ),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let turn = Turn::run(p, &commands, "reject_once").await;
    assert!(turn.asked.is_empty(), "{}", turn.asks());
    assert_eq!(rev(p, "v1"), before);
    assert!(!rev(p, "refs/stash").is_empty(), "{}", turn.told());
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
    let merged = rev(p, "main");
    assert_ne!(merged, before, "{}", turn.told());
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok, "{history}");
    for line in [
        format!("ref tag v1: (new) → {}", &before[..7]),
        "ref stash: (new) → ".to_string(),
        format!("ref main: {} → {} \"merged\"", &before[..7], &merged[..7]),
    ] {
        assert!(history.contains(&line), "{line:?} not in:\n{history}");
    }
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert_eq!(rev(p, "main"), before, "{out}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
}
