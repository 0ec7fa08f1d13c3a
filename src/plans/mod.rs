//! Flight plans: an action the gates said "ask" about, written down for a
//! person to read, edit, approve or reject.
//!
//! A [`FlightPlan`] carries the exact [`Action`], the model's own words about
//! why it wants it, and the gate trace that explains why a person is asked.
//! It is rendered as an Org document ([`render()`]), read back after a person
//! edited it ([`parse`]), kept on disk so nothing is lost when Emacs or the
//! daemon goes away ([`store`]), and can be decided from a terminal
//! (`crate::cli::plans`). The plan's `hash` covers the action (target, effect, time
//! limit) and the working directory when it was written down: the store
//! refuses to approve or run a plan whose action or directory no longer
//! matches it.

pub mod evidence;
pub mod parse;
pub mod render;
pub mod shown;
pub mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::action::{Action, Effect};
use crate::gates::Verdict;

pub use parse::{parse_edited, PlanParseError};
pub use render::render;
pub use store::{
    CorruptRecord, DecisionOutcome, EditDenied, PlanStore, Recovery, Scan, StoreError,
};

/// Largest result output kept with a plan, in bytes.
pub const RESULT_OUTPUT_LIMIT: usize = 4096;

/// Where a plan is in its life (docs/plans.md has the whole table). Only
/// `Pending` plans can be decided; only `Approved` ones can begin;
/// `Interrupted` ones are never re-run automatically. The plan file, `plans
/// show`, the audit log, the `plan/resolved` notification and what the
/// model is told all use these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// Waiting for a person.
    Pending,
    /// A person approved it; it has not begun yet.
    Approved,
    /// It began running and has not finished.
    Executing,
    /// It ran and succeeded.
    Executed,
    /// A person rejected it.
    Rejected,
    /// It ran and failed.
    Failed,
    /// Approved, but refused before it ran: the gates or the session mode
    /// at the last mile, a stale record, or an action that differs from
    /// the approved one.
    Denied,
    /// It was stopped while running (the turn was cancelled, the person
    /// quit, or the daemon died); its outcome is unknown.
    Interrupted,
}

impl PlanStatus {
    /// The snake_case name used in JSON, the CLI and the `:STATUS:` property.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Pending => "pending",
            PlanStatus::Approved => "approved",
            PlanStatus::Executing => "executing",
            PlanStatus::Executed => "executed",
            PlanStatus::Rejected => "rejected",
            PlanStatus::Failed => "failed",
            PlanStatus::Denied => "denied",
            PlanStatus::Interrupted => "interrupted",
        }
    }

    /// The Org TODO keyword shown on the plan's heading.
    pub fn org_keyword(self) -> &'static str {
        match self {
            PlanStatus::Pending => "TODO",
            PlanStatus::Approved => "APPROVED",
            PlanStatus::Executing => "RUNNING",
            PlanStatus::Executed => "DONE",
            PlanStatus::Rejected => "REJECTED",
            PlanStatus::Failed => "FAILED",
            PlanStatus::Denied => "DENIED",
            PlanStatus::Interrupted => "INTERRUPTED",
        }
    }
}

impl PlanStatus {
    /// Whether the plan's life is over (nothing more will happen to it).
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            PlanStatus::Pending | PlanStatus::Approved | PlanStatus::Executing
        )
    }
}

impl std::fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a person decided about a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanDecision {
    /// `true` for approve, `false` for reject.
    pub approved: bool,
    /// Who decided: `emacs`, `cli`, or a client's name.
    pub by: String,
    /// The person's optional reason or note.
    #[serde(default)]
    pub comment: Option<String>,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Whether the person changed the action before approving.
    #[serde(default)]
    pub edited: bool,
}

/// How a plan's execution ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanResult {
    pub is_error: bool,
    /// The actuator's output, cut to [`RESULT_OUTPUT_LIMIT`] bytes.
    pub output: String,
    /// When it ended, RFC 3339 UTC.
    pub at: String,
}

impl PlanResult {
    /// A result stamped now, its output truncated to
    /// [`RESULT_OUTPUT_LIMIT`] bytes (on a character boundary, with a note
    /// saying how long it was).
    pub fn new(is_error: bool, output: &str) -> Self {
        PlanResult {
            is_error,
            output: truncate_output(output, RESULT_OUTPUT_LIMIT),
            at: crate::util::time::now_rfc3339(),
        }
    }
}

fn truncate_output(output: &str, limit: usize) -> String {
    if output.len() <= limit {
        return output.to_string();
    }
    let mut end = limit;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… (truncated: {} bytes in all)",
        &output[..end],
        output.len()
    )
}

