//! Act: one proposed tool call, from the model's arguments to an observation.
//!
//! plan (tool → concrete action) → gates → a person, when a gate asks →
//! last-mile check of the exact action about to run → the actuator chosen by
//! the action's target. Every failure on the way becomes an observation the
//! model reads next round; nothing here ends the turn except cancellation.
//!
//! The last two steps are `execute_action`, which the flight desk also
//! calls for a plan approved after its turn is gone: the last-mile check is
//! made there once (`last_mile`), with the session's mode as it is now, and
//! its verdict goes to the audit log.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::actuators::ActContext;
use crate::audit::AuditRecord;
use crate::checkpoint::{self, watch};
use crate::gates::engine::Judgement;
use crate::gates::Decision;
use crate::llm::ToolCall;
use crate::modes::Mode;
use crate::protocol::acp;
use crate::tools::PlanContext;

use super::perceive::Observation;
use super::{AgentEnv, ApprovalOutcome, ApprovalRequest, Approver, Session, Toolset, TurnSink};

/// What happened to a call, for the trace and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActStatus {
    Executed,
    Failed,
    Denied,
    Rejected,
    Cancelled,
}

pub struct Acted {
    pub observation: Observation,
    pub status: ActStatus,
}

/// Everything `act` needs besides the call.
pub struct ActEnv<'a> {
    pub env: &'a AgentEnv,
    pub session: &'a Session,
    pub toolset: &'a Toolset,
    pub sink: &'a dyn TurnSink,
    pub approver: &'a dyn Approver,
    pub cancel: CancellationToken,
    /// The text the model wrote before its calls: its own explanation.
    pub explanation: &'a str,
    /// The sink again, owned, for actuators that speak to the person.
    pub sink_handle: Arc<dyn TurnSink>,
    /// The turn these calls belong to (`checkpoint::new_turn_id`), so that
    /// a whole turn's changes can be undone together.
    pub turn_id: &'a str,
}

pub async fn act(call: &ToolCall, a: &ActEnv<'_>) -> Acted {
    let id = call.id.clone();
    let Some(tool) = a.toolset.tools.get(&call.name) else {
        let names: Vec<&str> = a.toolset.tools.names().collect();
        let text = format!(
            "unknown tool `{}`; available tools: {}",
            call.name,
            names.join(", ")
        );
        announce(a, call, None);
        return finish(a.sink, &id, text, ActStatus::Failed);
    };
    announce(a, call, Some(tool.kind));

    if let Value::String(raw) = &call.arguments {
        let text = format!("the arguments are not valid JSON: {raw}");
        return finish(a.sink, &id, text, ActStatus::Failed);
    }
    let action = match tool.plan(
        &call.arguments,
        &PlanContext {
            cwd: a.session.cwd.clone(),
        },
    ) {
        Ok(action) => action,
        Err(e) => return finish(a.sink, &id, e.to_string(), ActStatus::Failed),
    };
    a.env
        .record(AuditRecord::proposed(&a.session.id, &id, &action));

    step("planned");
    let gate_ctx = a.env.gate_context(&a.session.cwd);
    step("gate context");
    let judgement = judge(a, &action, &gate_ctx);
    // The once-per-session question for the `registries` grant joins the
    // gates' verdicts (the strictest still wins).
    let registries_ask = registries_question(a, &action);
    let judgement = match &registries_ask {
        Some(v) => {
            let mut trace = judgement.trace;
            trace.push(v.clone());
            Judgement::from_trace(trace)
        }
        None => judgement,
    };
    // Nothing but that question asks: a rejection declines the grant (the
    // command still runs, without network), and an approval is not a
    // person's approval of the command itself (masked secrets stay
    // masked).
    let only_registries = registries_ask.is_some()
        && judgement
            .trace
            .iter()
            .filter(|v| v.decision != Decision::Allow)
            .all(|v| v.gate == REGISTRIES_QUESTION);
    a.env
        .record(AuditRecord::verdict(&a.session.id, &id, &judgement));
    tracing::info!(session = %a.session.id, tool = %call.name, decision = %judgement.decision, "gated");
    let mut approved_by = None;
    let mut asked = false;
    let mut edited = false;
    let (approved, approved_hash) = match judgement.decision {
        Decision::Deny => return refuse(a, &id, denial(&judgement), ActStatus::Denied),
        Decision::Allow => {
            let hash = action.content_hash();
            (action, hash)
        }
        Decision::Ask => {
            super::report_status(a.sink, a.session, "waiting");
            let request = ApprovalRequest {
                session_id: a.session.id.clone(),
                cwd: a.session.cwd.clone(),
                tool_call_id: id.clone(),
                explanation: a.explanation.to_string(),
                action: action.clone(),
                trace: judgement.trace.clone(),
            };
            let outcome = a.approver.approve(request, a.cancel.clone()).await;
            super::report_status(a.sink, a.session, "acting");
            match outcome {
                ApprovalOutcome::Cancelled => {
                    return finish(a.sink, &id, "cancelled".into(), ActStatus::Cancelled)
                }
                ApprovalOutcome::Rejected { .. } if only_registries => {
                    a.session.answer_registries(false);
                    let hash = action.content_hash();
                    (action, hash)
                }
                ApprovalOutcome::Rejected { comment, by } => {
                    let text = match comment.filter(|c| !c.trim().is_empty()) {
                        Some(c) => format!("the person ({by}) rejected this action: {c}"),
                        None => format!("the person ({by}) rejected this action"),
                    };
                    return refuse(a, &id, text, ActStatus::Rejected);
                }
                ApprovalOutcome::Approved {
                    action: approved,
                    hash,
                    by,
                } => {
                    if registries_ask.is_some() {
                        a.session.answer_registries(true);
                    }
                    if !only_registries {
                        approved_by = Some(by);
                    }
                    let approved = *approved;
                    edited = approved != action;
                    if edited {
                        // An edited action is judged again; the person's
                        // approval covers "ask" but never overrides "deny".
                        let again = judge(a, &approved, &gate_ctx);
                        if again.decision == Decision::Deny {
                            return settled(
                                a,
                                &id,
                                refuse(a, &id, denial(&again), ActStatus::Denied),
                            );
                        }
                    }
                    asked = true;
                    (approved, hash)
                }
            }
        }
    };

    // The last mile (hash, gates and mode once more, the desk's
    // exactly-once guard) is `execute_action`'s, as for a plan run later.
    let plan_id = if asked {
        a.approver.plan_id(&a.session.id, &id)
    } else {
        None
    };
    let begin_desk = |action: &Action| a.approver.begin(&a.session.id, &id, action);
    let x = ExecContext {
        env: a.env,
        session_id: &a.session.id,
        cwd: &a.session.cwd,
        plan_id: plan_id.as_deref(),
        sink: a.sink,
        sink_handle: Some(a.sink_handle.clone()),
        cancel: a.cancel.clone(),
        approved_by,
        last_mile: LastMile {
            approved_hash: &approved_hash,
            toolset: a.toolset,
            mode: a.session.mode(),
            // Unedited, the verdict on this exact action is in the log
            // already (above); an edited action's is not.
            recorded: (!edited).then_some(&judgement),
            begin: if asked { Some(&begin_desk) } else { None },
        },
        limits: (a.toolset.tools.get(&approved.tool))
            .map_or_else(Default::default, |t| t.planner.limits()),
        live: Some(Live { act: a, asked }),
    };
    let outcome = execute_action(&id, &approved, &x).await;
    // Only an action that ran: a refusal already says why nothing did.
    let outcome = if edited && matches!(outcome.status, ActStatus::Executed | ActStatus::Failed) {
        told_edited(outcome, &approved)
    } else {
        outcome
    };
    if asked {
        settled(a, &id, outcome)
    } else {
        outcome
    }
}

