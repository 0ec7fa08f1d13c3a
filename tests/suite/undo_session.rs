//! Issue 36, "undo is predictable": `_passepartout/undo` without an id,
//! from a session, takes that session's newest change (never another
//! session's), names it, and refuses plainly when the session has none.
//! Through the real binary, real bubblewrap and the fake provider.

use crate::harness;
use crate::support;

use harness::Client;
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

fn shell(call: &str, command: &str) -> fake::Reply {
    fake::openai_tool_calls(&[(call, "shell", &json!({ "command": command }).to_string())])
}

async fn undo(client: &mut Client, params: Value) -> Value {
    client.request("_passepartout/undo", params).await
}

#[tokio::test]
async fn undo_without_an_id_takes_the_sessions_own_newest_change() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    harness::git(p, &["init", "-q"]);
    let fake = FakeProvider::start(vec![
        shell("call_a", "printf 'from A\\n' > a.txt"),
        fake::openai_text("done"),
        shell("call_b", "printf 'from B\\n' > b.txt"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, a) = Client::with_fake(home.path(), &fake, p).await;
    let b = client.new_session(p).await;
    let c = client.new_session(p).await;
    let (done, _) = client.prompt_allowing(&a, "write a.txt").await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let (done, _) = client.prompt_allowing(&b, "write b.txt").await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(
        std::fs::read_to_string(p.join("a.txt")).unwrap(),
        "from A\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "from B\n"
    );

    // A session with no change of its own: refused, naming the project's
    // newest change, and nothing is undone (no fallback onto B's).
    let r = undo(&mut client, json!({ "cwd": p, "sessionId": c })).await;
    let why = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(why.contains("this session has no change to undo"), "{why}");
    assert!(why.contains("c2") && why.contains(&b), "{why}");
    assert!(p.join("a.txt").exists() && p.join("b.txt").exists());

    // A's undo takes A's change although B's is newer, and names it.
    let r = undo(&mut client, json!({ "cwd": p, "sessionId": a })).await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(r["result"]["tool"], "shell", "{r}");
    assert!(r["result"]["createdAt"].is_string(), "{r}");
    assert!(!p.join("a.txt").exists(), "A's a.txt is undone");
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "from B\n"
    );

    // The undo is A's record but never a target: A has nothing left.
    let r = undo(&mut client, json!({ "cwd": p, "sessionId": a })).await;
    let why = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(why.contains("this session has no change to undo"), "{why}");
    assert!(why.contains("c2"), "{why}");
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "from B\n"
    );
    assert!(!p.join("a.txt").exists());

    // The terminal's `undo --session`: the same choice and the same refusal.
    let out = harness::cli_output(home.path(), p, &["undo", "--session", &c]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("this session has no change to undo"),
        "{said}"
    );
    assert!(p.join("b.txt").exists());
    let out = harness::cli_output(home.path(), p, &["undo", "--session", &b]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("undid c2 (shell, "), "{said}");
    assert!(!p.join("b.txt").exists());
}

/// `undo --turn last` from a session takes that session's last turn that
/// changed the project, never another session's newer one; a session with
/// none is refused and nothing moves. Through `_passepartout/undo` and the
/// terminal's `undo --turn --session`.
#[tokio::test]
async fn undo_turn_last_takes_the_sessions_own_last_turn() {
    assert!(harness::bwrap_available(), "this test needs bubblewrap");
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    harness::git(p, &["init", "-q"]);
    let fake = FakeProvider::start(vec![
        shell("call_a1", "printf 'A1\\n' > a1.txt"),
        shell("call_a2", "printf 'A2\\n' > a2.txt"),
        fake::openai_text("done"),
        shell("call_b", "printf 'B\\n' > b.txt"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, a) = Client::with_fake(home.path(), &fake, p).await;
    let b = client.new_session(p).await;
    let c = client.new_session(p).await;
    let (done, _) = client.prompt_allowing(&a, "write two files").await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let (done, _) = client.prompt_allowing(&b, "write one").await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");

    let r = undo(
        &mut client,
        json!({ "cwd": p, "sessionId": c, "turn": "last" }),
    )
    .await;
    let why = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        why.contains("this session has no turn left to undo"),
        "{why}"
    );
    assert!(p.join("a1.txt").exists() && p.join("b.txt").exists());

    // A's last turn, both of its changes, although B's turn is newer.
    let r = undo(
        &mut client,
        json!({ "cwd": p, "sessionId": a, "turn": "last" }),
    )
    .await;
    assert_eq!(r["result"]["undone"], "c2,c1", "{r}");
    assert!(!p.join("a1.txt").exists() && !p.join("a2.txt").exists());
    assert_eq!(std::fs::read_to_string(p.join("b.txt")).unwrap(), "B\n");

    // The terminal: the same choice by `--session`.
    let out = harness::cli_output(home.path(), p, &["undo", "--turn", "--session", &a]);
    assert!(!out.status.success(), "A has no turn left");
    assert!(p.join("b.txt").exists());
    let out = harness::cli_output(home.path(), p, &["undo", "--turn", "last", "--session", &b]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("(c3)"), "{said}");
    assert!(!p.join("b.txt").exists());
}
