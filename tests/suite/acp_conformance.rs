//! ACP conformance: drive the real binary over NDJSON as an ACP client would
//! (initialize, session/new, prompts with a permission allowed and one
//! rejected, a cancel mid-turn, session/load with history replay,
//! session/list, session/set_mode) and validate every line the daemon writes
//! against the ACP JSON schema.
//!
//! The schema is generated (schemars) from the `agent-client-protocol-schema`
//! crate the daemon itself is built on — the crate the spec's `schema.json`
//! is generated from. Each message is checked against the type its method
//! calls for: a response against the response type of the request it
//! answers, `session/update` against `SessionNotification`,
//! `session/request_permission` against `RequestPermissionRequest`, error
//! objects against ACP's `Error`. These clients set no `_meta`, so any
//! `_passepartout/*` notification is a fault (they are sent only to clients
//! that opt in); responses to our extension requests get envelope checks.
//!
//! Two clients drive it: the test harness speaking raw NDJSON (which covers
//! a rejected permission, an unknown session and the set_mode part), and the
//! official Rust SDK (`agent-client-protocol` 5.0.0, built on the same
//! `=1.15.1` schema crate) through its `Lines` transport, every line it
//! reads validated on the way in.

use crate::harness;
use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use harness::{Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

/// Compiled validators for the daemon → client messages, by ACP type.
struct AcpSchema {
    by_type: HashMap<&'static str, jsonschema::Validator>,
}

fn compile<T: schemars::JsonSchema>() -> jsonschema::Validator {
    let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("the generated schema does not compile: {e}"))
}

impl AcpSchema {
    fn new() -> AcpSchema {
        let mut by_type = HashMap::new();
        by_type.insert("InitializeResponse", compile::<acp::InitializeResponse>());
        by_type.insert("NewSessionResponse", compile::<acp::NewSessionResponse>());
        by_type.insert("LoadSessionResponse", compile::<acp::LoadSessionResponse>());
        by_type.insert(
            "ListSessionsResponse",
            compile::<acp::ListSessionsResponse>(),
        );
        by_type.insert("PromptResponse", compile::<acp::PromptResponse>());
        by_type.insert(
            "SetSessionModeResponse",
            compile::<acp::SetSessionModeResponse>(),
        );
        by_type.insert("SessionNotification", compile::<acp::SessionNotification>());
        by_type.insert(
            "RequestPermissionRequest",
            compile::<acp::RequestPermissionRequest>(),
        );
        by_type.insert("Error", compile::<acp::Error>());
        AcpSchema { by_type }
    }

    /// The response type of a client → agent method.
    fn response_type(method: &str) -> Option<&'static str> {
        Some(match method {
            "initialize" => "InitializeResponse",
            "session/new" => "NewSessionResponse",
            "session/load" => "LoadSessionResponse",
            "session/list" => "ListSessionsResponse",
            "session/prompt" => "PromptResponse",
            "session/set_mode" => "SetSessionModeResponse",
            _ => return None,
        })
    }

    fn check(&self, type_name: &str, value: &Value) -> Result<(), String> {
        let validator = &self.by_type[type_name];
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("not a valid {type_name}: {}", errors.join("; ")))
        }
    }

    /// Validate one message the daemon wrote. `sent` maps the ids of the
    /// client's requests to their methods.
    fn validate(&self, msg: &Value, sent: &HashMap<String, String>) -> Result<(), String> {
        let obj = msg.as_object().ok_or("a message must be a JSON object")?;
        if obj.get("jsonrpc") != Some(&json!("2.0")) {
            return Err("`jsonrpc` must be \"2.0\"".into());
        }
        let id_ok = |id: &Value| id.is_string() || id.is_i64() || id.is_u64() || id.is_null();
        match (obj.get("method"), obj.get("id")) {
            // A request the daemon sends.
            (Some(Value::String(method)), Some(id)) => {
                if !id_ok(id) {
                    return Err(format!("bad request id {id}"));
                }
                let params = obj.get("params").ok_or("a request without params")?;
                match method.as_str() {
                    "session/request_permission" => self.check("RequestPermissionRequest", params),
                    m if m.starts_with("_passepartout/") => Ok(()),
                    other => Err(format!("the agent sent an unknown request `{other}`")),
                }
            }
            // A notification.
            (Some(Value::String(method)), None) => {
                let params = obj.get("params").ok_or("a notification without params")?;
                match method.as_str() {
                    "session/update" => self.check("SessionNotification", params),
                    // A client that set no `_meta` asked for none of ours.
                    m if m.starts_with('_') => Err(format!(
                        "the extension notification `{m}` went to a plain ACP client"
                    )),
                    other => Err(format!("the agent sent an unknown notification `{other}`")),
                }
            }
            (Some(other), _) => Err(format!("`method` must be a string, not {other}")),
            // A response.
            (None, Some(id)) => {
                if !id_ok(id) {
                    return Err(format!("bad response id {id}"));
                }
                let key = id.to_string();
                let method = sent
                    .get(&key)
                    .ok_or_else(|| format!("a response to id {key}, which was never sent"))?;
                match (obj.get("result"), obj.get("error")) {
                    (Some(result), None) => match Self::response_type(method) {
                        Some(t) => self.check(t, result),
                        None if method.starts_with("_passepartout/") => Ok(()),
                        None => Err(format!("a result for unknown method `{method}`")),
                    },
                    (None, Some(error)) => self.check("Error", error),
                    _ => Err("a response needs exactly one of `result` and `error`".into()),
                }
            }
            (None, None) => Err("neither `method` nor `id`".into()),
        }
    }
}

