//! Flight plans end to end through the real binary: a tool call that a gate
//! holds for approval becomes an Org plan offered to the editor; the person
//! approves (possibly after editing the action), rejects with a reason, or
//! decides from a terminal; plans survive a daemon killed with SIGKILL and
//! run exactly once. ACP clients get `session/request_permission` instead.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::{prompt, Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

fn spawn(home: &Path, fake: &FakeProvider) -> Client {
    harness::write_file_asks(home);
    let url = fake.openai_url();
    Client::spawn(Framing::ContentLength, home, &["--provider-url", &url])
}

/// A daemon using `fake` whose client (Emacs-style) takes flight plans.
async fn plan_client(home: &Path, fake: &FakeProvider) -> Client {
    let mut client = spawn(home, fake);
    client.initialize(json!({ "flightPlans": true })).await;
    client
}

/// What a prompt in a new session brought: the flight plan offered for
/// its first held action.
struct Offered {
    sid: String,
    prompt_id: u64,
    /// The whole `_passepartout/plan/offer` notification.
    offer: Value,
    plan_id: String,
}

/// Prompt `text` in a new session in `project` and wait for the plan it
/// offers.
async fn prompt_until_offer(client: &mut Client, project: &Path, text: &str) -> Offered {
    let sid = client.new_session(project).await;
    let prompt_id = client
        .start_request("session/prompt", prompt(&sid, text))
        .await;
    let offer = client.wait_method("_passepartout/plan/offer").await;
    let plan_id = offer["params"]["plan"]["planId"]
        .as_str()
        .unwrap()
        .to_string();
    Offered {
        sid,
        prompt_id,
        offer,
        plan_id,
    }
}

/// Decide plan `plan_id` from `client` (`approve`, `reject`, ...); the
/// response.
async fn decide(client: &mut Client, plan_id: &str, decision: &str) -> Value {
    client
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": plan_id, "decision": decision }),
        )
        .await
}

/// Kill the daemon `first` with SIGKILL, start the next one on the same
/// home, approve plan `plan_id` there once it is offered again, and wait
/// for what became of it: the next daemon and its `plan/resolved`.
async fn approve_after_sigkill(
    mut first: Client,
    home: &Path,
    fake: &FakeProvider,
    plan_id: &str,
) -> (Client, Value) {
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let mut next = plan_client(home, fake).await;
    next.wait_method("_passepartout/plan/offer").await;
    let r = decide(&mut next, plan_id, "approve").await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = next.wait_method("_passepartout/plan/resolved").await;
    (next, resolved)
}

fn write_call(path: &str, content: &str) -> Reply {
    let args = json!({ "path": path, "content": content }).to_string();
    fake::openai_tool_calls(&[("call_w", "write_file", &args)])
}

/// The tool result the model received in request `n`.
fn tool_result(fake: &FakeProvider, n: usize) -> String {
    let reqs = fake.requests();
    let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
    let tool = msgs
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message in {msgs:?}"));
    tool["content"].as_str().unwrap().to_string()
}

/// A daemon (Emacs-style client) whose session asked to write `file` and
/// is now waiting on the offered flight plan.
struct Waiting {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    fake: FakeProvider,
    client: Client,
    prompt_id: u64,
    plan_id: String,
    org: String,
}

async fn waiting_on_a_write(file: &str, content: &str) -> Waiting {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![write_call(file, content), fake::openai_text("ok")]).await;
    let mut client = plan_client(home.path(), &fake).await;
    let Offered {
        prompt_id,
        offer,
        plan_id,
        ..
    } = prompt_until_offer(&mut client, project.path(), "write").await;
    let org = offer["params"]["plan"]["org"].as_str().unwrap().to_string();
    Waiting {
        home,
        project,
        fake,
        client,
        prompt_id,
        plan_id,
        org,
    }
}

