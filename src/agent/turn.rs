//! One turn: the person's prompt in, the final answer out.
//!
//! States: `Perceive` (build the request) → `Reason` (stream the model's
//! answer) → `Act` (run each proposed call) → back to `Perceive` with the
//! observations, until the model answers without calls, the round limit is
//! reached, or the turn is cancelled. Each transition is traced.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::budget::Spent;
use crate::llm::cascade::Cascade;
use crate::llm::{ChatMessage, ChatRequest, FinishReason, StreamEvent, Usage};
use crate::protocol::{acp, SessionStatus};
use crate::sessions::Event;

use super::act::{act, ActEnv, ActStatus};
use super::reason::{reason, ReasonError};
use super::{perceive, report_status, AgentEnv, Approver, Session, TurnSink};

/// Why a turn ended without an answer.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The provider cascade failed; the message says which providers were
    /// tried and how to configure one.
    #[error("{0}")]
    Provider(String),
    /// The prompt alone (with the system prompt and tools) is larger than
    /// the context window: refused before anything was sent or recorded.
    #[error(
        "the prompt is about {prompt_tokens} tokens; with the system prompt and tools \
         (about {overhead_tokens}) it cannot fit the {window}-token context window of {model}. \
         Shorten it, set a larger `context_window` for the provider if the model has one, \
         or set `[context] over_window = \"cut\"` to send its beginning with a note"
    )]
    PromptOverWindow {
        prompt_tokens: u64,
        overhead_tokens: u64,
        window: u64,
        model: String,
    },
    /// The conversation is still larger than the window after compaction.
    #[error(
        "the conversation is about {tokens} tokens even after compaction, over the \
         {window}-token context window of {model}: nothing was sent. Start a new session \
         (`passepartout run` without `--continue`, or a new chat), or set a larger \
         `context_window` for the provider if the model has one"
    )]
    HistoryOverWindow {
        tokens: u64,
        window: u64,
        model: String,
    },
}

impl TurnError {
    /// `data.kind` of the JSON-RPC error a client gets.
    pub fn kind(&self) -> &'static str {
        match self {
            TurnError::Provider(_) => "provider_failed",
            TurnError::PromptOverWindow { .. } | TurnError::HistoryOverWindow { .. } => {
                "over_window"
            }
        }
    }
}

/// `_meta.passepartout.stopReason` of a turn stopped by a budget (its ACP
/// stop reason is `max_tokens`).
pub const BUDGET_STOP: &str = "budget";

/// Ends the partial answer of a cancelled turn in the history.
pub const CANCELLED_MARK: &str = "\n[cancelled by the person]";

/// `prompt` with a leading `/name args` expanded into the command's
/// template, and the skill that declares it; unchanged when no loaded
/// skill declares `name`.
pub fn expand_command(
    env: &AgentEnv,
    cwd: &std::path::Path,
    prompt: String,
) -> (String, Option<String>) {
    let Some((name, args)) = crate::skills::slash_command(&prompt) else {
        return (prompt, None);
    };
    match env
        .toolsets
        .commands(cwd)
        .into_iter()
        .find(|c| c.name == name)
    {
        Some(command) => (command.expand(args), Some(command.skill)),
        None => (prompt, None),
    }
}

/// Run one turn for `prompt` in `session`.
pub async fn run_turn(
    env: &AgentEnv,
    session: &Session,
    prompt: String,
    sink_handle: Arc<dyn TurnSink>,
    approver: &dyn Approver,
    cancel: CancellationToken,
) -> Result<acp::StopReason, TurnError> {
    let prompt = Prompt {
        text: prompt,
        images: Vec::new(),
    };
    run_prompt(env, session, prompt, sink_handle, approver, cancel).await
}

/// What the person sent: text, and the images beside it.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pub text: String,
    pub images: Vec<crate::llm::Image>,
}

