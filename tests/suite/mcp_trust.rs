//! Trust binds content, not names (issue 24 item 3, for MCP): trusting a
//! project's `.passepartout/config.toml` trusts the exact project files its
//! servers run. A server started as `python3 tools/server.py`, as
//! `python3 -m srvmod`, or as `node tools/server.js` runs (through the real
//! interpreter, which hands over to the real echo MCP server) once trusted;
//! after the agent changes that file, the next session does not start it
//! and says which files are bound and how to trust again; trusting again
//! starts it.

use std::path::Path;

use serde_json::{json, Value};

use super::mcp::{echo_server, mcp_trust, new_session, Setup};

/// The state of the project server `proj` in a new session's result.
async fn project_state(s: &Setup, c: &mut crate::harness::Client) -> String {
    let r = new_session(c, s.project.path(), json!([])).await;
    let servers: &Value = &r["result"]["_meta"]["passepartout"]["mcpServers"];
    let proj = servers
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "proj"))
        .unwrap_or_else(|| panic!("no `proj` in {r}"));
    proj["state"].as_str().unwrap().to_string()
}

/// Write the project config naming `command args`, and `files` (path,
/// text) in the project.
fn write_project(s: &Setup, command: &str, args: &[&str], files: &[(&str, String)]) {
    let root = s.project.path();
    std::fs::create_dir_all(root.join(".passepartout")).unwrap();
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    std::fs::write(
        root.join(".passepartout/config.toml"),
        format!(
            "[[mcp.servers]]\nname = \"proj\"\ncommand = \"{command}\"\nargs = [{}]\n",
            args.join(", ")
        ),
    )
    .unwrap();
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// A Python file that hands the process over to the echo server.
fn python_exec(record: &Path) -> String {
    format!(
        "import os\nos.execv({0:?}, [{0:?}, \"--record\", {1:?}])\n",
        echo_server().display().to_string(),
        record.display().to_string()
    )
}

/// Trust, start, change `changed` (as the agent would), see it refused
/// with the bound file named, trust again, see it start.
async fn bound_file_change_asks_again(s: &Setup, changed: &str, bound_shown: &str) {
    let mut c = s.spawn(None);
    c.initialize(json!({})).await;
    let said = mcp_trust(s, s.project.path()).await;
    assert!(
        said.contains(bound_shown),
        "the person is shown what is bound: {said}"
    );
    assert_eq!(project_state(s, &mut c).await, "running");
    let started = s.server_pids().len();
    assert_eq!(started, 1);

    // The agent rewrites the file the trusted config runs.
    let path = s.project.path().join(changed);
    let mut text = std::fs::read_to_string(&path).unwrap();
    let comment = if changed.ends_with(".js") { "//" } else { "#" };
    text.push_str(&format!("\n{comment} planted by the agent\n"));
    std::fs::write(&path, text).unwrap();

    let state = project_state(s, &mut c).await;
    assert!(
        state.starts_with("changed since trusted (the config or a file its servers run: ")
            && state.contains(bound_shown)
            && state.contains("untrusted: run `passepartout mcp trust "),
        "{state}"
    );
    assert_eq!(
        s.server_pids().len(),
        started,
        "a changed file started a server"
    );

    // The person looks again and trusts: it starts.
    mcp_trust(s, s.project.path()).await;
    assert_eq!(project_state(s, &mut c).await, "running");
    assert_eq!(s.server_pids().len(), started + 1);
}

#[tokio::test]
async fn a_trusted_python_script_changed_after_trust_does_not_start() {
    let s = Setup::new(vec![]).await;
    write_project(
        &s,
        "python3",
        &["tools/server.py"],
        &[("tools/server.py", python_exec(&s.record))],
    );
    bound_file_change_asks_again(&s, "tools/server.py", "tools/server.py").await;
}

#[tokio::test]
async fn a_trusted_python_module_changed_after_trust_does_not_start() {
    let s = Setup::new(vec![]).await;
    write_project(
        &s,
        "python3",
        &["-m", "srvmod"],
        &[
            ("srvmod/__init__.py", String::new()),
            ("srvmod/helper.py", "VALUE = 1\n".into()),
            ("srvmod/__main__.py", python_exec(&s.record)),
        ],
    );
    // A file the module imports, not the one named: the whole package is bound.
    bound_file_change_asks_again(&s, "srvmod/helper.py", "srvmod/helper.py").await;
}

#[tokio::test]
async fn a_trusted_node_script_changed_after_trust_does_not_start() {
    if which("node").is_none() {
        eprintln!("node not installed; skipped");
        return;
    }
    let s = Setup::new(vec![]).await;
    let script = format!(
        "const {{ spawnSync }} = require('child_process');\nconst r = spawnSync({:?}, ['--record', {:?}], {{ stdio: 'inherit' }});\nprocess.exit(r.status ?? 1);\n",
        echo_server().display().to_string(),
        s.record.display().to_string()
    );
    write_project(
        &s,
        "node",
        &["tools/server.js"],
        &[("tools/server.js", script)],
    );
    bound_file_change_asks_again(&s, "tools/server.js", "tools/server.js").await;
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}