#[tokio::test]
async fn an_approved_plan_runs_and_its_result_reaches_the_model() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        write_call("out.txt", "hello\n"),
        fake::openai_text("Written."),
    ])
    .await;
    let mut c = plan_client(home.path(), &fake).await;
    let Offered {
        sid,
        prompt_id: p,
        offer,
        ..
    } = prompt_until_offer(&mut c, project.path(), "write out.txt").await;
    let plan = &offer["params"]["plan"];
    assert_eq!(
        (
            plan["tool"].clone(),
            plan["status"].clone(),
            plan["sessionId"].clone()
        ),
        (json!("write_file"), json!("pending"), json!(sid))
    );
    let org = plan["org"].as_str().unwrap();
    assert!(
        org.contains("#+NAME: action") && org.contains("hello"),
        "{org}"
    );
    // Written to disk before anyone was asked.
    let id = plan["planId"].as_str().unwrap();
    assert!(home
        .path()
        .join("state/passepartout/plans")
        .join(format!("{id}.json"))
        .exists());
    assert!(
        !project.path().join("out.txt").exists(),
        "nothing runs before approval"
    );

    let r = c
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": id, "decision": "approve", "org": org }),
        )
        .await;
    assert_eq!(
        r["result"],
        json!({ "planId": id, "status": "approved", "edited": false, "runs": "now: its turn is waiting" }),
        "{r}"
    );
    let done = c.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    let resolved = c.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    assert!(
        tool_result(&fake, 1).starts_with("wrote 6 bytes"),
        "{}",
        tool_result(&fake, 1)
    );

    // The audit log has the whole story (written by its own thread).
    let audit = audit_until(&home.path().join("state/passepartout/audit.jsonl"), |a| {
        a.lines().count() >= 4
    })
    .await;
    let kinds: Vec<String> = audit
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["proposed", "verdict", "decision", "executed", "effect"],
        "{audit}"
    );
    let executed: Value = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["kind"] == "executed")
        .unwrap();
    assert_eq!(
        (executed["session"].clone(), executed["plan_id"].clone()),
        (json!(sid), json!(id)),
        "{executed}"
    );
}

#[tokio::test]
async fn an_edited_plan_runs_the_edited_action() {
    let mut w = waiting_on_a_write("out.txt", "draft text\n").await;
    let edited = w.org.replace("draft text", "final text");
    let decide = json!({ "planId": w.plan_id, "decision": "approve", "org": edited });
    let r = w.client.request("_passepartout/plan/decide", decide).await;
    assert_eq!(r["result"]["edited"], true, "{r}");
    w.client.wait_response(w.prompt_id).await;
    let written = std::fs::read_to_string(w.project.path().join("out.txt")).unwrap();
    assert_eq!(written, "final text\n");
}

#[tokio::test]
async fn a_rejection_goes_back_to_the_model_with_the_reason() {
    let mut w = waiting_on_a_write("out.txt", "x").await;
    let decide =
        json!({ "planId": w.plan_id, "decision": "reject", "comment": "not in this directory" });
    let r = w.client.request("_passepartout/plan/decide", decide).await;
    assert_eq!(r["result"]["status"], "rejected", "{r}");
    assert_eq!(
        w.client.wait_response(w.prompt_id).await["result"]["stopReason"],
        "end_turn"
    );
    assert!(!w.project.path().join("out.txt").exists());
    assert_eq!(
        tool_result(&w.fake, 1),
        "the person (emacs) rejected this action: not in this directory"
    );
    // Deciding again is refused.
    let again = json!({ "planId": w.plan_id, "decision": "approve" });
    let r = w.client.request("_passepartout/plan/decide", again).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
}

