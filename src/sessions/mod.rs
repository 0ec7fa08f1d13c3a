//! Persistent sessions: every session's history as an append-only JSON
//! Lines journal, `<state>/sessions/<id>.jsonl`, one record per event,
//! written as it happens.
//!
//! - **Crash-safe.** Each record is one `write` of one line with `O_APPEND`;
//!   the file is fsync'd at every turn boundary (the prompt's response is
//!   sent only after that). A torn last line (a crash mid-write) is skipped
//!   on read with a warning; so is any other unreadable line, so one bad
//!   record never loses a session.
//! - **Private.** Files are 0600 in a 0700 directory: histories hold
//!   whatever the person and the tools said.
//! - **Off the runtime.** One writer thread owns the files; the async side
//!   only sends it lines (a bounded channel of [`QUEUE_LIMIT`] records).
//! - **Bounded.** Past [`Journal::cap_bytes`] (default [`DEFAULT_CAP_BYTES`])
//!   the journal is rewritten at the next turn boundary as one `snapshot`
//!   record holding the current history and usage totals (atomic rename):
//!   the history the model sees is kept whole, the step-by-step replay of
//!   older turns (tool call cards) is not.
//!
//! - **A total quota.** All journals of a state directory together are held
//!   to [`Quota`] (default 512 MiB and 500 journals, settable under
//!   `[sessions]`): when a session is created past it, the oldest journals
//!   (by last write) are removed until it holds, never one of the newest
//!   [`Quota::keep_newest`] and never one that is open — an open journal is
//!   held with a shared `flock` by the process writing it, so a prune by
//!   another process (`passepartout sessions prune`) sees it too. What was
//!   removed is logged as a warning and handed back by
//!   [`SessionStore::create_noting`] (the daemon tells its client with
//!   `_passepartout/sessions/pruned`); `sessions prune` prints it.
//!
//! Reading a journal ([`read_session`]) rebuilds the model's history
//! (`prompt`, `message`, `compacted`, `snapshot` records) and the replay a
//! client is shown on `session/load` (`prompt`, assistant text, and the
//! `tool_call`/`tool_call_update`/`plan` updates exactly as they were sent).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::{ChatMessage, Role, Usage};
use crate::util::jsonl::Appender;

/// Default size past which a journal is rewritten as a snapshot: 32 MiB.
pub const DEFAULT_CAP_BYTES: u64 = 32 * 1024 * 1024;
pub use crate::util::jsonl::QUEUE_LIMIT;
/// Longest session id accepted (ids become file names).
pub const MAX_ID_LEN: usize = 128;

/// Problems with the session store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session `{0}` not found")]
    NotFound(String),
    #[error(
        "`{0}` is not a valid session id (letters, digits, `-` and `_` only, at most {MAX_ID_LEN})"
    )]
    BadId(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("the session writer has stopped")]
    WriterGone,
}

/// One event of a session, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The first record of every journal.
    Created {
        id: String,
        cwd: PathBuf,
        version: String,
    },
    /// The person's prompt (starts a turn): `text` is what the model got;
    /// `typed`, when different, what the person typed (a slash command
    /// before its expansion), which the replay shows.
    Prompt {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        typed: Option<String>,
        /// The images the person sent with it (base64, as they came).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::llm::Image>,
    },
    /// A message added to the model's history (assistant answers, tool
    /// results, feedback about unreadable calls).
    Message { message: ChatMessage },
    /// An ACP `session/update` as sent (`tool_call`, `tool_call_update`,
    /// `plan`), replayed verbatim by `session/load`.
    Update { update: Value },
    /// One provider request's usage and cost.
    Usage {
        model: String,
        usage: Usage,
        cost: f64,
    },
    /// Older turns were compacted: `history` replaces the history so far.
    Compacted {
        summary: String,
        history: Vec<ChatMessage>,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// A turn ended.
    TurnEnd { stop_reason: String },
    /// The session switched modes (`session/set_mode`).
    Mode { mode: crate::modes::Mode },
    /// The person answered the session's `registries` question (true:
    /// granted), so a resumed session is not asked again.
    Registries { granted: bool },
    /// The journal was rewritten (past its size cap): the whole state.
    Snapshot {
        id: String,
        cwd: PathBuf,
        history: Vec<ChatMessage>,
        usage: Usage,
        cost: f64,
        /// The mode at the time of the snapshot (absent before modes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<crate::modes::Mode>,
        /// The answer to the `registries` question, if the person gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        registries: Option<bool>,
    },
}

