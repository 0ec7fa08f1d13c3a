//! Every word the command line prints is true (issue 42): the hints name
//! flags, variables and files that exist, the configuration means what it
//! says, and what `providers` reports matches what the sandbox does. Each
//! test runs the real binary against a fake server on 127.0.0.1.

use crate::harness;
use crate::support;

use std::process::Output;
use std::time::{Duration, Instant};

use support::fake_provider::{self as fake, FakeProvider};

/// A home whose XDG directories are *not* the defaults under it: the
/// config directory lives at `home/elsewhere/cfg`.
struct Home {
    dir: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Home {
    fn new(config: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("elsewhere/cfg/passepartout");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), config).unwrap();
        Home {
            dir,
            project: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let home = self.dir.path();
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.args(args)
            .current_dir(self.project.path())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("elsewhere/cfg"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env_remove("PASSEPARTOUT_CONFIG")
            .env_remove("PASSEPARTOUT_API_KEY")
            .env_remove("PASSEPARTOUT_PROVIDER_URL")
            .env_remove("PASSEPARTOUT_LOG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    async fn output(&self, args: &[&str]) -> Output {
        tokio::time::timeout(harness::TOTAL_WAIT, self.command(args).output())
            .await
            .expect("the command ends in time")
            .expect("the binary runs")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn a_401_names_a_way_to_give_the_key_that_exists_and_the_real_config_file() {
    let fake = FakeProvider::start(vec![fake::status(401, "invalid api key")]).await;
    let home = Home::new("");
    let url = fake.openai_url();
    let out = home.output(&["run", "--provider-url", &url, "hello"]).await;
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("PASSEPARTOUT_API_KEY"), "{stderr}");
    assert!(stderr.contains("api_key_env"), "{stderr}");
    assert!(!stderr.contains("--api-key"), "no such flag: {stderr}");
    assert!(
        stderr.contains("~/elsewhere/cfg/passepartout/config.toml"),
        "the config file XDG_CONFIG_HOME names: {stderr}"
    );
    assert!(!stderr.contains("~/.config"), "{stderr}");
}

#[tokio::test]
async fn when_every_provider_fails_the_hint_names_the_real_config_file() {
    let home = Home::new("");
    let out = home
        .output(&["run", "--provider-url", "http://127.0.0.1:9/v1", "hello"])
        .await;
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("~/elsewhere/cfg/passepartout/config.toml"),
        "{stderr}"
    );
    assert!(!stderr.contains("~/.config"), "{stderr}");
}

#[tokio::test]
async fn shell_timeout_secs_bounds_the_built_in_shell() {
    let home = Home::new("shell_timeout_secs = 2\n");
    let fake = FakeProvider::start(vec![
        fake::shell_call("call_sleep", "sleep 20; echo woke"),
        fake::openai_text("done"),
    ])
    .await;
    let url = fake.openai_url();
    let started = Instant::now();
    let out = home.output(&["run", "--provider-url", &url, "sleep"]).await;
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let results = fake.last_tool_results().join("\n");
    assert!(
        !results.contains("woke"),
        "the command ran to its end: {results}"
    );
    assert!(results.contains("timed out after 2 s"), "{results}");
    assert!(
        took < Duration::from_secs(15),
        "the 2 s limit did not hold: {took:?}; {results}"
    );
}

#[tokio::test]
async fn providers_says_private_ranges_are_blocked_unless_network_reach_names_them() {
    let home = Home::new(
        "[[providers]]\nname = \"local\"\nkind = \"openai\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    );
    let out = home.output(&["providers"]).await;
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("stay reachable"), "{stdout}");
    if stdout.contains("slirp4netns") && stdout.contains("granted runs are refused") {
        return; // no network for granted runs here: nothing said about ranges
    }
    assert!(
        stdout.contains("private ranges are blocked unless `network_reach` names them"),
        "{stdout}"
    );
}

/// A server that answers every request with 401.
async fn refusing_server() -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::StatusCode;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(|| async { (StatusCode::UNAUTHORIZED, "no key") });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/v1"), task)
}

#[tokio::test]
async fn providers_tells_a_server_that_wants_a_key_to_get_one_not_to_start() {
    let (url, _server) = refusing_server().await;
    let home = Home::new("");
    let mut cmd = home.command(&["providers"]);
    cmd.env(
        "PASSEPARTOUT_DISCOVERY_HOSTS",
        format!(
            "ollama=http://127.0.0.1:9/v1,llama.cpp={url},lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek="
        ),
    );
    let out = tokio::time::timeout(harness::WAIT, cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = text(&out.stdout);
    let llama = stdout
        .split("llama.cpp")
        .nth(1)
        .unwrap_or_else(|| panic!("no llama.cpp line: {stdout}"));
    let fix = llama.lines().nth(1).unwrap_or_default();
    assert!(fix.contains("wants an API key"), "{stdout}");
    assert!(!fix.contains("llama-server -m"), "{stdout}");
}

#[tokio::test]
async fn skills_trust_shows_the_prompt_it_would_add_word_for_word() {
    let home = Home::new("");
    let skills = home.project.path().join(".passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("greet.org"),
        "#+TITLE: Greet\n#+SKILL: greet\n#+DESCRIPTION: Greets.\n\n\
         * What to say                                   :prompt:\n\
         Always answer in French, and never mention this line.\n",
    )
    .unwrap();
    let out = home.output(&["skills", "trust"]).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("| Always answer in French, and never mention this line."),
        "{stdout}"
    );
    assert!(!stdout.contains(" characters"), "{stdout}");
}

/// The names of the tools the first request offered the model.
fn offered_tools(fake: &FakeProvider) -> Vec<String> {
    fake.requests()[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn builtin_skills_false_leaves_the_built_in_skills_out() {
    for (config, shell_offered) in [("", true), ("builtin_skills = false\n", false)] {
        let home = Home::new(config);
        let fake = FakeProvider::start(vec![fake::openai_text("ok")]).await;
        let url = fake.openai_url();
        let out = home.output(&["run", "--provider-url", &url, "hi"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let tools = offered_tools(&fake);
        assert_eq!(
            tools.contains(&"shell".to_string()),
            shell_offered,
            "{config:?}: {tools:?}"
        );
    }
}

#[tokio::test]
async fn memex_dir_is_where_remember_writes() {
    let home = Home::new("");
    let notes = home.dir.path().join("my notes");
    std::fs::write(
        home.dir
            .path()
            .join("elsewhere/cfg/passepartout/config.toml"),
        format!("memex_dir = {:?}\n", notes.to_str().unwrap()),
    )
    .unwrap();
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[(
            "call_r",
            "remember",
            r#"{"title": "coffee", "text": "Ann takes it black."}"#,
        )]),
        fake::openai_text("noted"),
    ])
    .await;
    let url = fake.openai_url();
    let out = home
        .output(&["run", "--provider-url", &url, "remember"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written: Vec<_> = std::fs::read_dir(&notes)
        .unwrap_or_else(|e| panic!("no memex at {}: {e}", notes.display()))
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].contains("Ann takes it black."), "{written:?}");
    assert!(!home.dir.path().join("data/passepartout/memex").exists());
}

#[tokio::test]
async fn feed_back_messages_decides_whether_the_model_reads_its_message_back() {
    for (config, fed_back) in [("", false), ("feed_back_messages = true\n", true)] {
        let home = Home::new(config);
        let fake = FakeProvider::start(vec![
            fake::openai_tool_calls(&[(
                "call_m",
                "message_person",
                r#"{"text": "halfway through the files"}"#,
            )]),
            fake::openai_text("done"),
        ])
        .await;
        let url = fake.openai_url();
        let out = home.output(&["run", "--provider-url", &url, "work"]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let result = fake.last_tool_results().join("\n");
        assert_eq!(
            result.contains("halfway through the files"),
            fed_back,
            "{config:?}: {result}"
        );
    }
}

/// A timestamp as tracing's full format starts a line with.
fn has_timestamp(line: &str) -> bool {
    let b = line.trim_start().as_bytes();
    b.len() > 20 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
}

#[tokio::test]
async fn run_reports_a_broken_skill_once_without_tracing_lines_and_logs_to_the_file() {
    let home = Home::new("");
    let skills = home.dir.path().join("elsewhere/cfg/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("broken.org"),
        "#+TITLE: Broken\n#+SKILL: broken\n#+DESCRIPTION: x\n\n* t :tool:\n:PROPERTIES:\n:TIMEOUT: 0\n:END:\nNo.\n",
    )
    .unwrap();
    let fake = FakeProvider::start(vec![fake::openai_text("fine")]).await;
    let url = fake.openai_url();
    let out = home.output(&["run", "--provider-url", &url, "hi"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches('⚠').count(), 1, "one notice: {stderr}");
    assert_eq!(
        stderr.matches("must be a whole number").count(),
        1,
        "{stderr}"
    );
    for line in stderr.lines() {
        assert!(!has_timestamp(line), "a tracing line: {line}\n{stderr}");
        assert!(!line.contains("passepartout::"), "a module path: {line}");
        assert!(
            !line.contains(" WARN ") && !line.contains(" ERROR "),
            "{line}"
        );
    }
    let log = home
        .dir
        .path()
        .join("state/passepartout/logs/passepartout.log");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!logged.is_empty(), "nothing in {}", log.display());
}

#[tokio::test]
async fn mcp_list_prints_no_tracing_lines() {
    let home =
        Home::new("[[mcp.servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\n");
    let out = home.output(&["mcp", "list"]).await;
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(all.contains("gone"), "{all}");
    for line in all.lines() {
        assert!(!has_timestamp(line), "a tracing line: {line}\n{all}");
        assert!(
            !line.contains("passepartout::") && !line.contains("rmcp::"),
            "{line}"
        );
    }
}

#[tokio::test]
async fn a_call_left_for_a_person_is_shown_waiting_not_cancelled() {
    let home = Home::new("");
    // The file tool asks, as a person may set it (issue 36 made it `auto`).
    harness::write_file_asks_in(&home.dir.path().join("elsewhere/cfg"));
    let fake = FakeProvider::start(vec![fake::write_call("call_w", "out.txt", "hello\n")]).await;
    let url = fake.openai_url();
    let out = home.output(&["run", "--provider-url", &url, "write"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("✗ cancelled"), "{stderr}");
    assert!(
        stderr.contains("⏸ waiting for a person: flight plan fp-"),
        "{stderr}"
    );
    // Approving it without a daemon says how to run it now.
    let id = super::run_cli::waiting_plan_id(&stderr);
    let out = home.output(&["plans", "approve", &id]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("`passepartout run --continue PROMPT`"),
        "{stdout}"
    );
    let out = home
        .output(&["run", "--provider-url", &url, "--continue", "go on"])
        .await;
    let _ = out; // the fake's script is spent; what matters is the plan ran
    assert!(home.project.path().join("out.txt").exists());
}

#[tokio::test]
async fn a_state_directory_that_cannot_be_written_stops_run_with_a_clear_error() {
    let home = Home::new("");
    let state = home.dir.path().join("ro-state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("audit.jsonl"), "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        state.join("audit.jsonl"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o500)).unwrap();
    let writable = std::fs::OpenOptions::new()
        .append(true)
        .open(state.join("audit.jsonl"))
        .is_ok();
    if writable {
        // root ignores permissions: make the audit log a directory instead.
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_file(state.join("audit.jsonl")).unwrap();
        std::fs::create_dir(state.join("audit.jsonl")).unwrap();
    }
    let fake = FakeProvider::start(vec![fake::openai_text("should not be asked")]).await;
    let url = fake.openai_url();
    let out = home
        .output(&[
            "run",
            "--provider-url",
            &url,
            "--state-dir",
            state.to_str().unwrap(),
            "hi",
        ])
        .await;
    let stderr = text(&out.stderr);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("cannot write the audit log"), "{stderr}");
    assert!(stderr.contains("--state-dir"), "{stderr}");
    assert!(fake.requests().is_empty(), "the model was asked");
}

#[tokio::test]
async fn serve_on_a_terminal_says_what_it_is_and_ctrl_d_quits() {
    const DRIVER: &str = r#"
import os, pty, sys, select, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "serve"])
out, sent, open_ = b"", False, True
deadline = time.time() + 30
while time.time() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.2) if open_ else ([], [], time.sleep(0.05))
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            open_ = False  # the terminal's other end is closed: it exited
        out += chunk
    if not sent and b"Ctrl-D" in out:
        os.write(fd, b"\x04")
        sent = True
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.stdout.buffer.write(out)
        sys.exit(os.waitstatus_to_exitcode(status))
os.kill(pid, 9)
sys.stdout.buffer.write(out + b"\n[driver: still running]")
sys.exit(99)
"#;
    let home = Home::new("");
    let out = tokio::process::Command::new("python3")
        .args(["-c", DRIVER, harness::BIN])
        .current_dir(home.project.path())
        .env("HOME", home.dir.path())
        .env("XDG_CONFIG_HOME", home.dir.path().join("elsewhere/cfg"))
        .env("XDG_STATE_HOME", home.dir.path().join("state"))
        .env("XDG_DATA_HOME", home.dir.path().join("data"))
        .env("PASSEPARTOUT_PROVIDER_URL", "http://127.0.0.1:9/v1")
        .output()
        .await
        .expect("python3 runs");
    let screen = text(&out.stdout);
    assert!(
        screen.contains("waiting for an editor's JSON-RPC 2.0"),
        "{screen}"
    );
    assert!(screen.contains("passepartout run PROMPT"), "{screen}");
    assert_eq!(out.status.code(), Some(0), "{screen}");
}

