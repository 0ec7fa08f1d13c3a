//! One transactional action: a private upper layer for its overlay before
//! it runs, its changeset read and recorded after — with no snapshot of the
//! project, so the first action in a large tree pays no walk.
//!
//! The upper layer lives in the project's store
//! (`<state>/checkpoints/<hash>/txn/run-…`, renamed to `txn/<id>` once the
//! changeset is recorded) until the changeset is applied or rejected. The
//! working directory's lock is taken only after the command ran: reading,
//! judging and applying a changeset is serialised, running is not (each
//! run writes into its own upper layer).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::beneath::{Beneath, Node};
use super::changeset::{self, Passthrough, ReadConfig};
use super::watch::{Observed, WatchError};
use super::{lock, CheckpointConfig, CheckpointError, CheckpointStatus, Origin, Project};
use crate::sandbox::overlay::{self, OverlayMount};

/// Why an action could not be given an overlay, or a file tool's write
/// could not be checkpointed before it ran.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error("{0} cannot be read")]
    ProjectUnreadable(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The overlay probe's reason and fix (`overlay::probe`).
    #[error(transparent)]
    Probe(#[from] overlay::OverlayUnavailable),
    #[error("overlays cannot be used here: {0}")]
    Unmountable(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the transaction could not be prepared: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("not run: the action could not be given an overlay: {0}")]
    NoOverlay(#[source] Box<TxnError>),
    #[error(
        "not run: the file could not be checkpointed before the write ({0}); set \
         `[checkpoints] enabled = false` to run without checkpoints"
    )]
    FileNotCheckpointed(#[source] CheckpointError),
    #[error("not run: the checkpoint task failed: {0}")]
    FileTask(#[source] tokio::task::JoinError),
}

fn txn_io(path: &Path) -> impl FnOnce(std::io::Error) -> TxnError + '_ {
    move |source| TxnError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An action about to run into an overlay.
pub struct Transaction {
    project: Project,
    cfg: CheckpointConfig,
    dir: PathBuf,
    mount: OverlayMount,
    started_ns: i64,
    start_tick_ns: i64,
    origin: Origin,
}

/// An overlay mounted ahead for a project's next action
/// (`overlay::mount_ahead`), with the identity of the project directory it
/// was mounted over: a directory replaced since (same path, another
/// inode) gets a fresh one.
struct Ready {
    dir: PathBuf,
    mount: OverlayMount,
    project_id: (u64, u64),
    /// When it was mounted: with [`MAX_READY_OVERLAYS`] waiting, the
    /// oldest gives its place up.
    made: std::time::Instant,
}

impl Ready {
    /// Give it up unused: the holder ends, its directory goes (in the
    /// background).
    fn discard(self) {
        if let Some(ahead) = &self.mount.ahead {
            ahead.end();
        }
        remove_dir_later(self.dir);
    }
}

/// Overlays mounted ahead and waiting, per process at most (one per
/// store and project; each is a sleeping holder process and two empty
/// directories).
const MAX_READY_OVERLAYS: usize = 16;

/// How long the next overlay's mounting waits after an action whose
/// changeset has an effect to judge and apply (its bookkeeping takes a few
/// ms, a model's next request far longer; both would queue on the file
/// system's journal). After an action that changed nothing to apply, the
/// next overlay is mounted at once.
const AHEAD_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// How long an action waits for the overlay being mounted ahead for its
/// project before it mounts one itself (a mount takes milliseconds; a
/// stuck one must not hold the action).
const AHEAD_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The overlays being mounted ahead (queued, waiting for their start, or
/// mounting), per project, and how many actions wait for one: an action
/// that finds its project's next overlay on its way waits for it (and
/// hurries it past its delay) instead of mounting a second one beside it.
#[derive(Default)]
struct AheadState {
    pending: HashMap<ReadyKey, usize>,
    waiters: usize,
}

fn ahead_state() -> &'static (Mutex<AheadState>, std::sync::Condvar) {
    static STATE: OnceLock<(Mutex<AheadState>, std::sync::Condvar)> = OnceLock::new();
    STATE.get_or_init(Default::default)
}

/// Count one more overlay on its way for `key`.
fn ahead_begun(key: &ReadyKey) {
    let (state, _) = ahead_state();
    *crate::util::sync::lock(state)
        .pending
        .entry(key.clone())
        .or_default() += 1;
}

/// One overlay for `key` is mounted (or failed): wake who waits for it.
fn ahead_ended(key: &ReadyKey) {
    let (state, ready) = ahead_state();
    let mut st = crate::util::sync::lock(state);
    if let Some(n) = st.pending.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            st.pending.remove(key);
        }
    }
    ready.notify_all();
}

/// Wait, until `deadline`, for an overlay of `key` on its way; `true`: one
/// was and has ended (look for it again), `false`: none is on its way, or
/// it did not come in time.
fn wait_for_ahead(key: &ReadyKey, deadline: std::time::Instant) -> bool {
    let (state, ready) = ahead_state();
    let mut st = crate::util::sync::lock(state);
    if !st.pending.contains_key(key) {
        return false;
    }
    st.waiters += 1;
    // The worker may be sleeping out a delay: it looks at `waiters`.
    ready.notify_all();
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    st = crate::util::sync::wait_timeout_while(ready, st, left, |st| st.pending.contains_key(key));
    st.waiters -= 1;
    !st.pending.contains_key(key)
}

type ReadyKey = (PathBuf, PathBuf);

fn ready_overlays() -> std::sync::MutexGuard<'static, HashMap<ReadyKey, Ready>> {
    static READY: OnceLock<Mutex<HashMap<ReadyKey, Ready>>> = OnceLock::new();
    READY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The (device, inode) of a directory, to see that it is still the same.
