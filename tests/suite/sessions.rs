//! Sessions that survive, context that fits, a budget the agent cannot
//! exceed — through the real binary, a real fake provider on 127.0.0.1,
//! and the real state directory.

use crate::harness;
use crate::support;

use std::path::{Path, PathBuf};

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

/// A config file with one OpenAI-compatible provider and `extra` TOML.
pub(crate) fn config(
    home: &Path,
    fake: &FakeProvider,
    provider_extra: &str,
    extra: &str,
) -> PathBuf {
    let path = home.join("test-config.toml");
    std::fs::write(&path, config_text(fake, provider_extra, extra)).unwrap();
    path
}

/// The text of [`config`].
pub(crate) fn config_text(fake: &FakeProvider, provider_extra: &str, extra: &str) -> String {
    format!(
        "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nmax_retries = 0\n{provider_extra}\n\n{extra}\n",
        fake.openai_url()
    )
}

pub(crate) fn spawn(home: &Path, config: &Path) -> Client {
    Client::spawn(
        Framing::Ndjson,
        home,
        &["--config", config.to_str().unwrap()],
    )
}

fn session_updates(messages: &[Value], session: &str) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| m["params"]["update"].clone())
        .collect()
}

#[tokio::test]
async fn a_killed_daemon_session_loads_with_its_history_and_continues() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("word.txt"), "kiwi\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "read_file", r#"{"path": "word.txt"}"#)]),
        fake::openai_text("The word is kiwi."),
        // The second prompt is in flight when the daemon is killed.
        Reply::Hang {},
        fake::openai_text("You asked about kiwi."),
    ])
    .await;
    let cfg = config(home.path(), &fake, "", "");
    let mut c = spawn(home.path(), &cfg);
    let init = c.initialize(json!({})).await;
    assert_eq!(
        init["result"]["agentCapabilities"]["loadSession"], true,
        "{init}"
    );
    let sid = c.new_session(project.path()).await;
    let r = c
        .request("session/prompt", prompt(&sid, "Read word.txt"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    c.start_request("session/prompt", prompt(&sid, "Say it again"))
        .await;
    // Wait until the hanging request reached the provider, then kill -9.
    for _ in 0..200 {
        if fake.requests().len() == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(fake.requests().len(), 3);
    c.child.start_kill().unwrap();
    c.child.wait().await.unwrap();

    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let list = c.request("session/list", json!({})).await;
    let sessions = list["result"]["sessions"].as_array().unwrap();
    assert!(
        sessions.iter().any(|s| s["sessionId"] == sid.as_str()
            && s["title"] == "Read word.txt"
            && s["cwd"] == project.path().canonicalize().unwrap().to_str().unwrap()),
        "{list}"
    );
    c.backlog.clear();
    let r = c.load_session(&sid, project.path()).await;
    assert!(r.get("result").is_some(), "{r}");
    // Everything replayed arrived before the response, in order.
    let replay = session_updates(&c.backlog, &sid);
    let kinds: Vec<&str> = replay
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    let first = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert_eq!(kinds[0], "user_message_chunk", "{kinds:?}");
    assert_eq!(replay[0]["content"]["text"], "Read word.txt");
    assert!(
        first("tool_call") < first("agent_message_chunk"),
        "{kinds:?}"
    );
    let done = replay
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .unwrap_or_else(|| panic!("no completed tool_call_update in {replay:?}"));
    assert_eq!(done["toolCallId"], "call_1");
    let texts: Vec<&str> = replay
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(texts.contains(&"The word is kiwi."), "{texts:?}");
    assert_eq!(*texts.last().unwrap(), "Say it again", "{texts:?}");

    // The next prompt continues with the same history.
    c.backlog.clear();
    let r = c
        .request("session/prompt", prompt(&sid, "What did you read?"))
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(c.message_text(), "You asked about kiwi.");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    let messages = reqs[3].body["messages"].as_array().unwrap();
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    for expected in [
        "Read word.txt",
        "kiwi\n",
        "The word is kiwi.",
        "Say it again",
        "What did you read?",
    ] {
        assert!(
            contents.iter().any(|c| c.contains(expected)),
            "{expected:?} missing from {contents:?}"
        );
    }
    assert!(
        messages
            .iter()
            .any(|m| m["tool_calls"][0]["id"] == "call_1"),
        "the tool call is part of the continued history: {messages:?}"
    );

    // The journal is private.
    use std::os::unix::fs::PermissionsExt;
    let dir = home.path().join("state/passepartout/sessions");
    let file = dir.join(format!("{sid}.jsonl"));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[tokio::test]
async fn loading_an_unknown_session_is_a_resource_not_found_error() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let cfg = config(home.path(), &fake, "", "");
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let r = c.load_session("20200101T000000-1-1", project.path()).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("20200101T000000-1-1"),
        "{r}"
    );
    let r = c.load_session("../../etc/passwd", project.path()).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[tokio::test]
async fn a_budget_stops_a_scripted_run_before_the_request_that_would_exceed_it() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "alpha\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    // The first answer reports 5,900 prompt tokens: with the next request's
    // own estimate (the system prompt and tools alone are over 100), the
    // session would pass its 6,000-token budget.
    let fake = FakeProvider::start(vec![
        fake::with_usage(
            fake::openai_tool_calls(&[("c1", "read_file", r#"{"path": "a.txt"}"#)]),
            5_900,
            10,
            0,
            0,
        ),
        fake::openai_text("never sent"),
    ])
    .await;
    let cfg = config(home.path(), &fake, "", "[budget]\nsession_tokens = 6000\n");
    let out = tokio::process::Command::new(harness::BIN)
        .args(["run", "--config", cfg.to_str().unwrap(), "Read a.txt"])
        .current_dir(project.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(fake.requests().len(), 1, "the second request was sent");
    assert!(stdout.contains("Budget reached"), "{stdout}");
    assert!(
        stdout.contains("`session_tokens` under `[budget]`"),
        "{stdout}"
    );
    assert!(stdout.contains("_passepartout/budget/set"), "{stdout}");
    assert!(stderr.contains("stopped by a budget"), "{stderr}");
    // The day's ledger counted the request that was made.
    let ledger_dir = home.path().join("state/passepartout/usage");
    let day: Vec<_> = std::fs::read_dir(&ledger_dir).unwrap().collect();
    assert_eq!(day.len(), 1);
    let text = std::fs::read_to_string(day[0].as_ref().unwrap().path()).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("\"input_tokens\":5900"), "{text}");

    // `run --continue` picks the session up (and is stopped again: the
    // budget is per session, and this session has spent it).
    let out = tokio::process::Command::new(harness::BIN)
        .args([
            "run",
            "--continue",
            "--config",
            cfg.to_str().unwrap(),
            "Go on",
        ])
        .current_dir(project.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("Budget reached"), "{stdout}");
    assert_eq!(fake.requests().len(), 1);

    // `sessions list` and `sessions show` read the same journal.
    let out = std::process::Command::new(harness::BIN)
        .args(["sessions", "--config", cfg.to_str().unwrap(), "list"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listed}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("2 turns"), "{listed}");
    assert!(listed.contains("Read a.txt"), "{listed}");
    let id = listed.split_whitespace().next().unwrap();
    let out = std::process::Command::new(harness::BIN)
        .args(["sessions", "--config", cfg.to_str().unwrap(), "show", id])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    for expected in ["> Read a.txt", "⚙", "> Go on", "Budget reached"] {
        assert!(shown.contains(expected), "{expected:?} missing:\n{shown}");
    }
}

#[tokio::test]
async fn usage_reaches_the_client_and_a_budget_can_be_raised_at_runtime() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // Anthropic-style usage with cache hits; priced as claude-sonnet-4-5.
    let fake = FakeProvider::start(vec![
        fake::with_usage(fake::openai_text("First."), 200_000, 1_000, 150_000, 0),
        fake::openai_text("Second."),
    ])
    .await;
    let cfg = home.path().join("test-config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"claude-sonnet-4-5\"\nmax_retries = 0\n\n[budget]\nturn_tokens = 1000000\nsession_cost = 0.2101\n",
            fake.openai_url()
        ),
    )
    .unwrap();
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "one")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let usage = c.wait_method("_passepartout/usage").await["params"].clone();
    // 50,000 uncached at $3/M + 150,000 cached at $0.30/M + 1,000 out at
    // $15/M: $0.21.
    let cost = 50_000.0 * 3e-6 + 150_000.0 * 0.3e-6 + 1_000.0 * 15e-6;
    assert_eq!(usage["sessionId"], sid.as_str());
    assert_eq!(usage["currency"], "USD");
    assert_eq!(usage["turn"]["inputTokens"], 200_000, "{usage}");
    assert_eq!(usage["turn"]["outputTokens"], 1_000, "{usage}");
    assert_eq!(usage["turn"]["cachedTokens"], 150_000, "{usage}");
    assert!(
        (usage["session"]["cost"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{usage}"
    );
    assert!(
        (usage["day"]["cost"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{usage}"
    );
    assert_eq!(usage["budget"]["sessionCost"], 0.2101, "{usage}");
    assert_eq!(
        usage["budget"]["remaining"]["turnTokens"],
        1_000_000 - 201_000,
        "{usage}"
    );
    let acp_usage = c
        .wait_for(|m| m["params"]["update"]["sessionUpdate"] == "usage_update")
        .await;
    assert_eq!(acp_usage["params"]["update"]["cost"]["currency"], "USD");

    // The session has spent $0.21 of $0.2101: the next request would pass
    // it, so it is not sent.
    c.backlog.clear();
    let r = c.request("session/prompt", prompt(&sid, "two")).await;
    assert_eq!(r["result"]["stopReason"], "max_tokens", "{r}");
    assert_eq!(r["result"]["_meta"]["passepartout"]["stopReason"], "budget");
    assert!(
        c.message_text().contains("`session_cost`"),
        "{}",
        c.message_text()
    );
    assert_eq!(fake.requests().len(), 1);

    // Raised for this daemon, the same prompt goes through.
    let r = c
        .request("_passepartout/budget/set", json!({ "sessionCost": 1.0 }))
        .await;
    assert_eq!(r["result"]["sessionCost"], 1.0, "{r}");
    c.backlog.clear();
    let r = c.request("session/prompt", prompt(&sid, "two")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(c.message_text(), "Second.");
    assert_eq!(fake.requests().len(), 2);
}

/// Chars/4 of a request body, the rule the daemon's estimate follows.
pub(crate) fn body_tokens(body: &Value) -> usize {
    body.to_string().len() / 4
}

/// The tokens of the fixed part of a request (system prompt and tools),
/// measured on a first prompt: it depends on the built-in skills, which
/// change.
pub(crate) async fn fixed_request_tokens(home: &Path, project: &Path) -> usize {
    let probe = FakeProvider::start(vec![fake::openai_text("ok")]).await;
    let cfg = config(home, &probe, "", "");
    let mut c = spawn(home, &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project).await;
    c.request("session/prompt", prompt(&sid, "hi")).await;
    body_tokens(&probe.requests()[0].body)
}

/// A text answer streamed without pauses between its word chunks: the
/// window is what these tests measure, and paced (2 ms a chunk) their
/// turns took most of the suite's longest test.
pub(crate) fn unpaced(text: &str) -> Reply {
    let mut reply = fake::openai_text(text);
    if let Reply::OpenAi { delay_ms, .. } = &mut reply {
        *delay_ms = 0;
    }
    reply
}

#[tokio::test]
async fn a_long_session_is_compacted_and_every_request_stays_under_the_window() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let base = fixed_request_tokens(home.path(), project.path()).await;

    // A window with room for the fixed part and a few long answers.
    let window = base + 3_000;
    let answer = "lorem ipsum dolor sit amet ".repeat(60); // ~1,600 chars

    let script: Vec<Reply> = (0..30).map(|_| unpaced(&answer)).collect();
    let fake = FakeProvider::start(script).await;
    let cfg = config(
        home.path(),
        &fake,
        &format!("context_window = {window}"),
        "",
    );
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    for i in 0..14 {
        let r = c
            .request("session/prompt", prompt(&sid, &format!("question {i}")))
            .await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "turn {i}: {r}");
    }
    let compactions: Vec<Value> = c
        .backlog
        .iter()
        .filter(|m| m["method"] == "_passepartout/session/compacted")
        .map(|m| m["params"].clone())
        .collect();
    assert!(!compactions.is_empty(), "no compaction in 14 long turns");
    let first = &compactions[0];
    assert_eq!(first["sessionId"], sid.as_str());
    assert_eq!(first["window"], window as u64);
    assert!(first["summary"].as_str().unwrap().contains("lorem ipsum"));
    assert!(
        first["tokensAfter"].as_u64().unwrap() < first["tokensBefore"].as_u64().unwrap(),
        "{first}"
    );
    let reqs = fake.requests();
    let summaries = reqs
        .iter()
        .filter(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("You are compacting a conversation"))
        })
        .count();
    assert!(summaries >= 1);
    for (n, r) in reqs.iter().enumerate() {
        assert!(
            body_tokens(&r.body) < window,
            "request {n} is {} tokens for a {window}-token window",
            body_tokens(&r.body)
        );
    }
    // The request after the summary carries it instead of the old turns.
    let last = &reqs.last().unwrap().body["messages"];
    let text = last.to_string();
    assert!(
        text.contains("[Summary of the earlier conversation"),
        "{text}"
    );
    assert!(!text.contains("question 0\""), "{text}");
    assert!(text.contains("question 13"), "{text}");

    // The compaction is in the history: a later daemon loads the compacted
    // history and shows the compaction in the replay.
    drop(c);
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    c.backlog.clear();
    let r = c.load_session(&sid, project.path()).await;
    assert!(r.get("result").is_some(), "{r}");
    let replay = session_updates(&c.backlog, &sid);
    assert!(
        replay
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_thought_chunk"
                && u["content"]["text"]
                    .as_str()
                    .unwrap()
                    .starts_with("(context compacted)")),
        "{replay:?}"
    );
}

#[tokio::test]
async fn a_compaction_summary_is_cut_at_an_eighth_of_the_window() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let base = fixed_request_tokens(home.path(), project.path()).await;

    let window = base + 3_000;
    // A first answer that fills the window, then a summary of 900,000
    // characters (the model ignoring every request to be brief).
    let long = format!("{0} {0} {0}", "lorem".repeat(900));
    let huge = format!("{0} {0} {0}", "s".repeat(300_000));
    let fake = FakeProvider::start(vec![unpaced(&long), unpaced(&huge), unpaced("ok")]).await;
    let cfg = config(
        home.path(),
        &fake,
        &format!("context_window = {window}"),
        "",
    );
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    for text in ["first", "second"] {
        let r = c.request("session/prompt", prompt(&sid, text)).await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    let compacted = c
        .backlog
        .iter()
        .find(|m| m["method"] == "_passepartout/session/compacted")
        .map(|m| m["params"].clone())
        .expect("a compaction");
    let summary = compacted["summary"].as_str().unwrap();
    let cap = window / 8 * 4;
    assert!(summary.len() <= cap + 64, "{} chars", summary.len());
    assert!(summary.ends_with("[summary cut at its size limit]"));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1].body["max_tokens"],
        (window / 8) as u64,
        "{:.300}",
        reqs[1].body
    );
    let last = &reqs[2].body;
    assert!(body_tokens(last) < window, "{} tokens", body_tokens(last));
}

