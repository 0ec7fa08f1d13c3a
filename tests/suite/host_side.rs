//! The host side of the boundary (issue 24, items 3 and 4): what the agent
//! leaves in the project must not run at the person's next `git commit`,
//! `git diff`, `git rebase --continue`, `git status` or `python3 -m pip`.
//! Each test runs the agent's writes through the real binary (fake
//! provider, real bubblewrap; the ACP client approves every command, so the
//! text gates are out of the way) and then plays the person's next step
//! outside the sandbox, with the person's own git configuration, and checks
//! that no agent-written code ran.
//!
//! - the person's git settings that point into the project (a repository's
//!   `core.hooksPath`, a global `diff.<drv>.textconv` and `filter.<drv>.clean`)
//!   name files the sandbox keeps read-only (or removes when the run
//!   creates them);
//! - git's in-progress state (a rebase stopped with `exec` lines left) and
//!   repositories the run plants (`git init` + `core.fsmonitor`, a `.git`
//!   pointer file aimed at a bare-shaped folder) are undone after the run;
//! - a top-level `pip` package or `json.py` is asked about by the effect
//!   stage, and rejected it is gone.
//!
//! Tests that need bubblewrap say so and return when it cannot run here.

use crate::harness;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::Client;
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider, Reply};

const CONFIG: &str = "shell_timeout_secs = 30\nmax_rounds = 20\n";

/// Run git as the person would, outside the sandbox: their home (and so
/// their `~/.gitconfig`) is `home`.
fn person_git(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .env("GIT_AUTHOR_NAME", "ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.org")
        .env("GIT_COMMITTER_NAME", "ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.org")
        .env("GIT_EDITOR", "true")
        .output()
        .expect("run git")
}