fn dir_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Make a fresh upper layer and work directory in `root` and mount the
/// overlay of `project` with them, ahead of the action.
fn mount_fresh(root: &Path, project: &Path) -> Result<Ready, TxnError> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let project_id =
        dir_id(project).ok_or_else(|| TxnError::ProjectUnreadable(project.to_path_buf()))?;
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    // Each run directory in a block group of its own (see
    // `place_subdirectories_apart`): the command's copy-up makes its
    // inodes there, on the action's path.
    // `txn/` may not exist yet: the probe, which makes it, runs once per
    // process, maybe for another store.
    if !place_subdirectories_apart(root) && !root.exists() {
        crate::paths::create_private_dir(root).map_err(txn_io(root))?;
        place_subdirectories_apart(root);
    }
    let dir = root.join(format!("run-{}-{n}", std::process::id()));
    let (upper, work) = (dir.join("upper"), dir.join("work"));
    make_private_dirs(&dir, &[&upper, &work])?;
    let mount = OverlayMount {
        project: project.to_path_buf(),
        upper,
        work,
        ahead: None,
        not_before_ns: 0,
    };
    // Where it cannot be mounted ahead (no `/bin/cat`, a holder that
    // failed), the command mounts its own, as the probe checked it can.
    let mount = match overlay::mount_ahead(mount.clone()) {
        Ok(ahead) => ahead,
        Err(e) => {
            tracing::debug!("transaction: the overlay is mounted by the command: {e}");
            // Fresh directories: a failed mount may have left its marks.
            remove_dir(&dir);
            make_private_dirs(&dir, &[&mount.upper, &mount.work])?;
            mount
        }
    };
    Ok(Ready {
        dir,
        mount,
        project_id,
        made: std::time::Instant::now(),
    })
}

/// The overlay for an action in `project` now: the one mounted ahead when
/// it is there and still over the same directory, else one mounted now.
/// The next one is mounted ahead when the action's command has ended
/// ([`Transaction::finish`]).
fn take_overlay(root: &Path, project: &Path) -> Result<Ready, TxnError> {
    let key = (root.to_path_buf(), project.to_path_buf());
    let deadline = std::time::Instant::now() + AHEAD_WAIT_LIMIT;
    loop {
        let waiting = ready_overlays().remove(&key);
        match waiting {
            // Still over the same directory, and its upper layer still
            // there (a store deleted meanwhile took it along).
            Some(r) if Some(r.project_id) == dir_id(project) && r.mount.upper.is_dir() => {
                tracing::debug!("transaction: the overlay mounted ahead is taken");
                return Ok(r);
            }
            Some(stale) => {
                stale.discard();
                break;
            }
            // One on its way: wait for it rather than mount a second.
            None if wait_for_ahead(&key, deadline) => continue,
            None => break,
        }
    }
    tracing::debug!("transaction: no overlay ready, one is mounted now");
    mount_fresh(root, project)
}

/// One request to the thread that mounts overlays ahead: the store's
/// `txn/`, the project, and when to start (after the action that asked
/// has run and been applied, not alongside it: both would queue on the
/// file system's journal).
struct AheadRequest {
    root: PathBuf,
    project: PathBuf,
    not_before: std::time::Instant,
}