/// An ACP client that records and validates every message the daemon writes.
struct Conformance {
    client: Client,
    schema: std::sync::Arc<AcpSchema>,
    next_id: u64,
    sent: HashMap<String, String>,
    /// Every message read, in order.
    seen: Vec<Value>,
    /// Messages read while waiting for something else, not yet handled.
    unhandled: Vec<Value>,
    problems: Vec<String>,
}

/// How the client answers `session/request_permission`.
#[derive(Clone, Copy)]
enum Answer {
    /// The option whose kind is this (`allow_once`, `reject_once`).
    Kind(&'static str),
}

impl Conformance {
    fn new(client: Client, schema: std::sync::Arc<AcpSchema>) -> Conformance {
        Conformance {
            client,
            schema,
            next_id: 1,
            sent: HashMap::new(),
            seen: Vec::new(),
            unhandled: Vec::new(),
            problems: Vec::new(),
        }
    }

    async fn recv(&mut self) -> Value {
        let msg = self.client.read().await.expect("the daemon closed stdout");
        if let Err(why) = self.schema.validate(&msg, &self.sent) {
            self.problems.push(format!("{why}\n    in {msg}"));
        }
        self.seen.push(msg.clone());
        msg
    }

    async fn start(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.sent.insert(id.to_string(), method.to_string());
        self.client
            .send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        id
    }

    /// Wait for the response to `id`, answering permission requests with
    /// `answer` on the way.
    async fn finish(&mut self, id: u64, answer: Answer) -> Value {
        loop {
            let msg = self.recv().await;
            if msg.get("method").is_none() && msg["id"] == json!(id) {
                return msg;
            }
            if msg["method"] == "session/request_permission" {
                let Answer::Kind(kind) = answer;
                let option = msg["params"]["options"]
                    .as_array()
                    .and_then(|o| o.iter().find(|o| o["kind"] == kind))
                    .unwrap_or_else(|| panic!("no `{kind}` option in {msg}"))["optionId"]
                    .clone();
                self.client
                    .send(&json!({
                        "jsonrpc": "2.0",
                        "id": msg["id"],
                        "result": { "outcome": { "outcome": "selected", "optionId": option } },
                    }))
                    .await;
            }
            self.unhandled.push(msg);
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params).await;
        self.finish(id, Answer::Kind("allow_once")).await
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.client
            .send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    fn updates(&self, kind: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| m["params"]["update"].clone())
            .filter(|u| u["sessionUpdate"] == kind)
            .collect()
    }

