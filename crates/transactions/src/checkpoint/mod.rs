//! Checkpoints: every action that can change the project is observed, not
//! guessed. Before it runs the working tree is recorded in a shadow git
//! store ([`store`]); after it, the exact effect is read ([`effect`]) and
//! judged ([`gate`]). A held effect is rolled back at once and applied only
//! when a person approves it; any applied effect can be undone.
//!
//! Records live in `<state>/checkpoints/<hash of cwd>/records/<id>.json`, ids
//! are `c1`, `c2`, … from one counter per state directory (never reused).
//! Actions on one working directory
//! are serialised ([`lock`]) so that an effect is attributed to the one
//! action that made it.

pub mod beneath;
pub mod changeset;
pub mod effect;
pub mod intent;
pub mod left;
pub mod notify;
pub mod refs;
pub mod scan;
pub mod store;
pub mod txn;
pub mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

pub use effect::{ChangeKind, FileChange, ObservedEffect};
pub use store::{Store, StoreError};

/// The `[checkpoints]` table of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Observe actions at all. Off: no checkpoints, no effect gates, no undo.
    pub enabled: bool,
    /// Untracked files larger than this are not recorded (and reported).
    pub untracked_cap_bytes: u64,
    /// Ask when one action deletes more files than this — an effect
    /// observed after the fact (a long-running tool, `observe`); a
    /// contained action's deletions are undoable and asked only past
    /// `max_store_bytes`.
    pub max_deleted_files: usize,
    /// Ask when one action removes more bytes than this (observed after
    /// the fact, as `max_deleted_files`).
    pub max_removed_bytes: u64,
    /// At most this many `diff` items per tool call.
    pub max_diff_files: usize,
    /// Files larger than this are summarised, not diffed; also the cap on
    /// the diff shown in a flight plan.
    pub max_diff_bytes: u64,
    /// Globs (gitignore syntax) of ignored files that are recorded anyway
    /// (under `untracked_cap_bytes`); modifying or deleting one is an
    /// effect the gates ask about.
    pub precious: Vec<String>,
    /// The store keeps at most this many records per working directory
    /// (held ones are never pruned) …
    pub keep_records: usize,
    /// … and none older than this many days.
    pub keep_days: u64,
    /// Prune (and `git gc` the store) after every this many checkpoints,
    /// in the background.
    pub prune_every: u64,
    /// The checkpoint stores of one state directory together (every
    /// project's objects, records and held upper layers) stay under this
    /// many bytes: past it, a new checkpoint evicts the oldest records of
    /// its project (never a held one, never the newest `keep_undo_steps`)
    /// and drops the objects only they needed. 0: no quota.
    pub max_store_bytes: u64,
    /// The newest this many checkpoints of a project are never evicted to
    /// meet `max_store_bytes`, even when the store stays over it.
    pub keep_undo_steps: usize,
    /// Let the kernel (inotify) say which directories changed, so that a
    /// snapshot reads only those. Off: every snapshot walks the whole tree
    /// (for file systems whose changes inotify does not see, e.g. a
    /// network mount written from another machine).
    pub watch: bool,
    /// How a sandboxed command's effect is taken: into an overlay, judged
    /// before it reaches the project (the default), or observed after the
    /// fact (see `docs/transactions.md`).
    pub transactions: TransactionMode,
    /// The apparent size of the sparse files one action may leave in the
    /// project (the sandbox's `disk_write` default): holes take no disk
    /// while the command runs, so the sandbox's own limit, which measures
    /// free space, does not see them. Past it the rest are not applied,
    /// and the result says so. 0: no limit.
    pub max_sparse_bytes: u64,
}

/// `[checkpoints] transactions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransactionMode {
    /// Every sandboxed command runs into an overlay; where overlays are
    /// unavailable, commands are refused with the reason and the fix.
    #[default]
    Overlay,
    /// Into an overlay where possible, else observed (the effect is the
    /// difference of two snapshots; whatever else changes meanwhile is
    /// counted as the action's).
    OverlayOrObserve,
    /// Always observed, never an overlay.
    Observe,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            enabled: true,
            untracked_cap_bytes: 10 * 1024 * 1024,
            max_deleted_files: 20,
            max_removed_bytes: 1024 * 1024,
            max_diff_files: 20,
            max_diff_bytes: 64 * 1024,
            precious: [
                ".env",
                ".env.*",
                ".envrc",
                "*.pem",
                "*.key",
                "id_rsa*",
                "id_ed25519*",
                "id_ecdsa*",
                "*.sqlite",
                "*.sqlite3",
                "*.db",
            ]
            .map(String::from)
            .to_vec(),
            keep_records: 200,
            keep_days: 30,
            prune_every: 100,
            max_store_bytes: 1024 * 1024 * 1024,
            keep_undo_steps: 20,
            watch: true,
            transactions: TransactionMode::Overlay,
            max_sparse_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// Errors of the checkpoint layer.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no checkpoint `{0}` for this working directory")]
    Unknown(String),
    #[error("no checkpoints for this working directory")]
    Empty,
    /// `undo` without an id from a session with nothing of its own to
    /// undo: never a silent fallback onto another session's change.
    #[error(
        "this session has no change to undo in this working directory; the newest change here is {newest} ({tool}) by session {session}: undo it by its id if you mean it"
    )]
    NotThisSession {
        newest: String,
        tool: String,
        session: String,
    },
    /// The newest actions changed nothing and nothing older is left to
    /// undo: said, naming them.
    #[error("{0}, and no older change is left to undo")]
    NothingToUndo(String),
    #[error("this session has no turn left to undo in this working directory")]
    NoSessionTurn,
    #[error("turn `{0}` has no applied checkpoints in this working directory")]
    NoTurn(String),
    #[error("checkpoint {id} is {status}; only {wanted} checkpoints can be {verb}")]
    WrongStatus {
        id: String,
        status: String,
        wanted: String,
        verb: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad checkpoint record {path}: {message}")]
    Record { path: PathBuf, message: String },
}

/// What became of a checkpointed change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointStatus {
    /// The change is in the working tree.
    Applied,
    /// The effect gates held it: rolled back, waiting for a person.
    Held,
    /// A person rejected the held change; it stays rolled back.
    Rejected,
    /// Reverted by an undo (recorded as its own checkpoint).
    Undone,
    /// Its apply was interrupted (the daemon died) and recovery reversed
    /// it: never in the project, nothing to undo.
    RolledBack,
    /// The action changed nothing undo could revert (or only git's own
    /// files, such as the index): recorded so that `history` shows every
    /// action and `undo` says so rather than reach past it unnamed.
    Unchanged,
}

impl CheckpointStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            CheckpointStatus::Applied => "applied",
            CheckpointStatus::Held => "held",
            CheckpointStatus::Rejected => "rejected",
            CheckpointStatus::Undone => "undone",
            CheckpointStatus::RolledBack => "rolled_back",
            CheckpointStatus::Unchanged => "unchanged",
        }
    }
}

/// One observed change of the working tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: String,
    pub created_at: String,
    pub session_id: String,
    pub tool_call_id: String,
    pub tool: String,
    pub cwd: PathBuf,
    /// Tree before and after the action.
    pub before: String,
    pub after: String,
    pub effect: ObservedEffect,
    pub status: CheckpointStatus,
    /// The effect gates' reasons, when they held it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// The checkpoint this one undid (several, comma-separated, for the
    /// undo of a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoes: Option<String>,
    /// The turn the action ran in (None: not run by a live turn — an undo,
    /// or a plan run after its turn was gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// Read from an overlay's upper layer (a transaction): held, it has
    /// touched nothing; `before`/`after` are trees of the changed paths only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changeset: bool,
    /// Paths the action changed that someone else changed too since it
    /// started: not applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<changeset::Conflict>,
    /// Applied without a record (`.git` internals, ignored files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passthrough: Vec<changeset::Passthrough>,
    /// Control-surface paths the action created: never applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Recording this checkpoint took the store over `max_store_bytes`:
    /// what was evicted to stay under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted: Option<Eviction>,
    /// What an undo did beyond its recorded changes (files of ignored
    /// trees removed or put back, folders made again) and what it left,
    /// and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Older checkpoints dropped to keep the store under `max_store_bytes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eviction {
    /// The evicted records, oldest first.
    pub ids: Vec<String>,
    /// Bytes the checkpoint stores of the state directory took before and
    /// after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The quota.
    pub max_store_bytes: u64,
    pub at: String,
}

impl Eviction {
    /// The line shown in a tool result and by `history`.
    pub fn message(&self) -> String {
        let over = if self.bytes_after > self.max_store_bytes {
            " (still over it: the newest undo steps and held changes are never evicted)"
        } else {
            ""
        };
        format!(
            "older checkpoints were evicted to stay under the storage quota of {}: {} record(s), {} -> {} bytes{over}",
            self.max_store_bytes,
            self.ids.len(),
            self.bytes_before,
            self.bytes_after,
        )
    }
}

/// What `prune` dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pruned {
    /// Records dropped (by age, count or the quota), oldest first.
    pub ids: Vec<String>,
    /// Bytes the checkpoint stores of the state directory took before and
    /// after (records, objects and held upper layers).
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl Pruned {
    pub fn freed(&self) -> u64 {
        self.bytes_before.saturating_sub(self.bytes_after)
    }
}

impl Checkpoint {
    pub fn summary(&self) -> String {
        let ignored: Vec<&changeset::Passthrough> = self.ignored_files().collect();
        let mut summary = if self.status == CheckpointStatus::Unchanged {
            format!("no change (checkpoint {})", self.id)
        } else if self.effect.changes.is_empty() && !ignored.is_empty() {
            format!(
                "wrote or removed {} file(s) in ignored trees, {} bytes written (checkpoint {})",
                ignored.len(),
                ignored.iter().filter_map(|p| p.size).sum::<u64>(),
                self.id
            )
        } else {
            let mut s = self.effect.summary(&self.id);
            if !ignored.is_empty() {
                s.push_str(&format!("; and {} file(s) in ignored trees", ignored.len()));
            }
            s
        };
        for note in &self.notes {
            summary.push_str("; ");
            summary.push_str(note);
        }
        match &self.evicted {
            Some(e) => format!("{summary}; {}", e.message()),
            None => summary,
        }
    }