/// The name the `registries` question goes by in traces.
pub(crate) const REGISTRIES_QUESTION: &str = "registries";

/// The once-per-session question for the `registries` grant: asked before
/// the first installer (`actuators/installers.toml`) that a sandboxed
/// command without network runs, in a session where a person can answer,
/// when config does not grant it and the session has not answered yet.
/// Nobody to ask: no question (the installer fails at once and its result
/// names the config key, `actuators::shell`).
fn registries_question(a: &ActEnv<'_>, action: &Action) -> Option<crate::gates::Verdict> {
    use crate::sandbox::registry_proxy as proxy;
    let crate::action::Effect::Run {
        script,
        network: false,
        ..
    } = &action.effect
    else {
        return None;
    };
    if action.target != "shell"
        || a.env.config.sandbox != crate::config::SandboxSetting::Bwrap
        || proxy::granted()
        || proxy::session_grant(&a.session.id).is_some()
        || !a.approver.can_ask()
    {
        return None;
    }
    let installer = crate::actuators::shell::installer_in(script)?;
    Some(crate::gates::Verdict::new(
        Decision::Ask,
        REGISTRIES_QUESTION,
        format!(
            "`{}` fetches packages and the sandbox has no network: let installers reach these \
             registries for this session: {}. Approving runs this command, and every later \
             one in this session, with a proxy that reaches only these hosts; rejecting runs \
             it without network (it fails at once), and this is not asked again in this \
             session (`grant_registries` in the `[sandbox]` table of config.toml grants it \
             to every session)",
            crate::util::terminal::escape_line(&installer),
            proxy::hosts().join(", ")
        ),
    ))
}

/// The gates' judgement with the session mode's verdict beside it: the
/// strictest wins, so a mode only tightens. The mode is read now, so a
/// switch takes effect at the next action (and at the last mile).
fn judge(a: &ActEnv<'_>, action: &Action, gate_ctx: &crate::gates::GateContext) -> Judgement {
    let ctx = contained_context(a.env, a.toolset, a.session.mode(), gate_ctx, action);
    judge_in(a.toolset, a.session.mode(), action, &ctx)
}

/// The gate context for `action`, saying whether it runs contained
/// ([`runs_contained`]).
fn contained_context(
    env: &AgentEnv,
    toolset: &Toolset,
    mode: Mode,
    base: &crate::gates::GateContext,
    action: &Action,
) -> crate::gates::GateContext {
    let mut ctx = base.clone();
    ctx.contained = runs_contained(env, toolset, mode, &base.cwd, action);
    ctx
}

/// Whether `action` will run contained, so that its changeset, not its
/// text, decides (`gates::consequence`): a sandboxed command without
/// network that runs into an overlay (`[checkpoints] transactions =
/// "overlay"`, which refuses the command rather than run it uncontained
/// when no overlay can be made), or a file tool whose one write is
/// recorded and judged. The same conditions [`begin_observing`] takes.
fn runs_contained(
    env: &AgentEnv,
    toolset: &Toolset,
    mode: Mode,
    cwd: &std::path::Path,
    action: &Action,
) -> bool {
    use crate::action::Effect;
    let cfg = &env.config.checkpoints;
    if !cfg.enabled || mode.read_only() || !checkpoint::observable(cwd) {
        return false;
    }
    match &action.effect {
        Effect::Run { network, .. } => {
            let long_running = toolset
                .tools
                .get(&action.tool)
                .is_some_and(|t| crate::tools::long_running(t.as_ref(), &action.arguments));
            action.target == "shell"
                && !network
                && !long_running
                && cfg.transactions == checkpoint::TransactionMode::Overlay
                && env.config.sandbox == crate::config::SandboxSetting::Bwrap
        }
        Effect::WriteFile { .. } => watch::watches(action),
        _ => false,
    }
}

/// [`judge`] for a toolset and a mode given apart (a plan run after its
/// turn is gone has no session object, only its mode).
fn judge_in(
    toolset: &Toolset,
    mode: Mode,
    action: &Action,
    gate_ctx: &crate::gates::GateContext,
) -> Judgement {
    let judgement = toolset.gates.evaluate(action, gate_ctx);
    let kind = (toolset.tools.get(&action.tool)).map_or(acp::ToolKind::Other, |t| t.kind);
    match mode.verdict(action, kind) {
        Some(verdict) => {
            let mut trace = judgement.trace;
            trace.push(verdict);
            Judgement::from_trace(trace)
        }
        None => judgement,
    }
}

/// The model must know when what ran is not what it proposed: a person
/// edited the action in the flight plan. Its observation says so first,
/// with the effect that ran (the chat already shows the edit).
fn told_edited(mut acted: Acted, ran: &Action) -> Acted {
    const SHOWN: usize = 2000;
    let effect = serde_json::to_string(&ran.effect).unwrap_or_default();
    let mut shown: String = effect.chars().take(SHOWN).collect();
    if shown.len() < effect.len() {
        shown.push('…');
    }
    acted.observation.text = format!(
        "The person edited this action before approving it; what ran is their version, \
         not your proposal: {shown}\nResult:\n{}",
        acted.observation.text
    );
    acted
}

