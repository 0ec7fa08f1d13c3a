//! The client's file system (ACP `fs/read_text_file`, `fs/write_text_file`):
//! when the editor offers it in `initialize`, the files actuator reads and
//! writes through the editor, so the agent sees unsaved buffer text and its
//! edits land in open buffers (with the editor's undo).
//!
//! The boundary does not move: the files actuator resolves the path first,
//! exactly as for a disk write (beneath the session's working directory
//! with `openat2`, no symbolic link anywhere, the control surface refused
//! without a person's approval), and the client only ever receives the
//! absolute canonical path the kernel resolved. Gates and approval already
//! happened upstream in `execute_action`. The answer is bounded
//! ([`MAX_CLIENT_READ_BYTES`]) and the wait too ([`CLIENT_FS_TIMEOUT`]).
//! Only a client answering *method not found* sends the action back to the
//! disk (the result says so); any other client error is the action's error.
//!
//! ACP leaves saving to the client. The effect stage (checkpoints) and the
//! sandboxed shell see the disk, so after a client write the actuator reads
//! the file back from disk (beneath the working directory again) and, when
//! it does not hold the written text, writes it atomically itself: the disk
//! always ends up holding what the agent wrote, whatever the client did
//! with it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{json, Value};

use crate::protocol::acp;
use crate::rpc::message::codes;
use crate::rpc::Outgoing;

pub use crate::protocol::{FS_READ_TEXT_FILE, FS_WRITE_TEXT_FILE};

/// Longest wait for the client to answer one fs request.
pub const CLIENT_FS_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest text accepted from `fs/read_text_file` (the disk read limit).
pub const MAX_CLIENT_READ_BYTES: usize = 256 * 1024;

/// Why a client fs request gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientFsError {
    /// The client does not implement the method (JSON-RPC -32601): the
    /// only case that falls back to the disk.
    #[error("the editor does not implement {method}")]
    NotImplemented { method: &'static str },
    #[error(
        "the editor did not answer {method} within {} s (client fs timeout)",
        CLIENT_FS_TIMEOUT.as_secs()
    )]
    Timeout { method: &'static str },
    #[error(
        "the editor's answer to {method} is {bytes} bytes, more than the \
         {MAX_CLIENT_READ_BYTES}-byte client read limit; search the file instead"
    )]
    TooLarge { method: &'static str, bytes: usize },
    #[error("the editor refused {method}: {message}")]
    Client {
        method: &'static str,
        message: String,
    },
    #[error("the editor's answer to {method} has no `content` text")]
    Malformed { method: &'static str },
    #[error("cancelled")]
    Cancelled,
}

/// What the client offered in `initialize`.
#[derive(Clone)]
struct Offered {
    out: Outgoing,
    read: bool,
    write: bool,
}

/// The connection's client fs, when the client offers one. Shared by the
/// server (which connects it at `initialize`) and the files actuator.
#[derive(Clone, Default)]
pub struct ClientFsLink(Arc<RwLock<Option<Offered>>>);

impl ClientFsLink {
    /// Record the client's `fs` capabilities (none offered: disconnected).
    pub fn connect(&self, out: Outgoing, caps: &acp::FileSystemCapabilities) {
        let offered = (caps.read_text_file || caps.write_text_file).then(|| Offered {
            out,
            read: caps.read_text_file,
            write: caps.write_text_file,
        });
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = offered;
    }

    pub fn disconnect(&self) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    fn offered(&self) -> Option<Offered> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The connection to read through, when the client reads files.
    pub fn reader(&self) -> Option<Outgoing> {
        self.offered().filter(|o| o.read).map(|o| o.out)
    }

    /// The connection to write through, when the client writes files.
    pub fn writer(&self) -> Option<Outgoing> {
        self.offered().filter(|o| o.write).map(|o| o.out)
    }
}

/// Send one request and wait for its answer, bounded in time.
async fn ask(
    out: &Outgoing,
    method: &'static str,
    params: Value,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Value, ClientFsError> {
    let request = out.request(method, params);
    let answer = tokio::select! {
        _ = cancel.cancelled() => return Err(ClientFsError::Cancelled),
        r = tokio::time::timeout(CLIENT_FS_TIMEOUT, request) => r,
    };
    match answer {
        Err(_) => Err(ClientFsError::Timeout { method }),
        Ok(Err(e)) if e.code == codes::METHOD_NOT_FOUND => {
            Err(ClientFsError::NotImplemented { method })
        }
        Ok(Err(e)) => Err(ClientFsError::Client {
            method,
            message: e.message,
        }),
        Ok(Ok(v)) => Ok(v),
    }
}

/// `fs/read_text_file` of an absolute canonical path: the whole text the
/// client holds (an open buffer's unsaved text, or the file).
pub async fn read(
    out: &Outgoing,
    session_id: &str,
    path: &std::path::Path,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, ClientFsError> {
    let method = FS_READ_TEXT_FILE;
    let answer = ask(
        out,
        method,
        json!({ "sessionId": session_id, "path": path }),
        cancel,
    )
    .await?;
    let content = answer
        .get("content")
        .and_then(Value::as_str)
        .ok_or(ClientFsError::Malformed { method })?;
    if content.len() > MAX_CLIENT_READ_BYTES {
        return Err(ClientFsError::TooLarge {
            method,
            bytes: content.len(),
        });
    }
    Ok(content.to_string())
}

/// `fs/write_text_file` of an absolute canonical path.
pub async fn write(
    out: &Outgoing,
    session_id: &str,
    path: &std::path::Path,
    content: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(), ClientFsError> {
    ask(
        out,
        FS_WRITE_TEXT_FILE,
        json!({ "sessionId": session_id, "path": path, "content": content }),
        cancel,
    )
    .await
    .map(|_| ())
}
