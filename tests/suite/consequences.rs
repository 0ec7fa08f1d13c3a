//! Issue 36: the changeset decides. Through the real binary (`passepartout
//! run`, no terminal), real bubblewrap and overlay transactions, and a
//! scripted model:
//! - the host-executed surface (a venv's `bin/`, pre-commit, husky with
//!   `core.hooksPath = .husky/_`) is asked whatever command wrote it, and
//!   the project stays as it was while the plan waits;
//! - a loss undo cannot restore is asked;
//! - the routine loop (a `write_file` edit, `rm -rf build`, an interpreter
//!   heredoc, a script written and run, a `/tmp` write, an assignment that
//!   only looks like a credential) runs unasked and is undoable;
//! - a push and a network grant still ask;
//! - a held change stays held: `plans approve`, then `run --continue`,
//!   applies exactly it;
//! - the in-place destroyers (`find -delete`, `find -exec rm`, `xargs rm`,
//!   `truncate`, `shred`, `dd of=`) run contained over more files than the
//!   old bulk threshold and `undo` restores every byte; past the
//!   checkpoint quota the same deletion is asked as a loss;
//! - an action that changed nothing is recorded, and `undo` names it.

use crate::harness;
use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use support::fake_provider::{self as fake, FakeProvider, Reply};

use super::run_cli::waiting_plan_id;

/// `run`'s exit status when an action waits for a person.
const WAITING: i32 = 3;

/// A Python and Node project in git: tracked sources, a pre-commit
/// configuration and husky hooks (`core.hooksPath = .husky/_`), and ignored
/// trees: a virtual environment, build output, a big cached file.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let write = |rel: &str, text: &str| {
        let path = p.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let git = |args: &[&str]| harness::git(p, args);
    git(&["init", "-q"]);
    write(".gitignore", ".venv/\nbuild/\ncache/\n");
    write("src/app.py", "x = 1\n");
    write("payload.txt", "echo pwned\n");
    write(
        ".pre-commit-config.yaml",
        "repos:\n- repo: local\n  hooks:\n  - id: tests\n    name: tests\n    entry: pytest\n    language: system\n",
    );
    write(".husky/pre-commit", "npm test\n");
    write(".husky/_/pre-commit", "#!/bin/sh\n. \"${0%/*}/h\"\n");
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    git(&["config", "core.hooksPath", ".husky/_"]);
    write(".venv/pyvenv.cfg", "home = /usr/bin\n");
    write(".venv/bin/activate", "# activate this environment\n");
    write(".venv/bin/pip", "#!/usr/bin/python3\nprint('pip')\n");
    std::fs::set_permissions(
        p.join(".venv/bin/pip"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write("build/out.o", "object\n");
    write("build/sub/more.o", "more\n");
    write("cache/model.bin", &"w".repeat(300 * 1024));
    dir
}

struct Case {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        assert!(harness::bwrap_available(), "these tests need bubblewrap");
        Case {
            home: tempfile::tempdir().unwrap(),
            project: project(),
        }
    }

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

    /// One `run` whose model makes `call`, then says it is done.
    async fn run_with(&self, args: &[&str], script: Vec<Reply>) -> Output {
        let fake = FakeProvider::start(script).await;
        let url = fake.openai_url();
        let mut all = vec!["run", "--provider-url", &url];
        all.extend_from_slice(args);
        all.push("go");
        self.command(&all).output().await.unwrap()
    }

    async fn run(&self, call: Reply) -> Output {
        self.run_with(&[], vec![call, fake::openai_text("done")])
            .await
    }

    async fn shell(&self, command: &str) -> Output {
        self.run(fake::shell_call("call_1", command)).await
    }

    async fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().await.unwrap()
    }

    /// `passepartout plans approve ID`, which must succeed.
    async fn approve(&self, id: &str) {
        let out = self.cli(&["plans", "approve", id]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.project.path().join(rel)).unwrap_or_default()
    }

    fn exists(&self, rel: &str) -> bool {
        self.project.path().join(rel).exists()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The action was held for a person by `gate`, and `rel` on the host is
/// as it was.
async fn asked_by(c: &Case, out: Output, gate: &str, rel: &str, before: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    assert!(
        stderr.contains(&format!("gate `{gate}` says ask")),
        "{gate} missing: {stderr}"
    );
    assert_eq!(c.read(rel), before, "{rel} changed while held: {stderr}");
}

/// The action ran unasked.
fn ran(out: &Output) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("waiting for a person"), "{stderr}");
}

