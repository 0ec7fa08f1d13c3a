//! A developer loop through `passepartout run` against the same commands
//! run directly on the host (issue 37, "done when"): a small Python
//! package in a git repository with history, two identical copies; each
//! step is one call of a scripted model, run inside the sandbox in one
//! copy and with `bash -c` in the other. Read, test, edit, format, build,
//! commit, branch, stash, install with the `registries` grant from a
//! stand-in registry. Each step's exit code and output must match, apart
//! from the project's path and timings, which are normalised explicitly
//! ([`normalise`]); at the end both repositories hold the same commits
//! and files.

use crate::harness;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::fake_provider::{self as fake, FakeProvider, Reply};

/// The exit status of `run` when an action waits for a person.
const WAITING: i32 = 3;

/// The `PATH` of the daemon and of the host's commands alike.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

const PERSON: &str = "[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n";

/// Commit dates fixed in the commands themselves, so that a commit (or a
/// stash, which is one) made inside and one made on the host have the
/// same hash (a hash covers its dates: without this every `git log` after
/// a commit, and `git stash pop`'s "Dropped", would differ by timing
/// alone).
const DATES: &str = "GIT_AUTHOR_DATE='2026-01-02T03:04:05Z' \
                     GIT_COMMITTER_DATE='2026-01-02T03:04:05Z'";

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The package, with two commits of history, in `dir`.
fn project(dir: &Path) {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .env("GIT_AUTHOR_NAME", "Ada Lovelace")
            .env("GIT_AUTHOR_EMAIL", "ada@example.org")
            .env("GIT_COMMITTER_NAME", "Ada Lovelace")
            .env("GIT_COMMITTER_EMAIL", "ada@example.org")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    write(dir, ".gitignore", "__pycache__/\ndeps/\n");
    write(dir, "calc/__init__.py", "from .core import add\n");
    write(dir, "calc/core.py", "def add(a, b):\n    return a + b\n");
    write(dir, "tests/__init__.py", "");
    write(
        dir,
        "tests/test_core.py",
        "import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n    \
         def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    );
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "calc: add"]);
    // A stand-in formatter: trailing spaces go, files end in one newline.
    write(
        dir,
        "fmt.py",
        "import pathlib, sys\n\nchanged = 0\nfor root in sys.argv[1:]:\n    \
         for p in sorted(pathlib.Path(root).rglob('*.py')):\n        \
         text = p.read_text()\n        \
         new = '\\n'.join(l.rstrip() for l in text.splitlines()) + '\\n'\n        \
         if new != text:\n            p.write_text(new)\n            \
         print(f'reformatted {p}')\n            changed += 1\n\
         print(f'{changed} file(s) reformatted')\n",
    );
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "a formatter"]);
}

/// `text` with what differs by place and time alone made the same: the
/// project's path, the modification time in `ls -l`'s lines (with the
/// columns' spacing, whose widths follow the times'), and unittest's
/// timing.
fn normalise(text: &str, project: &Path) -> String {
    let text = text.replace(&project.display().to_string(), "<project>");
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let words: Vec<&str> = body.split_whitespace().collect();
        let is_ls = words.len() >= 9
            && words[0].len() == 10
            && words[0].starts_with(['-', 'd', 'l', 'c', 'b', 'p', 's']);
        if is_ls {
            // mode, links, owner, group, size, then month, day and time
            // (or year), then the name.
            out.push_str(&words[..5].join(" "));
            out.push_str(" <mtime> ");
            out.push_str(&words[8..].join(" "));
        } else if let Some(at) = body.find(" tests in ").or_else(|| body.find(" test in ")) {
            let head = &body[..at];
            let unit = if body[at..].starts_with(" tests") {
                " tests"
            } else {
                " test"
            };
            if head.starts_with("Ran ") && body.ends_with('s') {
                out.push_str(&format!("{head}{unit} in <time>"));
            } else {
                out.push_str(body);
            }
        } else {
            out.push_str(body);
        }
        out.push_str(end);
    }
    out
}

