//! Gate evaluation cost: runs the hostile and benign corpora through the
//! built-in gate engine (tree-sitter parse included) many times and prints
//! the p50, mean and p99 verdict time per action, in microseconds. The
//! target is a p99 under 1 ms for the whole corpus in a release build.
//!
//! `cargo run --release --example bench_gates [ROUNDS]`

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
    let mut samples = Vec::with_capacity(actions.len() * rounds);
    let mut stopped = 0usize;
    for _ in 0..rounds {
        for a in actions {
            let start = Instant::now();
            let j = std::hint::black_box(engine.evaluate(a, ctx));
            samples.push(start.elapsed().as_nanos() as f64 / 1000.0);
            if j.decision != Decision::Allow {
                stopped += 1;
            }
        }
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let p50 = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    let max = samples[samples.len() - 1];
    println!(
        "{label:<8} {:>4} actions x {rounds} rounds: p50 {p50:>7.1} µs  mean {mean:>7.1} µs  p99 {p99:>7.1} µs  max {max:>8.1} µs  (stopped per round: {})",
        actions.len(),
        stopped / rounds
    );
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let hostile = load(include_str!("../tests/hostile/hostile.json"));
    let benign = load(include_str!("../tests/hostile/benign.json"));
    let engine = GateEngine::with_builtin_gates();
    let ctx = GateContext {
        cwd: "/home/user/project".into(),
        home: Some("/home/user".into()),
        network_allow: vec!["crates.io".into(), "github.com".into()],
    };
    println!(
        "gate evaluation time per action ({} gates)",
        engine.gate_names().len()
    );
    report("hostile", &engine, &ctx, &hostile, rounds);
    report("benign", &engine, &ctx, &benign, rounds);
    let all: Vec<Action> = hostile.into_iter().chain(benign).collect();
    report("all", &engine, &ctx, &all, rounds);
}