/// Mount the next overlay of `project` in the background, `delay` from
/// now, unless one is already waiting. One long-lived thread does it for
/// every project (a thread started per action cost its `clone` on the
/// action's path), fed through a queue of [`MAX_READY_OVERLAYS`]
/// requests; a request that finds the queue full is dropped (the next
/// action then mounts its own).
fn mount_next_ahead(root: &Path, project: &Path, delay: std::time::Duration) {
    use std::sync::mpsc::{sync_channel, SyncSender};
    static WORKER: OnceLock<Option<Mutex<SyncSender<AheadRequest>>>> = OnceLock::new();
    let worker = WORKER.get_or_init(|| {
        let (tx, rx) = sync_channel::<AheadRequest>(MAX_READY_OVERLAYS);
        std::thread::Builder::new()
            .name("overlay-ahead".into())
            .spawn(move || {
                while let Ok(req) = rx.recv() {
                    {
                        // Sleep out the delay unless an action waits.
                        let (state, ready) = ahead_state();
                        let st = crate::util::sync::lock(state);
                        let left = req
                            .not_before
                            .saturating_duration_since(std::time::Instant::now());
                        drop(crate::util::sync::wait_timeout_while(
                            ready,
                            st,
                            left,
                            |st| st.waiters == 0,
                        ));
                    }
                    let key = (req.root.clone(), req.project.clone());
                    mount_ahead_now(req.root, req.project);
                    ahead_ended(&key);
                }
            })
            .map_err(|e| tracing::debug!("transaction: no overlay mounted ahead: {e}"))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let request = AheadRequest {
        root: root.to_path_buf(),
        project: project.to_path_buf(),
        not_before: std::time::Instant::now() + delay,
    };
    if let Some(tx) = worker {
        let key = (request.root.clone(), request.project.clone());
        ahead_begun(&key);
        if tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_send(request)
            .is_err()
        {
            ahead_ended(&key);
            tracing::debug!("transaction: no overlay mounted ahead: the queue is full");
        }
    }
}

/// Mount an overlay of `project` and keep it waiting for the project's
/// next action (unless one already waits; with [`MAX_READY_OVERLAYS`]
/// waiting, the oldest is given up for it).
fn mount_ahead_now(root: PathBuf, project: PathBuf) {
    let key = (root, project);
    if ready_overlays().contains_key(&key) {
        return;
    }
    match mount_fresh(&key.0, &key.1) {
        Ok(next) => {
            let mut map = ready_overlays();
            if map.contains_key(&key) {
                drop(map);
                next.discard();
                return;
            }
            let evicted = insert_evicting(&mut map, key, next, MAX_READY_OVERLAYS);
            drop(map);
            if let Some(old) = evicted {
                old.discard();
            }
        }
        Err(e) => tracing::debug!("transaction: no overlay mounted ahead: {e}"),
    }
}

/// Keep `next` waiting for `key`'s next action among at most `limit`
/// overlays; `Some`: the one that gave its place up (the caller discards
/// it). Full, the overlay waiting longest gives its place up: refusing the
/// new one instead would leave the places to projects no session works in
/// any more, for the daemon's whole life.
fn insert_evicting(
    map: &mut HashMap<ReadyKey, Ready>,
    key: ReadyKey,
    next: Ready,
    limit: usize,
) -> Option<Ready> {
    let evicted = if map.len() >= limit && !map.contains_key(&key) {
        let oldest = map
            .iter()
            .min_by_key(|(_, r)| r.made)
            .map(|(k, _)| k.clone());
        oldest.and_then(|k| map.remove(&k))
    } else {
        None
    };
    // A replaced overlay for the same key (not expected: the caller
    // checked) is given up too.
    let replaced = map.insert(key, next);
    evicted.or(replaced)
}

/// Get a project ready for its first transactional action, in the
/// background, when a session opens in it: the store opened (made, with
/// its `git init`, the first time), the overlay probe run (once per
/// process), the first overlay mounted ahead, the
/// stores measured for the quota and the id counter made — the one-time
/// work the first action paid for before this.
/// Nothing walks the tree. Failures are only logged: the action itself
/// then does (and reports) the same work.
pub fn warm_up(state_dir: &Path, cfg: &CheckpointConfig, cwd: &Path) {
    if !cfg.enabled || cfg.transactions == super::TransactionMode::Observe {
        return;
    }
    if !super::observable(cwd) {
        return;
    }
    let (state_dir, cfg, cwd) = (state_dir.to_path_buf(), cfg.clone(), cwd.to_path_buf());
    let spawned = std::thread::Builder::new()
        .name("txn-warm-up".into())
        .spawn(move || {
            let project = match Project::open_shared(&state_dir, &cwd, &cfg) {
                Ok(p) => p,
                Err(e) => return tracing::debug!("transaction warm-up: {e}"),
            };
            project.measure_stores_once();
            project.prepare_counter();
            let root = project.store.dir().join("txn");
            if let Err(e) = overlay::probe(&root) {
                return tracing::debug!("transaction warm-up: {e}");
            }
            if overlay::unmountable(project.cwd()).is_some() {
                return;
            }
            let project_path = project
                .cwd()
                .canonicalize()
                .unwrap_or_else(|_| project.cwd().to_path_buf());
            let key = (root.clone(), project_path.clone());
            ahead_begun(&key);
            mount_ahead_now(root, project_path);
            ahead_ended(&key);
        });
    if let Err(e) = spawned {
        tracing::debug!("transaction warm-up: {e}");
    }
}

/// Prepare a transaction for an action in `cwd`. `Err`: why overlays
/// cannot be used here (the probe's reason and fix).
pub async fn begin(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    origin: Origin,
) -> Result<Transaction, TxnError> {
    begin_with(state_dir, cfg, cwd, origin, false).await
}

/// [`begin`]; `exact_start`: the command is held back until the kernel's
/// coarse clock has ticked past the start (at most one tick),
/// so a change made just before the start is told from one just after
/// and is not a conflict. For an action a person has just approved — they
/// may well have saved a file a moment before answering. Without it the
/// command starts at once and a change in the start's own tick counts as
/// the person's (a conflict) unless the daemon left the file so.
pub async fn begin_with(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    origin: Origin,
    exact_start: bool,
) -> Result<Transaction, TxnError> {
    let (state_dir, cwd_owned, cfg_owned) =
        (state_dir.to_path_buf(), cwd.to_path_buf(), cfg.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        let project = Project::open_shared(&state_dir, &cwd_owned, &cfg_owned)?;
        // An apply or undo another process left unfinished here (a killed
        // CLI `undo`) is finished or reversed before this action reads
        // the project (one directory listing when there is none).
        super::intent::recover(&project);
        let root = project.store.dir().join("txn");
        overlay::probe(&root)?;
        if let Some(why) = overlay::unmountable(project.cwd()) {
            return Err(TxnError::Unmountable(why));
        }
        let project_path = project
            .cwd()
            .canonicalize()
            .unwrap_or_else(|_| project.cwd().to_path_buf());
        let ready = take_overlay(&root, &project_path)?;
        Ok::<_, TxnError>((project, ready))
    })
    .await?;
    let (project, ready) = prepared.map_err(|e| TxnError::NoOverlay(Box::new(e)))?;
    // The command starts at once. A file with a later ctime than this (the
    // fine clock) changed after the command could have read it; one with a
    // ctime in this coarse clock tick may have changed just before or just
    // after, and counts as changed unless the daemon itself left it so
    // (`super::left`; see `ReadConfig`).
    let start_tick_ns = changeset::coarse_now_ns();
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(start_tick_ns);
    let mut mount = ready.mount;
    let start_tick_ns = if exact_start {
        // Every change with a ctime up to the start is then from before it.
        mount.not_before_ns = started_ns;
        started_ns.saturating_add(1)
    } else {
        start_tick_ns
    };
    Ok(Transaction {
        project,
        cfg: cfg.clone(),
        dir: ready.dir,
        mount,
        started_ns,
        start_tick_ns,
        origin,
    })
}

/// Make `dir` (its parents as needed) and the directories in `inside` it,
/// each private (0700): three `mkdir`s on the usual path, where the
/// general helper checked and fixed each mode again.
fn make_private_dirs(dir: &Path, inside: &[&Path]) -> Result<(), TxnError> {
    use std::os::unix::fs::DirBuilderExt;
    // `run-<pid>-<n>` is new: its parent (`txn/`, private) exists after
    // the probe, so a plain mkdir suffices.
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(txn_io(dir)(e));
        }
        crate::paths::create_private_dir(dir).map_err(txn_io(dir))?;
    }
    for d in inside {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(txn_io(d))?;
    }
    Ok(())
}

impl Transaction {
    /// The overlay the command runs in.
    pub fn mount(&self) -> OverlayMount {
        self.mount.clone()
    }

