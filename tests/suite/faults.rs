//! The daemon under faults and load, through the real binary: a provider
//! that never stops talking, a client that stops reading, oversized and
//! lying frames, prompts written back to back, streamed text coalesced,
//! a provider that never answers, secrets kept out of logs, private state
//! files. Each test reproduces one problem of the fault campaign.

use crate::harness;
use crate::support;

use std::path::Path;
use std::sync::atomic::Ordering;

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::endless_provider::EndlessProvider;
use support::fake_provider::{self as fake, FakeProvider, Reply};
use tokio::io::AsyncWriteExt;

/// The endless provider of these tests: long chunks, a few to a write.
async fn endless_provider() -> EndlessProvider {
    EndlessProvider::start(&"endless ".repeat(128), 16).await
}

fn write_config(home: &Path, text: &str) -> String {
    let path = home.join("test-config.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Resident memory of a process, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    harness::proc_memory(pid, "VmRSS")
}

/// A daemon whose provider never stops answering, with `config` as its
/// configuration file, in a new session: the provider (keep it alive),
/// the client and the session id.
async fn endless_session(
    home: &Path,
    project: &Path,
    config: &str,
) -> (EndlessProvider, Client, String) {
    let provider = endless_provider().await;
    let config = write_config(home, config);
    let (client, sid) = Client::with_session(
        home,
        &["--config", &config, "--provider-url", &provider.url],
        json!({}),
        project,
    )
    .await;
    (provider, client, sid)
}

// 1. Memory without bound.

#[tokio::test]
async fn an_endless_answer_is_cut_at_max_answer_bytes() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let (_provider, mut c, sid) =
        endless_session(home.path(), project.path(), "max_answer_bytes = 200000\n").await;
    let r = c.request("session/prompt", prompt(&sid, "talk")).await;
    assert_eq!(r["result"]["stopReason"], "max_tokens", "{r}");
    let text = c.message_text();
    assert!(
        text.contains("[answer cut: it passed max_answer_bytes = 200000 bytes]"),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    assert!(text.len() < 200_000 + 64 * 1024, "{} bytes", text.len());
}

#[tokio::test]
async fn a_client_that_stops_reading_bounds_the_daemon_and_cancel_still_works() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    // No answer cap to speak of: only backpressure can bound memory.
    let (provider, mut c, sid) = endless_session(
        home.path(),
        project.path(),
        "max_answer_bytes = 4000000000\n",
    )
    .await;
    let p = c
        .start_request("session/prompt", prompt(&sid, "talk"))
        .await;
    c.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await;
    // The client stops reading for a while.
    let pid = c.child.id().unwrap();
    let mut peak = 0;
    let mut first = None;
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = rss_bytes(pid);
        first.get_or_insert(now);
        peak = peak.max(now);
    }
    assert!(
        peak < 96 * 1024 * 1024,
        "the daemon grew to {} MB while its client did not read",
        peak / (1024 * 1024)
    );
    // Flat, not merely under a ceiling in three seconds: an unbounded
    // answer grows some 15 MB a second here.
    let grew = peak - first.unwrap_or(peak);
    assert!(
        grew < 16 * 1024 * 1024,
        "the daemon kept growing ({} MB in 3 s) while its client did not read",
        grew / (1024 * 1024)
    );
    // The cancel is read and acted on although output is backed up.
    c.notify("session/cancel", json!({ "sessionId": sid }))
        .await;
    let done = c.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "cancelled", "{done}");
    assert_eq!(provider.requests.load(Ordering::SeqCst), 1);
    // And the daemon serves on.
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert!(r["result"]["sessionId"].is_string(), "{r}");
}

