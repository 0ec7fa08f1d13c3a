//! A sandbox that works like the person's machine (issue 37) and an
//! `/etc` built up from nothing (issue 38), through the real binary, real
//! bubblewrap and the fake provider:
//!
//! - a commit made inside carries the person's identity, read from their
//!   git configuration, or `[git] author`, which wins; with neither, the
//!   result says how to set one;
//! - a rustup-style and a pyenv-style toolchain under the person's `$HOME`
//!   run inside, and the credentials next to them stay hidden;
//! - `/tmp` lasts across a session's actions and goes when the session
//!   ends; the project shows its own mode;
//! - `/etc` holds only what programs need: no TLS private key, no system
//!   git settings, while TLS roots, the locale and Debian's alternatives
//!   work.

use crate::harness;
use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use harness::{Client, Framing};
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};

const CONFIG: &str = "shell_timeout_secs = 20\nmax_rounds = 20\n";

struct Daemon {
    fake: FakeProvider,
    client: Client,
    session: String,
}

/// A daemon whose `HOME` is `home` (its config in `home/config`), with
/// `path` as its `PATH` and `tmp` as its temporary directory, and a
/// session in `project`.
async fn daemon(home: &Path, tmp: &Path, path: &str, project: &Path, script: Vec<Reply>) -> Daemon {
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let mut cmd = harness::serve_command(home);
    cmd.args(["--provider-url", &url])
        .env("PATH", path)
        .env("TMPDIR", tmp)
        // The machine's own git settings are not the test's person's.
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("XDG_CONFIG_DIRS")
        .env_remove("GIT_AUTHOR_NAME")
        .env_remove("GIT_AUTHOR_EMAIL")
        .env_remove("GIT_COMMITTER_NAME")
        .env_remove("GIT_COMMITTER_EMAIL")
        .env(
            "PASSEPARTOUT_DISCOVERY_HOSTS",
            "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
        );
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
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

    /// One prompt to its end, each question answered by `choose`; the
    /// tool results and the questions.
    async fn turn_answering(
        &mut self,
        choose: impl FnMut(&serde_json::Value) -> String,
    ) -> (Vec<String>, Vec<serde_json::Value>) {
        let (msg, asked) = self
            .client
            .prompt_answering(&self.session, "go", choose)
            .await;
        assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
        (self.fake.last_tool_results(), asked)
    }

    /// End the session: the daemon's stdin closes and it exits.
    async fn end(mut self) {
        self.client.close_stdin();
        let status = tokio::time::timeout(harness::WAIT, self.client.child.wait())
            .await
            .expect("the daemon exits when its client goes")
            .expect("wait");
        assert!(status.success(), "{status}");
    }
}

fn home_with(config: &str, gitconfig: Option<&str>) -> tempfile::TempDir {
    let home = harness::home_with_config(config);
    if let Some(g) = gitconfig {
        std::fs::write(home.path().join(".gitconfig"), g).unwrap();
    }
    home
}

/// A git repository with one commit (by the harness's fixed author).
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    harness::git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    harness::git(dir.path(), &["add", "-A"]);
    harness::git(dir.path(), &["commit", "-qm", "init"]);
    dir
}

const COMMIT: &str = "echo b > b.txt && git add b.txt && git commit -qm 'agent commit' && \
                      git log -1 --format='by %an <%ae>, committed by %cn <%ce>'";

async fn commit_with(config: &str, gitconfig: Option<&str>) -> String {
    let home = home_with(config, gitconfig);
    let tmp = tempfile::tempdir().unwrap();
    let project = repository();
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/bin:/bin",
        project.path(),
        vec![fake::shell_call("c1", COMMIT), fake::openai_text("done")],
    )
    .await;
    let results = d.turn().await;
    d.end().await;
    results.join("\n")
}

