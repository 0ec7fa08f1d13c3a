//! Transactional actions (issue 23) through the real binary, real
//! bubblewrap and the fake provider: a command runs into an overlay, and
//! only its own changeset — never what the person does in the project
//! meanwhile — is judged, applied and undone.
//!
//! The person's concurrent edits are made from the test while the fake
//! model's command sleeps (after the call's `in_progress` update, which is
//! sent just before the command starts, and a short pause: the command
//! starts only once the coarse clock has ticked past the action's start).

use crate::harness;
use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use harness::{prompt, Client};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

/// A git project: two text files, a data folder of 24 files (deleting them
/// all is a bulk delete), and a private `.env` the project ignores.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let git = |args: &[&str]| harness::git(p, args);
    git(&["init", "-q"]);
    std::fs::write(p.join("a.txt"), "a\n").unwrap();
    std::fs::write(p.join("b.txt"), "b\n").unwrap();
    std::fs::write(p.join("notes.txt"), "my notes\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".env\n").unwrap();
    std::fs::create_dir_all(p.join("data")).unwrap();
    for i in 0..24 {
        std::fs::write(p.join(format!("data/{i:02}.txt")), format!("row {i}\n")).unwrap();
    }
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    std::fs::write(p.join(".env"), "SECRET=1\n").unwrap();
    std::fs::set_permissions(p.join(".env"), std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

/// The site-packages folder of [`project_with_ignored_venv`]'s `.venv`,
/// where Python runs `.pth` files from.
const VENV_SITE: &str = ".venv/lib/python3.11/site-packages";

/// [`project`] whose `.gitignore` also ignores `.venv/` and
/// `node_modules/`, with a virtualenv: an empty [`VENV_SITE`] and a
/// `.venv/pyvenv.cfg`.
fn project_with_ignored_venv() -> tempfile::TempDir {
    let project = project();
    let p = project.path();
    std::fs::write(p.join(".gitignore"), ".env\n.venv/\nnode_modules/\n").unwrap();
    std::fs::create_dir_all(p.join(VENV_SITE)).unwrap();
    std::fs::write(p.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    project
}

/// Every file of the work tree (not `.git`) with its bytes and mode.
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Vec<u8>, u32)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(root, &path, out);
            } else {
                let mode = meta.permissions().mode() & 0o7777;
                out.insert(rel, (std::fs::read(&path).unwrap(), mode));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

struct Run {
    _home: tempfile::TempDir,
    fake: FakeProvider,
    client: Client,
    session: String,
    prompt_id: u64,
}

/// Start a turn whose model runs `command` with the shell tool, and return
/// once the command is running (text-gate asks before it are allowed).
async fn running(project: &Path, command: &str) -> Run {
    let args = json!({ "command": command }).to_string();
    running_calls(project, &[("call_t", "shell", &args)], |_| {}).await
}

/// Start a turn whose model makes `calls` (id, tool, arguments) in one
/// answer, with `prepare` run on the daemon's home first (user skills go
/// there), and return once the first call is running.
async fn running_calls(
    project: &Path,
    calls: &[(&str, &str, &str)],
    prepare: impl FnOnce(&Path),
) -> Run {
    let home = tempfile::tempdir().unwrap();
    prepare(home.path());
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(calls),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project).await;
    let prompt_id = client
        .start_request("session/prompt", prompt(&session, "go"))
        .await;
    loop {
        let msg = client
            .wait_for(|v| {
                v["method"] == "session/request_permission"
                    || (v["method"] == "session/update"
                        && v["params"]["update"]["status"] == "in_progress")
            })
            .await;
        if msg["method"] != "session/request_permission" {
            break;
        }
        client.answer(&msg, "allow_once").await;
    }
    // The update comes just before the command is started, and the command
    // starts only once the kernel's coarse clock has ticked past the
    // action's start (≤ 4 ms here): what the person does before that is
    // the state the command begins from. Edits meant as concurrent come
    // after.
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    Run {
        _home: home,
        fake,
        client,
        session,
        prompt_id,
    }
}

impl Run {
    /// Answer every further permission request with `option`; the asks.
    async fn finish(&mut self, option: &str) -> Vec<Value> {
        let id = self.prompt_id;
        let mut asked = Vec::new();
        loop {
            let msg = self
                .client
                .wait_for(|v| {
                    (v["id"] == json!(id) && v.get("method").is_none())
                        || v["method"] == "session/request_permission"
                })
                .await;
            if msg["method"] != "session/request_permission" {
                assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
                return asked;
            }
            self.client.answer(&msg, option).await;
            asked.push(msg);
        }
    }

    fn told(&self) -> String {
        self.fake.last_tool_results().pop().expect("a tool result")
    }

    /// Run the `passepartout` command line in `cwd` with the daemon's home.
    fn cli(&self, cwd: &Path, args: &[&str]) -> std::process::Output {
        harness::cli_output(self._home.path(), cwd, args)
    }

    async fn history(&mut self, cwd: &Path) -> Value {
        let _ = &self.session;
        self.client
            .request("_passepartout/history", json!({ "cwd": cwd }))
            .await
    }
}

/// Issue 23, item 1: the person edits `b.txt` and creates `my-draft.txt`
/// while the agent's command sleeps. The checkpoint holds only the agent's
/// `a.txt`, and undo reverts only that.
#[tokio::test]
async fn a_persons_edits_while_a_command_runs_are_not_the_agents() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let mut run = running(p, "sleep 2; echo agent > a.txt").await;
    std::fs::write(p.join("b.txt"), "the person's b\n").unwrap();
    std::fs::write(p.join("my-draft.txt"), "draft\n").unwrap();
    let asked = run.finish("reject_once").await;
    assert!(asked.is_empty(), "nothing to ask about: {asked:?}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "agent\n");
    let h = run.history(p).await;
    let effect = &h["result"]["checkpoints"][0]["effect"];
    assert_eq!(effect["modified"], json!(["a.txt"]), "{h}");
    assert_eq!(effect["created"], json!([]), "{h}");
    assert!(
        run.told().contains("changed 1 file: +0 ~1 −0"),
        "{}",
        run.told()
    );

    let r = run
        .client
        .request("_passepartout/undo", json!({ "cwd": p }))
        .await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "the person's b\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("my-draft.txt")).unwrap(),
        "draft\n"
    );
}

