//! What the sandbox costs per command: N spawns of `true` directly, through
//! bwrap with the real argument list, and a real action's shape
//! (`bwrap … sh -c true`), all through the same runner; then what the
//! boundary adds: the resource limits (rlimits, a pids cgroup when one is
//! writable, the disk watchdog) and the control surface (a snapshot of a
//! git project before the run, its read-only binds, the sweep after).
//!
//! Then the figure issue 20 asks for: what a tool call costs (control
//! surface, every limit, runner) over a bare `bwrap … sh -c true` with the
//! same argument list spawned by `std::process::Command`, the two
//! alternating in one run, p50 and p99 over at least 200 calls, back to
//! back and 50 ms apart (a cgroup join after a pause would wait for an RCU
//! grace period; see `passepartout::sandbox::enforce`); and what a granted
//! network adds (slirp4netns). The runner alone (no limits, no control
//! surface) runs the same list in the same alternation, which splits the
//! overhead into the spawn itself (`passepartout::sandbox::spawn`, its
//! pipes and its wait) and the limits with the control surface. Last, the
//! host-side work alone (snapshot and sweep), with git's answers remembered
//! and with git asked every time. Each tool-call block also says how many
//! run cgroups were made meanwhile, and how many of those on a call's path
//! (the pool was empty) rather than ahead by the keeper.
//!
//! Run: `cargo run --release --example bench_sandbox [N]` (default 50; the
//! tool-call figure uses max(N, 200) calls).

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use passepartout::sandbox::bwrap::{
    bwrap_args, bwrap_args_with, Boundary, SandboxSpec, SystemLayout,
};
use passepartout::sandbox::enforce::{process_limit, run_cgroups_made, ProcessLimit};
use passepartout::sandbox::limits::ResourceLimits;
use passepartout::sandbox::probe::{probe, SandboxStatus};
use passepartout::sandbox::runner::{run, run_limited, RunLimits};
use passepartout::sandbox::spawn::timeline::{self, mark};
use passepartout::sandbox::surface::SurfaceSnapshot;
use tokio_util::sync::CancellationToken;

/// The median of `b[i] - a[i]` over alternating pairs, in ms: under load
/// it moves less than the difference of two medians.
fn paired_median(a: &[Duration], b: &[Duration]) -> f64 {
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(a, b)| (b.as_secs_f64() - a.as_secs_f64()) * 1000.0)
        .collect();
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

struct Stats {
    /// Every sample in the order taken (for paired differences).
    samples: Vec<Duration>,
    mean: Duration,
    p50: Duration,
    p95: Duration,
    p99: Duration,
}