#[tokio::test]
async fn a_commit_inside_has_the_persons_identity_or_the_configured_author() {
    if !harness::bwrap_available() {
        return;
    }
    let person = "[user]\n\tname = Grace Hopper\n\temail = grace@example.org\n";
    let out = commit_with(CONFIG, Some(person)).await;
    assert!(
        out.contains(
            "by Grace Hopper <grace@example.org>, committed by Grace Hopper <grace@example.org>"
        ),
        "{out}"
    );

    let configured = format!("{CONFIG}[git]\nauthor = \"Agent Smith <smith@example.org>\"\n");
    let out = commit_with(&configured, Some(person)).await;
    assert!(
        out.contains(
            "by Agent Smith <smith@example.org>, committed by Agent Smith <smith@example.org>"
        ),
        "{out}"
    );

    // Neither: git fails as on the host, and the result says what to do.
    let out = commit_with(CONFIG, None).await;
    assert!(out.contains("Author identity unknown"), "{out}");
    assert!(
        out.contains("passepartout: git has no identity in the sandbox")
            && out.contains("[git] author = \"Name <email>\""),
        "{out}"
    );
}

#[tokio::test]
async fn a_malformed_git_author_is_refused_at_startup() {
    let home = home_with(&format!("{CONFIG}[git]\nauthor = \"just a name\"\n"), None);
    let (code, out) = harness::cli(home.path(), home.path(), &["providers"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("[git] author = \"just a name\" is not of the form \"Name <email>\""),
        "{out}"
    );
}

fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn rustup_and_pyenv_toolchains_under_home_run_inside_and_their_credentials_stay_hidden() {
    if !harness::bwrap_available() {
        return;
    }
    let home = home_with(CONFIG, None);
    let h = home.path();
    // rustup: `~/.cargo/bin/cargo` is a proxy reading RUSTUP_HOME.
    write_exec(
        &h.join(".cargo/bin/cargo"),
        "#!/bin/sh\necho \"cargo proxy: $(cat \"$RUSTUP_HOME/settings.toml\") home=$CARGO_HOME\"\n",
    );
    std::fs::create_dir_all(h.join(".rustup")).unwrap();
    std::fs::write(h.join(".rustup/settings.toml"), "toolchain=stable-fake").unwrap();
    std::fs::write(
        h.join(".cargo/credentials.toml"),
        "token = \"CARGO-TOKEN-1\"\n",
    )
    .unwrap();
    // pyenv: a shim picking the version PYENV_ROOT names.
    write_exec(
        &h.join(".pyenv/shims/python3"),
        "#!/bin/sh\nv=$(cat \"$PYENV_ROOT/version\")\nexec \"$PYENV_ROOT/versions/$v/bin/python3\" \"$@\"\n",
    );
    std::fs::write(h.join(".pyenv/version"), "3.99.1\n").unwrap();
    write_exec(
        &h.join(".pyenv/versions/3.99.1/bin/python3"),
        "#!/bin/sh\necho \"Python 3.99.1 (pyenv) $*\"\n",
    );
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        h.join(".cargo/bin").display(),
        h.join(".pyenv/shims").display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let creds = h.join(".cargo/credentials.toml");
    let mut d = daemon(
        h,
        tmp.path(),
        &path,
        project.path(),
        vec![
            fake::shell_call(
                "c1",
                &format!(
                    "cargo build; python3 --version; echo \"PATH=$PATH\"; \
                     cat {} || echo no-credentials; touch {}/x || echo read-only",
                    creds.display(),
                    h.join(".cargo").display()
                ),
            ),
            fake::openai_text("done"),
        ],
    )
    .await;
    let out = d.turn().await.join("\n");
    d.end().await;
    // CARGO_HOME is the session's layer over the person's (see
    // `tool_caches_are_written_per_session_and_the_persons_home_is_unchanged`).
    let want_cargo =
        "cargo proxy: toolchain=stable-fake home=/tmp/.toolchains/rustup-cargo_home".to_string();
    assert!(out.contains(&want_cargo), "{out}");
    assert!(out.contains("Python 3.99.1 (pyenv) --version"), "{out}");
    assert!(out.contains(&format!("PATH={path}")), "{out}");
    assert!(!out.contains("CARGO-TOKEN-1"), "{out}");
    assert!(out.contains("no-credentials"), "{out}");
    assert!(out.contains("read-only"), "{out}");
    assert!(!h.join(".cargo/x").exists());
}

/// The entries of `dir` whose name starts with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn tmp_lasts_for_the_session_and_goes_with_it_and_the_project_shows_its_own_mode() {
    if !harness::bwrap_available() {
        return;
    }
    let home = home_with(CONFIG, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = repository();
    std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o751)).unwrap();
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/bin:/bin",
        project.path(),
        vec![
            fake::shell_call(
                "c1",
                "echo kept-across-actions > /tmp/note && mkdir -p \"$XDG_CACHE_HOME/tool\" && \
                 echo planted > ~/.planted && \
                 stat -c 'project: %a %U' . && stat -c 'parent: %a' ..",
            ),
            fake::openai_text("first"),
            fake::shell_call(
                "c2",
                "cat /tmp/note; ls \"$XDG_CACHE_HOME\"; test -e ~/.planted || echo fresh-home",
            ),
            fake::openai_text("second"),
        ],
    )
    .await;
    let first = d.turn().await.join("\n");
    let owner = if rustix::process::getuid().is_root() {
        "root".to_string()
    } else {
        std::env::var("USER").unwrap_or_default()
    };
    assert!(first.contains(&format!("project: 751 {owner}")), "{first}");
    // The parent as on the host (here the temporary directory, 1777), not a
    // directory bwrap made 0700.
    let parent = std::fs::metadata(project.path().parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert!(first.contains(&format!("parent: {parent:o}")), "{first}");
    let second = d.turn().await.join("\n");
    assert!(second.contains("kept-across-actions"), "{second}");
    assert!(second.contains("tool"), "{second}");
    // HOME is each action's own: nothing one plants there runs in the next.
    assert!(second.contains("fresh-home"), "{second}");
    // The session's /tmp is the daemon's, in its temporary directory.
    assert_eq!(entries(tmp.path(), "passepartout-tmp-").len(), 1);
    d.end().await;
    assert_eq!(
        entries(tmp.path(), "passepartout-tmp-"),
        Vec::<String>::new(),
        "the session's /tmp is gone with it"
    );
}