/// A stored line: when, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub at: String,
    #[serde(flatten)]
    pub event: Event,
}

/// What a client is shown again on `session/load`, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay {
    User(String),
    Agent(String),
    Thought(String),
    Update(Value),
}

/// A session read back from its journal.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub id: String,
    pub cwd: PathBuf,
    pub created_at: String,
    pub updated_at: String,
    /// The first prompt, shortened: a title for lists.
    pub title: Option<String>,
    pub history: Vec<ChatMessage>,
    pub replay: Vec<Replay>,
    pub usage: Usage,
    pub cost: f64,
    pub turns: u64,
    /// The last mode recorded (`None`: never switched; the default applies).
    pub mode: Option<crate::modes::Mode>,
    /// The last answer to the `registries` question (`None`: not asked).
    pub registries: Option<bool>,
    /// Lines skipped (torn or unreadable): logged, and named in the
    /// `session/load` result.
    pub warnings: Vec<String>,
}

/// A line of `session/list` / `sessions list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub id: String,
    pub cwd: PathBuf,
    pub title: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
}

/// Whether `id` is safe as a file name (no separators, no dots).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A fresh session id: the UTC time, the process id and a counter
/// (`20261123T181500-4242-1`): unique across restarts, sortable by age.
pub fn new_id(counter: u64) -> String {
    let ts = crate::util::time::rfc3339(SystemTime::now());
    let compact: String = ts
        .chars()
        .take(19)
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("{compact}-{}-{counter}", std::process::id())
}

/// The limit on all journals of a state directory together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Past this many bytes in all, the oldest journals are removed.
    pub max_total_bytes: u64,
    /// Past this many journals, the oldest are removed.
    pub max_journals: usize,
    /// The newest journals (by last write) the quota never removes.
    pub keep_newest: usize,
}

impl Quota {
    /// 512 MiB (sixteen journals at their default size cap), 500 journals,
    /// the newest 10 always kept.
    pub const DEFAULT: Quota = Quota {
        max_total_bytes: 512 * 1024 * 1024,
        max_journals: 500,
        keep_newest: 10,
    };

    /// The limits, as a person would set them.
    pub fn describe(&self) -> String {
        format!(
            "[sessions] max_total_bytes = {}, max_journals = {}, keep_newest = {}",
            self.max_total_bytes, self.max_journals, self.keep_newest
        )
    }
}

/// What a prune did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Each journal removed (id, bytes), oldest first.
    pub removed: Vec<(String, u64)>,
    /// Bytes freed.
    pub freed: u64,
    /// Journals left, and their bytes.
    pub kept: usize,
    pub kept_bytes: u64,
    /// Journals past the quota that were kept because they are open.
    pub open_kept: Vec<String>,
}

impl Pruned {
    /// One line for the person: what was freed and what is left.
    pub fn summary(&self, quota: &Quota) -> String {
        let mut line = format!(
            "freed {} in {} journal(s); {} journal(s), {} kept ({})",
            human_bytes(self.freed),
            self.removed.len(),
            self.kept,
            human_bytes(self.kept_bytes),
            quota.describe()
        );
        if !self.open_kept.is_empty() {
            line.push_str(&format!(
                "; still over it: {} open session(s) kept ({})",
                self.open_kept.len(),
                self.open_kept.join(", ")
            ));
        }
        line
    }

    /// What a removal did, for the client and the log.
    pub fn notice(&self, dir: &Path, quota: &Quota) -> crate::protocol::SessionsPruned {
        let names: Vec<String> = self
            .removed
            .iter()
            .map(|(id, len)| format!("{id} ({})", human_bytes(*len)))
            .collect();
        crate::protocol::SessionsPruned {
            writer: "session",
            path: dir.to_path_buf(),
            removed: self
                .removed
                .iter()
                .map(|(id, len)| crate::protocol::PrunedJournal {
                    session_id: id.clone(),
                    bytes: *len,
                })
                .collect(),
            freed: self.freed,
            kept: self.kept,
            kept_bytes: self.kept_bytes,
            open_kept: self.open_kept.clone(),
            message: format!(
                "the session journals in {} passed their quota: removed the oldest: {}; {}",
                dir.display(),
                names.join(", "),
                self.summary(quota)
            ),
        }
    }
}

