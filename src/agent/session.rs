//! A session: a working directory, a conversation history, and at most one
//! turn running at a time (a second prompt waits for the first).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::llm::cascade::Cascade;
use crate::llm::{ChatMessage, Usage};
use std::sync::Arc;

pub struct Session {
    pub id: String,
    pub cwd: PathBuf,
    pub history: tokio::sync::Mutex<Vec<ChatMessage>>,
    /// Cancel tokens of the running turn and of prompts queued behind it,
    /// by turn number: a cancel stops all of them.
    turns: Mutex<HashMap<u64, CancellationToken>>,
    next_turn: AtomicU64,
    usage: Mutex<Usage>,
    provider: Mutex<Option<String>>,
    /// The session's own providers (`_passepartout/session/configure`),
    /// used instead of the daemon's from the next turn on.
    models: Mutex<Option<Arc<Cascade>>>,
}

impl Session {
    pub fn new(id: impl Into<String>, cwd: PathBuf) -> Self {
        Session {
            id: id.into(),
            cwd,
            history: tokio::sync::Mutex::new(Vec::new()),
            turns: Mutex::default(),
            next_turn: AtomicU64::new(1),
            usage: Mutex::new(Usage::default()),
            provider: Mutex::new(None),
            models: Mutex::new(None),
        }
    }

    /// Register a new turn; its number (for [`Session::end_turn`]) and token.
    pub fn begin_turn(&self) -> (u64, CancellationToken) {
        let n = self.next_turn.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        lock(&self.turns).insert(n, token.clone());
        (n, token)
    }

    pub fn end_turn(&self, n: u64) {
        lock(&self.turns).remove(&n);
    }

    /// Cancel the running turn and any queued behind it; false when none.
    pub fn cancel(&self) -> bool {
        let turns = lock(&self.turns);
        for t in turns.values() {
            t.cancel();
        }
        !turns.is_empty()
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

    /// Give this session its own providers for its next turns.
    pub fn set_models(&self, cascade: Cascade) {
        *lock(&self.models) = Some(Arc::new(cascade));
    }

    /// The session's own providers, if it was given some.
    pub fn models(&self) -> Option<Arc<Cascade>> {
        lock(&self.models).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