#[tokio::test]
async fn etc_holds_only_what_programs_need() {
    if !harness::bwrap_available() {
        return;
    }
    let home = home_with(CONFIG, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let key = Path::new("/etc/ssl/private");
    let script = "for f in /etc/ssl/private /etc/shadow /etc/gitconfig /etc/sudoers /etc/apt; do \
                    test -e $f && echo \"present: $f\"; done; \
                  python3 -c 'import ssl; print(\"roots:\", ssl.create_default_context().cert_store_stats()[\"x509_ca\"] > 0)'; \
                  python3 -c 'import locale; locale.setlocale(locale.LC_ALL, \"C.UTF-8\"); print(\"locale ok\")'; \
                  awk 'BEGIN { print \"awk via alternatives\" }'; \
                  getent hosts localhost | head -1; \
                  python3 -c 'open(\"/etc/new\", \"w\")' 2>/dev/null || echo etc-read-only";
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/bin:/bin",
        project.path(),
        vec![fake::shell_call("c1", script), fake::openai_text("done")],
    )
    .await;
    let out = d.turn().await.join("\n");
    d.end().await;
    assert!(key.is_dir() || !key.exists());
    assert!(!out.contains("present:"), "{out}");
    assert!(out.contains("roots: True"), "{out}");
    assert!(out.contains("locale ok"), "{out}");
    assert!(out.contains("awk via alternatives"), "{out}");
    assert!(out.contains("127.0.0.1") || out.contains("::1"), "{out}");
    assert!(out.contains("etc-read-only"), "{out}");
}

/// docs/sandbox.md names every `/etc` entry and every toolchain the
/// sandbox shows, from the same data the sandbox uses.
#[test]
fn the_documentation_lists_what_the_sandbox_shows() {
    use passepartout::sandbox::{etc_view, toolchains};
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sandbox.md"))
            .unwrap();
    for e in etc_view::ETC_ENTRIES {
        assert!(
            doc.contains(&format!("`{}`", e.name)),
            "/etc/{} undocumented",
            e.name
        );
    }
    for e in etc_view::ETC_LEFT_OUT
        .iter()
        .filter(|e| !e.name.contains('*'))
    {
        assert!(
            doc.contains(&format!("`{}`", e.name)),
            "/etc/{} undocumented",
            e.name
        );
    }
    for t in toolchains::TOOLCHAINS {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", t.name)))
            .unwrap_or_else(|| panic!("no row for {}", t.name));
        for d in t.dirs {
            assert!(row.contains(&format!("`{d}`")), "{}: {d}", t.name);
        }
        for (var, _) in t.env {
            assert!(row.contains(&format!("`{var}`")), "{}: {var}", t.name);
        }
    }
    for v in toolchains::VERSION_VARIABLES {
        assert!(doc.contains(&format!("`{v}`")), "{v}");
    }
}