/// A refusal (gates, last mile, a person): recorded, then reported.
fn refuse(a: &ActEnv<'_>, id: &str, text: String, status: ActStatus) -> Acted {
    a.env.record(AuditRecord::denied(&a.session.id, id, &text));
    finish(a.sink, id, text, status)
}

/// A pending flight plan for a changeset held while nobody can be asked:
/// its id, or None when it could not be saved (the caller fails closed).
fn hold_for_a_person(
    x: &ExecContext<'_>,
    id: &str,
    apply: Action,
    trace: Vec<crate::gates::Verdict>,
) -> Option<String> {
    let plan = crate::plans::FlightPlan::new(x.session_id, id, "", apply, trace)
        .in_cwd(x.cwd.to_path_buf());
    let values = x.env.secret_values_in(x.cwd);
    let store = crate::plans::store::PlanStore::new(x.env.config.state().plans()).hiding(
        crate::plans::store::SecretValuesOf(Arc::new(move |_| Some(values.clone()))),
    );
    match store.create(&plan) {
        Ok(()) => Some(plan.id),
        Err(e) => {
            tracing::error!("the held change's flight plan could not be saved: {e}");
            None
        }
    }
}

/// Tell the approver what became of an action a person approved.
fn settled(a: &ActEnv<'_>, id: &str, acted: Acted) -> Acted {
    a.approver
        .settle(&a.session.id, id, &acted.status, &acted.observation.text);
    acted
}

/// What running one action needs: the one execution path shared by a live
/// turn and by the flight desk running an approved plan whose turn is gone
/// (after a restart). The gates and the person have been consulted already;
/// [`LastMile`] is what the last-mile check compares against.
pub(crate) struct ExecContext<'a> {
    pub env: &'a AgentEnv,
    pub session_id: &'a str,
    pub cwd: &'a std::path::Path,
    /// The flight plan the action runs under, for the audit record.
    pub plan_id: Option<&'a str>,
    pub sink: &'a dyn TurnSink,
    /// For actuators that speak to the person while running (None: nobody
    /// is listening, e.g. a plan run after a restart).
    pub sink_handle: Option<Arc<dyn TurnSink>>,
    pub cancel: CancellationToken,
    /// Who approved this exact action, when a person did.
    pub approved_by: Option<String>,
    pub last_mile: LastMile<'a>,
    /// The resource limits the calling tool sets for itself (`:LIMITS:`).
    pub limits: crate::sandbox::LimitOverrides,
    /// The live turn, when there is one: the effect stage can then ask a
    /// person about what the action did. Without one (a plan run after its
    /// turn is gone), a held effect stays rolled back.
    pub live: Option<Live<'a>>,
}

/// The flight desk's exactly-once guard, as the last mile calls it.
pub(crate) type BeginGuard<'a> = dyn Fn(&Action) -> Result<(), super::NotBegun> + Sync + 'a;

/// What the last-mile check holds the action to, the same for a live turn
/// and for a plan run after its turn is gone.
pub(crate) struct LastMile<'a> {
    /// The content hash of what was approved (by the gates, or by a person
    /// who saw it); the action about to run must hash to it.
    pub approved_hash: &'a str,
    /// The gates, and the tools (whose kind the mode reads), now.
    pub toolset: &'a Toolset,
    /// The session's mode now: a switch since the approval counts. Read-only
    /// also reaches the sandbox as a read-only bind.
    pub mode: Mode,
    /// The verdict on this exact action already in the audit log, if any:
    /// the last mile records its own unless it says the same.
    pub recorded: Option<&'a Judgement>,
    /// The flight desk's exactly-once guard for an approved plan; `Err`
    /// stops the action.
    pub begin: Option<&'a BeginGuard<'a>>,
}

/// The last-mile check, the one place it is made: the exact action must
/// hash to what was approved, must not be denied by the gates and the
/// session mode as they are now, and (for a plan) must win the desk's
/// exactly-once guard. Its verdict goes to the audit log; `Err` is why the
/// action must not run.
fn last_mile(
    env: &AgentEnv,
    session_id: &str,
    cwd: &std::path::Path,
    id: &str,
    action: &Action,
    lm: &LastMile<'_>,
) -> Result<(), LastMileError> {
    if action.content_hash() != lm.approved_hash {
        return Err(LastMileError::Changed);
    }
    let ctx = contained_context(env, lm.toolset, lm.mode, &env.gate_context(cwd), action);
    let judgement = judge_in(lm.toolset, lm.mode, action, &ctx);
    if lm.recorded.map(|r| r.decision) != Some(judgement.decision) {
        env.record(AuditRecord::verdict(session_id, id, &judgement));
    }
    if judgement.decision == Decision::Deny {
        return Err(LastMileError::Denied(denial(&judgement)));
    }
    match lm.begin {
        Some(begin) => Ok(begin(action)?),
        None => Ok(()),
    }
}

/// Why an approved action does not run at the last mile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LastMileError {
    #[error("last-mile check failed: the action changed after it was approved; it was not run")]
    Changed,
    #[error("last-mile check failed: {0}")]
    Denied(String),
    #[error("last-mile check failed: an approved effect must stay a checkpoint apply")]
    NotAnApply,
    /// Another process runs (or ran) this plan.
    #[error(transparent)]
    NotBegun(#[from] super::NotBegun),
}

/// Why an action is not run because its observation cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotObserved {
    #[error(transparent)]
    Transaction(#[from] checkpoint::txn::TxnError),
    #[error(transparent)]
    Watch(#[from] watch::BeginError),
}

/// A live turn behind an execution, and whether a person already approved
/// the action itself.
pub(crate) struct Live<'a> {
    pub act: &'a ActEnv<'a>,
    pub asked: bool,
}

/// Run an approved action: the last-mile check, then the actuator for its
/// target; record an `executed` audit record (session, plan, call), and
/// report the result.
pub(crate) async fn execute_action(id: &str, action: &Action, x: &ExecContext<'_>) -> Acted {
    // Images a tool returned (an MCP screenshot) reach the model beside
    // the text, whatever becomes of the call's effect.
    let mut images = Vec::new();
    let mut acted = perform(id, action, x, &mut images).await;
    acted.observation.images = images;
    acted
}