    /// The files the action wrote or removed in ignored trees (`.venv`,
    /// `node_modules`, build output): outside the effect the gates count,
    /// listed by `history` and undone by `undo`.
    pub fn ignored_files(&self) -> impl Iterator<Item = &changeset::Passthrough> {
        self.passthrough.iter().filter(|p| p.ignored_file())
    }

    /// `(path, expected now, wanted)` to go from `after` back to `before`.
    fn backward(&self) -> Vec<(String, Option<store::Entry>, Option<store::Entry>)> {
        self.effect
            .changes
            .iter()
            .map(|c| (c.path.clone(), c.new.clone(), c.old.clone()))
            .collect()
    }

    fn forward(&self) -> Vec<(String, Option<store::Entry>, Option<store::Entry>)> {
        self.effect
            .changes
            .iter()
            .map(|c| (c.path.clone(), c.old.clone(), c.new.clone()))
            .collect()
    }

    /// The history listing's JSON form.
    pub fn wire(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "createdAt": self.created_at,
            "sessionId": self.session_id,
            "toolCallId": self.tool_call_id,
            "tool": self.tool,
            "status": self.status.as_str(),
            "summary": self.summary(),
            "undoes": self.undoes,
            "turn": self.turn,
            "effect": self.effect.wire(&self.id),
            "ignored": self
                .ignored_files()
                .map(|p| serde_json::json!({
                    "path": p.path,
                    "kind": if p.remove { "deleted" } else if p.existed { "modified" } else { "created" },
                    "size": p.size,
                }))
                .collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

/// The apparent size of a file `p` writes when it has holes (fewer bytes
/// allocated than its length), else None.
fn sparse_size(upper: &Path, p: &changeset::Passthrough) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    if p.remove || p.dir {
        return None;
    }
    let meta = std::fs::symlink_metadata(upper.join(&p.path)).ok()?;
    (meta.is_file() && meta.blocks().saturating_mul(512) < meta.len()).then_some(meta.len())
}

/// The size bound counted for a kept ignored-tree pre-image.
const IGNORED_PRE_IMAGE_MAX_BYTES_U64: u64 = changeset::IGNORED_PRE_IMAGE_MAX_BYTES;

/// Who made a change, for the record.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub session_id: String,
    pub tool_call_id: String,
    pub tool: String,
    /// The turn the action belongs to, when a live turn runs it.
    pub turn: Option<String>,
}

/// A new turn id: `t` and the milliseconds since the epoch, strictly
/// increasing within the process (short enough to type after `undo --turn`).
pub fn new_turn_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut prev = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(prev + 1);
        match LAST.compare_exchange(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return format!("t{next}"),
            Err(p) => prev = p,
        }
    }
}

/// The checkpoints of one working directory.
#[derive(Debug, Clone)]
pub struct Project {
    pub store: Store,
    records: PathBuf,
    cwd: PathBuf,
    /// `<state>/checkpoints/last-id`: the highest id given in any project,
    /// kept outside every store so that deleting a store never lets an id
    /// come back.
    ids: PathBuf,
    /// `<state>/checkpoints`: every project's store, measured for the quota.
    root: PathBuf,
    /// This project's store directory (its marker of the last eviction).
    dir: PathBuf,
    max_store_bytes: u64,
    keep_undo_steps: usize,
    /// `[checkpoints] max_sparse_bytes`.
    max_sparse_bytes: u64,
}

/// Working directories that are never checkpointed: the file system root
/// and the home directory (far too large, and not a project).
pub fn observable(cwd: &Path) -> bool {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    cwd != Path::new("/") && Some(cwd) != home.as_deref() && cwd.is_dir()
}

/// One lock per working directory, held from the snapshot before an action
/// to the snapshot after it (and by undo/apply).
pub fn lock(cwd: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let map = LOCKS.get_or_init(Mutex::default);
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.entry(cwd.to_path_buf()).or_default().clone()
}

impl Project {
    /// The checkpoints of `cwd`, under `<state_dir>/checkpoints`, with
    /// every apply or undo a dead process left unfinished finished or
    /// reversed first ([`intent::recover`]).
    pub fn open(
        state_dir: &Path,
        cwd: &Path,
        cfg: &CheckpointConfig,
    ) -> Result<Self, CheckpointError> {
        let project = Project::open_unrecovered(state_dir, cwd, cfg)?;
        intent::recover(&project);
        Ok(project)
    }

    /// [`Project::open`] without recovery (recovery itself opens it so).
    pub fn open_unrecovered(
        state_dir: &Path,
        cwd: &Path,
        cfg: &CheckpointConfig,
    ) -> Result<Self, CheckpointError> {
        // One store per directory, however it was spelled.
        let canonical = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
        let root = crate::paths::StateDir::new(state_dir).checkpoints();
        let dir = Store::dir_for(&root, &canonical);
        let store = Store::open(&dir, cwd, cfg.untracked_cap_bytes)?
            .with_precious(cfg.precious.clone())
            .with_watch(cfg.watch);
        let records = dir.join("records");
        std::fs::create_dir_all(&records).map_err(|source| CheckpointError::Io {
            path: records.clone(),
            source,
        })?;
        // Say which directory this store belongs to, for a person browsing.
        let _ = std::fs::write(dir.join("worktree"), cwd.as_os_str().as_encoded_bytes());
        Ok(Project {
            store,
            records,
            cwd: cwd.to_path_buf(),
            ids: root.join("last-id"),
            root,
            dir,
            max_store_bytes: cfg.max_store_bytes,
            keep_undo_steps: cfg.keep_undo_steps,
            max_sparse_bytes: cfg.max_sparse_bytes,
        })
    }

    /// [`Project::open`], kept open across actions: a transaction runs
    /// per command, and opening the store each time (its directories
    /// created, the `git init` check, the `worktree` note written) was a
    /// fixed cost of every action. The cached project is used again while
    /// the configuration is the same and its store is still there (one
    /// `stat` each of `records/` and `git/HEAD`: a store deleted meanwhile
    /// is opened, and so created, anew).
    pub fn open_shared(
        state_dir: &Path,
        cwd: &Path,
        cfg: &CheckpointConfig,
    ) -> Result<Self, CheckpointError> {
        type Key = (PathBuf, PathBuf);
        static OPEN: OnceLock<Mutex<HashMap<Key, (CheckpointConfig, Project)>>> = OnceLock::new();
        /// Projects kept open per process at most.
        const MAX_OPEN_PROJECTS: usize = 64;
        let key = (state_dir.to_path_buf(), cwd.to_path_buf());
        let open = OPEN.get_or_init(Mutex::default);
        let cached = {
            let map = open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            map.get(&key)
                .filter(|(c, _)| c == cfg)
                .map(|(_, p)| p.clone())
        };
        if let Some(p) = cached {
            if p.records.is_dir() && p.store.dir().join("git/HEAD").is_file() {
                return Ok(p);
            }
        }
        let p = Project::open(state_dir, cwd, cfg)?;
        let mut map = open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_OPEN_PROJECTS {
            map.clear();
        }
        map.insert(key, (cfg.clone(), p.clone()));
        Ok(p)
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Record a change between two trees; None when nothing changed.
    pub fn record(
        &self,
        origin: &Origin,
        before: &store::Snapshot,
        after: &store::Snapshot,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let mut effect = ObservedEffect::between_snapshots(before, after);
        effect.git_damage = before
            .git_vitals
            .iter()
            .filter(|v| !after.git_vitals.contains(v))
            .cloned()
            .collect();
        effect.skipped = after
            .skipped
            .iter()
            .filter(|p| !before.skipped.contains(p))
            .cloned()
            .collect();
        if effect.is_empty() {
            return Ok(None);
        }
        let mut cp = Checkpoint {
            id: self.next_id()?,
            created_at: crate::util::time::rfc3339(std::time::SystemTime::now()),
            session_id: origin.session_id.clone(),
            tool_call_id: origin.tool_call_id.clone(),
            tool: origin.tool.clone(),
            cwd: self.cwd.clone(),
            before: before.tree.clone(),
            after: after.tree.clone(),
            effect,
            status: CheckpointStatus::Applied,
            reasons: vec![],
            undoes: None,
            turn: origin.turn.clone(),
            changeset: false,
            conflicts: vec![],
            passthrough: vec![],
            dropped: vec![],
            evicted: None,
            notes: vec![],
        };
        self.save(&cp)?;
        self.keep_under_quota(&mut cp, true)?;
        Ok(Some(cp))
    }

    /// Record an action that changed nothing undo could revert, so that
    /// every action has a record (`history` lists it, `undo` names it
    /// instead of reaching past it unsaid). `note`: what it did change
    /// outside the record (git's own files), said in the summary.
    pub fn record_unchanged(
        &self,
        origin: &Origin,
        note: Option<String>,
    ) -> Result<Checkpoint, CheckpointError> {
        let mut cp = self.new_checkpoint(
            origin,
            ObservedEffect::default(),
            CheckpointStatus::Unchanged,
            false,
        )?;
        cp.notes.extend(note);
        self.save(&cp)?;
        Ok(cp)
    }

    /// [`Project::record_unchanged`] for an action that has run: a record
    /// that cannot be written is logged, never turned into the action's
    /// failure (it changed nothing).
    pub fn note_unchanged(&self, origin: &Origin, note: Option<String>) {
        if let Err(e) = self.record_unchanged(origin, note) {
            tracing::warn!(cwd = %self.cwd.display(), "checkpoint: the record of an action that changed nothing was not written: {e}");
        }
    }

    /// Record an effect known change by change (a changeset, a file
    /// tool's one path, a restore): no snapshot, no walk. `before`/`after`
    /// are trees of the changed paths only, so a diff of the two is the
    /// change's patch. `changeset`: not applied yet (an overlay's upper
    /// layer), rather than already in the project.
    pub fn record_effect(
        &self,
        origin: &Origin,
        effect: ObservedEffect,
        status: CheckpointStatus,
        changeset: bool,
    ) -> Result<Checkpoint, CheckpointError> {
        let mut cp = self.new_checkpoint(origin, effect, status, changeset)?;
        self.save(&cp)?;
        self.keep_under_quota(&mut cp, false)?;
        Ok(cp)
    }

    /// A checkpoint for an effect known change by change, its id given
    /// and its partial trees written, but not saved: a transaction's
    /// record is written once, when it is held or applied (see
    /// `docs/transactions.md`, "Crashes").
    pub fn new_checkpoint(
        &self,
        origin: &Origin,
        effect: ObservedEffect,
        status: CheckpointStatus,
        changeset: bool,
    ) -> Result<Checkpoint, CheckpointError> {
        let before = self.partial_tree(effect.changes.iter().map(|c| (&c.path, &c.old)))?;
        let after = self.partial_tree(effect.changes.iter().map(|c| (&c.path, &c.new)))?;
        Ok(Checkpoint {
            id: self.next_id()?,
            created_at: crate::util::time::rfc3339(std::time::SystemTime::now()),
            session_id: origin.session_id.clone(),
            tool_call_id: origin.tool_call_id.clone(),
            tool: origin.tool.clone(),
            cwd: self.cwd.clone(),
            before,
            after,
            effect,
            status,
            reasons: vec![],
            undoes: None,
            turn: origin.turn.clone(),
            changeset,
            conflicts: vec![],
            passthrough: vec![],
            dropped: vec![],
            evicted: None,
            notes: vec![],
        })
    }

    /// The tree object holding just these entries.
    fn partial_tree<'a>(
        &self,
        entries: impl Iterator<Item = (&'a String, &'a Option<store::Entry>)>,
    ) -> Result<String, CheckpointError> {
        let mut files = std::collections::BTreeMap::new();
        for (path, entry) in entries {
            let Some(e) = entry else { continue };
            let Some(oid) = oid_bytes(&e.oid) else {
                continue; // a submodule or directory marker: no blob
            };
            let mode = u32::from_str_radix(&e.mode, 8).unwrap_or(scan::MODE_FILE);
            files.insert(
                path.clone(),
                scan::FileState {
                    mode,
                    perm: e.perm.unwrap_or(0),
                    oid,
                    size: 0,
                    mtime_ns: 0,
                    ctime_ns: 0,
                    ino: 0,
                    dev: 0,
                    precious: false,
                },
            );
        }
        Ok(scan::write_trees(&self.store.objects(), &files)?)
    }

