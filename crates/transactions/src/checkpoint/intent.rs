//! The intent log: an apply or an undo that the process doing it did not
//! live to finish is finished, or reversed, by the next one.
//!
//! Before the first file of the project moves, the record the apply or
//! undo will save is written, with the process that does it, to
//! `<store>/intents/<id>.json` and made durable (file and directory
//! `fsync`). Its steps are the record's own `(path, before, after)`
//! changes, whose contents are blobs of the store already: the pre-images
//! and the new contents. Once the record is saved (and its data flushed),
//! the intent is removed — that is its outcome. An intent left behind by
//! a process that is gone is recovered ([`recover`]): every path is still
//! at its before-state or already at its after-state (each file is
//! renamed into place whole), so the apply is *rolled forward* when every
//! content still to write is in the store, else *rolled back* from the
//! pre-images; the record is saved with what happened, and the report is
//! kept for whoever can show it ([`take_reports`]).
//!
//! A surviving intent whose record is already saved is simply removed:
//! recovery never applies or records anything twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::store::{Entry, Store};
use super::Project;
use super::{changeset, txn, Checkpoint, CheckpointConfig, CheckpointError, CheckpointStatus};

/// What an intent does to the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A changeset or held change going into the project.
    Apply,
    /// An undo (of one record or of a turn's).
    Undo,
}

/// One intent: what is about to change in the project, and who does it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Intent {
    pub direction: Direction,
    /// The record saved when it is done; its changes are the steps
    /// (`old` is what each path holds before, `new` what it holds after).
    pub record: Checkpoint,
    /// An undo: the records it reverts (marked undone when it is done).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undoes: Vec<String>,
    /// An apply: the record was saved as held before (a person approved
    /// it); rolled back, it stays held, still to be decided.
    #[serde(default)]
    pub held: bool,
    /// The process doing it, and when that process started (clock ticks
    /// since boot): a pid reused by another process is not taken for it.
    pub pid: u32,
    #[serde(default)]
    pub pid_start: Option<u64>,
    pub started: String,
}

/// What recovery did with one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every step finished: the change is in the project and recorded.
    RolledForward,
    /// Every step reversed: the project is as it was before.
    RolledBack,
    /// Neither could be completed; what is left is in the message.
    Left(String),
}

/// The report of one recovered intent.
#[derive(Debug, Clone)]
pub struct Recovered {
    pub direction: Direction,
    /// The record the intent would have saved (an undo's own record).
    pub id: String,
    /// Steps that were done when the process died, of all steps.
    pub done: usize,
    pub total: usize,
    pub outcome: Outcome,
    /// The record as saved by recovery (for the audit log).
    pub record: Option<Checkpoint>,
    pub cwd: PathBuf,
}

impl Recovered {
    /// One line for the person: `c7 was interrupted at 1,699/5,000 files
    /// and was rolled back`. The reason of a failure may quote a project
    /// path, so control characters are shown, never sent to a terminal.
    pub fn message(&self) -> String {
        let what = match self.direction {
            Direction::Apply => self.id.clone(),
            Direction::Undo => format!("{} (an undo)", self.id),
        };
        let end = match &self.outcome {
            Outcome::RolledForward => "was rolled forward (finished)".to_string(),
            Outcome::RolledBack => "was rolled back".to_string(),
            Outcome::Left(why) => format!("could not be finished nor reversed: {why}"),
        };
        let line = format!(
            "{what} was interrupted at {}/{} files and {end}",
            thousands(self.done),
            thousands(self.total)
        );
        crate::util::terminal::escape_line(&line).into_owned()
    }
}

/// `1699` as `1,699`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Reports at most kept for [`take_reports`].
const MAX_REPORTS: usize = 64;

fn reports() -> std::sync::MutexGuard<'static, Vec<Recovered>> {
    static REPORTS: OnceLock<Mutex<Vec<Recovered>>> = OnceLock::new();
    REPORTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The recoveries of this process not yet shown, oldest first.
pub fn take_reports() -> Vec<Recovered> {
    std::mem::take(&mut *reports())
}

/// The recoveries of this process in `cwd` not yet shown (a session
/// opening there shows them).
pub fn take_reports_for(cwd: &Path) -> Vec<Recovered> {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let want = canonical(cwd);
    let mut kept = reports();
    let (mine, rest): (Vec<_>, Vec<_>) = kept.drain(..).partition(|r| canonical(&r.cwd) == want);
    *kept = rest;
    mine
}

