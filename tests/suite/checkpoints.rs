//! Checkpoints end to end through the real binary, the real bubblewrap
//! sandbox and the fake provider: a destructive command is *observed* — its
//! effect on the working tree is held and rolled back, shown to the person as
//! a diff, applied exactly on approval, and undone byte for byte.
//!
//! The text gates may already ask before these commands run (they are
//! destructive on their face); the tests approve that first ask as an ACP
//! client would (`allow_once`) and then assert that the *effect* stage holds
//! the change a second time, with the project intact, as a
//! `checkpoint`/`apply_checkpoint` permission request.
//!
//! Contained (issue 36), deleting or emptying project files is undoable
//! and runs unasked (`tests/suite/consequences.rs`); these tests give the
//! checkpoint store a quota too small for any pre-image
//! ([`tiny_quota`]), so the same change is a loss undo cannot promise to
//! restore and is held (`effect-loss`).

use crate::harness;
use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

/// A git project with sources, a README and enough data files that deleting
/// them all is a bulk delete.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let git = |args: &[&str]| harness::git(p, args);
    git(&["init", "-q"]);
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::create_dir_all(p.join("data")).unwrap();
    std::fs::write(p.join("src/main.rs"), "fn main() {\n    lib::run();\n}\n").unwrap();
    std::fs::write(
        p.join("src/lib.rs"),
        "pub fn run() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(p.join("README.md"), "# demo\n").unwrap();
    std::fs::write(p.join("logo.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    for i in 0..24 {
        std::fs::write(p.join(format!("data/{i:02}.txt")), format!("row {i}\n")).unwrap();
    }
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    dir
}

/// Every file of the work tree (not `.git`) with its bytes.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if rel == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A configuration whose checkpoint quota (`max_store_bytes`) holds no
/// pre-image: deleting or emptying a project file is held as a loss.
fn tiny_quota(home: &Path) {
    let dir = home.join("config/passepartout");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[checkpoints]\nmax_store_bytes = 1\n",
    )
    .unwrap();
}

struct Held {
    _home: tempfile::TempDir,
    project: tempfile::TempDir,
    fake: FakeProvider,
    client: Client,
    session: String,
    prompt_id: u64,
    /// The effect stage's permission request.
    ask: Value,
    original: BTreeMap<String, Vec<u8>>,
}

/// Run `command` through the shell tool and stop at the effect stage's ask.
async fn held(command: &str) -> Held {
    held_in(project(), command).await
}

