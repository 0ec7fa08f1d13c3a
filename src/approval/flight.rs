//! The flight desk: the daemon's side of flight plans.
//!
//! It writes a plan to the store *before* anyone is asked, offers it to the
//! editor (`_passepartout/plan/offer`), and waits for a decision from any
//! channel — the editor's `_passepartout/plan/decide`, or
//! `passepartout plans approve|reject` from a terminal (seen by polling the
//! store). A plan whose turn is gone (the daemon restarted) still runs,
//! exactly once, when approved. Every outcome is announced with
//! `_passepartout/plan/resolved`.
//!
//! One decider per state directory ([`crate::state_lock`]): only the daemon
//! holding `daemon.lock` recovers plans at start and runs approved plans
//! whose turn is gone; it also sweeps the store every [`SWEEP`] for plans
//! approved from a terminal. A second daemon on the same directory serves
//! the plans of its own turns only, and takes over when the holder exits.
//! A plan belongs to the daemon whose session made it (the session id ends
//! in that daemon's pid); while that daemon lives, no other runs the plan.
//!
//! When the editor goes away (end of input), waiting plans stay pending:
//! [`FlightDesk::shut_down`] ends the waits without deciding anything.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::agent::act::{execute_action, ActStatus, ExecContext, LastMile};
use crate::agent::{AgentEnv, ApprovalOutcome, ApprovalRequest, NotBegun, NullSink};
use crate::gates::{Decision, Judgement};
use crate::modes::Mode;
use crate::plans::evidence::{decision_record, outcome_note};
use crate::plans::store::{EditDenied, PlanStore, StoreError};
use crate::plans::{FlightPlan, PlanResult, PlanStatus};
use crate::protocol as proto;
use crate::rpc::Outgoing;

use crate::state_lock::{self, StateLock};
use crate::util::sync::lock;

/// How often a waiting turn looks for decisions made from a terminal.
const STORE_POLL: Duration = Duration::from_millis(500);
/// How often the lock holder looks for approved plans with no live turn
/// (and a second daemon checks whether the lock became free).
pub const SWEEP: Duration = Duration::from_secs(1);

/// How a prompt carrying the outcome of earlier flight plans begins.
pub const NEWS_HEADER: &str =
    "[passepartout] What became of earlier actions that waited for a person's approval:";

/// Plans told to the model per prompt, at most (the oldest first).
const NEWS_LIMIT: usize = 20;

/// How long `run` waits for another process to finish a plan it began.
const OUTCOME_WAIT: Duration = Duration::from_secs(60);
/// How long a daemon watches for the outcome of a plan its client approved
/// and another daemon runs.
const WATCH_LIMIT: Duration = Duration::from_secs(6 * 3600);

/// A live session's mode by session id (`None`: no such live session).
pub type ModeSource = Arc<dyn Fn(&str) -> Option<Mode> + Send + Sync>;

pub struct FlightDesk {
    env: Arc<AgentEnv>,
    out: Outgoing,
    /// The mode of the daemon's live sessions, for plans run later.
    modes: ModeSource,
    pub store: PlanStore,
    /// Live turns waiting for a decision, by plan id.
    waiters: Mutex<HashMap<String, oneshot::Sender<ApprovalOutcome>>>,
    /// Plan ids by `session/tool_call_id`, for begin/settle.
    by_call: Mutex<HashMap<String, String>>,
    /// The state directory's lock, when this daemon is its decider.
    lock: Mutex<Option<StateLock>>,
    /// Fired when the editor goes away: waits end, plans stay pending.
    shutdown: CancellationToken,
}

/// The pid of the daemon whose turn made `plan`.
fn owner_pid(plan: &FlightPlan) -> Option<u32> {
    plan.owner()
}

fn call_key(session: &str, call: &str) -> String {
    format!("{session}/{call}")
}

/// A plan as the editor sees it (`org`: its rendering as the store shows
/// it, the person's secret values hidden).
pub fn wire(plan: &FlightPlan, org: String) -> Value {
    json!({
        "planId": plan.id,
        "sessionId": plan.session_id,
        "toolCallId": plan.tool_call_id,
        "tool": plan.action.tool,
        "title": format!("{}: {}", plan.action.tool, plan.summary()),
        "status": plan.status.as_str(),
        "createdAt": plan.created_at,
        "hash": plan.hash,
        "org": org,
    })
}

