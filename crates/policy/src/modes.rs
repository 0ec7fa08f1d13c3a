//! Session modes: how much the agent may do on its own in one session.
//!
//! Three modes, advertised to ACP clients in `session/new` / `session/load`
//! and switched with `session/set_mode`:
//!
//! - `read-only`: nothing in the project can change. Shell runs see the
//!   working directory bound read-only by bubblewrap (the kernel refuses the
//!   write, not a guess about the text), file writes, Emacs evaluation, MCP
//!   tools, runs granted network and skill tools acting outside the sandbox
//!   that are not declared reads are denied, and a run without a sandbox is
//!   refused by the shell actuator.
//! - `ask`: every action except a declared read asks the person first,
//!   whatever the gates said.
//! - `auto`: actions the gates allow run in the sandbox without asking
//!   (checkpoints and effect gates still observe them). The behaviour of
//!   every session before modes existed, and the default.
//!
//! A mode is one more verdict beside the gates' (gate name `mode`): the
//! strictest decision wins, so a mode can only tighten.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::action::{Action, Effect};
use crate::gates::{Decision, Verdict};
use crate::protocol::acp;

/// The gate name a mode's verdict carries in traces and denials.
pub const GATE: &str = "mode";

/// What the model reads when the read-only mode denies an action.
pub const READ_ONLY_REASON: &str = "the session is in read-only mode; the person can switch modes";

/// A session mode. The default is [`Mode::Auto`], today's behaviour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    #[serde(rename = "read-only")]
    ReadOnly,
    #[serde(rename = "ask")]
    Ask,
    #[default]
    #[serde(rename = "auto")]
    Auto,
}

/// Every mode, in the order clients show them (strictest first).
pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::Ask, Mode::Auto];

/// A mode id nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{given}`; the modes are: read-only, ask, auto")]
pub struct UnknownMode {
    pub given: String,
}

