//! Issue 36, the transactions half, through the real binary, real
//! bubblewrap and a scripted model: modes, sparse files, directories,
//! ignore rules as they were before the action, and a predictable undo.

use crate::harness;
use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::Value;
use support::fake_provider::{self as fake, FakeProvider};

/// A git project with a tracked script, a tracked text file and a
/// `.gitignore` that ignores nothing of them.
pub fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let git = |args: &[&str]| harness::git(p, args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(p.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(p.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(p.join("a.txt"), "a\n").unwrap();
    std::fs::write(p.join(".gitignore"), "build/\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    dir
}

/// A session whose model makes one shell call per round, `commands` in
/// order, then says "done"; every ask answered with `answer`.
pub struct Turn {
    pub home: tempfile::TempDir,
    pub fake: FakeProvider,
    pub asked: Vec<Value>,
}

impl Turn {
    pub async fn run(project: &Path, commands: &[&str], answer: &str) -> Turn {
        Turn::run_with(project, commands, answer, "").await
    }

    /// [`Turn::run`] with `config` as the daemon's configuration file.
    pub async fn run_with(project: &Path, commands: &[&str], answer: &str, config: &str) -> Turn {
        let home = tempfile::tempdir().unwrap();
        if !config.is_empty() {
            let dir = home.path().join("config/passepartout");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("config.toml"), config).unwrap();
        }
        let mut script: Vec<_> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| fake::shell_call(&format!("call_{i}"), c))
            .collect();
        script.push(fake::openai_text("done"));
        let fake = FakeProvider::start(script).await;
        let (mut client, session) = harness::Client::with_fake(home.path(), &fake, project).await;
        let (done, asked) = client
            .prompt_answering(&session, "go", |_| answer.to_string())
            .await;
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        drop(client);
        Turn { home, fake, asked }
    }

    /// Every tool result the model was shown, in order.
    pub fn told(&self) -> String {
        self.fake.last_tool_results().join("\n---\n")
    }

    /// The asks, as one text.
    pub fn asks(&self) -> String {
        self.asked
            .iter()
            .map(std::string::ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Run the command line in `cwd` with the session's home: (ok, stdout + stderr).
    pub fn cli(&self, cwd: &Path, args: &[&str]) -> (bool, String) {
        let out = harness::cli_output(self.home.path(), cwd, args);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// `cp /bin/bash helper && chmod 4755 helper`: the copy lands without the
/// setuid bit, the result says so, and `history` shows the mode.
#[tokio::test]
async fn a_setuid_copy_lands_without_the_bit_and_says_so() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let turn = Turn::run(
        p,
        &["cp /bin/bash helper && chmod 4755 helper"],
        "allow_once",
    )
    .await;
    assert!(p.join("helper").exists(), "{}", turn.told());
    assert_eq!(mode(&p.join("helper")), 0o755, "{}", turn.told());
    let told = turn.told();
    assert!(
        told.contains("setuid"),
        "the result does not say so: {told}"
    );
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok, "{history}");
    assert!(history.contains("helper"), "{history}");
    assert!(history.contains("setuid"), "{history}");
}

/// `chmod 0777 run.sh`: the group/world write bits are not applied; the
/// result says so; a plain `chmod 0700` shows in `history` as a mode change.
#[tokio::test]
async fn group_and_world_write_bits_are_not_applied_and_modes_show() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let turn = Turn::run(p, &["chmod 0777 run.sh", "chmod 0700 a.txt"], "allow_once").await;
    assert_eq!(mode(&p.join("run.sh")), 0o755, "{}", turn.told());
    assert_eq!(mode(&p.join("a.txt")), 0o700, "{}", turn.told());
    let told = turn.fake.tool_results(1).join("\n");
    assert!(told.contains("write bits"), "{told}");
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok, "{history}");
    assert!(history.contains("a.txt  mode 0644 → 0700"), "{history}");
}

/// Ten `truncate -s 250M` land sparse on the host (with room for them
/// under `max_sparse_bytes`); under the default 1 GiB, their apparent size
/// counts: four land, the rest are not applied and the result says why.
#[tokio::test]
async fn sparse_files_are_applied_sparse_and_count_at_their_apparent_size() {
    if !harness::bwrap_available() {
        return;
    }
    const SIZE: u64 = 250 * 1024 * 1024;
    let ten = "for i in 0 1 2 3 4 5 6 7 8 9; do truncate -s 250M big$i.img; done";
    let project = project();
    let p = project.path();
    let room = "[checkpoints]\nmax_sparse_bytes = 4294967296\n";
    let turn = Turn::run_with(p, &[ten], "allow_once", room).await;
    let mut blocks = 0;
    for i in 0..10 {
        let f = p.join(format!("big{i}.img"));
        let meta = std::fs::metadata(&f).unwrap_or_else(|e| panic!("{e}: {}", turn.told()));
        assert_eq!(meta.len(), SIZE);
        blocks += meta.blocks();
    }
    assert!(
        blocks * 512 < 1024 * 1024,
        "{blocks} blocks of 512 bytes on the host"
    );

    let project = self::project();
    let p = project.path();
    let turn = Turn::run(p, &[ten], "allow_once").await;
    let landed: Vec<u64> = (0..10)
        .filter_map(|i| std::fs::metadata(p.join(format!("big{i}.img"))).ok())
        .map(|m| m.len())
        .collect();
    assert_eq!(landed.len(), 4, "{}", turn.told());
    let told = turn.told();
    assert!(told.contains("max_sparse_bytes"), "{told}");
}

/// `mkdir -p a/b/c` and a 1,392-level-deep tree are recorded; `history`
/// shows them and `undo` removes them.
#[tokio::test]
async fn created_directories_are_recorded_and_undone() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let turn = Turn::run(p, &["mkdir -p a/b/c"], "allow_once").await;
    assert!(p.join("a/b/c").is_dir(), "{}", turn.told());
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok && history.contains("+ a/b/c/"), "{history}");
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert!(!p.join("a").exists(), "{out}");

    let deep = "d/".repeat(1392);
    let command = format!("mkdir -p {deep}");
    let turn = Turn::run(p, &[command.as_str()], "allow_once").await;
    assert!(p.join(&deep).is_dir(), "{}", turn.told());
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert!(!p.join("d").exists(), "{out}");
}