/// Issue 23, item 2: the person rewrites the ignored-but-precious `.env`
/// and empties `notes.txt` during the command. Neither is blamed on the
/// agent: nothing is held, nothing rolled back, nothing asked.
#[tokio::test]
async fn a_persons_env_rewrite_is_not_blamed_on_the_agent() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let mut run = running(p, "sleep 2; echo agent > a.txt").await;
    std::fs::write(p.join(".env"), "SECRET=mine\n").unwrap();
    std::fs::write(p.join("notes.txt"), "").unwrap();
    // Rejecting any ask would lose the person's edits if they were blamed.
    let asked = run.finish("reject_once").await;
    assert!(
        asked.is_empty(),
        "the person's edits were judged: {asked:?}"
    );
    assert_eq!(
        std::fs::read_to_string(p.join(".env")).unwrap(),
        "SECRET=mine\n"
    );
    assert_eq!(std::fs::read_to_string(p.join("notes.txt")).unwrap(), "");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "agent\n");
    let told = run.told();
    assert!(
        !told.contains(".env") && !told.contains("notes.txt"),
        "{told}"
    );
}

/// Issue 23, item 3: the agent appends to a 0600 `.env` (held: precious),
/// it is applied on approval still 0600, and undo puts it back 0600.
#[tokio::test]
async fn a_private_env_stays_private_through_apply_and_undo() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let mut run = running(p, "echo MORE=1 >> .env").await;
    let asked = run.finish("allow_once").await;
    assert!(
        asked
            .iter()
            .any(|a| a["params"]["toolCall"]["rawInput"]["op"] == "apply_checkpoint"),
        "a precious file's change is held: {asked:?}"
    );
    let mode = |p: &Path| {
        std::fs::metadata(p.join(".env"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        std::fs::read_to_string(p.join(".env")).unwrap(),
        "SECRET=1\nMORE=1\n"
    );
    assert_eq!(mode(p), 0o600);
    let r = run
        .client
        .request("_passepartout/undo", json!({ "cwd": p }))
        .await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(
        std::fs::read_to_string(p.join(".env")).unwrap(),
        "SECRET=1\n"
    );
    assert_eq!(mode(p), 0o600);
}

/// A held changeset has touched nothing: while the command runs, while
/// the person decides, and after a rejection the project is byte for byte
/// (and mode for mode) what it was.
#[tokio::test]
async fn a_held_changeset_leaves_the_project_byte_identical() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let original = tree(p);
    // A quota too small for the pre-images makes the bulk delete a loss
    // (contained, it would be undoable and run unasked).
    let marker = format!(
        "removed-{}-{}",
        std::process::id(),
        p.file_name().unwrap().to_string_lossy()
    );
    let args = json!({
        "command": format!("for f in data/*; do rm \"$f\"; done; echo x > a.txt; touch /tmp/{marker}; sleep 2")
    })
    .to_string();
    let mut run = running_calls(p, &[("call_t", "shell", &args)], |home| {
        let dir = home.join("config/passepartout");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            "[checkpoints]\nmax_store_bytes = 1\n",
        )
        .unwrap();
    })
    .await;
    // The command has removed the files (in its overlay) and still runs.
    wait_for_session_tmp_file(&marker).await;
    assert_eq!(tree(p), original, "while the command runs");
    let ask = run
        .client
        .wait_for(|v| {
            v["method"] == "session/request_permission"
                && v["params"]["toolCall"]["rawInput"]["op"] == "apply_checkpoint"
        })
        .await;
    assert_eq!(tree(p), original, "while the plan waits");
    let why = ask["params"]["toolCall"]["content"].to_string();
    assert!(why.contains("effect-loss"), "{why}");
    let shown: String = run
        .client
        .updates("tool_call_update")
        .into_iter()
        .filter(|u| u["status"] == "pending")
        .map(|u| u["content"].to_string())
        .collect();
    assert!(shown.contains("the project was not touched"), "{shown}");
    run.client.answer(&ask, "reject_once").await;
    run.finish("reject_once").await;
    assert_eq!(tree(p), original, "after the rejection");
    let h = run.history(p).await;
    assert_eq!(h["result"]["checkpoints"][0]["status"], "rejected", "{h}");
}