/// [`run_turn`] for a prompt with images.
pub async fn run_prompt(
    env: &AgentEnv,
    session: &Session,
    prompt: Prompt,
    sink_handle: Arc<dyn TurnSink>,
    approver: &dyn Approver,
    cancel: CancellationToken,
) -> Result<acp::StopReason, TurnError> {
    let Prompt {
        text: prompt,
        images,
    } = prompt;
    // Tool calls and plans are stored as they are shown, for the replay.
    let recording = Arc::new(RecordingSink {
        inner: sink_handle,
        journal: session.journal().cloned(),
        provider_ids: Default::default(),
    });
    let sink_handle: Arc<dyn TurnSink> = recording.clone();
    let sink: &dyn TurnSink = sink_handle.as_ref();
    let mut history = session.history.lock().await;
    session.set_stop_detail(None);
    // `/name args`: a skill's command becomes its prompt and activates the
    // skill; an unknown name goes to the model unchanged.
    let typed = prompt.clone();
    let (prompt, command_skill) = expand_command(env, &session.cwd, prompt);
    // `/mcp__<server>__<prompt> args`: an MCP server's prompt, fetched.
    let prompt = env.mcp.expand_prompt(&session.id, prompt).await;
    let mut activation = session.activation_text(&history, &prompt);
    if let Some(skill) = command_skill {
        activation.push_str(" @");
        activation.push_str(&skill);
    }
    let mut toolset = env.toolsets.toolset(&session.cwd, &activation);
    for notice in &toolset.notices {
        // ACP has no notice update: it travels as reasoning, marked in
        // `_meta` so that a client can tell it from what the model said.
        let mut chunk = acp::ContentChunk::new(notice.clone().into());
        let mut meta = serde_json::Map::new();
        meta.insert(
            "passepartout".into(),
            serde_json::json!({ "notice": "skills" }),
        );
        chunk.meta = Some(meta);
        sink.update(acp::SessionUpdate::AgentThoughtChunk(chunk));
    }
    env.mcp.register_tools(&session.id, &mut toolset.tools);
    session.remember_active(&toolset);
    // The window is a bound: a prompt that cannot fit it even alone is
    // refused (or cut, by config) before it is recorded, so that it does
    // not stay in the history and refuse every later turn too.
    let prompt = {
        let models = session.models().unwrap_or_else(|| env.models());
        let (window, model) = smallest_window(env, &models);
        fit_prompt(
            prompt,
            &toolset,
            &session.cwd,
            window,
            &model,
            &env.config.context,
        )?
    };
    session.record(Event::Prompt {
        // The replay shows what the person typed (`/review`), the history
        // keeps what the model got.
        typed: (typed != prompt).then_some(typed),
        text: prompt.clone(),
        images: images.clone(),
    });
    history.push(ChatMessage::user(prompt).with_images(images));
    let mut turn_start = history.len() - 1;
    let mut spent = Spent::default();
    let max_rounds = env.config.max_rounds;
    let turn_id = crate::checkpoint::new_turn_id();
    let result = async {
        let mut problems: Option<String> = None;
        for round in 1..=max_rounds {
            if cancel.is_cancelled() {
                return Ok(acp::StopReason::Cancelled);
            }
            tracing::debug!(session = %session.id, round, "perceive");
            let models = session.models().unwrap_or_else(|| env.models());
            let (window, model) = smallest_window(env, &models);
            let mut request = perceive::request(&history, &toolset, &session.cwd);
            let limit = (window as f64 * env.config.context.compact_at) as u64;
            if crate::budget::estimate_tokens(&request) > limit {
                match compact(
                    env,
                    session,
                    &mut history,
                    &mut turn_start,
                    &toolset,
                    &models,
                    window,
                    sink,
                    &cancel,
                    &mut spent,
                )
                .await
                {
                    Ok(()) => request = perceive::request(&history, &toolset, &session.cwd),
                    Err(Stop::Cancelled) => return Ok(acp::StopReason::Cancelled),
                    Err(Stop::Budget) => return Ok(acp::StopReason::MaxTokens),
                }
            }
            let tokens = crate::budget::estimate_tokens(&request);
            if tokens > window {
                return Err(TurnError::HistoryOverWindow {
                    tokens,
                    window,
                    model,
                });
            }
            if let Err(stop) = within_budget(env, session, &models, &spent, &request, sink).await {
                return Ok(stop);
            }
            report_status(sink, session, "thinking");
            tracing::debug!(session = %session.id, round, "reason");
            let reasoned = match reason(
                &models,
                &request,
                sink,
                cancel.clone(),
                env.config.max_answer_bytes,
            )
            .await
            {
                Ok(r) => r,
                Err(ReasonError::Cancelled { partial }) => {
                    // What the person saw stays: in the history (the next
                    // turn's model knows it was cut) and in the journal.
                    if !partial.is_empty() {
                        push(
                            session,
                            &mut history,
                            ChatMessage::assistant(
                                format!("{partial}{CANCELLED_MARK}"),
                                Vec::new(),
                            ),
                        );
                    }
                    return Ok(acp::StopReason::Cancelled);
                }
                Err(ReasonError::Provider { message, partial }) => {
                    if !partial.text.is_empty() {
                        push(
                            session,
                            &mut history,
                            ChatMessage::assistant(partial.text.clone(), Vec::new()),
                        );
                    }
                    return Err(TurnError::Provider(message));
                }
            };
            let usage = measured_usage(&reasoned.usage, &request, &reasoned.text);
            account(
                env,
                session,
                &models,
                &reasoned.provider,
                &usage,
                window,
                &mut spent,
                sink,
            )
            .await;
            session.set_provider(reasoned.provider.clone());
            push(
                session,
                &mut history,
                ChatMessage::assistant(reasoned.text.clone(), reasoned.calls.clone()),
            );
            if !reasoned.call_errors.is_empty() {
                // Unreadable text-protocol calls: tell the model what was
                // wrong (after the results of the calls that did parse).
                problems = Some(crate::llm::text_protocol::format_results(
                    &[],
                    &reasoned.call_errors,
                ));
            }
            if reasoned.calls.is_empty() {
                if let Some(p) = problems.take() {
                    push(session, &mut history, ChatMessage::user(p));
                    continue;
                }
                return Ok(match reasoned.finish {
                    Some(FinishReason::Length) => acp::StopReason::MaxTokens,
                    Some(FinishReason::Refusal) => acp::StopReason::Refusal,
                    _ => acp::StopReason::EndTurn,
                });
            }
            report_status(sink, session, "acting");
            tracing::debug!(session = %session.id, round, calls = reasoned.calls.len(), "act");
            let act_env = ActEnv {
                env,
                session,
                toolset: &toolset,
                sink,
                approver,
                cancel: cancel.clone(),
                explanation: &reasoned.text,
                sink_handle: sink_handle.clone(),
                turn_id: &turn_id,
            };
            let mut cancelled = false;
            // Several calls in one round: show them as the round's plan.
            let mut plan = RoundPlan::new(&reasoned.calls, &env.secret_values_in(&session.cwd));
            plan.publish(sink);
            for (i, call) in reasoned.calls.iter().enumerate() {
                // Every call gets an answer in the history, even the ones
                // skipped by a cancel: providers reject dangling calls.
                if cancelled || cancel.is_cancelled() {
                    push(
                        session,
                        &mut history,
                        ChatMessage::tool_result(call.id.clone(), "cancelled", true),
                    );
                    cancelled = true;
                    continue;
                }
                plan.mark(i, acp::PlanEntryStatus::InProgress, sink);
                // The client sees a session-unique id; the model keeps
                // its own (the result must answer the id it gave).
                let shown = crate::llm::ToolCall {
                    id: session.unique_call_id(&call.id),
                    ..call.clone()
                };
                recording.remember_provider_id(&shown.id, &call.id);
                let acted = act(&shown, &act_env).await;
                plan.mark(i, acp::PlanEntryStatus::Completed, sink);
                cancelled |= acted.status == ActStatus::Cancelled;
                let mut observation = acted.observation;
                observation.call_id = call.id.clone();
                push(session, &mut history, observation.into_message());
            }
            if cancelled {
                return Ok(acp::StopReason::Cancelled);
            }
            if let Some(p) = problems.take() {
                push(session, &mut history, ChatMessage::user(p));
            }
        }
        tracing::info!(session = %session.id, max_rounds, "round limit reached");
        Ok(acp::StopReason::MaxTurnRequests)
    }
    .await;
    finish_journal(session, &history, &result).await;
    report_status(sink, session, "idle");
    result
}

