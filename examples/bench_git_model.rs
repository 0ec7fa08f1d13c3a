//! One git model or two (issue 40): the checkpoint store writes its blobs
//! and trees from Rust (`checkpoint::scan`, with its own stat cache) beside
//! the git CLI it uses for everything else. This bench times both ways of
//! the two jobs that run per tool call, alternating, on working trees of
//! 100, 10,000 and 100,000 small files with one file changed per round:
//!
//! - **transaction** (the default, an action run in an overlay): the
//!   changed file's blob and the two one-entry partial trees (before,
//!   after). Rust: `scan::write_object` + `scan::write_trees` twice. git:
//!   `git hash-object -w --stdin` + `git mktree --batch` (two processes).
//! - **observed snapshot** (no overlay): the whole tree recorded after the
//!   change. Rust: `store.snapshot()` (its stat cache, inotify on, the
//!   default). git: a private `GIT_INDEX_FILE` (git's own stat cache) with
//!   `git add -A` + `git write-tree`. The git figure is a lower bound: it
//!   leaves out the store's size cap on untracked files and its precious
//!   (ignored but recorded) files, each one more process.
//!
//! Medians of `BENCH_ROUNDS` rounds (default 30; 10 for 100,000 files).
//! `BENCH_SIZES=100,10000` measures only those sizes.
//! Run with `cargo run --release --example bench_git_model`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use passepartout::checkpoint::scan::{self, FileState};
use passepartout::checkpoint::{CheckpointConfig, Project};

#[path = "support/mod.rs"]
mod support;

use support::{build_tree, median};

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `git` on the bare store `git_dir` for the work tree `tree`, without the
/// machine's configuration, with `index` as its index when given.
fn git(git_dir: &Path, tree: &Path, index: Option<&Path>) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(git_dir)
        .arg("--work-tree")
        .arg(tree)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stderr(Stdio::inherit());
    if let Some(index) = index {
        cmd.env("GIT_INDEX_FILE", index);
    }
    cmd
}

fn run(mut cmd: Command, input: &[u8]) -> Vec<u8> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{cmd:?}");
    out.stdout
}

fn one_entry_tree(path: &str, oid: [u8; 20]) -> BTreeMap<String, FileState> {
    let mut files = BTreeMap::new();
    files.insert(
        path.to_string(),
        FileState {
            mode: scan::MODE_FILE,
            perm: 0o644,
            oid,
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
            precious: false,
        },
    );
    files
}

struct Row {
    rust_txn: Duration,
    git_txn: Duration,
    rust_snapshot: Duration,
    git_snapshot: Duration,
}

fn measure(files: usize, rounds: usize) -> Row {
    let state = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    build_tree(tree.path(), files);
    // Files older than the racy-git margin, as in a project at rest.
    std::thread::sleep(Duration::from_millis(2100));
    let project = Project::open(state.path(), tree.path(), &CheckpointConfig::default()).unwrap();
    let git_dir = project.store.dir().join("git");
    let objects = project.store.objects();
    let index = state.path().join("bench-index");
    // Both stat caches filled first.
    project.store.snapshot().unwrap();
    let mut add = git(&git_dir, tree.path(), Some(&index));
    add.args(["add", "-A"]);
    run(add, b"");

    let changed = "d0000/f0.txt";
    let (mut rust_txn, mut git_txn) = (Vec::new(), Vec::new());
    let (mut rust_snapshot, mut git_snapshot) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let before = format!("before {r}\n");
        let after = format!("after {r}\n");
        std::fs::write(tree.path().join(changed), &after).unwrap();

        // The transaction's writes, Rust then git (the file's old blob is
        // in the store already).
        let old = scan::write_object(&objects, "blob", before.as_bytes()).unwrap();
        let start = Instant::now();
        let new = scan::write_object(&objects, "blob", after.as_bytes()).unwrap();
        scan::write_trees(&objects, &one_entry_tree(changed, old)).unwrap();
        scan::write_trees(&objects, &one_entry_tree(changed, new)).unwrap();
        rust_txn.push(start.elapsed());
        let start = Instant::now();
        let mut hash = git(&git_dir, tree.path(), None);
        hash.args(["hash-object", "-w", "--stdin-paths", "--no-filters"]);
        let blobs = run(
            hash,
            format!("{}\n", tree.path().join(changed).display()).as_bytes(),
        );
        let new_hex = String::from_utf8(blobs).unwrap();
        let old_hex = scan::hex(&old);
        let mut mktree = git(&git_dir, tree.path(), None);
        mktree.args(["mktree", "--batch"]);
        let batch = format!(
            "100644 blob {old_hex}\tf0.txt\n\n100644 blob {}\tf0.txt\n",
            new_hex.trim()
        );
        run(mktree, batch.as_bytes());
        git_txn.push(start.elapsed());

        // The whole tree recorded, Rust then git.
        let start = Instant::now();
        project.store.snapshot().unwrap();
        rust_snapshot.push(start.elapsed());
        let start = Instant::now();
        let mut add = git(&git_dir, tree.path(), Some(&index));
        add.args(["add", "-A"]);
        run(add, b"");
        let mut write_tree = git(&git_dir, tree.path(), Some(&index));
        write_tree.arg("write-tree");
        run(write_tree, b"");
        git_snapshot.push(start.elapsed());
        // Apart from the next round's change by more than the coarse
        // clock's tick, so every change is seen by both stat caches.
        std::thread::sleep(Duration::from_millis(20));
    }
    Row {
        rust_txn: median(rust_txn),
        git_txn: median(git_txn),
        rust_snapshot: median(rust_snapshot),
        git_snapshot: median(git_snapshot),
    }
}

fn main() {
    let only: Option<Vec<usize>> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let rounds: Option<usize> = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok());
    println!("one changed file per round, medians; load {}", load());
    println!(
        "{:>8} | {:>14} | {:>14} | {:>16} | {:>16}",
        "files", "txn: Rust", "txn: git CLI", "snapshot: Rust", "snapshot: git CLI"
    );
    for (files, default_rounds) in [(100, 30), (10_000, 30), (100_000, 10)] {
        if only.as_ref().is_some_and(|o| !o.contains(&files)) {
            continue;
        }
        let row = measure(files, rounds.unwrap_or(default_rounds));
        println!(
            "{:>8} | {:>14} | {:>14} | {:>16} | {:>16}",
            files,
            ms(row.rust_txn),
            ms(row.git_txn),
            ms(row.rust_snapshot),
            ms(row.git_snapshot)
        );
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').next().unwrap_or("?").to_string())
        .unwrap_or_else(|_| "?".into())
}
