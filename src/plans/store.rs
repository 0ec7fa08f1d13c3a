//! The durable store of flight plans: one directory, two files per plan.
//!
//! `ID.json` is the record (the truth); `ID.org` is its rendering, for
//! people and for Emacs to open. Both are written atomically (temporary
//! file, fsync, rename, fsync of the directory) before anyone is asked, so a
//! plan survives Emacs or the daemon going away.
//!
//! Each state has exactly one writer, enforced by marker files created with
//! `create_new` (which only one process can win):
//! - `ID.decided`: whoever creates it records the person's decision on a
//!   pending plan; a second decider is told the plan is already decided.
//! - `ID.lock`: whoever creates it runs the approved plan (or abandons it).
//!   It is never removed, so an approved plan begins at most once, even
//!   across processes and daemon restarts.
//! - `ID.reported`: the model of the plan's session knows how it ended
//!   (so a later turn is not told again).
//!
//! At daemon start, [`PlanStore::recover`] turns plans caught mid-run into
//! `Interrupted` (never re-run automatically) and hands back the approved
//! plans that never began and the pending ones to announce again.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::parse::{parse_edited, PlanParseError};
use super::render::render;
use super::{is_valid_plan_id, FlightPlan, PlanDecision, PlanResult, PlanStatus};
use crate::action::Action;
use crate::gates::known_values::ValueMatcher;
use crate::util::fs::Atomic;
use crate::util::time::now_rfc3339;

/// How long a decider waits for a concurrent decider to finish writing.
const DECIDE_WAIT: Duration = Duration::from_secs(2);
/// A `decided` marker on a still-pending plan older than this was left by a
/// decider that died before writing the record: it may be broken.
const ABANDONED_MARKER_AGE: Duration = Duration::from_secs(30);

/// Why an edited action may not be recorded (what a decision's `check`
/// answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditDenied {
    /// The gates deny it: their reason.
    #[error("{0}")]
    Gates(String),
    /// No gates are at hand to judge an edit, so none is taken.
    #[error("no gates are at hand to judge the edit")]
    NoGates,
}

/// What the store could not do. Every variant says enough for a person.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no flight plan with id `{0}`")]
    NotFound(String),
    #[error("`{0}` is not a flight plan id (they look like fp-0123456789ab)")]
    InvalidId(String),
    #[error("flight plan {0} already exists")]
    AlreadyExists(String),
    #[error("{path}: unreadable flight plan record: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("flight plan {id} is stale and was not run: {reason}")]
    Stale { id: String, reason: String },
    #[error("this flight plan was already decided (it is {0})")]
    AlreadyDecided(PlanStatus),
    #[error("flight plan {0} has already begun; it runs at most once")]
    AlreadyBegun(String),
    #[error("flight plan is {0}, not approved")]
    NotApproved(PlanStatus),
    #[error("flight plan is {0}, not executing")]
    NotExecuting(PlanStatus),
    #[error("the edited plan could not be read: {0}")]
    Parse(#[from] PlanParseError),
    #[error("the edited action was refused: {0}")]
    Refused(EditDenied),
    #[error("flight plan {0} is being decided by someone else right now; try again")]
    Busy(String),
}

fn io_err(path: &Path, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A record file that could not be read, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRecord {
    pub path: PathBuf,
    pub error: String,
}

impl std::fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

/// Every readable plan (sorted by creation) and every unreadable record.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub plans: Vec<FlightPlan>,
    pub problems: Vec<CorruptRecord>,
}

/// The result of a person's decision.
#[derive(Debug, Clone)]
pub struct DecisionOutcome {
    /// The plan as now stored.
    pub plan: FlightPlan,
    pub approved: bool,
    /// The action that will run if approved: the edited one after an edit.
    /// The caller must gate it again before running when `edited` is true.
    pub action: Action,
    /// Whether the person changed the action.
    pub edited: bool,
}

