//! The daemon over real stdio: both framings, malformed input, and that it
//! keeps serving after every kind of bad message.

use crate::harness;

use harness::{Client, Framing};
use serde_json::json;

async fn check_errors_and_recovery(framing: Framing) {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(framing, home.path(), &[]);

    // Unknown method.
    let r = c.request("no/such/method", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");

    // Wrong params: session/new without cwd, then a relative cwd.
    let r = c.request("session/new", json!({ "mcpServers": [] })).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = c
        .request(
            "session/new",
            json!({ "cwd": "relative/dir", "mcpServers": [] }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("absolute"),
        "{r}"
    );

    // Not JSON at all.
    match framing {
        Framing::Ndjson => c.send_raw(b"this is not json\n").await,
        Framing::ContentLength => c.send_raw(b"Content-Length: 8\r\n\r\nnot json").await,
    }
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32700), json!(null)),
        "{r}"
    );

    // Valid JSON, invalid request (no jsonrpc member).
    c.send(&json!({ "id": 99, "method": "initialize" })).await;
    let r = c.read().await.unwrap();
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32600), json!(99)),
        "{r}"
    );

    // A batch.
    c.send(&json!([{ "jsonrpc": "2.0", "id": 1, "method": "initialize" }]))
        .await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], -32600);

    // Still serving: a proper initialize works, null params are accepted by
    // jsonrpc.el-style clients, and the reply is in the client's framing.
    let r = c.initialize(json!({ "flightPlans": true })).await;
    assert_eq!(r["result"]["protocolVersion"], 1);
    assert_eq!(r["result"]["agentInfo"]["name"], "passepartout");
    let r = c
        .request(
            "session/prompt",
            json!({ "sessionId": "nope", "prompt": [{ "type": "text", "text": "hi" }] }),
        )
        .await;
    // ACP: an unknown session is "resource not found".
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown session"),
        "{r}"
    );

    // End of input is a clean shutdown.
    c.close_stdin();
    let status = tokio::time::timeout(harness::WAIT, c.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn content_length_framing_errors_and_recovery() {
    check_errors_and_recovery(Framing::ContentLength).await;
}

#[tokio::test]
async fn ndjson_framing_errors_and_recovery() {
    check_errors_and_recovery(Framing::Ndjson).await;
}

#[tokio::test]
async fn garbage_between_content_length_frames_is_skipped() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    let good = json!({ "jsonrpc": "2.0", "id": 7, "method": "initialize", "params": { "protocolVersion": 1 } }).to_string();
    let bytes = format!(
        "Content-Length: 5\r\n\r\n{{bad}}garbage line\r\nContent-Length: {}\r\n\r\n{good}",
        good.len()
    );
    c.send_raw(bytes.as_bytes()).await;
    let first = c.read().await.unwrap();
    assert_eq!(first["error"]["code"], -32700, "{first}");
    let garbage = c.read().await.unwrap();
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    let reply = c.wait_response(7).await;
    assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}");
    // The reply says whether shell actions can run (a client that opted
    // in also gets `_passepartout/sandbox/status` after it).
    let sandbox = &reply["result"]["_meta"]["passepartout"]["sandbox"];
    assert!(sandbox["available"].is_boolean(), "{sandbox}");
    assert!(
        !sandbox["message"].as_str().unwrap().is_empty(),
        "{sandbox}"
    );
    assert_eq!(
        (
            reply["id"].clone(),
            reply["result"]["protocolVersion"].clone()
        ),
        (json!(7), json!(1)),
        "{reply}"
    );
}

#[tokio::test]
async fn null_params_are_accepted_where_optional() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    // jsonrpc.el sends "params": null for nil.
    let r = c.request("initialize", json!(null)).await;
    assert_eq!(
        r["error"]["code"], -32602,
        "initialize needs a protocol version: {r}"
    );
    let r = c
        .request("initialize", json!({ "protocolVersion": 1, "_meta": null }))
        .await;
    assert_eq!(r["result"]["protocolVersion"], 1, "{r}");
}

/// The `id` member of a reply, as the daemon wrote it.
fn raw_id(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: &'a serde_json::value::RawValue,
        method: Option<String>,
    }
    let parsed: IdOnly = serde_json::from_str(text).ok()?;
    parsed.method.is_none().then(|| parsed.id.get().to_string())
}

/// Read until a reply (a message with an id and no method) arrives.
async fn next_reply(c: &mut Client) -> (String, serde_json::Value) {
    loop {
        let text = c.read_text().await.expect("a reply before EOF");
        if let Some(id) = raw_id(&text) {
            let value = serde_json::from_str(&text).unwrap();
            return (id, value);
        }
    }
}