#[tokio::test]
async fn an_edit_that_a_gate_denies_is_refused_and_the_plan_stays_pending() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let args = json!({ "command": "git push origin main" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("c1", "shell", &args)]),
        fake::openai_text("ok"),
    ])
    .await;
    let mut c = plan_client(home.path(), &fake).await;
    let Offered {
        prompt_id: p,
        offer,
        ..
    } = prompt_until_offer(&mut c, project.path(), "push").await;
    let plan = offer["params"]["plan"].clone();
    let id = plan["planId"].as_str().unwrap().to_string();
    let org = plan["org"].as_str().unwrap().to_string();
    assert!(org.contains("git push origin main"), "{org}");
    let evil = org.replace("git push origin main", "sudo rm -rf /");
    let r = c
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": id, "decision": "approve", "org": evil }),
        )
        .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("refused"),
        "{r}"
    );
    let list = c.request("_passepartout/plans/list", json!(null)).await;
    assert_eq!(list["result"]["plans"][0]["planId"], json!(id), "{list}");
    let r = decide(&mut c, &id, "reject").await;
    assert_eq!(r["result"]["status"], "rejected", "{r}");
    // Decided, the plan leaves the list; asked for by id, it says how it
    // ended (what a client that saw it waiting needs after a restart).
    let got = c
        .request("_passepartout/plans/get", json!({ "planId": id }))
        .await;
    assert_eq!(got["result"]["plan"]["status"], "rejected", "{got}");
    let missing = c
        .request(
            "_passepartout/plans/get",
            json!({ "planId": "fp-000000000000" }),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    c.wait_response(p).await;
}

#[tokio::test]
async fn a_decision_from_the_terminal_reaches_the_waiting_turn() {
    let mut w = waiting_on_a_write("t.txt", "from the terminal\n").await;
    let out = tokio::process::Command::new(harness::BIN)
        .args(["plans", "approve", &w.plan_id])
        .env("HOME", w.home.path())
        .env("XDG_CONFIG_HOME", w.home.path().join("config"))
        .env("XDG_STATE_HOME", w.home.path().join("state"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        w.client.wait_response(w.prompt_id).await["result"]["stopReason"],
        "end_turn"
    );
    let written = std::fs::read_to_string(w.project.path().join("t.txt")).unwrap();
    assert_eq!(written, "from the terminal\n");
}

#[tokio::test]
async fn a_plan_survives_sigkill_and_runs_exactly_once() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    // The action appends a line, so running twice would show.
    let args =
        json!({ "command": "echo ran >> log.txt && git push origin main 2>/dev/null; true" })
            .to_string();
    let fake = FakeProvider::start(vec![fake::openai_tool_calls(&[("c1", "shell", &args)])]).await;
    let mut first = plan_client(home.path(), &fake).await;
    let Offered {
        sid, plan_id: id, ..
    } = prompt_until_offer(&mut first, project.path(), "do it").await;
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();

    let mut second = plan_client(home.path(), &fake).await;
    let again = second.wait_method("_passepartout/plan/offer").await;
    assert_eq!(again["params"]["plan"]["planId"], json!(id), "{again}");
    let r = decide(&mut second, &id, "approve").await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = second.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    // The restart path writes the same `executed` record as a live turn.
    let audit = audit_until(&home.path().join("state/passepartout/audit.jsonl"), |a| {
        a.contains("\"kind\":\"executed\"")
    })
    .await;
    let executed: Value = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["kind"] == "executed")
        .unwrap_or_else(|| panic!("no executed record in {audit}"));
    assert_eq!(
        (executed["plan_id"].clone(), executed["session"].clone()),
        (json!(id), json!(sid)),
        "{executed}"
    );
    let r = decide(&mut second, &id, "approve").await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    drop(second);

    // A third daemon does not run it again either.
    let mut third = plan_client(home.path(), &fake).await;
    let list = third.request("_passepartout/plans/list", json!(null)).await;
    assert_eq!(list["result"]["plans"], json!([]), "{list}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("log.txt")).unwrap(),
        "ran\n"
    );
}

