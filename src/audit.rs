//! The audit log: an append-only record of what was proposed, how the gates
//! judged it, what a person decided and what ran.
//!
//! One JSON object per line, each flushed to disk (`sync_data`) before
//! `append` returns, so a crash loses at most the record being written.
//! The daemon records through [`AuditLog::record`], which hands the line to
//! the shared writer thread (`util::jsonl`: in order, a queue of
//! [`QUEUE_LIMIT`] lines that makes callers wait when full), so the fsync
//! never blocks the async runtime. The file is created `0600` in a `0700` directory: it holds
//! commands and their output.
//! Secrets are redacted with the secrets gate's patterns before anything is
//! written; tool output is capped at 2 KB. The log lives at
//! `$XDG_STATE_HOME/passepartout/audit.jsonl` (by default
//! `~/.local/state/passepartout/audit.jsonl`; [`crate::paths::StateDir`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::{Action, Effect};
use crate::gates::secrets::redact;
use crate::gates::Judgement;
use crate::util::jsonl::Appender;

/// Tool output kept per `executed` record.
pub const OUTPUT_LIMIT: usize = 2048;

/// Why the log could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Creating, opening, writing or syncing the file failed.
    #[error("audit log {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record could not be turned into JSON.
    #[error("audit record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
    /// Another writer panicked while holding the file.
    #[error("audit log lock poisoned by a panicking writer")]
    Poisoned,
}

/// What a person decided about a flight plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanOutcome {
    Approved,
    Rejected,
}

/// One event in the life of an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEvent {
    /// The model proposed a tool call and it was planned into an action.
    Proposed {
        session: String,
        tool_call_id: String,
        /// [`Action::content_hash`] of the action as proposed.
        action_hash: String,
        /// The action, with secrets redacted.
        action: Value,
    },
    /// The gates judged the action.
    Verdict {
        session: String,
        tool_call_id: String,
        judgement: Judgement,
    },
    /// A person approved or rejected a flight plan.
    Decision {
        plan_id: String,
        outcome: PlanOutcome,
        /// The client the decision came through: `emacs`, an ACP client's
        /// name, `cli` (`passepartout plans`), `run` (its terminal prompt).
        by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
        /// What was proposed and what was approved (absent in records from
        /// before they were kept, and for decisions made outside a plan).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Box<DecisionEvidence>>,
    },
    /// An actuator ran the action.
    Executed {
        /// The session whose turn ran it (absent in records from before
        /// sessions were recorded here).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// The flight plan it ran under, when a person approved it as one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan_id: Option<String>,
        tool_call_id: String,
        is_error: bool,
        /// Redacted and capped at [`OUTPUT_LIMIT`] bytes.
        output: String,
    },
    /// The action was refused (by the gates, the last-mile check or a
    /// person).
    Denied {
        session: String,
        tool_call_id: String,
        reason: String,
    },
    /// The observed effect of an action on the working tree (a checkpoint):
    /// `status` is `applied`, `held`, `rejected` or `undone`.
    Effect {
        session: String,
        tool_call_id: String,
        checkpoint: String,
        status: String,
        summary: String,
        /// Paths created, modified and deleted, and bytes added/removed.
        effect: Value,
    },
}

/// A decision as evidence: the proposed action, the approved one (the
/// person's edit, when they changed it), the difference, who decided, and
/// the gate verdicts on both. Actions and reasons are redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionEvidence {
    pub session: String,
    pub tool_call_id: String,
    /// The operating-system user of the process that recorded the
    /// decision (the person at the client named by `by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    /// [`Action::content_hash`] of the model's proposal.
    pub proposed_hash: String,
    /// The model's proposal.
    pub proposed: Value,
    /// The gate verdicts on the proposal (why a person was asked).
    pub proposed_verdicts: Vec<crate::gates::Verdict>,
    /// Whether the person changed the action before approving it.
    #[serde(default)]
    pub edited: bool,
    /// The approved action's hash; with `approved`, `diff` and
    /// `approved_verdicts` only when it differs from the proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<Value>,
    /// A line diff, proposal (`-`) to approved action (`+`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The gates' judgement of the edited action, made before it was
    /// recorded as approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_verdicts: Option<Judgement>,
}

