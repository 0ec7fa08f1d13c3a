//! The JSON-RPC connection over a byte stream (stdio in production, an
//! in-memory duplex in tests).
//!
//! This module is the seam around JSON-RPC (and jsonrpsee): what goes up
//! from here is typed params, and what comes back is a typed result or an
//! [`RpcError`]; envelopes, ids, error codes ([`codes`]) and the order of
//! requests are handled here, and nothing above `rpc/` names a jsonrpsee
//! type.
//!
//! One task reads frames and routes them; one task owns the writer. Incoming
//! requests are dispatched through the typed [`Router`], each in its own
//! task, because a handler may await the client (a permission answer) and must
//! not block the reader; a method registered as [`Router::ordered`] takes its
//! place on the reader task first. Notifications go to a plain callback, on
//! the reader task, so `session/cancel` never waits behind output. Requests
//! the daemon sends to the client are correlated by id through a map of
//! pending oneshot senders in [`Outgoing`].
//!
//! Everything is bounded. The outgoing queue is measured in bytes: producers
//! that can wait (the provider stream, request replies) wait while it holds
//! more than [`QUEUE_HIGH_WATER`]; notifications that cannot wait are dropped,
//! with a log line naming the limit, once it holds [`QUEUE_LIMIT`]. At most
//! [`MAX_IN_FLIGHT`] requests run at once; more are refused with an error
//! that names the limit. The writer batches whatever is queued into one
//! write. At end of input the connection stops as soon as running requests
//! have answered and the queue is written (no fixed grace period).

pub mod framing;
pub mod message;
pub mod router;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio_util::codec::{Encoder, FramedRead};

use framing::{Frame, FrameCodec, FramingCell};
pub use message::{codes, RpcError};
use message::{ClientId, Incoming};
pub use router::Router;

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, RpcError>>>>>;

/// Producers that can wait do so while the outgoing queue holds more bytes
/// than this (the client reads slower than the model writes).
pub const QUEUE_HIGH_WATER: usize = 1024 * 1024;
/// Notifications are dropped (and logged) while the queue holds this many
/// bytes: only a client that stopped reading gets here.
pub const QUEUE_LIMIT: usize = 32 * 1024 * 1024;
/// Requests handled at once; more are refused with an error naming it.
pub const MAX_IN_FLIGHT: usize = 1024;
/// The writer hands the output this much at a time, at most.
const WRITE_BATCH_BYTES: usize = 256 * 1024;
/// How long, at end of input, running requests and the queue may take to
/// finish before the connection stops anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How many bytes wait in the outgoing queue, and a wake-up for producers
/// waiting for room.
#[derive(Default)]
struct QueueGauge {
    bytes: AtomicUsize,
    room: Notify,
}

/// The sending side of a connection: cheap to clone, shared by every task
/// that talks to the client.
#[derive(Clone)]
pub struct Outgoing {
    tx: mpsc::UnboundedSender<String>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
    gauge: Arc<QueueGauge>,
    /// Whether the client asked for `_`-prefixed (extension) notifications;
    /// a plain ACP client gets schema-defined ones only.
    extensions: Arc<std::sync::atomic::AtomicBool>,
}

tokio::task_local! {
    /// Notifications a request's handler asked to follow its reply
    /// ([`Outgoing::notify_after_reply`]); set around each handler.
    static AFTER_REPLY: Mutex<Vec<String>>;
}

/// The receiving side of [`Outgoing::channel`], drained by the writer.
pub struct OutgoingQueue {
    rx: mpsc::UnboundedReceiver<String>,
    gauge: Arc<QueueGauge>,
}

impl Outgoing {
    /// A new sender and the receiver the writer task drains.
    pub fn channel() -> (Outgoing, OutgoingQueue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let gauge = Arc::new(QueueGauge::default());
        let out = Outgoing {
            tx,
            pending: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
            gauge: gauge.clone(),
            extensions: Arc::default(),
        };
        (out, OutgoingQueue { rx, gauge })
    }

    /// Queue an already-serialised message (replies: never dropped; their
    /// number is bounded by [`MAX_IN_FLIGHT`]).
    pub fn send_raw(&self, text: String) {
        self.gauge.bytes.fetch_add(text.len(), Ordering::Relaxed);
        // A closed channel means the client is gone; there is no one to tell.
        if let Err(lost) = self.tx.send(text) {
            self.gauge.bytes.fetch_sub(lost.0.len(), Ordering::Relaxed);
        }
    }

    /// Bytes waiting to be written.
    pub fn queued_bytes(&self) -> usize {
        self.gauge.bytes.load(Ordering::Relaxed)
    }

    /// Whether producers that can wait should wait ([`Outgoing::room`]).
    pub fn congested(&self) -> bool {
        self.queued_bytes() >= QUEUE_HIGH_WATER
    }

    /// Wait until the queue is below [`QUEUE_HIGH_WATER`].
    pub async fn room(&self) {
        loop {
            let drained = self.gauge.room.notified();
            if !self.congested() || self.tx.is_closed() {
                return;
            }
            drained.await;
        }
    }