/// A step's result as both sides are compared: exit code, stdout, stderr.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The exit code and the output of a shell tool result (`exit code: N`,
/// then `stdout:` and `stderr:` blocks), without what the agent adds after
/// the command's own output (the transaction's notes: they describe the
/// change, which the host side has no counterpart of).
fn parse_result(text: &str) -> Seen {
    let code = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("exit code: "))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no exit code in {text}"));
    let rest = &text[text.find('\n').map_or(text.len(), |i| i + 1)..];
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut into: Option<&mut String> = None;
    for line in rest.split_inclusive('\n') {
        match line {
            "stdout:\n" => into = Some(&mut stdout),
            "stderr:\n" => into = Some(&mut stderr),
            l if l.starts_with("[passepartout]") || l.starts_with("changes:") => into = None,
            l => {
                if let Some(buf) = into.as_deref_mut() {
                    buf.push_str(l);
                }
            }
        }
    }
    // The agent's note on the changeset, after a blank line at the end.
    for buf in [&mut stdout, &mut stderr] {
        if let Some(at) = buf.rfind("\n\n") {
            let note = &buf[at + 2..];
            if note.starts_with("changed ")
                || note.starts_with("wrote or removed ")
                || note.starts_with("The changes of this action were held")
            {
                buf.truncate(at + 1);
            }
        }
    }
    Seen {
        code,
        stdout,
        stderr,
    }
}

struct Loop {
    /// The person's home for the daemon (config, `.gitconfig`).
    home: tempfile::TempDir,
    /// The same person's home for the host's commands.
    host_home: tempfile::TempDir,
    inside: tempfile::TempDir,
    host: tempfile::TempDir,
    /// `run` has made its session (the next ones continue it).
    started: bool,
    /// The steps whose results differ.
    mismatches: Vec<String>,
    /// The flight plans a person approved.
    held: Vec<String>,
}

impl Loop {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.args(args)
            .current_dir(self.inside.path())
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("XDG_STATE_HOME", self.home.path().join("state"))
            .env("XDG_DATA_HOME", self.home.path().join("data"))
            .env("PATH", PATH)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("PASSEPARTOUT_CONFIG")
            .env_remove("GIT_AUTHOR_NAME")
            .env_remove("GIT_AUTHOR_EMAIL")
            .env_remove("GIT_COMMITTER_NAME")
            .env_remove("GIT_COMMITTER_EMAIL")
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// One `run` (continuing the session after the first) whose model
    /// makes `call` then ends; the tool result. An action held for a
    /// person is approved as a person would (`plans approve`, then `run
    /// --continue`, which runs it), and the result is the plan's.
    async fn inside(&mut self, call: Reply) -> String {
        let fake = FakeProvider::start(vec![call, fake::openai_text("ok")]).await;
        let out = self.run(&fake).await;
        if out.status.code() != Some(WAITING) {
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            return fake
                .last_tool_results()
                .pop()
                .unwrap_or_else(|| panic!("no tool result: {}", text(&out.stderr)));
        }
        let stderr = text(&out.stderr);
        let id = crate::suite::run_cli::waiting_plan_id(&stderr);
        self.held.push(id.clone());
        let approved = self.command(&["plans", "approve", &id]).output().await;
        let approved = approved.unwrap();
        assert!(approved.status.success(), "{}", text(&approved.stderr));
        let fake = FakeProvider::start(vec![fake::openai_text("ok")]).await;
        let out = self.run(&fake).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // The plan applied the change the command made; what the command
        // printed is its call's result, which the continued session holds.
        let plan = self
            .home
            .path()
            .join(format!("state/passepartout/plans/{id}.json"));
        let plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
        assert_eq!(plan["status"], "executed", "{plan}");
        fake.last_tool_results()
            .pop()
            .unwrap_or_else(|| panic!("no tool result: {}", text(&out.stderr)))
    }

    async fn run(&mut self, fake: &FakeProvider) -> Output {
        let url = fake.openai_url();
        let mut args = vec!["run", "--provider-url", &url];
        if self.started {
            args.push("--continue");
        }
        args.push("go");
        self.started = true;
        self.command(&args).output().await.unwrap()
    }

    /// `script` with `bash -c` in the host's copy, in an environment like
    /// the sandbox's (`PATH`, `HOME`, `LANG`, `TERM`).
    async fn on_host(&self, script: &str) -> Seen {
        // Async: the stand-in registry is served by this test's runtime.
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(self.host.path())
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", self.host_home.path())
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .await
            .unwrap();
        Seen {
            code: out.status.code().unwrap_or(-1),
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
        }
    }

