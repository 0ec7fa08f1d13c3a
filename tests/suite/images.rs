//! Images both ways (issue 42): an ACP prompt's image and an MCP tool's
//! image reach a model that takes images, in its provider's wire format;
//! a model that does not is told in words what was left out — through the
//! real binary, a fake provider on 127.0.0.1 and the real MCP echo server.

use std::path::Path;

use serde_json::{json, Value};

use super::mcp::{prompt_and_answer, Setup};
use crate::harness::{Client, Framing};
use crate::support::fake_provider::{self as fake, FakeProvider};

/// The one-pixel PNG the echo server's `screenshot` returns.
const RED_DOT_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn data_url() -> String {
    format!("data:image/png;base64,{RED_DOT_PNG}")
}

/// The daemon with one provider entry (`kind`, `model`, `extra` TOML).
fn spawn(home: &Path, fake: &FakeProvider, kind: &str, model: &str, extra: &str) -> Client {
    let base = match kind {
        "anthropic" => fake.base_url.clone(),
        _ => fake.openai_url(),
    };
    let path = home.join("images-config.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nkind = \"{kind}\"\nbase_url = \"{base}\"\n\
             model = \"{model}\"\napi_key = \"test-key\"\nmax_retries = 0\n{extra}\n"
        ),
    )
    .unwrap();
    Client::spawn(Framing::Ndjson, home, &["--config", path.to_str().unwrap()])
}

fn prompt_with_image(session: &str) -> Value {
    json!({ "sessionId": session, "prompt": [
        { "type": "text", "text": "what is in this picture?" },
        { "type": "image", "mimeType": "image/png", "data": RED_DOT_PNG },
    ]})
}

/// The last user message of request `n`.
fn last_user(fake: &FakeProvider, n: usize) -> Value {
    let reqs = fake.requests();
    let messages = reqs[n].body["messages"].as_array().unwrap().clone();
    messages
        .into_iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message")
}

#[tokio::test]
async fn an_image_in_a_prompt_reaches_an_openai_model_that_takes_images() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("A red dot.")]).await;
    let mut c = spawn(home.path(), &fake, "openai", "fake-model", "images = true");
    let init = c.initialize(json!({})).await;
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"]["image"], true,
        "{init}"
    );
    let sid = c.new_session(project.path()).await;
    let r = c.request("session/prompt", prompt_with_image(&sid)).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(
        last_user(&fake, 0)["content"],
        json!([
            { "type": "text", "text": "what is in this picture?" },
            { "type": "image_url", "image_url": { "url": data_url() } },
        ])
    );
}

#[tokio::test]
async fn an_image_in_a_prompt_reaches_an_anthropic_model_as_a_block() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::anthropic_text("A red dot.")]).await;
    let mut c = spawn(home.path(), &fake, "anthropic", "claude-sonnet-4-5", "");
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let r = c.request("session/prompt", prompt_with_image(&sid)).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let content = last_user(&fake, 0)["content"].clone();
    let image = content
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "image")
        .unwrap_or_else(|| panic!("no image block in {content}"))
        .clone();
    assert_eq!(
        image["source"],
        json!({ "type": "base64", "media_type": "image/png", "data": RED_DOT_PNG })
    );
}

#[tokio::test]
async fn a_model_without_images_is_told_what_was_left_out() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("I cannot see it.")]).await;
    // A local text model's name: not known to take images.
    let mut c = spawn(home.path(), &fake, "openai", "llama3.1:8b", "");
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let r = c.request("session/prompt", prompt_with_image(&sid)).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let text = last_user(&fake, 0)["content"]
        .as_str()
        .expect("plain text for a text model")
        .to_string();
    assert!(text.starts_with("what is in this picture?"), "{text}");
    assert!(
        text.contains("1 image left out (image/png, 70 bytes)"),
        "{text}"
    );
    assert!(text.contains("`images = true`"), "{text}");
    assert!(!text.contains(RED_DOT_PNG), "{text}");
}

#[tokio::test]
async fn an_image_that_cannot_travel_is_named_in_the_prompt() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("ok")]).await;
    let mut c = spawn(home.path(), &fake, "openai", "gpt-4o", "");
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let r = c
        .request(
            "session/prompt",
            json!({ "sessionId": sid, "prompt": [
                { "type": "text", "text": "and this?" },
                { "type": "image", "mimeType": "image/tiff", "data": "AAAA" },
            ]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let text = last_user(&fake, 0)["content"].as_str().unwrap().to_string();
    assert!(
        text.contains(
            "[left out: an image of type image/tiff (the models take PNG, JPEG, GIF and WebP)]"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_mcp_tools_image_reaches_the_model_after_the_rounds_results() {
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_s", "mcp__echo__screenshot", "{}")]),
        fake::openai_text("It shows a red dot."),
    ])
    .await;
    let path = s.home.path().join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\n\
             model = \"fake\"\nmax_retries = 0\nimages = true\n",
            s.fake.openai_url()
        ),
    )
    .unwrap();
    let mut c = Client::spawn(
        Framing::Ndjson,
        s.home.path(),
        &["--config", path.to_str().unwrap()],
    );
    c.initialize(json!({})).await;
    let r = c
        .request(
            "session/new",
            json!({ "cwd": s.project.path(), "mcpServers": [s.echo("echo", &[])] }),
        )
        .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .expect("session")
        .to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    let reqs = s.fake.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let messages = reqs[1].body["messages"].as_array().unwrap().clone();
    let tool_at = messages
        .iter()
        .position(|m| m["role"] == "tool")
        .expect("the tool result");
    let tool_text = messages[tool_at]["content"].as_str().unwrap();
    assert!(tool_text.contains("a red dot"), "{tool_text}");
    assert!(tool_text.contains("[image image/png]"), "{tool_text}");
    assert!(!tool_text.contains(RED_DOT_PNG), "{tool_text}");
    let after = &messages[tool_at + 1];
    assert_eq!(after["role"], "user", "{messages:?}");
    assert_eq!(after["content"][1]["image_url"]["url"], data_url());
    assert!(after["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("call_s"));
}