    /// Read the changeset the command left and make its record (status
    /// `held`, not yet saved: the effect stage saves it once, applied or
    /// held). `Ok(None)`: it changed nothing that needs judging or undoing
    /// (what it left outside the record — `.git` internals, directories it
    /// made — is applied at once). Writes into ignored trees and folders
    /// it removed are recorded (so `history` lists them and `undo`
    /// reverts them), and `needs_judging` says which written paths the
    /// gates must see first, e.g. a `.pth` file in `.venv` (the gates live
    /// above this module).
    pub async fn finish(
        self,
        needs_judging: fn(&str) -> bool,
    ) -> Result<Option<Observed>, WatchError> {
        // The command has ended: so does the namespace it ran in. The
        // project's next overlay is mounted once this action's bookkeeping
        // is done (its command's own duration no longer decides whether
        // the two overlap).
        if let Some(ahead) = &self.mount.ahead {
            ahead.end();
        }
        let next_ahead = self
            .dir
            .parent()
            .map(|root| (root.to_path_buf(), self.mount.project.clone()));
        let guard = lock(self.project.cwd()).lock_owned().await;
        let Transaction {
            project,
            cfg,
            dir,
            mount,
            started_ns,
            start_tick_ns,
            origin,
        } = self;
        let p = project.clone();
        let cfg_for_pruning = cfg.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let read_cfg = ReadConfig {
                untracked_cap: cfg.untracked_cap_bytes,
                precious: &cfg.precious,
                started_ns,
                start_tick_ns,
            };
            let read = changeset::read(&mount.upper, &p.store, &read_cfg);
            let cs = match read {
                Ok(cs) => cs,
                Err(e) => {
                    remove_dir_later(dir);
                    return Err(CheckpointError::from(e));
                }
            };
            if cs.is_empty() {
                remove_dir_later(dir);
                p.note_unchanged(&origin, None);
                return Ok(None);
            }
            let judged_writes = cs
                .passthrough
                .iter()
                .any(|pass| !pass.remove && !pass.dir && needs_judging(&pass.path));
            let undoable = cs.passthrough.iter().any(|pass| {
                pass.ignored_file() || (pass.dir && pass.remove && !is_git(&pass.path))
            });
            // A large new file (`effect.skipped`) goes through the record
            // too: the result names it, and a sparse one is held to
            // `max_sparse_bytes` when applied.
            if cs.effect.is_empty()
                && cs.effect.skipped.is_empty()
                && cs.conflicts.is_empty()
                && cs.dropped.is_empty()
                && !judged_writes
                && !undoable
            {
                let b = p.store.beneath()?;
                for pass in &cs.passthrough {
                    if let Err(e) = pass_through(&b, &mount.upper, pass) {
                        tracing::warn!("transaction: {} not applied: {e}", pass.path);
                    }
                }
                remove_dir_later(dir);
                p.note_unchanged(&origin, unrecorded_note(&cs.passthrough));
                return Ok(None);
            }
            let mut cp = p.new_checkpoint(&origin, cs.effect, CheckpointStatus::Held, true)?;
            cp.conflicts = cs.conflicts;
            cp.passthrough = cs.passthrough;
            cp.dropped = cs.dropped;
            let kept = p.txn_dir(&cp.id);
            if let Err(source) = std::fs::rename(&dir, &kept) {
                remove_dir_later(dir);
                return Err(CheckpointError::Io { path: kept, source });
            }
            Ok(Some(cp))
        })
        .await;
        // The project's next overlay: at once when nothing is left to
        // judge or apply (the model's next request is the only thing
        // running meanwhile), else once the effect stage has had its time.
        if let Some((root, project_path)) = next_ahead {
            let delay = match &recorded {
                Ok(Ok(None)) => std::time::Duration::ZERO,
                _ => AHEAD_DELAY,
            };
            mount_next_ahead(&root, &project_path, delay);
        }
        let recorded = recorded??;
        if let Some(cp) = &recorded {
            if Project::due_for_pruning(&cp.id, &cfg_for_pruning) {
                // After this action releases the lock (its record is saved
                // by then; objects younger than an hour are kept anyway).
                let (p, cfg) = (project.clone(), cfg_for_pruning);
                let cwd = project.cwd().to_path_buf();
                tokio::spawn(async move {
                    if let Err(e) = super::watch::locked(&cwd, move || p.prune(&cfg)).await {
                        tracing::warn!(cwd = %cwd.display(), "checkpoint: pruning failed: {e}");
                    }
                });
            }
        }
        Ok(recorded.map(|checkpoint| Observed {
            project,
            checkpoint,
            guard,
        }))
    }
}

/// What the record of an action that changed nothing undo reverts says
/// it did change: git's own files (`git add` writes only the index).
fn unrecorded_note(passthrough: &[Passthrough]) -> Option<String> {
    const SHOWN: usize = 3;
    let git: Vec<&str> = passthrough
        .iter()
        .filter(|p| is_git(&p.path) && !p.dir)
        .map(|p| p.path.as_str())
        .collect();
    if git.is_empty() {
        return None;
    }
    let mut shown = git[..git.len().min(SHOWN)].join(", ");
    if git.len() > SHOWN {
        shown.push_str(&format!(" and {} more", git.len() - SHOWN));
    }
    Some(format!(
        "changed only git's own files ({shown}), which undo does not revert"
    ))
}

/// A path of the project's own repository (never undone: checkpoints do
/// not cover `.git`).
fn is_git(path: &str) -> bool {
    path == ".git" || path.starts_with(".git/")
}

