//! The sandbox's process limit (issue 20): it binds for a daemon running
//! as a user (RLIMIT_NPROC in the run's own user namespace) and as root (a
//! pids cgroup of the run's own, joined before exec), the result names it
//! when a run reaches it. What it costs a tool call is measured by
//! `examples/bench_sandbox.rs`, not asserted here (timings belong in
//! benchmarks).

use crate::harness;
use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use harness::{Client, Framing};
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

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
    harness::wait_until_none_left(b"perl\0-e\0fork while 1", Duration::from_secs(5)).await;
}