/// Errors of `plan/decide`, with their JSON-RPC codes.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("{0}")]
    Refused(String),
    /// No plan with that id (ACP's "resource not found").
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadEdit(String),
}

impl FlightDesk {
    pub fn new(env: Arc<AgentEnv>, out: Outgoing, modes: ModeSource) -> Arc<FlightDesk> {
        let state_dir = env.config.state_dir();
        let store = PlanStore::new(crate::paths::StateDir::new(&state_dir).plans())
            .hiding(env.plan_values());
        let lock = match state_lock::try_acquire(&state_dir) {
            Ok(Some(lock)) => Some(lock),
            Ok(None) => {
                // Normal when two editors run: the log file, not stderr.
                tracing::warn!(
                    target: crate::logging::CLIENT_CAUSED,
                    "another daemon holds {}: this one runs only the plans of its own turns \
                     until that daemon exits",
                    crate::paths::StateDir::new(&state_dir)
                        .lock_file()
                        .display()
                );
                None
            }
            Err(e) => {
                tracing::error!("{e}; this daemon runs only the plans of its own turns");
                None
            }
        };
        Arc::new(FlightDesk {
            env,
            out,
            modes,
            store,
            waiters: Mutex::default(),
            by_call: Mutex::default(),
            lock: Mutex::new(lock),
            shutdown: CancellationToken::new(),
        })
    }

    /// A desk for `passepartout run`: no editor to offer plans to, never
    /// the state directory's decider (a daemon that starts meanwhile runs
    /// the plans it finds approved); it records decisions made on its
    /// terminal and runs its session's approved plans through
    /// [`FlightDesk::run_approved`].
    pub fn standalone(env: Arc<AgentEnv>) -> Arc<FlightDesk> {
        let state_dir = env.config.state_dir();
        let store = PlanStore::new(crate::paths::StateDir::new(&state_dir).plans())
            .hiding(env.plan_values());
        // Nobody reads the notifications: the terminal is told directly.
        let (out, _unread) = Outgoing::channel();
        Arc::new(FlightDesk {
            env,
            out,
            modes: Arc::new(|_| None),
            store,
            waiters: Mutex::default(),
            by_call: Mutex::default(),
            lock: Mutex::new(None),
            shutdown: CancellationToken::new(),
        })
    }

    /// Follow `plan` (decided elsewhere, for a live turn of this process)
    /// through `begin` and `settle`, as a plan offered by [`FlightDesk::ask`].
    pub fn track(&self, plan: &FlightPlan) {
        lock(&self.by_call).insert(
            call_key(&plan.session_id, &plan.tool_call_id),
            plan.id.clone(),
        );
    }

    /// Run approved `plan`, whose turn is gone, through the normal plan
    /// path (the last-mile check, the exactly-once guard, the actuator) and
    /// return it as it ended. When another process runs it (the guard was
    /// taken), wait up to [`OUTCOME_WAIT`] for that outcome.
    pub async fn run_approved(self: &Arc<Self>, plan: FlightPlan) -> Option<FlightPlan> {
        let id = plan.id.clone();
        self.clone().run_orphan(plan).await;
        self.wait_final(&id, OUTCOME_WAIT).await
    }