/// The `.gitignore` flip: action 1 adds a tracked file to `.gitignore`,
/// action 2 empties it. Its pre-image is kept and `undo` brings it back.
#[tokio::test]
async fn the_gitignore_flip_is_undoable() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    // Uncommitted work larger than what an ignored tree's pre-image keeps.
    let work = "my uncommitted work\n".repeat(20_000);
    std::fs::write(p.join("a.txt"), &work).unwrap();
    let turn = Turn::run(p, &["echo a.txt >> .gitignore", ": > a.txt"], "allow_once").await;
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "");
    let (ok, history) = turn.cli(p, &["history"]);
    assert!(ok && history.contains("~ a.txt"), "{history}");
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert!(
        std::fs::read_to_string(p.join("a.txt")).unwrap() == work,
        "not brought back: {out}"
    );
}

/// The flip with a file git does not track: action 1 adds the person's
/// untracked notes to `.gitignore`, action 2 empties them. A file ignored
/// by its own name keeps its pre-image (not only 256 KiB of it), so undo
/// brings it back.
#[tokio::test]
async fn the_gitignore_flip_of_an_untracked_file_is_undoable() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let notes = "draft paragraph\n".repeat(40_000);
    std::fs::write(p.join("notes.md"), &notes).unwrap();
    let turn = Turn::run(
        p,
        &["echo notes.md >> .gitignore", ": > notes.md"],
        "allow_once",
    )
    .await;
    assert_eq!(std::fs::read_to_string(p.join("notes.md")).unwrap(), "");
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok, "{out}");
    assert!(
        std::fs::read_to_string(p.join("notes.md")).unwrap() == notes,
        "not brought back: {out}"
    );
}

/// `undo` after an action that changed only refs (`git checkout -b x`)
/// names what it undoes, and never re-applies a change just undone.
#[tokio::test]
async fn undo_after_a_refs_only_action_names_what_it_undoes() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let turn = Turn::run(p, &["echo changed > a.txt"], "allow_once").await;
    let (ok, out) = turn.cli(p, &["undo"]);
    assert!(ok && out.contains("undid c1"), "{out}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
    let home = turn.home;
    // The next action, in a new session of the same home, changes refs only.
    let fake = FakeProvider::start(vec![
        fake::shell_call("call_x", "git checkout -q -b x"),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = harness::Client::with_fake(home.path(), &fake, p).await;
    let (done, _) = client
        .prompt_answering(&session, "go", |_| "allow_once".into())
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    drop(client);
    let out = harness::cli_output(home.path(), p, &["undo"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The undo does not redo `echo changed > a.txt`.
    assert_eq!(
        std::fs::read_to_string(p.join("a.txt")).unwrap(),
        "a\n",
        "{text}"
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ref x"), "{text}");
    let head = std::fs::read_to_string(p.join(".git/HEAD")).unwrap();
    assert_eq!(head.trim(), "ref: refs/heads/main", "{text}");
}
