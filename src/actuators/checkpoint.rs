//! The checkpoint actuator: applies a change the effect gates held, exactly
//! as it was recorded, once a person approved it. It never re-runs the
//! command that made the change: it writes the recorded after-state of the
//! changed paths, and refuses if any of them moved on since the rollback.

use std::path::PathBuf;

use serde_json::Value;

use crate::action::{Action, Effect};
use crate::checkpoint::watch::{locked, APPLY_OP, TARGET};
use crate::checkpoint::{CheckpointConfig, CheckpointError, Project};

use super::{ActContext, ActError, ActOutput, Actuator};

pub struct CheckpointActuator {
    state_dir: PathBuf,
    config: CheckpointConfig,
}

impl CheckpointActuator {
    pub fn new(state_dir: PathBuf, config: CheckpointConfig) -> Self {
        CheckpointActuator { state_dir, config }
    }
}

/// The apply action for a held checkpoint: what a person approves.
/// `diff` (bounded) is part of it, so the approval covers what was shown.
pub fn apply_action(
    tool: &str,
    checkpoint: &str,
    after: &str,
    summary: &str,
    diff: &str,
) -> Action {
    let args = serde_json::json!({
        "checkpoint": checkpoint,
        "after": after,
        "summary": summary,
        "diff": diff,
    });
    Action {
        tool: format!("{tool} (effect)"),
        target: TARGET.into(),
        arguments: args.clone(),
        effect: Effect::Op {
            op: APPLY_OP.into(),
            args,
        },
        approval: crate::action::Approval::Ask,
        timeout_secs: None,
    }
}

#[async_trait::async_trait]
impl Actuator for CheckpointActuator {
    fn target(&self) -> &str {
        TARGET
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let unsupported = || ActError::Unsupported {
            target: TARGET.into(),
            effect: "anything but apply_checkpoint".into(),
        };
        let Effect::Op { op, args } = &action.effect else {
            return Err(unsupported());
        };
        if op != APPLY_OP {
            return Err(unsupported());
        }
        let field = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(id), Some(after)) = (field("checkpoint"), field("after")) else {
            return Ok(ActOutput::error(
                "apply_checkpoint needs `checkpoint` and `after`",
            ));
        };
        let (state, cfg, cwd) = (self.state_dir.clone(), self.config.clone(), ctx.cwd.clone());
        let applied = locked(&ctx.cwd, move || {
            let project = Project::open(&state, &cwd, &cfg)?;
            let cp = project.load(&id)?;
            if cp.after != after {
                return Err(CheckpointError::Unknown(format!(
                    "{id} with the approved contents"
                )));
            }
            project.apply(&id)
        })
        .await;
        Ok(match applied {
            Ok(cp) if cp.conflicts.is_empty() => {
                ActOutput::ok(format!("applied the held change: {}", cp.summary()))
            }
            Ok(cp) => {
                // Per file: what changed meanwhile was not overwritten.
                let list: Vec<String> = cp
                    .conflicts
                    .iter()
                    .take(10)
                    .map(|c| format!("{} ({})", c.path, c.why))
                    .collect();
                ActOutput::ok(format!(
                    "applied the held change: {}\nConflict: {} file(s) not applied, the \
                     project's version kept: {}",
                    cp.summary(),
                    cp.conflicts.len(),
                    list.join(", ")
                ))
            }
            Err(e) => ActOutput::error(format!("the held change was not applied: {e}")),
        })
    }
}