/// What [`PlanStore::recover`] found at daemon start.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Plans that were running (or claimed) when the daemon died, now
    /// `Interrupted`. Tell the person; never re-run them automatically.
    pub interrupted: Vec<FlightPlan>,
    /// Approved plans that never began: run each once (through
    /// [`PlanStore::begin_execution`]).
    pub to_run: Vec<FlightPlan>,
    /// Plans still waiting for a person: announce them again.
    pub pending: Vec<FlightPlan>,
    /// Records that could not be read, skipped.
    pub problems: Vec<CorruptRecord>,
}

/// How old a temporary file in the store must be before recovery removes
/// it as a leftover.
pub const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(60);

/// Flight plans on disk. Cheap to construct; holds no open files, so any
/// number of instances (and processes) may share one directory.
#[derive(Debug, Clone)]
pub struct PlanStore {
    dir: PathBuf,
    values: Option<SecretValuesOf>,
}

/// The person's secret values known for a plan's working directory, which
/// what the store shows of a plan hides (see [`super::shown`]).
/// Looks the values up for a working directory (`None`: the last one).
pub type ValuesLookup = dyn Fn(Option<&Path>) -> Option<Arc<ValueMatcher>> + Send + Sync;

#[derive(Clone)]
pub struct SecretValuesOf(pub Arc<ValuesLookup>);

impl std::fmt::Debug for SecretValuesOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValuesOf(..)")
    }
}

