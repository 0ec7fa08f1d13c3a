//! The daemon driven by a client nobody here wrote: the official Python ACP
//! SDK (`agent-client-protocol`, pinned in `tests/sdk/requirements.txt`),
//! whose pydantic models of the ACP schema read every message. The client
//! (`tests/sdk/acp_python_client.py`) initializes, opens a session in
//! `ask` mode, prompts, approves the file change it is asked about, and
//! prints what it saw; a message the SDK cannot read is counted as an
//! error. The SDK is installed by `tests/sdk/setup.sh` (run by
//! `scripts/test.sh`) into `target/sdk-venv`.

use crate::harness;
use crate::support;

use std::path::PathBuf;

use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

/// The venv's Python, after running the setup script (idempotent; it
/// installs from PyPI the first time).
fn sdk_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("tests/sdk/setup.sh"))
        .output()
        .expect("bash runs tests/sdk/setup.sh");
    assert!(
        out.status.success(),
        "tests/sdk/setup.sh could not install the Python ACP SDK (needs python3 with venv, and PyPI):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    root.join("target/sdk-venv/bin/python")
}

#[tokio::test]
async fn the_python_sdk_reads_every_message_and_approves_a_change_it_was_shown() {
    let python = sdk_python();
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "milk\n").unwrap();
    let fake = FakeProvider::start(vec![
        fake::write_call("w1", "notes.txt", "milk\neggs\n"),
        fake::openai_text("Added eggs."),
    ])
    .await;
    let url = fake.openai_url();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/acp_python_client.py");
    let home_path = home.path();
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(project.path())
        .args([
            harness::BIN,
            "serve",
            "--provider-url",
            &url,
            "--model",
            "fake-model",
        ])
        .env("HOME", home_path)
        .env("XDG_CONFIG_HOME", home_path.join("config"))
        .env("XDG_STATE_HOME", home_path.join("state"))
        .env("XDG_DATA_HOME", home_path.join("data"))
        .env_remove("PASSEPARTOUT_CONFIG")
        .env(
            "PASSEPARTOUT_DISCOVERY_HOSTS",
            "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
        )
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(harness::TOTAL_WAIT, run)
        .await
        .expect("the SDK client finishes")
        .expect("the venv's python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let seen: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON summary expected ({e}):\n{stdout}\n{stderr}"));

    assert_eq!(
        seen["errors"],
        json!([]),
        "the SDK could not read a message: {seen}"
    );
    assert_eq!(seen["protocolVersion"], 1, "{seen}");
    assert_eq!(seen["agentName"], "passepartout", "{seen}");
    assert_eq!(seen["stopReason"], "end_turn", "{seen}");
    assert!(seen["usage"]["totalTokens"].as_u64().is_some(), "{seen}");
    assert_eq!(seen["message"], "Added eggs.", "{seen}");

    // Asked once, shown the change as an ACP diff before approving it.
    let asks = seen["asks"].as_array().unwrap();
    assert_eq!(asks.len(), 1, "{seen}");
    let diff = asks[0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "diff")
        .unwrap_or_else(|| panic!("no diff in the permission request: {seen}"));
    assert_eq!(diff["oldText"], "milk\n", "{diff}");
    assert_eq!(diff["newText"], "milk\neggs\n", "{diff}");
    assert!(
        seen["toolStatuses"]
            .as_array()
            .unwrap()
            .contains(&json!("completed")),
        "{seen}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "milk\neggs\n"
    );
    // And nothing on the daemon's stderr reached the client's (the SDK
    // passes the agent's stderr through).
    assert!(
        !stderr.contains("WARN") && !stderr.contains("ERROR"),
        "{stderr}"
    );
}
