//! Issue 23's cost items through the real binary: a session opening in a
//! project does its transactions' one-time work in the background (the
//! store, the overlay probe, the first overlay mounted ahead, the id
//! counter), so the first action costs like the others. And the debug
//! line `scripts/peer-compare.sh` reads a tool call's bwrap arguments from.

use crate::harness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Client, Framing};
use serde_json::json;

/// The one checkpoint store under the daemon's state directory in `home`,
/// once it exists.
fn store_of(home: &Path) -> Option<PathBuf> {
    let root = home.join("state/passepartout/checkpoints");
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `session/new` alone — no prompt, no action — prepares the project's
/// transactions: its store is made, an overlay waits mounted in `txn/`,
/// the id counter is there. Before, all of it was
/// the first action's (10–70 ms on its path).
#[tokio::test]
async fn a_session_opening_in_a_project_warms_its_transactions_up() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("a.txt"), "a\n").unwrap();
    let mut client = Client::spawn(Framing::Ndjson, home.path(), &[]);
    client.initialize(json!({})).await;
    let _session = client.new_session(project.path()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut overlay, mut counter) = (false, false);
    while Instant::now() < deadline {
        if let Some(store) = store_of(home.path()) {
            overlay = entries(&store.join("txn"))
                .iter()
                .any(|n| n.starts_with("run-") && store.join("txn").join(n).join("upper").is_dir());
            counter = store.join("records/last-id").is_file();
            if overlay && counter {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        store_of(home.path()).is_some(),
        "no checkpoint store was made when the session opened"
    );
    assert!(
        overlay,
        "no overlay was mounted ahead when the session opened"
    );
    assert!(
        counter,
        "the id counter was not made when the session opened"
    );
    // Nothing was recorded: no action ran.
    let store = store_of(home.path()).unwrap();
    let records: Vec<String> = entries(&store.join("records"))
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert!(records.is_empty(), "{records:?}");
}

/// `passepartout run`'s debug log names each sandboxed run as one JSON
/// value (`sandbox argv`): the bwrap program, its arguments, the directory
/// and the overlay. `scripts/peer-compare.sh` times a bare bwrap with
/// exactly these; here they are read back and run by bare bwrap, which
/// prints what the tool call printed.
#[tokio::test]
async fn the_sandbox_argv_debug_line_parses_and_runs_as_a_bare_bwrap() {
    use crate::support::fake_provider::{self as fake, FakeProvider};
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "echo made by the call"),
        fake::openai_text("Done."),
    ])
    .await;
    let url = fake.openai_url();
    let out = tokio::process::Command::new(harness::BIN)
        .args(["run", "--provider-url", &url, "--mode", "auto", "run it"])
        .current_dir(project.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("PASSEPARTOUT_LOG", "passepartout=debug")
        .env_remove("PASSEPARTOUT_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The log file (stderr's lines carry no timestamps, the file's do).
    let log = std::fs::read_to_string(home.path().join("state/passepartout/logs/passepartout.log"))
        .unwrap_or_default();
    assert!(
        fake.last_tool_results()[0].contains("made by the call"),
        "{:?}",
        fake.last_tool_results()
    );
    let line = log
        .lines()
        .find_map(|l| l.split_once("sandbox argv argv=").map(|(_, v)| v))
        .unwrap_or_else(|| panic!("no sandbox argv line in the debug log:\n{log}"));
    let argv: serde_json::Value = serde_json::from_str(line).unwrap();
    let args: Vec<String> = serde_json::from_value(argv["args"].clone()).unwrap();
    let project_path = project.path().canonicalize().unwrap();
    assert!(args.iter().any(|a| a == "--unshare-all"), "{args:?}");
    assert!(
        args.iter().any(|a| a == "echo made by the call"),
        "{args:?}"
    );
    assert_eq!(
        Path::new(argv["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        project_path
    );
    assert_eq!(
        Path::new(argv["overlay"]["project"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        project_path,
        "{argv}"
    );
    assert!(argv["overlay"]["upper"].is_string(), "{argv}");
    // What the run's own directories were (the session's /tmp, the view of
    // /etc) went with it: made again, empty.
    let mut made = Vec::new();
    for pair in args.windows(2) {
        if matches!(pair[0].as_str(), "--bind" | "--ro-bind") && !Path::new(&pair[1]).exists() {
            std::fs::create_dir_all(&pair[1]).unwrap();
            made.push(PathBuf::from(&pair[1]));
        }
    }
    let bare = std::process::Command::new(argv["bwrap"].as_str().unwrap())
        .args(&args)
        .current_dir(project.path())
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    for dir in &made {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(
        bare.status.success(),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&bare.stdout), "made by the call\n");
}
