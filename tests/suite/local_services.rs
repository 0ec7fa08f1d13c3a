//! The person's local services by opt-in and the package registries by
//! grant (issue 37), through the real binary, real bubblewrap and the
//! fake provider:
//!
//! - a port of the host's 127.0.0.1 listed in `[sandbox] localhost_ports`
//!   is reached at the sandbox's 127.0.0.1, with and without a network
//!   grant; one not listed is refused;
//! - with `grant_registries`, `pip install` fetches from a stand-in
//!   registry (a PEP 503 index of one wheel built here) named in
//!   `registries`, through the proxy; a host not on the list gets a 403
//!   naming it and the key; without the grant the install fails and the
//!   result says how to grant it.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::{Client, Framing};
use serde_json::json;
use support::fake_provider::{self as fake, FakeProvider, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A host service on `addr`:0 answering every HTTP request with `body`
/// (or, for a path in `files`, that file's bytes). Returns the port.
pub(crate) async fn http_service(
    addr: &str,
    body: &'static str,
    files: Vec<(String, Vec<u8>)>,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind((addr, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let files = std::sync::Arc::new(files);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let files = files.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let content: Vec<u8> = files
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, c)| c.clone())
                    .unwrap_or_else(|| body.as_bytes().to_vec());
                let kind = if path.ends_with(".whl") {
                    "application/octet-stream"
                } else {
                    "text/html"
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    content.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.write_all(&content).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, task)
}

/// One turn with `config`: the model runs `script` with the shell tool
/// (or, `network` true, through a skill tool declared `:NETWORK: yes`),
/// approved. The tool's result.
async fn run(config: &str, script: &str, network: bool, project: &Path) -> String {
    let home = harness::home_with_config(&format!("shell_timeout_secs = 60\n{config}"));
    let replies: Vec<Reply> = if network {
        let skills = home.path().join("config/passepartout/skills");
        std::fs::create_dir_all(&skills).unwrap();
        std::fs::write(
            skills.join("fetch.org"),
            "#+SKILL: fetch\n\
             * fetch :tool:\n\
             :PROPERTIES:\n\
             :APPROVAL: ask\n\
             :NETWORK: yes\n\
             :END:\n\
             Reach the services.\n\
             #+begin_src bash\n\
             bash probe.sh\n\
             #+end_src\n",
        )
        .unwrap();
        std::fs::write(project.join("probe.sh"), script).unwrap();
        vec![
            fake::openai_tool_calls(&[("c1", "fetch", "{}")]),
            fake::openai_text("done"),
        ]
    } else {
        vec![fake::shell_call("c1", script), fake::openai_text("done")]
    };
    let fake = FakeProvider::start(replies).await;
    let url = fake.openai_url();
    let mut cmd = harness::serve_command(home.path());
    // The system's python3 and pip, whatever the machine's PATH holds (a
    // pyenv's shims work inside too: see `toolchains::LAYERS`).
    cmd.args(["--provider-url", &url])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
    let (msg, _) = client
        .prompt_answering(&session, "go", |_| "allow_once".into())
        .await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
    let results = fake.last_tool_results();
    results
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("no tool result: {results:?}"))
}

/// curl each port of the sandbox's 127.0.0.1: `port P: <body or error>`
/// and `port P exit: <curl's exit code>` (7: refused).
fn probe(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| {
            format!(
                "curl -sS --max-time 20 http://127.0.0.1:{p}/ 2>&1 | sed 's/^/port {p}: /'; \
                 code=${{PIPESTATUS[0]}}; echo; echo \"port {p} exit: $code\"\n"
            )
        })
        .collect()
}

fn exit_of(out: &str, port: u16) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("port {port} exit: ")))
        .unwrap_or_else(|| panic!("no exit code for port {port}: {out}"))
        .to_string()
}

