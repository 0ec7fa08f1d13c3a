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
async fn a_daemon_removes_its_run_cgroups_when_it_exits() {
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
    let status = tokio::time::timeout(Duration::from_secs(10), client.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(
        run_cgroups_of(&parent, pid),
        Vec::<PathBuf>::new(),
        "run cgroups left behind by a daemon that exited"
    );
}
