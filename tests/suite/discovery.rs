//! Providers found without configuration, against the real binary: the
//! candidate hosts are redirected (`PASSEPARTOUT_DISCOVERY_HOSTS`) to the
//! fake model server on a random loopback port or to a closed port, and
//! every hosted key variable is cleared or set by the test. Nothing leaves
//! 127.0.0.1.

use crate::harness;
use crate::support;

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use passepartout::rpc::message::codes;
use support::fake_provider::{self as fake, FakeProvider};

/// Nothing listens on the discard port here: connections are refused.
const CLOSED: &str = "http://127.0.0.1:9/v1";

const KEY_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
];

/// Every local candidate closed except `llama_cpp` (when given), and the
/// Anthropic candidate at `anthropic` (when given).
fn hosts(llama_cpp: Option<&str>, anthropic: Option<&str>) -> String {
    format!(
        "ollama={CLOSED},llama.cpp={},lmstudio={CLOSED},vllm={CLOSED},anthropic={}",
        llama_cpp.unwrap_or(CLOSED),
        anthropic.unwrap_or("https://api.anthropic.com"),
    )
}

/// The binary, in `home/project`, with an empty HOME (no config file: no provider configured),
/// no provider variables and no hosted keys but `keys`.
fn command(home: &Path, hosts: &str, keys: &[(&str, &str)]) -> Command {
    let project = home.join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let mut cmd = Command::new(harness::BIN);
    cmd.current_dir(&project)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("PASSEPARTOUT_LOG", "warn")
        .env("PASSEPARTOUT_DISCOVERY_HOSTS", hosts)
        .env_remove("PASSEPARTOUT_PROVIDER_URL")
        .env_remove("PASSEPARTOUT_MODEL")
        .env_remove("PASSEPARTOUT_CONFIG")
        .env_remove("PASSEPARTOUT_API_KEY")
        .kill_on_drop(true);
    for var in KEY_VARS {
        cmd.env_remove(var);
    }
    for (var, value) in keys {
        cmd.env(var, value);
    }
    cmd
}