#[tokio::test]
async fn a_host_port_is_reachable_inside_only_when_listed() {
    if !harness::bwrap_available() {
        return;
    }
    let (listed, _a) = http_service("127.0.0.1", "hello from the listed service", vec![]).await;
    let (unlisted, _b) = http_service("127.0.0.1", "hello from the unlisted service", vec![]).await;
    let config = format!("[sandbox]\nlocalhost_ports = [{listed}]\n");
    for network in [false, true] {
        let project = tempfile::tempdir().unwrap();
        let out = run(
            &config,
            &probe(&[listed, unlisted]),
            network,
            project.path(),
        )
        .await;
        assert_eq!(exit_of(&out, listed), "0", "network {network}: {out}");
        assert!(
            out.contains(&format!("port {listed}: hello from the listed service")),
            "network {network}: {out}"
        );
        assert_eq!(exit_of(&out, unlisted), "7", "network {network}: {out}");
        assert!(!out.contains("unlisted service"), "{out}");
    }
    // Without the setting, neither is reached.
    let project = tempfile::tempdir().unwrap();
    let out = run("", &probe(&[listed]), false, project.path()).await;
    assert_eq!(exit_of(&out, listed), "7", "{out}");
}

/// A wheel of `standin_pkg` 0.1, built with the host's python3.
pub(crate) fn wheel(dir: &Path) -> Vec<u8> {
    let path = dir.join("standin_pkg-0.1-py3-none-any.whl");
    let script = r#"
import sys, zipfile
files = {
    "standin_pkg/__init__.py": "MESSAGE = 'installed from the stand-in registry'\n",
    "standin_pkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: standin-pkg\nVersion: 0.1\n",
    "standin_pkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr("standin_pkg-0.1.dist-info/RECORD",
               "".join(f"{n},,\n" for n in files) + "standin_pkg-0.1.dist-info/RECORD,,\n")
"#;
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .status()
        .expect("python3 builds the test's wheel");
    assert!(status.success());
    std::fs::read(&path).unwrap()
}

pub(crate) const INDEX: &str = "<!DOCTYPE html><html><body>\
     <a href=\"/files/standin_pkg-0.1-py3-none-any.whl\">standin_pkg-0.1-py3-none-any.whl</a>\
     </body></html>\n";

/// pip against the stand-in registry, then importing what it installed.
fn install(port: u16) -> String {
    format!(
        "python3 -m pip install --no-cache-dir --disable-pip-version-check --target deps \
         --index-url http://127.0.0.2:{port}/simple/ standin-pkg \
         && PYTHONPATH=deps python3 -c 'import standin_pkg; print(standin_pkg.MESSAGE)'\n"
    )
}