impl DecisionEvidence {
    /// Evidence for `proposed` (with the verdicts that asked), approved as
    /// `approved` when that differs (with its own judgement and `diff`).
    pub fn new(
        session: &str,
        tool_call_id: &str,
        proposed: &Action,
        proposed_verdicts: &[crate::gates::Verdict],
        edit: Option<(&Action, String, Option<&Judgement>)>,
    ) -> Self {
        let redacted = |action: &Action| {
            let mut value = serde_json::to_value(action).unwrap_or(Value::Null);
            redact_value(&mut value);
            value
        };
        let mut verdicts = proposed_verdicts.to_vec();
        for v in &mut verdicts {
            v.reason = redact(&v.reason);
        }
        let mut evidence = DecisionEvidence {
            session: session.into(),
            tool_call_id: tool_call_id.into(),
            person: std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .ok(),
            proposed_hash: proposed.content_hash(),
            proposed: redacted(proposed),
            proposed_verdicts: verdicts,
            edited: false,
            approved_hash: None,
            approved: None,
            diff: None,
            approved_verdicts: None,
        };
        if let Some((approved, diff, judgement)) = edit {
            evidence.edited = true;
            evidence.approved_hash = Some(approved.content_hash());
            evidence.approved = Some(redacted(approved));
            evidence.diff = Some(redact(&diff));
            evidence.approved_verdicts = judgement.map(|j| {
                let mut j = j.clone();
                for v in &mut j.trace {
                    v.reason = redact(&v.reason);
                }
                j
            });
        }
        evidence
    }
}

/// A timestamped event: one line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// RFC 3339 UTC time with milliseconds (`2026-11-22T20:15:03.123Z`).
    pub ts: String,
    #[serde(flatten)]
    pub event: AuditEvent,
}

impl AuditRecord {
    /// Stamp an event with the current time.
    pub fn now(event: AuditEvent) -> Self {
        AuditRecord {
            ts: crate::util::time::now_rfc3339(),
            event,
        }
    }

    /// A `proposed` record; string values inside the action are redacted.
    pub fn proposed(session: &str, tool_call_id: &str, action: &Action) -> Self {
        let mut value = serde_json::to_value(action).unwrap_or(Value::Null);
        redact_value(&mut value);
        Self::now(AuditEvent::Proposed {
            session: session.into(),
            tool_call_id: tool_call_id.into(),
            action_hash: action.content_hash(),
            action: value,
        })
    }

    /// A `verdict` record with the whole trace (reasons redacted).
    pub fn verdict(session: &str, tool_call_id: &str, judgement: &Judgement) -> Self {
        let mut judgement = judgement.clone();
        for v in &mut judgement.trace {
            v.reason = redact(&v.reason);
        }
        Self::now(AuditEvent::Verdict {
            session: session.into(),
            tool_call_id: tool_call_id.into(),
            judgement,
        })
    }

    /// A `decision` record for a flight plan.
    pub fn decision(plan_id: &str, outcome: PlanOutcome, by: &str, comment: Option<&str>) -> Self {
        Self::now(AuditEvent::Decision {
            plan_id: plan_id.into(),
            outcome,
            by: by.into(),
            comment: comment.map(redact),
            evidence: None,
        })
    }

    /// A `decision` record with its evidence (what was proposed, what was
    /// approved, the difference and the verdicts on both).
    pub fn decision_with(
        plan_id: &str,
        outcome: PlanOutcome,
        by: &str,
        comment: Option<&str>,
        evidence: DecisionEvidence,
    ) -> Self {
        Self::now(AuditEvent::Decision {
            plan_id: plan_id.into(),
            outcome,
            by: by.into(),
            comment: comment.map(redact),
            evidence: Some(Box::new(evidence)),
        })
    }