    /// One shell step on both sides: their exit codes and outputs,
    /// normalised.
    async fn step(&mut self, id: &str, script: &str) -> (Seen, Seen) {
        let result = self.inside(fake::shell_call(id, script)).await;
        let mut inside = parse_result(&result);
        let mut host = self.on_host(script).await;
        for (seen, project) in [
            (&mut inside, self.inside.path().to_path_buf()),
            (&mut host, self.host.path().to_path_buf()),
        ] {
            seen.stdout = normalise(&seen.stdout, &project);
            seen.stderr = normalise(&seen.stderr, &project);
        }
        (inside, host)
    }

    /// A step whose outputs differ in known ways only: `known` asserts
    /// them and makes them the same, then they must match.
    async fn same_but(&mut self, id: &str, script: &str, known: impl Fn(&mut Seen, &mut Seen)) {
        let (mut inside, mut host) = self.step(id, script).await;
        known(&mut inside, &mut host);
        if inside != host {
            self.mismatches.push(format!(
                "step {id}: `{script}`\n  inside: {inside:?}\n  host:   {host:?}"
            ));
        }
    }

    /// A step whose outputs must match exactly (after [`normalise`]); a
    /// mismatch is kept, and the test fails at its end with every one.
    async fn same(&mut self, id: &str, script: &str) -> Seen {
        let (inside, host) = self.step(id, script).await;
        if inside != host {
            self.mismatches.push(format!(
                "step {id}: `{script}`\n  inside: {inside:?}\n  host:   {host:?}"
            ));
        }
        inside
    }
}

