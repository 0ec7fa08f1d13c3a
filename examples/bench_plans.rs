//! Flight plan figures: how long rendering, reading edits back and the
//! durable store's operations take. Run with
//! `cargo run --release --example bench_plans`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Instant;

use passepartout::action::{Action, Approval, Effect};
use passepartout::gates::{Decision, Verdict};
use passepartout::plans::{parse_edited, render, FlightPlan, PlanResult, PlanStore};

fn plan(script: String) -> FlightPlan {
    let action = Action {
        tool: "shell".into(),
        target: "shell".into(),
        arguments: serde_json::json!({}),
        effect: Effect::Run {
            interpreter: "bash".into(),
            script,
            argv: vec![],
            env: BTreeMap::from([("PATTERN".into(), "foo".into())]),
            network: false,
        },
        approval: Approval::Ask,
        timeout_secs: None,
    };
    FlightPlan::new(
        "bench",
        "call",
        "Because the benchmark says so.",
        action,
        vec![Verdict::new(Decision::Ask, "destructive", "rm")],
    )
}

fn per_op(start: Instant, n: u32) -> String {
    let micros = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    format!("{micros:>10.1} µs/op")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for lines in [10usize, 1_000, 10_000] {
        let script: String = (0..lines)
            .map(|i| {
                if i % 10 == 0 {
                    format!("* line {i} that needs escaping\n")
                } else {
                    format!("echo line {i} \"$PATTERN\"\n")
                }
            })
            .collect();
        let p = plan(script);
        let n = if lines > 1_000 { 20 } else { 200 };
        let start = Instant::now();
        let mut org = String::new();
        for _ in 0..n {
            org = render(&p);
        }
        println!(
            "render     {lines:>6} lines ({:>7} bytes of Org) {}",
            org.len(),
            per_op(start, n)
        );
        let start = Instant::now();
        for _ in 0..n {
            let back = parse_edited(&p, &org)?;
            assert_eq!(back, p.action);
        }
        println!(
            "parse back {lines:>6} lines                       {}",
            per_op(start, n)
        );
    }

    let dir = tempfile::tempdir()?;
    let store = PlanStore::new(dir.path());
    let n = 200u32;
    let plans: Vec<FlightPlan> = (0..n).map(|i| plan(format!("echo {i}\n"))).collect();
    let start = Instant::now();
    for p in &plans {
        store.create(p)?;
    }
    println!(
        "store create (2 fsynced files)             {}",
        per_op(start, n)
    );
    let start = Instant::now();
    let listed = store.list()?;
    println!(
        "store list of {} plans                     {}",
        listed.len(),
        per_op(start, 1)
    );
    let start = Instant::now();
    for p in &plans {
        store.decide(&p.id, true, None, "bench", None)?;
    }
    println!(
        "store decide (approve)                     {}",
        per_op(start, n)
    );
    let start = Instant::now();
    for p in &plans {
        store.begin_execution(&p.id)?;
    }
    println!(
        "store begin_execution                      {}",
        per_op(start, n)
    );
    let start = Instant::now();
    for p in &plans {
        store.finish_execution(&p.id, PlanResult::new(false, "ok"))?;
    }
    println!(
        "store finish_execution                     {}",
        per_op(start, n)
    );
    Ok(())
}