/// A passthrough file larger than this (or one with holes) is copied
/// segment by segment instead of read whole into memory.
const WHOLE_READ_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Why an unrecorded path was not applied from the upper layer.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Beneath(#[from] super::beneath::BeneathError),
    /// Reading the command's version from the upper layer.
    #[error(transparent)]
    Upper(#[from] std::io::Error),
}

/// Apply one unrecorded path from the upper layer: write it (a file or a
/// link, its mode kept) or remove it (a file, or a directory and all it
/// holds), beneath the project. `Ok(Some(oid))`: the blob id of the bytes
/// written (undo removes the file only while it still holds them).
pub fn pass_through(
    b: &Beneath,
    upper: &Path,
    p: &Passthrough,
) -> Result<Option<String>, PassError> {
    if p.remove && p.dir {
        // A folder the command removed: its files went first; one that
        // still holds something (put there by someone else) stays.
        b.remove_empty_dir(&p.path);
        return Ok(None);
    }
    if p.remove {
        return match b.node(&p.path)? {
            Some(Node::Dir) => {
                let mut files = b.files_under(&p.path)?;
                files.sort();
                let mut dirs: Vec<String> = vec![p.path.clone()];
                for f in &files {
                    b.remove(f)?;
                    let mut parent = Path::new(f).parent();
                    while let Some(d) = parent.filter(|d| d.starts_with(&p.path)) {
                        dirs.push(d.to_string_lossy().into_owned());
                        parent = d.parent();
                    }
                }
                dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
                dirs.dedup();
                for d in &dirs {
                    b.remove_empty_dir(d);
                }
                Ok(None)
            }
            Some(_) => Ok(b.remove(&p.path).map(|()| None)?),
            None => Ok(None),
        };
    }
    let abs = upper.join(&p.path);
    let meta = std::fs::symlink_metadata(&abs)?;
    // What the project held there: newly added group/world write bits
    // are measured against it (setuid, setgid and sticky never land).
    let lower_perm = b.stat(&p.path).ok().flatten().map(|st| st.st_mode & 0o7777);
    if p.dir {
        use std::os::unix::fs::MetadataExt;
        let perm = changeset::safe_dir_perm(meta.mode() & 0o7777, lower_perm).0;
        if lower_perm.is_some() {
            // A directory the project holds, re-moded by the command.
            return Ok(b.chmod(&p.path, perm).map(|()| None)?);
        }
        return Ok(b.make_dir(&p.path, perm).map(|()| None)?);
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&abs)?;
        let target = target.as_os_str().as_encoded_bytes();
        b.put(&p.path, target, 0, true)?;
        Ok(Some(super::store::blob_id(target)))
    } else {
        use std::os::unix::fs::MetadataExt;
        let perm = changeset::safe_perm(meta.mode() & 0o7777, lower_perm).0;
        let sparse = meta.blocks().saturating_mul(512) < meta.len();
        if sparse || meta.len() > WHOLE_READ_MAX_BYTES {
            // Copied segment by segment, holes kept; not hashed (undo
            // leaves a file this large where it is, and says so).
            let src = std::fs::File::open(&abs)?;
            b.put_sparse(&p.path, &src, perm)?;
            return Ok(None);
        }
        let bytes = std::fs::read(&abs)?;
        b.put(&p.path, &bytes, perm, false)?;
        Ok(Some(super::store::blob_id(&bytes)))
    }
}

/// Remove a transaction's directory. The overlay leaves `work/work` with
/// no permissions; it is opened up first so a non-root daemon can list it.
pub fn remove_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let inner = dir.join("work").join("work");
    let _ = std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o700));
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("transaction: {} not removed: {e}", dir.display());
        }
    }
}

/// Mark `dir` so that ext4 places each directory made in it from now on
/// in a block group chosen apart — one with few directories, as for a
/// directory at the top of the file system (`chattr +T`, `FS_TOPDIR_FL`,
/// read by the Orlov allocator) — instead of `dir`'s own group. Used for
/// the store's `txn/` (each action's run directory: the command's copy-up
/// makes its inodes there, on the action's path).
///
/// Why: ext4 without a journal (the development VM's; the kernel's
/// `recently_deleted` check runs only then) skips, for each new inode, every
/// free inode of the group deleted in the last 5 s — 300 s while its inode
/// table block is not yet written back — checking them one by one from the
/// group's start. In a group where much was deleted lately (each action's
/// used directories; a build or a test run removing a tree in `/tmp`) a
/// new inode costs many times its usual price (docs/transactions.md,
/// "Fifth round"). Best effort, once per directory and process: a file
/// system without the flag keeps the default placement. `false`: `dir`
/// could not be opened (e.g. it does not exist yet).
pub fn place_subdirectories_apart(dir: &Path) -> bool {
    use rustix::fs::{ioctl_getflags, ioctl_setflags, IFlags, Mode, OFlags};
    static MARKED: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let marked = MARKED.get_or_init(Mutex::default);
    if marked
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(dir)
    {
        return true;
    }
    let Ok(fd) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let settled = match ioctl_getflags(&fd) {
        Ok(flags) if flags.contains(IFlags::TOPDIR) => true,
        Ok(flags) => ioctl_setflags(&fd, flags | IFlags::TOPDIR).is_ok(),
        // No such flags here (not ext2/3/4): nothing to do, ever.
        Err(_) => true,
    };
    if settled {
        marked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(dir.to_path_buf());
    }
    true
}

/// Paths waiting for the janitor at most; past that the caller removes
/// its own.
const MAX_PENDING_REMOVALS: usize = 256;

/// Remove a transaction's directory in the background: a used upper layer
/// and work directory are a few `rmdir`s (each a journal update) that the
/// action need not wait for. See [`remove_later`].
pub fn remove_dir_later(dir: PathBuf) {
    remove_later(dir)
}