/// A server that answers only `path` (with `body`), 404 elsewhere.
async fn native_only_server(
    path: &'static str,
    body: serde_json::Value,
) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::StatusCode;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route(
            path,
            axum::routing::get(move || async move { axum::Json(body) }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found") });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/v1"), task)
}

async fn discover(home: &Home, hosts: String) -> (serde_json::Value, String) {
    let mut json = home.command(&["providers", "--json"]);
    json.env("PASSEPARTOUT_DISCOVERY_HOSTS", &hosts);
    let out = tokio::time::timeout(harness::WAIT, json.output())
        .await
        .unwrap()
        .unwrap();
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    let mut plain = home.command(&["providers"]);
    plain.env("PASSEPARTOUT_DISCOVERY_HOSTS", &hosts);
    let out = tokio::time::timeout(harness::WAIT, plain.output())
        .await
        .unwrap()
        .unwrap();
    (listing, text(&out.stdout))
}

fn candidate(listing: &serde_json::Value, name: &str) -> serde_json::Value {
    listing["discovery"]["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {listing}"))
}

#[tokio::test]
async fn discovery_asks_ollama_and_llama_cpp_on_their_own_endpoints_and_says_they_run() {
    let (ollama, _a) = native_only_server(
        "/api/tags",
        serde_json::json!({"models": [{"name": "qwen3:8b"}, {"name": "llama3.2:latest"}]}),
    )
    .await;
    let (llama, _b) = native_only_server(
        "/props",
        serde_json::json!({"model_path": "/models/gemma-3-4b.gguf", "total_slots": 1}),
    )
    .await;
    let home = Home::new("");
    let hosts = format!(
        "ollama={ollama},llama.cpp={llama},lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek="
    );
    let (listing, plain) = discover(&home, hosts).await;
    let o = candidate(&listing, "ollama");
    assert_eq!(o["status"], "running", "{o}");
    assert_eq!(o["endpoint"], "/api/tags");
    assert_eq!(
        o["models"],
        serde_json::json!(["qwen3:8b", "llama3.2:latest"])
    );
    assert!(o["detail"].as_str().unwrap().contains("HTTP 404"), "{o}");
    assert!(!o["fix"].as_str().unwrap().contains("ollama serve"), "{o}");
    let l = candidate(&listing, "llama.cpp");
    assert_eq!(l["status"], "running", "{l}");
    assert_eq!(l["models"], serde_json::json!(["gemma-3-4b.gguf"]));
    assert!(
        !l["fix"].as_str().unwrap().contains("llama-server -m"),
        "{l}"
    );
    assert!(
        plain.contains("running (/api/tags lists 2 model(s)"),
        "{plain}"
    );
    assert!(!plain.contains("fix: ollama serve"), "{plain}");
}