    /// Let `_`-prefixed notifications through (the client opted in).
    pub fn allow_extensions(&self, allow: bool) {
        self.extensions.store(allow, Ordering::SeqCst);
    }

    pub fn notify(&self, method: &str, params: impl Serialize) {
        self.notify_when(method, params, false);
    }

    /// [`Self::notify`], but when called while a request is being handled,
    /// sent right after that request's reply (else at once): a
    /// notification that names what the reply creates (a session's first
    /// update names the session `session/new` returns) must not reach the
    /// client before the reply does.
    pub fn notify_after_reply(&self, method: &str, params: impl Serialize) {
        self.notify_when(method, params, true);
    }

    fn notify_when(&self, method: &str, params: impl Serialize, after_reply: bool) {
        if method.starts_with('_') && !self.extensions.load(Ordering::SeqCst) {
            return;
        }
        if self.queued_bytes() >= QUEUE_LIMIT {
            tracing::warn!(
                method,
                "outgoing queue full (limit {QUEUE_LIMIT} bytes): the client is not reading; notification dropped"
            );
            return;
        }
        let text = match serde_json::to_value(params) {
            Ok(p) => message::notification(method, &p),
            Err(e) => {
                tracing::error!(method, "cannot serialise notification: {e}");
                return;
            }
        };
        let deferred = after_reply
            && AFTER_REPLY
                .try_with(|later| {
                    later
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(text.clone())
                })
                .is_ok();
        if !deferred {
            self.send_raw(text);
        }
    }

    /// Send a request to the client and wait for its answer.
    pub async fn request(&self, method: &str, params: impl Serialize) -> Result<Value, RpcError> {
        let params = serde_json::to_value(params)
            .map_err(|e| RpcError::internal(format!("cannot serialise request: {e}")))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(id.to_string(), tx);
        // A caller that stops waiting (a timeout, a cancel) takes its entry
        // out of the map: an answer that never comes leaves nothing behind.
        let _forget = ForgetPending {
            out: self,
            id: id.to_string(),
        };
        self.send_raw(message::request(id, method, &params));
        rx.await
            .unwrap_or_else(|_| Err(RpcError::internal("connection closed")))
    }

    /// Requests sent to the client whose callers still wait for an answer.
    pub fn waiting(&self) -> usize {
        self.lock_pending().len()
    }

    fn lock_pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Result<Value, RpcError>>>> {
        // A poisoned map only means another task panicked mid-insert; the
        // map itself is still usable.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
            // A late or second answer (a client's reject after a cancel)
            // is the client's business: the log file, never stderr.
            None => tracing::warn!(
                target: crate::logging::CLIENT_CAUSED,
                %id,
                "response to an unknown request id; ignored"
            ),
        }
    }

    /// Fail every request still waiting (the client went away).
    fn fail_all(&self) {
        self.lock_pending().clear();
    }
}

/// Removes a request's pending entry when its caller is done with it.
struct ForgetPending<'a> {
    out: &'a Outgoing,
    id: String,
}

impl Drop for ForgetPending<'_> {
    fn drop(&mut self) {
        self.out.lock_pending().remove(&self.id);
    }
}

/// Callback for incoming notifications.
pub type NotificationHandler = Arc<dyn Fn(&str, Value) + Send + Sync>;

/// What the connection calls besides the method table.
#[derive(Clone)]
pub struct Hooks {
    pub on_notification: NotificationHandler,
    /// Input ended: called once, before waiting for running requests (the
    /// daemon stops its turns here so they answer at once).
    pub on_eof: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Hooks {
    pub fn notifications(on_notification: NotificationHandler) -> Self {
        Hooks {
            on_notification,
            on_eof: None,
        }
    }
}

/// Serve one connection until the reader reaches end of input.
///
/// `outgoing`/`queue` come from [`Outgoing::channel`]; the same `outgoing` is
/// what handlers use to notify or call the client.
pub async fn serve<R, W, S>(
    reader: R,
    writer: W,
    outgoing: Outgoing,
    queue: OutgoingQueue,
    methods: Router<S>,
    hooks: Hooks,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: Send + Sync + 'static,
{
    let framing = FramingCell::default();
    let mut frames = FramedRead::with_capacity(reader, FrameCodec::new(framing.clone()), 64 * 1024);
    let closing = tokio_util::sync::CancellationToken::new();
    let writer_task = tokio::spawn(write_loop(
        writer,
        FrameCodec::new(framing),
        queue,
        closing.clone(),
    ));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));

