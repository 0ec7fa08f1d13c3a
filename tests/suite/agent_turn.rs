//! Whole agent turns through the real binary: prompt in over stdio, the fake
//! provider streams answers and tool calls over real HTTP, the tools run,
//! their results go back to the model, the answer streams back.

use crate::harness;
use crate::support;

use std::time::Duration;

use harness::{Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

struct Setup {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    fake: FakeProvider,
}

async fn setup(script: Vec<Reply>) -> Setup {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "remember the milk\n").unwrap();
    Setup {
        home: tempfile::tempdir().unwrap(),
        project,
        fake: FakeProvider::start(script).await,
    }
}

fn start(s: &Setup, framing: Framing, extra: &[&str]) -> Client {
    let url = s.fake.openai_url();
    let mut args = vec!["--provider-url", url.as_str(), "--model", "fake-model"];
    args.extend_from_slice(extra);
    Client::spawn(framing, s.home.path(), &args)
}

fn prompt(session: &str, text: &str) -> Value {
    json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] })
}

fn tool_messages(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

async fn full_turn(framing: Framing) {
    let s = setup(vec![
        fake::openai_tool_calls(&[("call_1", "read_file", r#"{"path": "notes.txt"}"#)]),
        fake::openai_reasoning_then_text("The note is short.", "The note says: remember the milk."),
    ])
    .await;
    let mut c = start(&s, framing, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "What does notes.txt say?"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let calls = c.updates("tool_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["toolCallId"], "call_1");
    assert_eq!(calls[0]["title"], "read_file: notes.txt");
    assert_eq!(calls[0]["kind"], "read");
    assert_eq!(calls[0]["rawInput"], json!({ "path": "notes.txt" }));
    let updates = c.updates("tool_call_update");
    let last = updates.last().unwrap();
    assert_eq!(last["status"], "completed", "{updates:?}");
    assert_eq!(last["content"][0]["content"]["text"], "remember the milk\n");
    let thoughts: String = c
        .updates("agent_thought_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(thoughts, "The note is short.");
    assert_eq!(c.message_text(), "The note says: remember the milk.");

    // The tool result went back to the model as the next perception.
    let reqs = s.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["model"], "fake-model");
    let tools: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"read_file") && tools.contains(&"list_directory"),
        "{tools:?}"
    );
    let results = tool_messages(&reqs[1].body);
    assert_eq!(
        results,
        vec![json!({ "role": "tool", "tool_call_id": "call_1", "content": "remember the milk\n" })]
    );
    // And the status notifications name the provider and count tokens.
    let status = c
        .wait_for(|m| {
            m["method"] == "_passepartout/session/status" && m["params"]["state"] == "idle"
        })
        .await;
    assert!(
        status["params"]["provider"]
            .as_str()
            .unwrap()
            .contains(&s.fake.base_url),
        "{status}"
    );
    assert_eq!(status["params"]["inputTokens"], 2 * fake::FAKE_INPUT_TOKENS);
}

#[tokio::test]
async fn a_full_turn_over_content_length_framing() {
    full_turn(Framing::ContentLength).await;
}

#[tokio::test]
async fn a_full_turn_over_ndjson_framing() {
    full_turn(Framing::Ndjson).await;
}

#[tokio::test]
async fn tool_errors_and_refusals_go_back_to_the_model_and_the_turn_continues() {
    let s = setup(vec![
        fake::openai_tool_calls(&[
            ("c1", "read_file", r#"{"path": "missing.txt"}"#),
            ("c2", "read_file", r#"{"path": "../../etc/passwd"}"#),
            ("c3", "no_such_tool", r#"{}"#),
            ("c4", "read_file", r#"{"wrong": 1}"#),
        ]),
        fake::openai_text("I could not read those."),
    ])
    .await;
    let mut c = start(&s, Framing::Ndjson, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "read things"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let failed: Vec<Value> = c
        .updates("tool_call_update")
        .into_iter()
        .filter(|u| u["status"] == "failed")
        .collect();
    // Four calls in one round are shown as an ACP plan, updated as they run.
    let plans = c.updates("plan");
    assert_eq!(plans.len(), 1 + 2 * 4, "{plans:?}");
    let last = plans.last().unwrap()["entries"].as_array().unwrap().clone();
    assert_eq!(last.len(), 4);
    assert!(last.iter().all(|e| e["status"] == "completed"), "{last:?}");
    assert_eq!(last[0]["content"], "read_file: missing.txt");
    assert_eq!(failed.len(), 4, "{failed:?}");

    let results = tool_messages(&s.fake.requests()[1].body);
    let text = |i: usize| results[i]["content"].as_str().unwrap().to_string();
    assert_eq!(results.len(), 4);
    assert!(
        text(0).starts_with("cannot read") && text(0).contains("missing.txt"),
        "{}",
        text(0)
    );
    assert!(
        text(1).contains("outside the working directory"),
        "{}",
        text(1)
    );
    assert!(
        text(2).starts_with("unknown tool `no_such_tool`; available tools:")
            && text(2).contains("read_file"),
        "{}",
        text(2)
    );
    assert_eq!(
        text(3),
        "invalid arguments: missing required argument `path`"
    );
}

#[tokio::test]
async fn the_round_limit_ends_a_runaway_loop() {
    let call = || fake::openai_tool_calls(&[("c", "list_directory", r#"{}"#)]);
    let s = setup(vec![call(), call(), call(), call()]).await;
    let mut c = start(&s, Framing::Ndjson, &["--max-rounds", "3"]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "loop forever"))
        .await;
    assert_eq!(r["result"]["stopReason"], "max_turn_requests", "{r}");
    assert_eq!(s.fake.requests().len(), 3);
}

#[tokio::test]
async fn cancel_stops_a_turn_promptly_and_other_sessions_carry_on() {
    let s = setup(vec![Reply::Hang {}, fake::openai_text("B is done.")]).await;
    let mut c = start(&s, Framing::ContentLength, &[]);
    c.initialize(json!({})).await;
    let a = c.new_session(s.project.path()).await;
    let b = c.new_session(s.project.path()).await;
    assert_ne!(a, b);
    let pa = c
        .start_request("session/prompt", prompt(&a, "hang please"))
        .await;
    // Wait until A's request reached the provider, then run B to completion.
    for _ in 0..200 {
        if !s.fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rb = c
        .request("session/prompt", prompt(&b, "answer please"))
        .await;
    assert_eq!(rb["result"]["stopReason"], "end_turn", "{rb}");
    c.notify("session/cancel", json!({ "sessionId": a })).await;
    let ra = c.wait_response(pa).await;
    assert_eq!(ra["result"]["stopReason"], "cancelled", "{ra}");
    // The session is usable again afterwards.
    let r = c.request("session/prompt", prompt(&a, "again")).await;
    assert_eq!(
        (
            r["error"]["code"].clone(),
            r["error"]["data"]["kind"].clone()
        ),
        (json!(-32603), json!("provider_failed")),
        "script exhausted → provider error: {r}"
    );
}

#[tokio::test]
async fn provider_errors_surface_their_own_message() {
    let s = setup(vec![fake::status(400, "model `fake-model` not found")]).await;
    let mut c = start(&s, Framing::Ndjson, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "provider_failed", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("model `fake-model` not found"), "{msg}");
}

#[tokio::test]
async fn when_no_provider_answers_the_error_names_the_addresses_and_the_fix() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &dead],
        json!({}),
        project.path(),
    )
    .await;
    let r = c.request("session/prompt", prompt(&sid, "hi")).await;
    let msg = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "provider_failed", "{r}");
    assert!(msg.contains(&dead), "{msg}");
    let tried = r["error"]["data"]["providers"].as_array().unwrap();
    assert!(
        tried.iter().any(|p| p.as_str().unwrap().contains(&dead)),
        "{r}"
    );
    assert!(
        msg.contains("PASSEPARTOUT_PROVIDER_URL") && msg.contains("config.toml"),
        "{msg}"
    );
}

#[tokio::test]
async fn the_cascade_fails_over_and_says_which_provider_answered() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("from the second")]).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[providers]]\nname = \"local\"\nkind = \"openai\"\nbase_url = \"{dead}\"\nmodel = \"m\"\nmax_retries = 0\n\n\
             [[providers]]\nname = \"backup\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"m2\"\n",
            fake.openai_url()
        ),
    )
    .unwrap();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--config", config.to_str().unwrap()],
        json!({}),
        project.path(),
    )
    .await;
    let r = c.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(c.message_text(), "from the second");
    let status = c
        .wait_for(|m| {
            m["method"] == "_passepartout/session/status" && m["params"]["state"] == "idle"
        })
        .await;
    let provider = status["params"]["provider"].as_str().unwrap();
    assert!(
        provider.contains("backup") || provider.contains(&fake.base_url),
        "{provider}"
    );
}

#[tokio::test]
async fn anthropic_end_to_end_with_a_tool_round() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha").unwrap();
    let fake = FakeProvider::start(vec![
        fake::anthropic_tool_use("toolu_1", "read_file", r#"{"path":"a.txt"}"#),
        fake::anthropic_text("It says alpha."),
    ])
    .await;
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(
        Framing::Ndjson,
        home.path(),
        &[
            "--provider-url",
            &fake.base_url,
            "--provider-kind",
            "anthropic",
            "--model",
            "claude-test",
        ],
    );
    c.initialize(json!({ "apiKeys": { "cli": "sk-ant-test-key" } }))
        .await;
    let sid = c.new_session(project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "read a.txt"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(c.message_text(), "It says alpha.");
    let reqs = fake.requests();
    assert_eq!(reqs[1].path, "/v1/messages");
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    assert_eq!(last["content"][0]["content"], "alpha");
}

#[tokio::test]
async fn headless_run_streams_the_answer_and_reports_failure_by_exit_status() {
    let s = setup(vec![
        fake::openai_tool_calls(&[("c1", "list_directory", r#"{}"#)]),
        fake::openai_text("There is one file."),
    ])
    .await;
    let out = tokio::process::Command::new(harness::BIN)
        .args([
            "run",
            "--provider-url",
            &s.fake.openai_url(),
            "What is here?",
        ])
        .current_dir(s.project.path())
        .env("HOME", s.home.path())
        .env("XDG_CONFIG_HOME", s.home.path().join("config"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "There is one file.");
    assert!(stderr.contains("list_directory"), "{stderr}");

    let out = tokio::process::Command::new(harness::BIN)
        .args(["run", "--provider-url", &s.fake.openai_url(), "again"])
        .current_dir(s.project.path())
        .env("HOME", s.home.path())
        .env("XDG_CONFIG_HOME", s.home.path().join("config"))
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("script exhausted"));
}

#[tokio::test]
async fn messages_to_the_person_are_shown_and_not_fed_back() {
    let s = setup(vec![
        fake::openai_tool_calls(&[("m1", "message_person", r#"{"text": "halfway there"}"#)]),
        fake::openai_text("Done."),
    ])
    .await;
    let mut c = start(&s, Framing::Ndjson, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "work")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(c.message_text(), "\nhalfway there\nDone.");
    let results = tool_messages(&s.fake.requests()[1].body);
    assert_eq!(
        results[0]["content"],
        "delivered to the person (13 characters)"
    );
}

/// Issue 21 item 3: a provider that names every call `call_0_shell` (some
/// do, round after round) still gives each call its own ACP id; the
/// provider's id travels in `_meta` and is what the model gets back.
#[tokio::test]
async fn a_reused_provider_call_id_becomes_unique_for_the_client() {
    let read = r#"{"path": "notes.txt"}"#;
    let s = setup(vec![
        fake::openai_tool_calls(&[("call_0_shell", "read_file", read)]),
        fake::openai_tool_calls(&[("call_0_shell", "read_file", read)]),
        fake::openai_text("Read it twice."),
        fake::openai_tool_calls(&[("call_0_shell", "read_file", read)]),
        fake::openai_text("And a third time."),
    ])
    .await;
    let mut c = start(&s, Framing::Ndjson, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    for text in ["read notes.txt twice", "once more"] {
        let r = c.request("session/prompt", prompt(&sid, text)).await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    let calls = c.updates("tool_call");
    let ids: Vec<&str> = calls
        .iter()
        .map(|u| u["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{calls:?}");
    let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), 3, "tool-call ids repeat: {ids:?}");
    assert_eq!(
        ids[0], "call_0_shell",
        "the first use keeps the provider's id"
    );
    for call in &calls {
        assert_eq!(
            call["_meta"]["passepartout"]["providerCallId"], "call_0_shell",
            "{call}"
        );
    }
    // Every update names one of those ids; each call completed.
    for id in &ids {
        assert!(
            c.updates("tool_call_update")
                .iter()
                .any(|u| u["toolCallId"] == *id && u["status"] == "completed"),
            "{id} never completed"
        );
    }
    // The model gets its own id back with each result.
    for n in [1, 2, 4] {
        let body = &s.fake.requests()[n].body;
        let results = tool_messages(body);
        assert!(
            results.iter().all(|m| m["tool_call_id"] == "call_0_shell"),
            "{results:?}"
        );
    }
}

/// Issue 21 item 4: the `session/prompt` result carries the turn's usage
/// (ACP's `usage`), summed over the turn's requests.
#[tokio::test]
async fn the_prompt_result_carries_the_turns_usage() {
    let s = setup(vec![
        fake::with_usage(
            fake::openai_tool_calls(&[("c1", "read_file", r#"{"path": "notes.txt"}"#)]),
            100,
            20,
            0,
            0,
        ),
        fake::with_usage(fake::openai_text("Milk."), 150, 5, 0, 0),
    ])
    .await;
    let mut c = start(&s, Framing::Ndjson, &[]);
    c.initialize(json!({})).await;
    let sid = c.new_session(s.project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "what does it say?"))
        .await;
    assert_eq!(
        r["result"]["usage"],
        json!({ "totalTokens": 275, "inputTokens": 250, "outputTokens": 25 }),
        "{r}"
    );
}