/// The directory of journals plus the writer thread.
#[derive(Debug)]
pub struct SessionStore {
    dir: PathBuf,
    cap_bytes: u64,
    quota: Quota,
    writer: Appender,
}

impl SessionStore {
    /// Open (creating `dir` with mode 0700); the writer thread starts at
    /// the first record.
    pub fn open(dir: impl Into<PathBuf>, cap_bytes: u64) -> Result<SessionStore, StoreError> {
        let dir = dir.into();
        let io = |source| StoreError::Io {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        let writer = Appender::start("session").map_err(io)?;
        Ok(SessionStore {
            dir,
            cap_bytes,
            quota: Quota::DEFAULT,
            writer,
        })
    }

    /// Hold the journals to `quota` instead of [`Quota::DEFAULT`].
    pub fn with_quota(mut self, quota: Quota) -> SessionStore {
        self.quota = quota;
        self
    }

    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Remove the oldest journals (by last write) until all of them fit the
    /// quota, never one of the newest [`Quota::keep_newest`] and never an
    /// open one (held by a writer's shared `flock`, in this process or
    /// another). Each is removed while this holds it locked exclusively, so
    /// a session being resumed meanwhile is not removed under it.
    pub fn prune(&self) -> Pruned {
        use std::os::unix::fs::MetadataExt;
        let mut journals: Vec<(PathBuf, String, u64, i64)> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| {
                        let path = e.path();
                        let id = path
                            .file_name()?
                            .to_str()?
                            .strip_suffix(".jsonl")?
                            .to_string();
                        let meta = std::fs::symlink_metadata(&path).ok()?;
                        meta.is_file().then(|| {
                            (
                                path,
                                id,
                                meta.len(),
                                meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                            )
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Newest first.
        journals.sort_by(|a, b| b.3.cmp(&a.3).then(b.1.cmp(&a.1)));
        let mut total: u64 = journals.iter().map(|j| j.2).sum();
        let mut count = journals.len();
        let mut pruned = Pruned::default();
        let over = |total: u64, count: usize| {
            total > self.quota.max_total_bytes || count > self.quota.max_journals
        };
        for (path, id, len, _) in journals.iter().skip(self.quota.keep_newest).rev() {
            if !over(total, count) {
                break;
            }
            match remove_unless_open(path) {
                Ok(true) => {
                    total -= len;
                    count -= 1;
                    pruned.freed += len;
                    pruned.removed.push((id.clone(), *len));
                }
                Ok(false) => pruned.open_kept.push(id.clone()),
                Err(e) => tracing::warn!("cannot remove the journal {}: {e}", path.display()),
            }
        }
        pruned.kept = count;
        pruned.kept_bytes = total;
        pruned
    }

    /// [`Self::prune`], with a warning naming what was removed; what was
    /// removed, when anything was, for the client.
    fn enforce_quota(&self) -> Option<crate::protocol::SessionsPruned> {
        let pruned = self.prune();
        if pruned.removed.is_empty() {
            return None;
        }
        let notice = pruned.notice(&self.dir, &self.quota);
        tracing::warn!("{}", notice.message);
        Some(notice)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path_of(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::BadId(id.to_string()));
        }
        Ok(self.dir.join(format!("{id}.jsonl")))
    }

    /// Start the journal of a new session (its `created` record).
    pub fn create(
        self: &std::sync::Arc<Self>,
        id: &str,
        cwd: &Path,
    ) -> Result<Journal, StoreError> {
        self.create_noting(id, cwd).map(|(journal, _)| journal)
    }

    /// [`Self::create`], and what the quota removed to make room, when it
    /// removed anything: the daemon tells its client
    /// (`_passepartout/sessions/pruned`), since the person loses sessions.
    pub fn create_noting(
        self: &std::sync::Arc<Self>,
        id: &str,
        cwd: &Path,
    ) -> Result<(Journal, Option<crate::protocol::SessionsPruned>), StoreError> {
        let path = self.path_of(id)?;
        let journal = Journal {
            store: self.clone(),
            lock: std::sync::Arc::new(OpenLock::take(&path, true)),
            path,
            id: id.to_string(),
        };
        journal.append(Event::Created {
            id: id.to_string(),
            cwd: cwd.to_path_buf(),
            version: env!("CARGO_PKG_VERSION").into(),
        });
        // The new journal is open (locked), so it is never the one removed.
        let pruned = self.enforce_quota();
        Ok((journal, pruned))
    }

    /// The journal of an existing session, for appending.
    pub fn reopen(self: &std::sync::Arc<Self>, id: &str) -> Result<Journal, StoreError> {
        let path = self.path_of(id)?;
        if !path.is_file() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(Journal {
            store: self.clone(),
            lock: std::sync::Arc::new(OpenLock::take(&path, false)),
            path,
            id: id.to_string(),
        })
    }

    /// Read a session back.
    pub fn load(&self, id: &str) -> Result<Loaded, StoreError> {
        let path = self.path_of(id)?;
        if !path.is_file() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        read_session(&path)
    }

    /// Every stored session, most recently active first; `cwd` filters.
    pub fn list(&self, cwd: Option<&Path>) -> Vec<Summary> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Summary> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .filter_map(|p| match read_session(&p) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!("skipping {}: {e}", p.display());
                    None
                }
            })
            .filter(|l| cwd.is_none_or(|c| l.cwd == c))
            .map(|l| Summary {
                id: l.id,
                cwd: l.cwd,
                title: l.title,
                created_at: l.created_at,
                updated_at: l.updated_at,
                turns: l.turns,
                input_tokens: l.usage.input_tokens,
                output_tokens: l.usage.output_tokens,
                cost: l.cost,
            })
            .collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
        out
    }