    /// Every message seen so far was valid.
    fn assert_conformant(&self) {
        assert!(
            self.problems.is_empty(),
            "{} message(s) break the ACP schema:\n{}",
            self.problems.len(),
            self.problems.join("\n")
        );
    }
}

fn prompt(session: &str, text: &str) -> Value {
    json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] })
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": 1,
        "clientCapabilities": { "fs": { "readTextFile": false, "writeTextFile": false }, "terminal": false },
        "clientInfo": { "name": "acp-conformance", "version": "1.0.0" },
    })
}

#[test]
fn the_validator_rejects_messages_that_break_the_schema() {
    let schema = AcpSchema::new();
    let mut sent = HashMap::new();
    sent.insert("1".to_string(), "session/prompt".to_string());
    sent.insert("2".to_string(), "session/new".to_string());
    let good = json!({ "jsonrpc": "2.0", "id": 1, "result": { "stopReason": "end_turn" } });
    assert_eq!(schema.validate(&good, &sent), Ok(()));
    for bad in [
        // Not a stop reason ACP knows.
        json!({ "jsonrpc": "2.0", "id": 1, "result": { "stopReason": "done" } }),
        // session/new must name the session.
        json!({ "jsonrpc": "2.0", "id": 2, "result": {} }),
        // An update kind that does not exist.
        json!({ "jsonrpc": "2.0", "method": "session/update",
                "params": { "sessionId": "s", "update": { "sessionUpdate": "shouting" } } }),
        // An error code must be an integer.
        json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": "oops", "message": "m" } }),
        // A permission request without options.
        json!({ "jsonrpc": "2.0", "id": 9, "method": "session/request_permission",
                "params": { "sessionId": "s", "toolCall": { "toolCallId": "t" } } }),
        // Envelope faults.
        json!({ "jsonrpc": "1.0", "id": 1, "result": { "stopReason": "end_turn" } }),
        json!({ "jsonrpc": "2.0", "id": 3, "result": {} }),
        json!({ "jsonrpc": "2.0", "method": "session/shout", "params": {} }),
        // Ours, to a client that did not opt in.
        json!({ "jsonrpc": "2.0", "method": "_passepartout/usage", "params": {} }),
    ] {
        assert!(
            schema.validate(&bad, &sent).is_err(),
            "accepted a bad message: {bad}"
        );
    }
}