/// [`execute_action`], the images the actuator returned put in `images`.
async fn perform(
    id: &str,
    action: &Action,
    x: &ExecContext<'_>,
    images: &mut Vec<crate::llm::Image>,
) -> Acted {
    if let Err(why) = last_mile(x.env, x.session_id, x.cwd, id, action, &x.last_mile) {
        let why = why.to_string();
        x.env.record(AuditRecord::denied(x.session_id, id, &why));
        return finish(x.sink, id, why, ActStatus::Denied);
    }
    step("last mile");
    let actuator = match x.env.actuators.resolve(Some(&action.target), None) {
        Ok(act) => act,
        Err(e) => return finish(x.sink, id, e.to_string(), ActStatus::Failed),
    };
    // Checkpoint before: the effect is observed, not guessed.
    let origin = checkpoint::Origin {
        session_id: x.session_id.to_string(),
        tool_call_id: id.to_string(),
        tool: action.tool.clone(),
        turn: x.live.as_ref().map(|l| l.act.turn_id.to_string()),
    };
    let observing = match begin_observing(x, action, origin).await {
        Ok(o) => o,
        Err(why) => {
            let why = why.to_string();
            x.env.record(AuditRecord::denied(x.session_id, id, &why));
            return finish(x.sink, id, why, ActStatus::Denied);
        }
    };
    step("observing begun");
    let fields = acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress);
    x.sink.update(acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(acp::ToolCallId::new(id.to_string()), fields),
    ));
    let say = x.sink_handle.clone().map(|sink| {
        Arc::new(move |text: &str| {
            let chunk = acp::ContentChunk::new(format!("\n{text}\n").into());
            sink.update(acp::SessionUpdate::AgentMessageChunk(chunk));
        }) as crate::actuators::system::Say
    });
    let progress = x.sink_handle.clone().map(|sink| {
        let call = id.to_string();
        crate::actuators::rate_limited(crate::actuators::PROGRESS_EVERY, move |line: &str| {
            let fields = acp::ToolCallUpdateFields::new()
                .content(vec![acp::ToolCallContent::from(line.to_string())]);
            sink.update(acp::SessionUpdate::ToolCallUpdate(
                acp::ToolCallUpdate::new(acp::ToolCallId::new(call.clone()), fields),
            ));
        })
    });
    let ctx = ActContext {
        session_id: x.session_id.to_string(),
        cwd: x.cwd.to_path_buf(),
        cancel: x.cancel.clone(),
        say,
        approved_by: x.approved_by.clone(),
        read_only: x.last_mile.mode.read_only(),
        limits: x.limits,
        progress,
    };
    let result = match &observing {
        Observing::Transaction(t) => {
            crate::sandbox::overlay::scope(t.mount(), actuator.execute(action, &ctx)).await
        }
        _ => actuator.execute(action, &ctx).await,
    };
    step("executed");
    if let Ok(out) = &result {
        if actuator.feeds_back() {
            images.clone_from(&out.images);
        }
    }
    let (is_error, output) = match &result {
        Ok(out) => (out.is_error, out.text.clone()),
        Err(e) => (true, e.to_string()),
    };
    x.env.record(AuditRecord::executed_in(
        Some(x.session_id),
        x.plan_id,
        id,
        is_error,
        &output,
    ));
    let (text, status) = match result {
        Ok(out) if !actuator.feeds_back() && !out.is_error => {
            // The person has seen it; the model only hears it was delivered.
            let text = format!(
                "delivered to the person ({} characters)",
                out.text.chars().count()
            );
            (text, ActStatus::Executed)
        }
        Ok(out) => {
            let status = if out.is_error {
                ActStatus::Failed
            } else {
                ActStatus::Executed
            };
            (x.env.redact_output(out.text, x.cwd), status)
        }
        Err(crate::actuators::ActError::Cancelled) => ("cancelled".into(), ActStatus::Cancelled),
        Err(e) => (e.to_string(), ActStatus::Failed),
    };
    step("redacted");
    // After: the changeset (or the observed effect), judged by the effect
    // gates.
    let finished = match observing {
        Observing::Nothing => return finish(x.sink, id, text, status),
        Observing::Watch(watch, long_running) => {
            let text = if long_running {
                format!("{text}\n{LONG_RUNNING_NOTE}")
            } else {
                text
            };
            return match watch.finish().await {
                Ok(None) => finish(x.sink, id, text, status),
                Ok(Some(observed)) => {
                    effect_stage(x, id, action, text, status, observed, false).await
                }
                Err(e) => {
                    let text = format!("{text}\n(the effect could not be observed: {e})");
                    finish(x.sink, id, text, status)
                }
            };
        }
        Observing::Transaction(t) => t.finish(crate::gates::consequence::needs_judging).await,
        Observing::File(f) => {
            return match f.finish().await {
                Ok(None) => finish(x.sink, id, text, status),
                Ok(Some(observed)) => {
                    effect_stage(x, id, action, text, status, observed, true).await
                }
                Err(e) => {
                    let text = format!("{text}\n(the effect could not be observed: {e})");
                    finish(x.sink, id, text, status)
                }
            };
        }
    };
    step("changeset read");
    match finished {
        Ok(None) => finish(x.sink, id, text, status),
        Ok(Some(observed)) => effect_stage(x, id, action, text, status, observed, true).await,
        Err(e) => {
            let text = format!(
                "{text}\n(the changes of this action could not be read, so none was applied: {e})"
            );
            finish(x.sink, id, text, ActStatus::Failed)
        }
    }
}

/// A step of a tool call, timestamped in the debug log
/// (`PEER_STEPS=1 scripts/peer-compare.sh` reads them to break a call down).
fn step(name: &str) {
    tracing::debug!(step = name, "call step");
}

/// Shown with the result of a command that ran without an overlay because
/// its tool says it is long-running.
const LONG_RUNNING_NOTE: &str = "(long-running: ran without an overlay, writing straight into the \
     project; its effect was observed after the fact, so changes anyone else made meanwhile \
     count as its own)";

/// How an action's effect on the project is taken.
enum Observing {
    /// Not at all (reads, messages; checkpoints off; not a project).
    Nothing,
    /// Two snapshots around it (file tools, Emacs, long-running commands,
    /// and the configured fallback); `true`: long-running, said so.
    Watch(watch::Watch, bool),
    /// Into an overlay, its changeset judged before it is applied.
    Transaction(checkpoint::txn::Transaction),
    /// A file tool's write: the change of its one path.
    File(checkpoint::txn::FileWrite),
}