    /// Where a transaction's upper layer waits while its changeset is
    /// judged or held: `<store>/txn/<id>`.
    pub fn txn_dir(&self, id: &str) -> PathBuf {
        self.store.dir().join("txn").join(id)
    }

    /// Apply a changeset: per file, only where the project still holds the
    /// pre-image (a path changed since becomes a conflict, never
    /// overwritten); the rest all or nothing through [`Store::restore`];
    /// then the unrecorded passthrough from the upper layer.
    ///
    /// The record is saved once, here, as applied (a changeset judged and
    /// allowed at once was never saved before); when the restore refuses,
    /// it is saved as it came (held) and the error returned.
    pub fn apply_changeset(&self, cp: &mut Checkpoint) -> Result<(), CheckpointError> {
        let as_recorded = cp.clone();
        let mut kept = Vec::new();
        // The project opened once for the checks, the restore and the
        // passthrough.
        let b = self.store.beneath()?;
        for c in std::mem::take(&mut cp.effect.changes) {
            let now = Store::current_beneath(&b, &c.path);
            let same = match (&now, &c.old) {
                (Ok(None), None) => true,
                // A folder where the action put a file: consistent if the
                // changeset also removes everything in it (the restore
                // checks that, all or nothing).
                (Ok(Some(a)), None) => a.mode == "040000",
                (Ok(Some(a)), Some(b)) => a.same_content(b),
                _ => false,
            };
            if same {
                kept.push(c);
            } else {
                let why = match now {
                    Err(e) => format!("not written: {e}"),
                    Ok(_) => "changed in the project since the action started".into(),
                };
                cp.conflicts.push(changeset::Conflict {
                    path: c.path,
                    why,
                    agent: c.new,
                });
            }
        }
        cp.effect.changes = kept;
        // Written before the first file moves (see `intent`): a record
        // saved as held before is one a person approved.
        let held = self.records.join(format!("{}.json", cp.id)).exists();
        let intent = intent::Intent::new(intent::Direction::Apply, cp, vec![], held)
            .write(self.store.dir())?;
        if let Err(e) = self.store.restore_beneath(&b, &cp.forward()) {
            // The restore put back what it had changed: nothing to recover.
            intent.done();
            *cp = as_recorded;
            self.save(cp)?;
            return Err(e.into());
        }
        let upper = self.txn_dir(&cp.id).join("upper");
        let mut failed = Vec::new();
        if !cp.passthrough.is_empty() {
            let mut sparse_bytes = 0u64;
            for p in &mut cp.passthrough {
                if let Some(apparent) = sparse_size(&upper, p) {
                    sparse_bytes = sparse_bytes.saturating_add(apparent);
                    if self.max_sparse_bytes > 0 && sparse_bytes > self.max_sparse_bytes {
                        failed.push(format!(
                            "{}: a sparse file of {apparent} bytes (apparent size) would pass the \
                             limit of {} bytes of sparse files per action (`[checkpoints] \
                             max_sparse_bytes`)",
                            p.path, self.max_sparse_bytes
                        ));
                        continue;
                    }
                }
                match txn::pass_through(&b, &upper, p) {
                    Ok(written) => p.written = written,
                    Err(e) => failed.push(format!("{}: {e}", p.path)),
                }
            }
        }
        cp.status = CheckpointStatus::Applied;
        if !failed.is_empty() {
            cp.reasons.push(format!(
                "not applied (unrecorded files): {}",
                failed.join("; ")
            ));
        }
        self.save_durably(cp)?;
        intent.done();
        self.keep_under_quota(cp, false)?;
        txn::remove_dir_later(self.txn_dir(&cp.id));
        Ok(())
    }

    /// Ids are never reused: not after pruning, not after the store is
    /// deleted. The highest id given is kept twice: in `records/last-id`
    /// (this project) and in `<state>/checkpoints/last-id` (every project,
    /// outside any store), the latter updated under an exclusive `flock`
    /// because daemons for other directories share it.
    fn next_id(&self) -> Result<String, CheckpointError> {
        let fail = |path: &Path| {
            let path = path.to_path_buf();
            move |source| CheckpointError::Io { path, source }
        };
        let read = |t: &str| t.trim().parse::<u64>().ok();
        // This project's counter: every id is written there after it is
        // given, so the records need listing only when it is missing or
        // damaged (a listing per action grew with the history).
        let counter = self.records.join("last-id");
        let own = open_counter(&counter).map_err(fail(&counter))?;
        let own_text = read_counter(&own).unwrap_or_default();
        let own_len = own_text.len();
        let given = std::str::from_utf8(&own_text).ok().and_then(read);
        let shared = open_counter(&self.ids).map_err(fail(&self.ids))?;
        rustix::fs::flock(&shared, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| fail(&self.ids)(e.into()))?;
        let text = read_counter(&shared).map_err(fail(&self.ids))?;
        let shared_len = text.len();
        let recorded = match given {
            Some(n) => n,
            None => self.ids()?.into_iter().max().unwrap_or(0),
        };
        let n = recorded.max(std::str::from_utf8(&text).ok().and_then(read).unwrap_or(0)) + 1;
        write_counter(&shared, shared_len, n).map_err(fail(&self.ids))?;
        drop(shared); // releases the lock
        write_counter(&own, own_len, n).map_err(fail(&counter))?;
        Ok(format!("c{n}"))
    }

    /// Make this project's id counter (`records/last-id`) when it is
    /// missing, so the first id given writes it in place (a new file is a
    /// new inode, costly on the action's path). Already there: untouched.
    pub fn prepare_counter(&self) {
        let counter = self.records.join("last-id");
        if counter.exists() {
            return;
        }
        let highest = self.ids().ok().and_then(|ids| ids.into_iter().max());
        if let (Ok(file), Some(n)) = (open_counter(&counter), highest) {
            let _ = write_counter(&file, 0, n);
        }
    }

    /// Whether it is time to prune (every `prune_every` checkpoints).
    pub fn due_for_pruning(id: &str, cfg: &CheckpointConfig) -> bool {
        let n: u64 = id.trim_start_matches('c').parse().unwrap_or(0);
        cfg.prune_every > 0 && n.is_multiple_of(cfg.prune_every)
    }