async fn held_in(project: tempfile::TempDir, command: &str) -> Held {
    let home = tempfile::tempdir().unwrap();
    tiny_quota(home.path());
    let original = tree(project.path());
    let args = json!({ "command": command }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_x", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, session) = Client::with_fake(home.path(), &fake, project.path()).await;
    let prompt_id = client
        .start_request("session/prompt", prompt(&session, "clean up"))
        .await;
    loop {
        let ask = client.wait_method("session/request_permission").await;
        let input = &ask["params"]["toolCall"]["rawInput"];
        if input["op"] == "apply_checkpoint" {
            return Held {
                _home: home,
                project,
                fake,
                client,
                session,
                prompt_id,
                ask,
                original,
            };
        }
        // The text gates asked before the command ran: the project must be
        // untouched so far; let it run so the effect stage can judge.
        assert_eq!(tree(project.path()), original);
        client.answer(&ask, "allow_once").await;
    }
}

/// The model's tool result (the last tool message of the last request).
fn tool_result(fake: &FakeProvider) -> String {
    fake.last_tool_results().pop().expect("a tool message")
}

async fn decide(h: &mut Held, option: &str) {
    let ask = h.ask.clone();
    h.client.answer(&ask, option).await;
    let done = h.client.wait_response(h.prompt_id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
}

/// The final `tool_call_update` of the call (the last one with a status
/// of completed or failed).
fn final_update(client: &Client) -> Value {
    client
        .updates("tool_call_update")
        .into_iter()
        .rev()
        .find(|u| u["status"] == "completed" || u["status"] == "failed")
        .expect("a final tool_call_update")
}

async fn undo(client: &mut Client, cwd: &Path) -> Value {
    client
        .request("_passepartout/undo", json!({ "cwd": cwd }))
        .await
}

/// The three destructive commands from the issue, approved and undone.
async fn held_approved_undone(command: &str, gone: &[&str], emptied: &[&str]) {
    if !harness::bwrap_available() {
        return;
    }
    let mut h = held(command).await;
    // Held: the project is exactly as it was (the change was rolled back).
    assert_eq!(tree(h.project.path()), h.original, "{command}: rolled back");
    // The project's own repository is outside what checkpoints restore;
    // the effect gates say when the action damaged it.
    if gone.contains(&"README.md") {
        let reasons = h.ask["params"]["toolCall"]["content"].to_string();
        assert!(reasons.contains(".git"), "{reasons}");
    }
    let summary = h.ask["params"]["toolCall"]["rawInput"]["args"]["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(summary.contains("checkpoint c1"), "{summary}");
    let diff = h.ask["params"]["toolCall"]["rawInput"]["args"]["diff"]
        .as_str()
        .unwrap()
        .to_string();
    for path in gone.iter().chain(emptied) {
        assert!(
            diff.contains(path),
            "{command}: the diff names {path}: {diff}"
        );
    }
    // The person saw the held effect as ACP diff content before deciding.
    let shown: Vec<Value> = h
        .client
        .updates("tool_call_update")
        .into_iter()
        .filter(|u| u["status"] == "pending")
        .flat_map(|u| u["content"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["type"] == "diff")
        .collect();
    let first = gone.first().or(emptied.first()).unwrap();
    let abs = h.project.path().join(first);
    let d = shown
        .iter()
        .find(|c| c["path"] == json!(abs))
        .unwrap_or_else(|| panic!("no diff for {first} in {shown:?}"));
    let old = String::from_utf8(h.original[*first].clone()).unwrap();
    assert_eq!(d["oldText"], json!(old));
    assert_eq!(d["newText"], "");

    decide(&mut h, "allow_once").await;
    // Approval applied exactly the recorded effect.
    let now = tree(h.project.path());
    for path in gone {
        assert!(!now.contains_key(*path), "{command}: {path} deleted");
    }
    for path in emptied {
        assert_eq!(
            now.get(*path).map(Vec::len),
            Some(0),
            "{command}: {path} emptied"
        );
    }
    let told = tool_result(&h.fake);
    assert!(told.contains("the project was not touched"), "{told}");
    assert!(told.contains("approved"), "{told}");
    let last = final_update(&h.client);
    assert_eq!(last["rawOutput"]["effect"]["checkpoint"], "c1");

    // Undo restores the tree byte for byte.
    let r = undo(&mut h.client, h.project.path()).await;
    assert_eq!(r["result"]["undone"], "c1", "{r}");
    assert_eq!(tree(h.project.path()), h.original, "{command}: undone");
    // Undoing again refuses (c1 is undone; the last applied is the undo,
    // c2, which redoes).
    let again = h
        .client
        .request(
            "_passepartout/undo",
            json!({ "cwd": h.project.path(), "id": "c1" }),
        )
        .await;
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("undone"),
        "{again}"
    );
    let _ = &h.session;
}

#[tokio::test]
async fn find_delete_is_held_applied_on_approval_and_undone() {
    held_approved_undone(
        "find . -mindepth 1 -delete",
        &[
            "README.md",
            "src/main.rs",
            "src/lib.rs",
            "logo.bin",
            "data/00.txt",
        ],
        &[],
    )
    .await;
}

#[tokio::test]
async fn python_rmtree_of_the_cwd_is_held_applied_on_approval_and_undone() {
    // `ignore_errors`: the sandbox pins `.git` and its control files
    // read-only, so a plain rmtree stops at the first of them, after deleting
    // whatever came before it in directory order; a hostile model would pass
    // it, and the effect stage must still hold everything else it deleted.
    held_approved_undone(
        "python3 -c 'import os, shutil; shutil.rmtree(os.getcwd(), ignore_errors=True)'",
        &["README.md", "src/main.rs", "src/lib.rs", "data/23.txt"],
        &[],
    )
    .await;
}

#[tokio::test]
async fn truncating_sources_is_held_applied_on_approval_and_undone() {
    held_approved_undone(
        "truncate -s 0 src/*.rs",
        &[],
        &["src/main.rs", "src/lib.rs"],
    )
    .await;
}

#[tokio::test]
async fn a_rejected_effect_leaves_the_project_as_it_was() {
    if !harness::bwrap_available() {
        return;
    }
    let mut h = held("find . -mindepth 1 -delete").await;
    decide(&mut h, "reject_once").await;
    assert_eq!(tree(h.project.path()), h.original);
    let told = tool_result(&h.fake);
    assert!(told.contains("rejected"), "{told}");
    assert!(told.contains("as it was before"), "{told}");
    let r = h
        .client
        .request("_passepartout/history", json!({ "cwd": h.project.path() }))
        .await;
    assert_eq!(r["result"]["checkpoints"][0]["status"], "rejected", "{r}");
}

#[tokio::test]
async fn a_small_change_runs_and_is_shown_as_a_diff_and_can_be_undone_from_the_cli() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = project();
    let original = tree(project.path());
    let args = json!({ "command": "printf 'pub fn run() {}\\n' > src/lib.rs; echo new > NEW.md" })
        .to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_s", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, sid) = Client::with_fake(home.path(), &fake, project.path()).await;
    client
        .prompt_answering(&sid, "edit", |ask| {
            assert_ne!(
                ask["params"]["toolCall"]["rawInput"]["op"], "apply_checkpoint",
                "a small change must not be held"
            );
            "allow_once".into()
        })
        .await;
    assert_eq!(
        std::fs::read_to_string(project.path().join("src/lib.rs")).unwrap(),
        "pub fn run() {}\n"
    );
    let last = final_update(&client);
    let effect = &last["rawOutput"]["effect"];
    assert_eq!(effect["created"], json!(["NEW.md"]));
    assert_eq!(effect["modified"], json!(["src/lib.rs"]));
    let diffs: Vec<&Value> = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "diff")
        .collect();
    assert_eq!(diffs.len(), 2, "{last}");
    assert!(last["locations"].as_array().unwrap().len() == 2, "{last}");
    let text = last["content"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("changed 2 files: +1 ~1 −0"), "{text}");
    assert!(tool_result(&fake).contains("(checkpoint c1)"));

    // The audit log has the effect record.
    let audit =
        std::fs::read_to_string(home.path().join("state/passepartout/audit.jsonl")).unwrap();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"kind\":\"effect\"") && l.contains("\"c1\"")),
        "{audit}"
    );
    drop(client);

    // The terminal: history lists it, undo reverts it.
    let cli = |args: &[&str]| harness::cli_output(home.path(), project.path(), args);
    let h = cli(&["history"]);
    let listing = String::from_utf8_lossy(&h.stdout);
    assert!(
        listing.contains("c1  applied") && listing.contains("~ src/lib.rs"),
        "{listing}"
    );
    // A file edited since: undo refuses and changes nothing.
    std::fs::write(project.path().join("NEW.md"), "mine\n").unwrap();
    let refused = cli(&["undo"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("changed since") && err.contains("NEW.md"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("src/lib.rs")).unwrap(),
        "pub fn run() {}\n"
    );
    std::fs::write(project.path().join("NEW.md"), "new\n").unwrap();
    let ok = cli(&["undo", "c1"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(tree(project.path()), original);
}

/// Through flight plans (the Emacs path): the held effect is a second plan
/// whose Org document shows the diff; the first plan ends `executed`, the
/// effect plan is approved with its Org text and applies the change.
#[tokio::test]
async fn with_flight_plans_the_held_effect_is_a_plan_showing_the_diff() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    tiny_quota(home.path());
    let project = project();
    let original = tree(project.path());
    let args = json!({ "command": "truncate -s 0 src/*.rs" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_t", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let url = fake.openai_url();
    let mut c = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", &url],
    );
    c.initialize(json!({ "flightPlans": true })).await;
    let sid = c.new_session(project.path()).await;
    let p = c
        .start_request("session/prompt", prompt(&sid, "empty them"))
        .await;
    let effect_plan = loop {
        let offer = c.wait_method("_passepartout/plan/offer").await;
        let plan = offer["params"]["plan"].clone();
        let org = plan["org"].as_str().unwrap().to_string();
        if org.contains("apply_checkpoint") {
            break plan;
        }
        assert_eq!(tree(project.path()), original);
        let r = c
            .request(
                "_passepartout/plan/decide",
                json!({ "planId": plan["planId"], "decision": "approve", "org": org }),
            )
            .await;
        assert_eq!(r["result"]["status"], "approved", "{r}");
        let resolved = c.wait_method("_passepartout/plan/resolved").await;
        assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    };
    assert_eq!(tree(project.path()), original, "held: rolled back");
    let org = effect_plan["org"].as_str().unwrap().to_string();
    assert!(org.contains("#+begin_src diff"), "{org}");
    assert!(org.contains("-    lib::run();"), "{org}");
    assert!(org.contains("effect-loss"), "{org}");
    let r = c
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": effect_plan["planId"], "decision": "approve", "org": org }),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = c.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["planId"], effect_plan["planId"]);
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    assert_eq!(c.wait_response(p).await["result"]["stopReason"], "end_turn");
    let now = tree(project.path());
    assert_eq!(now["src/main.rs"].len(), 0);
    assert_eq!(now["src/lib.rs"].len(), 0);
    assert_eq!(now["README.md"], original["README.md"]);
}

/// An ignored `.env` is invisible to git but precious: deleting it is held,
/// approving applies the deletion, undo brings it back byte for byte.
#[tokio::test]
async fn deleting_an_ignored_precious_env_file_is_held_and_undone() {
    if !harness::bwrap_available() {
        return;
    }
    let dir = project();
    std::fs::write(dir.path().join(".gitignore"), ".env\n").unwrap();
    std::fs::write(dir.path().join(".env"), "API_KEY=s3cret\n").unwrap();
    let mut h = held_in(dir, "rm .env").await;
    let p = h.project.path().to_path_buf();
    // Held: rolled back at once.
    assert_eq!(std::fs::read(p.join(".env")).unwrap(), b"API_KEY=s3cret\n");
    decide(&mut h, "allow_once").await;
    assert!(!p.join(".env").exists());
    let result = tool_result(&h.fake);
    assert!(
        result.contains("precious") && result.contains(".env"),
        "{result}"
    );
    let undone = undo(&mut h.client, &p).await;
    assert!(undone["result"]["checkpoint"].is_string(), "{undone}");
    assert_eq!(std::fs::read(p.join(".env")).unwrap(), b"API_KEY=s3cret\n");
}

/// Two calls in one turn are one unit for `undo --turn`: refused, naming
/// the file, while a file differs from how the turn left it; then undone
/// all together through `_passepartout/undo {"turn": "last"}`.
#[tokio::test]
async fn a_whole_turn_is_undone_all_or_nothing() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = project();
    let original = tree(project.path());
    let first = json!({ "command": "printf 'pub fn run() {}\\n' > src/lib.rs" }).to_string();
    let second = json!({ "command": "echo more >> src/lib.rs; echo new > NEW.md" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "shell", &first)]),
        fake::openai_tool_calls(&[("call_2", "shell", &second)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, sid) = Client::with_fake(home.path(), &fake, project.path()).await;
    client.prompt_allowing(&sid, "edit").await;
    assert_eq!(
        std::fs::read_to_string(project.path().join("src/lib.rs")).unwrap(),
        "pub fn run() {}\nmore\n"
    );
    let listed = client
        .request("_passepartout/history", json!({ "cwd": project.path() }))
        .await;
    let cps = listed["result"]["checkpoints"].as_array().unwrap().clone();
    assert_eq!(cps.len(), 2, "{listed}");
    let turn = cps[0]["turn"].as_str().expect("a turn id").to_string();
    assert_eq!(cps[1]["turn"], json!(turn), "both calls are one turn");

    let cli = |args: &[&str]| harness::cli_output(home.path(), project.path(), args);
    let h = cli(&["history"]);
    let listing = String::from_utf8_lossy(&h.stdout);
    assert!(
        listing.contains("c2  applied") && listing.contains(&turn),
        "{listing}"
    );
    // Changed since the turn: refused, naming the file, nothing changed.
    std::fs::write(project.path().join("NEW.md"), "mine\n").unwrap();
    let refused = cli(&["undo", "--turn"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("changed since") && err.contains("NEW.md"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("src/lib.rs")).unwrap(),
        "pub fn run() {}\nmore\n"
    );
    std::fs::write(project.path().join("NEW.md"), "new\n").unwrap();
    let undone = client
        .request(
            "_passepartout/undo",
            json!({ "cwd": project.path(), "turn": "last" }),
        )
        .await;
    assert_eq!(undone["result"]["turn"], json!(turn), "{undone}");
    assert_eq!(undone["result"]["undone"], "c2,c1", "{undone}");
    assert_eq!(tree(project.path()), original);
}

/// The effect stage without a live turn: a plan approved after a restart
/// (its turn is gone) whose effect the gates hold stays rolled back —
/// nobody is there to approve the change — and the result says why.
#[tokio::test]
async fn a_held_effect_of_a_plan_run_after_its_turn_stays_held_under_a_plan_of_its_own() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    tiny_quota(home.path());
    // The person's own rule asks before the command runs.
    harness::ask_before_recursive_deletes(home.path());
    let project = project();
    let original = tree(project.path());
    let args = json!({ "command": "rm -rf data src" }).to_string();
    let fake = FakeProvider::start(vec![fake::openai_tool_calls(&[("c1", "shell", &args)])]).await;
    let url = fake.openai_url();
    let (mut first, sid) = Client::with_session(
        home.path(),
        &["--provider-url", &url],
        json!({ "flightPlans": true }),
        project.path(),
    )
    .await;
    first
        .start_request("session/prompt", prompt(&sid, "clean up"))
        .await;
    let offer = first.wait_method("_passepartout/plan/offer").await;
    let id = offer["params"]["plan"]["planId"]
        .as_str()
        .unwrap()
        .to_string();
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    assert_eq!(tree(project.path()), original);

    let mut second = Client::spawn(Framing::Ndjson, home.path(), &["--provider-url", &url]);
    second.initialize(json!({ "flightPlans": true })).await;
    let again = second.wait_method("_passepartout/plan/offer").await;
    assert_eq!(again["params"]["plan"]["planId"], json!(id), "{again}");
    let r = second
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": id, "decision": "approve" }),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = second.wait_method("_passepartout/plan/resolved").await;
    let result = resolved["params"]["result"].to_string();
    assert!(
        result.contains("the project was not touched") && result.contains("Not applied yet"),
        "{resolved}"
    );
    // The command ran into an overlay; its changeset never reached the
    // project, and stays held for a person to decide.
    assert_eq!(tree(project.path()), original);
    let listed = second
        .request("_passepartout/history", json!({ "cwd": project.path() }))
        .await;
    let cp = &listed["result"]["checkpoints"][0];
    assert_eq!(cp["status"], "held", "{listed}");
    assert!(cp["turn"].is_null(), "no live turn: {cp}");
    let pending = second.request("_passepartout/plans/list", json!({})).await;
    let plans = pending["result"]["plans"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        plans.iter().any(|p| p["planId"] != json!(id)
            && p["title"]
                .as_str()
                .is_some_and(|t| t.contains("apply_checkpoint"))),
        "a plan of its own for the held change: {pending}"
    );
}

/// The terminal command line against one home.
/// A turn of two actions: c1 changes files in `sub/`, c2 replaces `sub`
/// with a link to `host`, which holds what c1 left (so that, following the
/// link, every check of an undo of c1 would pass).
struct Planted {
    home: tempfile::TempDir,
    host: tempfile::TempDir,
    project: tempfile::TempDir,
    original: BTreeMap<String, Vec<u8>>,
}

async fn planted_link() -> Planted {
    let home = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let project = project();
    let p = project.path();
    std::fs::create_dir_all(p.join("sub")).unwrap();
    std::fs::write(p.join("sub/gone.txt"), "gone\n").unwrap();
    std::fs::write(p.join("sub/same.txt"), "same\n").unwrap();
    let original = tree(p);
    std::fs::write(host.path().join("new.txt"), "new\n").unwrap();
    std::fs::write(host.path().join("same.txt"), "changed\n").unwrap();
    let first = json!({
        "command": "rm sub/gone.txt; echo new > sub/new.txt; echo changed > sub/same.txt"
    })
    .to_string();
    let second = json!({ "command": format!("rm -rf sub && ln -s {} sub", host.path().display()) })
        .to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "shell", &first)]),
        fake::openai_tool_calls(&[("call_2", "shell", &second)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, sid) = Client::with_fake(home.path(), &fake, p).await;
    client
        .prompt_answering(&sid, "go", |_| "allow_once".into())
        .await;
    drop(client);
    assert!(
        p.join("sub").is_symlink(),
        "the second action ran: {:?}",
        fake.last_tool_results()
    );
    Planted {
        home,
        host,
        project,
        original,
    }
}