/// The whole client session the issue names, one daemon, one store.
#[tokio::test]
async fn every_message_of_an_acp_session_matches_the_schema() {
    let schema = std::sync::Arc::new(AcpSchema::new());
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "remember the milk\n").unwrap();
    let write_a = json!({ "command": "echo allowed > a.txt; git push origin main" }).to_string();
    let write_b = json!({ "command": "echo rejected > b.txt; git push origin main" }).to_string();
    let fake = FakeProvider::start(vec![
        // Turn 1: a read (no permission), a shell command that asks
        // (allowed), then the answer.
        fake::openai_tool_calls(&[("call_1", "read_file", r#"{"path": "notes.txt"}"#)]),
        fake::openai_tool_calls(&[("call_2", "shell", &write_a)]),
        fake::openai_reasoning_then_text("Thinking.", "Wrote a.txt."),
        // Turn 2: a command the person rejects.
        fake::openai_tool_calls(&[("call_3", "shell", &write_b)]),
        fake::openai_text("Understood, not writing b.txt."),
        // Turn 3: the provider hangs until the client cancels.
        fake::Reply::Hang {},
    ])
    .await;
    let url = fake.openai_url();
    let spawn = || {
        Client::spawn(
            Framing::Ndjson,
            home.path(),
            &["--provider-url", &url, "--model", "fake-model"],
        )
    };
    let mut c = Conformance::new(spawn(), schema.clone());

    let r = c.request("initialize", initialize_params()).await;
    assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
    assert!(
        c.unhandled.is_empty(),
        "sent before the initialize reply: {:?}",
        c.unhandled
    );
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    // Allowed once.
    let r = c
        .request(
            "session/prompt",
            prompt(&sid, "read the notes, write a.txt"),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("a.txt")).unwrap(),
        "allowed\n"
    );
    assert!(
        c.seen
            .iter()
            .any(|m| m["method"] == "session/request_permission"),
        "the shell command must have asked"
    );

    // Rejected.
    let id = c
        .start("session/prompt", prompt(&sid, "now write b.txt"))
        .await;
    let r = c.finish(id, Answer::Kind("reject_once")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(!project.path().join("b.txt").exists());

    // Cancelled mid-turn: the provider hangs, the client cancels once the
    // request is at the provider.
    let asked_before = fake.requests().len();
    let id = c
        .start("session/prompt", prompt(&sid, "take your time"))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fake.requests().len() == asked_before {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never reached the provider"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.notify("session/cancel", json!({ "sessionId": sid }))
        .await;
    let r = c.finish(id, Answer::Kind("allow_once")).await;
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");

    // A request for a session that does not exist: an ACP error object.
    let r = c
        .request("session/prompt", prompt("no-such-session", "hi"))
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");

    assert!(!c.updates("tool_call").is_empty());
    assert!(!c.updates("tool_call_update").is_empty());
    assert!(!c.updates("agent_message_chunk").is_empty());
    c.assert_conformant();
    let first_run = c.seen.len();
    c.client.close_stdin();
    let _ = tokio::time::timeout(harness::WAIT, c.client.child.wait()).await;

    // A second daemon: list the stored sessions, load one (history replay).
    let mut c = Conformance::new(spawn(), schema);
    c.request("initialize", initialize_params()).await;
    let r = c
        .request("session/list", json!({ "cwd": project.path() }))
        .await;
    let listed = r["result"]["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(listed.iter().any(|s| s["sessionId"] == sid), "{r}");
    let r = c
        .request(
            "session/load",
            json!({ "sessionId": sid, "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let replayed_user = c.updates("user_message_chunk");
    assert!(
        !replayed_user.is_empty(),
        "history replay sends the prompts"
    );
    c.assert_conformant();
    assert!(first_run + c.seen.len() > 20, "too few messages checked");
}

/// `session/set_mode` as ACP defines it: modes offered in the
/// `session/new` response, a `current_mode_update` and an empty response.
#[tokio::test]
async fn set_mode_matches_the_schema() {
    let schema = std::sync::Arc::new(AcpSchema::new());
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut c = Conformance::new(Client::spawn(Framing::Ndjson, home.path(), &[]), schema);
    c.request("initialize", initialize_params()).await;
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let modes = &r["result"]["modes"];
    let available = modes["availableModes"]
        .as_array()
        .unwrap_or_else(|| panic!("session/new offers no modes: {r}"));
    let other = available
        .iter()
        .map(|m| m["id"].clone())
        .find(|id| *id != modes["currentModeId"])
        .unwrap_or_else(|| panic!("only one mode offered: {r}"));
    let r = c
        .request(
            "session/set_mode",
            json!({ "sessionId": sid, "modeId": other }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = c
        .request(
            "session/set_mode",
            json!({ "sessionId": sid, "modeId": "no-such-mode" }),
        )
        .await;
    assert!(r.get("error").is_some(), "{r}");
    c.assert_conformant();
}

/// The official Rust ACP SDK (`agent-client-protocol`) as the client: it
/// parses every message into its own types (a second, independent check),
/// while every line it reads from the daemon is also validated against the
/// schema on the way in.
#[tokio::test]
async fn the_official_rust_sdk_drives_a_session() {
    use agent_client_protocol::v1::schema::{
        CancelNotification, ContentBlock, InitializeRequest, ListSessionsRequest,
        LoadSessionRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
        RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
        SelectedPermissionOutcome, SessionNotification, StopReason, TextContent,
    };
    use agent_client_protocol::{Agent, Lines};
    use futures::StreamExt;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    let schema = Arc::new(AcpSchema::new());
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let command = json!({ "command": "echo sdk > sdk.txt; git push origin main" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "shell", &command)]),
        fake::openai_text("Done."),
        fake::Reply::Hang {},
    ])
    .await;
    let url = fake.openai_url();
    let mut child = tokio::process::Command::new(harness::BIN)
        .args(["serve", "--provider-url", &url, "--model", "fake-model"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("PASSEPARTOUT_LOG", "warn")
        .env_remove("PASSEPARTOUT_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();

    // What the SDK sends (id → method, for checking responses) and what it
    // reads, each line validated before the SDK sees it.
    let sent: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let problems: Arc<Mutex<Vec<String>>> = Arc::default();
    let checked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let outgoing = futures::sink::unfold(
        (stdin, sent.clone()),
        |(mut stdin, sent), line: String| async move {
            let line = line.trim_end_matches('\n').to_string();
            let msg: Value = serde_json::from_str(&line).unwrap();
            if let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) {
                sent.lock()
                    .unwrap()
                    .insert(id.to_string(), method.to_string());
            }
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await?;
            Ok::<_, std::io::Error>((stdin, sent))
        },
    );
    let incoming = tokio_stream_lines(stdout).map({
        let (schema, sent, problems, checked) = (
            schema.clone(),
            sent.clone(),
            problems.clone(),
            checked.clone(),
        );
        move |line: std::io::Result<String>| {
            if let Ok(line) = &line {
                checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let verdict = serde_json::from_str::<Value>(line)
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(|msg| schema.validate(&msg, &sent.lock().unwrap()));
                if let Err(why) = verdict {
                    problems
                        .lock()
                        .unwrap()
                        .push(format!("{why}\n    in {line}"));
                }
            }
            line
        }
    });
    let transport = Lines::new(Box::pin(outgoing), incoming);

    let updates: Arc<Mutex<Vec<SessionNotification>>> = Arc::default();
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cwd = project.path().to_path_buf();
    let result = agent_client_protocol::Client
        .v1()
        .on_receive_notification(
            {
                let updates = updates.clone();
                async move |n: SessionNotification, _cx| {
                    updates.lock().unwrap().push(n);
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            {
                let asked = asked.clone();
                async move |request: RequestPermissionRequest, responder, _connection| {
                    asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let option = request
                        .options
                        .iter()
                        .find(|o| o.kind == PermissionOptionKind::AllowOnce)
                        .map(|o| o.option_id.clone())
                        .expect("an allow_once option");
                    responder.respond(RequestPermissionResponse::new(
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option)),
                    ))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(
            transport,
            async move |connection: agent_client_protocol::v1::ConnectionTo<Agent>| {
                let init = connection
                    .send_request(InitializeRequest::new(
                        agent_client_protocol::schema::ProtocolVersion::V1,
                    ))
                    .block_task()
                    .await?;
                assert!(init.agent_capabilities.load_session, "{init:?}");
                let session = connection
                    .send_request(NewSessionRequest::new(cwd.clone()))
                    .block_task()
                    .await?
                    .session_id;
                let text = |t: &str| vec![ContentBlock::Text(TextContent::new(t.to_string()))];
                let done = connection
                    .send_request(PromptRequest::new(session.clone(), text("write sdk.txt")))
                    .block_task()
                    .await?;
                assert_eq!(done.stop_reason, StopReason::EndTurn);
                // Cancel a turn whose provider hangs.
                let pending = connection
                    .send_request(PromptRequest::new(session.clone(), text("take your time")))
                    .block_task();
                let cancel = {
                    let connection = connection.clone();
                    let session = session.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        connection.send_notification(CancelNotification::new(session))
                    }
                };
                let (cancelled, sent_cancel) = futures::join!(pending, cancel);
                sent_cancel?;
                assert_eq!(cancelled?.stop_reason, StopReason::Cancelled);
                let listed = connection
                    .send_request(ListSessionsRequest::new())
                    .block_task()
                    .await?;
                assert!(listed.sessions.iter().any(|s| s.session_id == session));
                connection
                    .send_request(LoadSessionRequest::new(session.clone(), cwd.clone()))
                    .block_task()
                    .await?;
                Ok(())
            },
        )
        .await;
    result.unwrap_or_else(|e| panic!("the SDK client failed: {e:?}"));
    assert_eq!(
        std::fs::read_to_string(project.path().join("sdk.txt")).unwrap(),
        "sdk\n"
    );
    assert!(
        asked.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no permission was asked"
    );
    assert!(!updates.lock().unwrap().is_empty());
    let problems = problems.lock().unwrap();
    assert!(
        problems.is_empty(),
        "{} message(s) break the ACP schema:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(checked.load(std::sync::atomic::Ordering::Relaxed) > 10);
}

/// The daemon's stdout as a stream of lines.
fn tokio_stream_lines(
    stdout: tokio::process::ChildStdout,
) -> impl futures::Stream<Item = std::io::Result<String>> + Send + 'static {
    use tokio::io::AsyncBufReadExt;
    let lines = tokio::io::BufReader::new(stdout).lines();
    futures::stream::unfold(lines, |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((Ok(line), lines)),
            Ok(None) => None,
            Err(e) => Some((Err(e), lines)),
        }
    })
}

/// `passepartout serve` as an ACP client starts it: default log level
/// (no `PASSEPARTOUT_LOG`), stderr captured.
fn spawn_quiet(home: &std::path::Path, url: &str) -> Client {
    let mut cmd = tokio::process::Command::new(harness::BIN);
    cmd.args(["serve", "--provider-url", url, "--model", "fake-model"])
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("PASSEPARTOUT_LOG")
        .env_remove("PASSEPARTOUT_CONFIG")
        .env(
            "PASSEPARTOUT_DISCOVERY_HOSTS",
            "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
        );
    Client::spawn_command(cmd, Framing::Ndjson)
}

/// Everything the daemon wrote on stderr, after it exited.
async fn stderr_of(mut client: Client) -> String {
    client.close_stdin();
    let mut stderr = client.child.stderr.take().expect("stderr piped");
    let _ = tokio::time::timeout(harness::WAIT, client.child.wait()).await;
    let mut text = String::new();
    use tokio::io::AsyncReadExt;
    let _ = tokio::time::timeout(harness::WAIT, stderr.read_to_string(&mut text)).await;
    text
}

/// Issue 21, done-when 1: a plain ACP client (no `_meta`) sees only
/// schema-defined messages, nothing before the `initialize` reply, and
/// stderr stays empty through a rejected permission, a second answer to
/// it, an answer to a request never sent, and a second daemon on the same
/// state directory.
#[tokio::test]
async fn a_plain_client_sees_only_acp_and_stderr_stays_empty() {
    let schema = std::sync::Arc::new(AcpSchema::new());
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let push = json!({ "command": "echo no > b.txt; git push origin main" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "shell", &push)]),
        fake::openai_text("Not pushing, then."),
    ])
    .await;
    let url = fake.openai_url();
    let mut c = Conformance::new(spawn_quiet(home.path(), &url), schema.clone());
    let r = c.request("initialize", initialize_params()).await;
    assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
    assert!(
        c.unhandled.is_empty(),
        "sent before the initialize reply: {:?}",
        c.unhandled
    );
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    // A second daemon on the same state directory, while this one runs.
    let mut second = Conformance::new(spawn_quiet(home.path(), &url), schema);
    second.request("initialize", initialize_params()).await;

    let id = c.start("session/prompt", prompt(&sid, "push it")).await;
    let r = c.finish(id, Answer::Kind("reject_once")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let ask = c
        .seen
        .iter()
        .find(|m| m["method"] == "session/request_permission")
        .cloned()
        .expect("the push asked");
    // agent-shell answers a rejected request a second time; and a stray
    // answer to an id the daemon never used.
    for id in [ask["id"].clone(), json!(987654)] {
        c.client
            .send(&json!({ "jsonrpc": "2.0", "id": id,
                "result": { "outcome": { "outcome": "selected", "optionId": "reject_once" } } }))
            .await;
    }
    // The connection still works after them.
    let r = c.request("session/list", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    c.assert_conformant();
    second.assert_conformant();
    for m in c.seen.iter().chain(second.seen.iter()) {
        if let Some(method) = m["method"].as_str() {
            assert!(
                ["session/update", "session/request_permission"].contains(&method),
                "not an ACP message: {m}"
            );
        }
    }
    let first_err = stderr_of(c.client).await;
    let second_err = stderr_of(second.client).await;
    assert_eq!(first_err, "", "the first daemon wrote on stderr");
    assert_eq!(second_err, "", "the second daemon wrote on stderr");
    // The lines went to the log file instead.
    let log = std::fs::read_to_string(home.path().join("state/passepartout/logs/passepartout.log"))
        .unwrap_or_default();
    assert!(log.contains("unknown request id"), "{log}");
    assert!(log.contains("another daemon holds"), "{log}");
}

/// Issue 21 item 2: a permission request for a file change carries the
/// ACP `diff` (old and new text) before the person decides; a new file
/// has no old text.
#[tokio::test]
async fn a_file_change_permission_request_carries_the_diff() {
    let schema = std::sync::Arc::new(AcpSchema::new());
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "milk\n").unwrap();
    let fake = FakeProvider::start(vec![
        fake::write_call("w1", "notes.txt", "milk\neggs\n"),
        fake::write_call("w2", "new.txt", "fresh\n"),
        fake::openai_text("Asked twice."),
    ])
    .await;
    let url = fake.openai_url();
    let mut c = Conformance::new(
        Client::spawn(
            Framing::Ndjson,
            home.path(),
            &["--provider-url", &url, "--model", "fake-model"],
        ),
        schema,
    );
    c.request("initialize", initialize_params()).await;
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    // `ask`: every change asks, so both writes come to the person.
    c.request(
        "session/set_mode",
        json!({ "sessionId": sid, "modeId": "ask" }),
    )
    .await;
    let id = c.start("session/prompt", prompt(&sid, "add eggs")).await;
    let r = c.finish(id, Answer::Kind("reject_once")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let asks: Vec<&Value> = c
        .seen
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .collect();
    assert_eq!(asks.len(), 2, "{asks:?}");
    let diffs = |ask: &Value| -> Vec<Value> {
        ask["params"]["toolCall"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "diff")
            .cloned()
            .collect()
    };
    let canonical = project.path().canonicalize().unwrap();
    assert_eq!(
        diffs(asks[0]),
        vec![json!({
            "type": "diff",
            "path": canonical.join("notes.txt"),
            "oldText": "milk\n",
            "newText": "milk\neggs\n",
        })]
    );
    let new_file = diffs(asks[1]);
    assert_eq!(new_file.len(), 1, "{new_file:?}");
    assert_eq!(new_file[0]["newText"], "fresh\n");
    assert!(new_file[0]["oldText"].is_null(), "{new_file:?}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "milk\n"
    );
    c.assert_conformant();
}

/// Issue 21 item 2, held effects: a shell command whose effect is held
/// (checkpoint apply) asks with one ACP `diff` per changed file in the
/// permission request itself, not only in an earlier update.
#[tokio::test]
async fn a_held_effect_permission_request_carries_the_diff() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // Contained, emptying sources is undoable and runs; a checkpoint quota
    // too small for their pre-images holds it as a loss.
    let config = home.path().join("config/passepartout");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[checkpoints]\nmax_store_bytes = 1\n",
    )
    .unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    for name in ["a.rs", "b.rs", "c.rs"] {
        std::fs::write(
            project.path().join("src").join(name),
            format!("// {name}\n"),
        )
        .unwrap();
    }
    // Checkpoints observe a git work tree.
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "start"],
    ] {
        harness::git(project.path(), args);
    }
    let args = json!({ "command": "truncate -s 0 src/*.rs" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_x", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = Client::with_fake(home.path(), &fake, project.path()).await;
    let id = c
        .start_request("session/prompt", prompt(&sid, "clean up"))
        .await;
    let ask = loop {
        let ask = c.wait_method("session/request_permission").await;
        if ask["params"]["toolCall"]["rawInput"]["op"] == "apply_checkpoint" {
            break ask;
        }
        c.answer(&ask, "allow_once").await;
    };
    let diffs: Vec<Value> = ask["params"]["toolCall"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "diff")
        .cloned()
        .collect();
    let a = project.path().join("src/a.rs");
    let shown = diffs
        .iter()
        .find(|d| d["path"] == json!(a))
        .unwrap_or_else(|| panic!("no diff for src/a.rs in {ask}"));
    assert_eq!(shown["oldText"], "// a.rs\n");
    assert_eq!(shown["newText"], "");
    c.answer(&ask, "reject_once").await;
    let done = c.wait_response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(a.exists(), "rejected: the file stays");
}