/// Known differences of `ls -la` in the project, asserted exactly (and
/// then made the same) rather than skipped. `at_root`: the listing is of
/// the project's root (else of its subdirectories).
///
/// - Inside, the project's root is the transaction's overlay mount
///   (`crates/transactions`, outside this test's reach), and overlayfs
///   gives a merged directory a link count of 1; on the host it is 2 and
///   one per subdirectory (`root_links`). It shows as `.` at the root and
///   as `..` in a subdirectory.
/// - The project lies in the host's `/tmp` here, and inside `/tmp` is the
///   session's own (docs/sandbox.md): `..` at the root has the same mode
///   and owner, its own link count and size, and `total` counts its
///   blocks.
fn known_listing_differences(inside: &mut Seen, host: &mut Seen, at_root: bool, root_links: &str) {
    let a: Vec<String> = inside.stdout.lines().map(str::to_string).collect();
    let b: Vec<String> = host.stdout.lines().map(str::to_string).collect();
    assert_eq!(a.len(), b.len(), "{inside:?}\n{host:?}");
    let (mut x, mut y) = (String::new(), String::new());
    for (a, b) in a.iter().zip(&b) {
        let mut wa: Vec<&str> = a.split(' ').collect();
        let mut wb: Vec<&str> = b.split(' ').collect();
        let name = wa.last().copied().unwrap_or_default();
        let listing = wa.len() >= 7 && wb.len() >= 7;
        if at_root && a.starts_with("total ") && b.starts_with("total ") {
            (wa, wb) = (vec!["total", "<n>"], vec!["total", "<n>"]);
        } else if listing && name == if at_root { "." } else { ".." } {
            assert_eq!(
                (wa[1], wb[1]),
                ("1", root_links),
                "the project's root: {a} / {b}"
            );
            (wa[1], wb[1]) = ("<links>", "<links>");
        } else if listing && at_root && name == ".." {
            assert_eq!(
                (wa[0], wa[2], wa[3]),
                ("drwxrwxrwt", "root", "root"),
                "the session's /tmp: {a}"
            );
            (wa[1], wb[1], wa[4], wb[4]) = ("<links>", "<links>", "<size>", "<size>");
        }
        x.push_str(&wa.join(" "));
        x.push('\n');
        y.push_str(&wb.join(" "));
        y.push('\n');
    }
    (inside.stdout, host.stdout) = (x, y);
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The files of a working tree (not `.git`), with their contents.
fn files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut queue = vec![dir.to_path_buf()];
    while let Some(d) = queue.pop() {
        for e in std::fs::read_dir(&d).unwrap().filter_map(Result::ok) {
            let p = e.path();
            // `.git` is compared through git's own commands; bytecode
            // holds its source's modification time (timing alone).
            if p.file_name()
                .is_some_and(|n| n == ".git" || n == "__pycache__")
            {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                queue.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.push((
                    rel,
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_developer_loop_inside_matches_the_host() {
    if !harness::bwrap_available() {
        return;
    }
    let build = tempfile::tempdir().unwrap();
    let wheel = crate::suite::local_services::wheel(build.path());
    let (port, _registry) = crate::suite::local_services::http_service(
        "127.0.0.2",
        crate::suite::local_services::INDEX,
        vec![("/files/standin_pkg-0.1-py3-none-any.whl".to_string(), wheel)],
    )
    .await;
    let home = harness::home_with_config(&format!(
        "shell_timeout_secs = 60\n[sandbox]\ngrant_registries = true\n\
         registries = [\"127.0.0.2:{port}\"]\n"
    ));
    std::fs::write(home.path().join(".gitconfig"), PERSON).unwrap();
    let host_home = tempfile::tempdir().unwrap();
    std::fs::write(host_home.path().join(".gitconfig"), PERSON).unwrap();
    let inside = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    project(inside.path());
    project(host.path());
    let mut l = Loop {
        home,
        host_home,
        inside,
        host,
        started: false,
        mismatches: Vec::new(),
        held: Vec::new(),
    };

    // Read.
    l.same("read1", "cat calc/core.py").await;
    // The root has .git, calc and tests: 5 links on the host.
    l.same_but("read2", "ls -la", |a, b| {
        known_listing_differences(a, b, true, "5")
    })
    .await;
    l.same_but("read3", "ls -la calc tests", |a, b| {
        known_listing_differences(a, b, false, "5")
    })
    .await;
    let log = l.same("read4", "git log --oneline").await;
    assert_eq!(log.stdout.lines().count(), 2, "{log:?}");
    l.same("read5", "git status --short").await;
    // Test.
    let t = l.same("test1", "python3 -m unittest -v 2>&1").await;
    assert!(t.stdout.contains("OK"), "{t:?}");
    // Edit: a file written by the tool, the same bytes on the host.
    let added = "def add(a, b):\n    return a + b   \n\n\ndef sub(a, b):\n    return a - b\n";
    l.inside(fake::write_call("edit1", "calc/core.py", added))
        .await;
    write(l.host.path(), "calc/core.py", added);
    l.same("edit2", "git status --short && git diff --stat")
        .await;
    l.same(
        "edit3",
        "sed -i 's/from .core import add/from .core import add, sub/' calc/__init__.py && \
         git diff calc/__init__.py",
    )
    .await;
    // Format.
    let f = l.same("fmt", "python3 fmt.py calc tests").await;
    assert!(f.stdout.contains("reformatted calc/core.py"), "{f:?}");
    // Build.
    l.same(
        "build",
        "python3 -m compileall -q calc && ls calc/__pycache__ | sort",
    )
    .await;
    l.same("test2", "python3 -m unittest 2>&1").await;
    // Commit.
    let c = l
        .same(
            "commit",
            &format!("git add -A && {DATES} git commit -m 'calc: sub' && git log --oneline"),
        )
        .await;
    assert_eq!(c.code, 0, "{c:?}");
    // Branch.
    l.same(
        "branch",
        "git checkout -b feature 2>&1 && git branch --list && git status --short --branch",
    )
    .await;
    // Stash: push and pop.
    l.same(
        "stash1",
        &format!(
            "echo '# wip' >> calc/core.py && {DATES} git stash push -m wip && git stash list && \
             git status --short"
        ),
    )
    .await;
    l.same(
        "stash2",
        "git stash pop && git stash list && git status --short && tail -1 calc/core.py",
    )
    .await;
    // Install with the grant from the stand-in registry.
    let i = l
        .same(
            "install",
            &format!(
                "python3 -m pip install --no-cache-dir --disable-pip-version-check \
                 --target deps --index-url http://127.0.0.2:{port}/simple/ standin-pkg 2>&1 && \
                 PYTHONPATH=deps python3 -c 'import standin_pkg; print(standin_pkg.MESSAGE)'"
            ),
        )
        .await;
    assert!(
        i.stdout.contains("installed from the stand-in registry"),
        "{i:?}"
    );
    // The end: the same history, branches and files on both sides.
    l.same(
        "end",
        "git log --oneline --all && git branch --list && git status --short",
    )
    .await;
    assert!(l.mismatches.is_empty(), "{}", l.mismatches.join("\n"));
    // Held for a person, once: `git stash pop` deletes the stash's ref
    // (a consequence a person approves); every other step ran unasked.
    assert_eq!(l.held.len(), 1, "{:?}", l.held);
    assert_eq!(files(l.inside.path()), files(l.host.path()));
}