/// The last-mile check is the same for a plan run after its turn is gone:
/// a session switched to read-only while its plan waited refuses the plan
/// when it is finally approved by the next daemon, and the audit log holds
/// the last mile's verdict (the mode's deny) and the refusal.
#[tokio::test]
async fn a_plan_run_after_a_restart_is_refused_when_the_session_mode_now_forbids_it() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![write_call("late.txt", "late\n")]).await;
    let mut first = plan_client(home.path(), &fake).await;
    let Offered {
        sid, plan_id: id, ..
    } = prompt_until_offer(&mut first, project.path(), "write").await;
    let r = first
        .request(
            "session/set_mode",
            json!({ "sessionId": sid, "modeId": "read-only" }),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    // The switch is in the journal (its writer thread) before the kill.
    let journal = home
        .path()
        .join(format!("state/passepartout/sessions/{sid}.jsonl"));
    let written = audit_until(&journal, |j| j.contains(r#""mode":"read-only""#)).await;
    assert!(written.contains(r#""mode":"read-only""#), "{written}");
    let (mut second, resolved) = approve_after_sigkill(first, home.path(), &fake, &id).await;
    assert_eq!(resolved["params"]["status"], "denied", "{resolved}");
    let said = resolved["params"]["result"].as_str().unwrap_or_default();
    assert!(said.contains("last-mile check failed"), "{resolved}");
    assert!(!project.path().join("late.txt").exists());

    let audit = audit_until(&home.path().join("state/passepartout/audit.jsonl"), |a| {
        a.contains("last-mile check failed")
    })
    .await;
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["tool_call_id"] == "call_w")
        .collect();
    let last_verdict = records
        .iter()
        .rev()
        .find(|r| r["kind"] == "verdict")
        .unwrap_or_else(|| panic!("no verdict record in {audit}"));
    assert_eq!(last_verdict["judgement"]["decision"], "deny", "{audit}");
    assert!(
        last_verdict["judgement"]["trace"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["gate"] == "mode" && v["decision"] == "deny"),
        "{audit}"
    );
    let denied = records.last().unwrap();
    assert_eq!(
        (denied["kind"].clone(), denied["session"].clone()),
        (json!("denied"), json!(sid)),
        "{audit}"
    );
    assert!(!records.iter().any(|r| r["kind"] == "executed"), "{audit}");
    // Refused for good: the plan is closed, not left approved.
    let list = second
        .request("_passepartout/plans/list", json!(null))
        .await;
    assert_eq!(list["result"]["plans"], json!([]), "{list}");
}

#[tokio::test]
async fn acp_clients_are_asked_with_request_permission() {
    let home = tempfile::tempdir().unwrap();
    harness::write_file_asks(home.path());
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        write_call("a.txt", "A"),
        fake::openai_text("one"),
        write_call("b.txt", "B"),
        fake::openai_text("two"),
    ])
    .await;
    let (mut c, sid) = Client::with_fake(home.path(), &fake, project.path()).await;

    let p = c
        .start_request("session/prompt", prompt(&sid, "write a"))
        .await;
    let ask = c.wait_method("session/request_permission").await;
    let kinds: Vec<&str> = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert_eq!(ask["params"]["toolCall"]["toolCallId"], "call_w");
    c.answer(&ask, "allow_once").await;
    assert_eq!(c.wait_response(p).await["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(project.path().join("a.txt")).unwrap(),
        "A"
    );

    let p = c
        .start_request("session/prompt", prompt(&sid, "write b"))
        .await;
    let ask = c.wait_method("session/request_permission").await;
    c.answer(&ask, "reject_once").await;
    assert_eq!(c.wait_response(p).await["result"]["stopReason"], "end_turn");
    assert!(!project.path().join("b.txt").exists());
    assert_eq!(
        tool_result(&fake, 3),
        "the person (acp-client) rejected this action"
    );
}

#[tokio::test]
async fn a_denied_action_goes_back_to_the_model_and_the_turn_continues() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let args = json!({ "command": "rm -rf ~" }).to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("c1", "shell", &args)]),
        fake::openai_text("I will not do that."),
    ])
    .await;
    let mut c = plan_client(home.path(), &fake).await;
    let sid = c.new_session(project.path()).await;
    let r = c.request("session/prompt", prompt(&sid, "clean up")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let result = tool_result(&fake, 1);
    assert!(
        result.starts_with("denied:") && result.contains("destructive"),
        "{result}"
    );
    assert!(
        c.backlog
            .iter()
            .all(|m| m["method"] != "_passepartout/plan/offer"),
        "a deny is never offered as a plan"
    );
}

