//! A session: a working directory, a conversation history, and at most one
//! turn running at a time (a second prompt waits for the first).
//!
//! A session may have a [`Journal`]: then every event of its history is
//! stored as it happens (see [`crate::sessions`]) and the session can be
//! loaded again by a later daemon.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use crate::budget::Spent;
use crate::llm::cascade::Cascade;
use crate::llm::{ChatMessage, Role, Usage};
use crate::sessions::{Event, Journal, Loaded};
use crate::util::sync::lock;

pub struct Session {
    pub id: String,
    pub cwd: PathBuf,
    pub history: tokio::sync::Mutex<Vec<ChatMessage>>,
    /// Cancel tokens of the running turn and of prompts queued behind it,
    /// by turn number: a cancel stops all of them.
    turns: Mutex<HashMap<u64, CancellationToken>>,
    next_turn: AtomicU64,
    usage: Mutex<Usage>,
    spent: Mutex<Spent>,
    provider: Mutex<Option<String>>,
    /// The session's own providers (`_passepartout/session/configure`),
    /// used instead of the daemon's from the next turn on.
    models: Mutex<Option<Arc<Cascade>>>,
    journal: Option<Journal>,
    /// Why the last turn stopped early, beyond its ACP stop reason
    /// (`budget`), for the response's `_meta`.
    stop_detail: Mutex<Option<String>>,
    /// Skills active in an earlier turn (they stay active).
    active_skills: Mutex<std::collections::BTreeSet<String>>,
    /// The session mode, read afresh by every action (a switch takes
    /// effect at the next one).
    mode: Mutex<crate::modes::Mode>,
    /// The ACP tool-call ids shown in this session (a replay included),
    /// the last [`MAX_CALL_IDS`] of them: a provider that reuses an id
    /// (`call_0_shell` each turn) gets a fresh one for the client, so two
    /// calls never share one.
    call_ids: Mutex<CallIds>,
}

/// Most tool-call ids a session remembers. Past it the oldest are
/// forgotten, and from then on every id gets a session-wide sequence
/// number (`ID-sN`), so a forgotten id is never handed out again.
pub const MAX_CALL_IDS: usize = 4096;

/// The ids shown, oldest first, bounded by [`MAX_CALL_IDS`].
#[derive(Default)]
struct CallIds {
    taken: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
    /// Whether an id was forgotten: plain provider ids are no longer safe.
    forgot: bool,
    sequence: u64,
}

