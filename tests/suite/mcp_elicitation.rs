//! MCP elicitation reaches the person: a real MCP server process
//! (`examples/mcp_echo_server.rs`) asks a question in the middle of a tool
//! call (`elicitation/create`), and the real daemon routes it to the ACP
//! client that advertised `elicitation` in `initialize` — the server's
//! message marked as its words, an answer that does not fit the form asked
//! again, the call's timeout paused while the person thinks. A client
//! without the capability gets nothing to answer: the server is declined at
//! once and the person and the model are told; a cancel reaches the server
//! as a cancel; a second question while one waits is declined.

use serde_json::{json, Value};
use support::fake_provider as fake;

use crate::harness::{prompt, Client};
use crate::support;

use super::mcp::{new_session, tool_result, wrapped, Setup};

/// `initialize` with these client capabilities (no passepartout extensions:
/// a plain ACP client).
async fn initialize(c: &mut Client, capabilities: Value) {
    let r = c
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": capabilities }),
        )
        .await;
    assert!(r.get("result").is_some(), "initialize failed: {r}");
}

/// Send `text`, allow every permission request, answer every
/// `elicitation/create` with what `answer` returns (None: leave it
/// unanswered); the prompt's response and the questions seen.
async fn prompt_eliciting(
    c: &mut Client,
    sid: &str,
    text: &str,
    mut answer: impl FnMut(&Value) -> Option<Value>,
) -> (Value, Vec<Value>) {
    let id = c.start_request("session/prompt", prompt(sid, text)).await;
    let mut questions = Vec::new();
    loop {
        let msg = c
            .wait_for(|v| {
                (v["id"] == json!(id) && v.get("method").is_none())
                    || v["method"] == "session/request_permission"
                    || v["method"] == "elicitation/create"
            })
            .await;
        if msg["method"] == "session/request_permission" {
            c.answer(&msg, "allow_once").await;
        } else if msg["method"] == "elicitation/create" {
            if let Some(result) = answer(&msg) {
                c.respond(&msg["id"], result).await;
            }
            questions.push(msg);
        } else {
            return (msg, questions);
        }
    }
}

/// Fail unless `params` is a valid ACP `CreateElicitationRequest` (the
/// JSON schema generated from the ACP schema crate's type).
fn assert_acp_elicitation(params: &Value) {
    use agent_client_protocol_schema::v1 as acp;
    let schema =
        serde_json::to_value(schemars::schema_for!(acp::CreateElicitationRequest)).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(params)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "not an ACP elicitation request: {errors:?} in {params}"
    );
}

/// A one-tool-call script: `tool` of server `echo`, then "done".
fn calling(tool: &str) -> Vec<fake::Reply> {
    vec![
        fake::openai_tool_calls(&[("c1", &format!("mcp__echo__{tool}"), "{}")]),
        fake::openai_text("done"),
    ]
}

#[tokio::test]
async fn a_form_reaches_the_person_and_a_checked_answer_goes_back() {
    let s = Setup::new(calling("ask")).await;
    // A 1 s call limit: the person takes longer, and the call still waits.
    let mut c = s.spawn(Some("[mcp]\ncall_timeout_secs = 1\n"));
    initialize(&mut c, json!({ "elicitation": { "form": {} } })).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    let mut n = 0;
    let (done, questions) = prompt_eliciting(&mut c, &sid, "ask me", |_| {
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(1500));
        Some(if n == 1 {
            // Wrong type for `urgent`: asked again.
            json!({ "action": "accept", "content": { "name": "Ada", "urgent": "yes" } })
        } else {
            json!({ "action": "accept", "content": { "name": "Ada", "size": "small", "urgent": true } })
        })
    })
    .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(questions.len(), 2, "{questions:#?}");
    let first = &questions[0]["params"];
    for q in &questions {
        assert_acp_elicitation(&q["params"]);
    }
    assert_eq!(first["sessionId"], sid.as_str());
    assert_eq!(first["mode"], "form");
    assert_eq!(
        first["message"],
        "MCP server `echo` asks (its words, untrusted): What is your name?"
    );
    assert_eq!(first["requestedSchema"]["required"], json!(["name"]));
    assert_eq!(
        first["requestedSchema"]["properties"]["size"]["enum"],
        json!(["small", "large"])
    );
    let again = questions[1]["params"]["message"].as_str().unwrap();
    assert!(
        again.starts_with("Your last answer did not fit the form: `urgent` must be true or false."),
        "{again}"
    );
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped(
            "echo",
            "ask",
            r#"accept {"name":"Ada","size":"small","urgent":true}"#
        )
    );
}