#[tokio::test]
async fn cancelling_a_turn_withdraws_its_pending_plan() {
    let mut w = waiting_on_a_write("never.txt", "x").await;
    let sid = w
        .client
        .backlog
        .iter()
        .find_map(|m| m["params"]["sessionId"].as_str().map(str::to_string))
        .unwrap();
    w.client
        .notify("session/cancel", json!({ "sessionId": sid }))
        .await;
    let done = w.client.wait_response(w.prompt_id).await;
    assert_eq!(done["result"]["stopReason"], "cancelled", "{done}");
    let resolved = w.client.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(
        (
            resolved["params"]["planId"].clone(),
            resolved["params"]["status"].clone()
        ),
        // The same word as the plan file and `plans show`: rejected (by
        // `cancel`).
        (json!(w.plan_id), json!("rejected"))
    );
    let list = w
        .client
        .request("_passepartout/plans/list", json!(null))
        .await;
    assert_eq!(list["result"]["plans"], json!([]), "{list}");
    let audit = audit_until(&w.home.path().join("state/passepartout/audit.jsonl"), |a| {
        a.contains("\"by\":\"cancel\"")
    })
    .await;
    let last: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["kind"].clone(), last["by"].clone()),
        (json!("decision"), json!("cancel")),
        "{audit}"
    );
    assert!(!w.project.path().join("never.txt").exists());
}

