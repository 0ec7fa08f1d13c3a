//! `passepartout undo` and `passepartout history`: the checkpoints of the
//! current directory (the observed changes of actions) from a terminal.

use std::process::ExitCode;

use clap::Args;

use super::{current_dir, load_config, ConfigFlags};
use crate::util::terminal::{escape_line, escape_text};

/// `println!` for text that holds names the agent chose (file names, tool
/// titles, errors quoting paths): escaped, so none steers the terminal.
macro_rules! say {
    ($($arg:tt)*) => { println!("{}", escape_text(&format!($($arg)*))) };
}

/// `eprintln!`, escaped like [`say!`].
macro_rules! say_err {
    ($($arg:tt)*) => { eprintln!("{}", escape_text(&format!($($arg)*))) };
}
use crate::audit::{AuditLog, AuditRecord};
use crate::checkpoint::{self, ChangeKind, Origin};

/// `passepartout undo [ID | --turn [TURN]] [--session ID]`.
#[derive(Args, Debug)]
pub struct UndoArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// The checkpoint to undo (default: the last applied one).
    pub id: Option<String>,
    /// Undo a whole turn (all its checkpoints, all or nothing): TURN
    /// from `history`, default the last turn that changed the directory.
    #[arg(long, value_name = "TURN", num_args = 0..=1, default_missing_value = "last", conflicts_with = "id")]
    pub turn: Option<String>,
    /// Undo the newest change of this session (`sessionId` in
    /// `history --json`) instead of the project's newest; with `--turn`,
    /// the session's last turn.
    #[arg(long, value_name = "ID", conflicts_with = "id")]
    pub session: Option<String>,
}

/// `passepartout history [--limit N] [--json] [--prune]`.
#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Only the newest N.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print JSON (one object per line) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Prune the store first (`[checkpoints] keep_records`, `keep_days`).
    #[arg(long)]
    pub prune: bool,
}