    /// Plan `id` once it is final, or as it is when `limit` has passed
    /// (`None`: it cannot be read).
    async fn wait_final(&self, id: &str, limit: Duration) -> Option<FlightPlan> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let plan = self.store.load(id);
            let now = tokio::time::Instant::now();
            match plan {
                Ok(p) if p.status.is_final() || now >= deadline => return Some(p),
                Err(e) if now >= deadline => {
                    tracing::warn!(plan = %id, "cannot read the plan: {e}");
                    return None;
                }
                _ => {}
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return self.store.load(id).ok(),
                _ = tokio::time::sleep(STORE_POLL) => {}
            }
        }
    }

    /// This client decided `id`, which another daemon (or a later sweep)
    /// runs: watch the store and tell the client how it ended.
    fn watch_outcome(self: &Arc<Self>, id: String) {
        let desk = self.clone();
        tokio::spawn(async move {
            let plan = desk.wait_final(&id, WATCH_LIMIT).await;
            if let Some(plan) = plan.filter(|p| p.status.is_final()) {
                let result = plan.result.as_ref().map(|r| r.output.clone());
                desk.resolved(&plan, result.as_deref());
            }
        });
    }

    /// `prompt`, preceded by what became of this session's flight plans
    /// whose turn was gone before their outcome (left pending by `run`,
    /// or decided after a daemon restart): the model then knows, instead
    /// of reading "interrupted" or "cancelled" in its history. A final
    /// outcome is told once; a plan still waiting is mentioned each turn.
    pub fn with_news(&self, session: &str, prompt: String) -> String {
        let Ok(plans) = self.store.of_session(session) else {
            return prompt;
        };
        let mut notes = String::new();
        let mut told = 0;
        let mut more = 0;
        for plan in plans {
            if self.store.is_reported(&plan.id) || lock(&self.waiters).contains_key(&plan.id) {
                continue;
            }
            if told == NEWS_LIMIT {
                more += 1;
                continue;
            }
            told += 1;
            notes.push_str(&outcome_note(&plan));
            if plan.status.is_final() {
                let _ = self.store.mark_reported(&plan.id);
            }
        }
        if more > 0 {
            notes.push_str(&format!(
                "- … and {more} more (limit {NEWS_LIMIT} per prompt; the next prompt tells them)\n"
            ));
        }
        if notes.is_empty() {
            return prompt;
        }
        format!("{NEWS_HEADER}\n{notes}\n{prompt}")
    }

    /// Whether this daemon is the state directory's decider.
    pub fn is_decider(&self) -> bool {
        lock(&self.lock).is_some()
    }

    /// The editor went away: end every wait without deciding (the plans
    /// stay pending for the next daemon or a terminal) and stop sweeping.
    pub fn shut_down(&self) {
        self.shutdown.cancel();
    }

    /// Whether a live turn (here or in another daemon) owns `plan`. A turn
    /// of this daemon is found by its wait, whatever the session id says (a
    /// session loaded from its journal keeps the id another daemon gave it).
    fn has_live_owner(&self, plan: &FlightPlan) -> bool {
        if lock(&self.waiters).contains_key(&plan.id)
            || lock(&self.by_call).values().any(|id| *id == plan.id)
        {
            return true;
        }
        match owner_pid(plan) {
            Some(pid) if pid != std::process::id() => state_lock::process_alive(pid),
            _ => false,
        }
    }

    /// At daemon start (the decider only): plans that were running when a
    /// daemon died are marked interrupted (never re-run); plans approved
    /// from a terminal while no daemon ran are run now, once. Then the
    /// sweep starts.
    pub fn recover(self: &Arc<Self>) {
        if self.is_decider() {
            self.recover_now();
        }
        let desk = self.clone();
        tokio::spawn(async move { desk.sweep().await });
    }

    /// Every [`SWEEP`]: take the lock over when it came free, and run
    /// approved plans that no live turn will run.
    async fn sweep(self: Arc<Self>) {
        let mut tick = tokio::time::interval(SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The store is read only when its directory changed (every write
        // is a rename into it) or the last sweep left work behind.
        let mut seen: Option<std::time::SystemTime> = None;
        let mut left_work = true;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !self.is_decider() {
                if let Ok(Some(taken)) = state_lock::try_acquire(&self.env.config.state_dir()) {
                    tracing::info!("the other daemon exited: this one is now the decider");
                    *lock(&self.lock) = Some(taken);
                    self.recover_now();
                }
                continue;
            }
            let changed = std::fs::metadata(self.store.dir())
                .and_then(|m| m.modified())
                .ok();
            if changed.is_some() && changed == seen && !left_work {
                continue;
            }
            seen = changed;
            let Ok(approved) = self.store.approved() else {
                continue;
            };
            left_work = !approved.is_empty();
            for plan in approved {
                if !self.has_live_owner(&plan) {
                    let desk = self.clone();
                    tokio::spawn(async move { desk.run_orphan(plan).await });
                }
            }
        }
    }

    fn recover_now(self: &Arc<Self>) {
        let recovery = match self.store.recover_except(&|p| self.has_live_owner(p)) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("cannot read the flight plans: {e}");
                return;
            }
        };
        for problem in &recovery.problems {
            tracing::warn!("skipped an unreadable flight plan: {problem:?}");
        }
        for plan in &recovery.interrupted {
            tracing::warn!(plan = %plan.id, "a flight plan was interrupted by a daemon crash; it will not be re-run");
        }
        for plan in recovery.to_run {
            let desk = self.clone();
            tokio::spawn(async move { desk.run_orphan(plan).await });
        }
    }

    /// Re-offer every pending plan (after `initialize`).
    pub fn offer_pending(&self) {
        match self.store.pending() {
            Ok(plans) => {
                for plan in plans {
                    let org = self.store.rendering(&plan);
                    self.out
                        .notify(proto::EXT_PLAN_OFFER, json!({ "plan": wire(&plan, org) }));
                }
            }
            Err(e) => tracing::error!("cannot list pending flight plans: {e}"),
        }
    }

    /// `_passepartout/plans/get`: one plan whatever its status, so that a
    /// client that saw it waiting learns how it ended while it was away.
    pub fn get(&self, id: &str) -> Result<Value, StoreError> {
        let plan = self.store.load(id)?;
        Ok(json!({ "plan": wire(&plan, self.store.rendering(&plan)) }))
    }

    pub fn list(&self) -> Result<Value, StoreError> {
        let plans = self.store.pending()?;
        let wired = plans
            .iter()
            .map(|plan| wire(plan, self.store.rendering(plan)))
            .collect::<Vec<_>>();
        Ok(json!({ "plans": wired }))
    }

    /// Write the plan, offer it, and wait for a decision.
    pub async fn ask(
        &self,
        request: ApprovalRequest,
        cancel: CancellationToken,
    ) -> ApprovalOutcome {
        let mut plan = FlightPlan::new(
            request.session_id.clone(),
            request.tool_call_id.clone(),
            request.explanation,
            request.action,
            request.trace,
        );
        plan = plan.in_cwd(request.cwd);
        // The person sees what a file change does before deciding (the
        // same diff an ACP client gets in its permission request).
        if let Some(cwd) = &plan.cwd {
            let max = self.env.config.checkpoints.max_diff_bytes;
            plan.changes = super::acp::proposed_unified_diff(cwd, &plan.action, max);
        }
        if let Err(e) = self.store.create(&plan) {
            // Fail closed: a plan that could not be saved is not offered.
            return ApprovalOutcome::Rejected {
                comment: Some(format!("the flight plan could not be saved: {e}")),
                by: "daemon".into(),
            };
        }
        let id = plan.id.clone();
        let (tx, mut rx) = oneshot::channel();
        lock(&self.waiters).insert(id.clone(), tx);
        lock(&self.by_call).insert(call_key(&plan.session_id, &plan.tool_call_id), id.clone());
        tracing::info!(plan = %id, "flight plan offered");
        let org = self.store.rendering(&plan);
        self.out
            .notify(proto::EXT_PLAN_OFFER, json!({ "plan": wire(&plan, org) }));
        let mut poll = tokio::time::interval(STORE_POLL);
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => {
                    // The editor went away: the plan stays pending, to be
                    // offered again by the next daemon (and decidable from
                    // a terminal meanwhile).
                    lock(&self.waiters).remove(&id);
                    self.forget(&plan);
                    tracing::info!(plan = %id, "shutting down: the flight plan stays pending");
                    return ApprovalOutcome::Cancelled;
                }
                _ = cancel.cancelled() => {
                    lock(&self.waiters).remove(&id);
                    let why = "the turn was cancelled";
                    if let Ok(outcome) = self.store.decide(&id, false, None, "cancel", Some(why.into())) {
                        self.env.record(decision_record(&outcome.plan, None));
                        self.forget(&outcome.plan);
                        self.resolved(&outcome.plan, None);
                    }
                    // The turn hears "cancelled", the plan says rejected
                    // by `cancel`: nothing more to tell its model later.
                    let _ = self.store.mark_reported(&id);
                    return ApprovalOutcome::Cancelled;
                }
                outcome = &mut rx => {
                    let _ = self.store.mark_reported(&id);
                    return outcome.unwrap_or(ApprovalOutcome::Cancelled);
                }
                _ = poll.tick() => {
                    // A decision from a terminal shows up only in the store.
                    if let Ok(p) = self.store.load(&id) {
                        if p.status != PlanStatus::Pending {
                            lock(&self.waiters).remove(&id);
                            // The deciding command recorded its decision
                            // (with the evidence) in the audit log.
                            if p.status == PlanStatus::Rejected {
                                self.forget(&p);
                                self.resolved(&p, None);
                            }
                            let _ = self.store.mark_reported(&id);
                            return outcome_of(&p);
                        }
                    }
                }
            }
        }
    }

    /// `_passepartout/plan/decide` (and the same logic for any channel that
    /// goes through the daemon).
    pub fn decide(
        self: &Arc<Self>,
        params: proto::PlanDecideParams,
        by: &str,
    ) -> Result<Value, DecideError> {
        let approve = params.decision == proto::PlanVerdict::Approve;
        let plan = self.store.load(&params.plan_id).map_err(|e| match e {
            StoreError::NotFound(_) => DecideError::NotFound(e.to_string()),
            other => DecideError::Refused(other.to_string()),
        })?;
        let cwd = plan.cwd.unwrap_or_else(|| PathBuf::from("/"));
        let env = self.env.clone();
        let edit_judgement: Mutex<Option<Judgement>> = Mutex::new(None);
        let check = |a: &Action| -> Result<(), EditDenied> {
            let judgement = judge_edit(&env, &cwd, a);
            let verdict = if judgement.decision == Decision::Deny {
                Err(EditDenied::Gates(judgement.reason()))
            } else {
                Ok(())
            };
            *lock(&edit_judgement) = Some(judgement);
            verdict
        };
        let outcome = self
            .store
            .decide_checked(
                &params.plan_id,
                approve,
                params.org.as_deref(),
                by,
                params.comment.clone(),
                &check,
            )
            .map_err(|e| match e {
                StoreError::Parse(p) => DecideError::BadEdit(p.to_string()),
                other => DecideError::Refused(other.to_string()),
            })?;
        let judgement = lock(&edit_judgement).take();
        self.env.record(decision_record(
            &outcome.plan,
            judgement.as_ref().filter(|_| outcome.edited),
        ));
        let waiter = lock(&self.waiters).remove(&outcome.plan.id);
        let live_elsewhere = waiter.is_none() && self.has_live_owner(&outcome.plan);
        let runs = if !outcome.approved {
            "never"
        } else if waiter.is_some() {
            "now: its turn is waiting"
        } else if live_elsewhere {
            "now: the daemon whose turn made it runs it"
        } else if self.is_decider() {
            "now: its turn is gone, so this daemon runs it"
        } else {
            "soon: the daemon holding the state directory runs it"
        };
        let result = json!({
            "planId": outcome.plan.id,
            "status": if outcome.approved { "approved" } else { "rejected" },
            "edited": outcome.edited,
            "runs": runs,
        });
        let decided = if outcome.approved {
            ApprovalOutcome::Approved {
                hash: outcome.action.content_hash(),
                action: Box::new(outcome.action.clone()),
                by: by.to_string(),
            }
        } else {
            self.forget(&outcome.plan);
            self.resolved(&outcome.plan, None);
            ApprovalOutcome::Rejected {
                comment: params.comment,
                by: by.to_string(),
            }
        };
        match waiter {
            Some(tx) => {
                let _ = tx.send(decided);
            }
            None if outcome.approved && !live_elsewhere && self.is_decider() => {
                // Its turn is gone (the daemon restarted): run it here, once.
                let desk = self.clone();
                let plan = outcome.plan;
                tokio::spawn(async move { desk.run_orphan(plan).await });
            }
            // Another daemon (or this one's next sweep, as the decider)
            // runs it: this client still hears how it ended.
            None if outcome.approved => self.watch_outcome(outcome.plan.id),
            None => {}
        }
        Ok(result)
    }

    /// The act stage is about to run an approved action.
    pub fn begin(&self, session: &str, call: &str, action: &Action) -> Result<(), NotBegun> {
        let Some(id) = lock(&self.by_call).get(&call_key(session, call)).cloned() else {
            return Ok(()); // approved through another channel (ACP permission)
        };
        let stored = self.store.begin_execution(&id).map_err(NotBegun::Store)?;
        if stored.content_hash() != action.content_hash() {
            let _ = self.store.finish_as(
                &id,
                PlanStatus::Denied,
                PlanResult::new(true, "not run: the action differs from the approved plan"),
            );
            return Err(NotBegun::Differs);
        }
        Ok(())
    }

    /// What became of an approved plan's action: recorded in the plan (as
    /// the status the lifecycle names: a cancelled run is `interrupted`, a
    /// refusal `denied`), then announced with that same status.
    pub fn settle(&self, session: &str, call: &str, status: &ActStatus, text: &str) {
        let Some(id) = lock(&self.by_call).remove(&call_key(session, call)) else {
            return;
        };
        match self.close(&id, status, text) {
            Ok(plan) => self.resolved(&plan, Some(text)),
            Err(e) => {
                tracing::warn!(plan = %id, "could not record the outcome: {e}");
                if let Ok(plan) = self.store.load(&id) {
                    self.resolved(&plan, Some(text));
                }
            }
        }
    }

    /// Record the end of plan `id` (approved or executing) as `status`.
    fn close(&self, id: &str, status: &ActStatus, text: &str) -> Result<FlightPlan, StoreError> {
        let ended = match status {
            ActStatus::Executed => PlanStatus::Executed,
            ActStatus::Failed => PlanStatus::Failed,
            ActStatus::Cancelled => PlanStatus::Interrupted,
            ActStatus::Denied | ActStatus::Rejected => PlanStatus::Denied,
        };
        let stored = self.store.load(id)?;
        match stored.status {
            // Refused before the exactly-once guard: it never began.
            PlanStatus::Approved => self.store.abandon(id, text),
            PlanStatus::Executing => self.store.finish_as(
                id,
                ended,
                PlanResult::new(ended != PlanStatus::Executed, text),
            ),
            _ => Ok(stored),
        }
    }

    /// A plan that will never run: drop its call mapping.
    fn forget(&self, plan: &FlightPlan) {
        lock(&self.by_call).remove(&call_key(&plan.session_id, &plan.tool_call_id));
    }

    /// Announce how `plan` ended, with the status its record holds (the
    /// plan file, `plans show` and the audit log say the same).
    fn resolved(&self, plan: &FlightPlan, result: Option<&str>) {
        self.out.notify(
            proto::EXT_PLAN_RESOLVED,
            json!({
                "planId": plan.id,
                "sessionId": plan.session_id,
                "status": plan.status.as_str(),
                "result": result,
                "org": self.store.rendering(plan),
            }),
        );
    }

    /// The mode of `session` now: the live session's, else the last one
    /// its journal recorded, else the configured default (as a session
    /// loaded again would have it).
    fn session_mode(&self, session: &str) -> Mode {
        if let Some(mode) = (self.modes)(session) {
            return mode;
        }
        let recorded = (self.env.sessions.as_ref()).and_then(|s| s.load(session).ok()?.mode);
        recorded.unwrap_or(self.env.config.default_mode)
    }

    /// Run an approved plan that has no live turn, through the same
    /// `execute_action` as a live turn: its last-mile check (hash, gates
    /// and the session's mode now, the exactly-once guard), the actuator,
    /// the records; then the announcement.
    async fn run_orphan(self: Arc<Self>, plan: FlightPlan) {
        let Some(cwd) = plan.cwd.clone() else {
            let _ = self
                .store
                .abandon(&plan.id, "the plan records no working directory");
            return;
        };
        let toolset = self.env.toolsets.toolset(&cwd, "");
        // What the person saw: a record whose action or directory no longer
        // matches its hash hands on the recorded hash, which cannot match.
        let approved_hash = match outcome_of(&plan) {
            ApprovalOutcome::Approved { hash, .. } => hash,
            _ => plan.hash.clone(),
        };
        // Whether the exactly-once guard was reached, and how it went.
        let guard: Mutex<Option<Guard>> = Mutex::new(None);
        let begin = |action: &Action| -> Result<(), NotBegun> {
            let (reached, result) = match self.store.begin_execution(&plan.id) {
                Ok(stored) if stored.content_hash() == action.content_hash() => {
                    (Guard::Won, Ok(()))
                }
                Ok(_) => {
                    let why = NotBegun::DiffersFromRecord;
                    let _ = self.store.finish_as(
                        &plan.id,
                        PlanStatus::Denied,
                        PlanResult::new(true, &why.to_string()),
                    );
                    (Guard::Differs, Err(why))
                }
                Err(e) => (Guard::Taken, Err(NotBegun::Taken(e))),
            };
            *lock(&guard) = Some(reached);
            result
        };
        // A plan the `registries` question asked for: approving it granted
        // the session, as in a live turn; asked for nothing else, it is no
        // person's approval of the command (masked secrets stay masked).
        let registries = crate::agent::act::REGISTRIES_QUESTION;
        let asked: Vec<&crate::gates::Verdict> = (plan.trace.iter())
            .filter(|v| v.decision != crate::gates::Decision::Allow)
            .collect();
        if asked.iter().any(|v| v.gate == registries) {
            crate::sandbox::registry_proxy::set_session_grant(
                &plan.session_id,
                crate::sandbox::registry_proxy::SessionGrant::Granted,
            );
        }
        let only_registries = !asked.is_empty() && asked.iter().all(|v| v.gate == registries);
        // Nobody watches it live; the resolution announces it.
        let sink = NullSink;
        let x = ExecContext {
            env: &self.env,
            session_id: &plan.session_id,
            cwd: &cwd,
            plan_id: Some(&plan.id),
            sink: &sink,
            sink_handle: None,
            cancel: CancellationToken::new(),
            approved_by: (plan.decision.as_ref())
                .filter(|_| !only_registries)
                .map(|d| d.by.clone()),
            last_mile: LastMile {
                approved_hash: &approved_hash,
                toolset: &toolset,
                mode: self.session_mode(&plan.session_id),
                recorded: None,
                begin: Some(&begin),
            },
            limits: (toolset.tools.get(&plan.action.tool))
                .map_or_else(Default::default, |t| t.planner.limits()),
            live: None,
        };
        let acted = execute_action(&plan.tool_call_id, &plan.action, &x).await;
        let text = acted.observation.text;
        let reached = lock(&guard).take();
        match reached {
            // Refused at the last mile, before the guard: it never runs now.
            None => {
                if let Ok(p) = self.store.abandon(&plan.id, &text) {
                    self.resolved(&p, Some(&text));
                }
                return;
            }
            Some(Guard::Differs) => {
                if let Ok(p) = self.store.load(&plan.id) {
                    self.resolved(&p, Some(&text));
                }
                return;
            }
            // Another runner has it (or had it): its outcome is theirs.
            Some(Guard::Taken) => {
                tracing::info!(plan = %plan.id, "{text}");
                return;
            }
            Some(Guard::Won) => {}
        }
        match self.close(&plan.id, &acted.status, &text) {
            Ok(p) => self.resolved(&p, Some(&text)),
            Err(e) => tracing::error!(plan = %plan.id, "could not record the result: {e}"),
        }
    }

    /// The plan id of a live turn's call, for its audit record.
    pub fn plan_of(&self, session: &str, call: &str) -> Option<String> {
        lock(&self.by_call).get(&call_key(session, call)).cloned()
    }
}