#[tokio::test]
async fn a_client_without_elicitation_declines_at_once_and_says_so() {
    let s = Setup::new(calling("ask")).await;
    let mut c = s.spawn(None);
    initialize(&mut c, json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let (done, questions) = prompt_eliciting(&mut c, &sid, "ask me", |_| None).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(questions.is_empty(), "{questions:#?}");
    let line = "[MCP server `echo` asked for input (form mode) that this client cannot show; it was declined. MCP server `echo` asks (its words, untrusted): What is your name?]";
    // The model reads the server's outcome, then the daemon's line.
    assert_eq!(
        tool_result(&s.fake, 1),
        format!("{}\n{line}", wrapped("echo", "ask", "decline"))
    );
    // The person reads the line in the session.
    assert!(c.message_text().contains(line), "{}", c.message_text());
    assert_eq!(s.calls(), ["ask", "asked: decline"]);
}

#[tokio::test]
async fn a_cancel_reaches_the_server_and_a_second_question_is_declined() {
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("c1", "mcp__echo__ask", "{}")]),
        fake::openai_text("done"),
        fake::openai_tool_calls(&[("c2", "mcp__echo__ask_twice", "{}")]),
        fake::openai_text("done"),
    ])
    .await;
    let mut c = s.spawn(None);
    initialize(&mut c, json!({ "elicitation": { "form": {} } })).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    let (done, _) =
        prompt_eliciting(&mut c, &sid, "ask", |_| Some(json!({ "action": "cancel" }))).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(tool_result(&s.fake, 1), wrapped("echo", "ask", "cancel"));

    // Two at once: the first waits for the person (who takes a second),
    // the second is declined without reaching the client.
    let (done, questions) = prompt_eliciting(&mut c, &sid, "ask twice", |_| {
        std::thread::sleep(std::time::Duration::from_millis(1000));
        Some(json!({ "action": "accept", "content": { "name": "Bo" } }))
    })
    .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(questions.len(), 1, "{questions:#?}");
    assert!(questions[0]["params"]["message"]
        .as_str()
        .unwrap()
        .ends_with("Question 1: what is your name?"));
    let line = "[MCP server `echo` asked a question while another is waiting for the person (one at a time per session); it was declined]";
    assert_eq!(
        tool_result(&s.fake, 3),
        format!(
            "{}\n{line}",
            wrapped(
                "echo",
                "ask_twice",
                r#"first: accept {"name":"Bo"}; second: decline"#
            )
        )
    );
}

#[tokio::test]
async fn a_url_question_shows_the_url_to_a_client_that_takes_urls() {
    let s = Setup::new(calling("ask_url")).await;
    let mut c = s.spawn(None);
    initialize(&mut c, json!({ "elicitation": { "form": {}, "url": {} } })).await;
    let r = new_session(&mut c, s.project.path(), json!([s.echo("echo", &[])])).await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let (done, questions) = prompt_eliciting(&mut c, &sid, "sign in", |_| {
        Some(json!({ "action": "accept" }))
    })
    .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let q = &questions[0]["params"];
    assert_acp_elicitation(q);
    assert_eq!(q["mode"], "url");
    assert_eq!(q["url"], "https://example.com/sign-in");
    assert_eq!(q["elicitationId"], "sign-in-1");
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped("echo", "ask_url", "accept ")
    );
}