/// Choose and start the observation of one action: sandboxed commands run
/// into an overlay (unless their tool is long-running, or the session is
/// read-only, or `[checkpoints] transactions` says otherwise); everything
/// else that can change the project is watched. `Err`: not run, and why.
async fn begin_observing(
    x: &ExecContext<'_>,
    action: &Action,
    origin: checkpoint::Origin,
) -> Result<Observing, NotObserved> {
    use checkpoint::TransactionMode;
    let config = &x.env.config;
    let cfg = &config.checkpoints;
    let long_running = x
        .last_mile
        .toolset
        .tools
        .get(&action.tool)
        .is_some_and(|t| crate::tools::long_running(t.as_ref(), &action.arguments));
    let command =
        action.target == "shell" && matches!(action.effect, crate::action::Effect::Run { .. });
    let transactional = cfg.enabled
        && command
        && cfg.transactions != TransactionMode::Observe
        && !long_running
        && !x.last_mile.mode.read_only()
        && config.sandbox == crate::config::SandboxSetting::Bwrap
        && checkpoint::observable(x.cwd);
    if transactional {
        // A person who has just approved may have saved a file a moment
        // before: that action's start is made exact (≤ one clock tick).
        let exact = x.approved_by.is_some();
        let state = config.state_dir();
        match checkpoint::txn::begin_with(&state, cfg, x.cwd, origin.clone(), exact).await {
            Ok(t) => return Ok(Observing::Transaction(t)),
            Err(why) if cfg.transactions == TransactionMode::OverlayOrObserve => {
                tracing::warn!("transactions: observing instead: {why}");
            }
            Err(why) => return Err(why.into()),
        }
    }
    if let crate::action::Effect::WriteFile { path, .. } = &action.effect {
        let file = cfg.enabled && watch::watches(action) && checkpoint::observable(x.cwd);
        if file {
            let state = config.state_dir();
            let begun =
                checkpoint::txn::begin_file(&state, cfg, x.cwd, path, origin.clone()).await?;
            if let Some(f) = begun {
                return Ok(Observing::File(f));
            }
        }
    }
    let watched = watch::begin(&config.state_dir(), cfg, x.cwd, action, origin).await?;
    Ok(watched.map_or(Observing::Nothing, |mut w| {
        if long_running && command {
            w.mark(watch::LONG_RUNNING);
        }
        Observing::Watch(w, long_running && command)
    }))
}