impl PlanStore {
    /// A store in `dir` (created when the first plan is written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        PlanStore {
            dir: dir.into(),
            values: None,
        }
    }

    /// The same store, hiding the person's secret values from every
    /// rendering it writes or gives out, and putting them back into an
    /// edited action block it reads.
    pub fn hiding(mut self, values: SecretValuesOf) -> Self {
        self.values = Some(values);
        self
    }

    fn values_for(&self, plan: &FlightPlan) -> Option<Arc<ValueMatcher>> {
        self.values
            .as_ref()
            .and_then(|v| (v.0)(plan.cwd.as_deref()))
    }

    /// `plan`'s Org rendering as people and clients may read it: the
    /// person's secret values hidden (the record keeps them).
    pub fn rendering(&self, plan: &FlightPlan) -> String {
        super::shown::hide(&render(plan), self.values_for(plan).as_deref())
    }

    /// `text` about `plan` as people may read it: the person's secret
    /// values hidden, as in [`Self::rendering`].
    pub fn shown(&self, plan: &FlightPlan, text: &str) -> String {
        super::shown::hide(text, self.values_for(plan).as_deref())
    }

    /// The action a person approved from `org` (a rendering, maybe edited):
    /// an unedited block is the proposal itself; an edited one gets the
    /// values back that its rendering hid.
    fn read_back(&self, plan: &FlightPlan, org: &str) -> Result<Action, StoreError> {
        let action = parse_edited(plan, org)?;
        let Some(values) = self.values_for(plan) else {
            return Ok(action);
        };
        let shown = super::shown::hide(&render(plan), Some(&values));
        if parse_edited(plan, &shown).ok().as_ref() == Some(&action) {
            return Ok(plan.action.clone());
        }
        Ok(super::shown::restore(action, &plan.action, &values)?)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the record of plan `id` lives.
    pub fn json_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Where the Org rendering of plan `id` lives (for Emacs to open).
    pub fn org_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.org"))
    }

    fn lock_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.lock"))
    }

    fn decided_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.decided"))
    }

    /// Write a new plan durably (rendering first, then the record). Call
    /// this before asking anyone.
    pub fn create(&self, plan: &FlightPlan) -> Result<(), StoreError> {
        check_id(&plan.id)?;
        private_dir_builder()
            .create(&self.dir)
            .map_err(|e| io_err(&self.dir, e))?;
        let json_path = self.json_path(&plan.id);
        if json_path.exists() {
            return Err(StoreError::AlreadyExists(plan.id.clone()));
        }
        write_atomic(
            &self.org_path(&plan.id),
            self.rendering(plan).as_bytes(),
            true,
        )?;
        match write_atomic(&json_path, &record_bytes(plan), false) {
            Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                Err(StoreError::AlreadyExists(plan.id.clone()))
            }
            other => other,
        }
    }

    /// The stored plan `id`.
    pub fn load(&self, id: &str) -> Result<FlightPlan, StoreError> {
        check_id(id)?;
        let path = self.json_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(id.to_string()))
            }
            Err(e) => return Err(io_err(&path, e)),
        };
        let plan: FlightPlan = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if plan.id != id {
            return Err(StoreError::Corrupt {
                path,
                message: format!("the record is plan {}, not {id}", plan.id),
            });
        }
        Ok(plan)
    }

    /// Every plan and every unreadable record. A missing directory is an
    /// empty store.
    pub fn scan(&self) -> Result<Scan, StoreError> {
        let mut scan = Scan::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(scan),
            Err(e) => return Err(io_err(&self.dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_err(&self.dir, e))?;
            let path = entry.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            // Temporary files start with a dot and are never records.
            if id.starts_with('.') {
                continue;
            }
            if !is_valid_plan_id(id) {
                scan.problems.push(CorruptRecord {
                    path,
                    error: "file name is not a flight plan id".to_string(),
                });
                continue;
            }
            match self.load(id) {
                Ok(plan) => scan.plans.push(plan),
                Err(e) => scan.problems.push(CorruptRecord {
                    path,
                    error: match e {
                        StoreError::Corrupt { message, .. } => message,
                        other => other.to_string(),
                    },
                }),
            }
        }
        scan.plans
            .sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        scan.problems.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(scan)
    }

    /// Every readable plan, oldest first. Unreadable records are skipped
    /// and logged (use [`PlanStore::scan`] to get them).
    pub fn list(&self) -> Result<Vec<FlightPlan>, StoreError> {
        let scan = self.scan()?;
        for problem in &scan.problems {
            tracing::warn!(%problem, "skipping unreadable flight plan record");
        }
        Ok(scan.plans)
    }

    /// Plans waiting for a person, oldest first.
    pub fn pending(&self) -> Result<Vec<FlightPlan>, StoreError> {
        self.with_status(PlanStatus::Pending)
    }

    /// Approved plans that have not begun, oldest first: what a running
    /// daemon should pick up after a decision made elsewhere (the CLI).
    pub fn approved(&self) -> Result<Vec<FlightPlan>, StoreError> {
        Ok(self
            .with_status(PlanStatus::Approved)?
            .into_iter()
            .filter(|p| !self.lock_path(&p.id).exists())
            .collect())
    }

    fn with_status(&self, status: PlanStatus) -> Result<Vec<FlightPlan>, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|p| p.status == status)
            .collect())
    }

    /// Record a person's decision on pending plan `id`. When approving with
    /// `edited_org` (the plan's Org text after the person's edits), the
    /// action is read back from it; the caller must gate an edited action
    /// again before it runs (or use [`PlanStore::decide_checked`]).
    pub fn decide(
        &self,
        id: &str,
        approve: bool,
        edited_org: Option<&str>,
        by: &str,
        comment: Option<String>,
    ) -> Result<DecisionOutcome, StoreError> {
        self.decide_checked(id, approve, edited_org, by, comment, &|_| Ok(()))
    }

    /// [`PlanStore::decide`], but an approved action must first pass
    /// `check` (the gates, for an edited action): when it returns
    /// `Err(reason)` nothing is recorded, the plan stays pending and the
    /// error is [`StoreError::Refused`], so the person can edit again.
    pub fn decide_checked(
        &self,
        id: &str,
        approve: bool,
        edited_org: Option<&str>,
        by: &str,
        comment: Option<String>,
        check: &dyn Fn(&Action) -> Result<(), EditDenied>,
    ) -> Result<DecisionOutcome, StoreError> {
        let marker = self.decided_path(id);
        let mut broke_abandoned_marker = false;
        loop {
            let mut plan = self.load(id)?;
            if plan.status != PlanStatus::Pending {
                return Err(StoreError::AlreadyDecided(plan.status));
            }
            let action = if approve {
                check_hash(&plan)?;
                let action = match edited_org {
                    Some(org) => self.read_back(&plan, org)?,
                    None => plan.action.clone(),
                };
                check(&action).map_err(StoreError::Refused)?;
                action
            } else {
                plan.action.clone()
            };
            let edited = approve && action != plan.action;

            let at = now_rfc3339();
            let note = format!(
                "{} by {by} at {at}\n",
                if approve { "approved" } else { "rejected" }
            );
            match create_marker(&marker, note.as_bytes()) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    match self.wait_for_decision(id)? {
                        Some(status) => return Err(StoreError::AlreadyDecided(status)),
                        None if !broke_abandoned_marker
                            && is_older_than(&marker, ABANDONED_MARKER_AGE) =>
                        {
                            // The other decider died between its marker and
                            // its record: the decision never happened.
                            let _ = fs::remove_file(&marker);
                            broke_abandoned_marker = true;
                            continue;
                        }
                        None => return Err(StoreError::Busy(id.to_string())),
                    }
                }
                Err(e) => return Err(io_err(&marker, e)),
            }

            if edited {
                plan.original = Some(std::mem::replace(&mut plan.action, action.clone()));
                plan.hash = plan.content_hash();
            }
            plan.status = if approve {
                PlanStatus::Approved
            } else {
                PlanStatus::Rejected
            };
            plan.decision = Some(PlanDecision {
                approved: approve,
                by: by.to_string(),
                comment,
                at,
                edited,
            });
            if let Err(e) = self.save(&plan) {
                // Nothing was decided after all: let the next decider in.
                let _ = fs::remove_file(&marker);
                return Err(e);
            }
            return Ok(DecisionOutcome {
                approved: approve,
                action,
                edited,
                plan,
            });
        }
    }

    /// Wait briefly for a concurrent decider's record; `None` if the plan
    /// is still pending after the wait.
    fn wait_for_decision(&self, id: &str) -> Result<Option<PlanStatus>, StoreError> {
        let deadline = Instant::now() + DECIDE_WAIT;
        loop {
            let status = self.load(id)?.status;
            if status != PlanStatus::Pending {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Claim approved plan `id` for execution and return the action to run.
    /// Exactly one caller ever succeeds per plan: the claim is the creation
    /// of `ID.lock`, which is never removed. The action's hash is checked
    /// against the approved one first.
    pub fn begin_execution(&self, id: &str) -> Result<Action, StoreError> {
        let mut plan = self.claim(id)?;
        plan.status = PlanStatus::Executing;
        self.save(&plan)?;
        Ok(plan.action)
    }

    /// Mark approved plan `id` as denied without running it, for example
    /// because the gates refused the edited action at the last mile.
    pub fn abandon(&self, id: &str, reason: &str) -> Result<FlightPlan, StoreError> {
        let mut plan = self.claim(id)?;
        plan.status = PlanStatus::Denied;
        plan.result = Some(PlanResult::new(true, &format!("not run: {reason}")));
        self.save(&plan)?;
        Ok(plan)
    }

    fn claim(&self, id: &str) -> Result<FlightPlan, StoreError> {
        let plan = self.load(id)?;
        let lock = self.lock_path(id);
        if lock.exists() {
            return Err(StoreError::AlreadyBegun(id.to_string()));
        }
        if plan.status != PlanStatus::Approved {
            return Err(StoreError::NotApproved(plan.status));
        }
        if let Err(stale) = check_hash(&plan) {
            // A record changed behind our back never runs: claim it so no
            // one tries again, and say so in the plan.
            let note = format!("refused by process {}: {stale}\n", std::process::id());
            if create_marker(&lock, note.as_bytes()).is_ok() {
                let mut failed = plan;
                failed.status = PlanStatus::Denied;
                failed.result = Some(PlanResult::new(true, &format!("not run: {stale}")));
                self.save(&failed)?;
            }
            return Err(stale);
        }
        let note = format!(
            "claimed by process {} at {}\n",
            std::process::id(),
            now_rfc3339()
        );
        match create_marker(&lock, note.as_bytes()) {
            Ok(()) => Ok(plan),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                Err(StoreError::AlreadyBegun(id.to_string()))
            }
            Err(e) => Err(io_err(&lock, e)),
        }
    }

    /// Record how executing plan `id` ended: `Executed`, or `Failed` when
    /// `result.is_error`.
    pub fn finish_execution(&self, id: &str, result: PlanResult) -> Result<FlightPlan, StoreError> {
        let status = if result.is_error {
            PlanStatus::Failed
        } else {
            PlanStatus::Executed
        };
        self.finish_as(id, status, result)
    }

    /// Record that executing plan `id` ended as `status` (a final one:
    /// executed, failed, denied or interrupted).
    pub fn finish_as(
        &self,
        id: &str,
        status: PlanStatus,
        result: PlanResult,
    ) -> Result<FlightPlan, StoreError> {
        let mut plan = self.load(id)?;
        if plan.status != PlanStatus::Executing {
            return Err(StoreError::NotExecuting(plan.status));
        }
        plan.status = status;
        plan.result = Some(result);
        self.save(&plan)?;
        Ok(plan)
    }

    /// Record that the model of the plan's session was told how it ended
    /// (its turn heard the decision, or a later turn was told): the
    /// `ID.reported` marker, so the record itself is never rewritten for it.
    pub fn mark_reported(&self, id: &str) -> Result<(), StoreError> {
        check_id(id)?;
        let marker = self.reported_path(id);
        match create_marker(&marker, b"") {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(io_err(&marker, e)),
            _ => Ok(()),
        }
    }

    /// Whether the model of the plan's session was told how it ended.
    pub fn is_reported(&self, id: &str) -> bool {
        self.reported_path(id).exists()
    }

    fn reported_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.reported"))
    }

    /// The plans of session `session`, oldest first.
    pub fn of_session(&self, session: &str) -> Result<Vec<FlightPlan>, StoreError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|p| p.session_id == session)
            .collect())
    }

    /// Sort out the store at daemon start (call it before serving anyone).
    /// Plans that were running, or were claimed but never marked running,
    /// become `Interrupted`; approved plans that never began are returned to
    /// run once; pending plans are returned to announce again. Renderings
    /// that are missing or out of date are rewritten.
    pub fn recover(&self) -> Result<Recovery, StoreError> {
        self.recover_except(&|_| false)
    }

    /// [`PlanStore::recover`], leaving alone the plans `live` says a living
    /// daemon's turn owns (a second daemon on the same directory).
    pub fn recover_except(
        &self,
        live: &dyn Fn(&FlightPlan) -> bool,
    ) -> Result<Recovery, StoreError> {
        self.remove_stale_temps();
        let mut scan = self.scan()?;
        scan.plans.retain(|p| !live(p));
        let mut recovery = Recovery {
            problems: scan.problems,
            ..Recovery::default()
        };
        for problem in &recovery.problems {
            tracing::warn!(%problem, "skipping unreadable flight plan record");
        }
        for mut plan in scan.plans {
            // An approved plan with a claim was begun (or abandoned) by a
            // process that died before recording it: treat it as running.
            let was_running = plan.status == PlanStatus::Executing
                || (plan.status == PlanStatus::Approved && self.lock_path(&plan.id).exists());
            match plan.status {
                _ if was_running => {
                    plan.status = PlanStatus::Interrupted;
                    plan.result = Some(PlanResult::new(
                        true,
                        "interrupted: the daemon stopped while this plan was running, so its \
                         outcome is unknown. It was not run again; check its effects before \
                         asking for it again.",
                    ));
                    self.save(&plan)?;
                    recovery.interrupted.push(plan);
                }
                PlanStatus::Approved => {
                    self.refresh_rendering(&plan)?;
                    recovery.to_run.push(plan);
                }
                PlanStatus::Pending => {
                    self.refresh_rendering(&plan)?;
                    recovery.pending.push(plan);
                }
                _ => self.refresh_rendering(&plan)?,
            }
        }
        Ok(recovery)
    }

    /// Remove the temporary files of atomic writes that a killed process
    /// left behind (`tempfile`'s `.tmpXXXXXX`, and the older `.fp-*.tmp`).
    /// Only those older than [`STALE_TEMP`]: a living daemon's write in
    /// progress owns its file for milliseconds, never that long.
    fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let temp =
                name.starts_with(".tmp") || (name.starts_with(".fp-") && name.ends_with(".tmp"));
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= STALE_TEMP);
            if temp && stale {
                match fs::remove_file(entry.path()) {
                    Ok(()) => {
                        tracing::info!(file = %name, "removed a temporary file left by a killed daemon")
                    }
                    Err(e) => {
                        tracing::warn!(file = %name, "cannot remove a stale temporary file: {e}")
                    }
                }
            }
        }
    }

    fn refresh_rendering(&self, plan: &FlightPlan) -> Result<(), StoreError> {
        let path = self.org_path(&plan.id);
        let text = self.rendering(plan);
        if fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            write_atomic(&path, text.as_bytes(), true)?;
        }
        Ok(())
    }

    /// Write the record, then the rendering. The record is the truth: an
    /// error means the record was not written; a rendering that could not
    /// be updated is only logged (`recover` rewrites stale renderings).
    fn save(&self, plan: &FlightPlan) -> Result<(), StoreError> {
        write_atomic(&self.json_path(&plan.id), &record_bytes(plan), true)?;
        if let Err(error) = write_atomic(
            &self.org_path(&plan.id),
            self.rendering(plan).as_bytes(),
            true,
        ) {
            tracing::warn!(%error, plan = %plan.id, "could not update the plan's Org rendering");
        }
        Ok(())
    }
}