impl CallIds {
    fn remember(&mut self, id: String) {
        if self.taken.insert(id.clone()) {
            self.order.push_back(id);
        }
        while self.order.len() > MAX_CALL_IDS {
            if let Some(old) = self.order.pop_front() {
                self.taken.remove(&old);
            }
            self.forgot = true;
        }
    }
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
            spent: Mutex::new(Spent::default()),
            provider: Mutex::new(None),
            models: Mutex::new(None),
            journal: None,
            stop_detail: Mutex::new(None),
            active_skills: Mutex::default(),
            mode: Mutex::default(),
            call_ids: Mutex::default(),
        }
    }

    /// Start in `mode` (the configured default, or the one restored).
    pub fn with_mode(self, mode: crate::modes::Mode) -> Self {
        *lock(&self.mode) = mode;
        self
    }

    pub fn mode(&self) -> crate::modes::Mode {
        *lock(&self.mode)
    }

    /// Switch modes and record the switch in the journal, so that
    /// `session/load` restores it.
    pub fn set_mode(&self, mode: crate::modes::Mode) {
        *lock(&self.mode) = mode;
        self.record(Event::Mode { mode });
    }

    /// Record this session's events in `journal`.
    pub fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// A session read back from its journal, continuing in `cwd`.
    pub fn restored(loaded: Loaded, cwd: PathBuf, journal: Option<Journal>) -> Self {
        let mut s = Session::new(loaded.id, cwd);
        s.history = tokio::sync::Mutex::new(loaded.history);
        s.usage = Mutex::new(loaded.usage);
        s.spent = Mutex::new(Spent::from_usage(&loaded.usage, loaded.cost));
        s.journal = journal;
        // The ids a client saw before stay taken.
        let shown = loaded.replay.iter().filter_map(|r| match r {
            crate::sessions::Replay::Update(u) => u["toolCallId"].as_str().map(str::to_string),
            _ => None,
        });
        let mut ids = CallIds::default();
        for id in shown {
            ids.remember(id);
        }
        s.call_ids = Mutex::new(ids);
        if let Some(mode) = loaded.mode {
            s = s.with_mode(mode);
        }
        // The person's answer to the `registries` question stands for the
        // resumed session too: asked once per session, not per daemon.
        if let Some(granted) = loaded.registries {
            crate::sandbox::registry_proxy::set_session_grant(&s.id, registries_answer(granted));
        }
        s
    }

    /// Record the person's answer to the `registries` question: for the
    /// runs of this daemon, and in the journal for a resumed session.
    pub fn answer_registries(&self, granted: bool) {
        crate::sandbox::registry_proxy::set_session_grant(&self.id, registries_answer(granted));
        self.record(Event::Registries { granted });
    }

    /// The ACP id for a call the provider named `provider_id`: that id
    /// itself the first time, `ID-2`, `ID-3`, ... when it was shown before
    /// in this session; once the session has forgotten ids (over
    /// [`MAX_CALL_IDS`]), `ID-sN` with a sequence number that never repeats.
    pub fn unique_call_id(&self, provider_id: &str) -> String {
        let mut ids = lock(&self.call_ids);
        let id = if ids.forgot {
            loop {
                ids.sequence += 1;
                let candidate = format!("{provider_id}-s{}", ids.sequence);
                if !ids.taken.contains(&candidate) {
                    break candidate;
                }
            }
        } else if !ids.taken.contains(provider_id) {
            provider_id.to_string()
        } else {
            (2u64..)
                .map(|n| format!("{provider_id}-{n}"))
                .find(|c| !ids.taken.contains(c))
                .unwrap_or_else(|| format!("{provider_id}-s0"))
        };
        ids.remember(id.clone());
        id
    }

    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_ref()
    }

    /// Store an event (no-op without a journal).
    pub fn record(&self, event: Event) {
        if let Some(j) = &self.journal {
            j.append(event);
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
        lock(&self.usage).add(&u);
    }

    /// Add one request's usage and cost to the session's totals.
    pub fn add_spent(&self, u: &Usage, cost: f64) {
        self.add_usage(*u);
        lock(&self.spent).add(u, cost);
    }

    pub fn usage(&self) -> Usage {
        *lock(&self.usage)
    }

    /// Tokens and cost spent by this session (across daemons when loaded).
    pub fn spent(&self) -> Spent {
        *lock(&self.spent)
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

    pub fn set_stop_detail(&self, detail: Option<String>) {
        *lock(&self.stop_detail) = detail;
    }

    /// Why the last turn stopped early (`budget`), if it did.
    pub fn stop_detail(&self) -> Option<String> {
        lock(&self.stop_detail).clone()
    }
}

/// Most characters of earlier prompts used to decide which skills are
/// active when a session was loaded (it remembers no active skills yet).
const ACTIVATION_CHARS: usize = 4 * 1024;
/// Most skills a session remembers as active.
const MAX_ACTIVE_SKILLS: usize = 256;

impl Session {
    /// The text skills' triggers are matched against: `prompt`, plus an
    /// `@name` mention of every skill that was active earlier in this
    /// session. A skill that came up once stays active, so its tools stay
    /// offered for the calls already in the history and the prompt prefix
    /// stays stable for caching. (Mentions, not the old prompts: matching
    /// every trigger against a growing text made each turn slower.)
    pub fn activation_text(&self, history: &[ChatMessage], prompt: &str) -> String {
        let active = lock(&self.active_skills);
        if active.is_empty() && !history.is_empty() {
            return earlier_prompts(history, prompt);
        }
        let mut text = prompt.to_string();
        for name in active.iter() {
            text.push_str(" @");
            text.push_str(name);
        }
        text
    }

    /// Remember the skills `toolset` came from (its skill tools and its
    /// prompt sections).
    pub fn remember_active(&self, toolset: &super::Toolset) {
        let mut active = lock(&self.active_skills);
        let from_tools = toolset
            .tools
            .names()
            .filter_map(|n| toolset.tools.get(n))
            .filter_map(|t| match &t.source {
                crate::tools::ToolSource::Skill { skill, .. } => Some(skill.clone()),
                crate::tools::ToolSource::Builtin | crate::tools::ToolSource::Mcp { .. } => None,
            })
            .collect::<Vec<_>>();
        let from_prompt = toolset
            .prompt
            .lines()
            .filter_map(|l| l.strip_prefix("## skill: "))
            .map(|n| n.trim().to_string());
        for name in from_tools.into_iter().chain(from_prompt) {
            if active.len() >= MAX_ACTIVE_SKILLS {
                break;
            }
            active.insert(name);
        }
    }
}

/// The session's recent prompts (bounded) and `prompt`.
fn earlier_prompts(history: &[ChatMessage], prompt: &str) -> String {
    let mut parts: Vec<&str> = vec![prompt];
    let mut used = prompt.len();
    for m in history.iter().rev().filter(|m| m.role == Role::User) {
        if used + m.content.len() > ACTIVATION_CHARS {
            break;
        }
        used += m.content.len();
        parts.push(&m.content);
    }
    parts.reverse();
    parts.join("\n")
}

fn registries_answer(granted: bool) -> crate::sandbox::registry_proxy::SessionGrant {
    if granted {
        crate::sandbox::registry_proxy::SessionGrant::Granted
    } else {
        crate::sandbox::registry_proxy::SessionGrant::Declined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_stay_unique_and_bounded() {
        let s = Session::new("s", PathBuf::from("/tmp"));
        assert_eq!(s.unique_call_id("call_0"), "call_0");
        assert_eq!(s.unique_call_id("call_0"), "call_0-2");
        assert_eq!(s.unique_call_id("call_0"), "call_0-3");
        for i in 3..MAX_CALL_IDS {
            assert_eq!(s.unique_call_id(&format!("c{i}")), format!("c{i}"));
        }
        // One more than the limit: the oldest (`call_0`) is forgotten.
        assert_eq!(s.unique_call_id("last"), "last");
        {
            let ids = lock(&s.call_ids);
            assert_eq!(ids.taken.len(), MAX_CALL_IDS);
            assert_eq!(ids.order.len(), MAX_CALL_IDS);
            assert!(ids.forgot);
            assert!(!ids.taken.contains("call_0"));
        }
        // A forgotten id is not handed out again.
        assert_eq!(s.unique_call_id("call_0"), "call_0-s1");
        let mut shown = std::collections::HashSet::new();
        for _ in 0..1000 {
            assert!(shown.insert(s.unique_call_id("c3")), "an id came twice");
        }
        assert_eq!(lock(&s.call_ids).taken.len(), MAX_CALL_IDS);
    }
}