    /// The most recently active session in `cwd`.
    pub fn latest(&self, cwd: &Path) -> Option<Summary> {
        self.list(Some(cwd)).into_iter().next()
    }
}

/// `1.5 MiB`, `730 B`: sizes for the person.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Remove a journal unless a writer holds it open: `Ok(false)` then.
fn remove_unless_open(path: &Path) -> std::io::Result<bool> {
    let file = File::open(path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    // Removed while locked; the lock goes with the descriptor.
    std::fs::remove_file(path)?;
    Ok(true)
}

/// A shared `flock` on an open journal, so the quota never removes it:
/// taken when the journal is created or reopened, taken again on the new
/// file after a snapshot replaces it, released when the last clone of the
/// [`Journal`] is dropped.
#[derive(Debug)]
struct OpenLock {
    file: std::sync::Mutex<Option<File>>,
}

impl OpenLock {
    /// Lock `path` shared (creating it, 0600, when `create`). Failing only
    /// leaves the journal unprotected from the quota: logged.
    fn take(path: &Path, create: bool) -> OpenLock {
        let lock = OpenLock {
            file: std::sync::Mutex::new(None),
        };
        lock.renew(path, create);
        lock
    }

    fn renew(&self, path: &Path, create: bool) {
        use std::os::unix::fs::OpenOptionsExt;
        let taken = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .mode(0o600)
            .open(path)
            .and_then(|f| {
                rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared)
                    .map_err(std::io::Error::from)?;
                Ok(f)
            });
        match taken {
            Ok(f) => {
                if let Ok(mut slot) = self.file.lock() {
                    *slot = Some(f);
                }
            }
            Err(e) => tracing::warn!(
                "cannot lock the open journal {}: {e}; the journal quota could remove it",
                path.display()
            ),
        }
    }
}

/// The append side of one session's journal.
#[derive(Debug, Clone)]
pub struct Journal {
    store: std::sync::Arc<SessionStore>,
    lock: std::sync::Arc<OpenLock>,
    path: PathBuf,
    id: String,
}

impl Journal {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cap_bytes(&self) -> u64 {
        self.store.cap_bytes
    }