async fn check_ids_echoed_as_sent(framing: Framing) {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(framing, home.path(), &[]);
    for id in [
        "-1",
        "1.5",
        "18446744073709551616",
        "1e3",
        "\"x\"",
        "0",
        "-0",
        "\"\\u00e9\"",
        "null",
    ] {
        // Success, method not found, invalid params, and a bad envelope:
        // every reply carries the id byte for byte.
        let cases = [
            (
                r#""method":"initialize","params":{"protocolVersion":1}"#,
                None,
            ),
            (r#""method":"no/such/method","params":{}"#, Some(-32601)),
            (
                r#""method":"session/new","params":{"mcpServers":[]}"#,
                Some(-32602),
            ),
            (r#""method":"session/new","params":3"#, Some(-32600)),
        ];
        for (rest, code) in cases {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},{rest}}}"#);
            let bytes = match framing {
                Framing::Ndjson => format!("{body}\n"),
                Framing::ContentLength => {
                    format!("Content-Length: {}\r\n\r\n{body}", body.len())
                }
            };
            c.send_raw(bytes.as_bytes()).await;
            let (got, reply) = next_reply(&mut c).await;
            assert_eq!(got, id, "{framing:?} {rest}: {reply}");
            match code {
                None => assert_eq!(reply["result"]["protocolVersion"], 1, "{reply}"),
                Some(code) => assert_eq!(reply["error"]["code"], code, "{reply}"),
            }
        }
    }
    // Only an unreadable frame gets `id: null`.
    let bytes: &[u8] = match framing {
        Framing::Ndjson => b"{\"id\":-1,\n",
        Framing::ContentLength => b"Content-Length: 9\r\n\r\n{\"id\":-1,",
    };
    c.send_raw(bytes).await;
    let (got, reply) = next_reply(&mut c).await;
    assert_eq!(
        (got.as_str(), reply["error"]["code"].clone()),
        ("null", json!(-32700))
    );
}

#[tokio::test]
async fn ids_are_echoed_as_sent_ndjson() {
    check_ids_echoed_as_sent(Framing::Ndjson).await;
}

#[tokio::test]
async fn ids_are_echoed_as_sent_content_length() {
    check_ids_echoed_as_sent(Framing::ContentLength).await;
}

/// Run the daemon on `input` (NDJSON) to the end; returns (stdout, stderr).
fn run_daemon(home: &std::path::Path, log_env: Option<&str>, input: &str) -> (String, String) {
    use std::io::Write;
    let mut cmd = std::process::Command::new(harness::BIN);
    cmd.arg("serve")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("PASSEPARTOUT_LOG")
        .env_remove("PASSEPARTOUT_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(filter) = log_env {
        cmd.env("PASSEPARTOUT_LOG", filter);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

#[test]
fn info_goes_to_the_log_file_and_stderr_stays_quiet() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let input = format!(
        "{}\n{}\n",
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}),
        json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":project.path(),"mcpServers":[]}}),
    );
    let (stdout, stderr) = run_daemon(home.path(), None, &input);
    assert!(stdout.contains("\"sessionId\""), "{stdout}");
    // acp.el shows every stderr line as an error: nothing but warnings.
    assert_eq!(stderr, "", "stderr must be quiet by default");
    let log = find_file(home.path(), "passepartout.log").expect("a log file under the state dir");
    assert!(log.parent().unwrap().ends_with("logs"), "{}", log.display());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("session/new"), "{text}");
    assert!(text.contains("INFO"), "{text}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&log), 0o600);
    assert_eq!(mode(log.parent().unwrap()), 0o700);

    // PASSEPARTOUT_LOG still decides: INFO is back on stderr.
    let (_, stderr) = run_daemon(home.path(), Some("info"), &input);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("INFO") && l.contains("session/new")),
        "{stderr}"
    );
}

#[test]
fn log_file_in_the_config_moves_the_log() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let target = home.path().join("elsewhere").join("daemon.log");
    let config_dir = home.path().join("config").join("passepartout");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        format!("log_file = {:?}\n", target.display().to_string()),
    )
    .unwrap();
    let input = format!(
        "{}\n",
        json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":project.path(),"mcpServers":[]}}),
    );
    let (_, stderr) = run_daemon(home.path(), None, &input);
    assert_eq!(stderr, "");
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(text.contains("session/new"), "{text}");
}

#[test]
fn the_log_file_never_shows_api_keys_even_at_trace() {
    let home = tempfile::tempdir().unwrap();
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": 1,
        "_meta": { "passepartout": { "apiKeys": { "local": "sk-very-secret-777" } } } } });
    let (stdout, stderr) = run_daemon(home.path(), Some("trace"), &format!("{init}\n"));
    assert!(stdout.contains("\"id\":1"), "{stdout}");
    let log = find_file(home.path(), "passepartout.log").expect("a log file");
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        text.contains("TRACE") || text.contains("DEBUG"),
        "tracing is on"
    );
    assert!(!text.contains("sk-very-secret-777"), "{text}");
    assert!(!stderr.contains("sk-very-secret-777"), "{stderr}");
}

#[tokio::test]
async fn unknown_resources_are_acp_resource_not_found() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::Ndjson, home.path(), &[]);
    c.initialize(json!({})).await;
    let r = c
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": "fp-0123456789ab", "decision": "approve" }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fp-0123456789ab"),
        "{r}"
    );
    let r = c
        .request(
            "_passepartout/undo",
            json!({ "cwd": project.path(), "id": "c999" }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let r = c
        .request(
            "session/load",
            json!({ "sessionId": "s-none", "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
}