#[tokio::test]
async fn an_oversized_ndjson_line_is_refused_and_the_next_request_served() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::Ndjson, home.path(), &[]);
    c.initialize(json!({})).await;
    let pid = c.child.id().unwrap();
    let base = rss_bytes(pid);
    // 80 MB without a newline, in pieces, then the newline.
    let piece = vec![b'x'; 1024 * 1024];
    for _ in 0..80 {
        c.send_raw(&piece).await;
    }
    c.send_raw(b"\n").await;
    // Notifications (the sandbox status follows the initialize reply) may
    // come first; the refusal is the first message that is not one.
    let r = loop {
        let m = c.read().await.unwrap();
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("frame limit"),
        "{r}"
    );
    // At most the frame limit (64 MiB) is held, never the whole 80 MiB
    // line: the growth over the daemon's own size stays below the line's.
    let grown = rss_bytes(pid).saturating_sub(base);
    assert!(
        grown < 80 * 1024 * 1024,
        "the line was buffered: RSS grew by {} MB",
        grown / (1024 * 1024)
    );
    let r = c
        .request("session/new", json!({ "cwd": "/", "mcpServers": [] }))
        .await;
    assert!(r["result"]["sessionId"].is_string(), "{r}");
}

// 4. A lying Content-Length.

#[tokio::test]
async fn a_huge_content_length_does_not_make_the_connection_deaf() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    c.initialize(json!({})).await;
    c.send_raw(b"Content-Length: 99999999999\r\n\r\n{\"jsonrpc\":\"2.0\"}")
        .await;
    // The sandbox status follows the initialize reply; the refusal is the
    // first message that is not a notification.
    let r = c.wait_for(|m| m.get("method").is_none()).await;
    assert_eq!(r["error"]["code"], -32700, "{r}");
    let r = c
        .request("session/new", json!({ "cwd": "/", "mcpServers": [] }))
        .await;
    assert!(r["result"]["sessionId"].is_string(), "{r}");
}

// 5. Prompt order.

#[tokio::test]
async fn prompts_written_back_to_back_run_in_arrival_order() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let trials = 12;
    let script = (0..trials * 2).map(|_| fake::openai_text("ok")).collect();
    let fake = FakeProvider::start(script).await;
    let mut c = Client::spawn(
        Framing::Ndjson,
        home.path(),
        &["--provider-url", &fake.openai_url()],
    );
    c.initialize(json!({})).await;
    for trial in 0..trials {
        let sid = c.new_session(project.path()).await;
        // Both prompts in one write: they arrive together.
        let first = json!({ "jsonrpc": "2.0", "id": 1000 + trial * 2, "method": "session/prompt",
                            "params": prompt(&sid, &format!("first {trial}")) });
        let second = json!({ "jsonrpc": "2.0", "id": 1001 + trial * 2, "method": "session/prompt",
                             "params": prompt(&sid, &format!("second {trial}")) });
        c.send_raw(format!("{first}\n{second}\n").as_bytes()).await;
        for id in [1000 + trial * 2, 1001 + trial * 2] {
            let r = c.wait_response(id as u64).await;
            assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
        }
    }
    let requests = fake.requests();
    let last_user = |n: usize| -> String {
        requests[n].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    for trial in 0..trials {
        let first = (0..requests.len())
            .position(|n| last_user(n) == format!("first {trial}"))
            .unwrap();
        let second = (0..requests.len())
            .position(|n| last_user(n) == format!("second {trial}"))
            .unwrap();
        assert!(first < second, "trial {trial}: the second prompt ran first");
    }
}

// Coalescing of streamed text.

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

