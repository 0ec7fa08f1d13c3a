//! Slash commands from skills through the real binary and the fake
//! provider: a user skill's `:command:` heading is announced in an
//! `available_commands_update` after `session/new` (beside the built-in
//! `/review` and `/explain`), `/name args` reaches the model as the
//! expanded template with the skill active, an unknown `/name` reaches it
//! unchanged, and a skills reload that adds a command announces it.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::Client;
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

const GREET: &str = "#+TITLE: Greetings
#+SKILL: greet
#+DESCRIPTION: Greets people.
#+TRIGGER: never

* Greeting style                                                     :prompt:
GREET-SKILL-PROMPT: greet warmly.

* greet                                                             :command:
:PROPERTIES:
:DESCRIPTION: Greet someone in French
:INPUT:       who to greet
:END:
Say hello to $ARGUMENTS in French.
";

fn prompt(session: &str, text: &str) -> Value {
    json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] })
}

fn names(update: &Value) -> Vec<String> {
    update["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

async fn commands_update(c: &mut Client) -> Value {
    c.wait_for(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .await
}

fn skills_dir(home: &Path) -> std::path::PathBuf {
    let dir = home.join("config/passepartout/skills");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn commands_are_announced_and_expanded_into_the_prompt() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(skills_dir(home.path()).join("greet.org"), GREET).unwrap();
    let fake =
        FakeProvider::start(vec![fake::openai_text("Bonjour"), fake::openai_text("?")]).await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url],
        json!({}),
        project.path(),
    )
    .await;

    let update = commands_update(&mut c).await;
    assert_eq!(update["params"]["sessionId"], sid.as_str());
    let listed = names(&update);
    for want in ["greet", "review", "explain"] {
        assert!(listed.iter().any(|n| n == want), "{want} in {listed:?}");
    }
    let greet = update["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "greet")
        .unwrap()
        .clone();
    assert_eq!(
        greet,
        json!({ "name": "greet", "description": "Greet someone in French", "input": { "hint": "who to greet" } })
    );

    let r = c
        .request("session/prompt", prompt(&sid, "/greet Ada"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let r = c
        .request("session/prompt", prompt(&sid, "/nosuch thing"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let reqs = fake.requests();
    let first = reqs[0].body["messages"].as_array().unwrap();
    let system = first[0]["content"].as_str().unwrap();
    assert!(
        system.contains("GREET-SKILL-PROMPT"),
        "the command activates its skill: {system}"
    );
    assert_eq!(
        first.last().unwrap()["content"],
        "Say hello to Ada in French."
    );
    let second = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(second.last().unwrap()["content"], "/nosuch thing");
}

#[tokio::test]
async fn a_reload_that_adds_a_command_announces_it() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let dir = skills_dir(home.path());
    let fake = FakeProvider::start(vec![]).await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url],
        json!({}),
        project.path(),
    )
    .await;
    let first = commands_update(&mut c).await;
    assert!(!names(&first).contains(&"greet".to_string()));
    c.backlog.clear();

    std::fs::write(dir.join("greet.org"), GREET).unwrap();
    let r = c
        .request(
            "_passepartout/skills/reload",
            json!({ "cwd": project.path() }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let update = commands_update(&mut c).await;
    assert_eq!(update["params"]["sessionId"], sid.as_str());
    assert!(names(&update).contains(&"greet".to_string()), "{update}");
}

/// Issue 21 item 4: `session/load` replays the slash command the person
/// typed, not the template it expanded into (the model got the latter).
#[tokio::test]
async fn a_replay_shows_the_command_as_typed() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(skills_dir(home.path()).join("greet.org"), GREET).unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("Bonjour Ada")]).await;
    let url = fake.openai_url();
    let args = ["--provider-url", url.as_str()];
    let (mut c, sid) = Client::with_session(home.path(), &args, json!({}), project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "/greet Ada"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let model_got = fake.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .clone();
    assert_eq!(model_got, "Say hello to Ada in French.");
    c.close_stdin();
    let _ = tokio::time::timeout(harness::WAIT, c.child.wait()).await;

    let mut c = Client::spawn(harness::Framing::Ndjson, home.path(), &args);
    c.initialize(json!({})).await;
    c.backlog.clear();
    let r = c
        .request(
            "session/load",
            json!({ "sessionId": sid, "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let typed: Vec<Value> = c
        .updates("user_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].clone())
        .collect();
    assert_eq!(typed, vec![json!("/greet Ada")]);
    let list = c.request("session/list", json!({})).await;
    assert_eq!(
        list["result"]["sessions"][0]["title"], "/greet Ada",
        "{list}"
    );
}
