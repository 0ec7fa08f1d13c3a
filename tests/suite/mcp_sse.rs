//! The legacy HTTP+SSE MCP transport, end to end: the real daemon and a
//! legacy SSE MCP server on 127.0.0.1 (`tests/support/sse_server.rs`),
//! named by an ACP client (`"type": "sse"`) or in config.toml
//! (`type = "sse"`). Its tool is listed and called; an answer over the
//! message cap becomes an error for that call while the server stays up;
//! a dropped stream stops the server with a readable message.

use crate::harness;
use crate::suite::mcp::{
    new_session, offered_tools, prompt_and_answer, tool_result, wrapped, Setup,
};
use crate::support::fake_provider as fake;
use crate::support::sse_server::SseServer;
use harness::prompt;

use serde_json::json;

#[tokio::test]
async fn a_legacy_sse_server_named_by_the_client_works_like_a_stdio_one() {
    let server = SseServer::start().await;
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_s", "mcp__legacy__echo", r#"{"text": "over sse"}"#)]),
        fake::openai_text("done"),
    ])
    .await;
    let mut c = s.spawn(None);
    let init = c.initialize(json!({})).await;
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"]["sse"], true,
        "{init}"
    );
    let r = new_session(
        &mut c,
        s.project.path(),
        json!([{ "type": "sse", "name": "legacy", "url": server.url, "headers": [{ "name": "X-Client", "value": "test" }] }]),
    )
    .await;
    let status = &r["result"]["_meta"]["passepartout"]["mcpServers"][0];
    assert_eq!(status["state"], "running", "{r}");
    assert_eq!(status["transport"], format!("sse: {}", server.url), "{r}");
    assert_eq!(status["tools"], json!(["mcp__legacy__echo"]), "{r}");
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped("legacy", "echo", "echo: over sse")
    );
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn an_oversized_sse_answer_is_an_error_and_a_dropped_stream_stops_the_server() {
    let server = SseServer::start().await;
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_1", "mcp__old__echo", r#"{"text": "big"}"#)]),
        fake::openai_text("done"),
        fake::openai_tool_calls(&[("call_2", "mcp__old__echo", r#"{"text": "small"}"#)]),
        fake::openai_text("done"),
        fake::openai_tool_calls(&[("call_3", "mcp__old__echo", r#"{"text": "gone"}"#)]),
        fake::openai_text("done"),
    ])
    .await;
    let config = format!(
        "[mcp]\nmax_message_bytes = 4096\n[[mcp.servers]]\nname = \"old\"\nurl = \"{}\"\ntype = \"sse\"\n",
        server.url
    );
    let mut c = s.spawn(Some(&config));
    c.initialize(json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(
        r["result"]["_meta"]["passepartout"]["mcpServers"][0]["state"], "running",
        "{r}"
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    // The answer is 20 KB against a 4 KiB cap: the call is told at once.
    server.oversized(20_000);
    let started = std::time::Instant::now();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    let result = tool_result(&s.fake, 1);
    assert!(
        result.contains("is over the MCP message cap of 4096 bytes (mcp.max_message_bytes)"),
        "{result}"
    );
    assert!(started.elapsed() < harness::WAIT, "no wait for a timeout");
    // The server stays up.
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 3),
        wrapped("old", "echo", "echo: small")
    );

    // The server drops its stream: it is stopped; the next turn no longer
    // offers its tools, and a call to one is answered, never a hang.
    server.drop_streams();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let p = c
        .start_request("session/prompt", prompt(&sid, "again"))
        .await;
    let done = c.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(!offered_tools(&s.fake, 4).contains(&"mcp__old__echo".to_string()));
    let result = tool_result(&s.fake, 5);
    assert!(result.contains("unknown tool `mcp__old__echo`"), "{result}");
    assert_eq!(server.calls(), 2);
}
