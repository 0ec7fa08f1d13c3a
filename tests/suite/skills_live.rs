//! Skills in a running daemon: a skill file dropped into the project is
//! picked up on the next turn and its tool runs (in the sandbox) when the
//! model calls it; the editor's live check and reload; the text tool
//! protocol for models without function calling.

use crate::harness;
use crate::support;

use harness::{cli, prompt, Client, Framing};
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

/// A person's rules-only skill: one valid deny rule and one whose regex
/// does not compile.
const GUARD_WITH_A_TYPO: &str = "#+SKILL: guard\n#+DESCRIPTION: the person's guard\n\n* Rules :rules:\n\
** No curl\n:PROPERTIES:\n:DECISION: deny\n:TARGET: shell\n:PATTERN: \\bcurl\\b\n:END:\nThe person never lets the agent use curl.\n\n- match :: =curl x=\n- no match :: =ls=\n\n\
** Ask before touching the notes\n:PROPERTIES:\n:DECISION: ask\n:TARGET: shell\n:PATTERN: notes(\n:END:\nNotes are private.\n\n- match :: =cat notes(1)=\n";

#[tokio::test]
async fn a_skill_with_a_broken_rule_keeps_its_valid_deny_and_asks_for_the_broken_scope() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let skills = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(skills.join("guard.org"), GUARD_WITH_A_TYPO).unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "curl http://127.0.0.1:9/x"),
        fake::shell_call("c2", "echo harmless"),
        fake::openai_text("Done."),
    ])
    .await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url, "--sandbox", "none"],
        json!({}),
        project.path(),
    )
    .await;
    let (r, asked) = c
        .prompt_answering(&sid, "fetch it", |_| "reject_once".into())
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let results = fake.tool_results(2);
    // The valid deny rule of the broken file still denies.
    assert!(
        results[0].contains("No curl") && results[0].contains("skill:guard"),
        "{results:?}"
    );
    // The broken ask rule's scope (every shell action) asks, and says why.
    assert_eq!(asked.len(), 1, "{asked:?}");
    // The person hears about the broken file in the chat, not only stderr.
    let thoughts = c.updates("agent_thought_chunk");
    let notice: String = thoughts
        .iter()
        .filter(|u| u["_meta"]["passepartout"]["notice"] == "skills")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        notice.contains("guard.org:20:") && notice.contains("not a valid regular expression"),
        "{notice}"
    );
}

#[tokio::test]
async fn a_crlf_script_runs_as_skills_check_reads_it() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let skills = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    let text =
        "#+SKILL: crlf\n* twice :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:END:\nSay it twice.\n\n\
                #+begin_src bash\nfor i in 1 2; do\n  printf 'hi%s ' \"$i\"\ndone\n#+end_src\n"
            .replace('\n', "\r\n");
    std::fs::write(skills.join("crlf.org"), &text).unwrap();
    let (code, out) = cli(
        home.path(),
        project.path(),
        &["skills", "check", skills.join("crlf.org").to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("t1", "twice", "{}")]),
        fake::openai_text("Done."),
    ])
    .await;
    let url = fake.openai_url();
    let (mut c, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url, "--sandbox", "none"],
        json!({}),
        project.path(),
    )
    .await;
    let (r, _) = c.prompt_allowing(&sid, "say it").await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let results = fake.tool_results(1);
    assert!(results[0].contains("hi1 hi2"), "{results:?}");
}

#[test]
fn skills_check_without_paths_checks_every_layer_like_the_daemon() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let user = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("mine.org"),
        "#+SKILL: mine\n* hi :tool:\n:PROPERTIES:\n:APPROVAL: sometimes\n:END:\nSay hi.\n#+begin_src sh\necho hi\n#+end_src\n",
    )
    .unwrap();
    let theirs = project.path().join(".passepartout/skills");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(
        theirs.join("theirs.org"),
        "#+SKILL: theirs\n#+TRIGER: always\n* p :prompt:\nHi.\n",
    )
    .unwrap();
    let (code, out) = cli(home.path(), project.path(), &["skills", "check"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("mine.org:4:12: error: `:APPROVAL:` must be auto, ask or never"),
        "{out}"
    );
    assert!(
        out.contains("theirs.org:1:1: warning: project skill `theirs` is untrusted"),
        "{out}"
    );
    assert!(
        out.contains("theirs.org:2:1: warning: #+TRIGER: is not a skill keyword"),
        "{out}"
    );
    assert!(out.contains("checked 2 files: 1 error"), "{out}");
}
