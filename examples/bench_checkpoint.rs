//! Checkpoint figures: what observing one action costs — the snapshot
//! before, the snapshot after and the recorded effect — on working trees of
//! 100, 10,000 and 100,000 small files with one file changed per action.
//! Each size runs twice: watched (inotify names the directories that
//! changed, the default) and walked (`[checkpoints] watch = false`: every
//! snapshot walks the whole tree). Also printed: the snapshot of a tree in
//! which nothing changed since the last one (the before-snapshot of the next
//! action). Run with `cargo run --release --example bench_checkpoint`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use passepartout::checkpoint::{CheckpointConfig, Origin, Project};

fn build_tree(root: &Path, files: usize) {
    // 100 files per directory, like a source tree.
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).expect("write");
    }
    std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Per action p50 and p95, and the unchanged-snapshot p50.
fn measure(files: usize, rounds: usize, watch: bool) -> (Duration, [Duration; 3]) {
    let origin = Origin {
        session_id: "bench".into(),
        tool_call_id: "call".into(),
        tool: "shell".into(),
        turn: None,
    };
    let state = tempfile::tempdir().expect("tempdir");
    let tree = tempfile::tempdir().expect("tempdir");
    build_tree(tree.path(), files);
    // A project at rest: its files are older than the racy-git margin
    // (files touched in the last 2 s are re-hashed at every snapshot).
    std::thread::sleep(Duration::from_millis(2100));
    let config = CheckpointConfig {
        watch,
        ..CheckpointConfig::default()
    };
    let project = Project::open(state.path(), tree.path(), &config).expect("open the store");
    let start = Instant::now();
    project.store.snapshot().expect("first snapshot");
    let first = start.elapsed();
    let mut times = Vec::with_capacity(rounds);
    let mut unchanged = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let start = Instant::now();
        let before = project.store.snapshot().expect("before");
        let mid = start.elapsed();
        unchanged.push(mid);
        // The "action": one file changes.
        std::fs::write(tree.path().join("d0000/f0.txt"), format!("changed {r}\n")).expect("write");
        let start = Instant::now();
        let after = project.store.snapshot().expect("after");
        let cp = project.record(&origin, &before, &after).expect("record");
        assert!(cp.is_some_and(|c| c.effect.changes.len() == 1));
        times.push(mid + start.elapsed());
    }
    times.sort();
    unchanged.sort();
    (
        first,
        [
            percentile(&times, 0.5),
            percentile(&times, 0.95),
            percentile(&unchanged, 0.5),
        ],
    )
}

fn main() {
    println!(
        "per action: before + after + effect, 1 file changed; watched = inotify says which \
         directories changed ([checkpoints] watch = true, the default); walked = every \
         snapshot walks the whole tree (watch = false)"
    );
    println!(
        "  files  first snapshot   watched p50   watched p95   unchanged p50   walked p50   walked p95"
    );
    for (files, rounds) in [(100usize, 50usize), (10_000, 30), (100_000, 10)] {
        let (first, [w50, w95, u50]) = measure(files, rounds, true);
        let (_, [k50, k95, _]) = measure(files, rounds, false);
        println!(
            "{files:>7}  {:>14}   {:>11}   {:>11}   {:>13}   {:>10}   {:>10}",
            ms(first),
            ms(w50),
            ms(w95),
            ms(u50),
            ms(k50),
            ms(k95)
        );
    }
}