/// `passepartout undo` restores the last action.
async fn undone(c: &Case) {
    let out = c.cli(&["undo"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_host_executed_surface_is_asked_whatever_command_wrote_it() {
    let c = Case::new();
    let activate = c.read(".venv/bin/activate");
    for command in [
        "sed -i '$a echo pwned' .venv/bin/activate",
        "echo 'echo pwned' | tee -a .venv/bin/activate",
        "cat payload.txt >> .venv/bin/activate",
        // An interpreter writes it: the same consequence.
        "python3 - <<'EOF'\nimport pathlib\np = next(pathlib.Path().glob('*/bin/activate'))\n\
         p.write_text(p.read_text().replace('# ', 'echo pwned # '))\nEOF",
    ] {
        let out = c.shell(command).await;
        asked_by(
            &c,
            out,
            "effect-host-executed",
            ".venv/bin/activate",
            &activate,
        )
        .await;
    }
    // The plan shows the diff of the ignored tree's file, read from the
    // held change.
    let out = c.shell("sed -i '$a echo shown' .venv/bin/activate").await;
    let stderr = text(&out.stderr);
    let id = waiting_plan_id(&stderr);
    let shown = text(&c.cli(&["plans", "show", &id]).await.stdout);
    assert!(shown.contains("+echo shown"), "{shown}");
    let pip = c.read(".venv/bin/pip");
    let out = c.shell("sed -i 's/print/exec/' .venv/bin/pip").await;
    asked_by(&c, out, "effect-host-executed", ".venv/bin/pip", &pip).await;
    let out = c
        .shell("cp .venv/bin/pip .venv/bin/git && sed -i 's/pip/git/' .venv/bin/git")
        .await;
    asked_by(&c, out, "effect-host-executed", ".venv/bin/git", "").await;
    assert!(!c.exists(".venv/bin/git"));

    let config = c.read(".pre-commit-config.yaml");
    let out = c
        .shell("sed -i 's/entry: pytest/entry: sh payload.txt/' .pre-commit-config.yaml")
        .await;
    asked_by(
        &c,
        out,
        "effect-host-executed",
        ".pre-commit-config.yaml",
        &config,
    )
    .await;
    let out = c.shell("cp payload.txt .pre-commit-config.yaml").await;
    asked_by(
        &c,
        out,
        "effect-host-executed",
        ".pre-commit-config.yaml",
        &config,
    )
    .await;

    let hook = c.read(".husky/pre-commit");
    let out = c
        .shell("sed -i '1i sh payload.txt' .husky/pre-commit")
        .await;
    asked_by(&c, out, "effect-host-executed", ".husky/pre-commit", &hook).await;
    // write_file onto the surface asks before it writes.
    let out = c
        .run(fake::write_call(
            "call_w",
            ".husky/pre-commit",
            "sh payload.txt\n",
        ))
        .await;
    asked_by(&c, out, "consequence", ".husky/pre-commit", &hook).await;
}

#[tokio::test]
async fn a_loss_undo_cannot_restore_is_asked() {
    let c = Case::new();
    let model = c.read("cache/model.bin");
    let out = c.shell("rm cache/model.bin").await;
    asked_by(&c, out, "effect-loss", "cache/model.bin", &model).await;
    let out = c
        .shell("python3 - <<'EOF'\nopen('cache/model.bin', 'w').write('small')\nEOF")
        .await;
    asked_by(&c, out, "effect-loss", "cache/model.bin", &model).await;
}

#[tokio::test]
async fn project_edits_undo_can_restore_run_unasked_and_are_undone() {
    let c = Case::new();
    // write_file edit of a tracked file.
    let out = c
        .run(fake::write_call("call_w", "src/app.py", "x = 2\n"))
        .await;
    ran(&out);
    assert_eq!(c.read("src/app.py"), "x = 2\n");
    undone(&c).await;
    assert_eq!(c.read("src/app.py"), "x = 1\n");
    // The same edit by an interpreter heredoc.
    let out = c
        .shell(
            "python3 - <<'EOF'\nimport pathlib\np = pathlib.Path('src/app.py')\n\
             p.write_text(p.read_text().replace('1', '3'))\nEOF",
        )
        .await;
    ran(&out);
    assert_eq!(c.read("src/app.py"), "x = 3\n");
    undone(&c).await;
    assert_eq!(c.read("src/app.py"), "x = 1\n");
    // A recursive delete of ignored build output.
    let out = c.shell("rm -rf build").await;
    ran(&out);
    assert!(!c.exists("build/out.o"));
    undone(&c).await;
    assert_eq!(c.read("build/out.o"), "object\n");
    assert_eq!(c.read("build/sub/more.o"), "more\n");
}

#[tokio::test]
async fn the_routine_loop_runs_unasked() {
    let c = Case::new();
    for (command, file, want) in [
        (
            "printf 'open(\"gen.txt\", \"w\").write(\"g\")\\n' > gen.py && python3 gen.py",
            "gen.txt",
            "g",
        ),
        (
            "node -e \"require('fs').writeFileSync('n.txt', 'n')\"",
            "n.txt",
            "n",
        ),
        ("python3 -c \"open('c.txt', 'w').write('c')\"", "c.txt", "c"),
        (
            "echo scratch > /tmp/t.txt && cp /tmp/t.txt t.txt",
            "t.txt",
            "scratch\n",
        ),
        (
            "PW=\"${ORACLE_SECRET:-default}\"; echo \"$PW\" > pw.txt",
            "pw.txt",
            "default\n",
        ),
    ] {
        let out = c.shell(command).await;
        ran(&out);
        assert_eq!(c.read(file), want, "{command}");
        undone(&c).await;
        assert!(!c.exists(file), "{command}: undo left {file}");
    }
}

#[tokio::test]
async fn a_push_and_a_network_grant_still_ask() {
    let c = Case::new();
    let out = c.shell("git push origin main").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    assert!(stderr.contains("push"), "{stderr}");

    // A tool granted the network is not contained: code fed to an
    // interpreter there is asked before it runs.
    let skills = c.home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("fetch.org"),
        "#+SKILL: fetch\n\
         * fetch :tool:\n\
         :PROPERTIES:\n\
         :APPROVAL: auto\n\
         :NETWORK: yes\n\
         :END:\n\
         Fetch the project's data.\n\
         #+begin_src bash\n\
         python3 - <<'EOF'\nopen('fetched.txt', 'w').write('x')\nEOF\n\
         #+end_src\n",
    )
    .unwrap();
    let out = c
        .run(fake::openai_tool_calls(&[("call_n", "fetch", "{}")]))
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    assert!(stderr.contains("here-document"), "{stderr}");
    assert!(!c.exists("fetched.txt"));
}

#[tokio::test]
async fn a_held_change_stays_held_until_approved_then_continue_applies_it() {
    let c = Case::new();
    let out = c
        .shell("sed -i 's/entry: pytest/entry: sh payload.txt/' .pre-commit-config.yaml")
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    assert!(!stderr.contains("rejected"), "{stderr}");
    let id = waiting_plan_id(&stderr);
    assert!(c.read(".pre-commit-config.yaml").contains("entry: pytest"));

    c.approve(&id).await;
    let out = c
        .run_with(&["--continue"], vec![fake::openai_text("noted")])
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("only held checkpoints"), "{stderr}");
    assert!(
        c.read(".pre-commit-config.yaml")
            .contains("entry: sh payload.txt"),
        "{stderr}"
    );
}

#[tokio::test]
async fn destructive_code_runs_contained_and_is_undone_what_undo_cannot_restore_asks() {
    let c = Case::new();
    for command in [
        "python3 -c \"__import__('shutil').rmtree('src')\"",
        "printf 'rm -rf src\\n' > c.sh && bash c.sh",
    ] {
        let out = c.shell(command).await;
        ran(&out);
        assert!(!c.exists("src/app.py"), "{command}");
        undone(&c).await;
        assert_eq!(c.read("src/app.py"), "x = 1\n", "{command}");
        assert!(!c.exists("c.sh"), "{command}");
    }
    // The repository itself is what checkpoints do not restore.
    let head = c.read(".git/HEAD");
    let out = c
        .shell("python3 -c \"__import__('shutil').rmtree('.git/objects')\"")
        .await;
    asked_by(&c, out, "effect-project-git", ".git/HEAD", &head).await;
    assert!(c.exists(".git/objects"));
}

#[tokio::test]
async fn a_persons_own_rule_keeps_asking() {
    let c = Case::new();
    harness::ask_before_recursive_deletes(c.home.path());
    let out = c.shell("rm -rf build").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    assert!(
        stderr.contains("Ask before deleting recursively"),
        "{stderr}"
    );
    assert_eq!(c.read("build/out.o"), "object\n");
}

/// A held change stays applicable across a daemon restart: the editor
/// quits while the effect's plan waits (the plan stays pending, and so does
/// the held change), the next daemon offers it again, and approving it
/// applies exactly the change shown.
#[tokio::test]
async fn a_held_change_survives_a_daemon_restart_and_applies_once_approved() {
    use harness::{prompt, Client, Framing};
    let c = Case::new();
    let command = "sed -i 's/entry: pytest/entry: sh payload.txt/' .pre-commit-config.yaml";
    let fake = FakeProvider::start(vec![fake::shell_call("call_1", command)]).await;
    let url = fake.openai_url();
    let mut first = Client::spawn(
        Framing::ContentLength,
        c.home.path(),
        &["--provider-url", &url],
    );
    first
        .initialize(serde_json::json!({ "flightPlans": true }))
        .await;
    let sid = first.new_session(c.project.path()).await;
    first
        .start_request("session/prompt", prompt(&sid, "go"))
        .await;
    let offer = first.wait_method("_passepartout/plan/offer").await;
    let id = offer["params"]["plan"]["planId"]
        .as_str()
        .unwrap()
        .to_string();
    let org = offer["params"]["plan"]["org"].as_str().unwrap_or_default();
    assert!(org.contains("effect-host-executed"), "{org}");
    assert!(
        org.contains("+    entry: sh payload.txt"),
        "the diff: {org}"
    );
    // The editor quits: end of input.
    first.close_stdin();
    let status = tokio::time::timeout(harness::WAIT, first.child.wait())
        .await
        .expect("the daemon exits at end of input")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(c.read(".pre-commit-config.yaml").contains("entry: pytest"));

    let fake = FakeProvider::start(vec![]).await;
    let url = fake.openai_url();
    let mut next = Client::spawn(
        Framing::ContentLength,
        c.home.path(),
        &["--provider-url", &url],
    );
    next.initialize(serde_json::json!({ "flightPlans": true }))
        .await;
    let again = next.wait_method("_passepartout/plan/offer").await;
    assert_eq!(again["params"]["plan"]["planId"], serde_json::json!(id));
    let r = next
        .request(
            "_passepartout/plan/decide",
            serde_json::json!({ "planId": id, "decision": "approve" }),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = next.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    assert!(
        c.read(".pre-commit-config.yaml")
            .contains("entry: sh payload.txt"),
        "{resolved}"
    );
}

/// A held change whose plan a person rejects is discarded at the next
/// `run --continue`; the project never held it.
#[tokio::test]
async fn a_rejected_held_change_is_discarded() {
    let c = Case::new();
    let config = c.read(".pre-commit-config.yaml");
    let out = c
        .shell("sed -i 's/entry: pytest/entry: sh payload.txt/' .pre-commit-config.yaml")
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    let id = waiting_plan_id(&stderr);
    let history = text(&c.cli(&["history"]).await.stdout);
    assert!(history.contains("held"), "{history}");
    let rejected = c.cli(&["plans", "reject", &id]).await;
    assert_eq!(
        rejected.status.code(),
        Some(0),
        "{}",
        text(&rejected.stderr)
    );
    let out = c
        .run_with(&["--continue"], vec![fake::openai_text("noted")])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let history = text(&c.cli(&["history"]).await.stdout);
    assert!(history.contains("rejected"), "{history}");
    assert!(!history.contains("held"), "{history}");
    assert_eq!(c.read(".pre-commit-config.yaml"), config);
}

/// Every file and folder under the project but `.git`, with its bytes.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            if path.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                pending.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `n` more tracked sources of `size` bytes each under `src/` (committed),
/// so that `src` holds more files than `[checkpoints] max_deleted_files`.
fn add_sources(c: &Case, n: usize, size: usize) {
    let p = c.project.path();
    for i in 0..n {
        let line = format!("# module {i}\n");
        let text = line.repeat(size / line.len() + 1);
        std::fs::write(p.join(format!("src/m{i}.py")), &text[..size]).unwrap();
    }
    harness::git(p, &["add", "-A", "src"]);
    harness::git(p, &["commit", "-qm", "sources"]);
}

/// Issue 36: the in-place destroyers the text once asked about run
/// contained — `find -delete`, `find -exec rm`, `xargs rm`, `truncate`,
/// `shred`, `dd of=` — each deleting or cutting more tracked files than
/// the old bulk threshold (20). What they did reaches the host, is
/// recorded, and `undo` puts back every byte and folder.
#[tokio::test]
async fn contained_destroyers_run_and_undo_restores_every_byte() {
    let c = Case::new();
    add_sources(&c, 24, 200);
    let before = tree(c.project.path());
    for (command, changed) in [
        ("find src -delete", "src/m0.py"),
        ("find src -name '*.py' -exec rm {} +", "src/m1.py"),
        ("git ls-files -z src | xargs -0 rm -f", "src/m2.py"),
        ("truncate -s 0 src/*.py", "src/m3.py"),
        ("shred -u src/*.py", "src/m4.py"),
        (
            "dd if=/dev/zero of=src/m5.py bs=1 count=8 conv=notrunc && dd if=/dev/zero of=src/app.py count=1",
            "src/m5.py",
        ),
    ] {
        let out = c.shell(command).await;
        ran(&out);
        let now = tree(c.project.path());
        assert_ne!(
            now.get(changed),
            before.get(changed),
            "{command} did not reach {changed} on the host"
        );
        let history = text(&c.cli(&["history", "--limit", "1"]).await.stdout);
        assert!(history.contains("applied"), "{command}: {history}");
        undone(&c).await;
        assert_eq!(
            tree(c.project.path()),
            before,
            "{command}: undo did not restore every file"
        );
    }
}

/// A bulk deletion whose pre-images the checkpoint store cannot hold
/// (`[checkpoints] max_store_bytes`) is a loss undo cannot promise to
/// restore: asked, with the files untouched while the plan waits.
#[tokio::test]
async fn a_bulk_deletion_over_the_checkpoint_quota_is_asked() {
    let c = Case::new();
    let config = c.home.path().join("config/passepartout");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[checkpoints]\nmax_store_bytes = 65536\n",
    )
    .unwrap();
    add_sources(&c, 24, 4096);
    let module = c.read("src/m0.py");
    for command in ["find src -type f -delete", "git ls-files src | xargs rm"] {
        let out = c.shell(command).await;
        asked_by(&c, out, "effect-loss", "src/m0.py", &module).await;
    }
}

/// Every action gets a record: one that changed nothing (or only git's
/// own files) says so in `history`, and `undo` after it names it instead
/// of reaching past it unsaid. `undo` takes the newest action that
/// changed the project (the "Undo is predictable"), and says there
/// was nothing to undo for the newer ones; with nothing older left, it
/// refuses and names them.
#[tokio::test]
async fn an_action_that_changed_nothing_is_recorded_and_named_by_undo() {
    let c = Case::new();
    let out = c
        .run(fake::write_call("call_w", "src/app.py", "x = 2\n"))
        .await;
    ran(&out);
    ran(&c.shell("cat src/app.py").await);
    ran(&c.shell("git add src/app.py").await);
    let history = text(&c.cli(&["history"]).await.stdout);
    let lines: Vec<&str> = history.lines().filter(|l| l.starts_with('c')).collect();
    assert!(
        lines[0].starts_with("c3  unchanged") && lines[0].contains("changed only git's own files"),
        "{history}"
    );
    assert!(
        lines[1].starts_with("c2  unchanged") && lines[1].contains("no change"),
        "{history}"
    );
    assert!(lines[2].starts_with("c1  applied"), "{history}");

    let out = c.cli(&["undo"]).await;
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(said.starts_with("undid c1 (write_file, "), "{said}");
    assert!(
        said.contains(
            "nothing to undo for the newer c3 (shell), c2 (shell), which changed nothing"
        ),
        "{said}"
    );
    assert_eq!(c.read("src/app.py"), "x = 1\n");

    // Right after an action that changed nothing, with no change left
    // before it: refused, naming it; nothing is re-applied.
    ran(&c.shell("ls").await);
    let out = c.cli(&["undo"]).await;
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("nothing to undo for the newer c5 (shell), which changed nothing"),
        "{said}"
    );
    assert_eq!(c.read("src/app.py"), "x = 1\n");
}

