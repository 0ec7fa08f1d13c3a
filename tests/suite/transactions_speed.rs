//! Issue 23's cost items through the real binary: a session opening in a
//! project does its transactions' one-time work in the background (the
//! store, the overlay probe, the first overlay mounted ahead, the spare
//! files, the id counter), so the first action costs like the others.

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
/// the spare files and the id counter are there. Before, all of it was
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
    let pid = client.child.id().expect("the daemon runs").to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut overlay, mut spares, mut counter) = (false, 0, false);
    while Instant::now() < deadline {
        if let Some(store) = store_of(home.path()) {
            overlay = entries(&store.join("txn"))
                .iter()
                .any(|n| n.starts_with("run-") && store.join("txn").join(n).join("upper").is_dir());
            spares = entries(&store.join("spare").join(&pid)).len();
            counter = store.join("records/last-id").is_file();
            if overlay && spares > 0 && counter {
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
        spares > 0,
        "no spare files were made when the session opened"
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
