//! A legacy HTTP+SSE MCP server (MCP 2024-11-05) on 127.0.0.1, for
//! `tests/suite/mcp_sse.rs`: `GET /sse` opens an event stream whose first
//! event is `endpoint` (`/messages?sessionId=N`); each `POST` there is
//! handed to an rmcp server (the [`Echo`] tool) and answered `202
//! Accepted`; the server's messages go out as `message` events.
//!
//! [`SseServer::drop_streams`] ends every open stream, as a server that
//! stops does; [`SseServer::oversized`] makes the next answer that many
//! bytes of padding larger than the tool's text.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::channel::mpsc;
use futures::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::ServiceExt;

use super::mcp_echo::Echo;

#[derive(Default)]
struct Sessions {
    /// Each open session's way into its rmcp server.
    inbound: HashMap<String, mpsc::UnboundedSender<ClientJsonRpcMessage>>,
    /// Each open stream's way out (closed by `drop_streams`).
    outbound: HashMap<String, mpsc::UnboundedSender<String>>,
    next: u64,
}

pub struct Shared {
    sessions: Mutex<Sessions>,
    /// Tool calls that reached the server.
    pub calls: Arc<AtomicUsize>,
    /// Extra bytes added to the next tool answer.
    pad_next: AtomicUsize,
}

pub struct SseServer {
    pub url: String,
    pub shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SseServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SseServer {
    pub async fn start() -> SseServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sse", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            sessions: Mutex::default(),
            calls: Arc::new(AtomicUsize::new(0)),
            pad_next: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/sse", get(open_stream))
            .route("/messages", post(message))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        SseServer { url, shared, task }
    }

    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// End every open event stream.
    pub fn drop_streams(&self) {
        let mut s = self.shared.sessions.lock().unwrap();
        s.outbound.clear();
        s.inbound.clear();
    }

    /// Pad the next tool answer with `bytes` more bytes.
    pub fn oversized(&self, bytes: usize) {
        self.shared.pad_next.store(bytes, Ordering::SeqCst);
    }
}

async fn open_stream(State(s): State<Arc<Shared>>) -> Response {
    let (to_server, from_client) = mpsc::unbounded::<ClientJsonRpcMessage>();
    let (to_stream, stream) = mpsc::unbounded::<String>();
    let (from_server, mut server_out) = mpsc::unbounded::<ServerJsonRpcMessage>();
    let id = {
        let mut sessions = s.sessions.lock().unwrap();
        sessions.next += 1;
        let id = sessions.next.to_string();
        sessions.inbound.insert(id.clone(), to_server);
        sessions.outbound.insert(id.clone(), to_stream.clone());
        id
    };
    to_stream
        .unbounded_send(format!(
            "event: endpoint\ndata: /messages?sessionId={id}\n\n"
        ))
        .unwrap();
    // The server's messages become `message` events on this stream.
    let shared = s.clone();
    let session = id;
    tokio::spawn(async move {
        while let Some(message) = server_out.next().await {
            let mut text = serde_json::to_string(&message).unwrap();
            let pad = shared.pad_next.swap(0, Ordering::SeqCst);
            if pad > 0 && text.contains("\"result\"") {
                let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
                value["result"]["padding"] = serde_json::Value::String("x".repeat(pad));
                text = value.to_string();
            }
            let sender = shared
                .sessions
                .lock()
                .unwrap()
                .outbound
                .get(&session)
                .cloned();
            match sender {
                Some(out)
                    if out
                        .unbounded_send(format!("event: message\ndata: {text}\n\n"))
                        .is_ok() => {}
                _ => break,
            }
        }
    });
    let echo = Echo::new(s.calls.clone());
    tokio::spawn(async move {
        if let Ok(service) = echo.serve((from_server, from_client)).await {
            let _ = service.waiting().await;
        }
    });
    drop(to_stream);
    let body = Body::from_stream(stream.map(Ok::<_, Infallible>));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

async fn message(State(s): State<Arc<Shared>>, uri: Uri, body: String) -> Response {
    let session = reqwest::Url::parse(&format!("http://x/?{}", uri.query().unwrap_or("")))
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "sessionId")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let Ok(message) = serde_json::from_str::<ClientJsonRpcMessage>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON-RPC").into_response();
    };
    let sender = s.sessions.lock().unwrap().inbound.get(&session).cloned();
    match sender {
        Some(tx) if tx.unbounded_send(message).is_ok() => StatusCode::ACCEPTED.into_response(),
        _ => (StatusCode::NOT_FOUND, "no such session").into_response(),
    }
}