#[tokio::test]
async fn the_persons_extra_paths_are_shown_as_configured() {
    if !harness::bwrap_available() {
        return;
    }
    let extra = tempfile::tempdir().unwrap();
    let (ro, rw) = (extra.path().join("datasets"), extra.path().join("output"));
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::write(ro.join("data.txt"), "dataset rows\n").unwrap();
    std::fs::write(ro.join(".env"), "TOKEN=EXTRA-SECRET-9\n").unwrap();
    let config = format!(
        "{CONFIG}[sandbox]\nread_only = [\"{}\"]\nwritable = [\"{}\"]\n",
        ro.display(),
        rw.display()
    );
    let home = home_with(&config, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let script = format!(
        "cat {ro}/data.txt; python3 -c 'open(\"{ro}/new\", \"w\")' 2>/dev/null || echo ro-refused; \
         python3 -c 'open(\"{rw}/out.txt\", \"w\").write(\"made inside\")' && echo rw-ok; \
         cat {ro}/.env 2>/dev/null || echo env-masked",
        ro = ro.display(),
        rw = rw.display()
    );
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/bin:/bin",
        project.path(),
        vec![fake::shell_call("c1", &script), fake::openai_text("done")],
    )
    .await;
    let out = d.turn().await.join("\n");
    d.end().await;
    assert!(out.contains("dataset rows"), "{out}");
    assert!(out.contains("ro-refused"), "{out}");
    assert!(out.contains("rw-ok"), "{out}");
    assert!(
        out.contains("env-masked") && !out.contains("EXTRA-SECRET-9"),
        "{out}"
    );
    assert!(!ro.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(rw.join("out.txt")).unwrap(),
        "made inside"
    );

    // A path that cannot be shown stops the daemon at startup, named.
    let bad = home_with(
        &format!("{CONFIG}[sandbox]\nwritable = [\"relative/out\"]\n"),
        None,
    );
    let (code, said) = harness::cli(bad.path(), bad.path(), &["providers"]);
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains("[sandbox] writable: `relative/out` is not absolute"),
        "{said}"
    );
}

/// A file of `/opt` the daemon's account could read only by its
/// privileges (another owner, mode 0600) is unreadable inside, even for a
/// daemon run as root: no capabilities, and the owner is unmapped.
#[tokio::test]
async fn a_host_file_only_privilege_could_read_stays_unreadable() {
    if !harness::bwrap_available() || !rustix::process::getuid().is_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("passepartout-faithful-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "OPT-SECRET-7\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&secret, Some(65534), Some(65534)).unwrap();
    let home = home_with(CONFIG, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/bin:/bin",
        project.path(),
        vec![
            fake::shell_call(
                "c1",
                &format!(
                    "ls {0}; cat {0}/secret || echo unreadable",
                    dir.path().display()
                ),
            ),
            fake::openai_text("done"),
        ],
    )
    .await;
    let out = d.turn().await.join("\n");
    d.end().await;
    assert!(out.contains("secret"), "the file is listed: {out}");
    assert!(
        out.contains("unreadable") && !out.contains("OPT-SECRET-7"),
        "{out}"
    );
}

