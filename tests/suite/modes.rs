//! Session modes end to end through the real binary, the fake provider and
//! real bubblewrap: `session/new` and `session/load` advertise the modes,
//! `session/set_mode` switches them (with a `current_mode_update`), the
//! read-only mode is enforced by the kernel (the project is bound
//! read-only) and by a denial the model reads, the ask mode asks for an
//! otherwise automatic command, and the daemon's own files stay out of
//! reach (hidden and unwritable) of a session in `$HOME`.

use crate::harness;
use crate::support;

use std::path::Path;

use harness::{Client, Framing};
use serde_json::{json, Value};
use support::fake_provider::{self as fake, FakeProvider};

fn spawn(home: &Path, fake: &FakeProvider) -> Client {
    let url = fake.openai_url();
    Client::spawn(Framing::Ndjson, home, &["--provider-url", &url])
}

/// Run one prompt to its end, approving every permission request; the
/// titles of the tool calls a person was asked about.
async fn turn(c: &mut Client, session: &str) -> Vec<String> {
    let (response, asked) = c.prompt_allowing(session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    asked
        .iter()
        .map(|m| {
            m["params"]["toolCall"]["title"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The tool results the model received, in order (from its last request).
fn tool_results(fake: &FakeProvider) -> Vec<String> {
    let reqs = fake.requests();
    let last = reqs.last().expect("a request");
    last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn set_mode(c: &mut Client, session: &str, mode: &str) -> Value {
    c.request(
        "session/set_mode",
        json!({ "sessionId": session, "modeId": mode }),
    )
    .await
}

#[tokio::test]
async fn modes_are_advertised_and_set_mode_follows_the_schema() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let mut c = spawn(home.path(), &fake);
    c.initialize(json!({})).await;
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    let modes = &r["result"]["modes"];
    assert_eq!(modes["currentModeId"], "auto", "{r}");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["read-only", "ask", "auto"]);
    assert!(modes["availableModes"][0]["description"].is_string());
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();

    let ok = set_mode(&mut c, &sid, "read-only").await;
    assert_eq!(ok["result"], json!({}), "{ok}");
    let update = c
        .wait_for(|m| m["params"]["update"]["sessionUpdate"] == "current_mode_update")
        .await;
    assert_eq!(
        update["params"],
        json!({ "sessionId": sid, "update": { "sessionUpdate": "current_mode_update", "currentModeId": "read-only" } })
    );

    let bad = set_mode(&mut c, &sid, "yolo").await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let msg = bad["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("yolo") && msg.contains("read-only, ask, auto"),
        "{msg}"
    );

    let unknown = set_mode(&mut c, "no-such-session", "ask").await;
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown session `no-such-session`"),
        "{unknown}"
    );
}

#[tokio::test]
async fn read_only_mode_keeps_the_project_unchanged_at_the_kernel_and_denies_writes() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("f"), "original\n").unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "echo x > f"),
        fake::write_call("c2", "f", "replaced\n"),
        fake::shell_call("c3", "cat f && echo built > /tmp/out && cat /tmp/out"),
        fake::openai_text("done"),
    ])
    .await;
    let mut c = spawn(home.path(), &fake);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;
    assert_eq!(
        set_mode(&mut c, &sid, "read-only").await["result"],
        json!({})
    );

    let asked = turn(&mut c, &sid).await;
    let results = tool_results(&fake);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].contains("Read-only file system"),
        "the kernel refuses the shell write: {}",
        results[0]
    );
    assert!(
        results[1].contains("the session is in read-only mode; the person can switch modes"),
        "write_file is denied with the reason: {}",
        results[1]
    );
    // Reads and writes to the private /tmp still work.
    assert!(
        results[2].contains("original") && results[2].contains("built"),
        "{}",
        results[2]
    );
    assert!(
        !asked.iter().any(|t| t.starts_with("write_file")),
        "a denied write is not offered to the person: {asked:?}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("f")).unwrap(),
        "original\n"
    );
}

#[tokio::test]
async fn switching_modes_mid_session_takes_effect_at_the_next_action() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "ls"),
        fake::openai_text("listed"),
        fake::shell_call("c2", "ls"),
        fake::openai_text("listed again"),
        fake::shell_call("c3", "echo x > g"),
        fake::openai_text("tried"),
    ])
    .await;
    let mut c = spawn(home.path(), &fake);
    c.initialize(json!({})).await;
    let sid = c.new_session(project.path()).await;

    // auto: the gates allow `ls`, nobody is asked.
    let asked = turn(&mut c, &sid).await;
    assert!(asked.is_empty(), "auto asked for ls: {asked:?}");

    // ask: the same `ls` now asks the person.
    assert_eq!(set_mode(&mut c, &sid, "ask").await["result"], json!({}));
    let asked = turn(&mut c, &sid).await;
    assert_eq!(asked.len(), 1, "ask mode did not ask for ls: {asked:?}");
    assert!(asked[0].contains("ls"), "{asked:?}");

    // read-only: a write fails at the kernel.
    assert_eq!(
        set_mode(&mut c, &sid, "read-only").await["result"],
        json!({})
    );
    turn(&mut c, &sid).await;
    let results = tool_results(&fake);
    assert!(
        results.last().unwrap().contains("Read-only file system"),
        "{results:?}"
    );
    assert!(!project.path().join("g").exists());
}

