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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::beneath::{Beneath, Node};
use super::changeset::{self, Passthrough, ReadConfig};
use super::watch::{Observed, WatchError};
use super::{lock, CheckpointConfig, CheckpointError, CheckpointStatus, Origin, Project};
use crate::sandbox::overlay::{self, OverlayMount};

/// An action about to run into an overlay.
pub struct Transaction {
    project: Project,
    cfg: CheckpointConfig,
    dir: PathBuf,
    mount: OverlayMount,
    started_ns: i64,
    origin: Origin,
}

/// Prepare a transaction for an action in `cwd`. `Err`: why overlays
/// cannot be used here (the probe's reason and fix).
pub async fn begin(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    origin: Origin,
) -> Result<Transaction, String> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let (state_dir, cwd_owned, cfg_owned) =
        (state_dir.to_path_buf(), cwd.to_path_buf(), cfg.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        let project =
            Project::open_shared(&state_dir, &cwd_owned, &cfg_owned).map_err(|e| e.to_string())?;
        let root = project.store.dir().join("txn");
        overlay::probe(&root)?;
        if let Some(why) = overlay::unmountable(project.cwd()) {
            return Err(format!("overlays cannot be used here: {why}"));
        }
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("run-{}-{n}", std::process::id()));
        let (upper, work) = (dir.join("upper"), dir.join("work"));
        make_private_dirs(&dir, &[&upper, &work])?;
        let project_path = project
            .cwd()
            .canonicalize()
            .unwrap_or_else(|_| project.cwd().to_path_buf());
        Ok::<_, String>((
            project,
            dir,
            OverlayMount {
                project: project_path,
                upper,
                work,
                not_before_ns: 0,
            },
        ))
    })
    .await
    .map_err(|e| format!("the transaction could not be prepared: {e}"))?;
    let (project, dir, mut mount) =
        prepared.map_err(|e| format!("not run: the action could not be given an overlay: {e}"))?;
    // The command starts only once the coarse clock has moved past this
    // (the fine clock now: a save just before may carry a fine-grained
    // ctime, Linux's multigrain timestamps): a file with a later ctime
    // changed after the command could have read it (a conflict), one with
    // this ctime or older before (not one).
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_else(|_| changeset::coarse_now_ns());
    mount.not_before_ns = started_ns;
    Ok(Transaction {
        project,
        cfg: cfg.clone(),
        dir,
        mount,
        started_ns,
        origin,
    })
}

/// Make `dir` (its parents as needed) and the directories in `inside` it,
/// each private (0700): three `mkdir`s on the usual path, where the
/// general helper checked and fixed each mode again.
fn make_private_dirs(dir: &Path, inside: &[&Path]) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    let fail = |d: &Path, e: std::io::Error| format!("{}: {e}", d.display());
    // `run-<pid>-<n>` is new: its parent (`txn/`, private) exists after
    // the probe, so a plain mkdir suffices.
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(fail(dir, e));
        }
        crate::paths::create_private_dir(dir).map_err(|e| fail(dir, e))?;
    }
    for d in inside {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(|e| fail(d, e))?;
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
        let guard = lock(self.project.cwd()).lock_owned().await;
        let Transaction {
            project,
            cfg,
            dir,
            mount,
            started_ns,
            origin,
        } = self;
        let p = project.clone();
        let cfg_for_pruning = cfg.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let read_cfg = ReadConfig {
                untracked_cap: cfg.untracked_cap_bytes,
                precious: &cfg.precious,
                started_ns,
            };
            let read = changeset::read(&mount.upper, &p.store, &read_cfg);
            let cs = match read {
                Ok(cs) => cs,
                Err(e) => {
                    remove_dir(&dir);
                    return Err(CheckpointError::from(e));
                }
            };
            if cs.is_empty() {
                remove_dir(&dir);
                return Ok(None);
            }
            let judged_writes = cs
                .passthrough
                .iter()
                .any(|pass| !pass.remove && !pass.dir && needs_judging(&pass.path));
            let undoable = cs.passthrough.iter().any(|pass| {
                pass.ignored_file() || (pass.dir && pass.remove && !is_git(&pass.path))
            });
            if cs.effect.is_empty()
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
                remove_dir(&dir);
                return Ok(None);
            }
            let mut cp = p.new_checkpoint(&origin, cs.effect, CheckpointStatus::Held, true)?;
            cp.conflicts = cs.conflicts;
            cp.passthrough = cs.passthrough;
            cp.dropped = cs.dropped;
            let kept = p.txn_dir(&cp.id);
            if let Err(source) = std::fs::rename(&dir, &kept) {
                remove_dir(&dir);
                return Err(CheckpointError::Io { path: kept, source });
            }
            Ok(Some(cp))
        })
        .await??;
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

/// A path of the project's own repository (never undone: checkpoints do
/// not cover `.git`).
fn is_git(path: &str) -> bool {
    path == ".git" || path.starts_with(".git/")
}

/// Apply one unrecorded path from the upper layer: write it (a file or a
/// link, its mode kept) or remove it (a file, or a directory and all it
/// holds), beneath the project. `Ok(Some(oid))`: the blob id of the bytes
/// written (undo removes the file only while it still holds them).
pub fn pass_through(b: &Beneath, upper: &Path, p: &Passthrough) -> Result<Option<String>, String> {
    if p.remove && p.dir {
        // A folder the command removed: its files went first; one that
        // still holds something (put there by someone else) stays.
        b.remove_empty_dir(&p.path);
        return Ok(None);
    }
    if p.remove {
        return match b.node(&p.path).map_err(|e| e.to_string())? {
            Some(Node::Dir) => {
                let mut files = b.files_under(&p.path).map_err(|e| e.to_string())?;
                files.sort();
                let mut dirs: Vec<String> = vec![p.path.clone()];
                for f in &files {
                    b.remove(f).map_err(|e| e.to_string())?;
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
            Some(_) => b.remove(&p.path).map(|()| None).map_err(|e| e.to_string()),
            None => Ok(None),
        };
    }
    let abs = upper.join(&p.path);
    let meta = std::fs::symlink_metadata(&abs).map_err(|e| e.to_string())?;
    if p.dir {
        use std::os::unix::fs::MetadataExt;
        return b
            .make_dir(&p.path, meta.mode() & 0o7777)
            .map(|()| None)
            .map_err(|e| e.to_string());
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&abs).map_err(|e| e.to_string())?;
        let target = target.as_os_str().as_encoded_bytes();
        b.put(&p.path, target, 0, true).map_err(|e| e.to_string())?;
        Ok(Some(super::store::blob_id(target)))
    } else {
        use std::os::unix::fs::MetadataExt;
        let bytes = std::fs::read(&abs).map_err(|e| e.to_string())?;
        b.put(&p.path, &bytes, meta.mode() & 0o7777, false)
            .map_err(|e| e.to_string())?;
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
) -> Result<Option<FileWrite>, String> {
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
            path.clone()
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
        // A path the project cannot resolve plainly (a link on the way):
        // the files actuator refuses it itself; observe as before.
        let before = match changeset::pre_image(&project.store, &rel) {
            Err(super::StoreError::Beneath(_)) => return Ok(None),
            other => other?,
        };
        Ok::<_, CheckpointError>(Some((project, rel, before)))
    })
    .await
    .map_err(|e| format!("not run: the checkpoint task failed: {e}"))?;
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
        Err(e) => Err(format!(
            "not run: the file could not be checkpointed before the write ({e}); \
             set `[checkpoints] enabled = false` to run without checkpoints"
        )),
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
            let Some(effect) = changeset::one_path(&p.store, &cfg, &rel, before, after) else {
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
}