/// An action waiting for (or past) a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlightPlan {
    /// `fp-` followed by 12 hex digits.
    pub id: String,
    pub session_id: String,
    pub tool_call_id: String,
    /// RFC 3339 UTC, millisecond precision, so that plans sort by creation.
    pub created_at: String,
    /// The model's own words about why: the assistant text before the call.
    pub explanation: String,
    /// The action that runs if approved (the edited one after an edit).
    pub action: Action,
    /// The gate verdicts that led to asking.
    pub trace: Vec<Verdict>,
    /// [`FlightPlan::content_hash`] as approved (or as proposed while
    /// pending): the action's hash together with `cwd`.
    pub hash: String,
    pub status: PlanStatus,
    #[serde(default)]
    pub decision: Option<PlanDecision>,
    #[serde(default)]
    pub result: Option<PlanResult>,
    /// The model's proposal, kept when a person edited the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<Action>,
    /// The session's working directory, so a plan approved after its
    /// daemon restarted still runs where it was meant to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// The process whose turn made the plan and may be waiting for its
    /// decision (not part of the hash: it says who runs it, not what).
    /// Absent in older plans: read from the session id then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pid: Option<u32>,
    /// What the proposed action changes, as a unified diff, for the person
    /// to read before deciding (a `write_file`: the file now against the
    /// new content). Made when the plan is made; not part of the hash, and
    /// not shown once a person edited the action (it would be stale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<String>,
}

impl FlightPlan {
    /// A new pending plan with a fresh id, stamped now.
    pub fn new(
        session_id: impl Into<String>,
        tool_call_id: impl Into<String>,
        explanation: impl Into<String>,
        action: Action,
        trace: Vec<Verdict>,
    ) -> Self {
        let session_id = session_id.into();
        let now = SystemTime::now();
        FlightPlan {
            id: new_plan_id(&session_id, now),
            hash: action.content_hash(),
            session_id,
            tool_call_id: tool_call_id.into(),
            created_at: crate::util::time::rfc3339(now),
            explanation: explanation.into(),
            action,
            trace,
            status: PlanStatus::Pending,
            decision: None,
            result: None,
            original: None,
            cwd: None,
            owner_pid: Some(std::process::id()),
            changes: None,
        }
    }

    /// The pid of the process whose turn made this plan: recorded, or
    /// (older plans) read from the session id (`…-PID-N`). A session
    /// loaded by a later daemon keeps its id, so only the recorded pid
    /// names the daemon actually waiting.
    pub fn owner(&self) -> Option<u32> {
        self.owner_pid
            .or_else(|| crate::state_lock::session_owner(&self.session_id))
    }

    /// The hash this plan's `hash` must equal: the action's content hash
    /// together with the working directory it runs in (when recorded).
    pub fn content_hash(&self) -> String {
        match &self.cwd {
            Some(cwd) => self.action.content_hash_in(cwd),
            None => self.action.content_hash(),
        }
    }

    /// Record the working directory the action runs in, and re-hash: the
    /// directory is part of what the person approves.
    pub fn in_cwd(mut self, cwd: std::path::PathBuf) -> Self {
        self.cwd = Some(cwd);
        self.hash = self.content_hash();
        self
    }

    /// One line saying what the action does, for headings and listings.
    pub fn summary(&self) -> String {
        summary(&self.action)
    }
}