/// Add a message to the history and to the journal.
fn push(session: &Session, history: &mut Vec<ChatMessage>, message: ChatMessage) {
    session.record(Event::Message {
        message: message.clone(),
    });
    history.push(message);
}

/// The turn's end in the journal, made durable (fsync) before the caller
/// answers; past the size cap the journal becomes one snapshot.
async fn finish_journal(
    session: &Session,
    history: &[ChatMessage],
    result: &Result<acp::StopReason, TurnError>,
) {
    let Some(journal) = session.journal() else {
        return;
    };
    let stop_reason = match result {
        Ok(stop) => serde_json::to_value(stop)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".into()),
        Err(_) => "error".into(),
    };
    journal.append(Event::TurnEnd { stop_reason });
    match journal.sync().await {
        Ok(size) if size > journal.cap_bytes() => {
            let spent = session.spent();
            tracing::info!(session = %session.id, size, cap = journal.cap_bytes(), "session journal past its cap: rewriting it as a snapshot");
            if let Err(e) = journal
                .snapshot(
                    &session.cwd,
                    history,
                    session.usage(),
                    spent.cost,
                    Some(session.mode()),
                    crate::sandbox::registry_proxy::session_grant(&session.id)
                        .map(|g| g == crate::sandbox::registry_proxy::SessionGrant::Granted),
                )
                .await
            {
                tracing::error!(session = %session.id, "session snapshot failed: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::error!(session = %session.id, "session journal: {e}"),
    }
}

/// The window a request must fit: the smallest of the cascade's providers
/// (any of them may end up answering), and that provider's label.
fn smallest_window(env: &AgentEnv, models: &Cascade) -> (u64, String) {
    let default = env.config.context.default_window;
    models
        .providers()
        .map(|p| {
            let window = p
                .context_window()
                .or_else(|| perceive::known_window(p.model()))
                .unwrap_or(default);
            (window, p.label())
        })
        .min_by_key(|(window, _)| *window)
        .unwrap_or((default, "the model".into()))
}

/// Ends a prompt cut to fit the window (`[context] over_window = "cut"`).
fn cut_note(kept: usize, total: usize, window: u64) -> String {
    format!(
        "\n[passepartout cut this prompt to fit the {window}-token context window: \
         the first {kept} of {total} bytes were kept]"
    )
}

/// `prompt` if it fits the window beside the system prompt and tools;
/// otherwise refused, or cut to its beginning with a note saying so.
fn fit_prompt(
    prompt: String,
    toolset: &super::Toolset,
    cwd: &std::path::Path,
    window: u64,
    model: &str,
    context: &crate::config::ContextConfig,
) -> Result<String, TurnError> {
    let overhead_tokens = crate::budget::estimate_tokens(&perceive::request(&[], toolset, cwd));
    // As `budget::estimate_tokens` counts a message (without copying a
    // prompt that may be megabytes long).
    let prompt_tokens = (prompt.len() as u64 + 16).div_ceil(4);
    if overhead_tokens + prompt_tokens <= window {
        return Ok(prompt);
    }
    let refused = TurnError::PromptOverWindow {
        prompt_tokens,
        overhead_tokens,
        window,
        model: model.to_string(),
    };
    if context.over_window == crate::config::OverWindow::Refuse {
        return Err(refused);
    }
    // Cut to the compaction limit, not the window: the answer needs room
    // too, and the estimate is only an estimate. What is left, in bytes
    // (the estimate's four per token), less the note and a message's
    // framing.
    let limit = (window as f64 * context.compact_at) as u64;
    let room = limit
        .saturating_sub(overhead_tokens + 16)
        .saturating_mul(4)
        .saturating_sub(cut_note(prompt.len(), prompt.len(), window).len() as u64);
    let mut kept = usize::try_from(room)
        .unwrap_or(usize::MAX)
        .min(prompt.len());
    while !prompt.is_char_boundary(kept) {
        kept -= 1;
    }
    if kept == 0 {
        // Not even the note fits beside the tools: nothing to send.
        return Err(refused);
    }
    let total = prompt.len();
    let mut cut = prompt;
    cut.truncate(kept);
    cut.push_str(&cut_note(kept, total, window));
    Ok(cut)
}

/// The model behind a provider label (for its price).
fn model_of(models: &Cascade, label: &str) -> String {
    models
        .providers()
        .find(|p| p.label() == label)
        .map(|p| p.model().to_string())
        .unwrap_or_default()
}

/// The provider's own usage; when it reported none (some local servers),
/// the estimate, so budgets still advance.
fn measured_usage(reported: &Usage, request: &ChatRequest, answer: &str) -> Usage {
    if reported.input_tokens > 0 || reported.output_tokens > 0 {
        return *reported;
    }
    Usage {
        input_tokens: crate::budget::estimate_tokens(request),
        output_tokens: answer.len().div_ceil(4) as u64,
        ..Usage::default()
    }
}

enum Stop {
    Cancelled,
    Budget,
}

/// Refuse to send `request` when it would exceed a budget: the person is
/// told why and how to raise it, and the turn ends (`max_tokens`).
async fn within_budget(
    env: &AgentEnv,
    session: &Session,
    models: &Cascade,
    spent: &Spent,
    request: &ChatRequest,
    sink: &dyn TurnSink,
) -> Result<(), acp::StopReason> {
    if env.accounts.budget().is_empty() {
        return Ok(());
    }
    let tokens = crate::budget::estimate_tokens(request);
    // Priced at the dearest provider of the cascade: any may answer.
    let cost = models
        .providers()
        .map(|p| env.accounts.input_cost(p.model(), tokens))
        .fold(0.0, f64::max);
    let day = day_spent(env).await;
    match env
        .accounts
        .check(spent, &session.spent(), &day, tokens, cost)
    {
        Ok(()) => Ok(()),
        Err(exceeded) => {
            let text = exceeded.to_string();
            tracing::warn!(session = %session.id, "{text}");
            let update = acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text.into()));
            session.record(Event::Update {
                update: serde_json::to_value(&update).unwrap_or_default(),
            });
            sink.update(update);
            session.set_stop_detail(Some(BUDGET_STOP.into()));
            Err(acp::StopReason::MaxTokens)
        }
    }
}

async fn day_spent(env: &AgentEnv) -> Spent {
    let accounts = env.accounts.clone();
    tokio::task::spawn_blocking(move || accounts.day_spent())
        .await
        .unwrap_or_default()
}

/// Count one request: session and turn totals, the journal, the day
/// ledger, and the notifications (`_passepartout/usage`, ACP
/// `usage_update`).
#[allow(clippy::too_many_arguments)]
async fn account(
    env: &AgentEnv,
    session: &Session,
    models: &Cascade,
    provider: &str,
    usage: &Usage,
    window: u64,
    spent: &mut Spent,
    sink: &dyn TurnSink,
) {
    let model = model_of(models, provider);
    let cost = env.accounts.prices.cost(&model, usage);
    spent.add(usage, cost);
    session.add_spent(usage, cost);
    session.record(Event::Usage {
        model: model.clone(),
        usage: *usage,
        cost,
    });
    let accounts = env.accounts.clone();
    let (id, u) = (session.id.clone(), *usage);
    let day = tokio::task::spawn_blocking(move || {
        accounts.record(&id, &model, &u, cost);
        accounts.day_spent()
    })
    .await
    .unwrap_or_default();
    let session_spent = session.spent();
    sink.notify(
        crate::protocol::EXT_USAGE,
        serde_json::json!({
            "sessionId": session.id,
            "turn": spent,
            "session": session_spent,
            "day": day,
            "currency": crate::budget::CURRENCY,
            "budget": env.accounts.budget_report(spent, &session_spent, &day),
        }),
    );
    sink.update(acp::SessionUpdate::UsageUpdate(
        acp::UsageUpdate::new(usage.input_tokens + usage.output_tokens, window)
            .cost(acp::Cost::new(session_spent.cost, crate::budget::CURRENCY)),
    ));
}

/// Make the history fit: first trim old tool outputs, then (if still too
/// big) summarise the turns before this one with one request to the model.
/// The result is recorded in the journal and announced to the client.
#[allow(clippy::too_many_arguments)]
async fn compact(
    env: &AgentEnv,
    session: &Session,
    history: &mut Vec<ChatMessage>,
    turn_start: &mut usize,
    toolset: &super::Toolset,
    models: &Cascade,
    window: u64,
    sink: &dyn TurnSink,
    cancel: &CancellationToken,
    spent: &mut Spent,
) -> Result<(), Stop> {
    let limit = (window as f64 * env.config.context.compact_at) as u64;
    let size = |h: &[ChatMessage]| {
        crate::budget::estimate_tokens(&ChatRequest {
            messages: h.to_vec(),
            tools: Vec::new(),
            max_tokens: None,
            temperature: None,
        })
    };
    // The fixed part (system prompt, tools) is what a request costs beyond
    // its history.
    let toolset_overhead =
        crate::budget::estimate_tokens(&perceive::request(&[], toolset, &session.cwd));
    let before = size(history) + toolset_overhead;
    // Stage one: every tool result but the latest round's.
    let last_assistant = history
        .iter()
        .rposition(|m| m.role == crate::llm::Role::Assistant)
        .unwrap_or(0);
    let trimmed = perceive::trim_tool_outputs(history, last_assistant);
    let mut summary = String::new();
    if size(history) + toolset_overhead > limit && *turn_start > 0 {
        // Stage two: summarise the turns before this one.
        let older = &history[..*turn_start];
        let max_chars = (window as usize).saturating_mul(2); // about half the window
        let mut request = perceive::summary_request(older, max_chars);
        // The summary has a hard size, an eighth of the window: asked of the
        // model, and enforced on what it streams (a model may ignore it).
        let summary_tokens = summary_tokens(window);
        request.max_tokens = Some(u32::try_from(summary_tokens).unwrap_or(u32::MAX));
        if within_budget(env, session, models, spent, &request, sink)
            .await
            .is_err()
        {
            return Err(Stop::Budget);
        }
        report_status(sink, session, "compacting");
        let max_summary_chars =
            usize::try_from(summary_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
        match summarise(models, &request, cancel, max_summary_chars).await {
            Ok((provider, text, usage)) => {
                let usage = measured_usage(&usage, &request, &text);
                account(env, session, models, &provider, &usage, window, spent, sink).await;
                summary = text;
                let kept = history[*turn_start..].to_vec();
                *history = perceive::compacted_history(&summary, &kept);
                *turn_start = 2;
            }
            Err(SummaryError::Cancelled) => return Err(Stop::Cancelled),
            Err(SummaryError::Failed(e)) => {
                // Sending the long request is still better than nothing:
                // the provider will say if it does not fit.
                tracing::warn!(session = %session.id, "compaction summary failed: {e}");
            }
        }
    }
    let after = size(history) + toolset_overhead;
    if trimmed == 0 && summary.is_empty() {
        tracing::warn!(session = %session.id, before, limit, "history is over the compaction limit and nothing could be compacted");
        return Ok(());
    }
    tracing::info!(session = %session.id, before, after, trimmed, summarised = !summary.is_empty(), "history compacted");
    session.record(Event::Compacted {
        summary: summary.clone(),
        history: history.clone(),
        tokens_before: before,
        tokens_after: after,
    });
    sink.notify(
        crate::protocol::EXT_SESSION_COMPACTED,
        serde_json::json!({
            "sessionId": session.id,
            "tokensBefore": before,
            "tokensAfter": after,
            "window": window,
            "trimmedToolOutputs": trimmed,
            "summary": if summary.is_empty() { serde_json::Value::Null } else { summary.clone().into() },
        }),
    );
    Ok(())
}

/// The most tokens a compaction summary may take: an eighth of the window
/// (at least 256), so the history it replaces always shrinks.
fn summary_tokens(window: u64) -> u64 {
    (window / 8).max(256)
}

/// Marks a summary cut at its size limit.
const SUMMARY_CUT: &str = "\n[summary cut at its size limit]";

#[derive(Debug)]
enum SummaryError {
    Cancelled,
    Failed(String),
}

/// Ask the cascade for the summary, collecting its text (not shown as the
/// agent's answer), at most `max_chars` bytes of it: past that the stream is
/// dropped and the summary cut.
async fn summarise(
    models: &Cascade,
    request: &ChatRequest,
    cancel: &CancellationToken,
    max_chars: usize,
) -> Result<(String, String, Usage), SummaryError> {
    use futures::StreamExt;
    let answered = match models.stream(request, cancel.clone()).await {
        Ok(a) => a,
        Err(crate::llm::CascadeError::Cancelled) => return Err(SummaryError::Cancelled),
        Err(e) => return Err(SummaryError::Failed(e.to_string())),
    };
    let mut text = String::new();
    let mut usage = Usage::default();
    let mut events = answered.events;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
            next = events.next() => next,
        };
        match next {
            None | Some(Ok(StreamEvent::Finish(_))) => break,
            Some(Ok(StreamEvent::TextDelta(t))) => {
                text.push_str(&t);
                if text.len() > max_chars {
                    let mut end = max_chars;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    text.push_str(SUMMARY_CUT);
                    tracing::warn!(max_chars, "compaction summary cut at its size limit");
                    break;
                }
            }
            Some(Ok(StreamEvent::Usage(u))) => usage = u,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(SummaryError::Failed(e.to_string())),
        }
    }
    if text.trim().is_empty() {
        return Err(SummaryError::Failed(
            "the model returned an empty summary".into(),
        ));
    }
    Ok((answered.provider, text, usage))
}