fn host_untouched(host: &Path) {
    assert!(!host.join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(host.join("new.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("same.txt")).unwrap(),
        "changed\n"
    );
}

/// Issue 24: an action replaces a project folder with a link to a host
/// folder; `passepartout undo` of an earlier change inside that folder must
/// not create, overwrite or delete anything in the host folder.
#[tokio::test]
async fn undo_never_follows_a_link_an_action_planted_out_of_the_project() {
    if !harness::bwrap_available() {
        return;
    }
    let t = planted_link().await;
    let out = harness::cli_output(t.home.path(), t.project.path(), &["undo", "c1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "undo must refuse: {err}");
    assert!(err.contains("symbolic link"), "{err}");
    host_untouched(t.host.path());
}

/// The same turn undone whole: the link is part of what is undone, so the
/// folder comes back in its place — and the host folder is left alone.
#[tokio::test]
async fn undoing_the_turn_that_planted_a_link_puts_the_folder_back_and_leaves_the_host_alone() {
    if !harness::bwrap_available() {
        return;
    }
    let t = planted_link().await;
    let out = harness::cli_output(t.home.path(), t.project.path(), &["undo", "--turn"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!t.project.path().join("sub").is_symlink());
    assert_eq!(tree(t.project.path()), t.original);
    host_untouched(t.host.path());
}

/// Issue 24: an undo that cannot complete (a file now stands where a
/// folder must come back) changes nothing — not even the paths it could
/// have restored.
#[tokio::test]
async fn an_undo_that_cannot_complete_changes_nothing() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = project();
    let p = project.path();
    let args = json!({ "command": "rm README.md && rm -r src" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_1", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let (mut client, sid) = Client::with_fake(home.path(), &fake, p).await;
    client
        .prompt_answering(&sid, "go", |_| "allow_once".into())
        .await;
    drop(client);
    assert!(!p.join("src").exists() && !p.join("README.md").exists());
    // The person puts a file where the folder `src` must come back.
    std::fs::write(p.join("src"), "mine\n").unwrap();
    let before = tree(p);
    let out = harness::cli_output(home.path(), p, &["undo"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(tree(p), before, "not even README.md came back");
}

/// Issue 24: while a held effect waits, its folder is swapped for a link
/// to a host folder (another session, another program); "Allow once" must
/// not write through it.
#[tokio::test]
async fn approving_a_held_effect_never_writes_through_a_link_swapped_in_meanwhile() {
    if !harness::bwrap_available() {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    let mut h = held("truncate -s 0 src/*.rs").await;
    let p = h.project.path().to_path_buf();
    // The host folder looks exactly like the folder before the change.
    for f in ["main.rs", "lib.rs"] {
        std::fs::copy(p.join("src").join(f), host.path().join(f)).unwrap();
    }
    let kept = tree(host.path());
    std::fs::rename(p.join("src"), p.join("src-moved")).unwrap();
    std::os::unix::fs::symlink(host.path(), p.join("src")).unwrap();
    decide(&mut h, "allow_once").await;
    assert_eq!(tree(host.path()), kept, "the host folder is untouched");
    let told = tool_result(&h.fake);
    assert!(told.contains("symbolic link"), "{told}");
}

/// Issue 24: a file the action turned into a folder does not stop the
/// rollback: the held effect leaves the project as it was, and rejecting
/// keeps it so.
#[tokio::test]
async fn a_file_turned_into_a_folder_is_rolled_back_while_held() {
    if !harness::bwrap_available() {
        return;
    }
    let mut h = held(
        "rm README.md && mkdir -p README.md/d && echo x > README.md/d/f && truncate -s 0 src/lib.rs",
    )
    .await;
    assert_eq!(tree(h.project.path()), h.original, "held: rolled back");
    decide(&mut h, "reject_once").await;
    assert_eq!(tree(h.project.path()), h.original);
}

/// The same, approved: the folder replaces the file whole, and undo puts
/// the file back.
#[tokio::test]
async fn a_file_turned_into_a_folder_is_applied_whole_and_undone() {
    if !harness::bwrap_available() {
        return;
    }
    let mut h = held(
        "rm README.md && mkdir -p README.md/d && echo x > README.md/d/f && truncate -s 0 src/lib.rs",
    )
    .await;
    decide(&mut h, "allow_once").await;
    let p = h.project.path().to_path_buf();
    assert_eq!(
        std::fs::read_to_string(p.join("README.md/d/f")).unwrap(),
        "x\n"
    );
    let r = undo(&mut h.client, &p).await;
    assert!(r["result"]["checkpoint"].is_string(), "{r}");
    assert_eq!(tree(&p), h.original);
}

/// Issue 23 item 3: a private (0600) `.env` the agent appended to or
/// deleted comes back 0600 from undo.
#[tokio::test]
async fn undo_puts_a_private_env_back_private() {
    use std::os::unix::fs::PermissionsExt;
    if !harness::bwrap_available() {
        return;
    }
    for command in ["echo EXTRA=1 >> .env", "rm .env"] {
        let dir = project();
        std::fs::write(dir.path().join(".gitignore"), ".env\n").unwrap();
        std::fs::write(dir.path().join(".env"), "API_KEY=s3cret\n").unwrap();
        std::fs::set_permissions(
            dir.path().join(".env"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let mut h = held_in(dir, command).await;
        decide(&mut h, "allow_once").await;
        let p = h.project.path().to_path_buf();
        let undone = undo(&mut h.client, &p).await;
        assert!(undone["result"]["checkpoint"].is_string(), "{undone}");
        assert_eq!(std::fs::read(p.join(".env")).unwrap(), b"API_KEY=s3cret\n");
        let mode = std::fs::metadata(p.join(".env"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{command}: mode {mode:o}");
    }
}

/// `n` bytes of /dev/urandom: content git cannot compress or share.
fn random_bytes(n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes
}

/// Every file under `dir` (links not followed), in bytes.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.path().symlink_metadata().unwrap();
        if meta.is_dir() {
            total += bytes_under(&entry.path());
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}

const QUOTA_FILES: usize = 5;
const QUOTA_FILE_BYTES: usize = 1_000_000;
const QUOTA_BYTES: u64 = 20_000_000;

/// Issue 24 item 6 (the repro scaled down: six rewrites of the
/// same 5 files, 1 MB of random bytes each, under a 20 MB quota that
/// keeps the last 2 undo steps): the checkpoint stores stay under the
/// quota, the tool result says older checkpoints were evicted, `history`
/// says so too, the last 2 steps still undo byte for byte, and
/// `history --prune` reports what it freed.
#[tokio::test]
async fn six_rewrites_of_big_files_stay_under_the_store_quota_and_still_undo() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(&format!(
        "[checkpoints]\n\
         max_store_bytes = {QUOTA_BYTES}\n\
         keep_undo_steps = 2\n\
         keep_records = 3\n\
         max_removed_bytes = 100000000\n\
         max_deleted_files = 1000\n\
         [sandbox_limits]\n\
         file_size = \"20M\"\n\
         disk_write = \"1G\"\n"
    ));
    let project = project();
    let p = project.path();
    // The versions the agent copies in, ignored (never recorded).
    std::fs::write(p.join(".gitignore"), "pool/\n").unwrap();
    let mut versions: Vec<Vec<Vec<u8>>> = Vec::new();
    for v in 0..=6 {
        let files: Vec<Vec<u8>> = (0..QUOTA_FILES)
            .map(|_| random_bytes(QUOTA_FILE_BYTES))
            .collect();
        let dir = if v == 0 {
            p.join("big")
        } else {
            p.join(format!("pool/v{v}"))
        };
        std::fs::create_dir_all(&dir).unwrap();
        for (i, bytes) in files.iter().enumerate() {
            std::fs::write(dir.join(format!("{i}.bin")), bytes).unwrap();
        }
        versions.push(files);
    }
    let big = |p: &Path| -> Vec<Vec<u8>> {
        (0..QUOTA_FILES)
            .map(|i| std::fs::read(p.join(format!("big/{i}.bin"))).unwrap())
            .collect()
    };
    let mut script: Vec<_> = (1..=6)
        .map(|v| {
            let args = json!({ "command": format!("cp pool/v{v}/*.bin big/") }).to_string();
            fake::openai_tool_calls(&[(&format!("call_{v}"), "shell", &args)])
        })
        .collect();
    script.push(fake::openai_text("done"));
    let fake = FakeProvider::start(script).await;
    let (mut client, sid) = Client::with_fake(home.path(), &fake, p).await;
    let (done, _) = client.prompt_allowing(&sid, "rewrite").await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(big(p) == versions[6], "the six rewrites ran");
    drop(client);

    let stores = home.path().join("state/passepartout/checkpoints");
    let used = bytes_under(&stores);
    assert!(
        used <= QUOTA_BYTES,
        "the checkpoint stores take {used} bytes, over the {QUOTA_BYTES} quota"
    );
    let results: Vec<String> = (0..fake.requests().len())
        .flat_map(|n| fake.tool_results(n))
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains("older checkpoints were evicted to stay under the storage quota")),
        "{results:#?}"
    );

    let listing = harness::cli_output(home.path(), p, &["history"]);
    let listing = String::from_utf8_lossy(&listing.stdout).to_string();
    assert!(
        listing.contains("older checkpoints were evicted to stay under the storage quota"),
        "{listing}"
    );
    // The last two undo steps, newest first, from the terminal.
    let json_listing = harness::cli_output(home.path(), p, &["history", "--json"]);
    let ids: Vec<String> = String::from_utf8_lossy(&json_listing.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| c["status"] == "applied")
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.len() >= 2, "{listing}");
    for (step, id) in ids.iter().take(2).enumerate() {
        let out = harness::cli_output(home.path(), p, &["undo", id]);
        assert!(
            out.status.success(),
            "undo {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            big(p) == versions[5 - step],
            "undo {id} restores version {}",
            5 - step
        );
    }

    let pruned = harness::cli_output(home.path(), p, &["history", "--prune"]);
    let said = String::from_utf8_lossy(&pruned.stderr).to_string();
    let after = bytes_under(&stores);
    assert!(
        said.contains("pruned ") && said.contains(&format!("-> {after} bytes")),
        "{said} (the stores now take {after} bytes)"
    );
    let count: usize = said
        .split("pruned ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(count >= 1, "keep_records = 3 drops at least one: {said}");
}
