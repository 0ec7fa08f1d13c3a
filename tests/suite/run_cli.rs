//! `passepartout run` and flight plans, through the real binary: without a
//! terminal an action that needs a person is left as a pending plan (exit
//! status 3, the gate, the exact `plans` commands); `plans approve|reject`
//! decide it (an edit the gates deny stays pending and fails); `run
//! --continue` runs what was approved through the normal plan path and
//! tells the model what happened. In a real terminal (a pty), `run` shows
//! the plan and offers approve / reject / edit in $EDITOR / leave pending.
//! Model text never reaches the terminal raw.

use crate::harness;
use crate::support;

use std::path::PathBuf;
use std::process::Output;

use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

/// The exit status of `run` when an action waits for a person.
const WAITING: i32 = 3;
const NEWS: &str = "[passepartout] What became of earlier actions";

struct Setup {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    fake: FakeProvider,
}

async fn setup(script: Vec<Reply>) -> Setup {
    let home = tempfile::tempdir().unwrap();
    harness::write_file_asks(home.path());
    Setup {
        home,
        project: tempfile::tempdir().unwrap(),
        fake: FakeProvider::start(script).await,
    }
}

impl Setup {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.args(args)
            .current_dir(self.project.path())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("XDG_STATE_HOME", self.home.path().join("state"))
            .env("XDG_DATA_HOME", self.home.path().join("data"))
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// `passepartout run [ARGS…] PROMPT` against the fake provider, with
    /// no terminal.
    async fn run(&self, args: &[&str], prompt: &str) -> Output {
        let url = self.fake.openai_url();
        let mut all = vec!["run", "--provider-url", &url];
        all.extend_from_slice(args);
        all.push(prompt);
        self.command(&all).output().await.unwrap()
    }

    async fn plans(&self, args: &[&str]) -> Output {
        let mut all = vec!["plans"];
        all.extend_from_slice(args);
        self.command(&all).output().await.unwrap()
    }

    fn plan(&self, id: &str) -> Value {
        let path = self
            .home
            .path()
            .join(format!("state/passepartout/plans/{id}.json"));
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    }