#[tokio::test]
async fn an_install_reaches_a_listed_registry_only_with_the_grant() {
    if !harness::bwrap_available() {
        return;
    }
    // On 127.0.0.2: the sandbox keeps 127.0.0.1 and localhost direct
    // (NO_PROXY), so a registry named by another loopback address goes
    // through the proxy, as a remote one does.
    let (port, _registry, _build) = standin_registry().await;
    let refused =
        "curl -sS --max-time 20 http://not-a-registry.example/ 2>&1 | sed 's/^/other host: /'\n";
    let granted =
        format!("[sandbox]\ngrant_registries = true\nregistries = [\"127.0.0.2:{port}\"]\n");
    let project = tempfile::tempdir().unwrap();
    let script = format!("{refused}{}", install(port));
    let out = run(&granted, &script, false, project.path()).await;
    assert!(
        out.contains("installed from the stand-in registry"),
        "{out}"
    );
    assert!(project
        .path()
        .join("deps/standin_pkg/__init__.py")
        .is_file());
    let other = out
        .lines()
        .find(|l| l.starts_with("other host: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        other.contains("`not-a-registry.example:80` is not a package registry")
            && other.contains("`registries`")
            && other.contains("[sandbox]"),
        "{out}"
    );
}

/// A stand-in registry of one wheel on 127.0.0.2: its port.
async fn standin_registry() -> (u16, tokio::task::JoinHandle<()>, tempfile::TempDir) {
    let build = tempfile::tempdir().unwrap();
    let wheel = wheel(build.path());
    let (port, task) = http_service(
        "127.0.0.2",
        INDEX,
        vec![("/files/standin_pkg-0.1-py3-none-any.whl".to_string(), wheel)],
    )
    .await;
    (port, task, build)
}

/// One session of a daemon with `config`, where the model runs each of
/// `scripts` in turn with the shell tool, and every question is answered
/// by `choose`: the tool results and the questions asked.
async fn session(
    config: &str,
    scripts: &[String],
    project: &Path,
    choose: impl FnMut(&serde_json::Value) -> String,
) -> (Vec<String>, Vec<serde_json::Value>) {
    let home = harness::home_with_config(&format!("shell_timeout_secs = 60\n{config}"));
    let mut replies: Vec<Reply> = scripts
        .iter()
        .enumerate()
        .map(|(i, s)| fake::shell_call(&format!("c{i}"), s))
        .collect();
    replies.push(fake::openai_text("done"));
    let fake = FakeProvider::start(replies).await;
    let url = fake.openai_url();
    let mut cmd = harness::serve_command(home.path());
    cmd.args(["--provider-url", &url])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
    let (msg, asked) = client.prompt_answering(&session, "go", choose).await;
    assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
    (fake.last_tool_results(), asked)
}

const QUESTION: &str = "let installers reach these registries for this session: ";

/// Without `grant_registries`, a session where a person can be asked is
/// asked once, before its first install, with the hosts; approved, that
/// install and the next reach the registry, the next one unasked.
/// Rejected, the install runs without network, fails at once with the
/// note naming the config key, and the session is not asked again.
#[tokio::test]
async fn the_registries_grant_is_asked_once_per_session() {
    if !harness::bwrap_available() {
        return;
    }
    let (port, _registry, _build) = standin_registry().await;
    let config = format!("[sandbox]\nregistries = [\"127.0.0.2:{port}\"]\n");
    let second = install(port).replace("--target deps", "--target deps2");
    let scripts = [install(port), second];

    let project = tempfile::tempdir().unwrap();
    let (results, asked) =
        session(&config, &scripts, project.path(), |_| "allow_once".into()).await;
    assert_eq!(asked.len(), 1, "{asked:#?}");
    let question = asked[0].to_string();
    assert!(
        question.contains(QUESTION)
            && question.contains(&format!("127.0.0.2:{port}"))
            && question.contains("pypi.org")
            && question.contains("Approving runs this command, and every later one"),
        "{question}"
    );
    assert_eq!(results.len(), 2, "{results:?}");
    for out in &results {
        assert!(
            out.contains("installed from the stand-in registry"),
            "{out}"
        );
    }
    assert!(project
        .path()
        .join("deps2/standin_pkg/__init__.py")
        .is_file());

    let project = tempfile::tempdir().unwrap();
    let (results, asked) =
        session(&config, &scripts, project.path(), |_| "reject_once".into()).await;
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(results.len(), 2, "{results:?}");
    for out in &results {
        assert!(
            !out.contains("installed from the stand-in registry"),
            "{out}"
        );
        assert!(
            out.contains(
                "no network in the sandbox: `python3 -m pip` cannot reach a package registry"
            ) && out.contains("grant `registries` in config"),
            "{out}"
        );
    }
}

/// The question as a flight plan (an Emacs-style client), approved after
/// its turn is gone (the daemon was killed while it waited): the next
/// daemon runs the install with the grant, as the live turn would have.
/// The daemon keeps the test's PATH: where it holds a pyenv's shims, their
/// `python3 -m pip install` runs pyenv's rehash hook inside.
#[tokio::test]
async fn a_registries_question_approved_after_a_restart_runs_with_the_grant() {
    if !harness::bwrap_available() {
        return;
    }
    let (port, _registry, _build) = standin_registry().await;
    let home = harness::home_with_config(&format!(
        "shell_timeout_secs = 60\n[sandbox]\nregistries = [\"127.0.0.2:{port}\"]\n"
    ));
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![fake::shell_call("c1", &install(port))]).await;
    let url = fake.openai_url();
    let spawn = || {
        Client::spawn(
            Framing::ContentLength,
            home.path(),
            &["--provider-url", &url],
        )
    };
    let mut first = spawn();
    first.initialize(json!({ "flightPlans": true })).await;
    let sid = first.new_session(project.path()).await;
    first
        .start_request("session/prompt", harness::prompt(&sid, "go"))
        .await;
    let offer = first.wait_method("_passepartout/plan/offer").await;
    assert!(offer.to_string().contains(QUESTION), "{offer}");
    let id = offer["params"]["plan"]["planId"]
        .as_str()
        .unwrap()
        .to_string();
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();

    let mut second = spawn();
    second.initialize(json!({ "flightPlans": true })).await;
    second.wait_method("_passepartout/plan/offer").await;
    let r = second
        .request(
            "_passepartout/plan/decide",
            json!({ "planId": id, "decision": "approve" }),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let resolved = second.wait_method("_passepartout/plan/resolved").await;
    assert_eq!(resolved["params"]["status"], "executed", "{resolved}");
    let plan: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            home.path()
                .join(format!("state/passepartout/plans/{id}.json")),
        )
        .unwrap(),
    )
    .unwrap();
    let output = plan["result"]["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("installed from the stand-in registry"),
        "{plan}"
    );
}