    /// An `executed` record; the output is redacted and capped.
    pub fn executed(tool_call_id: &str, is_error: bool, output: &str) -> Self {
        Self::executed_in(None, None, tool_call_id, is_error, output)
    }

    /// An `executed` record naming the session and the flight plan.
    pub fn executed_in(
        session: Option<&str>,
        plan_id: Option<&str>,
        tool_call_id: &str,
        is_error: bool,
        output: &str,
    ) -> Self {
        Self::now(AuditEvent::Executed {
            session: session.map(str::to_string),
            plan_id: plan_id.map(str::to_string),
            tool_call_id: tool_call_id.into(),
            is_error,
            output: truncate_output(&redact(output)),
        })
    }

    /// An `effect` record for a checkpoint.
    pub fn effect(cp: &crate::checkpoint::Checkpoint) -> Self {
        Self::now(AuditEvent::Effect {
            session: cp.session_id.clone(),
            tool_call_id: cp.tool_call_id.clone(),
            checkpoint: cp.id.clone(),
            status: cp.status.as_str().into(),
            summary: cp.summary(),
            effect: cp.effect.wire(&cp.id),
        })
    }

    /// A `denied` record.
    pub fn denied(session: &str, tool_call_id: &str, reason: &str) -> Self {
        Self::now(AuditEvent::Denied {
            session: session.into(),
            tool_call_id: tool_call_id.into(),
            reason: redact(reason),
        })
    }
}

impl AuditRecord {
    /// The record with every known secret value (in any form) taken out of
    /// its texts: the records are redacted by rule when made, and the
    /// daemon, which knows the person's values, adds this before writing.
    pub fn without_values(self, values: &crate::gates::known_values::ValueMatcher) -> Self {
        fn walk(value: &mut Value, m: &crate::gates::known_values::ValueMatcher) {
            match value {
                Value::String(s) => *s = crate::gates::secrets::redact_values(s, m),
                Value::Array(items) => items.iter_mut().for_each(|v| walk(v, m)),
                Value::Object(map) => map.values_mut().for_each(|v| walk(v, m)),
                _ => {}
            }
        }
        if values.is_empty() {
            return self;
        }
        let Ok(mut value) = serde_json::to_value(&self) else {
            return self;
        };
        walk(&mut value, values);
        serde_json::from_value(value).unwrap_or(self)
    }
}

fn redact_value(value: &mut Value) {
    match value {
        Value::String(s) => *s = redact(s),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => map.values_mut().for_each(redact_value),
        _ => {}
    }
}

/// Keep the first [`OUTPUT_LIMIT`] bytes (on a character boundary) and say
/// how much was dropped.
pub fn truncate_output(output: &str) -> String {
    if output.len() <= OUTPUT_LIMIT {
        return output.to_string();
    }
    let mut end = OUTPUT_LIMIT;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n…[truncated: {} of {} bytes kept]",
        &output[..end],
        end,
        output.len()
    )
}

/// The append-only log. Share it behind an `Arc`; appends from several
/// tasks are serialised by an inner mutex. `append` does blocking I/O with
/// an fsync: from async code, call it inside `spawn_blocking` if latency
/// matters.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
    /// The writer thread, started by the first `record` (`None`: it could
    /// not start, and records are written inline).
    writer: OnceLock<Option<Appender>>,
}

/// Lines [`AuditLog::record`] may queue before callers wait.
pub use crate::util::jsonl::QUEUE_LIMIT;

