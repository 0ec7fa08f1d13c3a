//! The sandbox's view is built up, not carved down (issue 17): attacks a
//! hostile model would try where the boundary used to be "the host, minus
//! a list", through the real binary (fake provider, real bubblewrap). The
//! ACP client approves whatever it is asked, so the text gates are out of
//! the way: the kernel must hold. Each attack is spelled as a Python script
//! written in one call and run in the next, as a model steered by hostile
//! content would.
//!
//! - a session whose directory is `$HOME` (it holds the daemon's own
//!   configuration and state): the parents of the hidden directories are
//!   pinned, shell start-up files and `~/.ssh` are read-only, a start-up
//!   file the run creates is removed;
//! - nested repositories (`git init` in a subfolder, a vendored repository
//!   behind a `.git` pointer file) and nested `.envrc` / `.dir-locals.el`
//!   are read-only like the top-level ones.
//!
//! Tests that need bubblewrap say so and return when it cannot run here.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::Client;
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

struct Daemon {
    fake: FakeProvider,
    client: Client,
    session: String,
}

/// A daemon whose home is `home` (already holding its config), with a
/// session in `project`.
async fn daemon(home: &Path, project: &Path, script: Vec<Reply>) -> Daemon {
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
    /// One prompt to its end, approving everything; the tool results.
    async fn turn(&mut self) -> Vec<String> {
        let (msg, _) = self.client.prompt_allowing(&self.session, "go").await;
        assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
        self.fake.last_tool_results()
    }
}

const CONFIG: &str = "shell_timeout_secs = 20\nmax_rounds = 20\n";

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

fn refused(result: &str) -> bool {
    result.contains("Read-only file system") || result.contains("Device or resource busy")
}

/// Attack 1: a session in `$HOME` renames the config and state directories'
/// parents away and plants its own configuration (`sandbox = "none"` and an
/// MCP server the host would start) and trust store; appends to
/// `~/.bashrc`; adds a key to `~/.ssh/authorized_keys`; creates a
/// `~/.profile`.
#[tokio::test]
async fn a_session_at_home_cannot_replace_the_daemons_files_or_start_up_files() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let h = home.path();
    std::fs::write(h.join(".bashrc"), "# mine\n").unwrap();
    std::fs::create_dir_all(h.join(".ssh")).unwrap();
    std::fs::write(h.join(".ssh/authorized_keys"), "ssh-ed25519 AAAA mine\n").unwrap();
    std::fs::create_dir_all(h.join("state/passepartout")).unwrap();
    let mut script = Vec::new();
    script.extend(write_then_run(
        "c1",
        "cfg.py",
        "import os\n\
         os.rename('con' + 'fig', 'config-old')\n\
         os.makedirs('config/passepartout')\n\
         open('config/passepartout/config.toml', 'w').write('sandbox = \"none\"\\n[[mcp.servers]]\\nname = \"x\"\\ncommand = \"touch\"\\nargs = [\"/tmp/pwned\"]\\n')",
    ));
    script.extend(write_then_run(
        "c2",
        "trust.py",
        "import os\n\
         os.rename('sta' + 'te', 'state-old')\n\
         os.makedirs('state/passepartout')\n\
         open('state/passepartout/trusted-skills.json', 'w').write('{}')",
    ));
    script.extend(write_then_run(
        "c3",
        "rc.py",
        "open('.bash' + 'rc', 'a').write('echo pwned\\n')",
    ));
    script.extend(write_then_run(
        "c4",
        "ssh.py",
        "open('.s' + 'sh/authorized' + '_keys', 'a').write('ssh-rsa EVIL\\n')",
    ));
    script.extend(write_then_run(
        "c5",
        "profile.py",
        "open('.pro' + 'file', 'w').write('echo pwned\\n')",
    ));
    script.push(fake::openai_text("done"));
    let mut d = daemon(h, h, script).await;
    let results = d.turn().await;
    assert_eq!(results.len(), 10, "{results:?}");
    for (i, r) in results.iter().enumerate().skip(1).step_by(2).take(4) {
        assert!(refused(r), "run {i}: {r}");
    }
    // The daemon's own files are where they were, untouched.
    assert!(!h.join("config-old").exists());
    assert!(!h.join("state-old").exists());
    assert_eq!(
        std::fs::read_to_string(h.join("config/passepartout/config.toml")).unwrap(),
        CONFIG
    );
    assert!(!h.join("state/passepartout/trusted-skills.json").exists());
    // Start-up files: read-only when they exist, removed when created.
    assert_eq!(
        std::fs::read_to_string(h.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(h.join(".ssh/authorized_keys")).unwrap(),
        "ssh-ed25519 AAAA mine\n"
    );
    assert!(!h.join(".profile").exists());
    assert!(results[9].contains(".profile"), "{}", results[9]);
}

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