/// The audit log once `ready` says it holds what the test waits for (its
/// writer thread appends shortly after the daemon's reply).
async fn audit_until(path: &std::path::Path, ready: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + harness::WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if ready(&text) || std::time::Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn closing_stdin_leaves_a_waiting_plan_pending() {
    let mut w = waiting_on_a_write("kept.txt", "later\n").await;
    // The editor quits: end of input.
    w.client.close_stdin();
    let status = tokio::time::timeout(harness::WAIT, w.client.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let store =
        passepartout::plans::store::PlanStore::new(w.home.path().join("state/passepartout/plans"));
    let plan = store.load(&w.plan_id).unwrap();
    assert_eq!(plan.status.as_str(), "pending", "{plan:?}");
    let audit = std::fs::read_to_string(w.home.path().join("state/passepartout/audit.jsonl"))
        .unwrap_or_default();
    assert!(
        !audit.contains("\"kind\":\"decision\""),
        "no decision was recorded: {audit}"
    );

    // The next daemon offers it again, and approving it runs it.
    let fake = FakeProvider::start(vec![]).await;
    let mut next = plan_client(w.home.path(), &fake).await;
    let offer = next.wait_method("_passepartout/plan/offer").await;
    assert_eq!(offer["params"]["plan"]["planId"], json!(w.plan_id));
    let r = decide(&mut next, &w.plan_id, "approve").await;
    assert_eq!(
        r["result"]["runs"], "now: its turn is gone, so this daemon runs it",
        "{r}"
    );
    let resolved = next.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    assert_eq!(
        std::fs::read_to_string(w.project.path().join("kept.txt")).unwrap(),
        "later\n"
    );
}

#[tokio::test]
async fn a_second_daemon_leaves_the_first_daemons_plans_to_it() {
    let mut w = waiting_on_a_write("first.txt", "from the first\n").await;
    // A second daemon on the same state directory (a second Emacs).
    let other = FakeProvider::start(vec![]).await;
    let mut second = plan_client(w.home.path(), &other).await;
    // The terminal knows who runs what.
    let holder = w.client.child.id().unwrap();
    let list = harness::cli_output(w.home.path(), w.project.path(), &["plans", "list"]);
    assert!(String::from_utf8_lossy(&list.stdout).contains(&w.plan_id));
    let lock =
        std::fs::read_to_string(w.home.path().join("state/passepartout/daemon.lock")).unwrap();
    assert_eq!(
        lock.trim(),
        holder.to_string(),
        "the first daemon holds the lock"
    );

    // Approved through the second daemon: the first daemon's turn runs it
    // and its model hears the result (not a rejection).
    let r = decide(&mut second, &w.plan_id, "approve").await;
    assert_eq!(
        r["result"]["runs"], "now: the daemon whose turn made it runs it",
        "{r}"
    );
    let done = w.client.wait_response(w.prompt_id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(
        tool_result(&w.fake, 1).starts_with("wrote"),
        "{}",
        tool_result(&w.fake, 1)
    );
    assert_eq!(
        std::fs::read_to_string(w.project.path().join("first.txt")).unwrap(),
        "from the first\n"
    );
    let store =
        passepartout::plans::store::PlanStore::new(w.home.path().join("state/passepartout/plans"));
    assert_eq!(store.load(&w.plan_id).unwrap().status.as_str(), "executed");
    assert_eq!(other.requests().len(), 0);
}

#[tokio::test]
async fn a_second_daemon_does_not_interrupt_a_running_plan() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let args = json!({ "command": "sleep 2 && echo ran > slow.txt && git push origin main 2>/dev/null; true" })
        .to_string();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("c1", "shell", &args)]),
        fake::openai_text("done"),
    ])
    .await;
    let mut first = Client::spawn(
        Framing::ContentLength,
        home.path(),
        &["--provider-url", &fake.openai_url(), "--sandbox", "none"],
    );
    first.initialize(json!({ "flightPlans": true })).await;
    let Offered {
        prompt_id: p,
        plan_id: id,
        ..
    } = prompt_until_offer(&mut first, project.path(), "slow").await;
    let r = decide(&mut first, &id, "approve").await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    first
        .wait_for(|m| m["params"]["update"]["status"] == "in_progress")
        .await;
    // While it runs, a second daemon starts on the same state directory.
    let second = plan_client(home.path(), &fake).await;
    let done = first.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let store =
        passepartout::plans::store::PlanStore::new(home.path().join("state/passepartout/plans"));
    assert_eq!(store.load(&id).unwrap().status.as_str(), "executed");
    assert_eq!(
        std::fs::read_to_string(project.path().join("slow.txt")).unwrap(),
        "ran\n"
    );
    drop(second);
}

/// Issue 18 item 5, through ACP: a plan approved after its daemon
/// restarted runs once, its chat hears the stored status, and the
/// session's model is told the outcome at its next prompt (not
/// "interrupted … may or may not have run"), once.
#[tokio::test]
async fn after_a_restart_the_model_is_told_what_became_of_its_plan() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        write_call("late.txt", "late\n"),
        fake::openai_text("I see."),
        fake::openai_text("Still here."),
    ])
    .await;
    let mut first = plan_client(home.path(), &fake).await;
    let Offered {
        sid, plan_id: id, ..
    } = prompt_until_offer(&mut first, project.path(), "write late.txt").await;
    let (mut second, resolved) = approve_after_sigkill(first, home.path(), &fake, &id).await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    let org = resolved["params"]["org"].as_str().unwrap();
    assert!(org.contains("* DONE write_file"), "{org}");

    let r = second.load_session(&sid, project.path()).await;
    assert!(r.get("result").is_some(), "{r}");
    let r = second.request("session/prompt", prompt(&sid, "so?")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let user = |n: usize| -> String {
        let reqs = fake.requests();
        let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
        let last = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
        last["content"].as_str().unwrap_or_default().to_string()
    };
    let told = user(1);
    assert!(
        told.contains(&format!(
            "became flight plan {id}: approved by emacs and executed"
        )),
        "{told}"
    );
    assert!(told.ends_with("so?"), "{told}");
    let r = second.request("session/prompt", prompt(&sid, "and?")).await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert_eq!(user(2), "and?");
}