/// Remove a directory (as [`remove_dir`]) or a file in the background:
/// freed blocks are a journal update the action need not wait for. One janitor thread
/// per process, fed through a queue of [`MAX_PENDING_REMOVALS`]; when it
/// is full or the thread cannot start, the path is removed at once.
pub fn remove_later(path: PathBuf) {
    use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
    static JANITOR: OnceLock<Option<Mutex<SyncSender<PathBuf>>>> = OnceLock::new();
    let janitor = JANITOR.get_or_init(|| {
        let (tx, rx) = sync_channel::<PathBuf>(MAX_PENDING_REMOVALS);
        std::thread::Builder::new()
            .name("txn-janitor".into())
            .spawn(move || {
                while let Ok(path) = rx.recv() {
                    remove_now(&path);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let refused = match janitor {
        Some(tx) => match tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_send(path)
        {
            Ok(()) => return,
            Err(TrySendError::Full(d) | TrySendError::Disconnected(d)) => d,
        },
        None => path,
    };
    remove_now(&refused);
}

/// Remove `path`: a directory with all it holds, or a file or link.
fn remove_now(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_dir(path),
        Ok(_) => {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!("transaction: {} not removed: {e}", path.display());
            }
        }
        Err(_) => {}
    }
}

/// A file tool's write (`write_file`, an edit through the client's `fs`),
/// recorded as the change of its one path: the pre-image before, the file
/// after — no walk, and nothing else in the project is counted.
pub struct FileWrite {
    project: Project,
    rel: String,
    before: Option<(super::store::Entry, u64)>,
    cfg: CheckpointConfig,
    origin: Origin,
    guard: tokio::sync::OwnedMutexGuard<()>,
}

/// Prepare the record of a write to `path` (absolute, inside `cwd`).
/// `Ok(None)`: the path is not inside the project (the caller watches
/// instead); `Err`: why the write must not run.
pub async fn begin_file(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    path: &Path,
    origin: Origin,
) -> Result<Option<FileWrite>, TxnError> {
    let guard = lock(cwd).lock_owned().await;
    let (state_dir, cwd, path, cfg_owned) = (
        state_dir.to_path_buf(),
        cwd.to_path_buf(),
        path.to_path_buf(),
        cfg.clone(),
    );
    let opened = tokio::task::spawn_blocking(move || {
        let root = cwd.canonicalize().unwrap_or_else(|_| cwd.clone());
        let abs = crate::util::path::normalize(&if path.is_absolute() {
            path
        } else {
            cwd.join(&path)
        });
        let rel = abs
            .strip_prefix(&root)
            .or_else(|_| abs.strip_prefix(&cwd))
            .ok()
            .and_then(|r| r.to_str())
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        let Some(rel) = rel else {
            return Ok(None);
        };
        let project = Project::open_shared(&state_dir, &cwd, &cfg_owned)?;
        super::intent::recover(&project);
        // A path the project cannot resolve plainly (a link on the way):
        // the files actuator refuses it itself; observe as before.
        let before = match changeset::pre_image(&project.store, &rel) {
            Err(super::StoreError::Beneath(_)) => return Ok(None),
            other => other?,
        };
        Ok::<_, CheckpointError>(Some((project, rel, before)))
    })
    .await
    .map_err(TxnError::FileTask)?;
    match opened {
        Ok(Some((project, rel, before))) => Ok(Some(FileWrite {
            project,
            rel,
            before,
            cfg: cfg.clone(),
            origin,
            guard,
        })),
        Ok(None) => Ok(None),
        Err(e) => Err(TxnError::FileNotCheckpointed(e)),
    }
}

impl FileWrite {
    /// Record what the write did to its path (`Ok(None)`: nothing).
    pub async fn finish(self) -> Result<Option<Observed>, WatchError> {
        let FileWrite {
            project,
            rel,
            before,
            cfg,
            origin,
            guard,
        } = self;
        let p = project.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let after = changeset::pre_image(&p.store, &rel)?;
            // The daemon's own write (`super::left`).
            if let Ok(b) = p.store.beneath() {
                super::left::remember(&b, &rel);
            }
            let Some(effect) = changeset::one_path(&p.store, &cfg, &rel, before, after) else {
                p.note_unchanged(&origin, None);
                return Ok(None);
            };
            p.record_effect(&origin, effect, CheckpointStatus::Applied, false)
                .map(Some)
        })
        .await??;
        Ok(recorded.map(|checkpoint| Observed {
            project,
            checkpoint,
            guard,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::scan;
    use super::changeset::ReadConfig;
    use super::*;

    fn origin() -> Origin {
        Origin {
            session_id: "s".into(),
            tool_call_id: "t".into(),
            tool: "write_file".into(),
            turn: Some("t1".into()),
        }
    }

    /// A file tool's record names its one path: what someone else wrote
    /// in the project meanwhile is not part of it, and its undo leaves that
    /// alone (and puts a 0600 file back 0600).
    #[tokio::test]
    async fn a_file_write_records_only_its_path() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "a\n").unwrap();
        std::fs::set_permissions(t.join("a.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(t.join("b.txt"), "b\n").unwrap();
        let cfg = CheckpointConfig::default();
        let w = begin_file(state.path(), &cfg, t, &t.join("a.txt"), origin())
            .await
            .unwrap()
            .unwrap();
        // The person, meanwhile; then the tool's write.
        std::fs::write(t.join("b.txt"), "the person's b\n").unwrap();
        std::fs::write(t.join("draft.txt"), "draft\n").unwrap();
        std::fs::write(t.join("a.txt"), "agent\n").unwrap();
        let observed = w.finish().await.unwrap().unwrap();
        let cp = observed.checkpoint;
        drop(observed.guard);
        let paths: Vec<&str> = cp.effect.changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["a.txt"]);
        assert!(!cp.changeset, "already in the project");
        observed.project.undo(&cp.id, &origin()).unwrap();
        assert_eq!(std::fs::read_to_string(t.join("a.txt")).unwrap(), "a\n");
        let mode = std::fs::metadata(t.join("a.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(t.join("b.txt")).unwrap(),
            "the person's b\n"
        );
        assert!(t.join("draft.txt").exists());
    }

    fn ctime_ns(path: &Path) -> i64 {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path).unwrap();
        m.ctime() * 1_000_000_000 + m.ctime_nsec()
    }

    /// The command is no longer held back until the coarse clock ticks
    /// past the start, so a project file whose ctime lies in the start's
    /// own tick may have changed just before or just after the start: the
    /// person's write there is a conflict (never overwritten), the
    /// daemon's own apply, as it left it, is not.
    #[test]
    fn a_write_in_the_starts_tick_is_a_conflict_unless_the_daemon_left_it() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "old a\n").unwrap();
        std::fs::write(t.join("b.txt"), "old b\n").unwrap();
        let cfg = CheckpointConfig::default();
        let p = Project::open(state.path(), t, &cfg).unwrap();
        // a.txt: the daemon applies a change (`Store::restore`, as an
        // apply or an undo does); b.txt: the person saves.
        let old = changeset::pre_image(&p.store, "a.txt").unwrap().unwrap().0;
        let new_oid = scan::write_object(&p.store.objects(), "blob", b"daemon a\n").unwrap();
        let new = super::super::store::Entry {
            mode: "100644".into(),
            oid: scan::hex(&new_oid),
            perm: Some(0o644),
        };
        p.store
            .restore(&[("a.txt".to_string(), Some(old), Some(new))])
            .unwrap();
        std::fs::write(t.join("b.txt"), "the person's b\n").unwrap();
        // An agent's command then writes both, in an upper layer.
        let upper = tempfile::tempdir().unwrap();
        std::fs::write(upper.path().join("a.txt"), "agent a\n").unwrap();
        std::fs::write(upper.path().join("b.txt"), "agent b\n").unwrap();
        // The action started in the tick both writes carry (the tick's
        // start at or before either ctime, the start itself after both).
        let tick = ctime_ns(&t.join("a.txt")).min(ctime_ns(&t.join("b.txt")));
        let read_cfg = ReadConfig {
            untracked_cap: cfg.untracked_cap_bytes,
            precious: &cfg.precious,
            started_ns: ctime_ns(&t.join("a.txt")).max(ctime_ns(&t.join("b.txt"))),
            start_tick_ns: tick,
        };
        let cs = changeset::read(upper.path(), &p.store, &read_cfg).unwrap();
        let changed: Vec<&str> = cs.effect.changes.iter().map(|c| c.path.as_str()).collect();
        let conflicts: Vec<&str> = cs.conflicts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(changed, ["a.txt"], "the daemon's own apply is no conflict");
        assert_eq!(conflicts, ["b.txt"], "the person's save in the tick is one");
        // Once the file is no longer as the daemon left it (someone wrote
        // it, same size, at once), it is a conflict too.
        std::fs::write(t.join("a.txt"), "person a\n").unwrap();
        let read_cfg = ReadConfig {
            started_ns: ctime_ns(&t.join("a.txt")),
            ..read_cfg
        };
        let cs = changeset::read(upper.path(), &p.store, &read_cfg).unwrap();
        let conflicts: Vec<&str> = cs.conflicts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(conflicts, ["a.txt", "b.txt"]);
        // Before the tick: the state the command began from, no conflict.
        let read_cfg = ReadConfig {
            start_tick_ns: read_cfg.started_ns + 1,
            started_ns: read_cfg.started_ns + 1,
            ..read_cfg
        };
        let cs = changeset::read(upper.path(), &p.store, &read_cfg).unwrap();
        assert!(cs.conflicts.is_empty(), "{:?}", cs.conflicts);
        assert_eq!(cs.effect.changes.len(), 2);
    }

    async fn run_in(mount: &OverlayMount, script: &str) {
        let args = vec!["-c".to_string(), script.to_string()];
        let out = crate::sandbox::runner::run_limited_in(
            "/bin/sh",
            &args,
            Path::new("/"),
            None,
            &crate::sandbox::runner::RunLimits::default(),
            &crate::sandbox::ResourceLimits::none(),
            Some(mount),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(out.success(), "{}", out.render());
    }

    /// Actions on one file, one right after the other (the next starting
    /// in the tick of the previous apply, as an agent's do): each runs in
    /// an overlay mounted ahead, none waits for the clock, and none is
    /// taken for the person's edit.
    #[tokio::test]
    async fn back_to_back_actions_on_one_file_all_apply() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path().canonicalize().unwrap();
        std::fs::write(t.join("a.txt"), "0\n").unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let cfg = CheckpointConfig::default();
        let origin = Origin {
            tool: "shell".into(),
            ..origin()
        };
        let mut ahead = 0;
        for round in 1..=6 {
            let tx = begin(state.path(), &cfg, &t, origin.clone()).await.unwrap();
            let mount = tx.mount();
            ahead += usize::from(mount.ahead.is_some());
            run_in(
                &mount,
                &format!("echo {round} >> '{}'", t.join("a.txt").display()),
            )
            .await;
            let observed = tx.finish(|_| false).await.unwrap().unwrap();
            let mut cp = observed.checkpoint;
            assert!(cp.conflicts.is_empty(), "round {round}: {:?}", cp.conflicts);
            observed.project.apply_changeset(&mut cp).unwrap();
            assert!(cp.conflicts.is_empty(), "round {round}: {:?}", cp.conflicts);
            drop(observed.guard);
            let text = std::fs::read_to_string(t.join("a.txt")).unwrap();
            assert!(
                text.ends_with(&format!("{round}\n")),
                "round {round}: {text}"
            );
        }
        assert_eq!(ahead, 6, "every overlay was mounted ahead");
    }

    /// A session opening in a project warms it up in the background: the
    /// store is made, an overlay is mounted ahead, and the first action takes that overlay instead of mounting
    /// one on its path.
    /// On a file system with the flag (ext4 here), a directory marked
    /// places its subdirectories apart.
    #[test]
    fn a_run_directory_root_is_placed_apart_where_the_file_system_can() {
        use rustix::fs::{ioctl_getflags, IFlags, Mode, OFlags};
        let root = tempfile::tempdir().unwrap();
        let probe = rustix::fs::open(root.path(), OFlags::RDONLY, Mode::empty()).unwrap();
        if ioctl_getflags(&probe).is_err() {
            eprintln!("skipped: no inode flags on this file system");
            return;
        }
        assert!(place_subdirectories_apart(root.path()));
        let dir = rustix::fs::open(root.path(), OFlags::RDONLY, Mode::empty()).unwrap();
        assert!(ioctl_getflags(&dir).unwrap().contains(IFlags::TOPDIR));
        assert!(!place_subdirectories_apart(&root.path().join("missing")));
    }

    /// An overlay waiting for `project`, mounted `age_ms` ago (no holder,
    /// nothing mounted: the bookkeeping of the waiting list only).
    fn waiting(project: &str, age_ms: u64) -> (ReadyKey, Ready) {
        let dir = PathBuf::from(format!("/nonexistent/run-{project}"));
        let ready = Ready {
            dir: dir.clone(),
            mount: OverlayMount {
                project: PathBuf::from(project),
                upper: dir.join("upper"),
                work: dir.join("work"),
                ahead: None,
                not_before_ns: 0,
            },
            project_id: (0, 0),
            made: std::time::Instant::now() - std::time::Duration::from_millis(age_ms),
        };
        ((PathBuf::from("/store/txn"), PathBuf::from(project)), ready)
    }

    #[test]
    fn with_every_place_taken_the_oldest_waiting_overlay_gives_its_place_up() {
        let mut map = HashMap::new();
        // 16 projects' overlays waiting, /p0 the oldest, /p15 the newest.
        for i in 0..MAX_READY_OVERLAYS {
            let (key, ready) = waiting(&format!("/p{i}"), 10_000 - i as u64 * 100);
            assert!(insert_evicting(&mut map, key, ready, MAX_READY_OVERLAYS).is_none());
        }
        assert_eq!(map.len(), MAX_READY_OVERLAYS);
        // A 17th project: it gets a place, the oldest (/p0) gives its up.
        let (key, ready) = waiting("/p16", 0);
        let evicted = insert_evicting(&mut map, key.clone(), ready, MAX_READY_OVERLAYS)
            .expect("the oldest is evicted");
        assert_eq!(evicted.mount.project, PathBuf::from("/p0"));
        assert_eq!(map.len(), MAX_READY_OVERLAYS);
        assert!(map.contains_key(&key), "the new project's overlay waits");
        assert!(!map.contains_key(&(PathBuf::from("/store/txn"), PathBuf::from("/p0"))));
        // And again: now /p1 is the oldest.
        let (key, ready) = waiting("/p17", 0);
        let evicted = insert_evicting(&mut map, key, ready, MAX_READY_OVERLAYS).unwrap();
        assert_eq!(evicted.mount.project, PathBuf::from("/p1"));
        // Below the limit nothing is evicted.
        let mut small = HashMap::new();
        let (key, ready) = waiting("/a", 5);
        assert!(insert_evicting(&mut small, key, ready, 2).is_none());
        let (key, ready) = waiting("/b", 1);
        assert!(insert_evicting(&mut small, key, ready, 2).is_none());
        assert_eq!(small.len(), 2);
    }

    /// Each action's run directory is placed apart from `txn/` (where
    /// the file system has inode flags: ext4 here), so the command's
    /// copy-up does not make its inodes in a group full of recently
    /// deleted ones.
    #[tokio::test]
    async fn the_run_directories_are_placed_apart_where_the_file_system_can() {
        use rustix::fs::{ioctl_getflags, IFlags, Mode, OFlags};
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let flags_here = rustix::fs::open(state.path(), OFlags::RDONLY, Mode::empty())
            .ok()
            .is_some_and(|fd| ioctl_getflags(&fd).is_ok());
        if !flags_here {
            eprintln!("skipped: no inode flags on this file system");
            return;
        }
        std::fs::write(tree.path().join("a.txt"), "0\n").unwrap();
        let cfg = CheckpointConfig::default();
        let tx = begin(state.path(), &cfg, tree.path(), origin())
            .await
            .unwrap();
        let txn = tx.dir.parent().unwrap();
        let fd = rustix::fs::open(txn, OFlags::RDONLY, Mode::empty()).unwrap();
        assert!(ioctl_getflags(&fd).unwrap().contains(IFlags::TOPDIR));
        assert!(tx.mount().upper.is_dir());
    }

    /// A model that answers at once: the next action begins right after
    /// the last one's changeset was read. It takes the overlay mounted
    /// ahead (waiting for it while it is on its way), so no second one is
    /// mounted beside it (were the next overlay mounted only after
    /// [`AHEAD_DELAY`], the action would mount its own on its path, and the
    /// delayed one would be left waiting next to it).
    #[tokio::test]
    async fn an_action_right_after_the_last_takes_the_overlay_on_its_way() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path().canonicalize().unwrap();
        std::fs::write(t.join("a.txt"), "0\n").unwrap();
        let cfg = CheckpointConfig::default();
        let shell = || Origin {
            tool: "shell".into(),
            ..origin()
        };
        let first = begin(state.path(), &cfg, &t, shell()).await.unwrap();
        let key = (first.dir.parent().unwrap().to_path_buf(), t.clone());
        assert!(first.finish(|_| false).await.unwrap().is_none());
        let second = begin(state.path(), &cfg, &t, shell()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert!(
            ready_overlays().get(&key).is_none(),
            "a second overlay was mounted beside the one the action took"
        );
        assert!(second.finish(|_| false).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn the_warm_up_leaves_an_overlay_the_first_action_takes() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path().canonicalize().unwrap();
        std::fs::write(t.join("a.txt"), "0\n").unwrap();
        let cfg = CheckpointConfig::default();
        warm_up(state.path(), &cfg, &t);
        let project = Project::open_shared(state.path(), &t, &cfg).unwrap();
        let key = (project.store.dir().join("txn"), t.clone());
        let mut waiting = None;
        for _ in 0..1000 {
            waiting = ready_overlays().get(&key).map(|r| r.dir.clone());
            if waiting.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let waiting = waiting.expect("an overlay mounted ahead by the warm-up");
        assert!(project.records.join("last-id").is_file());
        let origin = Origin {
            tool: "shell".into(),
            ..origin()
        };
        let tx = begin(state.path(), &cfg, &t, origin).await.unwrap();
        assert_eq!(tx.dir, waiting, "the first action took the waiting overlay");
        run_in(
            &tx.mount(),
            &format!("echo 1 >> '{}'", t.join("a.txt").display()),
        )
        .await;
        let observed = tx.finish(|_| false).await.unwrap().unwrap();
        let mut cp = observed.checkpoint;
        observed.project.apply_changeset(&mut cp).unwrap();
        assert_eq!(cp.id, "c1");
        assert_eq!(std::fs::read_to_string(t.join("a.txt")).unwrap(), "0\n1\n");
    }
}