/// The agent and the person change the same file: the person's version is
/// kept (never overwritten), the conflict is named, the agent's other
/// change is applied.
#[tokio::test]
async fn a_file_the_person_changed_meanwhile_is_a_conflict_not_overwritten() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let mut run = running(p, "sleep 2; echo agent > a.txt; echo agent > b.txt").await;
    std::fs::write(p.join("b.txt"), "the person's b\n").unwrap();
    let asked = run.finish("reject_once").await;
    assert!(asked.is_empty(), "{asked:?}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "agent\n");
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "the person's b\n"
    );
    let told = run.told();
    assert!(
        told.contains("Conflict") && told.contains("b.txt"),
        "{told}"
    );
    let h = run.history(p).await;
    assert_eq!(
        h["result"]["checkpoints"][0]["effect"]["modified"],
        json!(["a.txt"]),
        "{h}"
    );
}

/// `rm -r` of a folder tree removes the folders too, not only their files;
/// a folder the person put a file into meanwhile keeps it.
#[tokio::test]
async fn a_removed_folder_tree_is_gone_and_a_persons_new_file_keeps_its_folder() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    for d in ["build/a/b", "build/c", "logs/old"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join("build/a/b/out.o"), "obj\n").unwrap();
    std::fs::write(p.join("logs/old/1.log"), "log\n").unwrap();
    let mut run = running(p, "sleep 2; rm -r build logs/old").await;
    std::fs::write(p.join("logs/old/mine.txt"), "the person's\n").unwrap();
    run.finish("allow_once").await;
    assert!(
        !p.join("build").exists(),
        "the removed tree stays: {:?}",
        tree(p)
    );
    assert!(!p.join("logs/old/1.log").exists());
    assert_eq!(
        std::fs::read_to_string(p.join("logs/old/mine.txt")).unwrap(),
        "the person's\n"
    );
}

