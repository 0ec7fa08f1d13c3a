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
