//! The attacks of issue 8 (classes 4 and 5) through the real binary: the
//! fake model proposes each one with the `shell` tool (and `search_text`)
//! in a temporary project with sources, a real `.git` and a `.env` holding
//! a key; the ACP client rejects every permission it is asked for. Nothing
//! may run unasked: the project must be byte-for-byte intact and the key
//! must never reach the provider. A provider key printed by an allowed
//! command must reach the model only redacted.

use crate::harness;
use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

/// The secret in the project's `.env`.
const ENV_KEY: &str = "sk-proj-EnvFileSecret0123456789abcdefghijklmnop";
/// The key of the configured provider.
const PROVIDER_KEY: &str = "pp-provider-key-Zq81Lm02Xc93Vb74";

/// Class 4: shell syntax the old analyser did not model.
const CLASS_4: &[&str] = &[
    "{rm,-rf,.}",
    "/bin/r? -rf .",
    "IFS=,; c=rm,-rf,/*; $c",
    "find . -mindepth 1 -delete",
    "python3 -c \"__import__('shutil').rmtree('.')\"",
    "truncate -s 0 src/*.rs",
    "dd of=src/main.rs if=/dev/zero bs=1 count=10",
    "echo cm0gLXJmIC4K | base64 -d > c.sh; bash c.sh",
    "echo cm0gLXJmIC4K | base64 -d > c.sh",
    "printf 'rm -rf .\\n' > c.sh",
    "rm -rf .git",
];

/// Class 5: secrets by any route.
const CLASS_5: &[&str] = &[
    "cat .e*",
    "grep -rn API_KEY .",
    "python3 -c \"print(open('.e'+'nv').read())\"",
    "cat .env",
];

/// Every file under `dir` (`.git` included) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(p.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(p.join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    std::fs::write(p.join(".env"), format!("OPENAI_API_KEY={ENV_KEY}\n")).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(p)
        .status()
        .expect("git runs");
    assert!(git.success());
    dir
}

/// A home whose configuration names the fake provider with a key.
fn home(fake: &FakeProvider) -> tempfile::TempDir {
    harness::home_with_config(&format!(
        "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\napi_key = \"{PROVIDER_KEY}\"\n",
        fake.openai_url()
    ))
}

/// The last tool result in request `n`.
fn tool_result(fake: &FakeProvider, n: usize) -> String {
    fake.tool_results(n)
        .pop()
        .unwrap_or_else(|| panic!("no tool message in request {n}"))
}

/// Run one prompt, rejecting every permission asked; returns how many
/// permissions were asked.
async fn turn_rejecting(c: &mut Client, sid: &str) -> usize {
    let (m, asked) = c
        .prompt_answering(sid, "go", |_| "reject_once".into())
        .await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    asked.len()
}

#[tokio::test]
async fn every_attack_is_asked_or_denied_and_the_project_survives() {
    let mut script = Vec::new();
    let attacks: Vec<(String, Reply)> = CLASS_4
        .iter()
        .chain(CLASS_5)
        .enumerate()
        .map(|(i, cmd)| (cmd.to_string(), fake::shell_call(&format!("c{i}"), cmd)))
        .chain([
            (
                "search_text API_KEY".to_string(),
                fake::openai_tool_calls(&[(
                    "s1",
                    "search_text",
                    r#"{"pattern": "API_KEY", "path": "."}"#,
                )]),
            ),
            (
                "search_text sk-".to_string(),
                fake::openai_tool_calls(&[("s2", "search_text", r#"{"pattern": "sk-"}"#)]),
            ),
        ])
        .collect();
    let names: Vec<String> = attacks.iter().map(|(n, _)| n.clone()).collect();
    for (_, reply) in attacks {
        script.push(reply);
        script.push(fake::openai_text("ok"));
    }
    let fake = FakeProvider::start(script).await;
    let home = home(&fake);
    let project = project();
    let before = snapshot(project.path());

    let (mut c, sid) = Client::with_session(home.path(), &[], json!({}), project.path()).await;
    let mut unasked = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let asked = turn_rejecting(&mut c, &sid).await;
        let result = tool_result(&fake, 2 * i + 1);
        let stopped = result.starts_with("denied")
            || result == "the person (acp-client) rejected this action";
        if !stopped || (asked == 0 && !result.starts_with("denied")) {
            unasked.push(format!("`{name}` ran unasked: {result}"));
        }
    }
    assert!(unasked.is_empty(), "{}", unasked.join("\n"));
    assert_eq!(
        snapshot(project.path()),
        before,
        "the project changed although every action was rejected"
    );
    for (i, req) in fake.requests().iter().enumerate() {
        let body = req.body.to_string();
        assert!(!body.contains(ENV_KEY), "request {i} carries the .env key");
    }
}

#[tokio::test]
async fn a_provider_key_printed_by_a_command_reaches_the_model_redacted() {
    let command =
        format!("echo 'configured: {PROVIDER_KEY}'; echo 'aws: AKIAIOSFODNN7EXAMPLE'; echo done");
    let fake = FakeProvider::start(vec![
        fake::shell_call("k1", &command),
        fake::openai_text("ok"),
    ])
    .await;
    let home = home(&fake);
    let project = project();
    let (mut c, sid) = Client::with_session(home.path(), &[], json!({}), project.path()).await;
    // The command text carries the key, so the secrets gate may ask: this
    // test approves, to see what the model reads afterwards.
    let (m, _) = c.prompt_allowing(&sid, "go").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let result = tool_result(&fake, 1);
    assert!(result.contains("done"), "the command ran: {result}");
    assert!(
        result.contains("[redacted: configured API key]"),
        "{result}"
    );
    assert!(result.contains("[redacted: AWS access key id]"), "{result}");
    assert!(result.contains("2 secret(s) redacted"), "{result}");
    let tool_messages: String = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m.to_string())
        .collect();
    assert!(!tool_messages.contains(PROVIDER_KEY), "{tool_messages}");
    assert!(!tool_messages.contains("AKIAIOSFODNN7EXAMPLE"));
    // The key still authenticates the requests themselves.
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {PROVIDER_KEY}").as_str())
    );
}