/// Issue 24 item 4: a `.pth` file written into an ignored `.venv` (which
/// checkpoints never record) is asked about before it reaches the project;
/// rejected, it never does.
#[tokio::test]
async fn a_pth_file_in_an_ignored_venv_is_asked_about_and_rejected_stays_out() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project_with_ignored_venv();
    let p = project.path();
    let site = VENV_SITE;
    let mut run = running(
        p,
        &format!("echo 'import os' > {site}/zz_hook.pth; echo ok > {site}/plain.txt"),
    )
    .await;
    let asked = run.finish("reject_once").await;
    let shown = asked
        .iter()
        .map(std::string::ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(shown.contains("zz_hook.pth"), "not asked about: {shown}");
    assert!(!p.join(site).join("zz_hook.pth").exists());
}

/// Issue 24 item 5: a file name the agent chose with terminal controls in
/// it (erase the line above, write the clipboard) is shown escaped by
/// `passepartout history`, never obeyed.
#[tokio::test]
async fn history_shows_an_agent_chosen_file_name_escaped() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let mut run = running(
        p,
        "touch \"$(printf 'x\\033[1A\\033[2Ky\\033]52;c;aGk=\\007.txt')\"",
    )
    .await;
    run.finish("allow_once").await;
    let planted = std::fs::read_dir(p)
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().contains('\x1b'));
    assert!(planted, "the command made no such file: {:?}", tree(p));
    let out = run.cli(p, &["history"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("+ x\\x1b[1A\\x1b[2Ky"), "{text}");
    assert!(
        !out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07),
        "{text:?}"
    );
}

