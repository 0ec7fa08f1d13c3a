//! MCP answers of any size and errors a person can read, through the real
//! daemon and a real MCP server process (`examples/mcp_echo_server.rs`):
//! an answer over `mcp.max_message_bytes` (20 MiB against the 16 MiB
//! default) is answered at once with an error naming the cap, over stdio
//! and over streamable HTTP, and the server stays up for the next call; an
//! unreachable HTTP server is reported without Rust type names.

use crate::harness;
use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_provider as fake;

use super::mcp::{new_session, prompt_and_answer, tool_result, wrapped, Setup};

const TWENTY_MIB: usize = 20 * 1024 * 1024;

fn script(server: &str) -> Vec<fake::Reply> {
    let shout = format!("mcp__{server}__shout");
    let echo = format!("mcp__{server}__echo");
    vec![
        fake::openai_tool_calls(&[("call_big", &shout, &format!(r#"{{"n": {TWENTY_MIB}}}"#))]),
        fake::openai_text("That was big."),
        fake::openai_tool_calls(&[("call_after", &echo, r#"{"text": "still here"}"#)]),
        fake::openai_text("done"),
    ]
}

/// The two prompts of [`script`]: the big answer refused quickly, then an
/// ordinary call to the same server.
async fn big_then_small(s: &Setup, c: &mut harness::Client, sid: &str, server: &str) {
    let started = Instant::now();
    prompt_and_answer(c, sid, "allow_once").await;
    let took = started.elapsed();
    let result = tool_result(&s.fake, 1);
    assert!(
        result.contains("is over the MCP message cap of 16777216 bytes (mcp.max_message_bytes)"),
        "{}",
        &result[..result.len().min(500)]
    );
    assert!(
        result.len() < 2000,
        "the refused answer reached the model: {} bytes",
        result.len()
    );
    // Never the 60 s call timeout.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    prompt_and_answer(c, sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 3),
        wrapped(server, "echo", "echo: still here")
    );
    assert_eq!(
        s.calls(),
        [format!("shout {TWENTY_MIB}"), "echo still here".to_string()]
    );
}

#[tokio::test]
async fn a_20_mib_answer_over_stdio_is_refused_at_once_naming_the_cap() {
    let s = Setup::new(script("echo")).await;
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    big_then_small(&s, &mut c, &sid, "echo").await;
}

#[tokio::test]
async fn a_20_mib_answer_over_http_is_refused_and_the_server_stays_up() {
    let s = Setup::new(script("web")).await;
    let (mut server, url) = s.start_http_echo().await;
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let r = new_session(
        &mut c,
        s.project.path(),
        json!([{ "type": "http", "name": "web", "url": url, "headers": [] }]),
    )
    .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    big_then_small(&s, &mut c, &sid, "web").await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_http_server_is_reported_in_words_not_types() {
    let s = Setup::new(vec![]).await;
    // A port nobody listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let r = new_session(
        &mut c,
        s.project.path(),
        json!([{ "type": "http", "name": "gone", "url": url, "headers": [] }]),
    )
    .await;
    let message = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        message.starts_with("MCP server `gone` failed to start: cannot reach "),
        "{message}"
    );
    assert!(
        message.contains(&url) && message.contains("connection refused"),
        "{message}"
    );
    for type_name in [
        "reqwest",
        "rmcp",
        "hyper",
        "Error {",
        "StreamableHttp",
        "Client error",
    ] {
        assert!(!message.contains(type_name), "`{type_name}` in: {message}");
    }
}

#[tokio::test]
async fn slow_servers_started_together_all_start_within_the_default_timeout() {
    // Four servers that each take 11 s to answer `initialize` (a loaded
    // machine, a cold Python): past the old 10 s default, within the 30 s
    // one, and side by side, not one after another.
    let s = Setup::new(vec![]).await;
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let servers: Vec<_> = (0..4)
        .map(|i| s.echo(&format!("slow{i}"), &["--slow-start", "11"]))
        .collect();
    let started = Instant::now();
    let r = new_session(&mut c, s.project.path(), json!(servers)).await;
    let took = started.elapsed();
    let states: Vec<_> = r["result"]["_meta"]["passepartout"]["mcpServers"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, ["running"; 4], "{r}");
    assert!(
        took < Duration::from_secs(25),
        "started one after another: {took:?}"
    );
}