    fn ids(&self) -> Result<Vec<u64>, CheckpointError> {
        let entries = std::fs::read_dir(&self.records).map_err(|source| CheckpointError::Io {
            path: self.records.clone(),
            source,
        })?;
        Ok(entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.strip_prefix('c')?.strip_suffix(".json")?.parse().ok()
            })
            .collect())
    }

    /// [`Project::save`], the record's data flushed before this returns:
    /// the outcome of an intent (which is removed next).
    pub fn save_durably(&self, cp: &Checkpoint) -> Result<(), CheckpointError> {
        self.save(cp)?;
        let path = self.records.join(format!("{}.json", cp.id));
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|source| CheckpointError::Io { path, source })
    }

    pub fn save(&self, cp: &Checkpoint) -> Result<(), CheckpointError> {
        let path = self.records.join(format!("{}.json", cp.id));
        let text = serde_json::to_string_pretty(cp).map_err(|e| CheckpointError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::util::fs::write_atomic(&path, text.as_bytes(), crate::util::fs::Atomic::FAST)
            .map_err(|source| CheckpointError::Io { path, source })
    }

    pub fn load(&self, id: &str) -> Result<Checkpoint, CheckpointError> {
        let valid = id
            .strip_prefix('c')
            .is_some_and(|n| n.parse::<u64>().is_ok());
        if !valid {
            return Err(CheckpointError::Unknown(id.to_string()));
        }
        let path = self.records.join(format!("{id}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CheckpointError::Unknown(id.to_string()))
            }
            Err(source) => return Err(CheckpointError::Io { path, source }),
        };
        serde_json::from_str(&text).map_err(|e| CheckpointError::Record {
            path,
            message: e.to_string(),
        })
    }

    /// Every checkpoint, oldest first.
    pub fn list(&self) -> Result<Vec<Checkpoint>, CheckpointError> {
        let mut ids = self.ids()?;
        ids.sort_unstable();
        ids.into_iter()
            .map(|n| self.load(&format!("c{n}")))
            .collect()
    }

    /// Hold an applied change: put its paths back as they were (refusing if
    /// any changed since the after-snapshot).
    pub fn hold(&self, cp: &mut Checkpoint, reasons: Vec<String>) -> Result<(), CheckpointError> {
        // A changeset has not touched the project: nothing to roll back.
        if !cp.changeset {
            self.store.restore(&cp.backward())?;
        }
        cp.status = CheckpointStatus::Held;
        cp.reasons = reasons;
        self.save(cp)?;
        if cp.changeset {
            // Saved for the first time (see `new_checkpoint`).
            self.keep_under_quota(cp, false)?;
        }
        Ok(())
    }

    /// Apply a held change exactly as recorded (refusing if its paths are
    /// no longer as they were before it).
    pub fn apply(&self, id: &str) -> Result<Checkpoint, CheckpointError> {
        let mut cp = self.load(id)?;
        if cp.status != CheckpointStatus::Held {
            return Err(wrong(&cp, "held", "applied"));
        }
        if cp.changeset {
            self.apply_changeset(&mut cp)?;
            return Ok(cp);
        }
        let intent = intent::Intent::new(intent::Direction::Apply, &cp, vec![], true)
            .write(self.store.dir())?;
        if let Err(e) = self.store.restore(&cp.forward()) {
            intent.done();
            return Err(e.into());
        }
        cp.status = CheckpointStatus::Applied;
        self.save_durably(&cp)?;
        intent.done();
        Ok(cp)
    }

    /// A held change a person rejected: it stays rolled back.
    pub fn reject(&self, id: &str) -> Result<Checkpoint, CheckpointError> {
        let mut cp = self.load(id)?;
        if cp.status == CheckpointStatus::Held {
            cp.status = CheckpointStatus::Rejected;
            self.save(&cp)?;
            txn::remove_dir(&self.txn_dir(&cp.id));
        }
        Ok(cp)
    }

    /// What `undo` with no id reverts: the newest applied record of an
    /// action (never an undo: undoing it would re-apply the change just
    /// undone), of `session` when one is given.
    pub fn last_applied(&self) -> Result<Checkpoint, CheckpointError> {
        self.last_applied_of(None)
    }

    /// [`Project::last_applied`] among the records of `session`.
    pub fn last_applied_of(&self, session: Option<&str>) -> Result<Checkpoint, CheckpointError> {
        self.undo_target(session).map(|(target, _)| target)
    }

    /// [`Project::last_applied_of`], and the records of the newest actions
    /// (newest first) that changed nothing and came after it: undo says
    /// there was nothing to undo for those rather than reach past them
    /// unsaid.
    pub fn undo_target(
        &self,
        session: Option<&str>,
    ) -> Result<(Checkpoint, Vec<Checkpoint>), CheckpointError> {
        let mut unchanged = Vec::new();
        let mut newest = true;
        let records = self.list()?.into_iter().rev();
        for c in records.filter(|c| session.is_none_or(|s| c.session_id == s)) {
            if c.undoes.is_some() {
                newest = false;
                continue;
            }
            match c.status {
                CheckpointStatus::Applied => return Ok((c, unchanged)),
                CheckpointStatus::Unchanged if newest => unchanged.push(c),
                _ => newest = false,
            }
        }
        if unchanged.is_empty() {
            return Err(CheckpointError::Empty);
        }
        Err(CheckpointError::NothingToUndo(nothing_to_undo(&unchanged)))
    }

    /// Bound the store: drop records beyond the newest `keep_records` and
    /// those older than `keep_days` (never a held one: a person may still
    /// approve it), then let git drop the objects no kept record, and not
    /// the stat cache, needs (`git gc --prune`; objects younger than an
    /// hour are kept, so a snapshot running meanwhile loses nothing). Then,
    /// if the stores are still over `max_store_bytes`, evict for the quota
    /// (see [`Project::evict_for_quota`]).
    pub fn prune(&self, cfg: &CheckpointConfig) -> Result<Pruned, CheckpointError> {
        let bytes_before = store_bytes(&self.root);
        let all = self.list()?;
        let cutoff = std::time::SystemTime::now()
            - std::time::Duration::from_secs(cfg.keep_days.saturating_mul(86_400));
        let cutoff = crate::util::time::rfc3339(cutoff);
        // Records of changes count toward `keep_records`, and so, apart,
        // do records of actions that changed nothing (which also go with
        // the changes older than them): reads never push undo steps out.
        let unchanged = |c: &Checkpoint| c.status == CheckpointStatus::Unchanged;
        let changes: Vec<usize> = (0..all.len()).filter(|&i| !unchanged(&all[i])).collect();
        let nothing: Vec<usize> = (0..all.len()).filter(|&i| unchanged(&all[i])).collect();
        let cut_changes = changes.len().saturating_sub(cfg.keep_records);
        let cut_nothing = nothing.len().saturating_sub(cfg.keep_records);
        let first_kept_change = match cut_changes {
            0 => 0,
            n => changes.get(n).copied().unwrap_or(all.len()),
        };
        let over_count = |i: usize, c: &Checkpoint| {
            if unchanged(c) {
                i < first_kept_change || nothing[..cut_nothing].binary_search(&i).is_ok()
            } else {
                changes[..cut_changes].binary_search(&i).is_ok()
            }
        };
        let mut pruned = Vec::new();
        let mut kept = Vec::new();
        for (i, cp) in all.into_iter().enumerate() {
            let old = over_count(i, &cp) || cp.created_at < cutoff;
            if old && cp.status != CheckpointStatus::Held {
                self.remove_record(&cp.id)?;
                pruned.push(cp.id);
            } else {
                kept.push(cp);
            }
        }
        self.store.collect_garbage(&self.roots(&kept), false)?;
        if let Some(e) = self.evict_for_quota()? {
            pruned.extend(e.ids);
        }
        Ok(Pruned {
            ids: pruned,
            bytes_before,
            bytes_after: store_bytes(&self.root),
        })
    }

    fn remove_record(&self, id: &str) -> Result<(), CheckpointError> {
        let path = self.records.join(format!("{id}.json"));
        std::fs::remove_file(&path).map_err(|source| CheckpointError::Io { path, source })
    }

    /// The objects the kept records and the stat cache need.
    fn roots(&self, kept: &[Checkpoint]) -> Vec<String> {
        let mut roots: Vec<String> = kept
            .iter()
            .flat_map(|c| [c.before.clone(), c.after.clone()])
            .collect();
        roots.extend(self.store.snapshot_tree());
        roots
    }

    /// After recording `cp`: if the stores are over the quota, evict, and
    /// say so on `cp` (its tool result and `history` show the line). A
    /// failed eviction does not fail the action that was just recorded: it
    /// is logged, and the next checkpoint tries again.
    ///
    /// `measure`: measure the stores now (after a whole-tree snapshot,
    /// which may have stored the whole tree); else only when they may be
    /// over it ([`Project::may_be_over_quota`]).
    fn keep_under_quota(&self, cp: &mut Checkpoint, measure: bool) -> Result<(), CheckpointError> {
        if !self.may_be_over_quota(cp, measure) {
            return Ok(());
        }
        match self.evict_for_quota() {
            Ok(Some(eviction)) => {
                cp.evicted = Some(eviction);
                self.save(cp)
            }
            Ok(None) => Ok(()),
            Err(e) => {
                tracing::warn!(cwd = %self.cwd.display(), "checkpoint: eviction for the storage quota failed: {e}");
                Ok(())
            }
        }
    }

    /// Whether the stores may have passed `max_store_bytes` with `cp`.
    /// Measuring them walks every object of every project, which cost more
    /// than the action it followed; so the measurement is kept per state
    /// directory, with what was recorded since added to it (the changes'
    /// sizes before and after, an upper bound of their compressed blobs,
    /// plus [`RECORD_OVERHEAD_BYTES`] for the record and trees), and taken
    /// again only when that estimate passes the quota or every
    /// [`REMEASURE_EVERY`] checkpoints (other daemons, pruning and `git gc`
    /// change the stores too).
    fn may_be_over_quota(&self, cp: &Checkpoint, measure: bool) -> bool {
        /// Added to the estimate per checkpoint for its record and trees.
        const RECORD_OVERHEAD_BYTES: u64 = 8 * 1024;
        /// Checkpoints between two measurements at most.
        const REMEASURE_EVERY: u32 = 64;
        if self.max_store_bytes == 0 {
            return false;
        }
        let added = cp
            .effect
            .changes
            .iter()
            .map(|c| c.old_size.unwrap_or(0) + c.new_size.unwrap_or(0))
            .chain(cp.passthrough.iter().filter_map(|p| {
                p.before
                    .as_ref()
                    .map(|_| p.before_size.unwrap_or(IGNORED_PRE_IMAGE_MAX_BYTES_U64))
            }))
            .fold(RECORD_OVERHEAD_BYTES, u64::saturating_add);
        let mut map = measured_stores();
        let known = map.get(&self.root).copied();
        let (estimate, since) = known.unwrap_or((u64::MAX, 0));
        let estimate = estimate.saturating_add(added);
        if !measure && estimate <= self.max_store_bytes {
            if since + 1 >= REMEASURE_EVERY {
                // Due again, and the estimate is under the quota: measured
                // off the action's path (a walk of every store), the
                // estimate kept meanwhile.
                map.insert(self.root.clone(), (estimate, 0));
                drop(map);
                measure_stores_later(&self.root);
            } else {
                map.insert(self.root.clone(), (estimate, since + 1));
            }
            return false;
        }
        drop(map);
        let measured = store_bytes(&self.root);
        measured_stores().insert(self.root.clone(), (measured, 0));
        measured > self.max_store_bytes
    }

    /// Measure the stores for the quota unless that was done in this
    /// process already (the warm-up of a session: the first action then
    /// only adds to the estimate, as every later one does).
    pub fn measure_stores_once(&self) {
        if self.max_store_bytes == 0 || measured_stores().contains_key(&self.root) {
            return;
        }
        let measured = store_bytes(&self.root);
        measured_stores()
            .entry(self.root.clone())
            .or_insert((measured, 0));
    }

    /// When the checkpoint stores of the state directory take more than
    /// `max_store_bytes`: evict this project's oldest records (never a held
    /// one, never the newest `keep_undo_steps`), as few as the estimate
    /// (`git rev-list --disk-usage` of what the rest still need) says
    /// bring the stores under the quota, and drop the objects only they
    /// needed at once (`git gc --prune=now`; callers hold the project's
    /// lock). None: under the quota, or nothing may be evicted.
    pub fn evict_for_quota(&self) -> Result<Option<Eviction>, CheckpointError> {
        let max = self.max_store_bytes;
        let bytes_before = store_bytes(&self.root);
        if max == 0 || bytes_before <= max {
            return Ok(None);
        }
        let all = self.list()?;
        // The newest `keep_undo_steps` records that hold a change: a
        // record of an action that changed nothing is no undo step.
        let protected_from = match self.keep_undo_steps.checked_sub(1) {
            None => all.len(),
            Some(older) => (0..all.len())
                .rev()
                .filter(|&i| all[i].status != CheckpointStatus::Unchanged)
                .nth(older)
                .unwrap_or(0),
        };
        let evictable: Vec<usize> = (0..protected_from)
            .filter(|&i| all[i].status != CheckpointStatus::Held)
            .collect();
        if evictable.is_empty() {
            tracing::warn!(
                cwd = %self.cwd.display(),
                bytes = bytes_before,
                max_store_bytes = max,
                "checkpoint: the store is over its quota, but only the newest undo steps and held changes are left"
            );
            return Ok(None);
        }
        // Everything but this project's objects stays as it is.
        let others = bytes_before.saturating_sub(self.store.objects_bytes());
        let kept_after = |evicted: usize| -> Vec<Checkpoint> {
            let gone: std::collections::HashSet<usize> =
                evictable[..evicted].iter().copied().collect();
            all.iter()
                .enumerate()
                .filter(|(i, _)| !gone.contains(i))
                .map(|(_, c)| c.clone())
                .collect()
        };
        // The fewest evictions whose estimate fits (the estimate falls as
        // more are evicted): a binary search over `1..=evictable.len()`.
        let (mut low, mut high) = (1, evictable.len());
        while low < high {
            let mid = low + (high - low) / 2;
            let roots = self.roots(&kept_after(mid));
            let estimate = others.saturating_add(self.store.disk_usage(&roots)?);
            if estimate <= max {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        tracing::warn!(
            cwd = %self.cwd.display(),
            bytes = bytes_before,
            max_store_bytes = max,
            records = low,
            "checkpoint: the store is over its quota: evicting the oldest checkpoints"
        );
        let mut ids = Vec::new();
        for &i in &evictable[..low] {
            self.remove_record(&all[i].id)?;
            ids.push(all[i].id.clone());
        }
        self.store
            .collect_garbage(&self.roots(&kept_after(low)), true)?;
        let eviction = Eviction {
            ids,
            bytes_before,
            bytes_after: store_bytes(&self.root),
            max_store_bytes: max,
            at: crate::util::time::rfc3339(std::time::SystemTime::now()),
        };
        // For `history`: the last eviction of this project.
        if let Ok(text) = serde_json::to_vec(&eviction) {
            let marker = self.dir.join("last-eviction.json");
            if let Err(e) =
                crate::util::fs::write_atomic(&marker, &text, crate::util::fs::Atomic::FAST)
            {
                tracing::warn!("checkpoint: {}: {e}", marker.display());
            }
        }
        Ok(Some(eviction))
    }

    /// The last eviction for the quota in this project, if any.
    pub fn last_eviction(&self) -> Option<Eviction> {
        let text = std::fs::read(self.dir.join("last-eviction.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// The last turn that changed this directory and is not undone yet
    /// (of `session` when one is given: never another session's turn).
    pub fn last_turn(&self, session: Option<&str>) -> Result<String, CheckpointError> {
        self.list()?
            .into_iter()
            .rev()
            .filter(|c| session.is_none_or(|s| c.session_id == s))
            .filter(|c| c.status == CheckpointStatus::Applied && c.undoes.is_none())
            .find_map(|c| c.turn)
            .ok_or(CheckpointError::Empty)
    }

    /// Revert every applied change of one turn, all or nothing: each path
    /// must still be as the turn left it (its newest change's after-state),
    /// and goes back to how the turn found it (its oldest change's
    /// before-state). Returns the undone checkpoints (newest first) and the
    /// one checkpoint recording the undo (undo it to redo the turn).
    pub fn undo_turn(
        &self,
        turn: &str,
        origin: &Origin,
    ) -> Result<(Vec<Checkpoint>, Option<Checkpoint>), CheckpointError> {
        let mut targets: Vec<Checkpoint> = self
            .list()?
            .into_iter()
            .filter(|c| c.turn.as_deref() == Some(turn) && c.status == CheckpointStatus::Applied)
            .collect();
        if targets.is_empty() {
            return Err(CheckpointError::NoTurn(turn.to_string()));
        }
        targets.reverse(); // newest first
                           // path -> (expected now, wanted): the newest change sets what is
                           // expected, the oldest (seen last) what is wanted.
        let mut paths: Vec<String> = Vec::new();
        let mut plan: HashMap<String, (Option<store::Entry>, Option<store::Entry>)> =
            HashMap::new();
        for cp in &targets {
            for (path, now, wanted) in cp.backward() {
                match plan.get_mut(&path) {
                    Some(slot) => slot.1 = wanted,
                    None => {
                        paths.push(path.clone());
                        plan.insert(path, (now, wanted));
                    }
                }
            }
        }
        paths.sort();
        let changes: Vec<_> = paths
            .into_iter()
            .filter_map(|p| plan.remove(&p).map(|(now, wanted)| (p, now, wanted)))
            .filter(|(_, now, wanted)| match (now, wanted) {
                (Some(a), Some(b)) => !a.same_content(b),
                (a, b) => a.is_some() != b.is_some(),
            })
            .collect();
        let ids: Vec<String> = targets.iter().map(|c| c.id.clone()).collect();
        let undo = self.restore_recorded(origin, &changes, &ids, |p| {
            targets
                .iter()
                .flat_map(|cp| p.undo_passthrough(cp))
                .collect()
        })?;
        for cp in &mut targets {
            cp.status = CheckpointStatus::Undone;
        }
        Ok((targets, undo))
    }

    /// Revert an applied change to its before-state. The undo is itself a
    /// checkpoint (undo it to redo).
    pub fn undo(&self, id: &str, origin: &Origin) -> Result<Checkpoint, CheckpointError> {
        let mut cp = self.load(id)?;
        if cp.status != CheckpointStatus::Applied {
            return Err(wrong(&cp, "applied", "undone"));
        }
        let changes = cp.backward();
        let undone = cp.clone();
        let undo = self.restore_recorded(origin, &changes, std::slice::from_ref(&cp.id), |p| {
            p.undo_passthrough(&undone)
        })?;
        cp.status = CheckpointStatus::Undone;
        match undo {
            Some(undo) => Ok(undo),
            None => Ok(cp),
        }
    }

    /// Restore `changes` as an undo of the records `undoes`, under an
    /// intent (see `intent`): its record is made (its id given) before
    /// the first file moves, saved once `passthrough` (what it reverts
    /// outside the record) has run, and only then are `undoes` marked
    /// undone. Returns the undo's record (None: nothing to record).
    fn restore_recorded(
        &self,
        origin: &Origin,
        changes: &[(String, Option<store::Entry>, Option<store::Entry>)],
        undoes: &[String],
        passthrough: impl FnOnce(&Self) -> Vec<String>,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        let effect = self.restore_effect(changes)?;
        if effect.is_empty() {
            // No recorded file moves: only the best-effort passthrough.
            self.store.restore(changes)?;
            let notes = passthrough(self);
            self.mark_undone(undoes)?;
            return self.record_restore(origin, effect, undoes.join(","), notes);
        }
        let mut undo = self.new_checkpoint(origin, effect, CheckpointStatus::Applied, false)?;
        undo.undoes = Some(undoes.join(","));
        let intent = intent::Intent::new(intent::Direction::Undo, &undo, undoes.to_vec(), false)
            .write(self.store.dir())?;
        if let Err(e) = self.store.restore(changes) {
            intent.done();
            return Err(e.into());
        }
        undo.notes = passthrough(self);
        self.save_durably(&undo)?;
        self.mark_undone(undoes)?;
        intent.done();
        self.keep_under_quota(&mut undo, false)?;
        Ok(Some(undo))
    }

    /// Mark records undone (an undo of them is done).
    fn mark_undone(&self, ids: &[String]) -> Result<(), CheckpointError> {
        for id in ids {
            let mut cp = self.load(id)?;
            cp.status = CheckpointStatus::Undone;
            self.save(&cp)?;
        }
        Ok(())
    }

    /// Record a restore that was just made, as undoing `undoes`.
    fn record_restore(
        &self,
        origin: &Origin,
        effect: ObservedEffect,
        undoes: String,
        notes: Vec<String>,
    ) -> Result<Option<Checkpoint>, CheckpointError> {
        if effect.is_empty() && notes.is_empty() {
            return Ok(None);
        }
        let mut undo = self.new_checkpoint(origin, effect, CheckpointStatus::Applied, false)?;
        undo.undoes = Some(undoes);
        undo.notes = notes;
        self.save(&undo)?;
        self.keep_under_quota(&mut undo, false)?;
        Ok(Some(undo))
    }

    /// The effect of a restore, from its own list of changes (no
    /// snapshot: exactly the paths it writes).
    fn restore_effect(
        &self,
        changes: &[(String, Option<store::Entry>, Option<store::Entry>)],
    ) -> Result<ObservedEffect, CheckpointError> {
        let oids: Vec<&str> = changes
            .iter()
            .flat_map(|(_, a, b)| [a.as_ref(), b.as_ref()])
            .flatten()
            .filter(|e| oid_bytes(&e.oid).is_some())
            .map(|e| e.oid.as_str())
            .collect();
        let sizes = self.store.sizes(&oids)?;
        let size =
            |e: &Option<store::Entry>| e.as_ref().map(|e| sizes.get(&e.oid).copied().unwrap_or(0));
        let effect = ObservedEffect {
            changes: changes
                .iter()
                .filter(|(_, now, wanted)| match (now, wanted) {
                    (Some(a), Some(b)) => !a.same_content(b) || a.perm != b.perm,
                    (a, b) => a.is_some() || b.is_some(),
                })
                .map(|(path, now, wanted)| FileChange {
                    path: path.clone(),
                    kind: match (now, wanted) {
                        (None, _) => ChangeKind::Created,
                        (_, None) => ChangeKind::Deleted,
                        _ => ChangeKind::Modified,
                    },
                    old_size: size(now),
                    new_size: size(wanted),
                    old: now.clone(),
                    new: wanted.clone(),
                })
                .collect(),
            ..Default::default()
        };
        Ok(effect)
    }

    /// Undo what a changeset applied outside its recorded effect: files it
    /// wrote in ignored trees are removed (or, when it overwrote or removed
    /// one whose pre-image was kept, put back) while they still hold what
    /// it wrote; folders it removed are made again (with their permission
    /// bits); folders it made in ignored trees are removed when empty.
    /// Every write resolved beneath the project. Best effort, after the
    /// all-or-nothing restore of the recorded files: what is left, and
    /// why, is said in the returned notes.
    fn undo_passthrough(&self, cp: &Checkpoint) -> Vec<String> {
        let outside_git =
            |p: &&changeset::Passthrough| !(p.path == ".git" || p.path.starts_with(".git/"));
        let mut made: Vec<&changeset::Passthrough> = cp
            .passthrough
            .iter()
            .filter(outside_git)
            .filter(|p| p.dir && p.remove)
            .collect();
        let files: Vec<&changeset::Passthrough> = cp.ignored_files().collect();
        // Folders the action made (in ignored trees or not: `mkdir -p
        // a/b/c` is part of the change) and folders it re-moded.
        let mut dropped_dirs: Vec<&changeset::Passthrough> = cp
            .passthrough
            .iter()
            .filter(outside_git)
            .filter(|p| p.dir && !p.remove && !p.existed)
            .collect();
        let remoded: Vec<&changeset::Passthrough> = cp
            .passthrough
            .iter()
            .filter(outside_git)
            .filter(|p| p.dir && !p.remove && p.existed)
            .collect();
        let mut notes = Vec::new();
        if !cp.effect.refs.is_empty() {
            let (moved, left) = refs::move_back(&self.cwd, &cp.effect.refs);
            if !moved.is_empty() {
                notes.push(format!("moved back: {}", moved.join("; ")));
            }
            if !left.is_empty() {
                notes.push(format!("refs left as they are: {}", left.join(", ")));
            }
        }
        if made.is_empty() && files.is_empty() && dropped_dirs.is_empty() && remoded.is_empty() {
            return notes;
        }
        let b = match self.store.beneath() {
            Ok(b) => b,
            Err(e) => {
                notes.push(format!(
                    "ignored-tree files and removed folders not undone: {e}"
                ));
                return notes;
            }
        };
        let oids: Vec<&str> = files
            .iter()
            .filter_map(|p| p.before.as_ref())
            .map(|e| e.oid.as_str())
            .collect();
        let blobs = if oids.is_empty() {
            Default::default()
        } else {
            self.store.blobs(&oids).unwrap_or_default()
        };
        let put_back = |p: &changeset::Passthrough, e: &store::Entry| -> Result<(), LeftAsIs> {
            let bytes = blobs
                .get(&e.oid)
                .ok_or_else(|| LeftAsIs::MissingPreImage(e.oid.clone()))?;
            let perm = e
                .perm
                .unwrap_or(if e.mode == "100755" { 0o755 } else { 0o644 });
            Ok(b.put(&p.path, bytes, perm, e.mode == "120000")?)
        };
        let (mut removed, mut restored, mut remade) = (0usize, 0usize, 0usize);
        let mut left: Vec<String> = Vec::new();
        // Folders the action removed, parents first, so files can go back in.
        made.sort_by_key(|p| p.path.matches('/').count());
        for p in &made {
            match b.make_dir(&p.path, p.perm.unwrap_or(0o755)) {
                Ok(()) => remade += 1,
                Err(e) => left.push(format!("{} (folder not made again: {e})", p.path)),
            }
        }
        for p in &files {
            let now = self.store.current(&p.path);
            let outcome = if p.remove {
                match (&p.before, now) {
                    (Some(e), Ok(None)) => put_back(p, e).map(|()| restored += 1),
                    (Some(_), Ok(Some(_))) => Err(LeftAsIs::ThereAgain),
                    (None, _) => Err(LeftAsIs::RemovedNotKept),
                    (_, Err(e)) => Err(e.into()),
                }
            } else {
                let ours = match (&now, &p.written) {
                    (Ok(Some(e)), Some(w)) => &e.oid == w,
                    _ => false,
                };
                match (now, ours, &p.before) {
                    (Ok(None), _, _) => Ok(()),
                    (Err(e), _, _) => Err(e.into()),
                    (Ok(Some(_)), false, _) if p.written.is_none() => Err(LeftAsIs::NeverApplied),
                    (Ok(Some(_)), false, _) => Err(LeftAsIs::ChangedSince),
                    (Ok(Some(_)), true, Some(e)) => put_back(p, e).map(|()| restored += 1),
                    (Ok(Some(_)), true, None) if !p.existed => b
                        .remove(&p.path)
                        .map(|()| removed += 1)
                        .map_err(LeftAsIs::from),
                    (Ok(Some(_)), true, None) => Err(LeftAsIs::OverwrittenNotKept),
                }
            };
            if let Err(why) = outcome {
                left.push(format!("{} ({why})", p.path));
            }
        }
        // Folders the action made in ignored trees, deepest first, when
        // empty now (and the emptied parents of what was removed).
        dropped_dirs.sort_by_key(|p| std::cmp::Reverse(p.path.matches('/').count()));
        let mut unmade = 0usize;
        for p in &dropped_dirs {
            if b.remove_empty_dir(&p.path) {
                unmade += 1;
            } else if !p.ignored && b.node(&p.path).ok().flatten().is_some() {
                left.push(format!("{}/ (folder not empty)", p.path));
            }
        }
        let mut remodes = 0usize;
        for p in &remoded {
            if let Some(perm) = p.perm {
                match b.chmod(&p.path, perm) {
                    Ok(()) => remodes += 1,
                    Err(e) => left.push(format!("{}/ (mode not put back: {e})", p.path)),
                }
            }
        }
        if unmade > 0 {
            notes.push(format!("removed {unmade} folder(s) it made"));
        }
        if remodes > 0 {
            notes.push(format!("put back the mode of {remodes} folder(s)"));
        }
        if removed > 0 {
            notes.push(format!(
                "removed {removed} file(s) the action wrote in ignored trees"
            ));
        }
        if restored > 0 {
            notes.push(format!(
                "put back {restored} ignored-tree file(s) it overwrote or removed"
            ));
        }
        if remade > 0 {
            notes.push(format!("made again {remade} folder(s) it removed"));
        }
        if !left.is_empty() {
            let more = left.len().saturating_sub(10);
            left.truncate(10);
            let more = if more > 0 {
                format!(", … {more} more")
            } else {
                String::new()
            };
            notes.push(format!("left as they are: {}{more}", left.join(", ")));
        }
        notes
    }
}

/// Why an undo left a file of an ignored tree as it is (said in its
/// notes: `left as they are: PATH (WHY)`).
#[derive(Debug, thiserror::Error)]
enum LeftAsIs {
    #[error("its pre-image {0} is missing from the store")]
    MissingPreImage(String),
    #[error("something is there again")]
    ThereAgain,
    #[error(
        "removed, and its content was not kept (over {max} bytes, or past the action's total)",
        max = changeset::IGNORED_PRE_IMAGE_MAX_BYTES
    )]
    RemovedNotKept,
    #[error("never applied by this action")]
    NeverApplied,
    #[error("changed since the action wrote it")]
    ChangedSince,
    #[error(
        "overwritten, and its old content was not kept (over {max} bytes, or past the \
         action's total)",
        max = changeset::IGNORED_PRE_IMAGE_MAX_BYTES
    )]
    OverwrittenNotKept,
    #[error(transparent)]
    Beneath(#[from] beneath::BeneathError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The checkpoints of `cwd`, newest first (`limit`: at most that many).
pub fn history(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    limit: Option<usize>,
) -> Result<Vec<Checkpoint>, CheckpointError> {
    let project = Project::open(state_dir, cwd, cfg)?;
    let mut all = project.list()?;
    all.reverse();
    all.truncate(limit.unwrap_or(usize::MAX));
    Ok(all)
}

/// Undo checkpoint `id` of `cwd` (None: the last applied one of
/// `session`, or of the project when no session is given). Returns the
/// checkpoint it undid and the new checkpoint recording the undo.
pub fn undo(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    id: Option<&str>,
    session: Option<&str>,
    origin: &Origin,
) -> Result<(Checkpoint, Checkpoint), CheckpointError> {
    let project = Project::open(state_dir, cwd, cfg)?;
    let mut passed = Vec::new();
    let target = match id {
        Some(id) => project.load(id)?,
        None => match project.undo_target(session).map(|(target, unchanged)| {
            passed = unchanged;
            target
        }) {
            Err(CheckpointError::Empty) if session.is_some() => {
                // Say what another session left, so the person can choose.
                return Err(match project.last_applied() {
                    Ok(newest) => CheckpointError::NotThisSession {
                        newest: newest.id,
                        tool: newest.tool,
                        session: newest.session_id,
                    },
                    Err(e) => e,
                });
            }
            found => found?,
        },
    };
    let mut undo = project.undo(&target.id, origin)?;
    if !passed.is_empty() {
        undo.notes.push(nothing_to_undo(&passed));
        if undo.id != target.id {
            project.save(&undo)?;
        }
    }
    let undone = project.load(&target.id)?;
    // A terminal process exits next: its stat cache must be on disk, or the
    // next process re-hashes the whole tree.
    scan::flush_all();
    Ok((undone, undo))
}

/// What `undo` says of the newer actions it passed over because they
/// changed nothing: `nothing to undo for c14 (shell), which changed
/// nothing`.
fn nothing_to_undo(passed: &[Checkpoint]) -> String {
    const SHOWN: usize = 3;
    let mut named: Vec<String> = passed
        .iter()
        .take(SHOWN)
        .map(|c| format!("{} ({})", c.id, c.tool))
        .collect();
    if passed.len() > SHOWN {
        named.push(format!("{} more", passed.len() - SHOWN));
    }
    format!(
        "nothing to undo for the newer {}, which changed nothing",
        named.join(", ")
    )
}

/// Prune the store of `cwd` now (`passepartout history --prune`).
pub fn prune(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
) -> Result<Pruned, CheckpointError> {
    Project::open(state_dir, cwd, cfg)?.prune(cfg)
}

/// The last eviction for the storage quota in the store of `cwd`.
pub fn last_eviction(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
) -> Result<Option<Eviction>, CheckpointError> {
    Ok(Project::open(state_dir, cwd, cfg)?.last_eviction())
}

/// Bytes of the files under `dir` (links not followed; unreadable entries
/// count as nothing): what the checkpoint stores take on disk.
pub fn store_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// Undo a whole turn of `cwd` (None: the last turn that changed it, of
/// `session` when one is given).
pub fn undo_turn(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    turn: Option<&str>,
    session: Option<&str>,
    origin: &Origin,
) -> Result<(String, Vec<Checkpoint>, Option<Checkpoint>), CheckpointError> {
    let project = Project::open(state_dir, cwd, cfg)?;
    let turn = match turn {
        Some(t) => t.to_string(),
        None => match project.last_turn(session) {
            Err(CheckpointError::Empty) if session.is_some() => {
                return Err(CheckpointError::NoSessionTurn)
            }
            found => found?,
        },
    };
    let (undone, undo) = project.undo_turn(&turn, origin)?;
    scan::flush_all();
    Ok((turn, undone, undo))
}

/// A hex object id as 20 bytes (None: not a sha1 hex, e.g. a directory
/// marker).
/// The stores' size per state directory's `checkpoints/` as last measured
/// plus what was recorded since, and the checkpoints since the measurement.
fn measured_stores() -> std::sync::MutexGuard<'static, HashMap<PathBuf, (u64, u32)>> {
    static MEASURED: OnceLock<Mutex<HashMap<PathBuf, (u64, u32)>>> = OnceLock::new();
    MEASURED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Measure the stores under `root` on a thread of its own (one at a time
/// per process), replacing the estimate when done.
fn measure_stores_later(root: &Path) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static MEASURING: AtomicBool = AtomicBool::new(false);
    if MEASURING.swap(true, Ordering::AcqRel) {
        return;
    }
    let root = root.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("store-measure".into())
        .spawn(move || {
            let measured = store_bytes(&root);
            measured_stores().insert(root, (measured, 0));
            MEASURING.store(false, Ordering::Release);
        });
    if spawned.is_err() {
        MEASURING.store(false, Ordering::Release);
    }
}

/// Digits an id counter is written with: every value has the same width,
/// so a counter is overwritten in place.
const COUNTER_WIDTH: usize = 20;

/// An id counter file, opened to read and overwrite (made when missing).
fn open_counter(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// The whole text of a counter file, read from its start by `pread`: one
/// system call for a counter of [`COUNTER_WIDTH`] digits (reading to the
/// end through the file's position cost four: its size, its position and
/// two reads).
fn read_counter(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut text = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = file.read_at(&mut buf, text.len() as u64)?;
        text.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return Ok(text);
        }
    }
}

/// Write `n` over the counter in `file`, zero-padded to [`COUNTER_WIDTH`]
/// digits at offset 0 (`len_before`: its length as read). Truncating the file and writing it anew (what a
/// counter written at its own length needs) frees and allocates its block,
/// which on ext4 under load costs far more than an overwrite in place. A counter written before (shorter, unpadded)
/// is covered whole by the first padded write; a longer one is cut.
fn write_counter(file: &std::fs::File, len_before: usize, n: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let text = format!("{n:0COUNTER_WIDTH$}");
    file.write_all_at(text.as_bytes(), 0)?;
    if len_before > COUNTER_WIDTH {
        file.set_len(COUNTER_WIDTH as u64)?;
    }
    Ok(())
}

fn oid_bytes(hex: &str) -> Option<[u8; 20]> {
    if hex.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn wrong(cp: &Checkpoint, wanted: &str, verb: &str) -> CheckpointError {
    CheckpointError::WrongStatus {
        id: cp.id.clone(),
        status: cp.status.as_str().into(),
        wanted: wanted.into(),
        verb: verb.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            session_id: "s".into(),
            tool_call_id: "t".into(),
            tool: "shell".into(),
            turn: Some("t1".into()),
        }
    }

    #[test]
    fn hold_apply_undo_and_redo() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::create_dir_all(t.join("src")).unwrap();
        std::fs::write(t.join("src/a.rs"), "a").unwrap();
        std::fs::write(t.join("src/b.rs"), "b").unwrap();
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        let before = p.store.snapshot().unwrap();
        std::fs::remove_dir_all(t.join("src")).unwrap();
        let after = p.store.snapshot().unwrap();
        let mut cp = p.record(&origin(), &before, &after).unwrap().unwrap();
        assert_eq!(cp.id, "c1");
        assert_eq!(
            cp.effect.paths(ChangeKind::Deleted),
            ["src/a.rs", "src/b.rs"]
        );

        p.hold(&mut cp, vec!["too many".into()]).unwrap();
        assert_eq!(std::fs::read_to_string(t.join("src/a.rs")).unwrap(), "a");
        p.apply("c1").unwrap();
        assert!(!t.join("src").exists());
        let undo = p.undo("c1", &origin()).unwrap();
        assert_eq!(undo.id, "c2");
        assert_eq!(undo.undoes.as_deref(), Some("c1"));
        assert_eq!(std::fs::read_to_string(t.join("src/b.rs")).unwrap(), "b");
        // Undoing the undo is a redo.
        p.undo("c2", &origin()).unwrap();
        assert!(!t.join("src/a.rs").exists());
        let err = p.undo("c1", &origin()).unwrap_err().to_string();
        assert!(err.contains("undone"), "{err}");
        assert_eq!(p.list().unwrap().len(), 3);
    }

    #[test]
    fn ids_never_repeat_even_after_the_store_is_deleted() {
        let state = tempfile::tempdir().unwrap();
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cfg = CheckpointConfig::default();
        let p = Project::open(state.path(), one.path(), &cfg).unwrap();
        let a = recorded(&p, || std::fs::write(one.path().join("f"), "1").unwrap());
        assert_eq!(a.id, "c1");
        // The whole store of this directory goes away.
        let store = p.records.parent().unwrap().to_path_buf();
        drop(p);
        // The stat cache is saved by a background thread, which may still
        // be writing into the store: remove until nothing comes back.
        let mut tries = 0;
        while let Err(e) = std::fs::remove_dir_all(&store) {
            tries += 1;
            assert!(tries < 200, "the store cannot be removed: {e}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let p = Project::open(state.path(), one.path(), &cfg).unwrap();
        let b = recorded(&p, || std::fs::write(one.path().join("f"), "2").unwrap());
        assert_eq!(b.id, "c2");
        // Another directory continues the same sequence.
        let q = Project::open(state.path(), two.path(), &cfg).unwrap();
        let c = recorded(&q, || std::fs::write(two.path().join("g"), "1").unwrap());
        assert_eq!(c.id, "c3");
    }

    /// The id counters are overwritten in place at a fixed width (never
    /// truncated: on ext4 that flushed data on the action's path), and a
    /// counter written the old way, at its own length, goes on from its
    /// value.
    #[test]
    fn id_counters_are_overwritten_in_place_and_old_ones_go_on() {
        let state = tempfile::tempdir().unwrap();
        let one = tempfile::tempdir().unwrap();
        let cfg = CheckpointConfig::default();
        let p = Project::open(state.path(), one.path(), &cfg).unwrap();
        std::fs::write(&p.ids, "29").unwrap();
        std::fs::write(p.records.join("last-id"), "7").unwrap();
        let a = recorded(&p, || std::fs::write(one.path().join("f"), "1").unwrap());
        assert_eq!(a.id, "c30");
        let shared = std::fs::read_to_string(&p.ids).unwrap();
        assert_eq!(shared, format!("{:020}", 30));
        assert_eq!(
            std::fs::read_to_string(p.records.join("last-id")).unwrap(),
            shared
        );
        let b = recorded(&p, || std::fs::write(one.path().join("f"), "2").unwrap());
        assert_eq!(b.id, "c31");
        // Something longer written there is damage (read as missing: this
        // project's counter goes on) and is cut to the counter's width.
        std::fs::write(&p.ids, format!("{:020}\ntrailing junk", 40)).unwrap();
        let c = recorded(&p, || std::fs::write(one.path().join("f"), "3").unwrap());
        assert_eq!(c.id, "c32");
        assert_eq!(
            std::fs::read_to_string(&p.ids).unwrap(),
            format!("{:020}", 32)
        );
    }

    #[test]
    fn pruning_keeps_the_newest_records_and_what_they_need() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        let cfg = CheckpointConfig {
            keep_records: 2,
            ..Default::default()
        };
        let p = Project::open(state.path(), t, &cfg).unwrap();
        for i in 0..4 {
            let before = p.store.snapshot().unwrap();
            std::fs::write(t.join("f.txt"), format!("version {i}")).unwrap();
            let after = p.store.snapshot().unwrap();
            p.record(&origin(), &before, &after).unwrap().unwrap();
        }
        assert_eq!(p.prune(&cfg).unwrap().ids, ["c1", "c2"]);
        let left: Vec<String> = p.list().unwrap().into_iter().map(|c| c.id).collect();
        assert_eq!(left, ["c3", "c4"]);
        // The kept records still undo byte for byte (their objects survived
        // the gc), and ids are not reused.
        let u = p.undo("c4", &origin()).unwrap();
        assert_eq!(u.id, "c5");
        assert_eq!(
            std::fs::read_to_string(t.join("f.txt")).unwrap(),
            "version 2"
        );
        p.undo("c3", &origin()).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.join("f.txt")).unwrap(),
            "version 1"
        );
    }

    /// Records of actions that changed nothing (issue 36: every action
    /// gets one) never push undo steps out: they count toward
    /// `keep_records` apart and go with the changes older than them; `undo`
    /// passes the newest of them, naming them.
    #[test]
    fn records_of_no_change_neither_crowd_out_undo_steps_nor_hide_from_undo() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        let cfg = CheckpointConfig {
            keep_records: 2,
            ..Default::default()
        };
        let p = Project::open(state.path(), t, &cfg).unwrap();
        for i in 0..3 {
            p.record_unchanged(&origin(), None).unwrap();
            let before = p.store.snapshot().unwrap();
            std::fs::write(t.join("f.txt"), format!("version {i}")).unwrap();
            let after = p.store.snapshot().unwrap();
            p.record(&origin(), &before, &after).unwrap().unwrap();
        }
        // c1 .. c6: nothing, change, nothing, change, nothing, change.
        for _ in 0..3 {
            p.record_unchanged(&origin(), None).unwrap();
        }
        let (target, passed) = p.undo_target(Some("s")).unwrap();
        assert_eq!(target.id, "c6");
        let passed: Vec<&str> = passed.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(passed, ["c9", "c8", "c7"]);
        assert_eq!(p.load("c9").unwrap().summary(), "no change (checkpoint c9)");
        // Two changes kept (c4, c6), and the two newest records of no
        // change (c8, c9): c2 goes by count, c1 and c3 with it, c5 and c7
        // by the count of records of no change.
        assert_eq!(p.prune(&cfg).unwrap().ids, ["c1", "c2", "c3", "c5", "c7"]);
        let left: Vec<String> = p.list().unwrap().into_iter().map(|c| c.id).collect();
        assert_eq!(left, ["c4", "c6", "c8", "c9"]);
        assert!(p.undo_target(Some("another")).is_err());
    }

    /// `n` bytes git cannot compress.
    fn random_bytes(n: usize) -> Vec<u8> {
        use std::io::Read;
        let mut bytes = vec![0u8; n];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut bytes)
            .unwrap();
        bytes
    }

    #[test]
    fn the_quota_evicts_oldest_first_but_never_held_or_the_newest_steps() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        let cfg = CheckpointConfig {
            max_store_bytes: 4_500_000,
            keep_undo_steps: 2,
            ..Default::default()
        };
        let p = Project::open(state.path(), t, &cfg).unwrap();
        let big = t.join("big.bin");
        // c1 is held (rolled back, a person may still approve it).
        let mut c1 = recorded(&p, || {
            std::fs::write(&big, random_bytes(1_000_000)).unwrap()
        });
        p.hold(&mut c1, vec!["big".into()]).unwrap();
        let mut versions = Vec::new();
        let mut last = None;
        for _ in 2..=5 {
            let bytes = random_bytes(1_000_000);
            versions.push(bytes.clone());
            last = Some(recorded(&p, || std::fs::write(&big, &bytes).unwrap()));
        }
        // Five 1 MB versions are over 4.5 MB: c2 and c3 go (c2 alone is not
        // enough, c3 still needs c2's version), c1 is held, c4 and c5 are
        // the newest two steps.
        let evicted = last.unwrap().evicted.expect("an eviction");
        assert_eq!(evicted.ids, ["c2", "c3"]);
        assert!(evicted.bytes_after <= cfg.max_store_bytes, "{evicted:?}");
        assert!(store_bytes(&state.path().join("checkpoints")) <= cfg.max_store_bytes);
        assert!(evicted.message().contains("older checkpoints were evicted"));
        assert_eq!(p.last_eviction(), Some(evicted));
        let left: Vec<String> = p.list().unwrap().into_iter().map(|c| c.id).collect();
        assert_eq!(left, ["c1", "c4", "c5"]);
        p.undo("c5", &origin()).unwrap();
        assert!(std::fs::read(&big).unwrap() == versions[2]);
        p.undo("c4", &origin()).unwrap();
        assert!(std::fs::read(&big).unwrap() == versions[1]);
        // Pruning again (and again) keeps working: its keep refs are
        // replaced, not created twice.
        p.prune(&cfg).unwrap();
        p.prune(&cfg).unwrap();
        assert_eq!(p.load("c1").unwrap().status, CheckpointStatus::Held);
    }

    /// One recorded change: `change` runs between two snapshots.
    fn recorded(p: &Project, change: impl FnOnce()) -> Checkpoint {
        let before = p.store.snapshot().unwrap();
        change();
        let after = p.store.snapshot().unwrap();
        p.record(&origin(), &before, &after).unwrap().unwrap()
    }

    #[test]
    fn undo_never_writes_through_a_link_planted_after_the_change() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let (t, h) = (tree.path(), host.path());
        std::fs::create_dir_all(t.join("sub")).unwrap();
        for f in ["gone.txt", "same.txt"] {
            std::fs::write(t.join("sub").join(f), f).unwrap();
        }
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        // c1 deletes one file, creates one, modifies one.
        recorded(&p, || {
            std::fs::remove_file(t.join("sub/gone.txt")).unwrap();
            std::fs::write(t.join("sub/new.txt"), "new").unwrap();
            std::fs::write(t.join("sub/same.txt"), "changed").unwrap();
        });
        // The folder becomes a link to a host folder holding the same
        // after-state: following it, undo would create, delete, overwrite.
        std::fs::write(h.join("new.txt"), "new").unwrap();
        std::fs::write(h.join("same.txt"), "changed").unwrap();
        std::fs::remove_dir_all(t.join("sub")).unwrap();
        std::os::unix::fs::symlink(h, t.join("sub")).unwrap();
        let err = p.undo("c1", &origin()).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(!h.join("gone.txt").exists());
        assert_eq!(std::fs::read_to_string(h.join("new.txt")).unwrap(), "new");
        assert_eq!(
            std::fs::read_to_string(h.join("same.txt")).unwrap(),
            "changed"
        );
    }

    #[test]
    fn a_file_turned_into_a_folder_is_held_and_applied_whole() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "file").unwrap();
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        let mut cp = recorded(&p, || {
            std::fs::remove_file(t.join("a.txt")).unwrap();
            std::fs::create_dir_all(t.join("a.txt/deep")).unwrap();
            std::fs::write(t.join("a.txt/deep/f"), "x").unwrap();
        });
        p.hold(&mut cp, vec!["held".into()]).unwrap();
        assert_eq!(std::fs::read_to_string(t.join("a.txt")).unwrap(), "file");
        p.apply(&cp.id).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.join("a.txt/deep/f")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_restore_that_cannot_complete_changes_nothing() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "a").unwrap();
        std::fs::write(t.join("b.txt"), "b").unwrap();
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        recorded(&p, || {
            std::fs::remove_file(t.join("a.txt")).unwrap();
            std::fs::remove_file(t.join("b.txt")).unwrap();
        });
        // Someone makes `b.txt` a folder of their own files: undo of c1
        // cannot put b.txt back and must not put a.txt back alone.
        std::fs::create_dir_all(t.join("b.txt")).unwrap();
        std::fs::write(t.join("b.txt/mine"), "mine").unwrap();
        let err = p.undo("c1", &origin()).unwrap_err().to_string();
        assert!(err.contains("nothing was changed"), "{err}");
        assert!(!t.join("a.txt").exists());
        assert_eq!(
            std::fs::read_to_string(t.join("b.txt/mine")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn undo_puts_a_private_file_back_private() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        for f in [".env", "key.pem"] {
            std::fs::write(t.join(f), "SECRET=1\n").unwrap();
            std::fs::set_permissions(t.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        recorded(&p, || {
            std::fs::remove_file(t.join(".env")).unwrap();
            std::fs::write(t.join("key.pem"), "SECRET=2\n").unwrap();
        });
        p.undo("c1", &origin()).unwrap();
        for f in [".env", "key.pem"] {
            let meta = std::fs::metadata(t.join(f)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{f}");
            assert_eq!(std::fs::read_to_string(t.join(f)).unwrap(), "SECRET=1\n");
        }
    }
}