    /// Queue one record (written at once by the writer thread, without
    /// fsync). Waits only when [`QUEUE_LIMIT`] records are already queued.
    pub fn append(&self, event: Event) {
        let record = Record {
            at: crate::util::time::rfc3339(SystemTime::now()),
            event,
        };
        let mut line = match serde_json::to_string(&record) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(session = %self.id, "cannot encode a session record: {e}");
                return;
            }
        };
        line.push('\n');
        if self.store.writer.append(&self.path, line, false).is_err() {
            tracing::error!(session = %self.id, "the session writer has stopped; history not saved");
        }
    }

    /// Flush everything queued so far to disk (fsync); the file's size.
    pub async fn sync(&self) -> Result<u64, StoreError> {
        let (done, rx) = tokio::sync::oneshot::channel();
        self.store
            .writer
            .sync(&self.path, answer_with(done))
            .map_err(|_| StoreError::WriterGone)?;
        self.answer(rx).await
    }

    /// Replace the journal with one snapshot record (atomic rename).
    pub async fn snapshot(
        &self,
        cwd: &Path,
        history: &[ChatMessage],
        usage: Usage,
        cost: f64,
        mode: Option<crate::modes::Mode>,
        registries: Option<bool>,
    ) -> Result<u64, StoreError> {
        let record = Record {
            at: crate::util::time::rfc3339(SystemTime::now()),
            event: Event::Snapshot {
                id: self.id.clone(),
                cwd: cwd.to_path_buf(),
                history: history.to_vec(),
                usage,
                cost,
                mode,
                registries,
            },
        };
        let mut text = serde_json::to_string(&record).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        text.push('\n');
        let (done, rx) = tokio::sync::oneshot::channel();
        self.store
            .writer
            .replace(&self.path, text, answer_with(done))
            .map_err(|_| StoreError::WriterGone)?;
        let size = self.answer(rx).await;
        // The lock was on the file the snapshot replaced.
        self.lock.renew(&self.path, false);
        size
    }

    async fn answer(
        &self,
        rx: tokio::sync::oneshot::Receiver<std::io::Result<u64>>,
    ) -> Result<u64, StoreError> {
        match rx.await {
            Ok(Ok(size)) => Ok(size),
            Ok(Err(source)) => Err(StoreError::Io {
                path: self.path.clone(),
                source,
            }),
            Err(_) => Err(StoreError::WriterGone),
        }
    }
}

/// The writer's answer, sent to the waiting async caller.
fn answer_with(
    done: tokio::sync::oneshot::Sender<std::io::Result<u64>>,
) -> crate::util::jsonl::Done {
    Box::new(move |result: std::io::Result<u64>| {
        let _ = done.send(result);
    })
}

/// Characters of the first prompt kept as a session's title.
const TITLE_CHARS: usize = 80;

/// Read a journal: the history, the replay, the totals. Unreadable lines
/// are skipped with a warning (the last one is usually a torn write).
pub fn read_session(path: &Path) -> Result<Loaded, StoreError> {
    let file = File::open(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut loaded = Loaded::default();
    let mut seen_header = false;
    // Lines are split as bytes: one line that is not UTF-8 (a torn write,
    // a bad sector) costs only that line, never the rest of the history.
    for (n, line) in BufReader::new(file).split(b'\n').enumerate() {
        let bytes = match line {
            Ok(b) => b,
            Err(e) => {
                loaded
                    .warnings
                    .push(format!("{}:{}: {e}", path.display(), n + 1));
                break;
            }
        };
        let line = match String::from_utf8(bytes) {
            Ok(l) => l,
            Err(e) => {
                loaded.warnings.push(format!(
                    "{}:{}: unreadable record skipped (not UTF-8: {e})",
                    path.display(),
                    n + 1
                ));
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                loaded.warnings.push(format!(
                    "{}:{}: unreadable record skipped ({e})",
                    path.display(),
                    n + 1
                ));
                continue;
            }
        };
        loaded.updated_at = record.at.clone();
        match record.event {
            Event::Created { id, cwd, .. } => {
                loaded.id = id;
                loaded.cwd = cwd;
                loaded.created_at = record.at;
                seen_header = true;
            }
            Event::Snapshot {
                id,
                cwd,
                history,
                usage,
                cost,
                mode,
                registries,
            } => {
                loaded.id = id;
                loaded.mode = mode.or(loaded.mode);
                loaded.registries = registries.or(loaded.registries);
                loaded.cwd = cwd;
                if loaded.created_at.is_empty() {
                    loaded.created_at = record.at;
                }
                loaded.replay = replay_of(&history);
                loaded.history = history;
                loaded.usage = usage;
                loaded.cost = cost;
                seen_header = true;
            }
            Event::Prompt {
                text,
                typed,
                images,
            } => {
                let shown = typed.unwrap_or_else(|| text.clone());
                if loaded.title.is_none() {
                    let first = shown.lines().next().unwrap_or("");
                    loaded.title = Some(first.chars().take(TITLE_CHARS).collect());
                }
                loaded.replay.push(Replay::User(shown));
                loaded
                    .history
                    .push(ChatMessage::user(text).with_images(images));
            }
            Event::Message { message } => {
                if message.role == Role::Assistant && !message.content.is_empty() {
                    loaded.replay.push(Replay::Agent(message.content.clone()));
                }
                loaded.history.push(message);
            }
            Event::Update { update } => loaded.replay.push(Replay::Update(update)),
            Event::Usage { usage, cost, .. } => {
                loaded.usage.add(&usage);
                loaded.cost += cost;
            }
            Event::Compacted {
                summary, history, ..
            } => {
                loaded
                    .replay
                    .push(Replay::Thought(format!("(context compacted)\n{summary}")));
                loaded.history = history;
            }
            Event::TurnEnd { .. } => loaded.turns += 1,
            Event::Mode { mode } => loaded.mode = Some(mode),
            Event::Registries { granted } => loaded.registries = Some(granted),
        }
    }
    if !seen_header {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            message: "no `created` or `snapshot` record".into(),
        });
    }
    loaded.history = answer_dangling_calls(std::mem::take(&mut loaded.history));
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    Ok(loaded)
}

