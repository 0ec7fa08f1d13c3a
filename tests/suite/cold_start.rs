//! Issue 20, cold start: what the `initialize` reply carries is found
//! while the daemon starts, not when the client asks. The limit
//! diagnostics read `/proc`, the cgroup files and `PATH` (and, for a
//! daemon run as a user, fork a user-namespace trial): that happens on a
//! thread of its own from start-up, so the reply finds it done. Timing
//! itself is `bench_daemon`'s job (`docs/performance.md`).

use crate::harness::{self, Client, Framing};

use std::time::{Duration, Instant};

/// The line the daemon logs once the host's limits are known.
const HOST_LIMITS_FOUND: &str = "limit diagnostics: host limits found";

#[tokio::test]
async fn the_host_limits_are_found_before_initialize_asks() {
    let home = harness::home_with_config("");
    let log = home.path().join("daemon.log");
    let mut cmd = harness::serve_command(home.path());
    cmd.args(["--provider-url", "http://127.0.0.1:9/v1", "--model", "m"]);
    std::fs::write(
        home.path().join("config/passepartout/config.toml"),
        format!("log_file = {:?}\n", log.display().to_string()),
    )
    .unwrap();
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);

    // Nothing sent yet: the daemon finds the host's limits on its own.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(HOST_LIMITS_FOUND) {
            assert!(
                !text.contains("initialize"),
                "the client has not sent initialize yet:\n{text}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not look at the host's limits before `initialize`; its log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The reply carries them all, as before.
    let init = client.initialize(serde_json::json!({})).await;
    let limits = init["result"]["_meta"]["passepartout"]["limits"]
        .as_array()
        .unwrap_or_else(|| panic!("no limits in {init}"))
        .clone();
    let names: Vec<&str> = limits.iter().filter_map(|r| r["name"].as_str()).collect();
    // Every limit a tool can set, then the two only the daemon sets.
    let expected: Vec<&str> = passepartout::sandbox::limits::LimitOverrides::NAMES
        .iter()
        .copied()
        .chain(["output", "network"])
        .collect();
    assert_eq!(names, expected);
    assert_eq!(
        limits[8]["enforced"],
        passepartout::sandbox::network::available()
    );
    // Found once: asking again reads no host file, and the log says so once.
    client.initialize(serde_json::json!({})).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(text.matches(HOST_LIMITS_FOUND).count(), 1, "{text}");
}

/// With nothing configured and no local model server listening (the
/// usual idle daemon), discovery learns that from refused TCP connections
/// alone: the `initialize` reply reports each candidate as before, and no
/// HTTP client is built on the way to it. A candidate that listens is
/// still asked over HTTP (`tests/suite/discovery.rs`).
#[tokio::test]
async fn refused_local_servers_need_no_http_client_before_the_reply() {
    let home = harness::home_with_config("");
    let log = home.path().join("daemon.log");
    std::fs::write(
        home.path().join("config/passepartout/config.toml"),
        format!("log_file = {:?}\n", log.display().to_string()),
    )
    .unwrap();
    // Nothing listens on the discard port here: connections are refused.
    let closed = "http://127.0.0.1:9/v1";
    let mut cmd = harness::serve_command(home.path());
    cmd.env(
        "PASSEPARTOUT_DISCOVERY_HOSTS",
        format!("ollama={closed},llama.cpp={closed},lmstudio={closed},vllm={closed}"),
    )
    .env_remove("PASSEPARTOUT_PROVIDER_URL")
    .env_remove("PASSEPARTOUT_MODEL")
    .env_remove("PASSEPARTOUT_API_KEY");
    for var in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENROUTER_API_KEY",
        "DEEPSEEK_API_KEY",
    ] {
        cmd.env_remove(var);
    }
    let mut client = Client::spawn_command(cmd, Framing::Ndjson);
    let init = client.initialize(serde_json::json!({})).await;
    let candidates = init["result"]["_meta"]["passepartout"]["discovery"]["candidates"]
        .as_array()
        .unwrap_or_else(|| panic!("no discovery in {init}"))
        .clone();
    let local: Vec<&serde_json::Value> = candidates
        .iter()
        .filter(|c| c["baseUrl"].as_str() == Some(closed))
        .collect();
    assert_eq!(local.len(), 4, "{init}");
    for c in local {
        assert_eq!(c["status"], "unreachable", "{c}");
        assert_eq!(c["reason"], "Connection refused (os error 111)", "{c}");
        assert_eq!(
            c["detail"], "not reachable (Connection refused (os error 111))",
            "{c}"
        );
    }
    // The log's writer thread is behind: wait for the `initialize` line,
    // which comes after anything logged on the way to the reply.
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("initialize") {
            break text;
        }
        assert!(Instant::now() < deadline, "no initialize logged:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !text.contains(passepartout::llm::discovery::PROBE_CLIENT_BUILT),
        "an HTTP client was built to hear four refusals:\n{text}"
    );
}

/// The daemon's threads, by name, from `/proc`.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task") {
        let comm = task.expect("a task").path().join("comm");
        names.push(
            std::fs::read_to_string(comm)
                .unwrap_or_default()
                .trim()
                .to_string(),
        );
    }
    names
}

/// The first exchange starts no thread beyond what it needs. With nothing
/// logged there is no log writer thread (it starts with the first line).
/// Blocking-pool threads stay for 10 s once started, so what is counted
/// right after the reply is everything started before it: the main
/// thread, the runtime's two workers, the pool thread that probed the
/// limits, and tokio's stdin reader and stdout writer on the pool (which
/// may reuse the probe's thread).
#[tokio::test]
async fn the_first_exchange_starts_no_thread_of_its_own() {
    let home = harness::home_with_config("");
    for framing in [Framing::ContentLength, Framing::Ndjson] {
        let mut cmd = harness::serve_command(home.path());
        cmd.env("PASSEPARTOUT_LOG", "error").env(
            "PASSEPARTOUT_DISCOVERY_HOSTS",
            "ollama=,llama.cpp=,lmstudio=,vllm=,anthropic=,openai=,openrouter=,deepseek=",
        );
        let mut client = Client::spawn_command(cmd, framing);
        let init = client.initialize(serde_json::json!({})).await;
        assert!(init["result"]["_meta"]["passepartout"]["limits"].is_array());
        let pid = client.child.id().expect("running");
        let names = thread_names(pid);
        assert!(
            !names.iter().any(|n| n == "passepartout-log"),
            "a log writer thread with nothing logged: {names:?}"
        );
        assert!(
            names.len() <= 6,
            "{} threads after the first reply: {names:?}",
            names.len()
        );
        // And the connection goes on as before, through the pool when the
        // next request is not there yet.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = client.initialize(serde_json::json!({})).await;
        assert_eq!(again["result"]["_meta"], init["result"]["_meta"]);
    }
}