#[tokio::test]
async fn the_mode_survives_session_load() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let sid = {
        let mut c = spawn(home.path(), &fake);
        c.initialize(json!({})).await;
        let sid = c.new_session(project.path()).await;
        assert_eq!(set_mode(&mut c, &sid, "ask").await["result"], json!({}));
        c.close_stdin();
        let _ = tokio::time::timeout(harness::WAIT, c.child.wait()).await;
        sid
    };
    let mut c = spawn(home.path(), &fake);
    c.initialize(json!({})).await;
    let r = c
        .request(
            "session/load",
            json!({ "sessionId": sid, "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert_eq!(r["result"]["modes"]["currentModeId"], "ask", "{r}");
}

#[tokio::test]
async fn the_default_mode_comes_from_the_config() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let config = home.path().join("config/passepartout");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), "default_mode = \"read-only\"\n").unwrap();
    let fake = FakeProvider::start(vec![]).await;
    let mut c = spawn(home.path(), &fake);
    c.initialize(json!({})).await;
    let r = c
        .request(
            "session/new",
            json!({ "cwd": project.path(), "mcpServers": [] }),
        )
        .await;
    assert_eq!(r["result"]["modes"]["currentModeId"], "read-only", "{r}");
}

#[tokio::test]
async fn the_daemons_own_files_are_out_of_reach_of_a_session_in_home() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let config_dir = home_path.join("config/passepartout");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config_file = config_dir.join("config.toml");
    std::fs::write(&config_file, "max_rounds = 10\n").unwrap();
    let state = home_path.join("state/passepartout");
    std::fs::create_dir_all(&state).unwrap();
    let trust = state.join("trusted-skills.json");
    std::fs::write(&trust, "{}").unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call(
            "c1",
            "echo 'sandbox = \"none\"' >> config/passepartout/config.toml",
        ),
        fake::write_call(
            "c2",
            "config/passepartout/config.toml",
            "sandbox = \"none\"\n",
        ),
        fake::shell_call(
            "c3",
            "echo '{\"trusted\": []}' > state/passepartout/trusted-skills.json",
        ),
        fake::shell_call("c4", "echo fine > notes.txt"),
        fake::shell_call(
            "c5",
            "cat config/passepartout/config.toml state/passepartout/trusted-skills.json; ls -A state/passepartout | wc -l",
        ),
        fake::openai_tool_calls(&[(
            "c6",
            "read_file",
            &json!({ "path": "config/passepartout/config.toml" }).to_string(),
        )]),
        fake::openai_tool_calls(&[(
            "c7",
            "search_text",
            &json!({ "pattern": "max_rounds" }).to_string(),
        )]),
        fake::openai_text("done"),
    ])
    .await;
    let mut c = spawn(&home_path, &fake);
    c.initialize(json!({})).await;
    let sid = c.new_session(&home_path).await;
    let asked = turn(&mut c, &sid).await;
    let results = tool_results(&fake);
    assert_eq!(results.len(), 7, "{results:?}");
    // The files tools do not read them either: not the file, and a search
    // of the whole home does not enter them.
    assert!(
        results[5].contains("refused") && !results[5].contains("max_rounds = 10"),
        "{}",
        results[5]
    );
    assert!(
        results[6].contains("no matches") && !results[6].contains("config.toml"),
        "{}",
        results[6]
    );
    // Hidden, not only read-only: past output and keys stay unread.
    assert!(
        !results[4].contains("max_rounds") && results[4].contains("No such file"),
        "{}",
        results[4]
    );
    assert!(
        results[0].contains("Read-only file system"),
        "{}",
        results[0]
    );
    assert!(
        results[1].contains("refused") && results[1].contains("the agent's own configuration"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("Read-only file system"),
        "{}",
        results[2]
    );
    // The rest of the home directory is an ordinary project.
    assert_eq!(
        std::fs::read_to_string(home_path.join("notes.txt")).unwrap(),
        "fine\n"
    );
    // The gates asked about the writes to the daemon's own files.
    assert!(
        asked.iter().any(|t| t.starts_with("write_file")),
        "{asked:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&config_file).unwrap(),
        "max_rounds = 10\n"
    );
    assert_eq!(std::fs::read_to_string(&trust).unwrap(), "{}");
}

#[tokio::test]
async fn run_mode_read_only_uses_the_same_machinery() {
    if !harness::bwrap_available() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("f"), "original\n").unwrap();
    let fake = FakeProvider::start(vec![
        fake::shell_call("c1", "echo x > f"),
        fake::openai_text("could not"),
    ])
    .await;
    let run = |mode: &str| {
        let mut cmd = tokio::process::Command::new(harness::BIN);
        cmd.args(["run", "--provider-url", &fake.openai_url(), "--mode", mode])
            .arg("change f")
            .current_dir(project.path())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("XDG_STATE_HOME", home.path().join("state"))
            .env("XDG_DATA_HOME", home.path().join("data"));
        cmd
    };
    let out = run("read-only").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        tool_results(&fake)[0].contains("Read-only file system"),
        "{:?}",
        tool_results(&fake)
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("f")).unwrap(),
        "original\n"
    );
    let out = run("yolo").output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("read-only, ask, auto"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
