//! The run cgroups of the process limit (issue 20, cold start): where the
//! limit takes a pids cgroup per run (a daemon run as root), the cgroups
//! made ahead of the runs, each with a resident thread, are made only
//! once a command is coming, not while the daemon starts (they competed
//! with the `initialize` reply for the CPU, and a daemon that never runs a
//! command needs none); and a daemon that exits takes its run cgroups with
//! it instead of leaving them for the next start.

use crate::harness::{self, Client};
use crate::support::fake_provider::{self as fake, FakeProvider};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use passepartout::sandbox::enforce::{process_limit, ProcessLimit};

/// The pids hierarchy where this host's runs take their cgroups, when the
/// process limit uses one (as root with a writable pids cgroup).
fn pids_parent() -> Option<PathBuf> {
    match process_limit() {
        ProcessLimit::Cgroup { parent, .. } => Some(parent),
        other => {
            eprintln!("skipped: the process limit uses no cgroup here ({other:?})");
            None
        }
    }
}

/// The run cgroups of the process `pid` (`passepartout-<pid>-<n>`).
fn run_cgroups_of(parent: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("passepartout-{pid}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(parent)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn a_daemon_makes_no_run_cgroup_before_a_command_is_coming() {
    let Some(parent) = pids_parent() else {
        return;
    };
    let home = harness::home_with_config("");
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("hello")]).await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
    let pid = client.child.id().unwrap();
    // A turn without a shell action, and time for a keeper that started
    // with the daemon to have made its cgroups (a few ms each).
    let (reply, _) = client.prompt_allowing(&session, "hi").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        run_cgroups_of(&parent, pid),
        Vec::<PathBuf>::new(),
        "run cgroups made though no command ran"
    );
}

#[tokio::test]
async fn run_cgroups_left_at_exit_are_removed_by_the_next_daemon() {
    if !harness::bwrap_available() {
        return;
    }
    let Some(parent) = pids_parent() else {
        return;
    };
    let home = harness::home_with_config("");
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "true"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
    let pid = client.child.id().unwrap();
    let (reply, _) = client.prompt_allowing(&session, "run true").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        fake.last_tool_results()[0].starts_with("exit code: 0"),
        "{:?}",
        fake.last_tool_results()
    );
    // The run took a cgroup and the keeper makes the next ones: wait until
    // it has, and until the run's own has emptied (the host reaps the
    // sandbox's last process a second or two after it ends), so that
    // every one of them can go at exit.
    let deadline = Instant::now() + Duration::from_secs(20);
    let settled = || {
        let dirs = run_cgroups_of(&parent, pid);
        dirs.len() >= 2
            && dirs.iter().all(|d| {
                std::fs::read_to_string(d.join("pids.current"))
                    .is_ok_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n <= 1))
            })
    };
    while !settled() {
        assert!(
            Instant::now() < deadline,
            "the run cgroups did not settle: {:?}",
            run_cgroups_of(&parent, pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.close_stdin();
    let exit_began = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(10), client.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status}");
    // The exit does not wait for a cgroup the kernel still holds busy:
    // whatever is left goes when the next daemon starts running commands.
    let exit_took = exit_began.elapsed();
    let left = run_cgroups_of(&parent, pid);
    eprintln!(
        "exit took {} ms, {} run cgroup(s) left for the next daemon",
        exit_took.as_millis(),
        left.len()
    );
    let fake2 = FakeProvider::start(vec![
        fake::shell_call("c2", "true"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut next, session2) = Client::with_fake(home.path(), &fake2, project.path()).await;
    let (reply, _) = next.prompt_allowing(&session2, "run true").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !run_cgroups_of(&parent, pid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "run cgroups of an exited daemon not removed by the next one: {:?}",
            run_cgroups_of(&parent, pid)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    next.close_stdin();
    let _ = tokio::time::timeout(Duration::from_secs(10), next.child.wait()).await;
}

/// Failing `rmdir`s a run cgroup may cost at most: the removal backs off
/// from 1 ms to `enforce::REMOVAL_RETRY_MAX`, so within the exit's
/// `EXIT_CLEANUP_WITHIN` a busy cgroup is tried a handful of times, not
/// every millisecond.
const FAILED_RMDIRS_PER_CGROUP: usize = 12;

/// A daemon that exits right after its shell calls, while the host has not
/// reaped the sandboxes' last processes yet (their run cgroups stay busy
/// for a second or two here), tries to remove each run cgroup a bounded
/// number of times, backing off, instead of every millisecond: counted
/// with `strace -f -e trace=rmdir` on the real daemon.
#[tokio::test]
async fn a_busy_run_cgroup_is_retried_with_a_backoff_not_a_storm() {
    if !harness::bwrap_available() {
        return;
    }
    let Some(parent) = pids_parent() else {
        return;
    };
    let strace_runs = std::process::Command::new("strace")
        .args([
            "-f",
            "--seccomp-bpf",
            "-e",
            "trace=rmdir",
            "-o",
            "/dev/null",
            "true",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !strace_runs {
        eprintln!("skipped: strace (5.3 or later, for --seccomp-bpf) cannot run here");
        return;
    }
    let home = harness::home_with_config("");
    let project = tempfile::tempdir().unwrap();
    let trace = tempfile::NamedTempFile::new().unwrap();
    let trace_path = trace.path().to_str().unwrap().to_string();
    let calls = 5;
    let mut replies: Vec<_> = (0..calls)
        .map(|i| fake::shell_call(&format!("c{i}"), "true"))
        .collect();
    replies.push(fake::openai_text("done"));
    let fake = FakeProvider::start(replies).await;
    let url = fake.openai_url();
    let mut client = Client::spawn_wrapped(
        harness::Framing::Ndjson,
        home.path(),
        // Only `rmdir` stops the daemon (--seccomp-bpf): traced like this
        // the daemon keeps its pace, which the count depends on.
        &[
            "strace",
            "-f",
            "-qq",
            "--seccomp-bpf",
            "-e",
            "trace=rmdir",
            "-o",
            &trace_path,
        ],
        &["--provider-url", &url],
    );
    client.initialize(serde_json::json!({})).await;
    let session = client.new_session(project.path()).await;
    let (reply, _) = client.prompt_allowing(&session, "run true").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let results = fake.last_tool_results();
    assert!(
        results.iter().all(|r| r.starts_with("exit code: 0")),
        "{results:?}"
    );
    // Exit at once: the cgroups the runs used are still busy.
    client.close_stdin();
    let status = tokio::time::timeout(Duration::from_secs(20), client.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status}");

    let text = std::fs::read_to_string(trace.path()).unwrap();
    let mut failed: std::collections::BTreeMap<String, usize> = Default::default();
    let mut tried = 0;
    for line in text.lines().filter(|l| l.contains("rmdir(\"")) {
        let Some(path) = line.split('"').nth(1) else {
            continue;
        };
        if !Path::new(path)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("passepartout-"))
        {
            continue;
        }
        tried += 1;
        if line.contains("= -1") {
            *failed.entry(path.to_string()).or_default() += 1;
        }
    }
    assert!(tried > 0, "no run cgroup removal was traced:\n{text}");
    let worst = failed.values().copied().max().unwrap_or(0);
    // Leftovers (still busy at the deadline) are the next daemon's to
    // remove; this test removes them once they empty.
    let leftovers: Vec<PathBuf> = failed
        .keys()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    for dir in &leftovers {
        while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        worst <= FAILED_RMDIRS_PER_CGROUP,
        "a run cgroup's removal failed {worst} times (at most {FAILED_RMDIRS_PER_CGROUP}): \
         {failed:?} (parent {})",
        parent.display()
    );
}