/// The disk limit counts what a command writes wherever it writes it: here
/// the session's `/tmp` lives on another file system (a tmpfs the daemon's
/// temporary directory is mounted on) than the project, and a command
/// filling it is stopped at `disk_write` (issue 39).
#[tokio::test]
async fn the_disk_limit_counts_a_tmp_on_another_file_system() {
    if !harness::bwrap_available() || !rustix::process::getuid().is_root() {
        return;
    }
    let config = format!(
        "{CONFIG}[sandbox_limits]\ndisk_write = \"16M\"\ntmp_size = \"1G\"\nfile_size = \"1G\"\n"
    );
    let home = home_with(&config, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call(
            "c1",
            "while :; do head -c 1000000 /dev/zero >> /tmp/fill; sync /tmp/fill; done",
        ),
        fake::openai_text("done"),
    ])
    .await;
    let url = fake.openai_url();
    // The daemon in a mount namespace of its own, where its temporary
    // directory is a tmpfs: another file system than the project's.
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o size=256m tmpfs \"$1\" && shift && exec \"$@\"")
        .arg("sh")
        .arg(tmp.path())
        .arg(harness::BIN)
        .args(["serve", "--provider-url", &url])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("TMPDIR", tmp.path())
        .env("PATH", "/usr/bin:/bin")
        .env_remove("PASSEPARTOUT_CONFIG")
        .env(
            "PASSEPARTOUT_DISCOVERY_HOSTS",
            "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
        );
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);
    client.initialize(json!({})).await;
    let session = client.new_session(project.path()).await;
    let mut d = Daemon {
        fake,
        client,
        session,
    };
    let r = d.turn().await.join("\n");
    d.end().await;
    assert!(
        r.starts_with(
            "stopped: the command filled more than 16 MiB of the disk (limit `disk_write`)"
        ),
        "{r}"
    );
}

/// Without network an installer fails at once, with its retries off, and
/// the model is told why and what to do instead of reading a timeout.
#[tokio::test]
async fn an_install_without_network_fails_at_once_and_says_why() {
    if !harness::bwrap_available() {
        return;
    }
    let home = home_with(CONFIG, None);
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let script = "echo \"retries: $PIP_RETRIES $npm_config_fetch_retries $CARGO_NET_RETRY\"; \
                  pip install passepartout-no-such-package";
    let mut d = daemon(
        home.path(),
        tmp.path(),
        "/usr/local/bin:/usr/bin:/bin",
        project.path(),
        vec![fake::shell_call("c1", script), fake::openai_text("done")],
    )
    .await;
    // The person declines the once-per-session `registries` question.
    let (out, asked) = d.turn_answering(|_| "reject_once".into()).await;
    let out = out.join("\n");
    d.end().await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(out.contains("retries: 0 0 0"), "{out}");
    assert!(
        out.contains(
            "no network in the sandbox: `pip install passepartout-no-such-package` cannot reach \
             a package registry here"
        ),
        "{out}"
    );
}

/// A snapshot of every file under `dir`: its path, and its bytes or where
/// its link points.
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut queue = vec![dir.to_path_buf()];
    while let Some(d) = queue.pop() {
        for e in std::fs::read_dir(&d).unwrap().filter_map(Result::ok) {
            let p = e.path();
            let t = e.file_type().unwrap();
            let what = if t.is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else if t.is_dir() {
                queue.push(p.clone());
                "dir".to_string()
            } else {
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
            };
            out.push((p.display().to_string(), what));
        }
    }
    out.sort();
    out
}