/// Whether `id` has the shape of a plan id (`fp-` and 12 lowercase hex
/// digits). Anything else is refused before it can name a file.
pub fn is_valid_plan_id(id: &str) -> bool {
    id.strip_prefix("fp-").is_some_and(|hex| {
        hex.len() == 12
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A fresh id: a hash of the session, the time, the process and a counter,
/// so two plans made in the same instant (or by two processes) differ.
fn new_plan_id(session_id: &str, now: SystemTime) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(session_id.as_bytes());
    hasher.update(nanos.to_le_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(count.to_le_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("fp-{hex}")
}

/// One line describing what `action` does, at most about 72 characters.
pub fn summary(action: &Action) -> String {
    let text = match &action.effect {
        Effect::Run { script, .. } => first_line_with_more(script),
        Effect::ReadFile { path } => format!("read {}", path.display()),
        Effect::ListDir { path } => format!("list {}", path.display()),
        Effect::SearchText { path, pattern } => {
            format!("search {} for {}", path.display(), one_line(pattern))
        }
        Effect::WriteFile { path, content } => {
            format!("write {} ({} bytes)", path.display(), content.len())
        }
        Effect::EvalElisp { code, .. } => first_line_with_more(code),
        Effect::Message { text } => first_line_with_more(text),
        Effect::Op { op, .. } => format!("op {}", one_line(op)),
    };
    shorten(&one_line(&text), 72)
}

/// The first non-blank line, with a note when more lines follow.
fn first_line_with_more(text: &str) -> String {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("").trim().to_string();
    let more = lines.count();
    match more {
        0 => first,
        1 => format!("{first} (+1 line)"),
        n => format!("{first} (+{n} lines)"),
    }
}

fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let cut: String = text.chars().take(max_chars - 1).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::Decision;

    #[test]
    fn the_owner_is_the_process_that_made_the_plan_not_the_session_id() {
        // A session first made by pid 4567, loaded again by this daemon.
        let plan = FlightPlan::new("20261123T181500-4567-3", "c1", "", shell("ls"), vec![]);
        assert_eq!(plan.owner(), Some(std::process::id()));
        let json = serde_json::to_string(&plan).unwrap();
        let back: FlightPlan = serde_json::from_str(&json).unwrap();
        assert_eq!(back.owner(), Some(std::process::id()));
        // A plan written before the field existed: read from the id.
        let mut old = serde_json::to_value(&plan).unwrap();
        old.as_object_mut().unwrap().remove("owner_pid");
        let old: FlightPlan = serde_json::from_value(old).unwrap();
        assert_eq!(old.owner(), Some(4567));
        // Not part of what a person approves.
        assert_eq!(plan.content_hash(), old.content_hash());
    }

    fn shell(script: &str) -> Action {
        Action::shell_for_tests(script)
    }

    #[test]
    fn plan_ids_are_fresh_and_well_formed() {
        let a = FlightPlan::new("s", "c", "", shell("ls"), vec![]);
        let b = FlightPlan::new("s", "c", "", shell("ls"), vec![]);
        assert_ne!(a.id, b.id);
        assert!(is_valid_plan_id(&a.id), "{}", a.id);
        assert!(!is_valid_plan_id("fp-../../etc"));
        assert!(!is_valid_plan_id("fp-0123456789AB"));
        assert!(!is_valid_plan_id("fp-0123456789a"));
        assert_eq!(a.hash, shell("ls").content_hash());
        assert_eq!(a.status, PlanStatus::Pending);
    }

    #[test]
    fn the_plan_hash_covers_the_directory_and_the_time_limit() {
        let plan = FlightPlan::new("s", "c", "", shell("ls"), vec![]).in_cwd("/work/p".into());
        assert_eq!(plan.hash, plan.content_hash());
        assert_ne!(plan.hash, shell("ls").content_hash());
        let mut moved = plan.clone();
        moved.cwd = Some("/elsewhere".into());
        assert_ne!(moved.content_hash(), plan.hash);
        let mut slower = plan.clone();
        slower.action.timeout_secs = Some(86_400);
        assert_ne!(slower.content_hash(), plan.hash);
    }

    #[test]
    fn status_serialises_snake_case() {
        assert_eq!(
            serde_json::to_string(&PlanStatus::Interrupted).unwrap(),
            r#""interrupted""#
        );
        assert_eq!(PlanStatus::Executing.org_keyword(), "RUNNING");
    }

    #[test]
    fn plan_round_trips_through_json() {
        let mut plan = FlightPlan::new(
            "sess",
            "call-1",
            "Because.",
            shell("rm -rf build"),
            vec![Verdict::new(Decision::Ask, "destructive", "rm -rf")],
        );
        plan.decision = Some(PlanDecision {
            approved: true,
            by: "cli".into(),
            comment: Some("ok".into()),
            at: crate::util::time::now_rfc3339(),
            edited: false,
        });
        plan.result = Some(PlanResult::new(false, "done"));
        let json = serde_json::to_string(&plan).unwrap();
        let back: FlightPlan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn result_output_is_truncated_on_a_char_boundary() {
        let long = "é".repeat(3000); // 6000 bytes
        let r = PlanResult::new(true, &long);
        assert!(r.output.starts_with(&"é".repeat(2048)));
        assert!(r.output.ends_with("\n… (truncated: 6000 bytes in all)"));
        assert_eq!(PlanResult::new(false, "short").output, "short");
    }

    #[test]
    fn summaries_are_one_line() {
        assert_eq!(summary(&shell("ls\n\n  echo hi\n")), "ls (+1 line)");
        let mut a = shell("x");
        a.effect = Effect::WriteFile {
            path: "notes/a.txt".into(),
            content: "abc\n".into(),
        };
        assert_eq!(summary(&a), "write notes/a.txt (4 bytes)");
        assert_eq!(summary(&shell(&"y".repeat(100))).chars().count(), 72);
    }
}