/// Issue 21 item 4: a turn cancelled mid-answer keeps what had streamed
/// (the person saw it): `session/load` in another daemon replays it, and
/// the next request tells the model its answer was cut.
#[tokio::test]
async fn a_cancelled_turns_partial_answer_is_kept() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let slow = match fake::openai_text("Partial words that keep coming slowly") {
        Reply::OpenAi { chunks, done, .. } => Reply::OpenAi {
            chunks,
            delay_ms: 400,
            done,
        },
        other => panic!("not an OpenAI stream: {other:?}"),
    };
    let fake = FakeProvider::start(vec![slow, fake::openai_text("Go on.")]).await;
    let cfg = config(home.path(), &fake, "", "");
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    let id = c
        .start_request("session/prompt", prompt(&sid, "tell me slowly"))
        .await;
    let first = c
        .wait_for(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    c.notify("session/cancel", json!({ "sessionId": sid }))
        .await;
    let r = c.wait_response(id).await;
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    let seen = format!(
        "{}{}",
        first["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap(),
        c.message_text()
    );
    c.close_stdin();
    let _ = tokio::time::timeout(harness::WAIT, c.child.wait()).await;

    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    c.backlog.clear();
    let r = c.load_session(&sid, project.path()).await;
    assert!(r.get("result").is_some(), "{r}");
    let replayed = c.message_text();
    assert!(
        replayed.starts_with(&seen),
        "the replay {replayed:?} lacks what was shown {seen:?}"
    );
    let r = c.request("session/prompt", prompt(&sid, "go on")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let messages = fake.requests()[1].body["messages"].clone();
    let assistant: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        assistant
            .iter()
            .any(|t| t.starts_with(&seen) && t.contains("[cancelled by the person]")),
        "{messages}"
    );
}

/// The session journals of a state directory have a total quota: a new
/// session past it removes the oldest journals (never the newest
/// `keep_newest`, never an open one), and `sessions prune` says what it
/// freed and keeps a session that another process has open.
#[tokio::test]
async fn session_journals_are_held_to_a_total_quota_oldest_first() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let cfg = config(
        home.path(),
        &fake,
        "",
        "[sessions]\nmax_total_bytes = 350000\nkeep_newest = 2\n",
    );
    let dir = home.path().join("state/passepartout/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    // Six old journals of 100 kB, the first the oldest.
    let old: Vec<String> = (0..6).map(|i| format!("20200101T00000{i}-1-1")).collect();
    let now = std::time::SystemTime::now();
    for (i, id) in old.iter().enumerate() {
        let path = dir.join(format!("{id}.jsonl"));
        std::fs::write(&path, "x".repeat(100_000)).unwrap();
        let age = std::time::Duration::from_secs(3600 * (10 - i as u64));
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(now - age)
            .unwrap();
    }
    let project = tempfile::tempdir().unwrap();
    let (client, sid) = Client::with_session(
        home.path(),
        &["--config", cfg.to_str().unwrap()],
        json!({}),
        project.path(),
    )
    .await;
    let exists = |id: &str| dir.join(format!("{id}.jsonl")).exists();
    // 600 kB over a 350 kB quota: the three oldest go.
    for id in &old[..3] {
        assert!(!exists(id), "{id} should have been removed");
    }
    for id in old[3..].iter().chain([&sid]) {
        assert!(exists(id), "{id} should have been kept");
    }

    // The open session is made the oldest of all; a prune with a quota of
    // nothing removes every other journal but keeps it, and says so.
    std::fs::File::options()
        .write(true)
        .open(dir.join(format!("{sid}.jsonl")))
        .unwrap()
        .set_modified(now - std::time::Duration::from_secs(3600 * 24))
        .unwrap();
    let tight = config(
        home.path(),
        &fake,
        "",
        "[sessions]\nmax_total_bytes = 1\nkeep_newest = 0\n",
    );
    let out = std::process::Command::new(harness::BIN)
        .args(["sessions", "--config", tight.to_str().unwrap(), "prune"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    for id in &old[3..] {
        assert!(!exists(id), "{id} should have been pruned: {said}");
        assert!(said.contains(&format!("removed {id}  97.7 KiB")), "{said}");
    }
    assert!(exists(&sid), "the open session was removed: {said}");
    assert!(said.contains("freed 293.0 KiB in 3 journal(s)"), "{said}");
    assert!(
        said.contains(&format!("1 open session(s) kept ({sid})")),
        "{said}"
    );
    drop(client);
}