fn git_ok(dir: &Path, home: &Path, args: &[&str]) {
    let out = person_git(dir, home, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository with one commit of `files` (path, content, executable).
fn project(home: &Path, files: &[(&str, &str, bool)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git_ok(p, home, &["init", "-q", "-b", "main"]);
    std::fs::write(p.join("README.md"), "# demo\n").unwrap();
    for (path, text, exec) in files {
        let f = p.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, text).unwrap();
        if *exec {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    git_ok(p, home, &["add", "-A"]);
    git_ok(p, home, &["commit", "-qm", "init"]);
    dir
}

/// Write `script` to `name` in one call, run it with python3 in the next.
fn write_then_run(id: &str, name: &str, script: &str) -> [Reply; 2] {
    [
        fake::shell_call(
            &format!("{id}w"),
            &format!("cat > {name} <<'PY'\n{script}\nPY"),
        ),
        fake::shell_call(&format!("{id}r"), &format!("python3 {name}")),
    ]
}

struct Daemon {
    fake: FakeProvider,
    client: Client,
    session: String,
}

async fn daemon(home: &Path, project: &Path, mut script: Vec<Reply>) -> Daemon {
    script.push(fake::openai_text("done"));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (client, session) =
        Client::with_session(home, &["--provider-url", &url], json!({}), project).await;
    Daemon {
        fake,
        client,
        session,
    }
}

impl Daemon {
    /// One prompt to its end, approving every ask but an effect-stage ask
    /// (`apply_checkpoint`), which is rejected; the asks and every tool
    /// result the model saw.
    async fn turn(&mut self) -> (Vec<Value>, Vec<String>) {
        let (msg, asked) = self
            .client
            .prompt_answering(&self.session, "go", |ask| {
                if ask["params"]["toolCall"]["rawInput"]["op"] == "apply_checkpoint" {
                    "reject_once".into()
                } else {
                    "allow_once".into()
                }
            })
            .await;
        assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
        (asked, self.fake.last_tool_results())
    }
}

/// A marker file an agent-written program would create when it runs.
fn marker(home: &Path) -> PathBuf {
    home.join("PWNED")
}

/// Variant 1: the repository's own `core.hooksPath` (husky's setup) names
/// `.githooks/` in the project. The agent rewrites the hook git runs there
/// and adds another; the person's next `git commit` runs neither.
#[tokio::test]
async fn a_hooks_path_into_the_project_does_not_run_agent_written_hooks() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    let dir = project(h, &[(".githooks/pre-commit", "#!/bin/sh\nexit 0\n", true)]);
    let p = dir.path();
    git_ok(p, h, &["config", "core.hooksPath", ".githooks"]);
    let mark = marker(h);
    let hook = format!("#!/bin/sh\\ntouch {}\\n", mark.display());
    let mut script = Vec::new();
    script.extend(write_then_run(
        "h1",
        "hook.py",
        &format!(
            "import os\n\
             for name in ['pre-' + 'commit', 'post-' + 'commit']:\n\
             \x20   f = os.path.join('.git' + 'hooks', name)\n\
             \x20   try:\n\
             \x20       open(f, 'w').write('{hook}')\n\
             \x20       os.chmod(f, 0o755)\n\
             \x20       print('wrote', f)\n\
             \x20   except OSError as e:\n\
             \x20       print('refused', f, e)"
        ),
    ));
    let mut d = daemon(h, p, script).await;
    let (_, results) = d.turn().await;
    let told = results.join("\n");
    // The person commits.
    std::fs::write(p.join("notes.txt"), "mine\n").unwrap();
    git_ok(p, h, &["add", "notes.txt"]);
    git_ok(p, h, &["commit", "-qm", "notes"]);
    assert!(
        !mark.exists(),
        "the person's commit ran an agent-written hook"
    );
    assert!(told.contains("refused"), "{told}");
    assert!(!told.contains("wrote"), "{told}");
    assert_eq!(
        std::fs::read_to_string(p.join(".githooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!p.join(".githooks/post-commit").exists());
}

/// Variant 2: the person's global `~/.gitconfig` runs `python3
/// tools/conv.py` as a diff textconv and `./scripts/clean.sh` as a clean
/// filter (the second does not exist yet). The agent rewrites the first
/// and creates the second; the person's next `git diff` and `git add` run
/// neither.
#[tokio::test]
async fn global_textconv_and_filter_settings_do_not_run_agent_written_code() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    std::fs::write(
        h.join(".gitconfig"),
        "[diff \"py\"]\n\ttextconv = python3 tools/conv.py\n\
         [filter \"tidy\"]\n\tclean = ./scripts/clean.sh\n\tsmudge = cat\n",
    )
    .unwrap();
    let dir = project(
        h,
        &[
            (".gitattributes", "*.py diff=py\n*.txt filter=tidy\n", false),
            (
                "tools/conv.py",
                "import sys\nprint(open(sys.argv[1]).read())\n",
                false,
            ),
            ("app.py", "x = 1\n", false),
        ],
    );
    let p = dir.path();
    let mark = marker(h);
    let mut script = Vec::new();
    script.extend(write_then_run(
        "t1",
        "conv.py",
        &format!(
            "import os\n\
             try:\n\
             \x20   open(os.path.join('to' + 'ols', 'conv.py'), 'w').write(\"open('{m}', 'w')\\n\")\n\
             \x20   print('wrote conv')\n\
             except OSError as e:\n\
             \x20   print('refused conv', e)",
            m = mark.display()
        ),
    ));
    script.extend(write_then_run(
        "t2",
        "clean.py",
        &format!(
            "import os\n\
             os.makedirs('scri' + 'pts', exist_ok=True)\n\
             f = os.path.join('scri' + 'pts', 'clean.sh')\n\
             open(f, 'w').write('#!/bin/sh\\ntouch {m}\\ncat\\n')\n\
             os.chmod(f, 0o755)\n\
             print('wrote clean')",
            m = mark.display()
        ),
    ));
    let mut d = daemon(h, p, script).await;
    let (_, results) = d.turn().await;
    let told = results.join("\n");
    // The person looks at a change and stages a note.
    std::fs::write(p.join("app.py"), "x = 2\n").unwrap();
    let diff = person_git(p, h, &["diff"]);
    assert!(diff.status.success());
    std::fs::write(p.join("notes.txt"), "mine\n").unwrap();
    let _ = person_git(p, h, &["add", "notes.txt"]);
    assert!(!mark.exists(), "the person's git ran agent-written code");
    assert!(told.contains("refused conv"), "{told}");
    assert!(
        told.contains("diff.py.textconv") || told.contains("filter.tidy.clean"),
        "{told}"
    );
    assert!(
        !p.join("scripts/clean.sh").exists(),
        "the filter the run created is removed"
    );
}

/// Relative paths in the person's git settings are resolved as git does,
/// from the top of the work tree, also for a session in a subfolder: the
/// repository sets `core.hooksPath = sub/hooks` and a textconv `sh
/// sub/conv.sh`, the session's directory is `proj/sub`. The agent rewrites
/// `hooks/pre-commit` and `conv.sh` there (the same files, seen from the
/// session); the person's next `git commit` and `git diff` in `proj` run
/// neither.
#[tokio::test]
async fn git_settings_relative_to_the_work_tree_protect_a_subfolder_session() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    let dir = project(
        h,
        &[
            ("sub/hooks/pre-commit", "#!/bin/sh\nexit 0\n", true),
            ("sub/conv.sh", "#!/bin/sh\ncat \"$1\"\n", true),
            (".gitattributes", "*.txt diff=show\n", false),
            ("sub/notes.txt", "one\n", false),
        ],
    );
    let p = dir.path();
    git_ok(p, h, &["config", "core.hooksPath", "sub/hooks"]);
    git_ok(p, h, &["config", "diff.show.textconv", "sh sub/conv.sh"]);
    let session_dir = p.join("sub");
    let mark = marker(h);
    let evil = format!("#!/bin/sh\\ntouch {}\\ncat $1\\n", mark.display());
    let mut script = Vec::new();
    script.extend(write_then_run(
        "s1",
        "plant.py",
        &format!(
            "import os\n\
             for f in [os.path.join('ho' + 'oks', 'pre-commit'), 'conv' + '.sh']:\n\
             \x20   try:\n\
             \x20       open(f, 'w').write('{evil}')\n\
             \x20       os.chmod(f, 0o755)\n\
             \x20       print('wrote', f)\n\
             \x20   except OSError as e:\n\
             \x20       print('refused', f, e)"
        ),
    ));
    let mut d = daemon(h, &session_dir, script).await;
    let (_, results) = d.turn().await;
    let told = results.join("\n");
    // The person looks at a change, then commits, at the top.
    std::fs::write(session_dir.join("notes.txt"), "two\n").unwrap();
    let diff = person_git(p, h, &["diff"]);
    assert!(diff.status.success());
    git_ok(p, h, &["add", "-A"]);
    let _ = person_git(p, h, &["commit", "-qm", "notes"]);
    assert!(
        !mark.exists(),
        "the person's git ran agent-written code: {told}"
    );
    assert!(told.contains("refused hooks/pre-commit"), "{told}");
    assert!(told.contains("refused conv.sh"), "{told}");
    assert!(!told.contains("wrote"), "{told}");
}

/// In-progress state: the agent stops an interactive rebase at a `break`
/// with an `exec` line still to come. The state is removed after the run,
/// so the person's `git rebase --continue` runs nothing the agent wrote.
#[tokio::test]
async fn a_rebase_left_in_progress_cannot_run_exec_lines_at_the_persons_continue() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    let dir = project(h, &[("a.txt", "1\n", false)]);
    let p = dir.path();
    std::fs::write(p.join("a.txt"), "2\n").unwrap();
    git_ok(p, h, &["commit", "-qam", "two"]);
    let mark = marker(h);
    let editor = format!(
        "cat > ed.sh <<'SH'\nprintf 'break\\nexec touch {}\\n' > \"$1\"\nSH",
        mark.display()
    );
    let command = "export GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b GIT_AUTHOR_NAME=a \
                   GIT_AUTHOR_EMAIL=a@b; GIT_SEQUENCE_EDITOR='sh ed.sh' git rebase -i HEAD~1; \
                   ls .git/rebase-merge";
    let script = vec![
        fake::shell_call("r0", &editor),
        fake::shell_call("r1", command),
    ];
    let mut d = daemon(h, p, script).await;
    let (_, results) = d.turn().await;
    let told = results.join("\n");
    assert!(
        told.contains("git-rebase-todo"),
        "the rebase stopped: {told}"
    );
    let _ = person_git(p, h, &["rebase", "--continue"]);
    assert!(
        !mark.exists(),
        "the person's continue ran an agent-written exec line"
    );
    assert!(told.contains("rebase-merge"), "{told}");
    assert!(!p.join(".git/rebase-merge").exists(), "{told}");
}

/// Planted repositories: a `git init` in a subfolder with `core.fsmonitor`
/// set, and a `.git` pointer file aimed at a bare-shaped folder (not named
/// `.git`) whose configuration sets it. The person's `git status` there
/// (as an editor's git integration runs in every repository it finds)
/// runs neither.
#[tokio::test]
async fn repositories_planted_during_a_run_do_not_run_their_fsmonitor_on_the_host() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    let dir = project(h, &[]);
    let p = dir.path();
    let mark = marker(h);
    let fsm = format!("#!/bin/sh\\ntouch {}\\n", mark.display());
    let mut script = Vec::new();
    script.push(fake::shell_call(
        "g1",
        &format!(
            "printf '{fsm}' > fsm.sh && chmod +x fsm.sh && git init -q docs && \
             git -C docs config core.fsmonitor {}/fsm.sh && echo planted",
            p.display()
        ),
    ));
    script.extend(write_then_run(
        "g2",
        "plant.py",
        &format!(
            "import os\n\
             os.makedirs('evil/objects', exist_ok=True)\n\
             os.makedirs('evil/refs', exist_ok=True)\n\
             os.makedirs('sub', exist_ok=True)\n\
             open('evil/HEAD', 'w').write('ref: refs/heads/main\\n')\n\
             open('evil/config', 'w').write('[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = {}/fsm.sh\\n')\n\
             open(os.path.join('sub', '.g' + 'it'), 'w').write('gitdir: ../evil\\n')\n\
             print('planted')",
            p.display()
        ),
    ));
    let mut d = daemon(h, p, script).await;
    let (_, results) = d.turn().await;
    let told = results.join("\n");
    // A plain `git init` is kept.
    assert!(p.join("docs/.git/HEAD").exists());
    let _ = person_git(&p.join("docs"), h, &["status"]);
    let _ = person_git(&p.join("sub"), h, &["status"]);
    let _ = person_git(&p.join("evil"), h, &["status"]);
    assert!(
        !mark.exists(),
        "the person's git status ran a planted fsmonitor"
    );
    assert!(told.contains("docs/.git/config"), "{told}");
    assert!(told.contains("sub/.git"), "{told}");
}

/// The runtime plants the effect stage asks about: a top-level `pip`
/// package (written by a script, so no command text names it) and a
/// `json.py`. Rejected, they are gone, and the person's `python3 -m pip`
/// and `import json` in the project run the real modules.
#[tokio::test]
async fn planted_python_modules_are_asked_about_and_rejected_stay_out() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    let dir = project(h, &[("src/app.py", "print('app')\n", false)]);
    let p = dir.path();
    let mark = marker(h);
    let payload = format!("open('{}', 'w')\\n", mark.display());
    let mut script = Vec::new();
    script.extend(write_then_run(
        "p1",
        "plant.py",
        &format!(
            "import os\n\
             os.makedirs('p' + 'ip', exist_ok=True)\n\
             open(os.path.join('p' + 'ip', '__init__.py'), 'w').write('')\n\
             open(os.path.join('p' + 'ip', '__main__.py'), 'w').write(\"{payload}\")\n\
             print('planted pip')"
        ),
    ));
    script.extend(write_then_run(
        "p2",
        "plant2.py",
        &format!("open('js' + 'on.py', 'w').write(\"{payload}\")\nprint('planted json')"),
    ));
    let mut d = daemon(h, p, script).await;
    let (asked, _) = d.turn().await;
    let effect_asks: Vec<String> = asked
        .iter()
        .filter(|a| a["params"]["toolCall"]["rawInput"]["op"] == "apply_checkpoint")
        .map(|a| a["params"]["toolCall"]["content"].to_string())
        .collect();
    let out = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .current_dir(p)
        .output()
        .expect("python3");
    let _ = Command::new("python3")
        .args(["-c", "import json"])
        .current_dir(p)
        .output()
        .expect("python3");
    assert!(!mark.exists(), "the person's python3 ran a planted module");
    assert!(
        effect_asks.iter().any(|r| r.contains("pip/__main__.py")),
        "{effect_asks:?}"
    );
    assert!(
        effect_asks.iter().any(|r| r.contains("json.py")),
        "{effect_asks:?}"
    );
    assert!(!p.join("pip").exists());
    assert!(!p.join("json.py").exists());
    if out.status.success() {
        assert!(String::from_utf8_lossy(&out.stdout).contains("pip "));
    }
}