fn check_id(id: &str) -> Result<(), StoreError> {
    if is_valid_plan_id(id) {
        Ok(())
    } else {
        Err(StoreError::InvalidId(id.to_string()))
    }
}

/// Refuse a plan whose action (or working directory) no longer hashes to
/// what was recorded: the record was changed behind the store's back.
fn check_hash(plan: &FlightPlan) -> Result<(), StoreError> {
    let actual = plan.content_hash();
    if actual == plan.hash {
        Ok(())
    } else {
        Err(StoreError::Stale {
            id: plan.id.clone(),
            reason: format!(
                "its action and directory hash to {actual}, but {} was recorded; the record was changed \
                 outside passepartout",
                plan.hash
            ),
        })
    }
}

fn record_bytes(plan: &FlightPlan) -> Vec<u8> {
    // A FlightPlan is plain data with string keys: serialising cannot fail.
    let mut bytes = serde_json::to_vec_pretty(plan).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn create_marker(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = private_file_options().open(path)?;
    file.write_all(contents)?;
    file.sync_all()?;
    sync_dir(path)
}

/// Plans hold scripts and their parameters, which may be private: the
/// directory is created for its owner only (parents as usual).
fn private_dir_builder() -> fs::DirBuilder {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
}

/// Options for a new file only its owner can read, refusing to reuse a name.
fn private_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

fn is_older_than(path: &Path, age: Duration) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|elapsed| elapsed > age)
}

/// Write `bytes` to `path` so that readers see the old file or the new one,
/// never a mix, and the new one survives a crash once this returns.
/// `replace: false` refuses to overwrite an existing file.
fn write_atomic(path: &Path, bytes: &[u8], replace: bool) -> Result<(), StoreError> {
    let how = if replace {
        Atomic::DURABLE
    } else {
        Atomic::DURABLE_NEW
    };
    crate::util::fs::write_atomic(path, bytes, how).map_err(|e| io_err(path, e))
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn atomic_write_replaces_or_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"one", false).unwrap();
        let err = write_atomic(&path, b"two", false).unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"one");
        write_atomic(&path, b"three", true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("a.json")]);
    }
}
