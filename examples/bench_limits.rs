//! What the whole-command limits cost per tool call: `bwrap … sh -c true`
//! through the runner with every default limit (where cgroups are
//! writable, the run's pids and memory cgroups), against the same run
//! without the two limits that take a cgroup (`processes`, `memory`),
//! the two alternating, each after an untimed pause: tool calls come
//! seconds apart, and a process that joins a cgroup after a pause waits
//! for an RCU grace period, which calls back to back do not show.
//!
//! Run: `cargo run --release --example bench_limits [N] [PAUSE_MS]`
//! (default 40 pairs, 300 ms). Prints the median of each and the median
//! of the paired differences.

// Benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use passepartout::sandbox::bwrap::{bwrap_args, SandboxSpec, SystemLayout};
use passepartout::sandbox::limits::ResourceLimits;
use passepartout::sandbox::probe::{probe, SandboxStatus};
use passepartout::sandbox::runner::{run_limited, RunLimits};
use tokio_util::sync::CancellationToken;

fn ms(d: f64) -> String {
    format!("{d:.2} ms")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn call(bwrap: &str, args: &[String], cwd: &std::path::Path, r: &ResourceLimits) -> f64 {
    let started = Instant::now();
    let outcome = run_limited(
        bwrap,
        args,
        cwd,
        Some(&BTreeMap::new()),
        &RunLimits::default(),
        r,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let took = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(outcome.exit_code, Some(0), "{}", outcome.render());
    took
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut argv = std::env::args().skip(1);
    let n: usize = argv.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    let pause = Duration::from_millis(argv.next().and_then(|a| a.parse().ok()).unwrap_or(300));
    let bwrap = match probe() {
        SandboxStatus::Available { bwrap, .. } => bwrap.display().to_string(),
        SandboxStatus::Unavailable { reason, .. } => {
            println!("bwrap cannot run here: {reason}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = SandboxSpec {
        cwd: dir.path().to_path_buf(),
        read_only: false,
        network: false,
        extra_ro: vec![],
        extra_rw: vec![],
        env: BTreeMap::new(),
        interpreter: "sh".into(),
        script: "true".into(),
        argv: vec![],
    };
    let args = bwrap_args(&spec, &SystemLayout::probe()).unwrap();
    let all = ResourceLimits::default();
    let no_cgroup = ResourceLimits {
        processes: None,
        memory: None,
        ..ResourceLimits::default()
    };
    let (mut with, mut without, mut diff) = (vec![], vec![], vec![]);
    for i in 0..n + 3 {
        tokio::time::sleep(pause).await;
        let a = call(&bwrap, &args, dir.path(), &no_cgroup).await;
        tokio::time::sleep(pause).await;
        let b = call(&bwrap, &args, dir.path(), &all).await;
        if i >= 3 {
            without.push(a);
            with.push(b);
            diff.push(b - a);
        }
    }
    println!("{n} pairs, {} ms apart", pause.as_millis());
    println!("every default limit:              p50 {}", ms(median(with)));
    println!(
        "without `processes` and `memory`: p50 {}",
        ms(median(without))
    );
    println!("paired difference:                p50 {}", ms(median(diff)));
}