/// Revert a checkpoint or a turn's; the undo is recorded in the audit log.
pub fn undo(args: UndoArgs) -> ExitCode {
    let UndoArgs {
        flags,
        id,
        turn,
        session,
    } = args;
    let (config, cwd) = match load_config(&flags).and_then(|c| Ok((c, current_dir()?))) {
        Ok(found) => found,
        Err(e) => return e.report(),
    };
    let origin = Origin {
        session_id: "cli".into(),
        tool_call_id: String::new(),
        tool: "undo".into(),
        turn: None,
    };
    let audit = || AuditLog::open(config.state().audit_log());
    recover_first(&config, &cwd);
    if let Some(turn) = turn {
        let turn = Some(turn).filter(|t| t != "last");
        return match checkpoint::undo_turn(
            &config.state_dir(),
            &config.checkpoints,
            &cwd,
            turn.as_deref(),
            session.as_deref(),
            &origin,
        ) {
            Ok((turn, undone, undo)) => {
                let ids: Vec<&str> = undone.iter().map(|c| c.id.as_str()).collect();
                match undo {
                    Some(u) => {
                        if let Ok(log) = audit() {
                            let _ = log.append(&AuditRecord::effect(&u));
                        }
                        say!("undid turn {turn} ({}): {}", ids.join(", "), u.summary());
                    }
                    None => say!(
                        "undid turn {turn} ({}): nothing left to change",
                        ids.join(", ")
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                say_err!("passepartout: {e}");
                ExitCode::from(1)
            }
        };
    }
    match checkpoint::undo(
        &config.state_dir(),
        &config.checkpoints,
        &cwd,
        id.as_deref(),
        session.as_deref(),
        &origin,
    ) {
        Ok((undone, undo)) => {
            if let Ok(log) = audit() {
                let _ = log.append(&AuditRecord::effect(&undo));
            }
            // Named: which action this was, so an undo never surprises.
            say!(
                "undid {} ({}, {}): {}",
                undone.id,
                undone.tool,
                undone.created_at,
                undo.summary()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            say_err!("passepartout: {e}");
            ExitCode::from(1)
        }
    }
}

/// List the checkpoints, newest first, each with up to ten changed paths.
pub fn history(args: HistoryArgs) -> ExitCode {
    let HistoryArgs {
        flags,
        limit,
        json,
        prune,
    } = args;
    let (config, cwd) = match load_config(&flags).and_then(|c| Ok((c, current_dir()?))) {
        Ok(found) => found,
        Err(e) => return e.report(),
    };
    recover_first(&config, &cwd);
    if prune {
        match checkpoint::prune(&config.state_dir(), &config.checkpoints, &cwd) {
            Ok(pruned) => say_err!(
                "pruned {} checkpoint(s), freed {} bytes ({} -> {} bytes in the checkpoint stores)",
                pruned.ids.len(),
                pruned.freed(),
                pruned.bytes_before,
                pruned.bytes_after
            ),
            Err(e) => {
                say_err!("passepartout: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let list = match checkpoint::history(&config.state_dir(), &config.checkpoints, &cwd, limit) {
        Ok(l) => l,
        Err(e) => {
            say_err!("passepartout: {e}");
            return ExitCode::from(1);
        }
    };
    if list.is_empty() {
        say!("no checkpoints for {}", cwd.display());
    }
    if !json {
        // Undo steps older than the listing's oldest may be gone: say why.
        if let Ok(Some(e)) =
            checkpoint::last_eviction(&config.state_dir(), &config.checkpoints, &cwd)
        {
            let first = e.ids.first().map_or("", String::as_str);
            let last = e.ids.last().map_or("", String::as_str);
            say!("{} (at {}: {first} to {last})", e.message(), e.at);
        }
    }
    for cp in list {
        if json {
            // JSON escapes control characters itself; a machine reads it.
            println!("{}", cp.wire());
            continue;
        }
        let undoes = cp
            .undoes
            .as_deref()
            .map(|u| format!(" (undoes {u})"))
            .unwrap_or_default();
        say!(
            "{}  {}  {}  {}  {}{undoes}  {}",
            cp.id,
            cp.status.as_str(),
            cp.created_at,
            cp.turn.as_deref().unwrap_or("-"),
            cp.tool,
            cp.summary()
        );
        for c in cp.effect.changes.iter().take(10) {
            let mark = match c.kind {
                ChangeKind::Created => '+',
                ChangeKind::Modified => '~',
                ChangeKind::Deleted => '-',
            };
            match c.mode_change() {
                Some(mode) => say!("    {mark} {}  {mode}", escape_line(&c.path)),
                None => say!("    {mark} {}", escape_line(&c.path)),
            }
        }
        if cp.effect.changes.len() > 10 {
            say!("    … {} more", cp.effect.changes.len() - 10);
        }
        // Refs moved, made or deleted (`ref main: a1b2c3d → d4e5f6a
        // "subject"`), folders made, removed or re-moded, and the bits
        // that were not applied.
        for r in cp.effect.refs.iter().take(10) {
            say!("    {}", escape_line(&r.line()));
        }
        if cp.effect.refs.len() > 10 {
            say!("    … {} more refs", cp.effect.refs.len() - 10);
        }
        for d in cp.effect.dirs.iter().take(10) {
            say!("    {}", escape_line(&d.line()));
        }
        if cp.effect.dirs.len() > 10 {
            say!("    … {} more folders", cp.effect.dirs.len() - 10);
        }
        for s in cp.effect.stripped.iter().take(10) {
            say!("    not applied: {}", escape_line(s));
        }
        // Files written or removed in ignored trees (`.venv`,
        // `node_modules`, build output): not part of the effect, but
        // listed, marked, and undone with it.
        let ignored: Vec<_> = cp.ignored_files().collect();
        for p in ignored.iter().take(10) {
            let mark = if p.remove {
                '-'
            } else if p.existed {
                '~'
            } else {
                '+'
            };
            let size = p.size.map(|n| format!(", {n} bytes")).unwrap_or_default();
            say!("    {mark} {}  [ignored tree{size}]", escape_line(&p.path));
        }
        if ignored.len() > 10 {
            say!("    … {} more in ignored trees", ignored.len() - 10);
        }
    }
    ExitCode::SUCCESS
}

/// Finish or reverse what a killed process left half applied or half
/// undone in this project before anything reads the store, and say so (a
/// stderr line each, and the record in the audit log).
fn recover_first(config: &crate::config::Config, cwd: &std::path::Path) {
    let _ = checkpoint::Project::open(&config.state_dir(), cwd, &config.checkpoints);
    let recovered = checkpoint::intent::take_reports();
    if recovered.is_empty() {
        return;
    }
    let log = AuditLog::open(config.state().audit_log()).ok();
    for r in recovered {
        say_err!("passepartout: {}", r.message());
        if let (Some(log), Some(cp)) = (&log, &r.record) {
            let _ = log.append(&AuditRecord::effect(cp));
        }
    }
}
