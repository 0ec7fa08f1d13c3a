//! OAuth for a streamable HTTP MCP server, end to end: a local
//! authorization server and the MCP server it protects
//! (`tests/support/oauth_server.rs`, real HTTP on 127.0.0.1), the real
//! `passepartout mcp login` with the test playing the browser, and the
//! real daemon using the stored tokens — refreshing an expired one — or
//! saying that the server needs a login when it has none that works.

use crate::harness;
use crate::suite::mcp::{
    new_session, prompt_and_answer, the_server_notice, tool_result, wrapped, Setup,
};
use crate::support::fake_provider as fake;
use crate::support::oauth_server::OAuthServer;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

/// config.toml naming the protected server `docs`.
fn config(server: &OAuthServer) -> String {
    format!(
        "[[mcp.servers]]\nname = \"docs\"\nurl = \"{}\"\napproval = \"ask\"\n",
        server.mcp_url()
    )
}

/// `passepartout ARGS` with the daemon's isolated home (the state directory
/// the daemon reads the tokens from) and `config`.
fn cli(home: &Path, config: &str, args: &[&str]) -> tokio::process::Command {
    let path = home.join("config.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = tokio::process::Command::new(harness::BIN);
    cmd.args(args)
        .arg("--config")
        .arg(&path)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("PASSEPARTOUT_CONFIG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

fn token_files(home: &Path) -> Vec<PathBuf> {
    let dir = home.join("state/passepartout/mcp-oauth");
    std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default()
}

/// Run `mcp login docs`, play the browser on the URL it prints, and
/// return what it printed.
async fn login(home: &Path, config: &str) -> String {
    let mut child = cli(home, config, &["mcp", "login", "docs"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = String::new();
    let url = tokio::time::timeout(harness::WAIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push_str(&line);
            printed.push('\n');
            if line.starts_with("http://") {
                return line;
            }
        }
        panic!("no authorization URL in {printed}");
    })
    .await
    .expect("mcp login prints the URL to open");
    // The browser: follow the authorization URL; the server approves and
    // redirects to the callback listener of `mcp login`.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let page = reqwest::get(&url).await.unwrap();
    assert!(page.status().is_success(), "{page:?}");
    let text = page.text().await.unwrap();
    assert!(text.contains("logged in"), "{text}");
    let status = tokio::time::timeout(harness::WAIT, child.wait())
        .await
        .expect("mcp login ends")
        .unwrap();
    while let Some(line) = lines.next_line().await.unwrap() {
        printed.push_str(&line);
        printed.push('\n');
    }
    assert!(status.success(), "{printed}");
    printed
}

fn docs_state(r: &Value) -> String {
    r["result"]["_meta"]["passepartout"]["mcpServers"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .find(|s| s["name"] == "docs")
        .unwrap_or_else(|| panic!("{r}"))["state"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn login_stores_tokens_the_daemon_uses_and_refreshes() {
    let server = OAuthServer::start(3600).await;
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_a", "mcp__docs__echo", r#"{"text": "first"}"#)]),
        fake::openai_text("done"),
        fake::openai_tool_calls(&[("call_b", "mcp__docs__echo", r#"{"text": "refreshed"}"#)]),
        fake::openai_text("done"),
    ])
    .await;
    let config = config(&server);
    let home = s.home.path();

    let printed = login(home, &config).await;
    assert!(printed.contains("Open this URL in a browser"), "{printed}");
    let files = token_files(home);
    assert_eq!(files.len(), 1, "{printed}");
    assert!(
        printed.contains(&files[0].display().to_string()),
        "{printed}"
    );
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let stored = std::fs::read_to_string(&files[0]).unwrap();
    assert!(stored.contains(&server.mcp_url()), "{stored}");
    assert_eq!(
        server
            .shared
            .registrations
            .load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the client registered itself (RFC 7591)"
    );

    // A session uses the server's tool with the stored token.
    let mut c = s.spawn(Some(&config));
    c.initialize(json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), "running", "{r}");
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped("docs", "echo", "echo: first")
    );
    assert_eq!(server.calls(), 1);
    assert_eq!(server.refreshes(), 0);

    // The token expires: the server refuses it, and the stored file says it
    // was received two hours ago with an hour to live. The daemon refreshes
    // it with the refresh token before using it; the next session works.
    server.expire_access_tokens();
    let mut file: Value = serde_json::from_str(&stored).unwrap();
    let received = file["credentials"]["token_received_at"].as_u64().unwrap();
    file["credentials"]["token_received_at"] = json!(received - 7200);
    std::fs::write(&files[0], file.to_string()).unwrap();
    let access = |f: &Value| f["credentials"]["token_response"]["access_token"].clone();
    let rejected = |s: &OAuthServer| {
        s.shared
            .rejected_tokens
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), "running", "{r}");
    assert_eq!(server.refreshes(), 1, "the expired token was refreshed");
    assert_eq!(
        rejected(&server),
        0,
        "refreshed before use: the expired token was never sent"
    );
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 3),
        wrapped("docs", "echo", "echo: refreshed")
    );
    assert_eq!(server.calls(), 2);
    // The new tokens (the refresh token rotated) were saved for the next
    // daemon.
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_ne!(
        access(&after),
        access(&file),
        "the refreshed tokens are stored"
    );
    assert!(access(&after).is_string(), "{after}");

    // A token the server refuses before its time (expired on the server's
    // clock) is refreshed once and the request sent again.
    server.expire_access_tokens();
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), "running", "{r}");
    assert_eq!(server.refreshes(), 2);
    assert_eq!(rejected(&server), 1);

    // `mcp logout` removes them.
    let out = cli(home, &config, &["mcp", "logout", "docs"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(token_files(home).is_empty());
}

#[tokio::test]
async fn without_a_usable_token_the_server_needs_login_and_nothing_hangs() {
    let server = OAuthServer::start(3600).await;
    let s = Setup::new(vec![]).await;
    let config = config(&server);
    let home = s.home.path();
    let hint = "failed: needs login: run `passepartout mcp login docs`";

    // No token at all: the session says so at once, and so does `mcp list`.
    let mut c = s.spawn(Some(&config));
    c.initialize(json!({})).await;
    let started = std::time::Instant::now();
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), hint, "{r}");
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    let out = cli(home, &config, &["mcp", "list"]).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("docs  failed: needs login: run `passepartout mcp login docs`"),
        "{text}"
    );

    // Logged in, then the person revokes the app: the stored tokens (the
    // refresh token too) no longer work.
    login(home, &config).await;
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), "running", "{r}");
    server.revoke_all();
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), hint, "{r}");

    // An ACP client's server is not in config.toml: the hint names its URL.
    let r = new_session(
        &mut c,
        s.project.path(),
        json!([{ "type": "http", "name": "remote", "url": server.mcp_url(), "headers": [] }]),
    )
    .await;
    let error = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "needs login: run `passepartout mcp login {}`",
            server.mcp_url()
        )),
        "{r}"
    );
}

