//! A session: a working directory, a conversation history, and at most one
//! turn running at a time (a second prompt waits for the first).

use std::path::PathBuf;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::llm::{ChatMessage, Usage};

pub struct Session {
    pub id: String,
    pub cwd: PathBuf,
    pub history: tokio::sync::Mutex<Vec<ChatMessage>>,
    /// The running turn's cancel token, if any.
    current: Mutex<Option<CancellationToken>>,
    usage: Mutex<Usage>,
    provider: Mutex<Option<String>>,
}

impl Session {
    pub fn new(id: impl Into<String>, cwd: PathBuf) -> Self {
        Session {
            id: id.into(),
            cwd,
            history: tokio::sync::Mutex::new(Vec::new()),
            current: Mutex::new(None),
            usage: Mutex::new(Usage::default()),
            provider: Mutex::new(None),
        }
    }

    /// Register a new turn and return its token.
    pub fn begin_turn(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *lock(&self.current) = Some(token.clone());
        token
    }

    pub fn end_turn(&self) {
        *lock(&self.current) = None;
    }

    /// Cancel the running turn; false when none is running.
    pub fn cancel(&self) -> bool {
        match lock(&self.current).as_ref() {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }

    pub fn add_usage(&self, u: Usage) {
        let mut total = lock(&self.usage);
        total.input_tokens += u.input_tokens;
        total.output_tokens += u.output_tokens;
    }

    pub fn usage(&self) -> Usage {
        *lock(&self.usage)
    }

    pub fn set_provider(&self, label: String) {
        *lock(&self.provider) = Some(label);
    }

    pub fn provider(&self) -> Option<String> {
        lock(&self.provider).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