impl Mode {
    /// The wire id (`read-only`, `ask`, `auto`).
    pub fn id(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::Auto => "auto",
        }
    }

    /// A short name for menus and the mode line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "Read-only",
            Mode::Ask => "Ask",
            Mode::Auto => "Auto (in sandbox)",
        }
    }

    /// One sentence for clients.
    pub fn description(self) -> &'static str {
        match self {
            Mode::ReadOnly => {
                "Nothing in the project can change: commands run with the project mounted \
                 read-only, writes and editor or MCP actions are denied."
            }
            Mode::Ask => "Every action except a declared read asks you first.",
            Mode::Auto => {
                "Actions the safety gates allow run in the sandbox without asking; \
                 checkpoints record what they changed."
            }
        }
    }

    /// Whether shell runs must see the project read-only.
    pub fn read_only(self) -> bool {
        self == Mode::ReadOnly
    }

    /// The mode's own verdict on `action` (called by the tool of `kind`),
    /// to combine with the gates' (strictest wins). `None`: the mode adds
    /// nothing.
    pub fn verdict(self, action: &Action, kind: acp::ToolKind) -> Option<Verdict> {
        let declared_read = matches!(kind, acp::ToolKind::Read | acp::ToolKind::Search);
        let reads = matches!(
            action.effect,
            Effect::ReadFile { .. }
                | Effect::ListDir { .. }
                | Effect::SearchText { .. }
                | Effect::Message { .. }
        );
        match self {
            Mode::Auto => None,
            Mode::Ask if reads || declared_read => None,
            Mode::Ask => Some(Verdict::new(
                Decision::Ask,
                GATE,
                "the session is in ask mode: every action except a read asks the person",
            )),
            Mode::ReadOnly => {
                let allowed = match &action.effect {
                    _ if reads => true,
                    // The sandbox binds the project read-only: the kernel
                    // enforces it, whatever the script says. The bind says
                    // nothing about the network (`git push`, a POST), so a
                    // run granted network must be a declared read.
                    Effect::Run { network, .. } => {
                        action.target == "shell" && (!network || declared_read)
                    }
                    Effect::WriteFile { .. } => false,
                    // Emacs, MCP, memex and skill ops: only what their
                    // author declared a read.
                    Effect::EvalElisp { .. } | Effect::Op { .. } => {
                        declared_read && action.target != "mcp" && action.target != "checkpoint"
                    }
                    _ => false,
                };
                (!allowed).then(|| Verdict::new(Decision::Deny, GATE, READ_ONLY_REASON))
            }
        }
    }

    /// The ACP description of every mode with `self` current.
    pub fn state(self) -> acp::SessionModeState {
        acp::SessionModeState::new(self.id(), ALL.iter().map(|m| m.acp()).collect())
    }

    /// This mode as ACP advertises it.
    pub fn acp(self) -> acp::SessionMode {
        acp::SessionMode::new(self.id(), self.name()).description(self.description().to_string())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.into_iter()
            .find(|m| m.id() == s)
            .ok_or_else(|| UnknownMode {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use std::path::PathBuf;

    fn action(target: &str, effect: Effect) -> Action {
        Action {
            tool: "t".into(),
            target: target.into(),
            arguments: serde_json::json!({}),
            effect,
            approval: Approval::Auto,
            timeout_secs: None,
        }
    }

    fn run() -> Action {
        action(
            "shell",
            Effect::Run {
                interpreter: "bash".into(),
                script: "ls".into(),
                argv: vec![],
                env: Default::default(),
                network: false,
            },
        )
    }

    fn write() -> Action {
        action(
            "files",
            Effect::WriteFile {
                path: PathBuf::from("f"),
                content: "x".into(),
            },
        )
    }

    fn read() -> Action {
        action(
            "files",
            Effect::ReadFile {
                path: PathBuf::from("f"),
            },
        )
    }

    fn decision(mode: Mode, a: &Action, kind: acp::ToolKind) -> Option<Decision> {
        mode.verdict(a, kind).map(|v| v.decision)
    }

    #[test]
    fn ids_round_trip_and_unknown_names_the_valid_ones() {
        for m in ALL {
            assert_eq!(m.id().parse::<Mode>(), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.id());
        }
        let e = "yolo".parse::<Mode>().unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown mode `yolo`; the modes are: read-only, ask, auto"
        );
        assert_eq!(Mode::default(), Mode::Auto);
    }

    #[test]
    fn read_only_denies_writes_and_editor_but_lets_sandboxed_runs_and_reads_through() {
        use acp::ToolKind::*;
        let m = Mode::ReadOnly;
        assert_eq!(decision(m, &write(), Edit), Some(Decision::Deny));
        // A write stays a write whatever its tool claims to be.
        assert_eq!(decision(m, &write(), Read), Some(Decision::Deny));
        assert_eq!(decision(m, &run(), Execute), None);
        let mut online = run();
        if let Effect::Run { network, .. } = &mut online.effect {
            *network = true;
        }
        assert_eq!(decision(m, &online, Execute), Some(Decision::Deny));
        assert_eq!(decision(m, &online, Read), None);
        assert_eq!(decision(m, &read(), Read), None);
        let eval = action(
            "emacs",
            Effect::EvalElisp {
                code: "(x)".into(),
                bindings: Default::default(),
            },
        );
        assert_eq!(decision(m, &eval, Execute), Some(Decision::Deny));
        assert_eq!(decision(m, &eval, Read), None);
        let mcp = action(
            "mcp",
            Effect::Op {
                op: "mcp_call".into(),
                args: serde_json::json!({}),
            },
        );
        assert_eq!(decision(m, &mcp, Read), Some(Decision::Deny));
        let denial = m.verdict(&write(), Edit).unwrap();
        assert_eq!(denial.gate, "mode");
        assert_eq!(denial.reason, READ_ONLY_REASON);
    }

    #[test]
    fn ask_asks_for_everything_but_reads() {
        use acp::ToolKind::*;
        assert_eq!(decision(Mode::Ask, &run(), Execute), Some(Decision::Ask));
        assert_eq!(decision(Mode::Ask, &write(), Edit), Some(Decision::Ask));
        assert_eq!(decision(Mode::Ask, &read(), Read), None);
        // A skill tool its author declared a read.
        assert_eq!(decision(Mode::Ask, &run(), Read), None);
    }

    #[test]
    fn auto_adds_nothing() {
        assert_eq!(decision(Mode::Auto, &write(), acp::ToolKind::Edit), None);
    }

    #[test]
    fn state_lists_every_mode_with_the_current_one() {
        let v = serde_json::to_value(Mode::Ask.state()).unwrap();
        assert_eq!(v["currentModeId"], "ask");
        let ids: Vec<&str> = v["availableModes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec!["read-only", "ask", "auto"]);
        assert_eq!(v["availableModes"][2]["name"], "Auto (in sandbox)");
    }
}
