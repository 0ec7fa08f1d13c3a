//! The JSON-RPC connection over a byte stream (stdio in production, an
//! in-memory duplex in tests).
//!
//! One task reads frames and routes them; one task owns the writer. Incoming
//! requests are dispatched through a jsonrpsee [`RpcModule`], each in its own
//! task, because a handler may await the client (a permission answer) and must
//! not block the reader. Notifications go to a plain callback. Requests the
//! daemon sends to the client are correlated by id through a map of pending
//! oneshot senders in [`Outgoing`].

pub mod framing;
pub mod message;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use jsonrpsee::RpcModule;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use framing::{Frame, FrameCodec, FramingCell};
use message::{codes, Incoming, RpcError};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, RpcError>>>>>;

/// The sending side of a connection: cheap to clone, shared by every task
/// that talks to the client.
#[derive(Clone)]
pub struct Outgoing {
    tx: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
}

impl Outgoing {
    /// A new sender and the receiver the writer task drains.
    pub fn channel() -> (Outgoing, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Outgoing {
            tx,
            pending: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        };
        (out, rx)
    }

    /// Queue an already-serialised message.
    pub fn send_raw(&self, text: String) {
        // A closed channel means the client is gone; there is no one to tell.
        let _ = self.tx.send(text);
    }

    pub fn notify(&self, method: &str, params: impl Serialize) {
        match serde_json::to_value(params) {
            Ok(p) => self.send_raw(message::notification(method, &p)),
            Err(e) => tracing::error!(method, "cannot serialise notification: {e}"),
        }
    }

    /// Send a request to the client and wait for its answer.
    pub async fn request(&self, method: &str, params: impl Serialize) -> Result<Value, RpcError> {
        let params = serde_json::to_value(params).map_err(|e| RpcError {
            code: codes::INTERNAL_ERROR,
            message: format!("cannot serialise request: {e}"),
            data: None,
        })?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(id.to_string(), tx);
        self.send_raw(message::request(id, method, &params));
        rx.await.unwrap_or_else(|_| {
            Err(RpcError {
                code: codes::INTERNAL_ERROR,
                message: "connection closed".into(),
                data: None,
            })
        })
    }

    fn lock_pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Result<Value, RpcError>>>> {
        // A poisoned map only means another task panicked mid-insert; the
        // map itself is still usable.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn complete(&self, id: &Value, result: Result<Value, RpcError>) {
        let key = match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match self.lock_pending().remove(&key) {
            Some(tx) => {
                let _ = tx.send(result);
            }
            None => tracing::warn!(%id, "response to an unknown request id; ignored"),
        }
    }

    /// Fail every request still waiting (the client went away).
    fn fail_all(&self) {
        self.lock_pending().clear();
    }
}

/// Callback for incoming notifications.
pub type NotificationHandler = Arc<dyn Fn(&str, Value) + Send + Sync>;

/// Serve one connection until the reader reaches end of input.
///
/// `outgoing`/`rx` come from [`Outgoing::channel`]; the same `outgoing` is
/// what handlers use to notify or call the client.
pub async fn serve<R, W, C>(
    reader: R,
    writer: W,
    outgoing: Outgoing,
    rx: mpsc::UnboundedReceiver<String>,
    methods: RpcModule<C>,
    on_notification: NotificationHandler,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    C: Send + Sync + 'static,
{
    let framing = FramingCell::default();
    let mut frames = FramedRead::new(reader, FrameCodec::new(framing.clone()));
    let writer_task = tokio::spawn(write_loop(
        FramedWrite::new(writer, FrameCodec::new(framing)),
        rx,
    ));
    let methods = Arc::new(methods);

    while let Some(frame) = frames.next().await {
        let text = match frame {
            Ok(Frame::Message(text)) => text,
            Ok(Frame::Garbage(why)) => {
                tracing::warn!("unreadable input: {why}");
                outgoing.send_raw(message::error_response(
                    &Value::Null,
                    codes::PARSE_ERROR,
                    &format!("parse error: {why}"),
                ));
                continue;
            }
            Err(e) => {
                tracing::error!("reading input failed: {e}");
                break;
            }
        };
        match message::classify(&text) {
            Err(reply) => outgoing.send_raw(reply),
            Ok(Incoming::Response { id, result }) => outgoing.complete(&id, result),
            Ok(Incoming::Notification { method, params }) => on_notification(&method, params),
            Ok(Incoming::Request { method, text, .. }) => {
                let methods = methods.clone();
                let out = outgoing.clone();
                tokio::spawn(async move {
                    tracing::debug!(%method, "request");
                    match methods.raw_json_request(&text, 1).await {
                        Ok((response, _)) => out.send_raw(response.get().to_string()),
                        Err(e) => out.send_raw(message::error_response(
                            &Value::Null,
                            codes::INVALID_REQUEST,
                            &e.to_string(),
                        )),
                    }
                });
            }
        }
    }
    tracing::info!("input closed; shutting down the connection");
    outgoing.fail_all();
    // Give in-flight replies a moment to reach the client, then stop.
    let _ = tokio::time::timeout(Duration::from_millis(200), writer_task).await;
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: FramedWrite<W, FrameCodec>,
    mut rx: mpsc::UnboundedReceiver<String>,
) {
    while let Some(text) = rx.recv().await {
        if let Err(e) = sink.send(text).await {
            tracing::error!("writing output failed: {e}");
            break;
        }
    }
}
