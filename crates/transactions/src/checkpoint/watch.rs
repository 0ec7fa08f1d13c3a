//! Watching one action: the snapshot before it, the snapshot after it, and
//! the recorded checkpoint in between — with the working directory's lock
//! held the whole time so that the effect belongs to this action alone.

use std::path::Path;
use tokio::sync::OwnedMutexGuard;

use super::store::Snapshot;
use super::{lock, observable, Checkpoint, CheckpointConfig, CheckpointError, Origin, Project};
use crate::action::{Action, Effect};

/// The target of the actuator that applies held changes (never watched: it
/// is the change, already recorded).
pub const TARGET: &str = "checkpoint";

/// The `op` of an action that applies a held checkpoint.
pub const APPLY_OP: &str = "apply_checkpoint";

/// Whether an action can change the project: shell and skill scripts, file
/// writes, and Emacs (which may save project files).
pub fn watches(action: &Action) -> bool {
    action.target != TARGET
        && matches!(
            action.effect,
            Effect::Run { .. } | Effect::WriteFile { .. } | Effect::EvalElisp { .. }
        )
}

/// Why the effect of a finished action could not be observed.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the checkpoint task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Why an action that should be observed is not run.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    #[error(
        "not run: the working tree could not be checkpointed before the action ({0}); set \
         `[checkpoints] enabled = false` to run without checkpoints"
    )]
    NotCheckpointed(#[source] CheckpointError),
    #[error("not run: the checkpoint task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// An action under observation.
pub struct Watch {
    pub project: Project,
    cfg: CheckpointConfig,
    before: Snapshot,
    origin: Origin,
    guard: OwnedMutexGuard<()>,
    /// Said on the record (and so by `history`), e.g. [`LONG_RUNNING`].
    note: Option<&'static str>,
}

/// The note on the record of a long-running command: it ran without an
/// overlay, so its effect is the difference of two snapshots.
pub const LONG_RUNNING: &str =
    "long-running: ran without an overlay, its effect observed after the fact";

/// The result of a watch: the recorded change (if any) and the lock, still
/// held, so that a held change is rolled back before anything else runs.
pub struct Observed {
    pub project: Project,
    pub checkpoint: Checkpoint,
    pub guard: OwnedMutexGuard<()>,
}

/// Start watching. `Ok(None)`: this action or directory is not observed.
/// `Err`: it should be, but the snapshot failed (the caller refuses to run
/// the action: a change that cannot be undone is not made blind).
pub async fn begin(
    state_dir: &Path,
    cfg: &CheckpointConfig,
    cwd: &Path,
    action: &Action,
    origin: Origin,
) -> Result<Option<Watch>, BeginError> {
    if !cfg.enabled || !watches(action) || !observable(cwd) {
        return Ok(None);
    }
    let guard = lock(cwd).lock_owned().await;
    let cfg_kept = cfg.clone();
    let (state_dir, cwd, cfg) = (state_dir.to_path_buf(), cwd.to_path_buf(), cfg.clone());
    let opened = tokio::task::spawn_blocking(move || {
        let project = Project::open(&state_dir, &cwd, &cfg)?;
        let before = project.store.snapshot()?;
        Ok::<_, CheckpointError>((project, before))
    })
    .await;
    match opened {
        Ok(Ok((project, before))) => Ok(Some(Watch {
            project,
            cfg: cfg_kept,
            before,
            origin,
            guard,
            note: None,
        })),
        Ok(Err(e)) => Err(BeginError::NotCheckpointed(e)),
        Err(e) => Err(BeginError::Task(e)),
    }
}

impl Watch {
    /// Put `note` on the record this watch makes.
    pub fn mark(&mut self, note: &'static str) {
        self.note = Some(note);
    }

    /// Snapshot after the action and record what changed. `Ok(None)`:
    /// nothing changed (the lock is released).
    pub async fn finish(self) -> Result<Option<Observed>, WatchError> {
        let Watch {
            project,
            cfg,
            before,
            origin,
            guard,
            note,
        } = self;
        let p = project.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let after = p.store.snapshot()?;
            let mut recorded = p.record(&origin, &before, &after)?;
            match (&mut recorded, note) {
                (Some(cp), Some(note)) => {
                    cp.notes.push(note.to_string());
                    p.save(cp)?;
                }
                (Some(_), None) => {}
                // Every action gets a record, one that changed nothing too.
                (None, note) => p.note_unchanged(&origin, note.map(str::to_string)),
            }
            Ok::<_, CheckpointError>(recorded)
        })
        .await??;
        if let Some(cp) = &recorded {
            if Project::due_for_pruning(&cp.id, &cfg) {
                // Off the action's path: after this action releases the lock.
                let (p, cfg) = (project.clone(), cfg.clone());
                let cwd = project.cwd().to_path_buf();
                tokio::spawn(async move {
                    if let Err(e) = locked(&cwd, move || p.prune(&cfg)).await {
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

/// Run blocking checkpoint work for `cwd` under its lock.
pub async fn locked<T: Send + 'static>(
    cwd: &Path,
    work: impl FnOnce() -> Result<T, CheckpointError> + Send + 'static,
) -> Result<T, CheckpointError> {
    let _guard = lock(cwd).lock_owned().await;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| CheckpointError::Io {
            path: cwd.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?
}