impl AuditLog {
    /// Open (creating the file and its parent directories) for appending.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AuditError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| AuditError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::paths::create_private_dir(parent).map_err(io)?;
        }
        let file = {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            // A log created by an older version may be world-readable.
            let mode = file.metadata().map_err(io)?.permissions().mode();
            if mode & 0o077 != 0 {
                file.set_permissions(std::fs::Permissions::from_mode(0o600))
                    .map_err(io)?;
            }
            file
        };
        Ok(AuditLog {
            path,
            file: Mutex::new(file),
            writer: OnceLock::new(),
        })
    }

    /// Queue a record for the writer thread (in order; waits only when
    /// [`QUEUE_LIMIT`] lines are queued). For async callers: the fsync
    /// happens off the runtime.
    pub fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        let writer = self.writer.get_or_init(|| match Appender::start("audit") {
            Ok(appender) => Some(appender),
            Err(e) => {
                tracing::error!("audit log: cannot start its writer thread: {e}; writing inline");
                None
            }
        });
        match writer {
            Some(w) => match w.append(&self.path, line, true) {
                Ok(()) => Ok(()),
                // The thread is gone: write here rather than lose the record.
                Err(_) => self.append(record),
            },
            None => self.write_line(&line),
        }
    }

    /// Wait until every queued record is on disk.
    pub fn flush(&self) {
        if let Some(Some(writer)) = self.writer.get() {
            let (tx, rx) = mpsc::channel();
            let done = Box::new(move |_: std::io::Result<u64>| {
                let _ = tx.send(());
            });
            if writer.sync(&self.path, done).is_ok() {
                let _ = rx.recv();
            }
        }
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record as a line and flush it to disk.
    pub fn append(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        self.write_line(&line)
    }

    fn write_line(&self, line: &str) -> Result<(), AuditError> {
        let mut file = self.file.lock().map_err(|_| AuditError::Poisoned)?;
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        // One write per record: with O_APPEND the line lands whole at the end.
        file.write_all(line.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)
    }
}

fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if line.chars().count() > max || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

fn summarize_action(action: &Value) -> String {
    let target = action.get("target").and_then(Value::as_str).unwrap_or("?");
    let effect = action
        .get("effect")
        .cloned()
        .and_then(|e| serde_json::from_value::<Effect>(e).ok());
    let what = match effect {
        Some(Effect::Run {
            interpreter,
            script,
            ..
        }) => format!("{interpreter}: {}", first_line(&script, 80)),
        Some(Effect::ReadFile { path }) => format!("read {}", path.display()),
        Some(Effect::ListDir { path }) => format!("list {}", path.display()),
        Some(Effect::SearchText { path, pattern }) => {
            format!("search {} for {}", path.display(), first_line(&pattern, 40))
        }
        Some(Effect::WriteFile { path, content }) => {
            format!("write {} ({} bytes)", path.display(), content.len())
        }
        Some(Effect::EvalElisp { code, .. }) => format!("elisp: {}", first_line(&code, 80)),
        Some(Effect::Message { text }) => format!("message: {}", first_line(&text, 80)),
        Some(Effect::Op { op, .. }) => format!("op {op}"),
        None => "unreadable action".to_string(),
    };
    format!("{target}  {what}")
}

/// One record as a human-readable line.
pub fn render(record: &AuditRecord) -> String {
    let ts = match record.ts.get(..19) {
        Some(secs) if record.ts.len() > 19 => format!("{secs}Z"),
        _ => record.ts.clone(),
    };
    let body = match &record.event {
        AuditEvent::Proposed {
            session,
            tool_call_id,
            action,
            ..
        } => format!(
            "proposed  session {session}  call {tool_call_id}  {}",
            summarize_action(action)
        ),
        AuditEvent::Verdict {
            session, judgement, ..
        } => {
            let deciders: Vec<String> = judgement
                .deciding()
                .map(|v| format!("{}: {}", v.gate, v.reason))
                .collect();
            format!(
                "verdict  session {session}  {}  {}",
                judgement.decision,
                deciders.join("; ")
            )
        }
        AuditEvent::Decision {
            plan_id,
            outcome,
            by,
            comment,
            evidence,
        } => {
            let outcome = match (outcome, evidence.as_ref().is_some_and(|e| e.edited)) {
                (PlanOutcome::Approved, true) => "approved with edits",
                (PlanOutcome::Approved, false) => "approved",
                (PlanOutcome::Rejected, _) => "rejected",
            };
            let mut s = format!("decision  plan {plan_id}  {outcome}  by {by}");
            if let Some(person) = evidence.as_ref().and_then(|e| e.person.as_deref()) {
                s.push_str(&format!(" ({person})"));
            }
            if let Some(c) = comment {
                s.push_str(&format!("  \"{}\"", first_line(c, 80)));
            }
            s
        }
        AuditEvent::Executed {
            session,
            plan_id,
            tool_call_id,
            is_error,
            output,
        } => {
            let mut s = String::from("executed  ");
            if let Some(session) = session {
                s.push_str(&format!("session {session}  "));
            }
            if let Some(plan) = plan_id {
                s.push_str(&format!("plan {plan}  "));
            }
            s.push_str(&format!(
                "call {tool_call_id}  {}  {}",
                if *is_error { "error" } else { "ok" },
                first_line(output, 80)
            ));
            s
        }
        AuditEvent::Denied {
            session,
            tool_call_id,
            reason,
        } => format!("denied  session {session}  call {tool_call_id}  {reason}"),
        AuditEvent::Effect {
            tool_call_id,
            status,
            summary,
            ..
        } => format!("effect  call {tool_call_id}  {status}  {summary}"),
    };
    format!("{ts}  {body}")
}