/// Issue 24 item 4, the rest: what a command writes into ignored trees
/// (`.venv`, `node_modules`) is recorded. `passepartout history` lists it,
/// marked as ignored-tree writes and escaped like every name; `undo`
/// removes what the action created there and puts back the small file it
/// overwrote, and leaves the folders that were there before.
#[tokio::test]
async fn writes_into_ignored_trees_are_listed_by_history_and_undone() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project_with_ignored_venv();
    let p = project.path();
    let site = VENV_SITE;
    let command = format!(
        "mkdir -p node_modules/pkg && echo 'module.exports = 1' > node_modules/pkg/index.js \
         && echo /opt/extra > {site}/extra.pth && echo 'home = /tmp/planted' > .venv/pyvenv.cfg \
         && touch \"node_modules/$(printf 'e\\033[2Kx')\""
    );
    let mut run = running(p, &command).await;
    // The `.pth` file is asked about (a runtime would run it); approved.
    run.finish("allow_once").await;
    assert!(p.join("node_modules/pkg/index.js").exists());
    assert!(p.join(site).join("extra.pth").exists());
    assert_eq!(
        std::fs::read_to_string(p.join(".venv/pyvenv.cfg")).unwrap(),
        "home = /tmp/planted\n"
    );

    let out = run.cli(p, &["history"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    for line in [
        "+ node_modules/pkg/index.js  [ignored tree, 19 bytes]".to_string(),
        format!("+ {site}/extra.pth  [ignored tree, 11 bytes]"),
        "~ .venv/pyvenv.cfg  [ignored tree, 20 bytes]".to_string(),
        "+ node_modules/e\\x1b[2Kx  [ignored tree, 0 bytes]".to_string(),
    ] {
        assert!(text.contains(&line), "{line:?} not in:\n{text}");
    }
    assert!(!out.stdout.contains(&0x1b), "{text:?}");

    let out = run.cli(p, &["undo"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text} {:?}", out.stderr);
    assert!(text.contains("undid c1"), "{text}");
    assert!(!p.join("node_modules").exists(), "{:?}", tree(p).keys());
    assert!(!p.join(site).join("extra.pth").exists());
    assert!(p.join(site).is_dir(), "a folder that was there stays");
    assert_eq!(
        std::fs::read_to_string(p.join(".venv/pyvenv.cfg")).unwrap(),
        "home = /usr/bin\n"
    );
}

/// Wait until a command has made `name` in its session's `/tmp` (a
/// directory `passepartout::sandbox::session_tmp` keeps on the host).
async fn wait_for_session_tmp_file(name: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let prefix = passepartout::sandbox::session_tmp::DIR_PREFIX;
    loop {
        let found = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|d| d.file_name().to_string_lossy().starts_with(prefix))
            .filter_map(|d| std::fs::read_dir(d.path()).ok())
            .flatten()
            .filter_map(Result::ok)
            .any(|session| session.path().join(name).exists());
        if found {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never made /tmp/{name}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Issue 23: the command appends to `b.txt`, then the person deletes
/// `b.txt` while the command still runs. The agent's write is a conflict,
/// not a creation: the person's deletion stands.
#[tokio::test]
async fn a_file_the_person_deleted_meanwhile_is_a_conflict_not_recreated() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    // The command says when it has written b.txt (into its overlay): a
    // file in its /tmp, which is a directory of the daemon's on the host.
    let marker = format!(
        "wrote-{}-{}",
        std::process::id(),
        p.file_name().unwrap().to_string_lossy()
    );
    let mut run = running(
        p,
        &format!("echo agent >> b.txt; echo agent > a.txt; touch /tmp/{marker}; sleep 3"),
    )
    .await;
    wait_for_session_tmp_file(&marker).await;
    std::fs::remove_file(p.join("b.txt")).unwrap();
    let asked = run.finish("reject_once").await;
    assert!(asked.is_empty(), "{asked:?}");
    assert!(
        !p.join("b.txt").exists(),
        "the person's deletion was undone: {:?}",
        std::fs::read_to_string(p.join("b.txt"))
    );
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "agent\n");
    let told = run.told();
    assert!(
        told.contains("Conflict") && told.contains("b.txt (deleted in the project"),
        "{told}"
    );
}

/// Issue 23: the person saves `b.txt` right before approving a command
/// that appends to it — within the same tick of the kernel's coarse clock
/// (4 ms here) as the action's start, more often than not. That is the
/// state the command began from, not a concurrent change: every round's
/// append is applied, none is a conflict.
#[tokio::test]
async fn a_change_just_before_the_action_starts_is_not_a_conflict() {
    if !harness::bwrap_available() {
        return;
    }
    const ROUNDS: usize = 6;
    let project = project();
    let p = project.path();
    let home = tempfile::tempdir().unwrap();
    // `rm -rf` is asked about (the person's own rule): the person answers
    // right after saving.
    harness::ask_before_recursive_deletes(home.path());
    let calls: Vec<(String, String)> = (0..ROUNDS)
        .map(|i| {
            let command = format!("rm -rf gone-{i}; echo agent {i} >> b.txt");
            (
                format!("call_{i}"),
                json!({ "command": command }).to_string(),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "shell", args.as_str()))
        .collect();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&calls),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, p).await;
    let id = client
        .start_request("session/prompt", prompt(&session, "go"))
        .await;
    let mut round = 0;
    loop {
        let msg = client
            .wait_for(|v| {
                (v["id"] == json!(id) && v.get("method").is_none())
                    || v["method"] == "session/request_permission"
            })
            .await;
        if msg["method"] != "session/request_permission" {
            assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
            break;
        }
        std::fs::write(p.join("b.txt"), format!("person {round}\n")).unwrap();
        client.answer(&msg, "allow_once").await;
        round += 1;
    }
    assert_eq!(round, ROUNDS);
    let told = fake.last_tool_results();
    assert_eq!(told.len(), ROUNDS, "{told:?}");
    for t in &told {
        assert!(!t.contains("Conflict"), "{t}");
    }
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        format!("person {}\nagent {}\n", ROUNDS - 1, ROUNDS - 1)
    );
}

