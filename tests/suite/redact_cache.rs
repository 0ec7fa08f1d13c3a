//! Output redaction remembers between tool calls (issue 20): which files
//! are the project's secret files comes from the sandbox surface's walk
//! under its inotify watch, and what they hold is remembered per file by
//! its stamp. Through the real binary, the fake provider and a person who
//! approves: a secret file the person writes between two calls, at the
//! top or deep in the tree (deeper than the old scan's three levels), or
//! that the previous sandboxed command made, is redacted at the next
//! call; so is a value changed in place with the same size and the same
//! modification time.

use crate::harness;
use crate::support;

use std::path::Path;
use std::time::Duration;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider};

/// Secret values, all of one length (the in-place change keeps the size).
const TOP_VALUE: &str = "top-level-secret-Qw81Zx";
const DEEP_VALUE: &str = "deep-tree-secret-Lm02Vb";
const CHANGED_VALUE: &str = "changed-in-place-Rt93Nc";
const MADE_VALUE: &str = "made-by-sandbox-Pk52Hd";

fn home(fake: &FakeProvider) -> tempfile::TempDir {
    harness::home_with_config(&format!(
        "[[providers]]\nname = \"fake\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\n",
        fake.openai_url()
    ))
}

/// Give `path` the modification time of `reference`, to the nanosecond.
fn same_mtime_as(path: &Path, reference: &Path) {
    let status = std::process::Command::new("touch")
        .arg("-m")
        .arg("-r")
        .arg(reference)
        .arg(path)
        .status()
        .expect("touch runs");
    assert!(status.success());
}

/// The tool result of request `n` with no line of what `cmd` prints
/// directly, and with `hits` base64 redactions.
fn assert_redacted(fake: &FakeProvider, n: usize, dir: &Path, cmd: &str, hits: usize) {
    let result = fake
        .tool_results(n)
        .pop()
        .unwrap_or_else(|| panic!("no tool message in request {n}"));
    let raw = harness::raw_output(dir, cmd);
    assert!(raw.len() > 20, "`{cmd}` prints the secret: {raw}");
    for line in raw.lines().filter(|l| l.trim().len() >= 16) {
        assert!(
            !result.contains(line),
            "`{cmd}`: the model reads `{line}`: {result}"
        );
    }
    assert_eq!(
        result.matches(", base64-encoded]").count(),
        hits,
        "`{cmd}`: {result}"
    );
}

#[tokio::test]
async fn a_secret_file_written_between_two_calls_is_redacted_at_the_next() {
    let made =
        format!("mkdir -p sub && printf 'MADE_TOKEN={MADE_VALUE}\\n' > sub/.env.local; echo made");
    let all = "base64 -w0 .env; echo; base64 -w0 a/b/c/d/e/.env; echo; base64 -w0 sub/.env.local";
    let top = "base64 -w0 .env";
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", &made),
        fake::openai_text("ok"),
        fake::shell_call("c2", all),
        fake::openai_text("ok"),
        fake::shell_call("c3", top),
        fake::openai_text("ok"),
    ])
    .await;
    let home = home(&fake);
    let project = tempfile::tempdir().expect("tempdir");
    let p = project.path();
    std::fs::create_dir_all(p.join("src")).expect("mkdir");
    std::fs::write(p.join("src/main.rs"), "fn main() {}\n").expect("write");
    let (mut c, sid) = Client::with_session(home.path(), &[], json!({}), p).await;

    // Call 1 walks the project (and watches it), and the sandboxed command
    // makes a secret file.
    let (m, _) = c.prompt_allowing(&sid, "go").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");

    // The person writes a secret file at the top and one five levels down.
    std::fs::write(p.join(".env"), format!("API_TOKEN={TOP_VALUE}\n")).expect("write");
    std::fs::create_dir_all(p.join("a/b/c/d/e")).expect("mkdir");
    std::fs::write(
        p.join("a/b/c/d/e/.env"),
        format!("DEEP_TOKEN={DEEP_VALUE}\n"),
    )
    .expect("write");
    // Old enough for the read at call 2 to be remembered.
    std::thread::sleep(Duration::from_millis(1200));
    let stamps = tempfile::tempdir().expect("tempdir");
    let before = stamps.path().join("env-before");
    std::fs::copy(p.join(".env"), &before).expect("copy");
    same_mtime_as(&before, &p.join(".env"));

    let (m, _) = c.prompt_allowing(&sid, "go").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    assert_redacted(&fake, 3, p, all, 3);

    // The value changed in place: same size, the same modification time.
    std::fs::write(p.join(".env"), format!("API_TOKEN={CHANGED_VALUE}\n")).expect("write");
    same_mtime_as(&p.join(".env"), &before);
    let (old, new) = (
        std::fs::metadata(&before).expect("stat"),
        std::fs::metadata(p.join(".env")).expect("stat"),
    );
    assert_eq!(
        (old.len(), old.modified().expect("mtime")),
        (new.len(), new.modified().expect("mtime"))
    );
    std::thread::sleep(Duration::from_millis(1200));
    let (m, _) = c.prompt_allowing(&sid, "go").await;
    assert_eq!(m["result"]["stopReason"], "end_turn", "{m}");
    assert_redacted(&fake, 5, p, top, 1);
}
