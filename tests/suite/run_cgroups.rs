//! The run cgroups (pids, memory) of a daemon run as root: made when a run
//! starts, never before a command comes; removed after it, and those
//! still busy when their daemon exits (the host reaps the sandbox's last
//! process a moment after bwrap ends) are removed by the next daemon,
//! never waited for at exit.

use crate::harness::{self, Client};
use crate::support::fake_provider::{self as fake, FakeProvider};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use passepartout::sandbox::enforce::{memory_limit, process_limit, MemoryLimit, ProcessLimit};

/// The hierarchies where this host's runs take their cgroups (pids, when
/// the process limit uses one, as root with a writable pids cgroup; memory,
/// when a memory cgroup can be made).
fn parents() -> Vec<PathBuf> {
    let mut found = Vec::new();
    match process_limit() {
        ProcessLimit::Cgroup { parent, .. } => found.push(parent),
        other => eprintln!("the process limit uses no cgroup here ({other:?})"),
    }
    if let MemoryLimit::Cgroup { parent, .. } = memory_limit() {
        if !found.contains(&parent) {
            found.push(parent);
        }
    }
    if found.is_empty() {
        // A daemon run as a user keeps its process limit in a user
        // namespace and may have no memory cgroup: nothing to test.
        eprintln!("skipped: no run cgroups are made here");
    }
    found
}

/// The run cgroups of the process `pid` (`passepartout-<pid>-<n>`) under
/// each of `parents`.
fn run_cgroups_of(parents: &[PathBuf], pid: u32) -> Vec<PathBuf> {
    let prefix = format!("passepartout-{pid}-");
    let mut found: Vec<PathBuf> = parents
        .iter()
        .flat_map(|parent| std::fs::read_dir(parent).unwrap())
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn a_daemon_makes_no_run_cgroup_before_a_command_is_coming() {
    let parents = parents();
    if parents.is_empty() {
        return;
    }
    let home = harness::home_with_config("");
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("hello")]).await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
    let pid = client.child.id().unwrap();
    let (reply, _) = client.prompt_allowing(&session, "hi").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert_eq!(
        run_cgroups_of(&parents, pid),
        Vec::<PathBuf>::new(),
        "run cgroups made though no command ran"
    );
}

/// A pid no process has now: that of a child that has exited and been
/// reaped (the kernel hands pids out in order, so it stays free for a
/// while).
fn a_dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[tokio::test]
async fn run_cgroups_left_by_a_gone_daemon_are_removed_by_the_next_one() {
    if !harness::bwrap_available() {
        return;
    }
    let parents = parents();
    if parents.is_empty() {
        return;
    }
    // What a daemon that exited while its last run's cgroups were busy
    // (or that was killed) leaves behind.
    let dead = a_dead_pid();
    let stale: Vec<PathBuf> = parents
        .iter()
        .map(|p| p.join(format!("passepartout-{dead}-0")))
        .collect();
    for dir in &stale {
        std::fs::create_dir(dir).unwrap();
    }
    let home = harness::home_with_config("");
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "true"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
    let (reply, _) = client.prompt_allowing(&session, "run true").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    assert!(
        fake.last_tool_results()[0].starts_with("exit code: 0"),
        "{:?}",
        fake.last_tool_results()
    );
    // Removed before the daemon's first run cgroup was made, so by now.
    let left: Vec<&PathBuf> = stale.iter().filter(|d| d.exists()).collect();
    for dir in &left {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(left.is_empty(), "stale run cgroups not removed: {left:?}");
    client.close_stdin();
    let status = tokio::time::timeout(Duration::from_secs(10), client.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// Failing `rmdir`s a run cgroup may cost at most: one after its run,
/// `enforce::REMOVAL_TRIES` in the background, backing off, and one at
/// exit, which waits for none.
const FAILED_RMDIRS_PER_CGROUP: usize = 12;

/// A daemon that exits right after its shell calls, while the host has not
/// reaped the sandboxes' last processes yet (their run cgroups stay busy
/// for a moment), tries to remove each run cgroup a bounded number of
/// times, backing off, instead of every millisecond, and does not wait at
/// exit: counted with `strace -f -e trace=rmdir` on the real daemon.
#[tokio::test]
async fn a_busy_run_cgroup_is_retried_with_a_backoff_not_a_storm() {
    if !harness::bwrap_available() {
        return;
    }
    let parents = parents();
    if parents.is_empty() {
        return;
    }
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
         {failed:?} (under {parents:?})"
    );
}
