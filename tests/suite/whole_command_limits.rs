//! Limits that hold for the whole command (issue 39), through the real
//! daemon, real bwrap and a scripted model:
//! - `disk_write` counts what the command wrote, wherever it wrote it — a
//!   session `/tmp` on another file system than the project (a tmpfs,
//!   `/dev/shm`) is bounded too — and nothing another program wrote to the
//!   same file system meanwhile;
//! - `memory` bounds the command's processes together (a memory cgroup of
//!   the run's own), not each alone.

use crate::harness::{self, Client, Framing};
use crate::support::fake_provider::{self as fake, FakeProvider, Reply};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

/// A temporary directory on a tmpfs (`/dev/shm`), another file system
/// than the project's and the daemon's state; None (and why) where there
/// is none.
fn tmpfs_dir() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let on_tmpfs = rustix::fs::statfs(shm).is_ok_and(|s| s.f_type == libc::TMPFS_MAGIC);
    if !on_tmpfs {
        assert!(
            !harness::under_ci(),
            "no tmpfs at /dev/shm, and CI must test a /tmp on another file system"
        );
        eprintln!("skipped: /dev/shm is not a tmpfs here");
        return None;
    }
    Some(tempfile::tempdir_in(shm).unwrap())
}

/// A daemon whose temporary directory (where the session `/tmp`s live) is
/// `tmp`, with `config`, and a session in `project`.
async fn daemon_with_tmp(
    home: &Path,
    tmp: &Path,
    project: &Path,
    script: Vec<Reply>,
) -> (FakeProvider, Client, String) {
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let tmpdir = format!("TMPDIR={}", tmp.display());
    let mut client = Client::spawn_wrapped(
        Framing::Ndjson,
        home,
        &["env", &tmpdir],
        &["--provider-url", &url],
    );
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
    (fake, client, session)
}

/// The first file named `name` under `dir`, waited for (up to 60 s).
async fn wait_for_file(dir: &Path, name: &str) -> PathBuf {
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
            let p = e.path();
            if e.file_name() == name {
                return Some(p);
            }
            if p.is_dir() && !p.is_symlink() {
                if let Some(found) = find(&p, name) {
                    return Some(found);
                }
            }
        }
        None
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(p) = find(dir, name) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never appeared under {dir:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn writing_past_the_limit_to_a_tmp_on_another_file_system_is_stopped() {
    if !harness::bwrap_available() {
        return;
    }
    let Some(tmp) = tmpfs_dir() else {
        return;
    };
    let home = harness::home_with_config(
        "shell_timeout_secs = 60\n\
         [sandbox_limits]\n\
         disk_write = \"8M\"\n\
         tmp_size = \"128M\"\n",
    );
    let project = tempfile::tempdir().unwrap();
    // 32 MiB into /tmp (the session's, on the tmpfs), then the command
    // would go on for a minute: the limit, not its end, stops it.
    let script = vec![
        fake::shell_call(
            "c1",
            "head -c 33554432 /dev/zero > /tmp/big && echo wrote && sleep 60",
        ),
        fake::openai_text("done"),
    ];
    let (fake, mut client, session) =
        daemon_with_tmp(home.path(), tmp.path(), project.path(), script).await;
    let (reply, _) = client.prompt_allowing(&session, "go").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let result = &fake.last_tool_results()[0];
    assert!(
        result.starts_with(
            "stopped: the command filled more than 8 MiB of the disk (limit `disk_write`)"
        ),
        "{result}"
    );
    assert!(
        std::fs::metadata(project.path()).is_ok(),
        "the project is still there"
    );
    client.close_stdin();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.child.wait()).await;
}

#[tokio::test]
async fn what_another_program_writes_to_the_same_file_system_does_not_count() {
    if !harness::bwrap_available() {
        return;
    }
    let Some(tmp) = tmpfs_dir() else {
        return;
    };
    let home = harness::home_with_config(
        "shell_timeout_secs = 60\n\
         [sandbox_limits]\n\
         disk_write = \"8M\"\n",
    );
    let project = tempfile::tempdir().unwrap();
    // The command writes 3 bytes, says it is running, waits for the test
    // to have written outside, and runs on for a second while the other
    // program's 32 MiB sit on the same file system (ten samples of the
    // watchdog), then ends by itself.
    let script = vec![
        fake::shell_call(
            "c1",
            "printf abc > /tmp/small && touch /tmp/started && \
             while [ ! -e /tmp/go ]; do sleep 0.02; done; sleep 1; echo finished",
        ),
        fake::openai_text("done"),
    ];
    let (fake, mut client, session) =
        daemon_with_tmp(home.path(), tmp.path(), project.path(), script).await;
    let prompt = client.prompt_allowing(&session, "go");
    let outside = async {
        let started = wait_for_file(tmp.path(), "started").await;
        // Another program, outside the sandbox, on the same tmpfs.
        std::fs::write(tmp.path().join("outside.bin"), vec![7u8; 32 << 20]).unwrap();
        std::fs::write(started.with_file_name("go"), "").unwrap();
    };
    let ((reply, _), ()) = tokio::join!(prompt, outside);
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let result = &fake.last_tool_results()[0];
    assert!(
        result.starts_with("exit code: 0") && result.contains("finished"),
        "{result}"
    );
    client.close_stdin();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.child.wait()).await;
}

#[tokio::test]
async fn three_processes_together_over_the_memory_limit_are_stopped() {
    if !harness::bwrap_available() {
        return;
    }
    use passepartout::sandbox::enforce::{memory_limit, MemoryLimit};
    if memory_limit() == MemoryLimit::PerProcess {
        assert!(
            !harness::under_ci(),
            "no memory cgroup can be made here, and CI must test the whole-command memory limit"
        );
        eprintln!(
            "skipped: no memory cgroup can be made here (no writable v1 memory hierarchy, \
             no v2 cgroup with `memory` in its subtree_control)"
        );
        return;
    }
    let home = harness::home_with_config(
        "shell_timeout_secs = 60\n\
         [sandbox_limits]\n\
         memory = \"96M\"\n",
    );
    let project = tempfile::tempdir().unwrap();
    // Three `tail`s each holding 48 MiB (each under the limit) until their
    // input ends, a minute later: together 144 MiB.
    let script = vec![
        fake::shell_call(
            "c1",
            "for i in 1 2 3; do (head -c 50331648 /dev/zero; sleep 60) | tail -c 50331648 \
             > /dev/null & done; wait; echo all done",
        ),
        fake::openai_text("done"),
    ];
    let (fake, mut client, session) = {
        let fake = FakeProvider::start(script).await;
        let (client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
        (fake, client, session)
    };
    let (reply, _) = client.prompt_allowing(&session, "go").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let result = &fake.last_tool_results()[0];
    assert!(
        result.starts_with(
            "stopped: the command's processes together used more than 96 MiB of memory \
             (limit `memory`"
        ),
        "{result}"
    );
    client.close_stdin();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.child.wait()).await;
}