/// `passepartout audit`: print the log (or its last `tail` records), one
/// record per line. Returns the process exit code: 0 on success, 1 when the
/// log cannot be read, 2 when some lines were not valid records (they are
/// reported and skipped).
pub fn print_command(path: &Path, out: &mut dyn Write, tail: Option<usize>) -> i32 {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A fresh install: nothing has been recorded yet.
            let _ = writeln!(
                out,
                "The audit log is empty: nothing has been recorded yet ({} does not exist).",
                path.display()
            );
            return 0;
        }
        Err(e) => {
            let _ = writeln!(out, "cannot read the audit log {}: {e}", path.display());
            return 1;
        }
    };
    let mut lines: Vec<(usize, String)> = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        match line {
            Ok(l) if l.trim().is_empty() => {}
            Ok(l) => lines.push((n + 1, l)),
            Err(e) => {
                let _ = writeln!(out, "cannot read the audit log {}: {e}", path.display());
                return 1;
            }
        }
    }
    let skip = tail.map_or(0, |t| lines.len().saturating_sub(t));
    let mut code = 0;
    for (n, line) in lines.into_iter().skip(skip) {
        let rendered = match serde_json::from_str::<AuditRecord>(&line) {
            Ok(record) => render(&record),
            Err(e) => {
                code = 2;
                format!("line {n}: not an audit record ({e})")
            }
        };
        if writeln!(out, "{rendered}").is_err() {
            return 1;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use crate::gates::{Decision, Verdict};
    use std::sync::Arc;

    #[test]
    fn output_is_capped_with_a_marker() {
        assert_eq!(truncate_output("short"), "short");
        let long = "é".repeat(1500); // 3000 bytes, 2-byte chars
        let cut = truncate_output(&long);
        assert!(cut.starts_with(&"é".repeat(1024)));
        assert!(cut.ends_with("\n…[truncated: 2048 of 3000 bytes kept]"));
    }

    #[test]
    fn secrets_never_reach_the_log() {
        let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678";
        let action = Action {
            tool: "write".into(),
            target: "files".into(),
            arguments: serde_json::json!({ "content": key }),
            effect: Effect::WriteFile {
                path: "k.txt".into(),
                content: format!("KEY={key}"),
            },
            approval: Approval::Ask,
            timeout_secs: None,
        };
        let line = serde_json::to_string(&AuditRecord::proposed("s1", "c1", &action)).unwrap();
        assert!(!line.contains(key), "{line}");
        assert!(line.contains("sk-p…(44 chars)"));
        let line = serde_json::to_string(&AuditRecord::executed("c1", false, key)).unwrap();
        assert!(!line.contains(key));
    }

    #[test]
    fn concurrent_appends_are_all_present_and_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/audit.jsonl");
        let log = Arc::new(AuditLog::open(&path).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let out = format!("thread {t} record {i} {}", "x".repeat(300));
                        log.append(&AuditRecord::executed(&format!("t{t}-{i}"), false, &out))
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut ids: Vec<String> = text
            .lines()
            .map(|l| {
                let r: AuditRecord = serde_json::from_str(l).expect("each line is a record");
                match r.event {
                    AuditEvent::Executed { tool_call_id, .. } => tool_call_id,
                    other => panic!("unexpected {other:?}"),
                }
            })
            .collect();
        ids.sort();
        let mut expected: Vec<String> = (0..8)
            .flat_map(|t| (0..25).map(move |i| format!("t{t}-{i}")))
            .collect();
        expected.sort();
        assert_eq!(ids, expected);
    }

    #[test]
    fn records_round_trip_and_print_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let at = |event| AuditRecord {
            ts: "2026-11-22T20:15:03.412Z".into(),
            event,
        };
        let action = Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({}),
            effect: Effect::Run {
                interpreter: "bash".into(),
                script: "rm -rf /\necho done".into(),
                argv: vec![],
                env: Default::default(),
                network: false,
            },
            approval: Approval::Auto,
            timeout_secs: None,
        };
        let mut proposed = AuditRecord::proposed("s1", "c1", &action);
        proposed.ts = "2026-11-22T20:15:03.412Z".into();
        let judgement = Judgement::from_trace(vec![
            Verdict::new(
                Decision::Allow,
                "approval",
                "the tool `shell` runs without asking",
            ),
            Verdict::new(
                Decision::Deny,
                "destructive",
                "rm -r on the root directory /",
            ),
        ]);
        let records = vec![
            proposed,
            at(AuditEvent::Verdict {
                session: "s1".into(),
                tool_call_id: "c1".into(),
                judgement,
            }),
            at(AuditEvent::Denied {
                session: "s1".into(),
                tool_call_id: "c1".into(),
                reason: "denied by gate `destructive`".into(),
            }),
            at(AuditEvent::Decision {
                plan_id: "p7".into(),
                outcome: PlanOutcome::Approved,
                by: "emacs".into(),
                comment: Some("looks fine".into()),
                evidence: None,
            }),
            at(AuditEvent::Executed {
                session: None,
                plan_id: None,
                tool_call_id: "c2".into(),
                is_error: true,
                output: "exit 1\nmore".into(),
            }),
        ];
        for r in &records {
            log.append(r).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<AuditRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, records);
        assert!(text.lines().nth(1).unwrap().starts_with(
            r#"{"ts":"2026-11-22T20:15:03.412Z","kind":"verdict","session":"s1","tool_call_id":"c1","judgement":{"decision":"deny","#
        ));

        let mut out = Vec::new();
        assert_eq!(print_command(&path, &mut out, None), 0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-11-22T20:15:03Z  proposed  session s1  call c1  shell  bash: rm -rf /…\n\
             2026-11-22T20:15:03Z  verdict  session s1  deny  destructive: rm -r on the root directory /\n\
             2026-11-22T20:15:03Z  denied  session s1  call c1  denied by gate `destructive`\n\
             2026-11-22T20:15:03Z  decision  plan p7  approved  by emacs  \"looks fine\"\n\
             2026-11-22T20:15:03Z  executed  call c2  error  exit 1…\n"
        );

        let mut out = Vec::new();
        assert_eq!(print_command(&path, &mut out, Some(1)), 0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-11-22T20:15:03Z  executed  call c2  error  exit 1…\n"
        );
    }

    #[test]
    fn print_reports_missing_files_and_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.jsonl");
        let mut out = Vec::new();
        assert_eq!(print_command(&missing, &mut out, None), 0);
        assert!(String::from_utf8(out)
            .unwrap()
            .starts_with("The audit log is empty"));

        let path = dir.path().join("bad.jsonl");
        std::fs::write(&path, "{\"ts\":\"x\"}\n").unwrap();
        let mut out = Vec::new();
        assert_eq!(print_command(&path, &mut out, None), 2);
        assert!(String::from_utf8(out)
            .unwrap()
            .starts_with("line 1: not an audit record"));
    }
}