    fn audit(&self) -> Vec<Value> {
        let path = self.home.path().join("state/passepartout/audit.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The text of the last user message of provider request `n`.
    fn user_text(&self, n: usize) -> String {
        let reqs = self.fake.requests();
        let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
        let last = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
        last["content"].as_str().unwrap_or_default().to_string()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The plan id in `run`'s "waiting" lines.
pub(crate) fn waiting_plan_id(stderr: &str) -> String {
    let at = stderr
        .find("passepartout plans approve ")
        .unwrap_or_else(|| panic!("no approve line in {stderr}"));
    stderr[at + "passepartout plans approve ".len()..][..15].to_string()
}

#[tokio::test]
async fn run_without_a_terminal_leaves_a_plan_that_continue_runs_once_approved() {
    let s = setup(vec![
        fake::write_call("call_w", "out.txt", "hello\n"),
        fake::openai_text("Noted.\u{1b}[1A\u{1b}[2K\u{1b}]52;c;ZXZpbA==\u{7}"),
        fake::openai_text("Nothing new."),
    ])
    .await;
    let out = s.run(&[], "write out.txt").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    let id = waiting_plan_id(&stderr);
    for line in [
        "passepartout: waiting for a person: write_file: write ".to_string(),
        "out.txt (6 bytes)\n".to_string(),
        format!("  passepartout plans show {id}\n"),
        format!("  passepartout plans reject {id} --comment \"why\"\n"),
        "(exit status 3)".to_string(),
    ] {
        assert!(stderr.contains(&line), "{line} missing from {stderr}");
    }
    assert!(stderr.contains("  gate `"), "the gate that asked: {stderr}");
    assert!(
        !stderr.contains("rejected"),
        "nobody rejected anything: {stderr}"
    );
    assert_eq!(s.plan(&id)["status"], "pending");
    assert!(!s.project.path().join("out.txt").exists());

    let approved = s.plans(&["approve", &id]).await;
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        text(&approved.stdout)
    );

    let out = s.run(&["--continue"], "and now?").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("running approved flight plan {id}")),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(s.project.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    // The model is told what became of its call, in the plan's words.
    let told = s.user_text(1);
    assert!(told.starts_with(NEWS), "{told}");
    assert!(
        told.contains(&format!(
            "out.txt (6 bytes)) became flight plan {id}: approved by cli and executed"
        )),
        "{told}"
    );
    assert!(told.ends_with("and now?"), "{told}");
    // Its answer reaches the terminal escaped, never as control sequences.
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("Noted.\\x1b[1A\\x1b[2K\\x1b]52;c;ZXZpbA==\\x07"),
        "{stdout:?}"
    );
    assert!(!out.stdout.contains(&0x1b), "{stdout:?}");

    // The plan file, `plans show` and the audit log agree.
    assert_eq!(s.plan(&id)["status"], "executed");
    let shown = text(&s.plans(&["show", &id]).await.stdout);
    assert!(shown.contains("* DONE write_file"), "{shown}");
    let audit = s.audit();
    let decision = audit
        .iter()
        .find(|r| r["kind"] == "decision" && r["plan_id"] == json!(id))
        .unwrap_or_else(|| panic!("no decision in {audit:?}"));
    assert_eq!(decision["by"], "cli");
    assert_eq!(decision["evidence"]["tool_call_id"], "call_w");
    assert_eq!(decision["evidence"]["edited"], false);
    assert!(audit
        .iter()
        .any(|r| r["kind"] == "executed" && r["plan_id"] == json!(id)));

    // Told once.
    let out = s.run(&["--continue"], "anything else?").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(s.user_text(2), "anything else?");

    // `sessions show` escapes the model's text too.
    let sid = stderr_session(&text(&out.stderr));
    let shown = s
        .command(&["sessions", "show", &sid])
        .output()
        .await
        .unwrap();
    assert!(!shown.stdout.contains(&0x1b), "{}", text(&shown.stdout));
    assert!(
        text(&shown.stdout).contains("Noted.\\x1b[1A"),
        "{}",
        text(&shown.stdout)
    );
}

fn stderr_session(stderr: &str) -> String {
    let at = stderr
        .find("session ")
        .unwrap_or_else(|| panic!("{stderr}"));
    stderr[at + 8..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_rejected_plan_is_told_to_the_model_as_rejected() {
    let s = setup(vec![
        fake::write_call("call_w", "no.txt", "x\n"),
        fake::openai_text("Understood."),
    ])
    .await;
    let out = s.run(&[], "write no.txt").await;
    assert_eq!(out.status.code(), Some(WAITING));
    let id = waiting_plan_id(&text(&out.stderr));
    let rejected = s.plans(&["reject", &id, "--comment", "not today"]).await;
    assert_eq!(rejected.status.code(), Some(0));
    let out = s.run(&["--continue"], "ok?").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let told = s.user_text(1);
    assert!(
        told.contains(&format!(
            "became flight plan {id}: rejected by cli (\"not today\"); it did not run."
        )),
        "{told}"
    );
    assert!(!s.project.path().join("no.txt").exists());
    assert_eq!(s.plan(&id)["status"], "rejected");
}

#[tokio::test]
async fn an_edit_the_gates_deny_stays_pending_and_the_audit_keeps_both_actions() {
    let s = setup(vec![fake::shell_call("c1", "git push origin main")]).await;
    let out = s.run(&[], "push").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    let id = waiting_plan_id(&stderr);
    let org = text(&s.plans(&["show", &id]).await.stdout);
    assert!(org.contains("git push origin main"), "{org}");

    let edited = s.home.path().join("edited.org");
    std::fs::write(
        &edited,
        org.replace("git push origin main", "sudo rm -rf /"),
    )
    .unwrap();
    let denied = s
        .plans(&["approve", &id, "--edited", edited.to_str().unwrap()])
        .await;
    let said = text(&denied.stdout);
    assert_eq!(denied.status.code(), Some(1), "{said}");
    assert!(
        said.starts_with("error: the gates deny the edited action: ")
            && said.contains(&format!("{id} is still pending: nothing was approved")),
        "{said}"
    );
    assert_eq!(s.plan(&id)["status"], "pending");
    assert!(!s.audit().iter().any(|r| r["kind"] == "decision"));

    std::fs::write(
        &edited,
        org.replace("git push origin main", "git push origin HEAD"),
    )
    .unwrap();
    let ok = s
        .plans(&["approve", &id, "--edited", edited.to_str().unwrap()])
        .await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stdout));
    let audit = s.audit();
    let decision = audit
        .iter()
        .find(|r| r["kind"] == "decision")
        .unwrap_or_else(|| panic!("{audit:?}"));
    let evidence = &decision["evidence"];
    assert_eq!(
        (decision["by"].clone(), evidence["edited"].clone()),
        (json!("cli"), json!(true)),
        "{decision}"
    );
    assert_eq!(
        evidence["proposed"]["effect"]["script"],
        "git push origin main"
    );
    assert_eq!(
        evidence["approved"]["effect"]["script"],
        "git push origin HEAD"
    );
    let diff = evidence["diff"].as_str().unwrap();
    assert!(
        diff.contains("-git push origin main\n+git push origin HEAD\n"),
        "{diff}"
    );
    assert!(
        !evidence["proposed_verdicts"].as_array().unwrap().is_empty(),
        "{evidence}"
    );
    assert!(
        evidence["approved_verdicts"]["trace"].is_array(),
        "{evidence}"
    );
    assert_ne!(evidence["proposed_hash"], evidence["approved_hash"]);
    assert_eq!(s.plan(&id)["status"], "approved");
}

/// Where a terminal run happens: owned, to move into a blocking task (the
/// fake provider must keep serving meanwhile).
#[derive(Clone)]
struct Where {
    url: String,
    home: PathBuf,
    project: PathBuf,
}

impl Setup {
    fn place(&self) -> Where {
        Where {
            url: self.fake.openai_url(),
            home: self.home.path().to_path_buf(),
            project: self.project.path().to_path_buf(),
        }
    }
}

/// Run `passepartout run ARGS…` in a pseudo-terminal (python3's `pty`);
/// `answers` are typed, one each time a question ends the output (the
/// flight-plan choice, or the reason for a rejection). Returns the exit
/// status and everything the terminal showed.
async fn in_a_terminal(at: &Where, args: &[&str], answers: &[&str], editor: &str) -> (i32, String) {
    const DRIVER: &str = r#"
import os, pty, sys, json, select, signal, time
argv, answers = json.loads(sys.argv[1]), json.loads(sys.argv[2])
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen, out = b"", b""
prompts = (b"[l]eave it pending? ", b"the model reads it)? ")
deadline = time.time() + 60
while True:
    ready, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
    if not ready:
        os.kill(pid, signal.SIGKILL)
        out += b"\n[driver: timed out] " + repr(seen[-60:]).encode() + repr(answers).encode()
        break
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
    seen += chunk
    if answers and any(seen.endswith(p) for p in prompts):
        os.write(fd, (answers.pop(0) + "\n").encode())
        seen = b""
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let mut argv = vec![
        harness::BIN.to_string(),
        "run".into(),
        "--provider-url".into(),
        at.url.clone(),
    ];
    argv.extend(args.iter().map(std::string::ToString::to_string));
    let out = tokio::process::Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(serde_json::to_string(&argv).unwrap())
        .arg(serde_json::to_string(answers).unwrap())
        .current_dir(&at.project)
        .env("HOME", &at.home)
        .env("XDG_CONFIG_HOME", at.home.join("config"))
        .env("XDG_STATE_HOME", at.home.join("state"))
        .env("XDG_DATA_HOME", at.home.join("data"))
        .env("EDITOR", editor)
        .env_remove("VISUAL")
        .output()
        .await
        .unwrap();
    (out.status.code().unwrap_or(-1), text(&out.stdout))
}

fn python3_pty_available() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import pty, os; os.waitstatus_to_exitcode"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn run_in_a_terminal_shows_the_plan_and_offers_every_choice() {
    if !python3_pty_available() {
        eprintln!("skipped: python3 (3.9+) with pty is not available");
        return;
    }
    let s = setup(vec![
        fake::write_call("c1", "a.txt", "hello\n"),
        fake::openai_text("Done."),
        fake::write_call("c2", "b.txt", "bee\n"),
        fake::openai_text("Fine."),
        fake::write_call("c3", "c.txt", "sea\n"),
    ])
    .await;
    let at = s.place();
    // Edit in $EDITOR (after a wrong key): what runs is the person's version.
    let (code, screen) =
        in_a_terminal(&at, &["write a"], &["x", "e"], "sed -i s/hello/edited/").await;
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("#+TITLE: Flight plan fp-") && screen.contains("** Gate trace"),
        "the Org plan, not raw JSON: {screen}"
    );
    assert!(screen.contains("`x` is not one of a, r, e, l."), "{screen}");
    assert_eq!(
        std::fs::read_to_string(at.project.join("a.txt")).unwrap(),
        "edited\n"
    );
    let decision = s
        .audit()
        .into_iter()
        .find(|r| r["kind"] == "decision")
        .unwrap();
    assert_eq!(
        (
            decision["by"].clone(),
            decision["evidence"]["edited"].clone()
        ),
        (json!("run"), json!(true))
    );

    // Reject, with a reason the model reads.
    let (code, screen) =
        in_a_terminal(&at, &["--continue", "write b"], &["r", "not now"], "false").await;
    assert_eq!(code, 0, "{screen}");
    assert!(!at.project.join("b.txt").exists());
    let reqs = s.fake.requests();
    let msgs = reqs[3].body["messages"].as_array().unwrap();
    let tool = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(
        tool["content"],
        "the person (run) rejected this action: not now"
    );
    // The earlier plan was decided in its own turn: not told again.
    assert!(!s.user_text(2).contains(NEWS), "{}", s.user_text(2));

    // Leave it pending: the same waiting status as without a terminal.
    let (code, screen) = in_a_terminal(&at, &["--continue", "write c"], &["l"], "false").await;
    assert_eq!(code, WAITING, "{screen}");
    let id = waiting_plan_id(&screen);
    assert_eq!(s.plan(&id)["status"], "pending");
    assert!(!at.project.join("c.txt").exists());
}
