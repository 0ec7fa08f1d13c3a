//! A client for integration tests: spawns the real `passepartout` binary and
//! speaks JSON-RPC to it over its stdio, in either framing.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::support::fake_provider::FakeProvider;

pub const BIN: &str = env!("CARGO_BIN_EXE_passepartout");

/// Whether bubblewrap can run here; tests of the kernel boundary skip
/// (saying so) where it cannot — except under CI (`CI` set and not
/// `false`), where a missing sandbox fails the test: a CI image without
/// bubblewrap must not go green by skipping the boundary.
pub fn bwrap_available() -> bool {
    let status = passepartout::sandbox::probe::probe();
    let ok = matches!(
        status,
        passepartout::sandbox::probe::SandboxStatus::Available { .. }
    );
    if !ok {
        assert!(
            !under_ci(),
            "bubblewrap cannot run here ({status:?}), and under CI a kernel-boundary test may not skip"
        );
        eprintln!("bubblewrap cannot run here: skipping a kernel-boundary test");
    }
    ok
}

/// Wait until no process whose command line starts with `cmdline` (its
/// NUL-separated words) is left, polling `/proc`; fails after `within`
/// with how many are left.
pub async fn wait_until_none_left(cmdline: &[u8], within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(cmdline))
            })
            .count();
        if left == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} process(es) `{}` still running after {within:?}",
            String::from_utf8_lossy(cmdline)
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Whether this is a CI run (`CI` set to anything but `false`/`0`/empty).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// Run the terminal command line in `cwd` against the test's home (its
/// XDG config, state and data directories; no `PASSEPARTOUT_CONFIG`, no
/// stdin); the exit code and stdout followed by stderr.
pub fn cli(home: &Path, cwd: &Path, args: &[&str]) -> (i32, String) {
    let out = cli_output(home, cwd, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// [`cli`] with the exit status, stdout and stderr kept apart (for
/// output parsed line by line, or a message looked for on one stream).
pub fn cli_output(home: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("PASSEPARTOUT_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("the passepartout binary runs")
}

/// `passepartout serve` with `home` as its whole environment of places
/// (HOME and the XDG directories under it, no `PASSEPARTOUT_CONFIG`) and
/// debug logging, for a test that sets the rest itself and starts it
/// with [`Client::spawn_command`].
pub fn serve_command(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("PASSEPARTOUT_LOG", "warn,passepartout=debug")
        .env_remove("PASSEPARTOUT_CONFIG");
    cmd
}

/// Run `git` in `dir`, as a fixed author and without the machine's global
/// configuration, and fail the test if it fails.
/// What `cmd` prints in `dir`, run directly (not through the daemon): what a command should print, for comparing with what the model was shown.
pub fn raw_output(dir: &Path, cmd: &str) -> String {
    let out = std::process::Command::new("bash")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .expect("bash runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .expect("git runs")
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// One memory figure of a live process from `/proc/PID/status` (`VmRSS`
/// resident now, `VmHWM` its peak), in bytes.
pub fn proc_memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a live process");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kb * 1024
}

/// How long any single wait may take before the test fails (generous: CI
/// machines are slow; this bounds hangs, it does not measure speed).
pub const WAIT: Duration = Duration::from_secs(20);
/// The longest a test waits for one response or message in all, however
/// many other messages arrive meanwhile.
pub const TOTAL_WAIT: Duration = Duration::from_secs(180);

/// The params of a `session/prompt` with one text block.
pub fn prompt(session: &str, text: &str) -> Value {
    json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] })
}

/// A temporary home whose `config.toml` (under its XDG config directory,
/// where [`Client::spawn`] points the daemon) holds `config`.
pub fn home_with_config(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("a temporary home");
    let dir = home.path().join("config/passepartout");
    std::fs::create_dir_all(&dir).expect("create the config directory");
    std::fs::write(dir.join("config.toml"), config).expect("write config.toml");
    home
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Framing {
    ContentLength,
    Ndjson,
}

pub struct Client {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    framing: Framing,
    next_id: u64,
    /// Messages read while waiting for something else.
    pub backlog: Vec<Value>,
}

impl Client {
    /// Start `passepartout serve` with extra args, isolated from the user's
    /// configuration (HOME and XDG dirs point into `home`).
    pub fn spawn(framing: Framing, home: &Path, args: &[&str]) -> Client {
        Self::spawn_wrapped(framing, home, &[], args)
    }

    /// [`Client::spawn`] with the daemon started by `wrapper` (a command
    /// that ends by running its last arguments, e.g. `unshare … sh -c '…;
    /// exec "$0" "$@"'`); the daemon's binary and arguments follow it.
    pub fn spawn_wrapped(framing: Framing, home: &Path, wrapper: &[&str], args: &[&str]) -> Client {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.arg("serve")
            .args(args)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env(
                "PASSEPARTOUT_LOG",
                std::env::var("PASSEPARTOUT_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env_remove("PASSEPARTOUT_PROVIDER_URL")
            .env_remove("PASSEPARTOUT_MODEL")
            .env_remove("PASSEPARTOUT_CONFIG")
            // Sealed from the machine: a daemon started without a provider
            // must not find a developer's local server or hosted key.
            .env(
                "PASSEPARTOUT_DISCOVERY_HOSTS",
                "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
            )
            .stderr(Stdio::inherit());
        Self::start(cmd, framing)
    }

    /// A client on a command the test prepared (its own environment),
    /// with stderr captured in `child.stderr`.
    pub fn spawn_command(mut cmd: Command, framing: Framing) -> Client {
        cmd.stderr(Stdio::piped());
        Self::start(cmd, framing)
    }

    /// Start `cmd` (its stderr already set) with stdin and stdout piped to
    /// this client, killed when the client is dropped.
    fn start(mut cmd: Command, framing: Framing) -> Client {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn passepartout");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Client {
            child,
            stdin,
            stdout,
            framing,
            next_id: 1,
            backlog: Vec::new(),
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    pub async fn send(&mut self, msg: &Value) {
        let body = msg.to_string();
        let bytes = match self.framing {
            Framing::ContentLength => format!("Content-Length: {}\r\n\r\n{body}", body.len()),
            Framing::Ndjson => format!("{body}\n"),
        };
        self.send_raw(bytes.as_bytes()).await;
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Read the next message in the client's framing (None at EOF).
    pub async fn read(&mut self) -> Option<Value> {
        self.read_within(WAIT).await
    }

    /// [`Client::read`] for a test whose daemon may rightly stay silent
    /// longer than [`WAIT`] (a provider streaming tens of MiB to a debug
    /// build on a loaded machine).
    pub async fn read_within(&mut self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.read_inner())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting {wait:?} for a message"))
    }

    async fn read_inner(&mut self) -> Option<Value> {
        let text = self.read_text_inner().await?;
        Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad message {text:?}: {e}")))
    }

    /// Read the next message's text exactly as the daemon wrote it (None at
    /// EOF): for checks that a `Value` would blur, like a reply's raw id.
    pub async fn read_text(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.read_text_inner())
            .await
            .expect("timed out waiting for a message")
    }

    async fn read_text_inner(&mut self) -> Option<String> {
        match self.framing {
            Framing::Ndjson => {
                let mut line = String::new();
                if self.stdout.read_line(&mut line).await.ok()? == 0 {
                    return None;
                }
                Some(line.trim_end_matches(['\r', '\n']).to_string())
            }
            Framing::ContentLength => {
                let mut len = None;
                loop {
                    let mut line = String::new();
                    if self.stdout.read_line(&mut line).await.ok()? == 0 {
                        return None;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Content-Length: ") {
                        len = Some(v.parse::<usize>().expect("length"));
                    }
                }
                let mut body = vec![0; len.expect("Content-Length header")];
                self.stdout.read_exact(&mut body).await.ok()?;
                Some(String::from_utf8(body).expect("UTF-8 body"))
            }
        }
    }

    /// Send a request and wait for its response; other messages go to the
    /// backlog.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        self.wait_response(id).await
    }

    pub async fn start_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        id
    }

    pub async fn wait_response(&mut self, id: u64) -> Value {
        self.wait_response_within(id, WAIT).await
    }

    /// [`Client::request`] where each message may take up to `wait`.
    pub async fn request_within(&mut self, method: &str, params: Value, wait: Duration) -> Value {
        let id = self.start_request(method, params).await;
        self.wait_response_within(id, wait).await
    }

    /// [`Client::wait_response`] where each message may take up to `wait`.
    pub async fn wait_response_within(&mut self, id: u64, wait: Duration) -> Value {
        if let Some(pos) = self
            .backlog
            .iter()
            .position(|m| m.get("id") == Some(&json!(id)) && m.get("method").is_none())
        {
            return self.backlog.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + TOTAL_WAIT.max(wait);
        loop {
            let msg = self
                .read_within(wait)
                .await
                .expect("daemon closed its output");
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
            self.backlog.push(msg);
            self.check_deadline(deadline, &format!("the response to request {id}"));
        }
    }

    /// A daemon that keeps talking but never gives what a test waits for
    /// fails the test (with what it said last) instead of hanging it.
    fn check_deadline(&self, deadline: tokio::time::Instant, what: &str) {
        if tokio::time::Instant::now() > deadline {
            let tail: Vec<String> = self
                .backlog
                .iter()
                .rev()
                .take(5)
                .map(|m| m.to_string().chars().take(300).collect())
                .collect();
            panic!(
                "waited {TOTAL_WAIT:?} for {what}; {} other messages came, the last: {tail:#?}",
                self.backlog.len()
            );
        }
    }

    /// Wait for a message matching `pred` (looking at the backlog first).
    pub async fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + TOTAL_WAIT;
        loop {
            let msg = self.read().await.expect("daemon closed its output");
            if pred(&msg) {
                return msg;
            }
            self.backlog.push(msg);
            self.check_deadline(deadline, "a matching message");
        }
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    pub async fn initialize(&mut self, meta: Value) -> Value {
        let r = self
            .request(
                "initialize",
                json!({ "protocolVersion": 1,
                // The passepartout extensions, as the Emacs package asks.
                "clientCapabilities": { "_meta": { "passepartout": { "notifications": true } } },
                "_meta": { "passepartout": meta } }),
            )
            .await;
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        r
    }

    pub async fn new_session(&mut self, cwd: &Path) -> String {
        let r = self
            .request("session/new", json!({ "cwd": cwd, "mcpServers": [] }))
            .await;
        r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("session/new failed: {r}"))
            .to_string()
    }

    /// All `session/update`s of kind `kind` seen so far in the backlog.
    pub fn updates(&self, kind: &str) -> Vec<Value> {
        self.backlog
            .iter()
            .filter(|m| {
                m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == kind
            })
            .map(|m| m["params"]["update"].clone())
            .collect()
    }

    /// The concatenated agent message text seen so far.
    pub fn message_text(&self) -> String {
        self.updates("agent_message_chunk")
            .iter()
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    }
}

impl Client {
    /// Answer a request the daemon sent us.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))
            .await;
    }

    /// A daemon speaking NDJSON, started with `args`, initialized with
    /// `meta` (the `_meta.passepartout` of `initialize`) and with a session
    /// in `project`: the client and the session's id.
    pub async fn with_session(
        home: &Path,
        args: &[&str],
        meta: Value,
        project: &Path,
    ) -> (Client, String) {
        let mut client = Client::spawn(Framing::Ndjson, home, args);
        client.initialize(meta).await;
        let session = client.new_session(project).await;
        (client, session)
    }

    /// `session/load` of `session` in `cwd` (no MCP servers); the response.
    /// The replayed history arrives before it, in the backlog.
    pub async fn load_session(&mut self, session: &str, cwd: &Path) -> Value {
        self.request(
            "session/load",
            json!({ "sessionId": session, "cwd": cwd, "mcpServers": [] }),
        )
        .await
    }

    /// [`Client::with_session`] for an ACP client (no extensions) whose
    /// daemon's model is `fake`.
    pub async fn with_fake(home: &Path, fake: &FakeProvider, project: &Path) -> (Client, String) {
        let url = fake.openai_url();
        Client::with_session(home, &["--provider-url", &url], json!({}), project).await
    }

    /// Answer the permission request `ask` with the option `option_id`
    /// (`allow_once`, `reject_once`, `allow_always`, ...).
    pub async fn answer(&mut self, ask: &Value, option_id: &str) {
        self.respond(
            &ask["id"],
            json!({ "outcome": { "outcome": "selected", "optionId": option_id } }),
        )
        .await;
    }

    /// Send a text prompt and answer every permission request with the
    /// option `choose` picks for it, as the person at the editor would; the
    /// prompt's response and the permission requests, in order.
    pub async fn prompt_answering(
        &mut self,
        session: &str,
        text: &str,
        mut choose: impl FnMut(&Value) -> String,
    ) -> (Value, Vec<Value>) {
        let id = self
            .start_request("session/prompt", prompt(session, text))
            .await;
        let mut asked = Vec::new();
        loop {
            let msg = self
                .wait_for(|v| {
                    (v["id"] == json!(id) && v.get("method").is_none())
                        || v["method"] == "session/request_permission"
                })
                .await;
            if msg["method"] != "session/request_permission" {
                return (msg, asked);
            }
            let option = choose(&msg);
            self.answer(&msg, &option).await;
            asked.push(msg);
        }
    }

    /// Send a text prompt and answer every permission request with
    /// `allow_once`, as a person approving everything would; the prompt's
    /// response and the permission requests, in order.
    pub async fn prompt_allowing(&mut self, session: &str, text: &str) -> (Value, Vec<Value>) {
        self.prompt_answering(session, text, |_| "allow_once".into())
            .await
    }

    /// Wait for a notification or request with this method.
    pub async fn wait_method(&mut self, method: &str) -> Value {
        let m = method.to_string();
        self.wait_for(move |v| v["method"] == m.as_str()).await
    }
}

/// Set in the child process [`run_alone`] starts.
const ALONE: &str = "PASSEPARTOUT_TEST_ALONE";

/// Whether this process is one [`run_alone`] started for a single test.
pub fn alone() -> bool {
    std::env::var_os(ALONE).is_some()
}

/// Run the test `name` of module `module` (pass `module_path!()`) in a new
/// process of this test binary with no other test beside it, and fail with
/// its output unless it ran and passed. For measurements of the whole
/// process (its memory) that the other tests of the one binary, running on
/// other threads meanwhile, would disturb. The test calls this unless
/// [`alone`], and measures only when it is.
pub fn run_alone(module: &str, name: &str) {
    // A test's name is its module path without the crate's name.
    let test = format!("{}::{name}", module.split_once("::").map_or("", |(_, m)| m));
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{test}, run alone, failed:\n{stdout}\n{stderr}"
    );
    eprint!("{stderr}");
    // A name that matches nothing passes vacuously: make sure it ran.
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{test} did not run alone:\n{stdout}\n{stderr}"
    );
}

