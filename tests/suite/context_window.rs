//! The context window is a bound (issue 39): a prompt that cannot fit is
//! refused before anything is sent (or cut with a note, by config), and
//! `run` says when it compacts — through the real binary and a fake
//! provider on 127.0.0.1 that records every request it got.

use crate::harness;
use crate::support;

use harness::prompt;
use serde_json::json;
use support::fake_provider::FakeProvider;

// The sessions suite's helpers: one provider on the fake, the daemon with
// that config, a request's size as the daemon estimates it.
use super::sessions::{body_tokens, config, config_text, fixed_request_tokens, spawn, unpaced};

#[tokio::test]
async fn a_prompt_larger_than_the_window_is_refused_before_anything_is_sent() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let base = fixed_request_tokens(home.path(), project.path()).await;
    let window = base + 2_000;
    let fake = FakeProvider::start(vec![unpaced("small answer")]).await;
    let cfg = config(
        home.path(),
        &fake,
        &format!("context_window = {window}"),
        "",
    );
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;

    let huge = "all work and no play ".repeat(50_000); // ~1 MB
    let r = c.request("session/prompt", prompt(&sid, &huge)).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(r["error"]["data"]["kind"], "over_window", "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{window}-token context window")),
        "{message}"
    );
    assert!(message.contains("over_window = \"cut\""), "{message}");
    assert!(fake.requests().is_empty(), "a request was sent");

    // The refused prompt is not in the history: the next turn fits.
    let r = c.request("session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert!(body_tokens(&reqs[0].body) < window);
    assert!(!reqs[0].body.to_string().contains("all work and no play"));
}

#[tokio::test]
async fn with_over_window_cut_a_prompt_is_cut_to_the_window_with_a_note() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let base = fixed_request_tokens(home.path(), project.path()).await;
    let window = base + 2_000;
    let fake = FakeProvider::start(vec![unpaced("read it")]).await;
    let cfg = config(
        home.path(),
        &fake,
        &format!("context_window = {window}"),
        "[context]\nover_window = \"cut\"",
    );
    let mut c = spawn(home.path(), &cfg);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;

    // Multi-byte characters, so that the cut must find a boundary.
    let huge = format!("START {}", "é".repeat(400_000));
    let r = c.request("session/prompt", prompt(&sid, &huge)).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let body = &reqs[0].body;
    assert!(
        body_tokens(body) <= window,
        "{} tokens sent for a {window}-token window",
        body_tokens(body)
    );
    let text = body.to_string();
    assert!(text.contains("START é"), "the beginning is kept");
    assert!(
        text.contains(&format!(
            "passepartout cut this prompt to fit the {window}-token context window"
        )),
        "no note in the request"
    );
}

#[tokio::test]
async fn run_prints_one_line_when_it_compacts() {
    let project = tempfile::tempdir().unwrap();
    let measure = tempfile::tempdir().unwrap();
    let base = fixed_request_tokens(measure.path(), project.path()).await;
    let window = base + 3_000;
    let answer = "lorem ipsum dolor sit amet ".repeat(60); // ~1,600 bytes
    let fake = FakeProvider::start((0..40).map(|_| unpaced(&answer)).collect()).await;
    let home = harness::home_with_config(&config_text(
        &fake,
        &format!("context_window = {window}"),
        "",
    ));
    // `run` as the person types it, while this test's runtime serves the
    // fake provider (hence tokio's process, not a blocking one).
    let run = |args: Vec<String>| {
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.arg("run")
            .args(args)
            .current_dir(project.path())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env_remove("PASSEPARTOUT_CONFIG")
            .stdin(std::process::Stdio::null());
        async move {
            let out = cmd.output().await.unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            (out.status.code().unwrap_or(-1), text)
        }
    };
    let (code, out) = run(vec!["question 0".into()]).await;
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("compacted"), "{out}");
    let mut lines = Vec::new();
    for i in 1..16 {
        let (code, out) = run(vec!["--continue".into(), format!("question {i}")]).await;
        assert_eq!(code, 0, "turn {i}: {out}");
        lines.extend(
            out.lines()
                .filter(|l| l.contains("compacted the conversation"))
                .map(str::to_string),
        );
        if !lines.is_empty() {
            break;
        }
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("(window {window};")),
        "{}",
        lines[0]
    );
    for (n, r) in fake.requests().iter().enumerate() {
        assert!(
            body_tokens(&r.body) < window,
            "request {n} is {} tokens for a {window}-token window",
            body_tokens(&r.body)
        );
    }
}