/// What the toolchains write goes to the session's layer: a rustup-style
/// cargo storing a crate it fetched in `CARGO_HOME`, and a pyenv-style
/// `pip` whose hook rehashes the shims after an install (as pyenv's
/// `pip-rehash` does: the lock file and new shims in `shims/`), both
/// succeed inside; the next action of the session finds the crate cargo
/// stored along with what the person had, and the person's shims only;
/// `bin` and `config.toml` stay read-only; and the person's home is byte
/// for byte as it was.
#[tokio::test]
async fn tool_caches_are_written_per_session_and_the_persons_home_is_unchanged() {
    if !harness::bwrap_available() {
        return;
    }
    let home = home_with(CONFIG, None);
    let h = home.path();
    write_exec(
        &h.join(".cargo/bin/cargo"),
        "#!/bin/sh\nset -e\ncache=\"$CARGO_HOME/registry/cache/idx\"\ncase \"$1\" in\n\
         fetch) mkdir -p \"$cache\"; echo new-crate > \"$cache/new-2.0.crate\"; echo fetched ;;\n\
         build) cat \"$cache/old-1.0.crate\" \"$cache/new-2.0.crate\" ;;\nesac\n",
    );
    std::fs::create_dir_all(h.join(".rustup")).unwrap();
    std::fs::write(h.join(".cargo/config.toml"), "[net]\n").unwrap();
    std::fs::create_dir_all(h.join(".cargo/registry/cache/idx")).unwrap();
    std::fs::write(
        h.join(".cargo/registry/cache/idx/old-1.0.crate"),
        "old-crate\n",
    )
    .unwrap();
    // pyenv: the `pip` shim runs the version's pip, then (install or
    // uninstall, and only after success) `pyenv rehash`, whose lock is a
    // file made with noclobber in the shims, with `set -e`: as pyenv's
    // pyenv.d/exec/pip-rehash/pip and libexec/pyenv-rehash do.
    write_exec(
        &h.join(".pyenv/shims/pip"),
        "#!/bin/bash\nset -e\nSTATUS=0\n\"$PYENV_ROOT/versions/3.99.1/bin/pip\" \"$@\" || STATUS=$?\n\
         if [ \"$STATUS\" = 0 ]; then case \"$1\" in install|uninstall) \"$PYENV_ROOT/libexec/pyenv-rehash\";; esac; fi\n\
         exit \"$STATUS\"\n",
    );
    write_exec(
        &h.join(".pyenv/libexec/pyenv-rehash"),
        "#!/bin/bash\nset -e\nSHIM_PATH=\"$PYENV_ROOT/shims\"\nPROTO=\"$SHIM_PATH/.pyenv-shim\"\n\
         set -o noclobber\n{ echo > \"$PROTO\"; } 2>/dev/null || { echo \"pyenv: cannot rehash: $SHIM_PATH isn't writable\" >&2; exit 1; }\n\
         set +o noclobber\ntrap 'rm -f \"$PROTO\"' EXIT\n\
         for f in \"$PYENV_ROOT\"/versions/*/bin/*; do n=\"${f##*/}\"; [ -e \"$SHIM_PATH/$n\" ] || ln -f \"$PROTO\" \"$SHIM_PATH/$n\"; done\n",
    );
    write_exec(
        &h.join(".pyenv/versions/3.99.1/bin/pip"),
        "#!/bin/sh\nmkdir -p deps && echo 'VALUE = 1' > deps/pkg.py && echo \"pip $*: done\"\n",
    );
    write_exec(
        &h.join(".pyenv/versions/3.99.1/bin/pkg-tool"),
        "#!/bin/sh\n",
    );
    // The person's toolchain homes (the daemon's own state is in `h` too).
    let homes = || [tree(&h.join(".cargo")), tree(&h.join(".pyenv"))];
    let before = homes();
    let path = format!(
        "{}:{}:/usr/bin:/bin",
        h.join(".cargo/bin").display(),
        h.join(".pyenv/shims").display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut d = daemon(
        h,
        tmp.path(),
        &path,
        project.path(),
        vec![
            fake::shell_call(
                "c1",
                "cargo fetch; echo \"fetch exit: $?\"; \
                 touch \"$CARGO_HOME/bin/x\" 2>/dev/null || echo bin-read-only; \
                 echo x >> \"$CARGO_HOME/config.toml\" 2>/dev/null || echo config-read-only; \
                 pip install pkg; echo \"pip exit: $?\"",
            ),
            fake::openai_text("first"),
            fake::shell_call(
                "c2",
                "cargo build; echo \"build exit: $?\"; ls \"$PYENV_ROOT/shims\" | tr '\\n' ' '",
            ),
            fake::openai_text("second"),
        ],
    )
    .await;
    let first = d.turn().await.join("\n");
    assert!(first.contains("fetched\nfetch exit: 0"), "{first}");
    assert!(first.contains("bin-read-only"), "{first}");
    assert!(first.contains("config-read-only"), "{first}");
    assert!(
        first.contains("pip install pkg: done\npip exit: 0"),
        "{first}"
    );
    assert!(project.path().join("deps/pkg.py").is_file());
    let second = d.turn().await.join("\n");
    assert!(
        second.contains("old-crate\nnew-crate\nbuild exit: 0"),
        "{second}"
    );
    // The shims are a fresh copy of the person's for each command (the
    // one the rehash added went with the first).
    assert!(second.contains("build exit: 0\npip \n"), "{second:?}");
    d.end().await;
    assert_eq!(homes(), before, "the person's toolchain homes changed");
}