#[tokio::test]
async fn text_deltas_are_coalesced_into_fewer_notifications_byte_for_byte() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let deltas: Vec<String> = (0..5000).map(|i| format!("w{i}é ")).collect();
    let mut chunks: Vec<Value> = deltas
        .iter()
        .map(|d| chunk(json!({ "content": d }), None))
        .collect();
    // Then a tool call in the same answer: the text must all come before it.
    let Reply::OpenAi {
        chunks: call_chunks,
        ..
    } = fake::openai_tool_calls(&[("c1", "list_directory", "{\"path\":\".\"}")])
    else {
        unreachable!()
    };
    chunks.extend(call_chunks);
    let fake = FakeProvider::start(vec![
        Reply::OpenAi {
            chunks,
            delay_ms: 0,
            done: true,
        },
        fake::openai_text("after the tool"),
    ])
    .await;
    let (mut c, sid) = Client::with_fake(home.path(), &fake, project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "go")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let expected: String = deltas.concat();
    let text = c.message_text();
    assert_eq!(text, format!("{expected}after the tool"));
    let chunks = c.updates("agent_message_chunk").len();
    assert!(
        chunks < 1000,
        "{chunks} notifications for 5000 deltas: not coalesced"
    );
    // Order: every chunk of the first answer before the tool call.
    let kinds: Vec<String> = c
        .backlog
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| {
            m["params"]["update"]["sessionUpdate"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let first_tool = kinds.iter().position(|k| k == "tool_call").unwrap();
    let before: String = c
        .backlog
        .iter()
        .filter(|m| m["method"] == "session/update")
        .take(first_tool)
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(before, expected);
}

// 8. Other.

#[tokio::test]
async fn a_provider_that_never_answers_is_not_retried_for_minutes() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![Reply::Hang {}, Reply::Hang {}, Reply::Hang {}]).await;
    let config = write_config(
        home.path(),
        &format!(
            "[[providers]]\nname = \"silent\"\nkind = \"openai\"\nbase_url = \"{}\"\n\
             model = \"m\"\nidle_timeout_secs = 1\nmax_retries = 2\n",
            fake.openai_url()
        ),
    );
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--config", &config],
        json!({}),
        project.path(),
    )
    .await;
    let r = c.request("session/prompt", prompt(&sid, "hello?")).await;
    assert!(
        r["error"]["message"].as_str().unwrap().contains("silent"),
        "{r}"
    );
    // One silent wait, not three.
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn the_api_key_from_the_environment_is_sent_with_a_provider_url_flag() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("hi")]).await;
    let mut cmd = tokio::process::Command::new(harness::BIN);
    cmd.args(["run", "--provider-url", &fake.openai_url(), "hello"])
        .current_dir(project.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("PASSEPARTOUT_API_KEY", "sk-env-key-123")
        .env_remove("PASSEPARTOUT_PROVIDER_URL");
    let out = cmd.output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = fake.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-env-key-123")
    );
}

#[tokio::test]
async fn trace_logging_never_shows_api_keys() {
    let home = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(harness::BIN)
        .arg("serve")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("PASSEPARTOUT_LOG", "trace")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": 1,
        "_meta": { "passepartout": { "apiKeys": { "local": "sk-very-secret-999" } } } } });
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(harness::WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"id\":1"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "tracing is on"
    );
    assert!(!stderr.contains("sk-very-secret-999"), "{stderr}");
}

#[tokio::test]
async fn audit_on_a_fresh_install_says_the_log_is_empty() {
    let home = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(harness::BIN)
        .arg("audit")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("The audit log is empty"),
        "{out:?}"
    );
}

#[tokio::test]
async fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("c1", "list_directory", "{\"path\":\".\"}")]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = Client::with_fake(home.path(), &fake, project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "look")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let state = home.path().join("state/passepartout");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("audit.jsonl")), 0o600);
}

// 7. Startup and exit.

#[tokio::test]
async fn no_bwrap_runs_at_startup() {
    let home = tempfile::tempdir().unwrap();
    // A `bwrap` first on PATH that leaves a mark when run.
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mark = home.path().join("bwrap-ran");
    let fake_bwrap = bin.join("bwrap");
    std::fs::write(
        &fake_bwrap,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &fake_bwrap,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut child = tokio::process::Command::new(harness::BIN)
        .arg("serve")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("PATH", path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": 1 } });
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(harness::WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"id\":1"), "{stdout}");
    assert!(
        !mark.exists(),
        "bwrap ran at startup; it should wait for the first shell action"
    );
}