/// A command asked before it ran (a credential-looking assignment), then
/// approved, runs at `run --continue`; its changeset writes the host-executed
/// surface, so it is held again. Nobody can be asked at that moment: the
/// change stays held under a plan of its own, and approving that one
/// applies it.
#[tokio::test]
async fn an_approved_command_whose_change_is_held_again_gets_a_plan_of_its_own() {
    let c = Case::new();
    let line = "export API_TOKEN=Zx8Qw2Er5Ty7Ui9Op1As3Df";
    let out = c
        .shell(&format!("sed -i '$a {line}' .venv/bin/activate"))
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(WAITING), "{stderr}");
    let first = waiting_plan_id(&stderr);
    c.approve(&first).await;

    let out = c
        .run_with(&["--continue"], vec![fake::openai_text("noted")])
        .await;
    let stderr = text(&out.stderr);
    assert!(
        !c.read(".venv/bin/activate").contains(line),
        "applied unasked: {stderr}"
    );
    let listed = text(&c.cli(&["plans", "list"]).await.stdout);
    let second = listed
        .lines()
        .find(|l| l.contains("pending") && !l.contains(&first))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("fp-")))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no second plan pending:\n{listed}\n{stderr}"));

    c.approve(&second).await;
    let out = c
        .run_with(&["--continue"], vec![fake::openai_text("noted")])
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(c.read(".venv/bin/activate").contains(line), "{stderr}");
}