/// Forwards everything; stores the updates a replay must show again
/// (tool calls, their updates, plans).
struct RecordingSink {
    inner: Arc<dyn TurnSink>,
    journal: Option<crate::sessions::Journal>,
    /// ACP tool-call id → the provider's, for the `tool_call`'s `_meta`
    /// (one turn's calls: bounded by the round and call limits).
    provider_ids: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl RecordingSink {
    fn remember_provider_id(&self, shown: &str, provider: &str) {
        crate::util::sync::lock(&self.provider_ids).insert(shown.to_string(), provider.to_string());
    }
}

impl TurnSink for RecordingSink {
    fn update(&self, mut update: acp::SessionUpdate) {
        if let acp::SessionUpdate::ToolCall(call) = &mut update {
            let provider = crate::util::sync::lock(&self.provider_ids)
                .get(&*call.tool_call_id.0)
                .cloned();
            if let Some(provider) = provider {
                let meta = call.meta.get_or_insert_with(Default::default);
                let ours = meta
                    .entry("passepartout")
                    .or_insert_with(|| serde_json::json!({}));
                if let Some(ours) = ours.as_object_mut() {
                    ours.insert("providerCallId".into(), provider.into());
                }
            }
        }
        if let Some(j) = &self.journal {
            if matches!(
                update,
                acp::SessionUpdate::ToolCall(_)
                    | acp::SessionUpdate::ToolCallUpdate(_)
                    | acp::SessionUpdate::Plan(_)
            ) {
                if let Ok(value) = serde_json::to_value(&update) {
                    j.append(Event::Update { update: value });
                }
            }
        }
        self.inner.update(update);
    }
    fn status(&self, status: SessionStatus) {
        self.inner.status(status);
    }
    fn notify(&self, method: &str, params: serde_json::Value) {
        self.inner.notify(method, params);
    }
    fn room(&self) -> Option<futures::future::BoxFuture<'static, ()>> {
        // Without this the turn never waits for a client that stopped
        // reading, and the answer grows without bound.
        self.inner.room()
    }
}

