//! An OpenAI-compatible server on 127.0.0.1 whose answer never ends: each
//! request gets an event stream of the same text chunk, written as fast as
//! the client takes it, until the connection closes. For the fault tests
//! (`tests/suite/faults.rs`: answer caps, backpressure) and the soak
//! (`examples/soak.rs`, which includes this file by path).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The running server; it stops when this is dropped.
pub struct EndlessProvider {
    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    /// How many requests reached it.
    pub requests: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for EndlessProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl EndlessProvider {
    /// Start the server: every answer streams chunks whose text is `text`,
    /// `frames_per_write` chunks to a write.
    pub async fn start(text: &str, frames_per_write: usize) -> EndlessProvider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let chunk = json!({
            "id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}],
        });
        let frames: Arc<str> = format!("data: {chunk}\n\n").repeat(frames_per_write).into();
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let server = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let frames = frames.clone();
                tokio::spawn(async move {
                    if !read_request(&mut stream).await {
                        return;
                    }
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                cache-control: no-cache\r\nconnection: close\r\n\r\n";
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    while stream.write_all(frames.as_bytes()).await.is_ok() {}
                });
            }
        });
        EndlessProvider {
            url,
            requests,
            server,
        }
    }
}

/// Read one request's head and body (small); false when the client left
/// first.
async fn read_request(stream: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let Ok(n) = stream.read(&mut buf).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return true;
            }
        }
    }
}