async fn output(mut cmd: Command) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(harness::WAIT, cmd.output())
        .await
        .expect("the command ends in time")
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A minimal NDJSON client of `passepartout serve` (the shared harness
/// cannot set a child's environment).
struct Daemon {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Daemon {
    fn start(mut cmd: Command) -> Daemon {
        cmd.arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn passepartout serve");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Daemon {
            _child: child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    /// Send a request and return its response (notifications are skipped).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
        self.stdin.flush().await.expect("flush");
        loop {
            let mut text = String::new();
            let n = tokio::time::timeout(harness::WAIT, self.stdout.read_line(&mut text))
                .await
                .expect("an answer in time")
                .expect("read");
            assert!(n > 0, "the daemon closed stdout waiting for {method}");
            let message: Value = serde_json::from_str(&text).expect("a JSON line");
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
        }
    }

    async fn new_session(&mut self, cwd: &Path) -> String {
        let r = self
            .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session id in {r}"))
            .to_string()
    }
}

fn prompt(sid: &str, text: &str) -> Value {
    json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn run_uses_the_only_local_server_that_answers_and_says_which() {
    let server = FakeProvider::start(vec![fake::openai_text("Hello from llama.cpp.")]).await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(home.path(), &hosts(Some(&server.openai_url()), None), &[]);
    cmd.args(["run", "Say hello"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "Hello from llama.cpp.");
    let said = format!(
        "using llama.cpp server at {}, model fake-model (found; configure [[providers]] to choose)",
        server.openai_url()
    );
    assert!(stderr.contains(&said), "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one chat request: {requests:?}");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["model"], "fake-model");
}

#[tokio::test]
async fn the_daemon_serves_prompts_from_the_discovered_server_and_reports_it() {
    let server = FakeProvider::start(vec![fake::openai_text("Found you.")]).await;
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(command(
        home.path(),
        &hosts(Some(&server.openai_url()), None),
        &[],
    ));
    let init = d.request("initialize", json!({"protocolVersion": 1})).await;
    let meta = &init["result"]["_meta"]["passepartout"];
    assert_eq!(meta["discovery"]["chosen"], "llama.cpp", "{init}");
    assert_eq!(
        meta["providers"],
        json!([format!("llama.cpp ({})", server.openai_url())])
    );

    let listed = d.request("_passepartout/providers", Value::Null).await;
    let providers = &listed["result"]["providers"];
    assert_eq!(providers.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(providers[0]["name"], "llama.cpp");
    assert_eq!(providers[0]["discovered"], true);
    assert_eq!(providers[0]["models"], json!(fake::FAKE_MODELS));
    assert_eq!(
        listed["result"]["discovery"]["candidates"][0]["status"],
        "unreachable"
    );

    let sid = d.new_session(&home.path().join("project")).await;
    let r = d.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn when_nothing_answers_run_lists_every_candidate_with_its_fix() {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(home.path(), &hosts(None, None), &[]);
    cmd.args(["run", "anyone there?"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, "");
    for needle in [
        "no model provider is configured and none was found",
        "Ollama at http://127.0.0.1:9/v1: not reachable",
        "fix: ollama serve",
        "llama.cpp server at http://127.0.0.1:9/v1: not reachable",
        "fix: llama-server -m model.gguf --port 8080",
        "LM Studio at http://127.0.0.1:9/v1",
        "vLLM at http://127.0.0.1:9/v1",
        "Anthropic at https://api.anthropic.com: no key in the environment",
        "fix: export ANTHROPIC_API_KEY=…",
        "fix: export OPENAI_API_KEY=…",
        "fix: export OPENROUTER_API_KEY=…",
        "fix: export DEEPSEEK_API_KEY=…",
        "[[providers]]",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in\n{stderr}");
    }
}

#[tokio::test]
async fn when_nothing_answers_a_prompt_fails_with_the_provider_error_and_the_list() {
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(command(home.path(), &hosts(None, None), &[]));
    let init = d.request("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(
        init["result"]["_meta"]["passepartout"]["discovery"]["chosen"],
        Value::Null,
        "{init}"
    );
    let sid = d.new_session(&home.path().join("project")).await;
    let r = d.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["error"]["code"], json!(codes::INTERNAL_ERROR), "{r}");
    assert_eq!(r["error"]["data"]["kind"], json!("provider_failed"), "{r}");
    assert_eq!(
        r["error"]["data"]["providers"].as_array().map(Vec::len),
        Some(8),
        "every candidate is named: {r}"
    );
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("fix: ollama serve"), "{message}");
    assert!(
        message.contains("fix: export DEEPSEEK_API_KEY=…"),
        "{message}"
    );
}

#[tokio::test]
async fn a_hosted_key_is_chosen_when_no_local_server_answers() {
    let server = FakeProvider::start(vec![fake::anthropic_text("Claude here.")]).await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(
        home.path(),
        &hosts(None, Some(&server.base_url)),
        &[("ANTHROPIC_API_KEY", "sk-ant-discovered")],
    );
    cmd.args(["run", "Who is there?"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "Claude here.");
    let said = format!(
        "using Anthropic at {}, model claude-sonnet-4-5 (found; configure [[providers]] to choose)",
        server.base_url
    );
    assert!(stderr.contains(&said), "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant-discovered"));
    assert_eq!(requests[0].body["model"], "claude-sonnet-4-5");
}

#[tokio::test]
async fn a_local_server_wins_over_a_hosted_key() {
    let local = FakeProvider::start(vec![fake::openai_text("local")]).await;
    let hosted = FakeProvider::start(vec![fake::anthropic_text("hosted")]).await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(
        home.path(),
        &hosts(Some(&local.openai_url()), Some(&hosted.base_url)),
        &[("ANTHROPIC_API_KEY", "sk-ant-unused")],
    );
    cmd.args(["run", "Which one?"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "local");
    assert!(hosted.requests().is_empty());
}

#[tokio::test]
async fn providers_json_lists_what_discovery_found_and_why_the_rest_did_not_answer() {
    let server = FakeProvider::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(home.path(), &hosts(Some(&server.openai_url()), None), &[]);
    cmd.args(["providers", "--json"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    let listing: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(listing["configured"], false);
    let providers = listing["providers"].as_array().expect("providers");
    assert_eq!(providers.len(), 1, "{listing}");
    assert_eq!(providers[0]["name"], "llama.cpp");
    assert_eq!(providers[0]["baseUrl"], server.openai_url());
    assert_eq!(providers[0]["model"], "fake-model");
    assert_eq!(providers[0]["discovered"], true);
    assert_eq!(providers[0]["models"], json!(fake::FAKE_MODELS));
    let discovery = &listing["discovery"];
    assert_eq!(discovery["chosen"], "llama.cpp");
    let by_name = |name: &str| {
        discovery["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {discovery}"))
    };
    assert_eq!(by_name("ollama")["status"], "unreachable");
    assert_eq!(by_name("ollama")["found"], false);
    assert_eq!(by_name("llama.cpp")["status"], "found");
    assert_eq!(by_name("llama.cpp")["models"], json!(fake::FAKE_MODELS));
    assert_eq!(by_name("anthropic")["status"], "noKey");
    assert_eq!(by_name("anthropic")["fix"], "export ANTHROPIC_API_KEY=…");
    assert!(server.requests().is_empty(), "listing models sends no chat");
}

#[tokio::test]
async fn providers_lists_a_configured_provider_without_discovering() {
    let server = FakeProvider::start(vec![]).await;
    let home = tempfile::tempdir().unwrap();
    // Every candidate points at the fake too: a discovery would find it.
    let mut cmd = command(home.path(), &hosts(Some(&server.openai_url()), None), &[]);
    cmd.args([
        "providers",
        "--json",
        "--provider-url",
        &server.openai_url(),
        "--model",
        "fake-large",
    ]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    let listing: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(listing["configured"], true);
    assert_eq!(listing.get("discovery"), None, "{listing}");
    assert_eq!(listing["providers"][0]["model"], "fake-large");
    assert_eq!(listing["providers"][0]["discovered"], false);

    // The text form, for people.
    let mut cmd = command(home.path(), &hosts(None, None), &[]);
    cmd.arg("providers");
    let (code, stdout, _) = output(cmd).await;
    assert_eq!(code, Some(1), "nothing configured, nothing found");
    assert!(stdout.contains("- ollama"), "{stdout}");
    assert!(
        stdout.contains("fix: llama-server -m model.gguf --port 8080"),
        "{stdout}"
    );
    assert!(stdout.contains("[[providers]]"), "{stdout}");
}

#[tokio::test]
async fn a_model_asked_for_is_used_with_the_discovered_server() {
    let server = FakeProvider::start(vec![fake::openai_text("big answer")]).await;
    let home = tempfile::tempdir().unwrap();
    let mut cmd = command(home.path(), &hosts(Some(&server.openai_url()), None), &[]);
    cmd.args(["run", "--model", "fake-large", "Use the big one"]);
    let (code, stdout, stderr) = output(cmd).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "big answer");
    assert!(stderr.contains("model fake-large (found;"), "{stderr}");
    assert_eq!(server.requests()[0].body["model"], "fake-large");
}

/// Issue 21 item 11: when the discovered server stops answering, the next
/// prompt probes again at once (not after the re-probe interval) and is
/// served by another server that is up.
#[tokio::test]
async fn a_dead_discovered_server_is_replaced_at_once_by_another_that_answers() {
    let first = FakeProvider::start(vec![fake::openai_text("unused")]).await;
    let second = FakeProvider::start(vec![fake::openai_text("From LM Studio.")]).await;
    let home = tempfile::tempdir().unwrap();
    let hosts = format!(
        "ollama={CLOSED},llama.cpp={},lmstudio={},vllm={CLOSED},anthropic=",
        first.openai_url(),
        second.openai_url()
    );
    let started = std::time::Instant::now();
    let mut d = Daemon::start(command(home.path(), &hosts, &[]));
    let init = d.request("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(
        init["result"]["_meta"]["passepartout"]["discovery"]["chosen"], "llama.cpp",
        "{init}"
    );
    let sid = d.new_session(&home.path().join("project")).await;
    drop(first);
    let r = d.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        second
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .count(),
        1
    );
    // All of it within the re-probe interval: the switch did not wait for it.
    assert!(
        started.elapsed() < passepartout::llm::discovery::REPROBE_INTERVAL,
        "took {:?}",
        started.elapsed()
    );
}
