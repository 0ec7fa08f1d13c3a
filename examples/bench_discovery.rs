//! Discovery figures: how long finding a provider takes (what `run` and a
//! daemon's startup wait when nothing is configured) on loopback, with
//! every local candidate refused, one answering, and one that accepts the
//! connection but never answers (the bound: `PROBE_BUDGET`).
//! Run with `cargo run --release --example bench_discovery`.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use passepartout::llm::discovery::{candidates, probe, PROBE_BUDGET};

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A thread answering `GET /v1/models` with two models, forever.
fn answering_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            let body = r#"{"object":"list","data":[{"id":"nomic-embed-text"},{"id":"qwen3"}]}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn hosts(ollama: u16, llama: u16, lmstudio: u16, vllm: u16) -> String {
    format!(
        "ollama=http://127.0.0.1:{ollama}/v1,llama.cpp=http://127.0.0.1:{llama}/v1,\
         lmstudio=http://127.0.0.1:{lmstudio}/v1,vllm=http://127.0.0.1:{vllm}/v1,\
         anthropic=,openai=,openrouter=,deepseek="
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let closed = [closed_port(), closed_port(), closed_port(), closed_port()];
    let answering = answering_port();
    // Accepted by the kernel, never read.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("address").port();
    let cases = [
        (
            "all four refused",
            hosts(closed[0], closed[1], closed[2], closed[3]),
        ),
        (
            "llama.cpp answers",
            hosts(closed[0], answering, closed[2], closed[3]),
        ),
        (
            "one silent server",
            hosts(closed[0], closed[1], silent_port, closed[3]),
        ),
    ];
    println!(
        "case                   p50        max        (20 probes each; budget {})",
        ms(PROBE_BUDGET)
    );
    for (name, overrides) in cases {
        let list = candidates(Some(&overrides)).expect("valid overrides");
        let rounds = if name == "one silent server" { 3 } else { 20 };
        let mut times: Vec<Duration> = (0..rounds)
            .map(|_| {
                let started = Instant::now();
                let report = runtime.block_on(probe(&list, None));
                let took = started.elapsed();
                assert_eq!(report.entries.len(), 4);
                took
            })
            .collect();
        times.sort();
        println!(
            "{name:<22} {:<10} {:<10}",
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1])
        );
    }
    drop(silent);
}