/// A plan stopped while running (the person cancelled the turn) is stored
/// and announced with one word: `interrupted`.
#[tokio::test]
async fn a_plan_stopped_while_running_is_interrupted_everywhere() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let args = json!({ "command": "sleep 30; git push origin main" }).to_string();
    let fake = FakeProvider::start(vec![fake::openai_tool_calls(&[("c1", "shell", &args)])]).await;
    let mut c = plan_client(home.path(), &fake).await;
    let Offered {
        sid,
        prompt_id: p,
        plan_id: id,
        ..
    } = prompt_until_offer(&mut c, project.path(), "push later").await;
    let r = decide(&mut c, &id, "approve").await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let plan_file = home
        .path()
        .join(format!("state/passepartout/plans/{id}.json"));
    let deadline = std::time::Instant::now() + harness::WAIT;
    while !std::fs::read_to_string(&plan_file)
        .unwrap()
        .contains("\"executing\"")
    {
        assert!(std::time::Instant::now() < deadline, "it never began");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    c.notify("session/cancel", json!({ "sessionId": sid }))
        .await;
    let done = c.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "cancelled", "{done}");
    let resolved = c.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "interrupted", "{resolved}");
    let stored: Value = serde_json::from_slice(&std::fs::read(&plan_file).unwrap()).unwrap();
    assert_eq!(stored["status"], "interrupted");
    assert!(resolved["params"]["org"]
        .as_str()
        .unwrap()
        .contains("* INTERRUPTED shell"));
}

/// The client that decided hears the outcome even when another daemon
/// runs the plan (the deciding daemon watches the store).
#[tokio::test]
async fn the_deciding_client_of_another_daemon_hears_the_outcome() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        write_call("both.txt", "shared\n"),
        fake::openai_text("Done."),
    ])
    .await;
    let mut first = plan_client(home.path(), &fake).await;
    let Offered {
        prompt_id: p,
        plan_id: id,
        ..
    } = prompt_until_offer(&mut first, project.path(), "write both.txt").await;

    let mut second = plan_client(home.path(), &fake).await;
    let r = decide(&mut second, &id, "approve").await;
    assert_eq!(
        r["result"]["runs"], "now: the daemon whose turn made it runs it",
        "{r}"
    );
    assert_eq!(
        first.wait_response(p).await["result"]["stopReason"],
        "end_turn"
    );
    let heard = second.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(
        (
            heard["params"]["planId"].clone(),
            heard["params"]["status"].clone()
        ),
        (json!(id), json!("executed")),
        "{heard}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("both.txt")).unwrap(),
        "shared\n"
    );
}

/// Issue 18 / 21: a flight plan for a file change shows the diff against
/// the file as it is now, before the person decides (the Org plan gets
/// what an ACP client gets in its permission request).
#[tokio::test]
async fn a_write_file_plan_shows_its_diff_before_the_decision() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let fake = FakeProvider::start(vec![
        write_call("notes.txt", "one\n2\nthree\n"),
        fake::openai_text("ok"),
    ])
    .await;
    let mut c = plan_client(home.path(), &fake).await;
    let Offered { offer, .. } = prompt_until_offer(&mut c, project.path(), "edit").await;
    let org = offer["params"]["plan"]["org"].as_str().unwrap();
    let changes = org
        .split("** Changes\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Changes section: {org}"));
    assert!(changes.contains("#+begin_src diff"), "{org}");
    assert!(
        changes.contains("--- a/notes.txt") && changes.contains("+++ b/notes.txt"),
        "{org}"
    );
    assert!(
        changes.contains("\n-two\n") && changes.contains("\n+2\n"),
        "{org}"
    );
    // Nothing was written before the decision.
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
}
