//! The client's file system end to end: the real daemon, the fake provider
//! over real HTTP, and this test as the ACP client. A client that offers
//! `fs.readTextFile` / `fs.writeTextFile` gets the files tools' reads and
//! writes as `fs/read_text_file` / `fs/write_text_file` with absolute
//! canonical paths inside the working directory; a path outside (or
//! through a symbolic link) is refused before any request reaches it; an
//! oversized answer is refused naming the cap; only *method not found*
//! falls back to the disk; a client without the capabilities never gets
//! an fs request.

use crate::harness;
use crate::support;

use std::path::Path;

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
    std::fs::write(project.path().join("notes.txt"), "disk text\n").unwrap();
    Setup {
        home: tempfile::tempdir().unwrap(),
        project,
        fake: FakeProvider::start(script).await,
    }
}

/// Start the daemon and initialize it, offering the fs capabilities when
/// `fs` is true.
async fn start(s: &Setup, fs: bool) -> (Client, String) {
    let url = s.fake.openai_url();
    let mut c = Client::spawn(
        Framing::Ndjson,
        s.home.path(),
        &["--provider-url", &url, "--model", "fake"],
    );
    let caps = if fs {
        json!({ "fs": { "readTextFile": true, "writeTextFile": true } })
    } else {
        json!({})
    };
    let r = c
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": caps }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let sid = c.new_session(s.project.path()).await;
    (c, sid)
}