/// When process `pid` started (field 22 of `/proc/PID/stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it follow the last `)`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that wrote `intent` is still running (it is then
/// doing the work itself).
fn writer_alive(intent: &Intent) -> bool {
    match (intent.pid_start, start_time(intent.pid)) {
        (Some(then), Some(now)) => then == now,
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<store>/intents`.
pub fn dir(store_dir: &Path) -> PathBuf {
    store_dir.join("intents")
}

impl Intent {
    /// An intent of this process for `record`.
    pub fn new(direction: Direction, record: &Checkpoint, undoes: Vec<String>, held: bool) -> Self {
        let pid = std::process::id();
        Intent {
            direction,
            record: record.clone(),
            undoes,
            held,
            pid,
            pid_start: start_time(pid),
            started: crate::util::time::now_rfc3339(),
        }
    }

    /// Write it durably: the file and its directory entry are on disk
    /// before this returns, so no file of the project moves without it.
    pub fn write(&self, store_dir: &Path) -> Result<Written, CheckpointError> {
        let dir = dir(store_dir);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(format!("{}.json", self.record.id));
        let text = serde_json::to_vec(self).map_err(|e| CheckpointError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::util::fs::write_atomic(&path, &text, crate::util::fs::Atomic::DURABLE)
            .map_err(io(&path))?;
        Ok(Written { path })
    }

    /// `(path, before, after)` of each step.
    fn steps(&self) -> Vec<(String, Option<Entry>, Option<Entry>)> {
        self.record.forward()
    }
}

/// An intent on disk, waiting for its outcome.
#[must_use = "an intent is removed once its record is saved"]
pub struct Written {
    path: PathBuf,
}

impl Written {
    /// Done: its record is saved and flushed. Removed without a flush of
    /// its own — should the removal be lost, recovery finds the record
    /// saved and only removes the intent.
    pub fn done(self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!("intent {} not removed: {e}", self.path.display());
        }
    }
}

/// Recover every intent in every store of `state_dir` (at daemon start):
/// each store names its project (`worktree`), each intent its record's
/// directory.
pub fn recover_all(state_dir: &Path, cfg: &CheckpointConfig) -> Vec<Recovered> {
    let root = crate::paths::StateDir::new(state_dir).checkpoints();
    let Ok(stores) = std::fs::read_dir(&root) else {
        return vec![];
    };
    let mut out = Vec::new();
    for store in stores.flatten() {
        let intents = dir(&store.path());
        let Ok(mut entries) = std::fs::read_dir(&intents) else {
            continue;
        };
        let first = entries.find_map(|e| {
            let e = e.ok()?;
            let name = e.file_name();
            name.to_string_lossy().ends_with(".json").then(|| e.path())
        });
        let Some(first) = first else { continue };
        let cwd = match read(&first) {
            Ok(intent) => intent.record.cwd,
            Err(e) => {
                tracing::warn!("{e}");
                continue;
            }
        };
        match Project::open_unrecovered(state_dir, &cwd, cfg) {
            Ok(p) if p.store.dir() == store.path() => out.extend(recover(&p)),
            Ok(_) => tracing::warn!(
                "intents in {} name {}, whose store is elsewhere: left",
                intents.display(),
                cwd.display()
            ),
            Err(e) => tracing::warn!("intents in {}: {e}", intents.display()),
        }
    }
    out
}

fn read(path: &Path) -> Result<Intent, CheckpointError> {
    let text = std::fs::read(path).map_err(io(path))?;
    serde_json::from_slice(&text).map_err(|e| CheckpointError::Record {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Finish or reverse every intent of `project` whose process is gone;
/// the reports are logged, kept for [`take_reports`] and returned. An
/// intent of a live process is its own to finish: left alone.
pub fn recover(project: &Project) -> Vec<Recovered> {
    let dir = dir(project.store.dir());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    if paths.is_empty() {
        return vec![];
    }
    paths.sort();
    // Two processes recovering at once (a daemon starting, a CLI command):
    // one at a time, each reading the intent again under the lock.
    let lock_path = dir.join("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .and_then(|f| {
            rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
            Ok(f)
        });
    let _lock = match lock {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("intents of {}: {e}", project.cwd().display());
            return vec![];
        }
    };
    let mut out = Vec::new();
    for path in paths {
        let intent = match read(&path) {
            Ok(i) => i,
            Err(CheckpointError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue; // finished meanwhile
            }
            Err(e) => {
                // Never half written (renamed into place whole): a file
                // that is not an intent is set aside, not guessed at.
                tracing::warn!("{e}: set aside");
                let _ = std::fs::rename(&path, path.with_extension("unreadable"));
                continue;
            }
        };
        if writer_alive(&intent) {
            continue;
        }
        match finish(project, &intent) {
            Ok(Some(report)) => {
                tracing::warn!(cwd = %project.cwd().display(), "recovery: {}", report.message());
                out.push(report);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(cwd = %project.cwd().display(), "recovery of {}: {e}", intent.record.id);
                out.push(Recovered {
                    direction: intent.direction,
                    id: intent.record.id.clone(),
                    done: 0,
                    total: intent.record.effect.changes.len(),
                    outcome: Outcome::Left(e.to_string()),
                    record: None,
                    cwd: project.cwd().to_path_buf(),
                });
            }
        }
        // Recovered once: what could not be done is in the report and the
        // record, and is not tried again at every start.
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!("intent {} not removed: {e}", path.display());
        }
    }
    let mut kept = reports();
    kept.extend(out.iter().cloned());
    let excess = kept.len().saturating_sub(MAX_REPORTS);
    kept.drain(..excess);
    out
}

/// Whether an entry is `want` (None: no file).
fn holds(now: &Option<Entry>, want: &Option<Entry>) -> bool {
    match (now, want) {
        (None, None) => true,
        (Some(a), Some(b)) if b.mode == "160000" => a.mode == "040000",
        (Some(a), Some(b)) => a.same_content(b),
        _ => false,
    }
}

/// Remove the temporaries the dead process may have left beside the
/// paths it was writing (`.NAME.passepartout-restore-PID`).
fn remove_temporaries(b: &super::beneath::Beneath, paths: &[&str], pid: u32) {
    for path in paths {
        let (parent, name) = match path.rsplit_once('/') {
            Some((p, n)) => (format!("{p}/"), n),
            None => (String::new(), *path),
        };
        let tmp = format!("{parent}.{name}.passepartout-restore-{pid}");
        if let Err(e) = b.remove(&tmp) {
            tracing::debug!("recovery: {tmp}: {e}");
        }
    }
}

/// Finish or reverse one intent. `Ok(None)`: it had finished (its record
/// is saved); only the intent was left.
fn finish(project: &Project, intent: &Intent) -> Result<Option<Recovered>, CheckpointError> {
    let id = &intent.record.id;
    let saved = project.load(id).ok();
    let recorded = match intent.direction {
        Direction::Apply => saved.is_some_and(|r| r.status != CheckpointStatus::Held),
        Direction::Undo => saved.is_some(),
    };
    let b = project.store.beneath()?;
    let mut touched: Vec<&str> = intent
        .record
        .effect
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    touched.extend(intent.record.passthrough.iter().map(|p| p.path.as_str()));
    // An undo also puts back the files its records wrote in ignored trees.
    let undone: Vec<Checkpoint> = intent
        .undoes
        .iter()
        .filter_map(|id| project.load(id).ok())
        .collect();
    touched.extend(
        undone
            .iter()
            .flat_map(|cp| cp.ignored_files().map(|p| p.path.as_str())),
    );
    remove_temporaries(&b, &touched, intent.pid);
    if recorded {
        if intent.direction == Direction::Undo {
            mark_undone(project, &intent.undoes, None)?;
        }
        return Ok(None);
    }
    let steps = intent.steps();
    let total = steps.len();
    // Where each path is now: done, still to do, or neither (someone
    // changed it since, or it cannot be read).
    let mut done = Vec::new();
    let mut todo = Vec::new();
    let mut neither = Vec::new();
    for step in &steps {
        let now = Store::current_beneath(&b, &step.0);
        match now {
            Ok(now) if holds(&now, &step.2) => done.push(step.clone()),
            Ok(now) if holds(&now, &step.1) => todo.push(step.clone()),
            // A folder where the change puts a file: the restore checks
            // that the change also removes all it holds.
            Ok(Some(e)) if e.mode == "040000" && step.1.is_none() => todo.push(step.clone()),
            Ok(_) => neither.push((step.0.clone(), "changed since".to_string())),
            Err(e) => neither.push((step.0.clone(), e.to_string())),
        }
    }
    let needed: Vec<&str> = todo
        .iter()
        .filter_map(|(_, _, after)| after.as_ref())
        .filter(|e| e.mode != "160000" && e.mode != "040000")
        .map(|e| e.oid.as_str())
        .collect();
    let stored = stored_all(&project.store, &needed);
    let forward = stored && project.store.restore_beneath(&b, &todo).is_ok();
    let outcome = if forward {
        Outcome::RolledForward
    } else {
        let back: Vec<_> = done
            .iter()
            .map(|(p, before, after)| (p.clone(), after.clone(), before.clone()))
            .collect();
        match project.store.restore_beneath(&b, &back) {
            Ok(()) => Outcome::RolledBack,
            Err(e) => Outcome::Left(format!(
                "{} of {total} files are as the change left them ({e})",
                done.len()
            )),
        }
    };
    let note = format!(
        "interrupted at {}/{} files (process {} ended); {} on recovery at {}",
        thousands(done.len()),
        thousands(total),
        intent.pid,
        match &outcome {
            Outcome::RolledForward => "rolled forward".to_string(),
            Outcome::RolledBack => "rolled back".to_string(),
            Outcome::Left(why) => format!("neither finished nor reversed: {why}"),
        },
        crate::util::time::now_rfc3339()
    );
    // What the project does not hold as the record says: a path someone
    // changed since, and — when neither way could be completed — the
    // steps still to do. Left out of the record, so it stays undoable.
    if let Outcome::Left(_) = &outcome {
        let still = "still as it was: recovery could not finish it".to_string();
        neither.extend(todo.iter().map(|(p, _, _)| (p.clone(), still.clone())));
    }
    let mut record = intent.record.clone();
    let saved = match (intent.direction, &outcome) {
        (Direction::Apply, Outcome::RolledForward | Outcome::Left(_)) => {
            let gone: std::collections::BTreeSet<&str> =
                neither.iter().map(|(p, _)| p.as_str()).collect();
            let (kept, lost): (Vec<_>, Vec<_>) = std::mem::take(&mut record.effect.changes)
                .into_iter()
                .partition(|c| !gone.contains(c.path.as_str()));
            record.effect.changes = kept;
            let why: BTreeMap<&str, &str> = neither
                .iter()
                .map(|(p, w)| (p.as_str(), w.as_str()))
                .collect();
            record
                .conflicts
                .extend(lost.into_iter().map(|c| changeset::Conflict {
                    why: format!(
                        "not applied: {} while the apply was interrupted",
                        why.get(c.path.as_str()).copied().unwrap_or("changed")
                    ),
                    path: c.path,
                    agent: c.new,
                }));
            if outcome == Outcome::RolledForward {
                pass_through_again(project, &b, &mut record);
            }
            record.status = CheckpointStatus::Applied;
            record.notes.push(note);
            project.save_durably(&record)?;
            txn::remove_dir_later(project.txn_dir(&record.id));
            Some(record)
        }
        (Direction::Apply, Outcome::RolledBack) => {
            record.status = if intent.held {
                CheckpointStatus::Held
            } else {
                CheckpointStatus::RolledBack
            };
            record.notes.push(note);
            project.save_durably(&record)?;
            if !intent.held {
                txn::remove_dir_later(project.txn_dir(&record.id));
            }
            Some(record)
        }
        (Direction::Undo, Outcome::RolledForward | Outcome::Left(_)) => {
            let gone: std::collections::BTreeSet<&str> =
                neither.iter().map(|(p, _)| p.as_str()).collect();
            record
                .effect
                .changes
                .retain(|c| !gone.contains(c.path.as_str()));
            if outcome == Outcome::RolledForward {
                for cp in &undone {
                    record.notes.extend(project.undo_passthrough(cp));
                }
            }
            record.notes.push(note);
            project.save_durably(&record)?;
            mark_undone(project, &intent.undoes, None)?;
            Some(record)
        }
        (Direction::Undo, Outcome::RolledBack) => {
            // The undone records stay applied, each saying so (the first
            // is the one audited).
            mark_undone(project, &intent.undoes, Some(&note))?;
            intent.undoes.first().and_then(|id| project.load(id).ok())
        }
    };
    Ok(Some(Recovered {
        direction: intent.direction,
        id: id.clone(),
        done: done.len(),
        total,
        outcome,
        record: saved,
        cwd: project.cwd().to_path_buf(),
    }))
}

/// Whether every blob is in the store, whole.
fn stored_all(store: &Store, oids: &[&str]) -> bool {
    if oids.is_empty() {
        return true;
    }
    match store.blobs(oids) {
        Ok(found) => oids.iter().all(|o| found.contains_key(*o)),
        // The store unreadable: nothing can be rolled forward.
        Err(_) => false,
    }
}

/// The unrecorded part of a changeset applied again from its upper layer
/// (written whole, or removed: doing it twice is doing it once).
fn pass_through_again(project: &Project, b: &super::beneath::Beneath, record: &mut Checkpoint) {
    if record.passthrough.is_empty() {
        return;
    }
    let upper = project.txn_dir(&record.id).join("upper");
    if !upper.is_dir() {
        record
            .notes
            .push("its unrecorded files were not applied: the upper layer is gone".into());
        return;
    }
    let mut failed = Vec::new();
    for p in &mut record.passthrough {
        match txn::pass_through(b, &upper, p) {
            Ok(written) => p.written = written,
            Err(e) => failed.push(format!("{}: {e}", p.path)),
        }
    }
    if !failed.is_empty() {
        record.reasons.push(format!(
            "not applied (unrecorded files): {}",
            failed.join("; ")
        ));
    }
}

/// Mark the records an undo reverted as undone (`note`: None), or, when
/// the undo was rolled back, keep them applied with `note`.
fn mark_undone(
    project: &Project,
    ids: &[String],
    note: Option<&str>,
) -> Result<(), CheckpointError> {
    for id in ids {
        let Ok(mut cp) = project.load(id) else {
            continue;
        };
        match note {
            None if cp.status == CheckpointStatus::Applied => {
                cp.status = CheckpointStatus::Undone;
                project.save_durably(&cp)?;
            }
            None => {}
            Some(note) => {
                cp.notes.push(format!("an undo of it was {note}"));
                project.save_durably(&cp)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::checkpoint::Origin;

    fn origin() -> Origin {
        Origin {
            session_id: "s".into(),
            tool_call_id: "t".into(),
            tool: "shell".into(),
            turn: Some("t1".into()),
        }
    }

    /// A project whose change (`c1`: ten files created, `a.txt` emptied,
    /// `big.bin` created and `old.bin` rewritten, whose 5 MB the
    /// in-process blob cache does not keep)
    /// is recorded and held: the project is as before it.
    fn held_change() -> (tempfile::TempDir, tempfile::TempDir, Project, Checkpoint) {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "a\n").unwrap();
        let pattern =
            |k: u64| -> Vec<u8> { (0..5_000_000u64).map(|i| (i * k % 251) as u8).collect() };
        std::fs::write(t.join("old.bin"), pattern(31)).unwrap();
        let p = Project::open(state.path(), t, &CheckpointConfig::default()).unwrap();
        let before = p.store.snapshot().unwrap();
        for i in 0..10 {
            std::fs::write(t.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        }
        std::fs::write(t.join("a.txt"), "").unwrap();
        std::fs::write(t.join("big.bin"), pattern(7919)).unwrap();
        std::fs::write(t.join("old.bin"), pattern(37)).unwrap();
        let after = p.store.snapshot().unwrap();
        let mut cp = p.record(&origin(), &before, &after).unwrap().unwrap();
        p.hold(&mut cp, vec!["held".into()]).unwrap();
        assert!(!t.join("f0.txt").exists());
        (state, tree, p, cp)
    }

    /// An intent as a process that is gone left it.
    fn left_by_a_dead_process(
        p: &Project,
        direction: Direction,
        cp: &Checkpoint,
        undoes: Vec<String>,
        held: bool,
    ) -> u32 {
        let mut intent = Intent::new(direction, cp, undoes, held);
        intent.pid_start = intent.pid_start.map(|s| s + 1);
        let _left = intent.write(p.store.dir()).unwrap();
        intent.pid
    }

    fn files(t: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(t)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_approved_apply_cut_short_is_rolled_forward_recorded_and_undoable() {
        let (_state, tree, p, cp) = held_change();
        let t = tree.path();
        let pid = left_by_a_dead_process(&p, Direction::Apply, &cp, vec![], true);
        // Killed after four files and a temporary beside the fifth.
        for i in 0..4 {
            std::fs::write(t.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        }
        std::fs::write(t.join(format!(".f4.txt.passepartout-restore-{pid}")), "").unwrap();
        let reports = recover(&p);
        assert_eq!(reports.len(), 1, "{reports:?}");
        let r = &reports[0];
        assert_eq!(r.outcome, Outcome::RolledForward);
        assert_eq!((r.done, r.total), (4, 13));
        assert_eq!(
            r.message(),
            "c1 was interrupted at 4/13 files and was rolled forward (finished)"
        );
        assert_eq!(std::fs::read_to_string(t.join("f9.txt")).unwrap(), "9\n");
        assert_eq!(std::fs::read(t.join("a.txt")).unwrap(), b"");
        assert!(
            !files(t).iter().any(|f| f.contains("passepartout-restore")),
            "{:?}",
            files(t)
        );
        let saved = p.load("c1").unwrap();
        assert_eq!(saved.status, CheckpointStatus::Applied);
        assert!(
            saved.summary().contains("interrupted at 4/13 files"),
            "{}",
            saved.summary()
        );
        assert!(std::fs::read_dir(dir(p.store.dir()))
            .unwrap()
            .flatten()
            .all(|e| e.file_name() == "lock"));
        // Recovered once: a second look finds nothing.
        assert!(recover(&p).is_empty());
        p.undo("c1", &origin()).unwrap();
        assert_eq!(files(t), ["a.txt", "old.bin"]);
        assert_eq!(std::fs::read(t.join("a.txt")).unwrap(), b"a\n");
    }

    #[test]
    fn an_apply_whose_new_content_is_lost_is_rolled_back_and_stays_decidable() {
        let (_state, tree, p, cp) = held_change();
        let t = tree.path();
        left_by_a_dead_process(&p, Direction::Apply, &cp, vec![], true);
        for i in 0..6 {
            std::fs::write(t.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        }
        lose_blob(&p, &cp, "big.bin", true);
        let reports = recover(&p);
        assert_eq!(reports[0].outcome, Outcome::RolledBack, "{reports:?}");
        assert_eq!(files(t), ["a.txt", "old.bin"]);
        assert_eq!(std::fs::read(t.join("a.txt")).unwrap(), b"a\n");
        let saved = p.load("c1").unwrap();
        assert_eq!(saved.status, CheckpointStatus::Held);
        assert!(
            saved.summary().contains("rolled back"),
            "{}",
            saved.summary()
        );
    }

    /// Lose the new (else the old) content of `path` from the store.
    fn lose_blob(p: &Project, cp: &Checkpoint, path: &str, new: bool) {
        let c = cp.effect.changes.iter().find(|c| c.path == path).unwrap();
        let entry = if new { &c.new } else { &c.old };
        let oid = &entry.as_ref().unwrap().oid;
        std::fs::remove_file(p.store.objects().join(&oid[..2]).join(&oid[2..])).unwrap();
    }

    #[test]
    fn a_direct_apply_rolled_back_is_recorded_as_such_not_undoable() {
        let (_state, tree, p, cp) = held_change();
        let t = tree.path();
        left_by_a_dead_process(&p, Direction::Apply, &cp, vec![], false);
        std::fs::write(t.join("f0.txt"), "0\n").unwrap();
        lose_blob(&p, &cp, "big.bin", true);
        assert_eq!(recover(&p)[0].outcome, Outcome::RolledBack);
        assert_eq!(files(t), ["a.txt", "old.bin"]);
        let saved = p.load("c1").unwrap();
        assert_eq!(saved.status, CheckpointStatus::RolledBack);
        assert!(p.undo("c1", &origin()).is_err());
        assert!(p.apply("c1").is_err());
    }

    #[test]
    fn an_undo_whose_pre_image_is_lost_is_rolled_back_and_its_record_stays_applied() {
        let (_state, tree, p, _) = held_change();
        let t = tree.path();
        let applied = p.apply("c1").unwrap();
        let effect = p.restore_effect(&applied.backward()).unwrap();
        let mut undo = p
            .new_checkpoint(&origin(), effect, CheckpointStatus::Applied, false)
            .unwrap();
        undo.undoes = Some("c1".into());
        left_by_a_dead_process(&p, Direction::Undo, &undo, vec!["c1".into()], false);
        // Killed after removing two files; the pre-image of `old.bin`
        // (what the undo writes back) is lost.
        std::fs::remove_file(t.join("f0.txt")).unwrap();
        std::fs::remove_file(t.join("f1.txt")).unwrap();
        lose_blob(&p, &applied, "old.bin", false);
        assert_eq!(recover(&p)[0].outcome, Outcome::RolledBack);
        assert_eq!(files(t).len(), 13);
        let c1 = p.load("c1").unwrap();
        assert_eq!(c1.status, CheckpointStatus::Applied);
        assert!(
            c1.summary().contains("an undo of it was"),
            "{}",
            c1.summary()
        );
        assert!(
            p.load(&undo.id).is_err(),
            "no record of an undo that did not happen"
        );
    }

    #[test]
    fn an_intent_whose_record_was_saved_is_only_removed() {
        let (_state, tree, p, _) = held_change();
        let cp = p.apply("c1").unwrap();
        left_by_a_dead_process(&p, Direction::Apply, &cp, vec![], true);
        assert!(recover(&p).is_empty());
        assert_eq!(p.load("c1").unwrap().notes, Vec::<String>::new());
        assert_eq!(files(tree.path()).len(), 13);
    }

    #[test]
    fn an_undo_cut_short_is_finished_and_recorded() {
        let (_state, tree, p, _) = held_change();
        let t = tree.path();
        let applied = p.apply("c1").unwrap();
        let changes = applied.backward();
        let effect = p.restore_effect(&changes).unwrap();
        let mut undo = p
            .new_checkpoint(&origin(), effect, CheckpointStatus::Applied, false)
            .unwrap();
        undo.undoes = Some("c1".into());
        left_by_a_dead_process(&p, Direction::Undo, &undo, vec!["c1".into()], false);
        for i in 0..3 {
            std::fs::remove_file(t.join(format!("f{i}.txt"))).unwrap();
        }
        let reports = recover(&p);
        assert_eq!(reports[0].outcome, Outcome::RolledForward, "{reports:?}");
        assert_eq!((reports[0].done, reports[0].total), (3, 13));
        assert_eq!(files(t), ["a.txt", "old.bin"]);
        assert_eq!(p.load("c1").unwrap().status, CheckpointStatus::Undone);
        let saved = p.load(&undo.id).unwrap();
        assert_eq!(saved.undoes.as_deref(), Some("c1"));
        // The undo is undoable (a redo).
        p.undo(&undo.id, &origin()).unwrap();
        assert_eq!(files(t).len(), 13);
    }

    #[test]
    fn a_reason_quoting_a_path_cannot_steer_the_terminal() {
        let r = Recovered {
            id: "c7".into(),
            direction: Direction::Apply,
            outcome: Outcome::Left("cannot restore evil\u{1b}[2Jname".into()),
            done: 1,
            total: 2,
            record: None,
            cwd: PathBuf::from("/p"),
        };
        let line = r.message();
        assert!(!line.contains('\u{1b}'), "{line}");
        assert!(
            line.starts_with("c7 was interrupted at 1/2 files"),
            "{line}"
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1699), "1,699");
        assert_eq!(thousands(5000), "5,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let start = start_time(me);
        assert!(start.is_some());
        let base = Intent {
            direction: Direction::Apply,
            record: serde_json::from_value(serde_json::json!({
                "id": "c1", "created_at": "", "session_id": "", "tool_call_id": "",
                "tool": "", "cwd": "/", "before": "", "after": "",
                "effect": {"changes": []}, "status": "held"
            }))
            .unwrap(),
            undoes: vec![],
            held: false,
            pid: me,
            pid_start: start,
            started: String::new(),
        };
        assert!(writer_alive(&base));
        let reused = Intent {
            pid_start: start.map(|s| s + 1),
            ..base.clone()
        };
        assert!(!writer_alive(&reused));
        let gone = Intent {
            pid: u32::MAX - 1,
            ..base
        };
        assert!(!writer_alive(&gone));
    }
}