/// The answer outlives the daemon: a session granted `registries`, loaded
/// again by a second daemon (`session/load`), installs unasked with the
/// grant; one that declined is not asked again either.
#[tokio::test]
async fn a_resumed_session_keeps_its_registries_answer() {
    if !harness::bwrap_available() {
        return;
    }
    let (port, _registry, _build) = standin_registry().await;
    for (answer, installs) in [("allow_once", true), ("reject_once", false)] {
        let home = harness::home_with_config(&format!(
            "shell_timeout_secs = 60\n[sandbox]\nregistries = [\"127.0.0.2:{port}\"]\n"
        ));
        let project = tempfile::tempdir().unwrap();
        let second = install(port).replace("--target deps", "--target deps2");
        let fake = FakeProvider::start(vec![
            fake::shell_call("c1", &install(port)),
            fake::openai_text("done"),
            fake::shell_call("c2", &second),
            fake::openai_text("done"),
        ])
        .await;
        let url = fake.openai_url();
        let spawn = || {
            let mut cmd = harness::serve_command(home.path());
            cmd.args(["--provider-url", &url])
                .env("PATH", "/usr/local/bin:/usr/bin:/bin");
            Client::spawn_command(cmd, Framing::Ndjson)
        };
        let mut first = spawn();
        first.initialize(json!({})).await;
        let sid = first.new_session(project.path()).await;
        let (msg, asked) = first.prompt_answering(&sid, "go", |_| answer.into()).await;
        assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
        assert_eq!(asked.len(), 1, "{asked:#?}");
        drop(first);

        let mut again = spawn();
        again.initialize(json!({})).await;
        let r = again
            .request(
                "session/load",
                json!({ "sessionId": sid, "cwd": project.path(), "mcpServers": [] }),
            )
            .await;
        assert!(r.get("result").is_some(), "{r}");
        let (msg, asked) = again
            .prompt_answering(&sid, "again", |_| "allow_once".into())
            .await;
        assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
        assert!(asked.is_empty(), "{answer}: asked again: {asked:#?}");
        let result = fake.last_tool_results().join("\n");
        assert_eq!(
            result.contains("installed from the stand-in registry"),
            installs,
            "{answer}: {result}"
        );
        assert_eq!(
            project
                .path()
                .join("deps2/standin_pkg/__init__.py")
                .is_file(),
            installs
        );
    }
}
