//! Skills in a running daemon: a skill file dropped into the project is
//! picked up on the next turn and its tool runs (in the sandbox) when the
//! model calls it; the editor's live check and reload; the text tool
//! protocol for models without function calling.

use crate::harness;
use crate::support;

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

const GREET_SKILL: &str = r#"#+TITLE: Greetings
#+SKILL: greet
#+DESCRIPTION: Greets people by name.

* greet                                                               :tool:
:PROPERTIES:
:APPROVAL: auto
:KIND:     other
:END:
Greet someone.

| name | type   | required | description     |
|------+--------+----------+-----------------|
| name | string | yes      | Who to greet.   |

#+begin_src bash
printf 'hello, %s' "$ARG_NAME"
#+end_src
"#;

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_skill_dropped_into_the_project_is_used_on_the_next_turn() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    // The person's own configuration lets trusted project tools keep
    // `:APPROVAL: auto` (by default they ask).
    let config = home.path().join("config/passepartout");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "trust_project_tool_approval = true\n",
    )
    .unwrap();
    let fake = FakeProvider::start(vec![
        fake::openai_text("No greeting tool yet."),
        fake::openai_tool_calls(&[("g1", "greet", r#"{"name": "world; rm -rf ~"}"#)]),
        fake::openai_text("Greeted."),
    ])
    .await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url],
        json!({}),
        project.path(),
    )
    .await;
    let r = c
        .request("session/prompt", prompt(&sid, "greet the world"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(!tool_names(&fake.requests()[0].body).contains(&"greet".to_string()));

    let dir = project.path().join(".passepartout/skills");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("greet.org"), GREET_SKILL).unwrap();
    // Project skills load once the person trusts them.
    let r = c
        .request(
            "_passepartout/skills/trust",
            json!({ "cwd": project.path(), "paths": [".passepartout/skills/greet.org"] }),
        )
        .await;
    assert_eq!(r["result"]["trusted"][0]["name"], "greet", "{r}");

    let r = c
        .request("session/prompt", prompt(&sid, "greet the world"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let reqs = fake.requests();
    assert!(
        tool_names(&reqs[1].body).contains(&"greet".to_string()),
        "{:?}",
        tool_names(&reqs[1].body)
    );
    let msgs = reqs[2].body["messages"].as_array().unwrap();
    let result = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap()["content"]
        .as_str()
        .unwrap();
    // The argument reached the script as data: printed, not executed.
    assert!(result.contains("hello, world; rm -rf ~"), "{result}");
    assert!(home.path().exists());
}

#[tokio::test]
async fn the_editor_checks_unsaved_skill_text_and_reloads() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut c = Client::spawn(Framing::ContentLength, home.path(), &[]);
    c.initialize(json!({ "flightPlans": true })).await;
    let broken = "#+SKILL: broken\n\n* lonely                                                              :tool:\nA tool without a body.\n";
    let r = c
        .request(
            "_passepartout/skills/check",
            json!({ "path": "/tmp/broken.org", "text": broken }),
        )
        .await;
    let diags = r["result"]["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    assert!(!diags.is_empty(), "{r}");
    assert_eq!(diags[0]["line"], 3, "{r}");
    assert_eq!(diags[0]["severity"], "error", "{r}");
    assert_eq!(diags[0]["path"], "/tmp/broken.org");

    let r = c
        .request(
            "_passepartout/skills/check",
            json!({ "path": "/tmp/greet.org", "text": GREET_SKILL }),
        )
        .await;
    assert_eq!(r["result"]["diagnostics"], json!([]), "{r}");

    c.new_session(project.path()).await;
    let dir = project.path().join(".passepartout/skills");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("greet.org"), GREET_SKILL).unwrap();
    let r = c
        .request(
            "_passepartout/skills/trust",
            json!({ "cwd": project.path(), "paths": [".passepartout/skills/greet.org"] }),
        )
        .await;
    assert_eq!(r["result"]["trusted"][0]["name"], "greet", "{r}");
    let r = c.request("_passepartout/skills/reload", json!(null)).await;
    let names: Vec<&str> = r["result"]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(names.contains(&"greet") && names.contains(&"shell"), "{r}");
    let r = c
        .request(
            "_passepartout/skills/list",
            json!({ "cwd": project.path() }),
        )
        .await;
    let greet = r["result"]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "greet")
        .cloned()
        .unwrap();
    assert_eq!(
        (greet["origin"].clone(), greet["tools"].clone()),
        (json!("project"), json!(["greet"])),
        "{r}"
    );
}

#[tokio::test]
async fn models_without_function_calling_use_the_text_protocol() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "remember the milk").unwrap();
    let text_reply = |text: &str| -> Reply {
        let chunks = vec![
            json!({ "choices": [{ "index": 0, "delta": { "content": text } }] }),
            json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
        ];
        Reply::OpenAi {
            chunks,
            delay_ms: 1,
            done: true,
        }
    };
    let fake = FakeProvider::start(vec![
        // A broken call: unknown tool, then prose.
        text_reply("Let me look.\n(frobnicate \"x\")"),
        // A call in a code fence with a missing closing paren.
        text_reply("Sorry. Reading it now:\n```lisp\n((read_file \"notes.txt\")\n```"),
        text_reply("It says to remember the milk."),
    ])
    .await;
    let config = home.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[[providers]]\nname = \"tiny\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"tiny\"\nnative_tools = false\n", fake.openai_url()),
    )
    .unwrap();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--config", config.to_str().unwrap()],
        json!({}),
        project.path(),
    )
    .await;
    let r = c
        .request("session/prompt", prompt(&sid, "what do my notes say?"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs[0].body.get("tools").is_none(),
        "no native tools: {}",
        reqs[0].body
    );
    let system = reqs[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("## Tools") && system.contains("read_file"),
        "{system}"
    );
    let last_user = |n: usize| -> String {
        let msgs = reqs[n].body["messages"].as_array().unwrap();
        msgs.iter().rev().find(|m| m["role"] == "user").unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let feedback = last_user(1);
    assert!(
        feedback.contains("Problems with your reply") && feedback.contains("frobnicate"),
        "{feedback}"
    );
    let results = last_user(2);
    assert!(
        results.contains("Results of your tool calls") && results.contains("remember the milk"),
        "{results}"
    );
    assert!(reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["role"] != "tool"));
}
