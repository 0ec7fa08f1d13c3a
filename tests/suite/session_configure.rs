//! Provider and model chosen per session from the editor, through the real
//! binary: `_passepartout/providers` lists the providers with the models
//! their servers offer (a real HTTP `GET /v1/models` to the fake provider),
//! and `_passepartout/session/configure` changes what one session's next
//! turn asks for, without a restart and without touching other sessions.

use crate::harness;
use crate::support;

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

#[tokio::test]
async fn providers_lists_models_from_the_server() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let url = fake.openai_url();
    let mut c = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", &url, "--model", "fake-model"],
    );
    c.initialize(json!({ "flightPlans": true })).await;
    let r = c.request("_passepartout/providers", Value::Null).await;
    let providers = r["result"]["providers"].as_array().expect("providers");
    assert_eq!(providers.len(), 1, "{r}");
    let p = &providers[0];
    assert_eq!(p["kind"], "openai");
    assert_eq!(p["baseUrl"], url);
    assert_eq!(p["model"], "fake-model");
    assert_eq!(p["models"], json!(fake::FAKE_MODELS));
    assert_eq!(p["modelsError"], Value::Null);
}

#[tokio::test]
async fn providers_says_why_a_server_lists_no_models() {
    let home = tempfile::tempdir().unwrap();
    // Nothing listens on the discard port of loopback.
    let mut c = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", "http://127.0.0.1:9/v1", "--model", "gone"],
    );
    c.initialize(json!({})).await;
    let r = c.request("_passepartout/providers", Value::Null).await;
    let p = &r["result"]["providers"][0];
    assert_eq!(p["models"], json!([]));
    let why = p["modelsError"].as_str().expect("a reason");
    assert!(why.contains("http://127.0.0.1:9/v1/models"), "{why}");
}

#[tokio::test]
async fn configure_changes_the_next_turn_of_that_session_only() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::openai_text("from the large model"),
        fake::openai_text("from the default model"),
    ])
    .await;
    let url = fake.openai_url();
    let mut c = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", &url, "--model", "fake-model"],
    );
    c.initialize(json!({ "flightPlans": true })).await;
    let configured = c.new_session(project.path()).await;
    let other = c.new_session(project.path()).await;

    let r = c
        .request(
            "_passepartout/session/configure",
            json!({ "sessionId": configured, "model": "fake-large", "maxTokens": 99 }),
        )
        .await;
    assert_eq!(r["result"]["model"], "fake-large", "{r}");
    assert_eq!(r["result"]["maxTokens"], 99, "{r}");

    let r = c.request("session/prompt", prompt(&configured, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let r = c.request("session/prompt", prompt(&other, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["model"], "fake-large");
    assert_eq!(requests[0].body["max_tokens"], 99);
    assert_eq!(requests[1].body["model"], "fake-model");
}

#[tokio::test]
async fn configure_refuses_what_it_cannot_use() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let url = fake.openai_url();
    let mut c = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", &url, "--model", "fake-model"],
    );
    c.initialize(json!({})).await;
    let session = c.new_session(project.path()).await;
    let r = c
        .request(
            "_passepartout/session/configure",
            json!({ "sessionId": session, "provider": "nope" }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown provider `nope`; configured: 127.0.0.1"),
        "{r}"
    );
    let r = c
        .request(
            "_passepartout/session/configure",
            json!({ "sessionId": "s-none", "model": "x" }),
        )
        .await;
    // ACP: an unknown session is "resource not found".
    assert_eq!(r["error"]["code"], -32002, "{r}");
}
