//! An MCP server's `notifications/progress` during a call reach the ACP
//! client as `tool_call_update`s of that call, while it runs, rate-limited
//! (issue 42): a 3-step operation shows its steps before it ends.

use serde_json::json;

use super::mcp::{new_session, prompt_and_answer, tool_result, wrapped, Setup};
use crate::support::fake_provider as fake;

#[tokio::test]
async fn progress_of_a_running_mcp_call_reaches_the_client_as_tool_call_updates() {
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_w", "mcp__echo__work", r#"{"steps": 3}"#)]),
        fake::openai_text("Done working."),
    ])
    .await;
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    // The server saw a progress token (it says so when none came).
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped("echo", "work", "worked 3 steps")
    );
    let updates = c.updates("tool_call_update");
    let steps: Vec<String> = updates
        .iter()
        .filter(|u| u["toolCallId"] == "call_w" && u.get("status").is_none())
        .filter_map(|u| {
            u["content"][0]["content"]["text"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(
        steps.iter().any(|t| t == "echo: step 1 of 3 (1/3)"),
        "{steps:?}\n{updates:?}"
    );
    assert!(
        steps.len() >= 2,
        "one update per step (300 ms apart): {steps:?}"
    );
    // Every progress update came before the call's end.
    let last_progress = updates
        .iter()
        .rposition(|u| {
            u["toolCallId"] == "call_w" && u.get("status").is_none() && u["content"].is_array()
        })
        .unwrap();
    let completed = updates
        .iter()
        .position(|u| u["toolCallId"] == "call_w" && u["status"] == "completed")
        .unwrap();
    assert!(last_progress < completed, "{updates:?}");
}
