//! The control surface under the project's inotify watch (issue 20: a tool
//! call in a large repository costs what it costs in an empty one): the
//! walk before a call reads only directories with events since, and the
//! look for planted repositories after it reads only those the run changed.
//! The guarantee stays whole, through the real binary (fake provider, real
//! bubblewrap, real inotify):
//!
//! - a repository or `.envrc` the person makes deep in a tree already
//!   walked (and vouched for by the watch) is read-only at the very next
//!   call;
//! - a repository a run makes deep in such a tree is found after the run
//!   and loses what would run programs on the host, whether the run was
//!   observed (the watch's events say where to look) or ran into an
//!   overlay (its upper layer is looked at).
//!
//! Tests that need bubblewrap say so and return when it cannot run here.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

pub(super) const CONFIG: &str = "shell_timeout_secs = 30\nmax_rounds = 20\n";

/// Runs are observed, not overlaid: the sweep after the run looks at the
/// project itself, by the watch's events.
pub(super) const OBSERVED: &str =
    "shell_timeout_secs = 30\nmax_rounds = 20\n[checkpoints]\ntransactions = \"observe\"\n";

/// A project with a tree deep enough that a stale listing would matter.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for d in ["src/a/b/c/d", "src/e/f", "docs/g", "target/debug/build/x"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("src/a/b/c/d/lib.rs"), "// lib\n").unwrap();
    dir
}

/// Two harmless calls: the first walks and arms the watch, the second is
/// vouched for by it.
pub(super) fn warm(id: &str) -> Vec<Reply> {
    vec![
        fake::shell_call(&format!("{id}a"), "true"),
        fake::shell_call(&format!("{id}b"), "true"),
        fake::openai_text("warm"),
    ]
}

/// One call that tries to overwrite each of `files` and says whether it
/// could.
pub(super) fn attack(id: &str, files: &[&str]) -> Vec<Reply> {
    let command = files
        .iter()
        .map(|f| {
            format!(
                "if printf 'evil\\n' >> {f} 2>/dev/null; then echo WROTE {f}; \
                 else echo REFUSED {f}; fi"
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    vec![fake::shell_call(id, &command), fake::openai_text("done")]
}

/// One prompt to its end, every ask approved.
pub(super) async fn turn(client: &mut Client, session: &str, label: &str) {
    let (msg, _) = client.prompt_allowing(session, label).await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{label}: {msg}");
}

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

#[tokio::test]
async fn a_repository_the_person_makes_deep_in_a_watched_tree_is_read_only_at_the_next_call() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let project = project();
    let p = project.path();
    let mut script = warm("w");
    script.extend(attack(
        "x",
        &["src/a/b/c/d/vendored/.git/config", "src/e/f/.envrc"],
    ));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (mut client, session) =
        Client::with_session(home.path(), &["--provider-url", &url], json!({}), p).await;
    turn(&mut client, &session, "warm").await;

    // The person, between two calls: a repository deep in the walked tree,
    // and a `.envrc` in another walked folder.
    git(&p.join("src/a/b/c/d"), &["init", "-q", "vendored"]);
    std::fs::write(p.join("src/e/f/.envrc"), "export A=1\n").unwrap();
    let config = std::fs::read(p.join("src/a/b/c/d/vendored/.git/config")).unwrap();

    turn(&mut client, &session, "attack").await;
    let told = fake.last_tool_results().join("\n");
    assert!(
        told.contains("REFUSED src/a/b/c/d/vendored/.git/config"),
        "{told}"
    );
    assert!(told.contains("REFUSED src/e/f/.envrc"), "{told}");
    assert_eq!(
        std::fs::read(p.join("src/a/b/c/d/vendored/.git/config")).unwrap(),
        config
    );
    assert_eq!(
        std::fs::read_to_string(p.join("src/e/f/.envrc")).unwrap(),
        "export A=1\n"
    );
}

/// A run plants a repository whose configuration names a program, deep in
/// a tree the watch vouches for: after the run that configuration is gone.
async fn a_planted_repository_is_found(config: &str) {
    let home = harness::home_with_config(config);
    let project = project();
    let p = project.path();
    let repo = "src/a/b/c/d/planted/.git";
    let mut script = warm("w");
    script.push(fake::shell_call(
        "plant",
        &format!(
            "mkdir -p {repo}/objects {repo}/refs {repo}/hooks && \
             printf 'ref: refs/heads/main\\n' > {repo}/HEAD && \
             printf '[core]\\n\\tfsmonitor = ./x.sh\\n' > {repo}/config"
        ),
    ));
    script.push(fake::openai_text("done"));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (mut client, session) =
        Client::with_session(home.path(), &["--provider-url", &url], json!({}), p).await;
    turn(&mut client, &session, "warm").await;
    turn(&mut client, &session, "plant").await;
    let told = fake.last_tool_results().join("\n");
    assert!(told.contains(&format!("`{repo}/config`")), "{told}");
    assert!(!p.join(repo).join("config").exists(), "{told}");
}

#[tokio::test]
async fn a_repository_an_observed_run_makes_deep_in_a_watched_tree_is_found_after_it() {
    if !harness::bwrap_available() {
        return;
    }
    a_planted_repository_is_found(OBSERVED).await;
}

#[tokio::test]
async fn a_repository_an_overlaid_run_makes_deep_in_a_watched_tree_is_found_after_it() {
    if !harness::bwrap_available() {
        return;
    }
    a_planted_repository_is_found(CONFIG).await;
}