fn stats(taken: Vec<Duration>) -> Stats {
    let mut samples = taken.clone();
    samples.sort();
    let n = samples.len();
    let total: Duration = samples.iter().sum();
    let at = |pct: usize| samples[((n * pct).div_ceil(100)).saturating_sub(1).min(n - 1)];
    Stats {
        samples: taken,
        mean: total / n as u32,
        p50: samples[n / 2],
        p95: at(95),
        p99: at(99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn time_runs(n: usize, program: &str, args: &[String], cwd: &std::path::Path) -> Stats {
    let limits = RunLimits::default();
    let env = BTreeMap::new();
    // Warm the page cache and the runtime before measuring.
    for _ in 0..3 {
        run(
            program,
            args,
            cwd,
            Some(&env),
            &limits,
            CancellationToken::new(),
        )
        .await
        .expect("warm-up run");
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let outcome = run(
            program,
            args,
            cwd,
            Some(&env),
            &limits,
            CancellationToken::new(),
        )
        .await
        .expect("run");
        samples.push(started.elapsed());
        assert_eq!(outcome.exit_code, Some(0), "{}", outcome.render());
    }
    stats(samples)
}

/// Runs as the shell actuator does them: snapshot the control surface,
/// build the list with its binds, run with resource limits, sweep.
async fn time_bounded_runs(
    n: usize,
    bwrap: &str,
    spec: &SandboxSpec,
    resources: &ResourceLimits,
) -> Stats {
    time_spaced_runs(n, bwrap, spec, resources, Duration::ZERO).await
}

/// One tool call as the shell actuator makes it: snapshot the
/// control surface, build the argument list with its binds, run with every
/// limit, sweep; fails loudly unless the run succeeded and the sweep undid
/// nothing.
async fn tool_call(
    bwrap: &str,
    spec: &SandboxSpec,
    layout: &SystemLayout,
    resources: &ResourceLimits,
    limits: &RunLimits,
    env: &BTreeMap<String, String>,
) {
    let surface = SurfaceSnapshot::take(&spec.cwd);
    mark("surface taken");
    let boundary = Boundary {
        surface: surface.mounts().clone(),
        tmp_size: resources.tmp_size,
        hidden: vec![],
        ..Boundary::default()
    };
    let args = bwrap_args_with(spec, layout, &boundary).expect("argument list");
    mark("argument list");
    let outcome = run_limited(
        bwrap,
        &args,
        &spec.cwd,
        Some(env),
        limits,
        resources,
        CancellationToken::new(),
    )
    .await
    .expect("run");
    let undone = surface.sweep();
    mark("swept");
    assert_eq!(outcome.exit_code, Some(0), "{}", outcome.render());
    assert!(undone.is_empty());
}

/// [`time_bounded_runs`], pausing `pause` (untimed) before each run: tool
/// calls come seconds apart, and some kernel costs (an RCU grace period
/// when a process joins a cgroup) are only paid after a pause.
async fn time_spaced_runs(
    n: usize,
    bwrap: &str,
    spec: &SandboxSpec,
    resources: &ResourceLimits,
    pause: Duration,
) -> Stats {
    let limits = RunLimits::default();
    let env = BTreeMap::new();
    let layout = SystemLayout::probe();
    let mut samples = Vec::with_capacity(n + 3);
    for i in 0..n + 3 {
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        tool_call(bwrap, spec, &layout, resources, &limits, &env).await;
        if i >= 3 {
            samples.push(started.elapsed());
        }
    }
    stats(samples)
}

/// `calls` triples of (a bare `bwrap` spawn, the same list through the
/// runner alone — no limits, no control surface —, a passepartout tool
/// call) with the same argument list, alternating, `pause` (untimed)
/// before each.
async fn time_against_bare(
    calls: usize,
    bwrap: &str,
    spec: &SandboxSpec,
    pause: Duration,
) -> (Stats, Stats, Stats) {
    let limits = RunLimits::default();
    let resources = ResourceLimits::default();
    let env = BTreeMap::new();
    let layout = SystemLayout::probe();
    let mut bare_samples = Vec::with_capacity(calls);
    let mut runner_samples = Vec::with_capacity(calls);
    let mut call_samples = Vec::with_capacity(calls);
    for i in 0..calls + 3 {
        // Bare: the list the tool call below builds, spawned and waited.
        let args = bare_args(spec, &layout, &resources);
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let status = bare_command(bwrap, &args, spec)
            .status()
            .expect("bare bwrap");
        let bare = started.elapsed();
        assert!(status.success());

        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let outcome = run(
            bwrap,
            &args,
            &spec.cwd,
            Some(&env),
            &limits,
            CancellationToken::new(),
        )
        .await
        .expect("runner alone");
        let runner = started.elapsed();
        assert_eq!(outcome.exit_code, Some(0), "{}", outcome.render());

        tokio::time::sleep(pause).await;
        let started = Instant::now();
        tool_call(bwrap, spec, &layout, &resources, &limits, &env).await;
        let call = started.elapsed();
        if i >= 3 {
            bare_samples.push(bare);
            runner_samples.push(runner);
            call_samples.push(call);
        }
    }
    (
        stats(bare_samples),
        stats(runner_samples),
        stats(call_samples),
    )
}

/// The bare bwrap run: the same list, nothing inherited, output dropped.
fn bare_command(bwrap: &str, args: &[String], spec: &SandboxSpec) -> std::process::Command {
    let mut cmd = std::process::Command::new(bwrap);
    cmd.args(args)
        .current_dir(&spec.cwd)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}

/// The argument list a tool call in `spec` builds, for the bare bwrap
/// that is timed against it.
fn bare_args(spec: &SandboxSpec, layout: &SystemLayout, resources: &ResourceLimits) -> Vec<String> {
    let surface = SurfaceSnapshot::take(&spec.cwd);
    let boundary = Boundary {
        surface: surface.mounts().clone(),
        tmp_size: resources.tmp_size,
        hidden: vec![],
        ..Boundary::default()
    };
    bwrap_args_with(spec, layout, &boundary).expect("argument list")
}

/// Where a tool call's time goes, step by step (the runner's
/// `spawn::timeline` marks plus the surface's here), against a bare bwrap
/// split the same way (`posix_spawn` returns once the program executed,
/// then the wait): `calls` alternating pairs, `pause` (untimed) before
/// each; the median offset of each step from the call's start, in µs.
async fn breakdown(calls: usize, bwrap: &str, spec: &SandboxSpec, pause: Duration) {
    let limits = RunLimits::default();
    let resources = ResourceLimits::default();
    let env = BTreeMap::new();
    let layout = SystemLayout::probe();
    let mut offsets: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut bare_exec = Vec::new();
    let mut bare_total = Vec::new();
    let micros = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e6;
    for i in 0..calls + 3 {
        let args = bare_args(spec, &layout, &resources);
        tokio::time::sleep(pause).await;
        let started = Instant::now();
        let mut child = bare_command(bwrap, &args, spec)
            .spawn()
            .expect("bare bwrap");
        let executed = Instant::now();
        assert!(child.wait().expect("bare wait").success());
        let ended = Instant::now();

        tokio::time::sleep(pause).await;
        timeline::take();
        timeline::record(true);
        let call_start = Instant::now();
        tool_call(bwrap, spec, &layout, &resources, &limits, &env).await;
        timeline::record(false);
        let marks = timeline::take();
        if i < 3 {
            continue;
        }
        bare_exec.push(micros(started, executed));
        bare_total.push(micros(started, ended));
        for (name, at) in marks {
            offsets
                .entry(name)
                .or_default()
                .push(micros(call_start, at));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let when = if pause.is_zero() {
        "back to back".to_string()
    } else {
        format!("{} ms apart", pause.as_millis())
    };
    println!(
        "\nper-step breakdown, {calls} alternating pairs, {when} \
         (median offset from the start, µs; Δ from the step before):"
    );
    println!(
        "  bare bwrap: executed {:>8.0}   reaped {:>8.0}",
        median(&mut bare_exec),
        median(&mut bare_total)
    );
    let mut steps: Vec<(f64, &'static str, usize)> = offsets
        .iter_mut()
        .map(|(name, v)| (median(v), *name, v.len()))
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut before = 0.0;
    for (at, name, n) in steps {
        let seen = if n == calls {
            String::new()
        } else {
            format!(" ({n} of {calls} calls)")
        };
        println!("  {name:<16} {at:>8.0}   Δ {:>7.0}{seen}", at - before);
        before = at;
    }
}

fn row_p99(label: &str, s: &Stats) {
    println!(
        "{label:<28} p50 {:>10}  p99 {:>10}  mean {:>10}",
        ms(s.p50),
        ms(s.p99),
        ms(s.mean)
    );
}

fn row(label: &str, s: &Stats) {
    println!(
        "{label:<28} mean {:>10}  p50 {:>10}  p95 {:>10}",
        ms(s.mean),
        ms(s.p50),
        ms(s.p95)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path();
    println!("{n} runs each, through passepartout::sandbox::runner::run\n");

    let plain = time_runs(n, "true", &[], cwd).await;
    row("true", &plain);

    let bwrap = match probe() {
        SandboxStatus::Available { bwrap, version } => {
            println!("(bubblewrap {version} at {})", bwrap.display());
            bwrap
        }
        SandboxStatus::Unavailable { reason, fix } => {
            println!("bwrap cannot run here: {reason}\nfix: {fix}");
            return;
        }
    };
    let spec = SandboxSpec {
        cwd: cwd.to_path_buf(),
        read_only: false,
        network: false,
        extra_ro: vec![],
        extra_rw: vec![],
        env: BTreeMap::new(),
        interpreter: "sh".into(),
        script: "true".into(),
        argv: vec![],
    };
    let real = bwrap_args(&spec, &SystemLayout::probe()).expect("argument list");
    // The same sandbox, with the command after `--` replaced by `true`.
    let split = real
        .iter()
        .position(|a| a == "--")
        .expect("`--` in the list");
    let mut bare: Vec<String> = real[..=split].to_vec();
    bare.push("true".into());
    let program = bwrap.display().to_string();

    let sandboxed = time_runs(n, &program, &bare, cwd).await;
    row("bwrap … true", &sandboxed);
    let sh_plain = time_runs(n, "sh", &["-c".into(), "true".into()], cwd).await;
    row("sh -c true", &sh_plain);
    let action = time_runs(n, &program, &real, cwd).await;
    row("bwrap … sh -c true", &action);

    println!(
        "\nsandbox overhead per spawn: mean {}, p50 {} ({} argument strings)",
        ms(sandboxed.mean.saturating_sub(plain.mean)),
        ms(sandboxed.p50.saturating_sub(plain.p50)),
        bare.len()
    );

    // The boundary, in a project with a repository and project skills.
    let project = tempfile::tempdir().expect("temp dir");
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(project.path())
        .status();
    if !git.is_ok_and(|s| s.success()) {
        println!("(git is missing: the project has no .git)");
    }
    std::fs::create_dir_all(project.path().join(".passepartout/skills")).expect("skills dir");
    let spec = SandboxSpec {
        cwd: project.path().to_path_buf(),
        read_only: false,
        ..spec
    };
    println!();
    let unlimited = time_bounded_runs(n, &program, &spec, &ResourceLimits::none()).await;
    row("+ control surface", &unlimited);
    let limited = time_bounded_runs(n, &program, &spec, &ResourceLimits::default()).await;
    row("+ control surface + limits", &limited);
    // The process limit apart: on a cgroup host it is the one limit with a
    // cost per run (joining the run's cgroup).
    let no_pids = ResourceLimits {
        processes: None,
        ..ResourceLimits::default()
    };
    let without_processes = time_bounded_runs(n, &program, &spec, &no_pids).await;
    row("  … without `processes`", &without_processes);
    // Signed: on a busy machine the noise can exceed the cost.
    let delta = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1000.0;
    let binds = {
        let m = SurfaceSnapshot::take(project.path());
        m.mounts().pins.len() + m.mounts().read_only.len()
    };
    println!(
        "\ncontrol surface per spawn: mean {:+.2} ms, p50 {:+.2} ms ({binds} binds)\n\
         limits per spawn:          mean {:+.2} ms, p50 {:+.2} ms\n\
         of which `processes`:      mean {:+.2} ms, p50 {:+.2} ms ({})",
        delta(unlimited.mean, action.mean),
        delta(unlimited.p50, action.p50),
        delta(limited.mean, unlimited.mean),
        delta(limited.p50, unlimited.p50),
        delta(limited.mean, without_processes.mean),
        delta(limited.p50, without_processes.p50),
        match process_limit() {
            ProcessLimit::UserNamespace => "RLIMIT_NPROC in the run's user namespace",
            ProcessLimit::Cgroup {
                favordynmods: true, ..
            } => "pids cgroup, favordynmods",
            ProcessLimit::Cgroup { v2: false, .. } => "pids cgroup v1, joined as a thread",
            ProcessLimit::Cgroup { v2: true, .. } => "pids cgroup v2",
            ProcessLimit::Nproc => "RLIMIT_NPROC",
            ProcessLimit::NotEnforced => "not enforced here",
        },
    );
    // The spawn alone, on `true`: std's posix_spawn (the bare baseline),
    // the runner (passepartout::sandbox::spawn with pipes and a pidfd
    // wait), and the spawn the runner used before (tokio::process with a
    // `pre_exec` hook, which makes std fork the daemon, and piped output),
    // alternating.
    let calls = n.max(200);
    let true_path = "/bin/true";
    let (mut posix, mut ours, mut forked, mut limited_true) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..calls + 3 {
        let started = Instant::now();
        let status = std::process::Command::new(true_path)
            .current_dir(cwd)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("posix_spawn");
        let a = started.elapsed();
        assert!(status.success());
        let started = Instant::now();
        let outcome = run(
            true_path,
            &[],
            cwd,
            Some(&BTreeMap::new()),
            &RunLimits::default(),
            CancellationToken::new(),
        )
        .await
        .expect("runner");
        let b = started.elapsed();
        assert_eq!(outcome.exit_code, Some(0));
        let started = Instant::now();
        let mut cmd = tokio::process::Command::new(true_path);
        cmd.current_dir(cwd)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        // SAFETY: setrlimit is async-signal-safe (what the runner's hook did).
        unsafe {
            cmd.pre_exec(|| {
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                Ok(())
            });
        }
        let output = cmd.output().await.expect("tokio spawn");
        let c = started.elapsed();
        assert!(output.status.success());
        // The runner with every default limit (the run's cgroups as root,
        // or the run's user namespace).
        let started = Instant::now();
        let outcome = run_limited(
            true_path,
            &[],
            cwd,
            Some(&BTreeMap::new()),
            &RunLimits::default(),
            &ResourceLimits::default(),
            CancellationToken::new(),
        )
        .await
        .expect("runner with limits");
        let d = started.elapsed();
        assert_eq!(outcome.exit_code, Some(0));
        if i >= 3 {
            posix.push(a);
            ours.push(b);
            forked.push(c);
            limited_true.push(d);
        }
    }
    println!(
        "\nspawning `true`, {calls} each, alternating (median of the pairs' differences \
         against std's posix_spawn, p50 {}):\n\
         runner (passepartout::sandbox::spawn, pipes, pidfd): {:+.2} ms\n\
         tokio::process with a pre_exec hook (the runner before): {:+.2} ms\n\
         runner with every default limit: {:+.2} ms",
        ms(stats(posix.clone()).p50),
        paired_median(&posix, &ours),
        paired_median(&posix, &forked),
        paired_median(&posix, &limited_true),
    );
    // The figure issue 20 asks for: a tool call through passepartout (the
    // control surface, every limit, the runner) against a bare spawn of
    // bwrap with the very same argument list by std::process::Command, the
    // two alternating in one run, back to back and 50 ms apart.
    for pause in [Duration::ZERO, Duration::from_millis(50)] {
        let made_before = run_cgroups_made();
        let (bare_spawn, runner_alone, tool_call) =
            time_against_bare(calls, &program, &spec, pause).await;
        let when = if pause.is_zero() {
            "back to back".to_string()
        } else {
            format!("{} ms apart", pause.as_millis())
        };
        println!("\n{calls} calls each, alternating, {when}:");
        row_p99("bare bwrap … sh -c true", &bare_spawn);
        row_p99("runner alone, same list", &runner_alone);
        row_p99("passepartout tool call", &tool_call);
        println!(
            "per-call overhead over a bare bwrap with the same flags ({when}): \
             p50 {:+.2} ms, p99 {:+.2} ms, mean {:+.2} ms",
            delta(tool_call.p50, bare_spawn.p50),
            delta(tool_call.p99, bare_spawn.p99),
            delta(tool_call.mean, bare_spawn.mean),
        );
        println!(
            "  of which the runner's spawn, pipes and wait: p50 {:+.2} ms; \
             the limits and the control surface: p50 {:+.2} ms",
            delta(runner_alone.p50, bare_spawn.p50),
            delta(tool_call.p50, runner_alone.p50),
        );
        println!(
            "  median of the {calls} pairs' differences: tool call {:+.2} ms, \
             runner alone {:+.2} ms",
            paired_median(&bare_spawn.samples, &tool_call.samples),
            paired_median(&bare_spawn.samples, &runner_alone.samples),
        );
        println!(
            "  run cgroups made meanwhile: {}",
            run_cgroups_made() - made_before
        );
    }
    for pause in [Duration::ZERO, Duration::from_millis(50)] {
        breakdown(calls, &program, &spec, pause).await;
    }
    println!();
    // A granted network: the same run, attached through slirp4netns.
    if passepartout::sandbox::network::available() {
        let networked = SandboxSpec {
            network: true,
            ..spec.clone()
        };
        let granted = time_bounded_runs(n, &program, &networked, &ResourceLimits::default()).await;
        row("+ granted network", &granted);
        println!(
            "granted network per spawn: mean {:+.2} ms, p50 {:+.2} ms (slirp4netns)",
            delta(granted.mean, limited.mean),
            delta(granted.p50, limited.p50),
        );
    }
    // The host-side work alone, without the spawn: snapshot + sweep.
    let started = Instant::now();
    for _ in 0..n {
        let surface = SurfaceSnapshot::take(project.path());
        let _ = surface.sweep();
    }
    println!(
        "snapshot + sweep alone:    mean {}",
        ms(started.elapsed() / n as u32)
    );
    println!("run cgroups: {} made", run_cgroups_made());
    // Why the snapshot costs more inside a tool call than in the loop
    // above: the snapshot alone, timed back to back (warm caches, a busy
    // CPU), after 12 ms asleep (what a bwrap run lasts: the core idles)
    // and right after a bare bwrap run (its namespaces set up and torn
    // down meanwhile), alternating; medians.
    let args = bare_args(&spec, &SystemLayout::probe(), &ResourceLimits::default());
    let (mut hot, mut slept, mut after_bwrap) = (Vec::new(), Vec::new(), Vec::new());
    let time_snapshot = || {
        let started = Instant::now();
        let surface = SurfaceSnapshot::take(project.path());
        let took = started.elapsed();
        drop(surface);
        took
    };
    for _ in 0..calls {
        let _ = time_snapshot();
        hot.push(time_snapshot());
        std::thread::sleep(Duration::from_millis(12));
        slept.push(time_snapshot());
        let status = bare_command(&program, &args, &spec)
            .status()
            .expect("bare bwrap");
        assert!(status.success());
        after_bwrap.push(time_snapshot());
    }
    println!(
        "snapshot alone, p50: back to back {}, after 12 ms asleep {}, after a bare bwrap {}",
        ms(stats(hot).p50),
        ms(stats(slept).p50),
        ms(stats(after_bwrap).p50),
    );
    // The same with git asked every time (as before its answers were
    // remembered; see passepartout::control_surface::git_named_paths).
    let started = Instant::now();
    for _ in 0..n {
        passepartout::control_surface::forget_git_reads();
        let surface = SurfaceSnapshot::take(project.path());
        let _ = surface.sweep();
    }
    println!(
        "  … git asked every time:  mean {}",
        ms(started.elapsed() / n as u32)
    );
}
