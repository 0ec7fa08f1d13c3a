//! Transaction figures (issue 23): what running one action into an overlay
//! costs beyond the command itself — the overlay taken (mounted ahead in a
//! user and mount namespace the command joins), the changeset read and
//! recorded, and applied to the project — on working trees of 100, 10,000
//! and 100,000 small files with one file changed per action. Also printed:
//! the first action's cost (no snapshot: nothing walks the tree), cold (a
//! fresh store, nothing prepared) and warmed up (`txn::warm_up`, which the
//! daemon starts when a session opens in a project, `BENCH_WARM_MS` before).
//!
//! The overlay's own cost is the time of a trivial command started in the
//! overlay minus the same command started without one, after the same
//! pause, in the same round: the median of the rounds' differences. Between two actions the bench pauses
//! `BENCH_PAUSE_MS` (default 50 ms, far less than a model's reply); 0 runs
//! them back to back. `BENCH_SIZES=100,10000` measures only those sizes.
//! Run with `cargo run --release --example bench_transaction`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use passepartout::checkpoint::{txn, CheckpointConfig, Origin};
use passepartout::sandbox::runner::{run_limited_in, RunLimits};
use passepartout::sandbox::ResourceLimits;
use tokio_util::sync::CancellationToken;

#[path = "support/mod.rs"]
mod support;

use support::{build_tree, median};

/// The median of the rounds' differences (a command in the overlay minus
/// the same command without, run in the same round): each pair shares the
/// machine's state of the moment, so this moves less with load than the
/// difference of the two medians. Never below zero.
fn paired_difference(with: &[Duration], without: &[Duration]) -> Duration {
    let mut diffs: Vec<f64> = with
        .iter()
        .zip(without)
        .map(|(w, o)| w.as_secs_f64() - o.as_secs_f64())
        .collect();
    diffs.sort_by(f64::total_cmp);
    Duration::from_secs_f64(diffs[diffs.len() / 2].max(0.0))
}

