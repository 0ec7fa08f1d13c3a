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
use crate::agent::{AgentEnv, ApprovalOutcome, ApprovalRequest, NullSink};
use crate::audit::{AuditRecord, PlanOutcome};
use crate::gates::Decision;
use crate::modes::Mode;
use crate::plans::store::{PlanStore, StoreError};
use crate::plans::{render, FlightPlan, PlanResult, PlanStatus};
use crate::protocol as proto;
use crate::rpc::Outgoing;

use crate::state_lock::{self, StateLock};
use crate::util::sync::lock;

/// How often a waiting turn looks for decisions made from a terminal.
const STORE_POLL: Duration = Duration::from_millis(500);
/// How often the lock holder looks for approved plans with no live turn
/// (and a second daemon checks whether the lock became free).
pub const SWEEP: Duration = Duration::from_secs(1);

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

/// A plan as the editor sees it.
pub fn wire(plan: &FlightPlan) -> Value {
    json!({
        "planId": plan.id,
        "sessionId": plan.session_id,
        "toolCallId": plan.tool_call_id,
        "tool": plan.action.tool,
        "title": format!("{}: {}", plan.action.tool, plan.summary()),
        "status": plan.status.as_str(),
        "createdAt": plan.created_at,
        "hash": plan.hash,
        "org": render(plan),
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
        let store = PlanStore::new(crate::paths::StateDir::new(&state_dir).plans());
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
            let approved = match self.store.approved() {
                Ok(plans) => plans,
                Err(_) => continue,
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
                    self.out
                        .notify(proto::EXT_PLAN_OFFER, json!({ "plan": wire(&plan) }));
                }
            }
            Err(e) => tracing::error!("cannot list pending flight plans: {e}"),
        }
    }

    pub fn list(&self) -> Result<Value, String> {
        let plans = self.store.pending().map_err(|e| e.to_string())?;
        Ok(json!({ "plans": plans.iter().map(wire).collect::<Vec<_>>() }))
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
        self.out
            .notify(proto::EXT_PLAN_OFFER, json!({ "plan": wire(&plan) }));
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
                        self.env.record(AuditRecord::decision(&id, PlanOutcome::Rejected, "cancel", Some(why)));
                        self.forget(&outcome.plan);
                        self.resolved(&outcome.plan, "cancelled", None);
                    }
                    return ApprovalOutcome::Cancelled;
                }
                outcome = &mut rx => {
                    return outcome.unwrap_or(ApprovalOutcome::Cancelled);
                }
                _ = poll.tick() => {
                    // A decision from a terminal shows up only in the store.
                    if let Ok(p) = self.store.load(&id) {
                        if p.status != PlanStatus::Pending {
                            lock(&self.waiters).remove(&id);
                            if let Some(d) = &p.decision {
                                let verdict = if d.approved { PlanOutcome::Approved } else { PlanOutcome::Rejected };
                                self.env.record(AuditRecord::decision(&id, verdict, &d.by, d.comment.as_deref()));
                            }
                            if p.status == PlanStatus::Rejected {
                                self.forget(&p);
                                self.resolved(&p, "rejected", None);
                            }
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
        let cwd = plan.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
        let env = self.env.clone();
        let check = move |a: &Action| -> Result<(), String> {
            let judgement = env
                .toolsets
                .toolset(&cwd, "")
                .gates
                .evaluate(a, &env.gate_context(&cwd));
            if judgement.decision == Decision::Deny {
                Err(judgement.reason())
            } else {
                Ok(())
            }
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
        self.env.record(AuditRecord::decision(
            &outcome.plan.id,
            if outcome.approved {
                PlanOutcome::Approved
            } else {
                PlanOutcome::Rejected
            },
            by,
            params.comment.as_deref(),
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
            self.resolved(&outcome.plan, "rejected", None);
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
            None => {}
        }
        Ok(result)
    }

    /// The act stage is about to run an approved action.
    pub fn begin(&self, session: &str, call: &str, action: &Action) -> Result<(), String> {
        let Some(id) = lock(&self.by_call).get(&call_key(session, call)).cloned() else {
            return Ok(()); // approved through another channel (ACP permission)
        };
        let stored = self.store.begin_execution(&id).map_err(|e| e.to_string())?;
        if stored.content_hash() != action.content_hash() {
            let _ = self.store.finish_execution(
                &id,
                PlanResult::new(true, "not run: the action differs from the approved plan"),
            );
            return Err(
                "not run: the action about to run differs from the approved flight plan".into(),
            );
        }
        Ok(())
    }

    /// What became of an approved plan's action.
    pub fn settle(&self, session: &str, call: &str, status: &ActStatus, text: &str) {
        let Some(id) = lock(&self.by_call).remove(&call_key(session, call)) else {
            return;
        };
        let (word, stored) = match status {
            ActStatus::Executed => (
                "executed",
                self.store
                    .finish_execution(&id, PlanResult::new(false, text)),
            ),
            ActStatus::Failed | ActStatus::Cancelled => {
                let word = if *status == ActStatus::Failed {
                    "failed"
                } else {
                    "cancelled"
                };
                (
                    word,
                    self.store
                        .finish_execution(&id, PlanResult::new(true, text)),
                )
            }
            ActStatus::Denied | ActStatus::Rejected => ("denied", self.store.abandon(&id, text)),
        };
        match stored {
            Ok(plan) => self.resolved(&plan, word, Some(text)),
            Err(e) => {
                tracing::warn!(plan = %id, "could not record the outcome: {e}");
                if let Ok(plan) = self.store.load(&id) {
                    self.resolved(&plan, word, Some(text));
                }
            }
        }
    }

    /// A plan that will never run: drop its call mapping.
    fn forget(&self, plan: &FlightPlan) {
        lock(&self.by_call).remove(&call_key(&plan.session_id, &plan.tool_call_id));
    }

    fn resolved(&self, plan: &FlightPlan, status: &str, result: Option<&str>) {
        self.out.notify(
            proto::EXT_PLAN_RESOLVED,
            json!({
                "planId": plan.id,
                "sessionId": plan.session_id,
                "status": status,
                "result": result,
                "org": render(plan),
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
        let begin = |action: &Action| -> Result<(), String> {
            let (reached, result) = match self.store.begin_execution(&plan.id) {
                Ok(stored) if stored.content_hash() == action.content_hash() => {
                    (Guard::Won, Ok(()))
                }
                Ok(_) => {
                    let why = "not run: the action differs from the approved plan";
                    let _ = self
                        .store
                        .finish_execution(&plan.id, PlanResult::new(true, why));
                    (Guard::Differs, Err(why.to_string()))
                }
                Err(e) => (Guard::Taken, Err(format!("not run: {e}"))),
            };
            *lock(&guard) = Some(reached);
            result
        };
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
            approved_by: plan.decision.as_ref().map(|d| d.by.clone()),
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
                    self.resolved(&p, "denied", Some(&text));
                }
                return;
            }
            Some(Guard::Differs) => {
                if let Ok(p) = self.store.load(&plan.id) {
                    self.resolved(&p, "denied", Some(&text));
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
        let is_error = acted.status != ActStatus::Executed;
        match self
            .store
            .finish_execution(&plan.id, PlanResult::new(is_error, &text))
        {
            Ok(p) => self.resolved(
                &p,
                if is_error { "failed" } else { "executed" },
                Some(&text),
            ),
            Err(e) => tracing::error!(plan = %plan.id, "could not record the result: {e}"),
        }
    }

    /// The plan id of a live turn's call, for its audit record.
    pub fn plan_of(&self, session: &str, call: &str) -> Option<String> {
        lock(&self.by_call).get(&call_key(session, call)).cloned()
    }
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