/// The gates' judgement of an action a person edited, in the plan's
/// directory (the same check for every client that can edit a plan).
pub fn judge_edit(env: &AgentEnv, cwd: &std::path::Path, action: &Action) -> Judgement {
    env.toolsets
        .toolset(cwd, "")
        .gates
        .evaluate(action, &env.gate_context(cwd))
}

/// How a plan run after its turn fared at the exactly-once guard.
enum Guard {
    /// This runner marked it executing: it runs here.
    Won,
    /// The stored action is not the one about to run: closed as failed.
    Differs,
    /// Another runner began it first (or it is no longer approved).
    Taken,
}

/// The approval outcome a decided plan stands for.
fn outcome_of(plan: &FlightPlan) -> ApprovalOutcome {
    let by = plan
        .decision
        .as_ref()
        .map(|d| d.by.clone())
        .unwrap_or_else(|| "unknown".into());
    match plan.status {
        PlanStatus::Approved => ApprovalOutcome::Approved {
            action: Box::new(plan.action.clone()),
            // The turn compares action hashes (its cwd is the session's);
            // a record whose action or directory no longer matches its
            // hash hands on the recorded hash, which then cannot match.
            hash: if plan.content_hash() == plan.hash {
                plan.action.content_hash()
            } else {
                plan.hash.clone()
            },
            by,
        },
        PlanStatus::Rejected => ApprovalOutcome::Rejected {
            comment: plan.decision.as_ref().and_then(|d| d.comment.clone()),
            by,
        },
        other => ApprovalOutcome::Rejected {
            comment: Some(format!("the plan is {}", other.as_str())),
            by,
        },
    }
}
