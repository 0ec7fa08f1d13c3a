//! The cache of the person's git settings (issue 20: a tool call costs
//! about a bare `bwrap`): git is not asked again while nothing its answer
//! depends on changed, and a change is seen at the next tool call. Each
//! test runs shell calls through the real binary (fake provider, real
//! bubblewrap) until the answer is remembered, changes a git setting as
//! the person would, and checks that the very next call cannot write the
//! file the new setting names.
//!
//! Tests that need bubblewrap say so and return when it cannot run here.

use crate::harness;
use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

const CONFIG: &str = "shell_timeout_secs = 30\nmax_rounds = 20\n";

/// git as the person runs it, with the daemon's home.
fn person_git(dir: &Path, home: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("GIT_CONFIG_GLOBAL")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Let every file written so far fall out of the clock tick the cache
/// distrusts (`control_surface::TRUSTED_AGE`).
fn age() {
    std::thread::sleep(passepartout::control_surface::TRUSTED_AGE + Duration::from_millis(200));
}

/// Two harmless calls: the first learns which files git's answer depends
/// on, the second's answer is kept.
fn warm(id: &str) -> Vec<Reply> {
    vec![
        fake::shell_call(&format!("{id}a"), "true"),
        fake::shell_call(&format!("{id}b"), "true"),
        fake::openai_text("warm"),
    ]
}

/// One call that tries to overwrite `file` and says whether it could.
fn attack(id: &str, file: &str) -> Vec<Reply> {
    vec![
        fake::shell_call(
            id,
            &format!(
                "if printf 'evil\\n' > {file} 2>/dev/null; then echo WROTE {file}; \
                 else echo REFUSED {file}; fi"
            ),
        ),
        fake::openai_text("done"),
    ]
}

/// One prompt to its end, every ask approved.
async fn turn(client: &mut Client, session: &str, label: &str) {
    let (msg, _) = client.prompt_allowing(session, label).await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{label}: {msg}");
}

#[tokio::test]
async fn a_git_setting_changed_after_its_answer_was_remembered_protects_at_the_next_call() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    // The person's global configuration includes a file that names nothing
    // yet; a second global file (the XDG one) does not exist.
    std::fs::write(h.join(".gitconfig"), "[include]\n\tpath = ~/extra.inc\n").unwrap();
    std::fs::write(h.join("extra.inc"), "[user]\n\tname = ada\n").unwrap();
    let xdg_git = h.join("config/git/config");
    assert!(!xdg_git.exists());

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    person_git(p, h, &["init", "-q", "-b", "main"]);
    for f in ["hooks-a/pre-commit", "hooks-b/pre-commit", "tools/conv.sh"] {
        std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
        std::fs::write(p.join(f), "#!/bin/sh\nexit 0\n").unwrap();
    }

    let mut script = Vec::new();
    for (n, file) in ["hooks-a/pre-commit", "hooks-b/pre-commit", "tools/conv.sh"]
        .iter()
        .enumerate()
    {
        script.extend(warm(&format!("w{n}")));
        script.extend(attack(&format!("x{n}"), file));
    }
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (mut client, session) =
        Client::with_session(h, &["--provider-url", &url], json!({}), p).await;
    // 1. The repository's own configuration gains a `core.hooksPath`.
    age();
    turn(&mut client, &session, "warm").await;
    person_git(p, h, &["config", "core.hooksPath", "hooks-a"]);
    turn(&mut client, &session, "attack").await;
    let told = fake.last_tool_results().join("\n");
    assert!(told.contains("REFUSED hooks-a/pre-commit"), "{told}");

    // 2. A file the global configuration includes starts naming a path.
    age();
    turn(&mut client, &session, "warm").await;
    std::fs::write(h.join("extra.inc"), "[core]\n\thooksPath = hooks-b\n").unwrap();
    turn(&mut client, &session, "attack").await;
    let told = fake.last_tool_results().join("\n");
    assert!(told.contains("REFUSED hooks-b/pre-commit"), "{told}");

    // 3. A global configuration file that did not exist is created.
    age();
    turn(&mut client, &session, "warm").await;
    std::fs::create_dir_all(xdg_git.parent().unwrap()).unwrap();
    std::fs::write(&xdg_git, "[diff \"sh\"]\n\ttextconv = sh tools/conv.sh\n").unwrap();
    turn(&mut client, &session, "attack").await;
    let told = fake.last_tool_results().join("\n");
    assert!(told.contains("REFUSED tools/conv.sh"), "{told}");

    for f in ["hooks-a/pre-commit", "hooks-b/pre-commit", "tools/conv.sh"] {
        assert_eq!(
            std::fs::read_to_string(p.join(f)).unwrap(),
            "#!/bin/sh\nexit 0\n",
            "{f}"
        );
    }
}