    while let Some(frame) = frames.next().await {
        let text = match frame {
            Ok(Frame::Message(text)) => text,
            Ok(Frame::Garbage(why)) => {
                tracing::warn!(target: crate::logging::CLIENT_CAUSED, "unreadable input: {why}");
                outgoing.send_raw(message::error_response(
                    &ClientId::null(),
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
            Err(malformed) => outgoing.send_raw(malformed.response()),
            Ok(Incoming::Response { id, result }) => outgoing.complete(&id, result),
            Ok(Incoming::Notification { method, params }) => {
                (hooks.on_notification)(&method, params)
            }
            Ok(Incoming::Request { id, method, params }) => {
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    outgoing.send_raw(message::error_response(
                        &id,
                        codes::INTERNAL_ERROR,
                        &format!(
                            "too many requests in flight (limit {MAX_IN_FLIGHT}); wait for answers"
                        ),
                    ));
                    continue;
                };
                // On the reader task: an ordered method takes its place now.
                let handled = methods.dispatch(&method, params);
                let out = outgoing.clone();
                tokio::spawn(async move {
                    tracing::debug!(%method, "request");
                    let (handled, later) = AFTER_REPLY
                        .scope(Mutex::default(), async {
                            let handled = handled.await;
                            let later = AFTER_REPLY.with(|later| {
                                std::mem::take(
                                    &mut *later
                                        .lock()
                                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                                )
                            });
                            (handled, later)
                        })
                        .await;
                    let reply = match handled {
                        Ok(result) => message::result_response(&id, &result),
                        Err(e) => message::error_object_response(&id, &e),
                    };
                    // A client that does not read makes its requests wait
                    // here (bounded by the in-flight limit).
                    out.room().await;
                    out.send_raw(reply);
                    for text in later {
                        out.send_raw(text);
                    }
                    drop(permit);
                });
            }
        }
    }
    tracing::info!("input closed; shutting down the connection");
    if let Some(on_eof) = &hooks.on_eof {
        on_eof();
    }
    outgoing.fail_all();
    // Running requests answer (their turns were just cancelled), then the
    // queue is written out; both are bounded by the grace period.
    let answered = in_flight.acquire_many(MAX_IN_FLIGHT as u32);
    let _ = tokio::time::timeout(CLOSE_GRACE, answered).await;
    closing.cancel();
    let _ = tokio::time::timeout(CLOSE_GRACE, writer_task).await;
}

/// Own the writer: encode whatever is queued into one buffer and write it
/// with one call. Ends when the queue closes, or, once `closing` fires,
/// after writing what is queued.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut codec: FrameCodec,
    mut queue: OutgoingQueue,
    closing: tokio_util::sync::CancellationToken,
) {
    let mut buf = BytesMut::with_capacity(WRITE_BATCH_BYTES);
    loop {
        let first = tokio::select! {
            biased;
            next = queue.rx.recv() => next,
            _ = closing.cancelled() => queue.rx.try_recv().ok(),
        };
        let Some(first) = first else { break };
        let mut taken = first.len();
        if codec.encode(first, &mut buf).is_err() {
            break;
        }
        while buf.len() < WRITE_BATCH_BYTES {
            match queue.rx.try_recv() {
                Ok(text) => {
                    taken += text.len();
                    if codec.encode(text, &mut buf).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let written = async {
            writer.write_all(&buf).await?;
            writer.flush().await
        }
        .await;
        buf.clear();
        queue.gauge.bytes.fetch_sub(taken, Ordering::Relaxed);
        queue.gauge.room.notify_waiters();
        if let Err(e) = written {
            tracing::error!("writing output failed: {e}");
            break;
        }
    }
    // Nobody writes any more: let waiting producers go.
    queue.rx.close();
    queue.gauge.room.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// A notification a handler defers comes after its reply on the wire;
    /// one it sends plainly comes before; outside a handler both are sent
    /// at once.
    #[tokio::test]
    async fn a_deferred_notification_follows_the_reply() {
        let (out, queue) = Outgoing::channel();
        let mut router = Router::new(Arc::new(out.clone()));
        router.async_method("make", |out: Arc<Outgoing>, _: Option<Value>| async move {
            out.notify_after_reply("made", json!({ "n": 1 }));
            // Give the writer every chance to send it early.
            tokio::time::sleep(Duration::from_millis(20)).await;
            out.notify("now", json!({}));
            Ok(json!("done"))
        });
        let (client, daemon) = tokio::io::duplex(64 * 1024);
        let (daemon_read, daemon_write) = tokio::io::split(daemon);
        let served = tokio::spawn(serve(
            daemon_read,
            daemon_write,
            out.clone(),
            queue,
            router,
            Hooks::notifications(Arc::new(|_, _| {})),
        ));
        let (client_read, mut client_write) = tokio::io::split(client);
        client_write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"make\"}\n")
            .await
            .unwrap();
        let mut lines = BufReader::new(client_read).lines();
        let mut seen = vec![];
        for _ in 0..3 {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
                .await
                .expect("three messages")
                .unwrap()
                .expect("a line");
            let v: Value = serde_json::from_str(&line).unwrap();
            seen.push(
                v["method"]
                    .as_str()
                    .map_or("reply".to_string(), str::to_string),
            );
        }
        assert_eq!(seen, ["now", "reply", "made"]);
        // Outside a handler there is no reply to wait for.
        out.notify_after_reply("outside", json!({}));
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("sent at once")
            .unwrap()
            .unwrap();
        assert!(line.contains("\"outside\""), "{line}");
        served.abort();
    }
}
