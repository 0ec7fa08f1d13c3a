//! Snapshots of what a person reads, where wording regressions live
//! (issue 40): `history` and the diff an ACP client is shown, through the
//! real binary. The Org flight plan's snapshots are in
//! `src/plans/snapshots/`; `skills check` is compared with the `.expected`
//! files of `tests/skills/`. Only what changes from run to run (temporary
//! paths, times, session and turn ids) is replaced before the comparison.

use crate::harness;
use crate::suite::changeset_consequences::{project, Turn};

use std::path::Path;

use serde_json::{json, Value};

/// `text` with `dir` (and its canonical form) written `<project>`, and every
/// word shaped like an RFC 3339 time, a session id or a turn id written
/// `<time>`, `<session>`, `<turn>`.
fn steady(text: &str, dir: &Path) -> String {
    let mut text = text.to_string();
    if let Ok(real) = dir.canonicalize() {
        text = text.replace(&real.display().to_string(), "<project>");
    }
    text = text.replace(&dir.display().to_string(), "<project>");
    text.split_inclusive([' ', '\n', '"', '(', ')'])
        .map(|word| {
            let (core, end) =
                word.split_at(word.trim_end_matches([' ', '\n', '"', '(', ')']).len());
            let digits = core.bytes().filter(u8::is_ascii_digit).count();
            let time =
                digits >= 12 && core.contains(':') && core.contains('-') && core.contains('T');
            let session = digits >= 14 && core.contains('T') && !core.contains(':');
            let turn = core.len() > 10
                && core.starts_with('t')
                && core[1..].bytes().all(|b| b.is_ascii_digit());
            if time {
                format!("<time>{end}")
            } else if session {
                format!("<session>{end}")
            } else if turn {
                format!("<turn>{end}")
            } else {
                word.to_string()
            }
        })
        .collect()
}

#[tokio::test]
async fn history_reads_as_it_did() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let turn = Turn::run(
        p,
        &[
            "printf 'a\\nb\\n' > a.txt",
            "mkdir -p docs && printf '# notes\\n' > docs/notes.md",
            "chmod 0700 a.txt",
            "true",
            "rm run.sh",
        ],
        "allow_once",
    )
    .await;
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok, "{history}");
    insta::assert_snapshot!(steady(&history, p));
}

#[tokio::test]
async fn the_diff_a_client_is_shown_reads_as_it_did() {
    let project = project();
    let p = project.path();
    let edit = json!({"path": "a.txt", "content": "a\nb changed\n"}).to_string();
    let home = tempfile::tempdir().expect("home");
    let fake = crate::support::fake_provider::FakeProvider::start(vec![
        crate::support::fake_provider::openai_tool_calls(&[("w1", "write_file", &edit)]),
        crate::support::fake_provider::openai_text("done"),
    ])
    .await;
    let (mut c, sid) = harness::Client::with_fake(home.path(), &fake, p).await;
    let (m, _) = c.prompt_allowing(&sid, "edit").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    let done: Vec<Value> = c
        .backlog
        .iter()
        .map(|n| n["params"]["update"].clone())
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .collect();
    assert_eq!(done.len(), 1, "{done:?}");
    let shown = serde_json::to_string_pretty(&json!({
        "content": done[0]["content"],
        "locations": done[0]["locations"],
        "rawOutput": done[0]["rawOutput"],
    }))
    .expect("json");
    insta::assert_snapshot!(steady(&shown, p));
}