/// The second gate stage: what the action did. Allowed, the effect is
/// shown and kept; held, it is rolled back at once and offered to a person
/// as an apply action, through the same approval path every action takes.
/// `contained`: a changeset or a file tool's recorded write, every
/// pre-image in the record (`gates::effect::judge`).
async fn effect_stage(
    x: &ExecContext<'_>,
    id: &str,
    action: &Action,
    text: String,
    status: ActStatus,
    observed: watch::Observed,
    contained: bool,
) -> Acted {
    let watch::Observed {
        project,
        mut checkpoint,
        guard,
    } = observed;
    let cfg = &x.env.config.checkpoints;
    let mut verdicts =
        crate::gates::effect::judge(&checkpoint.effect, action, x.cwd, cfg, contained);
    verdicts.extend(crate::gates::history::judge_changes(&checkpoint.effect));
    verdicts.extend(crate::gates::git_refs::judge_changes(&checkpoint.effect));
    verdicts.extend(crate::gates::runtime_plants::judge_changes(
        &checkpoint.effect.changes,
    ));
    verdicts.extend(crate::gates::runtime_plants::judge_written(
        checkpoint
            .passthrough
            .iter()
            .filter(|p| !p.remove && !p.dir)
            .map(|p| p.path.as_str()),
    ));
    // What the host runs, whatever command wrote it, and a loss undo could
    // not restore (git's answers and the `pyvenv.cfg` probes are I/O).
    let consequences = {
        let (cwd, upper) = (
            x.cwd.to_path_buf(),
            project.txn_dir(&checkpoint.id).join("upper"),
        );
        let (effect, passthrough) = (checkpoint.effect.clone(), checkpoint.passthrough.clone());
        tokio::task::spawn_blocking(move || consequences(&cwd, &upper, &effect, &passthrough)).await
    };
    verdicts.extend(consequences.unwrap_or_else(|e| {
        vec![crate::gates::Verdict::new(
            crate::gates::Decision::Ask,
            "effect-host-executed",
            format!("the changeset's consequences could not be judged ({e}); approving applies it as shown"),
        )]
    }));
    if verdicts.is_empty() && checkpoint.changeset {
        // Judged and allowed: now, and only now, the project changes.
        let applied = {
            let (p, mut cp) = (project.clone(), checkpoint.clone());
            tokio::task::spawn_blocking(move || p.apply_changeset(&mut cp).map(|_| cp)).await
        };
        drop(guard);
        let (text, status) = match applied {
            Ok(Ok(cp)) => {
                checkpoint = cp;
                let text = format!("{text}\n{}", changeset_notes(&checkpoint));
                (text, status)
            }
            Ok(Err(e)) => {
                let text = format!(
                    "{text}\nThe changes of this action were not applied: {e} (checkpoint {})",
                    checkpoint.id
                );
                (text, ActStatus::Failed)
            }
            Err(e) => (
                format!("{text}\n(checkpoint task failed: {e})"),
                ActStatus::Failed,
            ),
        };
        x.env.record(AuditRecord::effect(&checkpoint));
        let shown = Shown::of(&project, &checkpoint, cfg, &x.env.secret_values_in(x.cwd));
        return finish_shown(x.sink, id, text, status, Some(shown));
    }
    let shown = Shown::of(&project, &checkpoint, cfg, &x.env.secret_values_in(x.cwd));
    if verdicts.is_empty() {
        x.env.record(AuditRecord::effect(&checkpoint));
        let text = format!("{text}\n{}", checkpoint.summary());
        return finish_shown(x.sink, id, text, status, Some(shown));
    }
    let reasons: Vec<String> = verdicts.iter().map(|v| v.reason.clone()).collect();
    let held = {
        let (p, mut cp, r) = (project.clone(), checkpoint.clone(), reasons.clone());
        tokio::task::spawn_blocking(move || p.hold(&mut cp, r).map(|_| cp)).await
    };
    drop(guard);
    checkpoint = match held {
        Ok(Ok(cp)) => cp,
        Ok(Err(e)) => {
            x.env.record(AuditRecord::effect(&checkpoint));
            let text = format!(
                "{text}\n{}\nThe effect gates would hold this change ({}), but it could not be \
                 rolled back: {e}. It stays applied; undo it with checkpoint {}.",
                checkpoint.summary(),
                reasons.join("; "),
                checkpoint.id
            );
            return finish_shown(x.sink, id, text, status, Some(shown));
        }
        Err(e) => {
            return finish(
                x.sink,
                id,
                format!("{text}\n(checkpoint task failed: {e})"),
                status,
            )
        }
    };
    x.env.record(AuditRecord::effect(&checkpoint));
    let held_text = if checkpoint.changeset {
        format!(
            "{text}\nThe changes of this action were held; the project was not touched: {}. \
             Approving applies exactly this change; rejecting discards it. {}",
            reasons.join("; "),
            changeset_notes(&checkpoint)
        )
    } else {
        format!(
            "{text}\nThe effect of this action was held and rolled back: {}. Approving puts \
             exactly this change back; rejecting leaves it rolled back. {}",
            reasons.join("; "),
            checkpoint.summary()
        )
    };
    let mut diff = project
        .store
        .patch(
            &checkpoint.before,
            &checkpoint.after,
            cfg.max_diff_bytes as usize,
        )
        .unwrap_or_else(|e| format!("(the diff could not be read: {e})"));
    let unrecorded = {
        let (cwd, upper) = (
            x.cwd.to_path_buf(),
            project.txn_dir(&checkpoint.id).join("upper"),
        );
        let (passthrough, max) = (checkpoint.passthrough.clone(), cfg.max_diff_bytes as usize);
        tokio::task::spawn_blocking(move || unrecorded_diff(&cwd, &upper, &passthrough, max)).await
    };
    diff.push_str(&unrecorded.unwrap_or_default());
    let apply = crate::actuators::checkpoint::apply_action(
        &action.tool,
        &checkpoint.id,
        &checkpoint.after,
        &checkpoint.summary(),
        &diff,
    );
    let Some(&Live { act: a, asked }) = x.live.as_ref() else {
        // Nobody to ask now: the plan ran after its turn was gone (`run
        // --continue`, a restart). A held changeset stays held under a
        // plan of its own, decided like any other; without one (the plan
        // could not be saved, or an effect already rolled back) it fails
        // closed.
        if checkpoint.changeset {
            if let Some(plan) = hold_for_a_person(x, id, apply.clone(), verdicts.clone()) {
                let text = format!(
                    "{held_text}\nNot applied yet: the change stays held, the project untouched, \
                     until a person decides flight plan {plan} (`passepartout plans approve \
                     {plan}`, then `passepartout run --continue`); approving it applies exactly \
                     this change."
                );
                return finish_shown(x.sink, id, text, ActStatus::Failed, Some(shown));
            }
        }
        let why = if checkpoint.changeset {
            format!(
                "{held_text}\nNobody was there to approve the change, so it was not applied \
                 (checkpoint {}).",
                checkpoint.id
            )
        } else {
            format!(
                "{held_text}\nNobody was there to approve the change, so it stays rolled back \
                 (checkpoint {}).",
                checkpoint.id
            )
        };
        let (p, cid) = (project.clone(), checkpoint.id.clone());
        if let Ok(Ok(cp)) = tokio::task::spawn_blocking(move || p.reject(&cid)).await {
            x.env.record(AuditRecord::effect(&cp));
        }
        return finish_shown(x.sink, id, why, ActStatus::Failed, Some(shown));
    };
    if asked {
        // The text-gate plan is done: the action ran. What follows is a
        // new plan for its effect.
        a.approver
            .settle(&a.session.id, id, &ActStatus::Executed, &held_text);
    }
    // Show the held effect (diffs) while the person decides.
    let fields = acp::ToolCallUpdateFields::new()
        .status(acp::ToolCallStatus::Pending)
        .content(shown.content_with(&held_text))
        .locations(shown.locations.clone());
    a.sink.update(acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(acp::ToolCallId::new(id.to_string()), fields),
    ));
    super::report_status(a.sink, a.session, "waiting");
    let request = ApprovalRequest {
        session_id: a.session.id.clone(),
        cwd: a.session.cwd.clone(),
        tool_call_id: id.to_string(),
        explanation: a.explanation.to_string(),
        action: apply.clone(),
        trace: verdicts,
    };
    let outcome = a.approver.approve(request, a.cancel.clone()).await;
    super::report_status(a.sink, a.session, "acting");
    let reject = |why: String| {
        let (p, cid) = (project.clone(), checkpoint.id.clone());
        async move {
            if let Ok(Ok(cp)) = tokio::task::spawn_blocking(move || p.reject(&cid)).await {
                a.env.record(AuditRecord::effect(&cp));
            }
            why
        }
    };
    let approved = match outcome {
        ApprovalOutcome::Cancelled => {
            // The turn ended while its plan waits (`run` without a
            // terminal, an editor that went away): the change stays held
            // until the plan is decided, from any front end.
            let waiting = {
                let store = crate::plans::store::PlanStore::new(a.env.config.state().plans());
                let (session, call, cid) =
                    (a.session.id.clone(), id.to_string(), checkpoint.id.clone());
                tokio::task::spawn_blocking(move || waiting_plan(&store, &session, &call, &cid))
                    .await
                    .ok()
                    .flatten()
            };
            if let Some(plan) = waiting {
                let why = format!(
                    "{held_text}\nNot applied yet: the change stays held, the project untouched, \
                     until a person decides flight plan {plan}; approving it applies exactly \
                     this change (a file changed meanwhile is reported as a conflict, never \
                     overwritten)."
                );
                return finish_shown(a.sink, id, why, ActStatus::Cancelled, Some(shown));
            }
            let why = reject(format!("{held_text}\nNot applied: the turn was cancelled.")).await;
            return finish_shown(a.sink, id, why, ActStatus::Cancelled, Some(shown));
        }
        ApprovalOutcome::Rejected { comment, by } => {
            let said = comment
                .filter(|c| !c.trim().is_empty())
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            let why = reject(format!(
                "{held_text}\nThe person ({by}) rejected the change{said}. The project is as it was before the action."
            ))
            .await;
            a.env.record(AuditRecord::denied(&a.session.id, id, &why));
            return finish_shown(a.sink, id, why, ActStatus::Rejected, Some(shown));
        }
        ApprovalOutcome::Approved { action, hash, by } => (*action, hash, by),
    };
    let (approved, hash, approved_by) = approved;
    let begin_desk = |action: &Action| a.approver.begin(&a.session.id, id, action);
    let refusal = if approved.target != crate::checkpoint::watch::TARGET {
        Some(LastMileError::NotAnApply)
    } else {
        let lm = LastMile {
            approved_hash: &hash,
            toolset: a.toolset,
            mode: a.session.mode(),
            recorded: None,
            begin: Some(&begin_desk),
        };
        last_mile(a.env, &a.session.id, &a.session.cwd, id, &approved, &lm).err()
    };
    if let Some(why) = refusal {
        let why = reject(format!("{held_text}\nNot applied: {why}")).await;
        let acted = refuse(a, id, why, ActStatus::Denied);
        a.approver
            .settle(&a.session.id, id, &acted.status, &acted.observation.text);
        return acted;
    }
    let ctx = ActContext {
        session_id: a.session.id.clone(),
        cwd: a.session.cwd.clone(),
        cancel: a.cancel.clone(),
        say: None,
        approved_by: Some(approved_by),
        read_only: a.session.mode().read_only(),
        limits: Default::default(),
        progress: None,
    };
    let out = match a.env.actuators.resolve(Some(&approved.target), None) {
        Ok(actuator) => actuator.execute(&approved, &ctx).await,
        Err(e) => Err(e),
    };
    let (applied_text, applied) = match out {
        Ok(o) if !o.is_error => (o.text, true),
        Ok(o) => (o.text, false),
        Err(e) => (e.to_string(), false),
    };
    a.env
        .record(AuditRecord::executed(id, !applied, &applied_text));
    if applied {
        if let Ok(cp) = project.load(&checkpoint.id) {
            a.env.record(AuditRecord::effect(&cp));
        }
    }
    let final_status = if applied { status } else { ActStatus::Failed };
    let text = format!("{held_text}\nA person approved it: {applied_text}");
    a.approver.settle(&a.session.id, id, &final_status, &text);
    finish_shown(a.sink, id, text, final_status, Some(shown))
}

