//! Issue 20's whole tool call, through the real binary (`passepartout run`
//! against the fake provider, which answers at once): the overlay each
//! call runs in is the one mounted ahead for it, never one mounted on the
//! call's own path, even when the model's next call comes within a few
//! milliseconds of the last one's end.

use crate::harness;
use crate::support;

use support::fake_provider::{self as fake, FakeProvider};

/// How many shell calls the scripted model makes.
const CALLS: usize = 6;

/// `passepartout run` of one turn of [`CALLS`] shell calls in a fresh
/// project; its stderr with the debug log of the transactions and the
/// sandbox's set-up.
async fn run_calls() -> String {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut script: Vec<_> = (1..=CALLS)
        .map(|i| fake::shell_call(&format!("c{i}"), &format!("echo call {i}")))
        .collect();
    script.push(fake::openai_text("Done."));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let rounds = (CALLS + 2).to_string();
    let out = tokio::process::Command::new(harness::BIN)
        .args(["run", "--provider-url", &url, "--max-rounds", &rounds])
        .args(["--mode", "auto", "Run the commands."])
        .current_dir(project.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env(
            "PASSEPARTOUT_LOG",
            "warn,passepartout_transactions::checkpoint::txn=debug,passepartout::setup=info,\
             passepartout::agent::act=debug",
        )
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run failed:\n{stdout}\n{stderr}");
    let ran = format!("{stdout}{stderr}").matches("exit code: 0").count();
    assert_eq!(ran, CALLS, "not every call ran:\n{stdout}\n{stderr}");
    stderr
}

/// Before, the next overlay was mounted 20 ms after a command ended, so a
/// model answering faster found none and the call mounted its own on its
/// path (3–5 ms), while a second one was mounted beside it. Now it is
/// mounted as soon as the call's changeset is read, and a call that comes
/// while it is on its way waits for it.
#[tokio::test]
async fn every_call_after_the_first_takes_the_overlay_mounted_ahead() {
    if !harness::bwrap_available() {
        return;
    }
    let stderr = run_calls().await;
    // Each call's overlay, in order: taken (mounted ahead) or mounted now.
    let overlays: Vec<bool> = stderr
        .lines()
        .filter_map(|l| {
            if l.contains("the overlay mounted ahead is taken") {
                Some(true)
            } else if l.contains("no overlay ready, one is mounted now") {
                Some(false)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(overlays.len(), CALLS, "one overlay per call:\n{stderr}");
    // The first mounts its own (`run` does no warm-up); every later one
    // follows a call whose end sent the next on its way.
    assert!(
        overlays[1..].iter().all(|&ahead| ahead),
        "a call mounted its own overlay (taken ahead: {overlays:?}):\n{stderr}"
    );
}
