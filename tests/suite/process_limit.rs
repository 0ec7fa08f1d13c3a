//! The sandbox's process limit (issue 20): it binds for a daemon running
//! as a user (RLIMIT_NPROC in the run's own user namespace) and as root (a
//! pids cgroup whose resident thread forks the run), the result names it
//! when a run reaches it, and it costs a tool call no cgroup join.

use crate::harness;
use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use harness::{Client, Framing};
use passepartout::sandbox::enforce::{process_limit, ProcessLimit};
use passepartout::sandbox::limits::ResourceLimits;
use passepartout::sandbox::runner::{run_limited, RunLimits};
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};
use tokio_util::sync::CancellationToken;

/// The uid the tests switch to when they run as root.
const NOBODY: &str = "65534";

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// A daemon running as a user (`nobody` when the test runs as root, via
/// `setpriv`), with `processes = 64`, and a session in `project`. None
/// when no user can be switched to here.
async fn user_daemon(
    project: &Path,
    script: Vec<Reply>,
) -> Option<(tempfile::TempDir, FakeProvider, Client, String)> {
    let home = harness::home_with_config(
        "shell_timeout_secs = 20\n\
         [sandbox_limits]\n\
         processes = 64\n\
         disk_write = \"100G\"\n",
    );
    let wrapper: &[&str] = if is_root() {
        let setpriv = std::process::Command::new("setpriv")
            .arg("--version")
            .output();
        if !setpriv.is_ok_and(|o| o.status.success()) {
            eprintln!("no setpriv here: cannot run the daemon as a user");
            return None;
        }
        for dir in [home.path(), project] {
            let owned = std::process::Command::new("chown")
                .args(["-R", &format!("{NOBODY}:{NOBODY}")])
                .arg(dir)
                .status()
                .unwrap();
            assert!(owned.success());
        }
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]
    } else {
        &[]
    };
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let mut client = Client::spawn_wrapped(
        Framing::Ndjson,
        home.path(),
        wrapper,
        &["--provider-url", &url],
    );
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
    Some((home, fake, client, session))
}

/// As a user, a fork bomb is stopped at the limit and the result names it
/// (RLIMIT_NPROC counted in the run's own user namespace; the watchdog
/// sees the run's process tree at the limit), and a command that runs
/// fifty processes at once is not mistaken for one.
#[tokio::test]
async fn a_fork_bomb_is_stopped_at_the_limit_for_a_daemon_run_as_a_user() {
    if !harness::bwrap_available() {
        return;
    }
    let project = tempfile::tempdir().unwrap();
    let script = vec![
        fake::shell_call(
            "c1",
            "for i in $(seq 50); do sleep 1 & done; wait; echo fifty done",
        ),
        fake::shell_call("c2", "perl -e 'fork while 1'"),
        fake::openai_text("done"),
    ];
    let Some((_home, fake, mut client, session)) = user_daemon(project.path(), script).await else {
        return;
    };
    let started = Instant::now();
    let (msg, _) = client
        .prompt_answering(&session, "go", |_| "allow_once".into())
        .await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
    let results = fake.last_tool_results();
    assert!(
        results[0].starts_with("exit code: 0") && results[0].contains("fifty done"),
        "{}",
        results[0]
    );
    assert!(
        results[1].starts_with("stopped: the command tried to run more than 64 processes"),
        "{}",
        results[1]
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stopped by the timeout, not the limit: {:?}",
        started.elapsed()
    );
    // Nothing of it survives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let perls = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.starts_with(b"perl\0-e\0fork while 1"))
        })
        .count();
    assert_eq!(perls, 0);
}

/// What the process limit adds to a run spaced like tool calls are (50 ms
/// apart): with a pids cgroup on cgroup v1 the run's child is forked by the
/// cgroup's resident thread and joins nothing, and in a user namespace
/// nothing is joined at all, so the limit costs no RCU grace period (a join
/// cost 14 ms p50 here). The runner's spawn of `true` with every limit
/// against the same without `processes`, alternating, the median of 40
/// pairs' differences (the
/// release figures against a bare bwrap are `examples/bench_sandbox.rs`'s).
#[tokio::test]
async fn the_process_limit_costs_a_run_no_cgroup_join() {
    match process_limit() {
        ProcessLimit::Cgroup { .. } | ProcessLimit::UserNamespace => {}
        other => {
            eprintln!("process limit here: {other:?}, nothing to time");
            return;
        }
    }
    let project = tempfile::tempdir().unwrap();
    let limited = ResourceLimits::default();
    assert!(limited.processes.is_some());
    let unlimited = ResourceLimits {
        processes: None,
        ..limited
    };
    let env = BTreeMap::new();
    let time = |resources: ResourceLimits| {
        let (env, cwd) = (&env, project.path());
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let started = Instant::now();
            let outcome = run_limited(
                "true",
                &[],
                cwd,
                Some(env),
                &RunLimits::default(),
                &resources,
                CancellationToken::new(),
            )
            .await
            .unwrap();
            assert_eq!(outcome.exit_code, Some(0), "{}", outcome.render());
            started.elapsed()
        }
    };
    let (mut with, mut without) = (vec![], vec![]);
    for i in 0..43 {
        let a = time(limited).await;
        let b = time(unlimited).await;
        if i >= 3 {
            with.push(a);
            without.push(b);
        }
    }
    // Each pair ran under the same load: the median of the differences.
    let mut extra: Vec<f64> = with
        .iter()
        .zip(&without)
        .map(|(a, b)| a.as_secs_f64() * 1e3 - b.as_secs_f64() * 1e3)
        .collect();
    extra.sort_by(f64::total_cmp);
    let median_extra = extra[extra.len() / 2];
    eprintln!("the process limit adds {median_extra:+.2} ms per run (median of pairs)");
    assert!(
        median_extra < 8.0,
        "the process limit costs {median_extra:.2} ms per run (median of pairs)"
    );
}
