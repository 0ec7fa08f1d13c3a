//! Figures for the streaming providers, measured against the fake server on
//! 127.0.0.1: decoding throughput, failover and cancellation latency.
//!
//! Run with `cargo run --release --example bench_providers` (debug builds
//! work too, slower). Every figure is printed; nothing is asserted.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use std::time::{Duration, Instant};

use futures::StreamExt;
use passepartout::llm::{
    build_cascade, ChatMessage, ChatRequest, ProviderConfig, ProviderKind, StreamEvent,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use fake_provider::{openai_text, openai_tool_calls, FakeProvider, Reply};

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::user("bench")],
        tools: Vec::new(),
        max_tokens: None,
        temperature: None,
    }
}

fn openai(name: &str, url: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(name, ProviderKind::OpenAi, url, "bench");
    config.max_retries = 0;
    config
}

/// Streams one reply through a one-provider cascade; returns (events, time).
async fn stream_all(reply: Reply) -> anyhow::Result<(usize, Duration)> {
    let fake = FakeProvider::start(vec![reply]).await;
    let cascade = build_cascade(&[openai("fake", &fake.openai_url())])?;
    let start = Instant::now();
    let answered = cascade.stream(&request(), CancellationToken::new()).await?;
    let mut count = 0;
    let mut events = answered.events;
    while let Some(event) = events.next().await {
        event?;
        count += 1;
    }
    Ok((count, start.elapsed()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Text: 20,000 chunks of one word each, no pacing.
    let words = 20_000;
    let Reply::OpenAi { chunks, .. } = openai_text(&"word ".repeat(words)) else {
        anyhow::bail!("openai_text builds an OpenAI reply");
    };
    let bytes: usize = chunks.iter().map(|c| c.to_string().len() + 8).sum();
    let (count, elapsed) = stream_all(Reply::OpenAi {
        chunks,
        delay_ms: 0,
        done: true,
    })
    .await?;
    println!(
        "text stream: {count} events, {:.1} KiB of SSE in {:.1} ms: {:.0} events/s, {:.1} MiB/s",
        bytes as f64 / 1024.0,
        elapsed.as_secs_f64() * 1e3,
        count as f64 / elapsed.as_secs_f64(),
        bytes as f64 / elapsed.as_secs_f64() / (1024.0 * 1024.0)
    );

    // Tool calls: 200 interleaved calls with 1 KiB of arguments each.
    let payload = "x".repeat(1024);
    let args: Vec<String> = (0..200)
        .map(|i| json!({"index": i, "payload": payload}).to_string())
        .collect();
    let ids: Vec<String> = (0..200).map(|i| format!("call_{i}")).collect();
    let calls: Vec<(&str, &str, &str)> = ids
        .iter()
        .zip(&args)
        .map(|(id, a)| (id.as_str(), "tool", a.as_str()))
        .collect();
    let Reply::OpenAi { chunks, .. } = openai_tool_calls(&calls) else {
        anyhow::bail!("openai_tool_calls builds an OpenAI reply");
    };
    let chunk_count = chunks.len();
    let (count, elapsed) = stream_all(Reply::OpenAi {
        chunks,
        delay_ms: 0,
        done: true,
    })
    .await?;
    println!(
        "tool calls: 200 calls from {chunk_count} chunks ({count} events) in {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );

    // Failover: a refused port, then a live provider; time to first event.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let dead = format!("http://127.0.0.1:{}/v1", listener.local_addr()?.port());
    drop(listener);
    let live = FakeProvider::start(vec![openai_text("hi")]).await;
    let cascade = build_cascade(&[openai("dead", &dead), openai("live", &live.openai_url())])?;
    let start = Instant::now();
    let mut answered = cascade.stream(&request(), CancellationToken::new()).await?;
    let first = answered.events.next().await;
    println!(
        "failover past a refused port to the first event: {:.2} ms ({})",
        start.elapsed().as_secs_f64() * 1e3,
        matches!(first, Some(Ok(StreamEvent::TextDelta(_))))
    );

    // Cancellation of a hanging provider.
    let hang = FakeProvider::start(vec![Reply::Hang {}]).await;
    let cascade = build_cascade(&[openai("hang", &hang.openai_url())])?;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let waiting = tokio::spawn(async move { cascade.stream(&request(), cancel).await.is_err() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    trigger.cancel();
    let cancelled = waiting.await?;
    println!(
        "cancel of a hanging request returned in {:.3} ms (cancelled: {cancelled})",
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