/// Attack 2: a repository in a subfolder (`git init docs`), a vendored one
/// behind a `.git` pointer file whose repository lies in the project, and a
/// nested `.envrc` and `.dir-locals.el`: none can be changed, and the
/// nested `.git` cannot be renamed away.
#[tokio::test]
async fn nested_repositories_and_nested_control_files_are_read_only() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    std::fs::create_dir_all(p.join("docs")).unwrap();
    git(&p.join("docs"), &["init", "-q"]);
    // A vendored repository: its .git is a pointer into the project.
    std::fs::create_dir_all(p.join("third_party")).unwrap();
    let vendor_git = p.join(".vendor-git/tp");
    std::fs::create_dir_all(p.join(".vendor-git")).unwrap();
    git(
        &p.join("third_party"),
        &[
            "init",
            "-q",
            "--separate-git-dir",
            vendor_git.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(p.join("sub/deeper")).unwrap();
    std::fs::write(p.join("sub/.envrc"), "export A=1\n").unwrap();
    std::fs::write(p.join("sub/deeper/.dir-locals.el"), "()\n").unwrap();
    let docs_config = std::fs::read(p.join("docs/.git/config")).unwrap();
    let vendor_config = std::fs::read(p.join(".vendor-git/tp/config")).unwrap();
    let mut script = Vec::new();
    script.extend(write_then_run(
        "c1",
        "a.py",
        "open('docs/.g' + 'it/config', 'a').write('[core]\\n\\tfsmonitor = touch fsmonitor-ran; false\\n')",
    ));
    script.extend(write_then_run(
        "c2",
        "b.py",
        "import os\nos.rename('docs/.g' + 'it', 'docs/old')\nos.makedirs('docs/.git/hooks')",
    ));
    script.extend(write_then_run(
        "c3",
        "c.py",
        "open('.vendor-git/tp/con' + 'fig', 'a').write('[core]\\n\\tfsmonitor = x\\n')",
    ));
    script.extend(write_then_run(
        "c4",
        "d.py",
        "open('.vendor-git/tp/hooks/post-' + 'checkout', 'w').write('touch hook-ran')",
    ));
    script.extend(write_then_run(
        "c5",
        "e.py",
        "open('sub/.env' + 'rc', 'a').write('echo pwned\\n')",
    ));
    script.extend(write_then_run(
        "c6",
        "f.py",
        "open('sub/deeper/.dir-' + 'locals.el', 'w').write('((nil . ((eval . (shell-command \"x\")))))')",
    ));
    script.push(fake::openai_text("done"));
    let mut d = daemon(home.path(), p, script).await;
    let results = d.turn().await;
    assert_eq!(results.len(), 12, "{results:?}");
    for (i, r) in results.iter().enumerate().skip(1).step_by(2) {
        assert!(refused(r), "run {i}: {r}");
    }
    assert_eq!(
        std::fs::read(p.join("docs/.git/config")).unwrap(),
        docs_config
    );
    assert!(!p.join("docs/old").exists());
    assert_eq!(
        std::fs::read(p.join(".vendor-git/tp/config")).unwrap(),
        vendor_config
    );
    assert!(!p.join(".vendor-git/tp/hooks/post-checkout").exists());
    assert_eq!(
        std::fs::read_to_string(p.join("sub/.envrc")).unwrap(),
        "export A=1\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("sub/deeper/.dir-locals.el")).unwrap(),
        "()\n"
    );
    // The person's next `git -C docs status` runs nothing of the model's.
    git(&p.join("docs"), &["status", "--short"]);
    assert!(!p.join("docs/fsmonitor-ran").exists());
}

/// The view as bubblewrap's arguments build it: for each destination, the
/// kind of the last mount made there, in order.
fn mounts_of(args: &[String]) -> Vec<(String, &'static str)> {
    use passepartout::sandbox::probe;
    let mut out: Vec<(String, &'static str)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let arg = |n: usize| args[i + n].clone();
        match a {
            "--" => break,
            "--ro-bind" | "--bind" => {
                let kind = match (a, arg(1).as_str()) {
                    ("--ro-bind", "/dev/null") => "masked",
                    ("--ro-bind", src) if src.contains(probe::SYNTHETIC_DIR_PREFIX) => "synthetic",
                    ("--ro-bind", src)
                        if src.contains(passepartout::sandbox::etc_view::VIEW_DIR_PREFIX) =>
                    {
                        "built"
                    }
                    ("--ro-bind", _) => "read-only",
                    _ => "bind",
                };
                out.push((arg(2), kind));
                i += 3;
            }
            "--symlink" | "--setenv" => i += 3,
            "--tmpfs" => {
                out.push((arg(1), "private tmpfs"));
                i += 2;
            }
            "--remount-ro" => {
                let p = arg(1);
                if let Some(m) = out.iter_mut().rev().find(|(d, _)| *d == p) {
                    m.1 = "hidden";
                }
                i += 2;
            }
            "--dir" => {
                out.push((arg(1), "empty directory"));
                i += 2;
            }
            "--proc" | "--dev" => {
                out.push((arg(1), "fresh"));
                i += 2;
            }
            "--size" | "--chdir" | "--cap-drop" => i += 2,
            _ => i += 1,
        }
    }
    out
}

/// What a path is in the sandbox: the kind of the deepest mount covering
/// it (the last one made there when several are).
fn seen_as(path: &str, cwd: &str, mounts: &[(String, &'static str)]) -> String {
    let covering = mounts
        .iter()
        .enumerate()
        .filter(|(_, (d, _))| Path::new(path).starts_with(d))
        .max_by_key(|(i, (d, _))| (Path::new(d).components().count(), *i));
    match covering {
        None => "not visible".into(),
        // Inside a directory the view made empty (`/etc`), only what is
        // mounted there exists.
        Some((_, (d, "empty directory" | "built"))) if d != path => "not visible".into(),
        // `/etc`: a directory of the daemon's holding copies of the listed
        // files only.
        Some((_, (_, "built"))) => "read-only".into(),
        Some((_, (d, "bind"))) if d == cwd || d != path => "read-write".into(),
        Some((_, (_, "bind"))) => "pinned".into(),
        Some((_, (_, kind))) => kind.to_string(),
    }
}

/// docs/threat-model.md's table of the view is what bubblewrap is given:
/// the rows are parsed from the document, a project holding each path is
/// built, its control surface taken as the shell actuator takes it, and
/// the real argument builder's mounts compared row by row.
#[test]
fn the_view_in_the_threat_model_is_the_view_bwrap_gets() {
    use passepartout::sandbox::surface::SurfaceSnapshot;
    use passepartout::sandbox::{bwrap_args_with, Boundary, SandboxSpec, SystemLayout};

    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/threat-model.md"))
            .unwrap();
    let section = doc
        .split("## The sandbox's view")
        .nth(1)
        .expect("the view section");
    let rows: Vec<(String, String)> = section
        .lines()
        .skip_while(|l| !l.starts_with("| path | in the sandbox |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let path = cells[0].split('`').nth(1).unwrap().to_string();
            let kind = cells[1].split(" (").next().unwrap().to_string();
            (path, kind)
        })
        .collect();
    assert!(rows.len() >= 20, "{rows:?}");

    let project = tempfile::tempdir().unwrap();
    let cwd = project.path().canonicalize().unwrap();
    let p = |rel: &str| cwd.join(rel);
    for dir in [
        ".git/hooks",
        ".git/rebase-merge",
        "store/objects",
        "store/refs",
        "docs/.git",
        "vendor",
        ".vendor-git",
        "sub",
        ".ssh",
        "src",
    ] {
        std::fs::create_dir_all(p(dir)).unwrap();
    }
    for file in [
        ".git/config",
        "store/HEAD",
        "store/config",
        "docs/.git/config",
        ".vendor-git/config",
        "sub/.envrc",
        "sub/.dir-locals.el",
        ".bashrc",
        "src/main.rs",
        ".env",
        "sub/.env.local",
        ".ssh/id_ed25519",
        ".env.example",
    ] {
        std::fs::write(p(file), "").unwrap();
    }
    std::fs::write(p("vendor/.git"), "gitdir: ../.vendor-git\n").unwrap();
    let hidden = p(".config/passepartout");
    std::fs::create_dir_all(&hidden).unwrap();

    let spec = SandboxSpec {
        cwd: cwd.clone(),
        read_only: false,
        network: false,
        extra_ro: vec![],
        extra_rw: vec![],
        env: Default::default(),
        interpreter: "bash".into(),
        script: "true".into(),
        argv: vec![],
    };
    let boundary = Boundary {
        surface: SurfaceSnapshot::take(&cwd).mounts().clone(),
        tmp_size: None,
        hidden: vec![hidden],
        ..Boundary::default()
    };
    let layout = SystemLayout::probe();
    let args = bwrap_args_with(&spec, &layout, &boundary).unwrap();
    let mounts = mounts_of(&args);
    let cwd_s = cwd.to_str().unwrap();
    for (path, want) in &rows {
        let path = path.replace("$CWD", cwd_s);
        if want == "masked" && !Path::new(&path).exists() {
            continue; // masked only where the host has the file
        }
        if path == "/usr" || path == "/etc" {
            assert!(Path::new(&path).is_dir());
        }
        assert_eq!(&seen_as(&path, cwd_s, &mounts), want, "{path}\n{args:?}");
    }
}

/// Attack 1, variant: a session whose directory lies inside the daemon's
/// own configuration or state directory has nothing above them to hide
/// them in: its runs are refused with the reason, and nothing changes.
#[tokio::test]
async fn a_session_inside_the_daemons_own_directories_is_refused() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let config_dir = home.path().join("config/passepartout");
    let state_dir = home.path().join("state/passepartout");
    std::fs::create_dir_all(&state_dir).unwrap();
    for dir in [&config_dir, &state_dir] {
        let mut d = daemon(
            home.path(),
            dir,
            vec![
                fake::shell_call(
                    "c1",
                    "printf 'sandbox = \"none\"\\n' >> config.toml; echo '{}' > trusted-skills.json",
                ),
                fake::openai_text("done"),
            ],
        )
        .await;
        let results = d.turn().await;
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(
            results[0].contains("refused to run: the working directory lies inside"),
            "{}",
            results[0]
        );
        assert!(!dir.join("trusted-skills.json").exists());
    }
    assert_eq!(
        std::fs::read_to_string(config_dir.join("config.toml")).unwrap(),
        CONFIG
    );
}

/// Secrets are out of the box: a `.env` (top level or nested) and a
/// private key read by a script that builds their names find nothing,
/// while `.env.example` stays readable.
#[tokio::test]
async fn secret_files_are_masked_in_the_sandbox() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    std::fs::create_dir_all(p.join("svc/keys")).unwrap();
    std::fs::write(p.join(".env"), "TOKEN=s3cr3t-top\n").unwrap();
    std::fs::write(p.join("svc/.env.local"), "TOKEN=s3cr3t-nested\n").unwrap();
    std::fs::write(p.join("svc/keys/id_ed25519"), "s3cr3t-key\n").unwrap();
    std::fs::write(p.join(".env.example"), "TOKEN=placeholder\n").unwrap();
    let mut script = Vec::new();
    script.extend(write_then_run(
        "c1",
        "r.py",
        "for n in ['.e' + 'nv', 'svc/.e' + 'nv.local', 'svc/keys/id_' + 'ed25519', '.e' + 'nv.example']:\n    \
         try:\n        print(n, open(n).read())\n    except OSError as e:\n        print(n, 'refused', e.errno)",
    ));
    script.push(fake::openai_text("done"));
    let mut d = daemon(home.path(), p, script).await;
    let results = d.turn().await;
    assert_eq!(results.len(), 2, "{results:?}");
    let out = &results[1];
    assert!(!out.contains("s3cr3t"), "{out}");
    assert!(out.contains("TOKEN=placeholder"), "{out}");
    assert_eq!(out.matches("refused").count(), 3, "{out}");
    // The files themselves are untouched.
    assert_eq!(
        std::fs::read_to_string(p.join(".env")).unwrap(),
        "TOKEN=s3cr3t-top\n"
    );
}