/// How the test client answers one `fs/*` request.
enum Answer {
    Result(Value),
    Error(i64, &'static str),
}

/// Run one prompt to its end: permission requests are allowed once, every
/// `fs/*` request is recorded and answered by `answer`. Returns the fs
/// requests seen.
async fn drive(c: &mut Client, sid: &str, mut answer: impl FnMut(&Value) -> Answer) -> Vec<Value> {
    let p = c
        .start_request(
            "session/prompt",
            json!({ "sessionId": sid, "prompt": [{ "type": "text", "text": "go" }] }),
        )
        .await;
    let mut seen = Vec::new();
    loop {
        let msg = c.read().await.expect("daemon closed its output");
        if msg["id"] == json!(p) && msg.get("method").is_none() {
            assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
            return seen;
        }
        let method = msg["method"].as_str().unwrap_or_default().to_string();
        if method == "session/request_permission" {
            c.answer(&msg, "allow_once").await;
        } else if method.starts_with("fs/") {
            match answer(&msg) {
                Answer::Result(v) => c.respond(&msg["id"], v).await,
                Answer::Error(code, message) => {
                    c.send(&json!({ "jsonrpc": "2.0", "id": msg["id"],
                                    "error": { "code": code, "message": message } }))
                        .await
                }
            }
            seen.push(msg);
        } else {
            c.backlog.push(msg);
        }
    }
}

/// The tool results the model received in its last request, by call id.
fn results(fake: &FakeProvider) -> std::collections::HashMap<String, String> {
    let reqs = fake.requests();
    let last = reqs.last().expect("a request");
    last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn canonical(p: &Path) -> std::path::PathBuf {
    p.canonicalize().unwrap()
}

#[tokio::test]
async fn reads_and_writes_go_through_a_client_that_offers_fs() {
    let s = setup(vec![
        fake::openai_tool_calls(&[
            ("r", "read_file", r#"{"path": "notes.txt"}"#),
            (
                "w1",
                "write_file",
                r#"{"path": "sub/saved.txt", "content": "saved by the editor\n"}"#,
            ),
            (
                "w2",
                "write_file",
                r#"{"path": "kept.txt", "content": "left unsaved\n"}"#,
            ),
        ]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = start(&s, true).await;
    let seen = drive(&mut c, &sid, |msg| {
        let params = &msg["params"];
        match msg["method"].as_str().unwrap() {
            "fs/read_text_file" => Answer::Result(json!({ "content": "unsaved buffer text\n" })),
            _ => {
                // An editor that saves `saved.txt` and only keeps `kept.txt`
                // in a buffer.
                let path = params["path"].as_str().unwrap();
                if path.ends_with("saved.txt") {
                    std::fs::write(path, params["content"].as_str().unwrap()).unwrap();
                }
                Answer::Result(json!({}))
            }
        }
    })
    .await;
    let root = canonical(s.project.path());
    let methods: Vec<(&str, &str)> = seen
        .iter()
        .map(|m| {
            (
                m["method"].as_str().unwrap(),
                m["params"]["path"].as_str().unwrap(),
            )
        })
        .collect();
    let read_path = root.join("notes.txt").display().to_string();
    let saved_path = root.join("sub/saved.txt").display().to_string();
    let kept_path = root.join("kept.txt").display().to_string();
    assert_eq!(
        methods,
        vec![
            ("fs/read_text_file", read_path.as_str()),
            ("fs/write_text_file", saved_path.as_str()),
            ("fs/write_text_file", kept_path.as_str()),
        ]
    );
    assert!(seen.iter().all(|m| m["params"]["sessionId"] == json!(sid)));
    let results = results(&s.fake);
    // The agent saw the buffer, not the disk.
    assert_eq!(results["r"], "unsaved buffer text\n");
    assert!(
        results["w1"].contains("through the editor"),
        "{}",
        results["w1"]
    );
    assert!(
        results["w2"].contains("did not save it; written to disk too"),
        "{}",
        results["w2"]
    );
    // Either way the disk holds what the agent wrote.
    assert_eq!(
        std::fs::read_to_string(root.join("sub/saved.txt")).unwrap(),
        "saved by the editor\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("kept.txt")).unwrap(),
        "left unsaved\n"
    );
}

#[tokio::test]
async fn paths_outside_the_project_never_reach_the_client() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    let s = setup(vec![
        fake::openai_tool_calls(&[
            ("up", "read_file", r#"{"path": "../x"}"#),
            ("etc", "read_file", r#"{"path": "etc/passwd"}"#),
            ("link", "read_file", r#"{"path": "secret"}"#),
            (
                "wlink",
                "write_file",
                r#"{"path": "out/x.txt", "content": "x"}"#,
            ),
        ]),
        fake::openai_text("done"),
    ])
    .await;
    std::os::unix::fs::symlink("/etc", s.project.path().join("etc")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        s.project.path().join("secret"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), s.project.path().join("out")).unwrap();
    let (mut c, sid) = start(&s, true).await;
    let seen = drive(&mut c, &sid, |_| {
        Answer::Result(json!({ "content": "LEAK" }))
    })
    .await;
    assert!(seen.is_empty(), "requests reached the client: {seen:?}");
    let results = results(&s.fake);
    for id in ["up", "etc", "link", "wlink"] {
        let text = &results[id];
        assert!(!text.contains("LEAK"), "{id}: {text}");
        assert!(
            text.contains("outside") || text.contains("symbolic link") || text.contains("refused"),
            "{id}: {text}"
        );
    }
    assert!(!outside.path().join("x.txt").exists());
}

#[tokio::test]
async fn an_oversized_answer_is_refused_naming_the_cap() {
    let s = setup(vec![
        fake::openai_tool_calls(&[("r", "read_file", r#"{"path": "notes.txt"}"#)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = start(&s, true).await;
    let big = "x".repeat(300 * 1024);
    let seen = drive(&mut c, &sid, |_| {
        Answer::Result(json!({ "content": big.clone() }))
    })
    .await;
    assert_eq!(seen.len(), 1);
    let text = &results(&s.fake)["r"];
    assert!(
        text.contains("307200 bytes, more than the 262144-byte client read limit"),
        "{text}"
    );
}

#[tokio::test]
async fn only_method_not_found_falls_back_to_the_disk() {
    let s = setup(vec![
        fake::openai_tool_calls(&[
            ("missing", "read_file", r#"{"path": "notes.txt"}"#),
            ("failing", "read_file", r#"{"path": "notes.txt"}"#),
        ]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = start(&s, true).await;
    let mut n = 0;
    let seen = drive(&mut c, &sid, |_| {
        n += 1;
        if n == 1 {
            Answer::Error(-32601, "Method not found")
        } else {
            Answer::Error(-32603, "the buffer is locked")
        }
    })
    .await;
    assert_eq!(seen.len(), 2);
    let results = results(&s.fake);
    let fallback = &results["missing"];
    assert!(fallback.starts_with("disk text\n"), "{fallback}");
    assert!(
        fallback.contains("the editor does not implement fs/read_text_file; done on disk instead"),
        "{fallback}"
    );
    let failed = &results["failing"];
    assert_eq!(
        failed,
        "the editor refused fs/read_text_file: the buffer is locked"
    );
}

#[tokio::test]
async fn a_client_without_fs_capabilities_gets_no_fs_requests() {
    let s = setup(vec![
        fake::openai_tool_calls(&[
            ("r", "read_file", r#"{"path": "notes.txt"}"#),
            (
                "w",
                "write_file",
                r#"{"path": "new.txt", "content": "on disk\n"}"#,
            ),
        ]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = start(&s, false).await;
    let seen = drive(&mut c, &sid, |_| {
        Answer::Result(json!({ "content": "LEAK" }))
    })
    .await;
    assert!(seen.is_empty(), "{seen:?}");
    let results = results(&s.fake);
    assert_eq!(results["r"], "disk text\n");
    assert_eq!(
        std::fs::read_to_string(s.project.path().join("new.txt")).unwrap(),
        "on disk\n"
    );
}
