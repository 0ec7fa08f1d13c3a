//! Soak: a provider that streams one answer without end, for a minute,
//! against the release daemon. Prints the daemon's peak resident memory
//! (VmHWM) and how long `session/cancel` takes to answer while output is
//! backed up.
//!
//! Phases (60 s by default; `SOAK_SECS` changes it):
//! 1. two thirds of the time the client reads slowly (about 256 KB/s, an
//!    editor busy rendering), so the provider is held back by backpressure;
//! 2. the last third the client does not read at all;
//! 3. then it cancels and times the `cancelled` answer (reading again);
//! 4. then ten short turns, each cancelled 200 ms into an endless answer
//!    with the client not reading, timing each cancel.
//!
//! Targets: peak RSS < 64 MB, cancel latency < 100 ms.
//!
//! Run with `cargo run --release --example soak` (it uses the binary next
//! to it: build it first with `cargo build --release`).

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

// The fault tests count requests; the soak does not.
#[allow(dead_code)]
#[path = "../tests/support/endless_provider.rs"]
mod endless_provider;
use endless_provider::EndlessProvider;

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .join("passepartout")
}

struct Daemon {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Daemon {
    fn spawn(home: &Path, url: &str) -> Daemon {
        let config = home.join("soak.toml");
        std::fs::write(&config, "max_answer_bytes = 33554432\n").unwrap();
        let mut child = Command::new(binary())
            .arg("serve")
            .args(["--config", config.to_str().unwrap(), "--provider-url", url])
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("PASSEPARTOUT_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn passepartout (build it first with cargo build --release)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::with_capacity(4096, child.stdout.take().unwrap());
        Daemon {
            child,
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, v: Value) {
        self.stdin
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).await.unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Read until the response with `id`; returns it.
    async fn response(&mut self, id: u64) -> Value {
        loop {
            let m = self.read().await;
            if m["id"] == json!(id) && m.get("method").is_none() {
                return m;
            }
        }
    }

    fn peak_rss_mb(&self) -> f64 {
        let pid = self.child.id().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb / 1024.0
    }
}

fn prompt(id: u64, session: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": { "sessionId": session, "prompt": [{ "type": "text", "text": "talk forever" }] } })
}

fn cancel(session: &str) -> Value {
    json!({ "jsonrpc": "2.0", "method": "session/cancel", "params": { "sessionId": session } })
}

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    // Short chunks, many to a write: the daemon's per-chunk work is soaked.
    let provider = EndlessProvider::start("endless text ", 64).await;
    let mut d = Daemon::spawn(home.path(), &provider.url);
    d.send(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": 1 } }))
        .await;
    d.response(1).await;
    d.send(json!({ "jsonrpc": "2.0", "id": 2, "method": "session/new", "params": { "cwd": project.path(), "mcpServers": [] } }))
        .await;
    let sid = d.response(2).await["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();

    // Phases 1 and 2: one endless answer.
    d.send(prompt(3, &sid)).await;
    let start = Instant::now();
    let slow_until = start + Duration::from_secs(secs * 2 / 3);
    let stop_at = start + Duration::from_secs(secs);
    let mut read_bytes: u64 = 0;
    let mut buf = vec![0u8; 4096];
    while Instant::now() < slow_until {
        // About 256 KB/s: 4 KB every 16 ms.
        let n = d.stdout.read(&mut buf).await.unwrap();
        read_bytes += n as u64;
        tokio::time::sleep(Duration::from_millis(16)).await;
    }
    println!(
        "phase 1: read {:.1} MB slowly in {} s; peak RSS so far {:.1} MB",
        read_bytes as f64 / 1e6,
        secs * 2 / 3,
        d.peak_rss_mb()
    );
    tokio::time::sleep(stop_at.saturating_duration_since(Instant::now())).await;
    println!(
        "phase 2: not reading for {} s; peak RSS so far {:.1} MB",
        secs - secs * 2 / 3,
        d.peak_rss_mb()
    );

    // Phase 3: cancel with the output backed up.
    let t = Instant::now();
    d.send(cancel(&sid)).await;
    // Skip to the end of a line first (we read raw bytes above).
    let mut rest = String::new();
    d.stdout.read_line(&mut rest).await.unwrap();
    let r = d.response(3).await;
    let backed_up = t.elapsed();
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    println!(
        "cancel with output backed up: answered in {:.1} ms",
        backed_up.as_secs_f64() * 1000.0
    );

    // Phase 4: short turns, each cancelled while the client is not reading.
    let mut latencies = Vec::new();
    for i in 0..10u64 {
        let id = 100 + i;
        d.send(prompt(id, &sid)).await;
        // Wait for the stream to start, then stop reading for 200 ms.
        loop {
            let m = d.read().await;
            if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = Instant::now();
        d.send(cancel(&sid)).await;
        let r = d.response(id).await;
        latencies.push(t.elapsed());
        assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "cancel latency over 10 turns: p50 {:.1} ms, max {:.1} ms",
        ms(latencies[latencies.len() / 2]),
        ms(*latencies.last().unwrap())
    );
    println!(
        "peak RSS of the daemon over the soak: {:.1} MB (target < 64 MB)",
        d.peak_rss_mb()
    );
}