/// Make `write_file` ask, as a person may choose in their own skills (issue
/// 36 made it `auto`: its recorded change is judged instead): a copy of the
/// built-in `files.org` with `:APPROVAL: ask` in the home's skills folder.
/// The tests of the flight-plan machinery use that write as their asked
/// action.
pub fn write_file_asks(home: &Path) {
    write_file_asks_in(&home.join("config"));
}

/// [`write_file_asks`] for a configuration home (`XDG_CONFIG_HOME`)
/// elsewhere.
pub fn write_file_asks_in(config_home: &Path) {
    let builtin = include_str!("../../skills/files.org");
    let asks = builtin.replacen(
        ":ACTUATOR: files.write\n:APPROVAL: auto",
        ":ACTUATOR: files.write\n:APPROVAL: ask",
        1,
    );
    assert_ne!(asks, builtin, "files.org declares write_file as before");
    let dir = config_home.join("passepartout/skills");
    std::fs::create_dir_all(&dir).expect("create the skills directory");
    std::fs::write(dir.join("files.org"), asks).expect("write the skill");
}

/// The person's own rule, in their skills: ask before a recursive delete
/// (built in until issue 36, where the changeset came to decide). Tests
/// that need a command a person answers use it; it also shows that a
/// person's rule keeps working.
pub fn ask_before_recursive_deletes(home: &Path) {
    let dir = home.join("config/passepartout/skills");
    std::fs::create_dir_all(&dir).expect("create the skills directory");
    std::fs::write(
        dir.join("careful.org"),
        "#+TITLE: Careful\n\
         #+SKILL: careful\n\
         #+DESCRIPTION: The person's own rules.\n\
         #+TRIGGER: always\n\
         \n\
         * Rules :rules:\n\
         ** Ask before deleting recursively\n\
         :PROPERTIES:\n\
         :DECISION: ask\n\
         :TARGET:   shell\n\
         :PATTERN:  \\brm\\s+(-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\\b\n\
         :END:\n\
         A recursive delete can remove a lot of work in one line.\n\
         \n\
         - match :: =rm -rf build=\n\
         - no match :: =rm notes.txt=\n",
    )
    .expect("write the skill");
}
