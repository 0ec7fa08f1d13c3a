//! Gate evaluation cost: runs the hostile, benign and routine corpora through the
//! built-in gate engine (tree-sitter parse included) many times and prints
//! the p50, mean and p99 verdict time per action, in microseconds. The
//! target is a p99 under 1 ms for the whole corpus in a release build.
//! Wall time and thread CPU time are both printed: on a shared machine the
//! wall-time tail measures the scheduler, the CPU time measures the gates.
//!
//! `cargo run --release --example bench_gates [ROUNDS]`

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use passepartout::action::{Action, Approval, Effect};
use passepartout::gates::{Decision, GateContext, GateEngine};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    effect: Effect,
}

fn load(text: &str) -> Vec<Action> {
    let cases: Vec<Case> = serde_json::from_str(text).expect("corpus is valid JSON");
    cases
        .into_iter()
        .map(|c| Action {
            tool: "bench".into(),
            target: "shell".into(),
            arguments: serde_json::json!({}),
            effect: c.effect,
            approval: Approval::Auto,
            timeout_secs: None,
        })
        .collect()
}

fn report(label: &str, engine: &GateEngine, ctx: &GateContext, actions: &[Action], rounds: usize) {
    // Warm up the lazily compiled regexes first.
    for a in actions {
        std::hint::black_box(engine.evaluate(a, ctx));
    }
    let mut wall = Vec::with_capacity(actions.len() * rounds);
    let mut cpu = Vec::with_capacity(actions.len() * rounds);
    let mut stopped = 0usize;
    for _ in 0..rounds {
        for a in actions {
            let cpu_start = thread_cpu_micros();
            let start = Instant::now();
            let j = std::hint::black_box(engine.evaluate(a, ctx));
            wall.push(start.elapsed().as_nanos() as f64 / 1000.0);
            cpu.push(thread_cpu_micros() - cpu_start);
            if j.decision != Decision::Allow {
                stopped += 1;
            }
        }
    }
    println!(
        "{label:<8} {:>4} actions x {rounds} rounds (stopped per round: {})",
        actions.len(),
        stopped / rounds
    );
    println!("  wall time:       {}", figures(&mut wall));
    println!("  thread CPU time: {}", figures(&mut cpu));
}

/// p50, mean, p99 and max of samples in microseconds.
fn figures(samples: &mut [f64]) -> String {
    samples.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let p50 = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    let max = samples[samples.len() - 1];
    format!("p50 {p50:>7.1} µs  mean {mean:>7.1} µs  p99 {p99:>7.1} µs  max {max:>8.1} µs")
}

/// CPU time this thread has used, in microseconds: unlike wall time it
/// does not count the time the scheduler gave to other processes, which on
/// a loaded machine dominates the tail.
fn thread_cpu_micros() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let hostile = load(include_str!("../tests/hostile/hostile.json"));
    let benign = load(include_str!("../tests/hostile/benign.json"));
    let routine = load(include_str!("../tests/hostile/routine.json"));
    let engine = GateEngine::with_builtin_gates();
    let ctx = GateContext {
        cwd: "/home/user/project".into(),
        home: Some("/home/user".into()),
        network_allow: vec!["crates.io".into(), "github.com".into()],
        host_paths: Vec::new(),
        // The text stage as the default configuration runs it.
        contained: true,
    };
    println!(
        "gate evaluation time per action ({} gates)",
        engine.gate_names().len()
    );
    report("hostile", &engine, &ctx, &hostile, rounds);
    report("benign", &engine, &ctx, &benign, rounds);
    report("routine", &engine, &ctx, &routine, rounds);
    let all: Vec<Action> = hostile.into_iter().chain(benign).chain(routine).collect();
    report("all", &engine, &ctx, &all, rounds);
    slowest(&engine, &ctx, &all, rounds.min(50));
}

/// The actions with the highest median time, to see where the cost is.
fn slowest(engine: &GateEngine, ctx: &GateContext, actions: &[Action], rounds: usize) {
    let mut medians: Vec<(f64, String)> = actions
        .iter()
        .map(|a| {
            let mut t: Vec<f64> = (0..rounds)
                .map(|_| {
                    let start = Instant::now();
                    std::hint::black_box(engine.evaluate(a, ctx));
                    start.elapsed().as_nanos() as f64 / 1000.0
                })
                .collect();
            t.sort_by(f64::total_cmp);
            let shown: String = serde_json::to_string(&a.effect)
                .unwrap_or_default()
                .chars()
                .take(90)
                .collect();
            (t[t.len() / 2], shown)
        })
        .collect();
    medians.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("slowest actions by median:");
    for (m, shown) in medians.iter().take(5) {
        println!("  {m:>8.1} µs  {shown}");
    }
}