/// The flight plan waiting for a person to decide held checkpoint
/// `checkpoint` of call `call`, if one is still pending.
fn waiting_plan(
    store: &crate::plans::store::PlanStore,
    session: &str,
    call: &str,
    checkpoint: &str,
) -> Option<String> {
    let plans = store.of_session(session).ok()?;
    plans
        .into_iter()
        .filter(|p| p.tool_call_id == call && p.status == crate::plans::PlanStatus::Pending)
        .filter(|p| p.action.target == crate::checkpoint::watch::TARGET)
        .find(|p| p.action.arguments.get("checkpoint").and_then(Value::as_str) == Some(checkpoint))
        .map(|p| p.id)
}

/// The consequence classes of a changeset (`gates::consequence`), with
/// what the judge needs read here: the repository's hook folders and
/// which folders hold a `pyvenv.cfg` (in the project, or written by the
/// action into `upper`).
fn consequences(
    cwd: &std::path::Path,
    upper: &std::path::Path,
    effect: &checkpoint::effect::ObservedEffect,
    passthrough: &[checkpoint::changeset::Passthrough],
) -> Vec<crate::gates::Verdict> {
    let hook_dirs = hook_dirs(cwd);
    let is_venv = |dir: &str| {
        let marker = std::path::Path::new(dir).join("pyvenv.cfg");
        cwd.join(&marker).is_file() || upper.join(&marker).is_file()
    };
    let around = crate::gates::consequence::Surroundings {
        hook_dirs: &hook_dirs,
        is_venv: &is_venv,
    };
    crate::gates::consequence::judge(effect, passthrough, &around)
}

/// The largest file an unrecorded change is shown from in a plan's diff.
const UNRECORDED_DIFF_MAX_FILE: u64 = 256 * 1024;

/// The diff of the unrecorded writes a person is asked about (the
/// host-executed surface and runtime plants in ignored trees such as
/// `.venv`, which the checkpoint's own trees do not hold): the project's
/// file against the held upper layer's. Only regular files beneath the
/// project, never through a symbolic link.
fn unrecorded_diff(
    cwd: &std::path::Path,
    upper: &std::path::Path,
    passthrough: &[checkpoint::changeset::Passthrough],
    max_bytes: usize,
) -> String {
    let read = |path: &std::path::Path| -> Option<String> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.is_file() || meta.len() > UNRECORDED_DIFF_MAX_FILE {
            return None;
        }
        std::fs::read_to_string(path).ok()
    };
    let root = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let mut out = String::new();
    for p in passthrough.iter().filter(|p| !p.remove && !p.dir) {
        if !crate::gates::consequence::needs_judging(&p.path) {
            continue;
        }
        let old_path = cwd.join(&p.path);
        let beneath = old_path
            .parent()
            .and_then(|d| d.canonicalize().ok())
            .is_some_and(|d| d.starts_with(&root));
        let old = if beneath { read(&old_path) } else { None }.unwrap_or_default();
        let Some(new) = read(&upper.join(&p.path)) else {
            out.push_str(&format!(
                "\n{} (not shown: not text, or larger than {UNRECORDED_DIFF_MAX_FILE} bytes)\n",
                p.path
            ));
            continue;
        };
        out.push_str(&crate::util::diff::unified(&old, &new, &p.path));
        if out.len() > max_bytes {
            let mut cut = max_bytes;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str("\n… (diff cut)\n");
            break;
        }
    }
    out
}

