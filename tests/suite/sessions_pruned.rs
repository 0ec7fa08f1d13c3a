//! The person is told when the session journals' quota removes old
//! sessions: `_passepartout/sessions/pruned`, once per removal, to a client
//! that takes the extension notifications (the Emacs package shows it in
//! the echo area); a plain ACP client gets nothing it cannot read, and the
//! log keeps the warning either way.

use crate::harness;
use crate::support::fake_provider::FakeProvider;

use std::path::Path;

use harness::{Client, Framing};
use serde_json::{json, Value};

/// A config with a quota of one journal (none kept for being new).
fn config(home: &Path, fake: &FakeProvider) -> std::path::PathBuf {
    let path = home.join("test-config.toml");
    std::fs::write(
        &path,
        format!(
            "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nmax_retries = 0\n\n[sessions]\nmax_journals = 1\nkeep_newest = 0\n",
            fake.openai_url()
        ),
    )
    .unwrap();
    path
}

/// End a daemon the way an editor does (its input closes) and wait for it:
/// its journals' locks are released and its log is written.
async fn quit(mut c: Client) {
    c.close_stdin();
    tokio::time::timeout(harness::WAIT, c.child.wait())
        .await
        .expect("the daemon exits when its input closes")
        .unwrap();
}

fn pruned_notices(c: &Client) -> Vec<Value> {
    c.backlog
        .iter()
        .filter(|m| m["method"] == "_passepartout/sessions/pruned")
        .map(|m| m["params"].clone())
        .collect()
}

#[tokio::test]
async fn a_session_past_the_journal_quota_tells_the_client_what_it_removed() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let cfg = config(home.path(), &fake);
    let args = ["--config", cfg.to_str().unwrap()];
    let dir = home.path().join("state/passepartout/sessions");

    // A first daemon leaves one session behind.
    let (first, old) = Client::with_session(home.path(), &args, json!({}), project.path()).await;
    assert!(pruned_notices(&first).is_empty(), "nothing removed yet");
    quit(first).await;
    let old_bytes = std::fs::metadata(dir.join(format!("{old}.jsonl")))
        .unwrap()
        .len();

    // The next daemon's new session passes the quota: the old journal goes,
    // and the client is told which, with a line for the person.
    let (mut c, new) = Client::with_session(home.path(), &args, json!({}), project.path()).await;
    assert!(!dir.join(format!("{old}.jsonl")).exists());
    let notices = pruned_notices(&c);
    assert_eq!(notices.len(), 1, "{:?}", c.backlog);
    let n = &notices[0];
    assert_eq!(n["writer"], "session", "{n}");
    assert_eq!(n["path"], dir.display().to_string(), "{n}");
    assert_eq!(
        n["removed"],
        json!([{ "sessionId": old, "bytes": old_bytes }]),
        "{n}"
    );
    assert_eq!(n["freed"], old_bytes, "{n}");
    assert_eq!(n["kept"], 1, "{n}");
    let message = n["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("removed the oldest: {old}")),
        "{message}"
    );
    assert!(
        message
            .contains("[sessions] max_total_bytes = 536870912, max_journals = 1, keep_newest = 0"),
        "{message}"
    );

    // Once: a second session of this daemon is past the quota too, but both
    // journals left are open, so nothing is removed and nothing is said.
    let before = c.backlog.len();
    let again = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert!(again["result"]["sessionId"].is_string(), "{again}");
    assert_eq!(pruned_notices(&c).len(), 1, "{:?}", &c.backlog[before..]);
    assert!(dir.join(format!("{new}.jsonl")).exists());
    let again = again["result"]["sessionId"].as_str().unwrap().to_string();
    quit(c).await;
    // Both journals are written again after their creation (the sessions'
    // first updates are journaled too), in no fixed order between the two:
    // which one was written last would decide which is the oldest (CI once
    // saw `again` removed). Here `new` is, by ten seconds.
    let now = std::time::SystemTime::now();
    for (id, at) in [
        (&new, now - std::time::Duration::from_secs(10)),
        (&again, now),
    ] {
        std::fs::File::options()
            .append(true)
            .open(dir.join(format!("{id}.jsonl")))
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    // A plain ACP client (no `_meta`) is not sent the extension
    // notification; the log says what was removed.
    let mut plain = Client::spawn(Framing::Ndjson, home.path(), &args);
    let r = plain
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": {} }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = plain
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert!(r["result"]["sessionId"].is_string(), "{r}");
    assert!(!dir.join(format!("{new}.jsonl")).exists(), "{new} removed");
    assert!(
        plain.backlog.iter().all(|m| !m["method"]
            .as_str()
            .unwrap_or("")
            .starts_with("_passepartout/")),
        "{:?}",
        plain.backlog
    );
    quit(plain).await;
    let log = std::fs::read_to_string(home.path().join("state/passepartout/logs/passepartout.log"))
        .unwrap_or_default();
    assert!(log.contains(&format!("removed the oldest: {new}")), "{log}");
}