#[tokio::test]
async fn a_server_that_needs_a_login_is_a_state_for_the_client_not_an_error_on_stderr() {
    use tokio::io::AsyncReadExt;
    let server = support::oauth_server::OAuthServer::start(3600).await;
    let home = harness::home_with_config(&format!(
        "[[mcp.servers]]\nname = \"docs\"\nurl = \"{}\"\n",
        server.mcp_url()
    ));
    let project = tempfile::tempdir().unwrap();
    let mut cmd = harness::serve_command(home.path());
    // What an editor starts: no log filter of its own.
    cmd.env_remove("PASSEPARTOUT_LOG")
        .env("PASSEPARTOUT_PROVIDER_URL", "http://127.0.0.1:9/v1");
    let mut client = harness::Client::spawn_command(cmd, harness::Framing::Ndjson);
    client.initialize(serde_json::json!({})).await;
    let r = client
        .request(
            "session/new",
            serde_json::json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let states = r["result"]["_meta"]["passepartout"]["mcpServers"].to_string();
    assert!(states.contains("needs login"), "{r}");
    client.close_stdin();
    let mut stderr = client.child.stderr.take().expect("stderr piped");
    let _ = tokio::time::timeout(harness::WAIT, client.child.wait()).await;
    let mut said = String::new();
    stderr.read_to_string(&mut said).await.unwrap();
    assert!(!said.contains("needs login"), "on stderr: {said}");
    assert!(!said.contains("WARN"), "on stderr: {said}");
    let log = std::fs::read_to_string(home.path().join("state/passepartout/logs/passepartout.log"))
        .unwrap_or_default();
    assert!(
        log.contains("needs login: run `passepartout mcp login docs`"),
        "{log}"
    );
}

#[tokio::test]
async fn a_permission_request_for_a_skill_tool_shows_its_arguments_escaped() {
    let home = harness::home_with_config("");
    let skills = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("say.org"),
        "#+TITLE: Say\n#+SKILL: say\n#+DESCRIPTION: Prints text.\n#+TRIGGER: always\n\n\
         * say                                                        :tool:\n\
         :PROPERTIES:\n:APPROVAL: ask\n:KIND:     execute\n:END:\n\
         Print the text.\n\n\
         | name | type   | required | description     |\n\
         |------+--------+----------+-----------------|\n\
         | text | string | yes      | What to print.  |\n\n\
         #+begin_src bash\nprintf '%s\\n' \"$ARG_TEXT\"\n#+end_src\n",
    )
    .unwrap();
    let project = tempfile::tempdir().unwrap();
    let long = "y".repeat(500);
    let args = serde_json::json!({ "text": format!("Héllo Wörld; rm -rf / $(id)\u{1b}[2K{long}") });
    let fake = FakeProvider::start(vec![
        fake::openai_tool_calls(&[("call_s", "say", &args.to_string())]),
        fake::openai_text("not run"),
    ])
    .await;
    let (mut c, sid) = harness::Client::with_fake(home.path(), &fake, project.path()).await;
    let (done, asked) = c
        .prompt_answering(&sid, "say it", |_| "reject_once".into())
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let texts: Vec<String> = asked[0]["params"]["toolCall"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["content"]["text"].as_str().map(String::from))
        .collect();
    let summary = texts
        .iter()
        .find(|t| t.starts_with("Arguments:"))
        .unwrap_or_else(|| panic!("no arguments block: {texts:?}"));
    assert!(
        summary.contains(r#"text: "Héllo Wörld; rm -rf / $(id)\u001b[2Kyyy"#),
        "{summary}"
    );
    assert!(summary.contains("(folded: "), "{summary}");
    let whole = texts
        .iter()
        .find(|t| t.starts_with("Whole value of text"))
        .unwrap_or_else(|| panic!("the whole value is not reachable: {texts:?}"));
    assert!(whole.contains(&long), "{whole}");
    assert!(texts.iter().all(|t| !t.contains('\u{1b}')), "{texts:?}");
}

#[tokio::test]
async fn the_org_plan_of_a_skill_tool_shows_its_arguments_escaped() {
    let home = Home::new("");
    let skills = home.dir.path().join("elsewhere/cfg/passepartout/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::fs::write(
        skills.join("say.org"),
        "#+TITLE: Say\n#+SKILL: say\n#+DESCRIPTION: Prints text.\n#+TRIGGER: always\n\n\
         * say                                                        :tool:\n\
         :PROPERTIES:\n:APPROVAL: ask\n:KIND:     execute\n:END:\n\
         Print the text.\n\n\
         | name | type   | required | description     |\n\
         |------+--------+----------+-----------------|\n\
         | text | string | yes      | What to print.  |\n\n\
         #+begin_src bash\nprintf '%s\\n' \"$ARG_TEXT\"\n#+end_src\n",
    )
    .unwrap();
    let args =
        serde_json::json!({ "text": "Héllo Wörld; rm -rf / $(id)\u{1b}[2K\n* not a heading" });
    let fake = FakeProvider::start(vec![fake::openai_tool_calls(&[(
        "call_s",
        "say",
        &args.to_string(),
    )])])
    .await;
    let url = fake.openai_url();
    let out = home
        .output(&["run", "--provider-url", &url, "say it"])
        .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let at = stderr.find("passepartout plans show ").unwrap();
    let id = &stderr[at + "passepartout plans show ".len()..][..15];
    let out = home.output(&["plans", "show", id]).await;
    let plan = text(&out.stdout);
    assert!(
        plan.contains(r#""ARG_TEXT": "Héllo Wörld; rm -rf / $(id)\u001b[2K\n* not a heading""#),
        "{plan}"
    );
    assert!(!plan.contains('\u{1b}'), "{plan}");
}

#[tokio::test]
async fn run_speaks_the_openai_responses_api_with_tool_calls_and_usage() {
    let home = Home::new("");
    let fake = FakeProvider::start(vec![
        fake::responses_tool_call("call_r", "message_person", r#"{"text": "halfway there"}"#),
        fake::responses_text("All done."),
    ])
    .await;
    let url = fake.openai_url();
    let out = home
        .output(&[
            "run",
            "--provider-url",
            &url,
            "--provider-kind",
            "openai-responses",
            "work",
        ])
        .await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("halfway there"), "the call ran: {stdout}");
    assert!(stdout.contains("All done."), "{stdout}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{stderr}");
    assert_eq!(requests[0].path, "/v1/responses");
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(requests[0].body["input"][0]["type"], "message");
    let tools = requests[0].body["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["type"] == "function" && t["name"] == "message_person"),
        "{tools:?}"
    );
    let items = requests[1].body["input"].as_array().unwrap().clone();
    assert!(
        items.iter().any(|i| i["type"] == "function_call"
            && i["call_id"] == "call_r"
            && i["arguments"] == r#"{"text":"halfway there"}"#),
        "{items:?}"
    );
    assert!(
        items
            .iter()
            .any(|i| i["type"] == "function_call_output" && i["call_id"] == "call_r"),
        "{items:?}"
    );
    // The usage of both answers (20 + 9, 12 + 5 tokens) was counted.
    assert!(stderr.contains("(46 tokens"), "{stderr}");
}

#[tokio::test]
async fn a_provider_url_that_is_no_url_is_named_once_not_provider_provider() {
    let home = Home::new("");
    let out = home.output(&["run", "--provider-url", "foo", "hi"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("provider provider"), "{stderr}");
    assert!(
        stderr
            .contains("provider foo: base_url \"foo\" is not a URL like http://127.0.0.1:8080/v1"),
        "{stderr}"
    );
    let out = home.output(&["providers", "--provider-url", "foo"]).await;
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("provider provider"), "{stdout}");
    assert!(stdout.contains("provider foo (openai) at foo"), "{stdout}");
}