/// Issue 23: folders a command removed — empty ones, and the empty ones
/// inside a removed tree — come back with undo, with their permissions.
#[tokio::test]
async fn empty_folders_a_command_removed_come_back_with_undo() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    std::fs::create_dir(p.join("empty")).unwrap();
    std::fs::set_permissions(p.join("empty"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(p.join("logs/old")).unwrap();
    std::fs::write(p.join("logs/keep.txt"), "kept\n").unwrap();
    let mut run = running(p, "rmdir empty; rm -r logs; echo agent > a.txt").await;
    run.finish("allow_once").await;
    assert!(!p.join("empty").exists());
    assert!(!p.join("logs").exists());
    let r = run
        .client
        .request("_passepartout/undo", json!({ "cwd": p }))
        .await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
    assert_eq!(
        std::fs::read_to_string(p.join("logs/keep.txt")).unwrap(),
        "kept\n"
    );
    assert!(p.join("logs/old").is_dir(), "{:?}", tree(p).keys());
    assert!(p.join("empty").is_dir());
    let mode = std::fs::metadata(p.join("empty"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// A user skill whose tool declares `long_running` (a dev server).
const DEV_SERVER_SKILL: &str = "#+SKILL: devserver\n#+DESCRIPTION: a dev server\n\n\
* serve :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:END:\n\
Start the dev server: it keeps running and shows its writes while it runs.\n\n\
| name | type | required | description |\n\
|------+------+----------+-------------|\n\
| long_running | boolean | no | it keeps running |\n\n\
#+begin_src bash\necho live > live.txt; sleep 3\n#+end_src\n";

/// Issue 23: a tool that says it is long-running runs without the overlay
/// — its writes reach the project while it runs — and is marked so in its
/// result and in `passepartout history`.
#[tokio::test]
async fn a_long_running_command_writes_live_and_is_marked() {
    if !harness::bwrap_available() {
        return;
    }
    let project = project();
    let p = project.path();
    let args = json!({ "long_running": true });
    let mut run = running_calls(p, &[("call_s", "serve", &args.to_string())], |home| {
        let skills = home.join("config/passepartout/skills");
        std::fs::create_dir_all(&skills).unwrap();
        std::fs::write(skills.join("devserver.org"), DEV_SERVER_SKILL).unwrap();
    })
    .await;
    // While it runs, its write is already in the project.
    let mut live = false;
    for _ in 0..40 {
        if p.join("live.txt").exists() {
            live = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        live,
        "the long-running command's write is not visible while it runs"
    );
    run.finish("allow_once").await;
    let told = run.told();
    assert!(
        told.contains("long-running: ran without an overlay"),
        "{told}"
    );
    let out = run.cli(p, &["history"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("serve") && text.contains("long-running"),
        "{text}"
    );
    assert!(text.contains("+ live.txt"), "{text}");
}

/// Issue 23: an edit through the client's file system (ACP
/// `fs/write_text_file`, the editor saves it) is recorded as a one-file
/// changeset: `history` names that file only — not what the person saved
/// in the editor meanwhile — and undo puts it back, 0600 as 0600.
#[tokio::test]
async fn a_client_fs_write_is_a_one_file_changeset_that_undo_reverts() {
    let project = project();
    let p = project.path();
    std::fs::set_permissions(p.join("notes.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::write_call("w1", "notes.txt", "the agent's notes\n"),
        fake::openai_text("done"),
    ])
    .await;
    let url = fake.openai_url();
    let mut c = Client::spawn(
        harness::Framing::Ndjson,
        home.path(),
        &["--provider-url", &url, "--model", "fake"],
    );
    let caps = json!({ "fs": { "readTextFile": true, "writeTextFile": true } });
    let r = c
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": caps }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let sid = c.new_session(p).await;
    let id = c.start_request("session/prompt", prompt(&sid, "go")).await;
    let mut writes = 0;
    loop {
        let msg = c.read().await.expect("daemon closed its output");
        if msg["id"] == json!(id) && msg.get("method").is_none() {
            assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
            break;
        }
        match msg["method"].as_str().unwrap_or_default() {
            "session/request_permission" => c.answer(&msg, "allow_once").await,
            "fs/write_text_file" => {
                // The editor saves the agent's buffer — and, meanwhile, the
                // person's own buffer of b.txt.
                let path = msg["params"]["path"].as_str().unwrap();
                std::fs::write(path, msg["params"]["content"].as_str().unwrap()).unwrap();
                std::fs::write(p.join("b.txt"), "the person's b\n").unwrap();
                writes += 1;
                c.respond(&msg["id"], json!({})).await;
            }
            _ => c.backlog.push(msg),
        }
    }
    assert_eq!(writes, 1);
    let h = c
        .request("_passepartout/history", json!({ "cwd": p }))
        .await;
    let effect = &h["result"]["checkpoints"][0]["effect"];
    assert_eq!(effect["modified"], json!(["notes.txt"]), "{h}");
    assert_eq!(effect["created"], json!([]), "{h}");
    let r = c.request("_passepartout/undo", json!({ "cwd": p })).await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(
        std::fs::read_to_string(p.join("notes.txt")).unwrap(),
        "my notes\n"
    );
    let mode = std::fs::metadata(p.join("notes.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        std::fs::read_to_string(p.join("b.txt")).unwrap(),
        "the person's b\n"
    );
}