/// The project-relative folders the repository's git settings make hook
/// folders (`core.hooksPath`).
fn hook_dirs(cwd: &std::path::Path) -> Vec<String> {
    crate::control_surface::git_named_paths(cwd, &crate::paths::home_dir())
        .into_iter()
        .filter(|n| n.key == "core.hookspath")
        .filter_map(|n| {
            n.path
                .strip_prefix(cwd)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .collect()
}

/// A changeset's summary, then what was not applied and why: paths the
/// person changed meanwhile (conflicts, never overwritten), control-surface
/// paths the command created, unrecorded files that failed.
fn changeset_notes(cp: &checkpoint::Checkpoint) -> String {
    let mut text = cp.summary();
    if !cp.conflicts.is_empty() {
        let list: Vec<String> = cp
            .conflicts
            .iter()
            .take(10)
            .map(|c| format!("{} ({})", c.path, c.why))
            .collect();
        text.push_str(&format!(
            "\nConflict: {} file(s) not applied, because they changed in the project while \
             the action ran; the person's version was kept and the action's is stored in \
             checkpoint {}: {}",
            cp.conflicts.len(),
            cp.id,
            list.join(", ")
        ));
    }
    if !cp.dropped.is_empty() {
        let list: Vec<String> = cp.dropped.iter().map(|d| format!("removed {d}")).collect();
        text.push_str(&format!(
            "\nNot applied (control surface, which no action may create): {}",
            list.join(", ")
        ));
    }
    for r in cp.reasons.iter().filter(|r| r.starts_with("not applied")) {
        text.push_str(&format!("\n{r}"));
    }
    text
}

/// An effect as shown to the person and ACP clients: diff items, locations
/// and the `effect` object of `raw_output`.
struct Shown {
    content: Vec<acp::ToolCallContent>,
    locations: Vec<acp::ToolCallLocation>,
    effect: Value,
}

impl Shown {
    /// `values`: the person's secret values, hidden from the diffs as
    /// from tool output (the files keep them).
    fn of(
        project: &checkpoint::Project,
        cp: &checkpoint::Checkpoint,
        cfg: &checkpoint::CheckpointConfig,
        values: &crate::gates::known_values::ValueMatcher,
    ) -> Shown {
        let cwd = project.cwd();
        let content =
            cp.effect
                .acp_content(&project.store, cwd, cfg.max_diff_files, cfg.max_diff_bytes);
        Shown {
            content: content
                .into_iter()
                .map(|c| hidden_content(c, values))
                .collect(),
            locations: cp
                .effect
                .changes
                .iter()
                .take(cfg.max_diff_files.max(1) * 5)
                .map(|c| acp::ToolCallLocation::new(cwd.join(&c.path)))
                .collect(),
            effect: cp.effect.wire(&cp.id),
        }
    }

    fn content_with(&self, text: &str) -> Vec<acp::ToolCallContent> {
        let mut all = vec![acp::ToolCallContent::from(text.to_string())];
        all.extend(self.content.iter().cloned());
        all
    }
}

/// `content` with the person's secret values hidden in every text it
/// holds (a diff's old and new text among them).
fn hidden_content(
    content: acp::ToolCallContent,
    values: &crate::gates::known_values::ValueMatcher,
) -> acp::ToolCallContent {
    if values.is_empty() {
        return content;
    }
    // Content that cannot be checked is not shown: it may hold a value.
    let unchecked = || {
        acp::ToolCallContent::from(
            "(not shown: it could not be checked for the person's secret values)".to_string(),
        )
    };
    let Ok(mut json) = serde_json::to_value(&content) else {
        return unchecked();
    };
    crate::plans::shown::hide_in_json(&mut json, values);
    serde_json::from_value(json).unwrap_or_else(|_| unchecked())
}

fn denial(j: &Judgement) -> String {
    format!(
        "denied: {}. Choose a different, safer way, or explain to the person what you need.",
        j.reason().trim_end().trim_end_matches('.')
    )
}

/// The call as the client sees it (and the journal keeps it for a
/// replay): the person's secret values hidden from its arguments, and so
/// from the title made of them, as from a flight plan. The model's own
/// history keeps the call as the model wrote it. `kind`: None for a tool
/// that does not exist (titled by its name alone).
fn announce(a: &ActEnv<'_>, call: &ToolCall, kind: Option<acp::ToolKind>) {
    let values = a.env.secret_values_in(&a.session.cwd);
    let mut arguments = call.arguments.clone();
    crate::plans::shown::hide_in_json(&mut arguments, &values);
    let (title, kind) = match kind {
        Some(kind) => (title(&call.name, &arguments), kind),
        None => (call.name.clone(), acp::ToolKind::Other),
    };
    a.sink.update(acp::SessionUpdate::ToolCall(
        acp::ToolCall::new(acp::ToolCallId::new(call.id.clone()), title)
            .name(call.name.clone())
            .kind(kind)
            .status(acp::ToolCallStatus::Pending)
            .raw_input(arguments),
    ));
}

fn finish(sink: &dyn TurnSink, id: &str, text: String, status: ActStatus) -> Acted {
    finish_shown(sink, id, text, status, None)
}

/// The final update of a call; with an observed effect, its diffs,
/// locations and `raw_output.effect` too.
fn finish_shown(
    sink: &dyn TurnSink,
    id: &str,
    text: String,
    status: ActStatus,
    shown: Option<Shown>,
) -> Acted {
    let acp_status = if status == ActStatus::Executed {
        acp::ToolCallStatus::Completed
    } else {
        acp::ToolCallStatus::Failed
    };
    let mut raw = serde_json::json!({ "outcome": format!("{status:?}").to_lowercase() });
    let mut fields = acp::ToolCallUpdateFields::new().status(acp_status);
    match shown {
        Some(shown) => {
            raw["effect"] = shown.effect.clone();
            fields = fields
                .content(shown.content_with(&text))
                .locations(shown.locations);
        }
        None => fields = fields.content(vec![acp::ToolCallContent::from(text.clone())]),
    }
    let fields = fields.raw_output(raw);
    sink.update(acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(acp::ToolCallId::new(id.to_string()), fields),
    ));
    Acted {
        observation: Observation {
            call_id: id.to_string(),
            is_error: status != ActStatus::Executed,
            text,
            images: Vec::new(),
        },
        status,
    }
}

/// A one-line title for a tool call: the tool and its most telling argument.
pub fn title(tool: &str, args: &Value) -> String {
    let key = ["command", "path", "query", "code", "text"]
        .iter()
        .find_map(|k| args.get(*k).and_then(Value::as_str));
    match key {
        Some(v) => {
            let line = v.lines().next().unwrap_or("");
            let short: String = line.chars().take(80).collect();
            if short.len() < v.len() {
                format!("{tool}: {short}…")
            } else {
                format!("{tool}: {short}")
            }
        }
        None => tool.to_string(),
    }
}

#[cfg(test)]
mod denial_tests {
    use super::*;
    use crate::gates::Verdict;

    #[test]
    fn a_reason_ending_in_a_full_stop_is_not_given_a_second_one() {
        let j = Judgement::from_trace(vec![Verdict::new(
            Decision::Deny,
            "rule:no-prod",
            "prod is off limits forever.",
        )]);
        let text = denial(&j);
        assert!(text.contains("forever. Choose"), "{text}");
        assert!(!text.contains(".."), "{text}");
    }
}