fn p95(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * 0.95).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn sh(script: &str, overlay: Option<&passepartout::sandbox::overlay::OverlayMount>) {
    let args = vec!["-c".to_string(), script.to_string()];
    let out = run_limited_in(
        "/bin/sh",
        &args,
        Path::new("/"),
        None,
        &RunLimits::default(),
        &ResourceLimits::none(),
        overlay,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(out.success(), "{}", out.render());
}

/// The pause between two actions (`BENCH_PAUSE_MS`, default 50; 0 runs
/// them back to back, the background work competing with the next action).
fn pause() -> Duration {
    let ms = std::env::var("BENCH_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    Duration::from_millis(ms)
}

struct Figures {
    first: Duration,
    bookkeeping: Vec<Duration>,
    overlay: Duration,
}

/// How long a warmed-up bench waits between the session's warm-up
/// (`txn::warm_up`, what the daemon starts at `session/new`) and the first
/// action (`BENCH_WARM_MS`, default 300: opening a session and a model's
/// first reply take longer).
fn warm_wait() -> Duration {
    let ms = std::env::var("BENCH_WARM_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    Duration::from_millis(ms)
}

/// Who the bench's actions are recorded as.
fn bench_origin() -> Origin {
    Origin {
        session_id: "bench".into(),
        tool_call_id: "call".into(),
        tool: "shell".into(),
        turn: None,
    }
}

/// A fresh state directory and a project tree of `files` files.
fn state_and_tree(files: usize) -> (tempfile::TempDir, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let tree = tempfile::tempdir().unwrap();
    build_tree(tree.path(), files);
    (state, tree)
}

/// `warm`: the project is warmed up as a session opening in it does;
/// else the first action does that work itself (cold).
async fn measure(files: usize, rounds: usize, warm: bool) -> Figures {
    let origin = bench_origin();
    let (state, tree) = state_and_tree(files);
    // A file changed within the kernel's coarse clock tick before an action
    // starts counts as the person's (a conflict, never overwritten): let the
    // tree's own writes age past one tick.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cfg = CheckpointConfig::default();
    if warm {
        txn::warm_up(state.path(), &cfg, tree.path());
        tokio::time::sleep(warm_wait()).await;
    }
    let target = tree.path().join("d0000/f0.txt");
    let scratch = tree.path().join("scratch.txt");
    let mut bookkeeping = Vec::with_capacity(rounds);
    let mut with_overlay = Vec::with_capacity(rounds);
    let mut without = Vec::with_capacity(rounds);
    let mut first = Duration::ZERO;
    let mut phases: Vec<[Duration; 3]> = Vec::with_capacity(rounds);
    for r in 0..=rounds {
        // A model's reply between two actions takes far longer than this:
        // the work moved off the action's path (the next overlay mounted
        // ahead, spare files made, used directories removed) runs in it.
        tokio::time::sleep(pause()).await;
        let start = Instant::now();
        let t = txn::begin(state.path(), &cfg, tree.path(), origin.clone())
            .await
            .unwrap();
        let prepared = start.elapsed();
        let mount = t.mount();
        let script = format!("echo change {r} >> '{}'", target.display());
        let start = Instant::now();
        sh(&script, Some(&mount)).await;
        with_overlay.push(start.elapsed());
        let start = Instant::now();
        let observed = t.finish(|_| false).await.unwrap().unwrap();
        let finished = start.elapsed();
        let mut cp = observed.checkpoint;
        assert_eq!(cp.effect.changes.len(), 1);
        observed.project.apply_changeset(&mut cp).unwrap();
        drop(observed.guard);
        let done = prepared + start.elapsed();
        if r > 0 {
            phases.push([prepared, finished, start.elapsed() - finished]);
        } else {
            eprintln!(
                "  {files} files, {} first action by phase: begin {}, finish {}, apply {}",
                if warm { "warmed-up" } else { "cold" },
                ms(prepared),
                ms(finished),
                ms(start.elapsed() - finished)
            );
        }
        assert!(std::fs::read_to_string(&target)
            .unwrap()
            .ends_with(&format!("change {r}\n")));
        // The same command without an overlay, for the overlay's own cost,
        // after the same pause: a command started on a core just woken from
        // idle runs slower than one started right after other work, and
        // that difference is not the overlay's.
        tokio::time::sleep(pause()).await;
        let plain = format!("echo change {r} >> '{}'", scratch.display());
        let start = Instant::now();
        sh(&plain, None).await;
        without.push(start.elapsed());
        if r == 0 {
            first = done + with_overlay[0].saturating_sub(without[0]);
            with_overlay.clear();
            without.clear();
        } else {
            bookkeeping.push(done);
        }
    }
    let phase = |i: usize| median(phases.iter().map(|p| p[i]).collect());
    if rounds == 0 {
        return Figures {
            first,
            bookkeeping: vec![],
            overlay: Duration::ZERO,
        };
    }
    eprintln!(
        "  {files} files, bookkeeping by phase (p50): begin {}, finish {}, apply {}",
        ms(phase(0)),
        ms(phase(1)),
        ms(phase(2))
    );
    Figures {
        first,
        bookkeeping,
        overlay: paired_difference(&with_overlay, &without),
    }
}

/// `BENCH_SPLIT=1`: where the overlay's own cost goes, per round in one
/// overlay, each command after the same pause and each paired with the
/// same command without the overlay: joining the namespace (`true`),
/// then the first write to a file one directory down (the copy-up of
/// the directory and the file), then a write to another file in the same
/// directory (the file's copy-up only). Medians of the paired differences.
async fn split(files: usize, rounds: usize) {
    let origin = bench_origin();
    let (state, tree) = state_and_tree(files);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cfg = CheckpointConfig::default();
    txn::warm_up(state.path(), &cfg, tree.path());
    tokio::time::sleep(warm_wait()).await;
    let scratch = tree.path().join("scratch.txt");
    let (mut join, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        tokio::time::sleep(pause()).await;
        let t = txn::begin(state.path(), &cfg, tree.path(), origin.clone())
            .await
            .unwrap();
        let mount = t.mount();
        let paired = |script: String| {
            let plain = format!("echo {r} >> '{}'", scratch.display());
            let mount = mount.clone();
            async move {
                tokio::time::sleep(pause()).await;
                let start = Instant::now();
                sh(&script, Some(&mount)).await;
                let with = start.elapsed();
                tokio::time::sleep(pause()).await;
                let start = Instant::now();
                sh(if script == "true" { "true" } else { &plain }, None).await;
                with.as_secs_f64() - start.elapsed().as_secs_f64()
            }
        };
        join.push(paired("true".into()).await);
        let a = tree.path().join("d0000/f0.txt");
        let b = tree.path().join("d0000/f1.txt");
        first.push(paired(format!("echo {r} >> '{}'", a.display())).await);
        second.push(paired(format!("echo {r} >> '{}'", b.display())).await);
        let observed = t.finish(|_| false).await.unwrap().unwrap();
        let mut cp = observed.checkpoint;
        observed.project.apply_changeset(&mut cp).unwrap();
        drop(observed.guard);
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!("{:.2} ms", v[v.len() / 2] * 1000.0)
    };
    let spread = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        format!(
            "{:.2}..{:.2}",
            v[v.len() / 10] * 1000.0,
            v[v.len() * 9 / 10] * 1000.0
        )
    };
    println!(
        "{files:>8} | join {} ({}) | write+copy-up dir+file {} ({}) | write+copy-up file {} ({})",
        med(join.clone()),
        spread(join),
        med(first.clone()),
        spread(first),
        med(second.clone()),
        spread(second)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("per action: take the overlay mounted ahead + read, record and apply the changeset,");
    println!(
        "plus the overlay's own cost (median of the rounds' differences: a command in the overlay minus the same command without)"
    );
    println!(
        "{:>8} | {:>10} | {:>14} | {:>12} | {:>12} | {:>12} | {:>12}",
        "files", "first cold", "first warmed", "books p50", "books p95", "overlay p50", "total p50"
    );
    println!("(pause between actions: {} ms)", pause().as_millis());
    // `BENCH_SIZES=100,10000` measures only those tree sizes (profiling).
    let only: Option<Vec<usize>> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let splitting = std::env::var("BENCH_SPLIT").is_ok_and(|v| v == "1");
    for (files, rounds) in [(100, 50), (10_000, 50), (100_000, 30)] {
        if only.as_ref().is_some_and(|o| !o.contains(&files)) {
            continue;
        }
        if splitting {
            split(files, rounds).await;
            continue;
        }
        if only.as_ref().is_some_and(|o| !o.contains(&files)) {
            continue;
        }
        // The first action in a fresh store, nothing warmed up (in the
        // first size measured it also runs the once-per-process probe) …
        let cold = measure(files, 0, false).await;
        // … and in another fresh store warmed up as a session opening in
        // the project does; then the steady actions.
        let f = measure(files, rounds, true).await;
        let p50 = median(f.bookkeeping.clone());
        println!(
            "{:>8} | {:>10} | {:>14} | {:>12} | {:>12} | {:>12} | {:>12}",
            files,
            ms(cold.first),
            ms(f.first),
            ms(p50),
            ms(p95(f.bookkeeping)),
            ms(f.overlay),
            ms(p50 + f.overlay)
        );
    }
}