/// The result given to a call whose daemon stopped before it finished.
pub const INTERRUPTED: &str =
    "interrupted: the daemon stopped before this call finished; it may or may not have run";

/// Give every tool call an answer: a daemon killed between a call and its
/// result leaves a call dangling, which providers reject.
pub fn answer_dangling_calls(history: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(history.len());
    let mut pending: Vec<String> = Vec::new();
    for m in history {
        if m.role == Role::Tool {
            if let Some(id) = &m.tool_call_id {
                pending.retain(|p| p != id);
            }
        } else {
            for id in pending.drain(..) {
                out.push(ChatMessage::tool_result(id, INTERRUPTED, true));
            }
        }
        if m.role == Role::Assistant {
            pending = m.tool_calls.iter().map(|c| c.id.clone()).collect();
        }
        out.push(m);
    }
    for id in pending {
        out.push(ChatMessage::tool_result(id, INTERRUPTED, true));
    }
    out
}

/// The replay of a bare history (after a snapshot): prompts and answers.
fn replay_of(history: &[ChatMessage]) -> Vec<Replay> {
    history
        .iter()
        .filter_map(|m| match m.role {
            Role::User => Some(Replay::User(m.content.clone())),
            Role::Assistant if !m.content.is_empty() => Some(Replay::Agent(m.content.clone())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::sync::Arc;

    fn store(dir: &Path) -> Arc<SessionStore> {
        Arc::new(SessionStore::open(dir.join("sessions"), DEFAULT_CAP_BYTES).unwrap())
    }

    #[tokio::test]
    async fn a_journal_reads_back_into_history_and_replay() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("s1", Path::new("/proj")).unwrap();
        j.append(Event::Prompt {
            text: "hi".into(),
            typed: None,
            images: Vec::new(),
        });
        j.append(Event::Message {
            message: ChatMessage::assistant("hello", vec![]),
        });
        j.append(Event::TurnEnd {
            stop_reason: "end_turn".into(),
        });
        j.sync().await.unwrap();
        let l = store.load("s1").unwrap();
        assert_eq!(l.cwd, Path::new("/proj"));
        assert_eq!(
            l.history,
            vec![
                ChatMessage::user("hi"),
                ChatMessage::assistant("hello", vec![])
            ]
        );
        assert_eq!(
            l.replay,
            vec![Replay::User("hi".into()), Replay::Agent("hello".into())]
        );
        assert_eq!(l.turns, 1);
        assert_eq!(l.title.as_deref(), Some("hi"));
        let mode = std::fs::metadata(j.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(store.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[tokio::test]
    async fn the_last_mode_recorded_is_restored_and_a_snapshot_keeps_it() {
        use crate::modes::Mode;
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("sm", Path::new("/p")).unwrap();
        j.sync().await.unwrap();
        assert_eq!(store.load("sm").unwrap().mode, None);
        j.append(Event::Mode { mode: Mode::Ask });
        j.append(Event::Mode {
            mode: Mode::ReadOnly,
        });
        j.sync().await.unwrap();
        assert_eq!(store.load("sm").unwrap().mode, Some(Mode::ReadOnly));
        let line = std::fs::read_to_string(j.path()).unwrap();
        assert!(
            line.contains(r#""kind":"mode","mode":"read-only""#),
            "{line}"
        );
        j.snapshot(
            Path::new("/p"),
            &[],
            Usage::default(),
            0.0,
            Some(Mode::Ask),
            Some(true),
        )
        .await
        .unwrap();
        assert_eq!(store.load("sm").unwrap().mode, Some(Mode::Ask));
        assert_eq!(store.load("sm").unwrap().registries, Some(true));
    }

    #[tokio::test]
    async fn the_last_registries_answer_is_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("sr", Path::new("/p")).unwrap();
        j.sync().await.unwrap();
        assert_eq!(store.load("sr").unwrap().registries, None);
        j.append(Event::Registries { granted: false });
        j.sync().await.unwrap();
        assert_eq!(store.load("sr").unwrap().registries, Some(false));
        let line = std::fs::read_to_string(j.path()).unwrap();
        assert!(
            line.contains(r#""kind":"registries","granted":false"#),
            "{line}"
        );
    }

    #[tokio::test]
    async fn a_torn_last_line_is_skipped_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("s2", Path::new("/p")).unwrap();
        j.append(Event::Prompt {
            text: "one".into(),
            typed: None,
            images: Vec::new(),
        });
        j.sync().await.unwrap();
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(br#"{"at":"x","kind":"prompt","te"#).unwrap();
        let l = store.load("s2").unwrap();
        assert_eq!(l.history, vec![ChatMessage::user("one")]);
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains(":3:"), "{:?}", l.warnings);
    }

    #[tokio::test]
    async fn a_line_that_is_not_utf8_costs_only_that_line() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("s3", Path::new("/p")).unwrap();
        j.append(Event::Prompt {
            text: "one".into(),
            typed: None,
            images: Vec::new(),
        });
        j.sync().await.unwrap();
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"at\":\"x\",\"kind\":\"prompt\",\"text\":\"\xff\"}\n")
            .unwrap();
        j.append(Event::Prompt {
            text: "two".into(),
            typed: None,
            images: Vec::new(),
        });
        j.sync().await.unwrap();
        let l = store.load("s3").unwrap();
        let two = vec![ChatMessage::user("one"), ChatMessage::user("two")];
        assert_eq!(l.history, two);
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains(":3:"), "{:?}", l.warnings);
    }

    #[tokio::test]
    async fn a_snapshot_replaces_the_journal_and_keeps_the_history() {
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        let j = store.create("s3", Path::new("/p")).unwrap();
        for i in 0..5 {
            j.append(Event::Prompt {
                text: format!("q{i}"),
                typed: None,
                images: Vec::new(),
            });
        }
        let before = j.sync().await.unwrap();
        let history = vec![ChatMessage::user("q4")];
        let after = j
            .snapshot(Path::new("/p"), &history, Usage::default(), 0.5, None, None)
            .await
            .unwrap();
        assert!(after < before);
        j.append(Event::Prompt {
            text: "q5".into(),
            typed: None,
            images: Vec::new(),
        });
        j.sync().await.unwrap();
        let l = store.load("s3").unwrap();
        assert_eq!(
            l.history,
            vec![ChatMessage::user("q4"), ChatMessage::user("q5")]
        );
        assert_eq!(l.cost, 0.5);
    }

    #[test]
    fn calls_left_without_a_result_get_one() {
        let call = |id: &str| crate::llm::ToolCall {
            id: id.into(),
            name: "shell".into(),
            arguments: serde_json::json!({}),
        };
        let h = vec![
            ChatMessage::user("go"),
            ChatMessage::assistant("", vec![call("a"), call("b")]),
            ChatMessage::tool_result("a", "done", false),
            ChatMessage::user("again"),
            ChatMessage::assistant("", vec![call("c")]),
        ];
        let fixed = answer_dangling_calls(h);
        assert_eq!(
            fixed,
            vec![
                ChatMessage::user("go"),
                ChatMessage::assistant("", vec![call("a"), call("b")]),
                ChatMessage::tool_result("a", "done", false),
                ChatMessage::tool_result("b", INTERRUPTED, true),
                ChatMessage::user("again"),
                ChatMessage::assistant("", vec![call("c")]),
                ChatMessage::tool_result("c", INTERRUPTED, true),
            ]
        );
    }

    #[test]
    fn ids_that_could_escape_the_directory_are_refused() {
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(200)] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(valid_id(&new_id(3)));
        let tmp = tempfile::tempdir().unwrap();
        let store = store(tmp.path());
        assert!(matches!(
            store.load("../../etc/passwd"),
            Err(StoreError::BadId(_))
        ));
        assert!(matches!(store.load("nope"), Err(StoreError::NotFound(_))));
    }
}