/// The daemon's log file, as far as it was written.
fn daemon_log(home: &Path) -> String {
    std::fs::read_to_string(home.join("state/passepartout/logs/passepartout.log"))
        .unwrap_or_default()
}

#[tokio::test]
async fn a_token_refused_mid_session_needs_login_and_is_not_a_crash() {
    let server = OAuthServer::start(3600).await;
    let s = Setup::new(vec![
        fake::openai_tool_calls(&[("call_a", "mcp__docs__echo", r#"{"text": "first"}"#)]),
        fake::openai_text("done"),
        fake::openai_tool_calls(&[("call_b", "mcp__docs__echo", r#"{"text": "second"}"#)]),
        fake::openai_text("needs a login"),
        fake::openai_text("still"),
    ])
    .await;
    let config = config(&server);
    let home = s.home.path();
    login(home, &config).await;
    let mut c = s.spawn(Some(&config));
    c.initialize(json!({})).await;
    let r = new_session(&mut c, s.project.path(), json!([])).await;
    assert_eq!(docs_state(&r), "running", "{r}");
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    assert_eq!(
        tool_result(&s.fake, 1),
        wrapped("docs", "echo", "echo: first")
    );

    // The person revokes the app while the session runs: the access token
    // is refused and so is the refresh token. The call's result says what
    // to do, as at start — not that the server stopped.
    server.revoke_all();
    prompt_and_answer(&mut c, &sid, "allow_once").await;
    let result = tool_result(&s.fake, 3);
    assert_eq!(
        result,
        "MCP server `docs` is not running: needs login: run `passepartout mcp login docs`"
    );
    assert_eq!(server.calls(), 1, "the refused call never ran");
    // The person sees the same words on the call's card.
    assert!(
        c.backlog.iter().any(|m| m["method"] == "session/update"
            && m["params"]["update"]["sessionUpdate"] == "tool_call_update"
            && m.to_string()
                .contains("needs login: run `passepartout mcp login docs`")),
        "{:?}",
        c.backlog
    );
    // And the client's list of the session's servers is told the new state.
    assert_eq!(
        the_server_notice(&c, &sid)["state"],
        "failed: needs login: run `passepartout mcp login docs`"
    );

    // The session's state is "needs login": the next turn no longer offers
    // the server's tools, and the log says why, with no crash in it.
    let p = c
        .start_request("session/prompt", harness::prompt(&sid, "again"))
        .await;
    let done = c.wait_response(p).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let offered: Vec<String> = s.fake.requests()[4].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect();
    assert!(
        !offered.contains(&"mcp__docs__echo".to_string()),
        "{offered:?}"
    );
    let deadline = std::time::Instant::now() + harness::WAIT;
    let log = loop {
        let log = daemon_log(home);
        if log.contains("needs login") || std::time::Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        log.contains("needs login: run `passepartout mcp login docs`"),
        "{log}"
    );
    assert!(!log.contains("stopped during the call"), "{log}");
}