/// The ACP `plan` of a round with several tool calls: one entry per call,
/// updated as they run. A single call needs no plan (its `tool_call`
/// updates say it all).
struct RoundPlan {
    entries: Vec<acp::PlanEntry>,
}

impl RoundPlan {
    /// `values`: the person's secret values, hidden from the titles.
    fn new(
        calls: &[crate::llm::ToolCall],
        values: &crate::gates::known_values::ValueMatcher,
    ) -> Self {
        let entries = if calls.len() < 2 {
            Vec::new()
        } else {
            calls
                .iter()
                .map(|c| {
                    let mut arguments = c.arguments.clone();
                    crate::plans::shown::hide_in_json(&mut arguments, values);
                    acp::PlanEntry::new(
                        super::act::title(&c.name, &arguments),
                        acp::PlanEntryPriority::Medium,
                        acp::PlanEntryStatus::Pending,
                    )
                })
                .collect()
        };
        RoundPlan { entries }
    }

    fn publish(&self, sink: &dyn TurnSink) {
        if !self.entries.is_empty() {
            sink.update(acp::SessionUpdate::Plan(acp::Plan::new(
                self.entries.clone(),
            )));
        }
    }

    fn mark(&mut self, i: usize, status: acp::PlanEntryStatus, sink: &dyn TurnSink) {
        if let Some(e) = self.entries.get_mut(i) {
            e.status = status;
            self.publish(sink);
        }
    }
}
