//! The emacs actuator: Emacs Lisp evaluated by the connected editor.
//!
//! The daemon sends `_passepartout/emacs/eval` with the form and its
//! bindings (the model's arguments, bound as variables by Emacs — never
//! pasted into the code) and waits for the printed value. Only the Emacs
//! package answers it; with any other client, or none, the action fails
//! with a reason the model can read.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::json;

use crate::action::{Action, Effect};
use crate::protocol::EXT_EMACS_EVAL;
use crate::rpc::Outgoing;

use super::{ActContext, ActError, ActOutput, Actuator};

/// The connected editor, when it is Emacs (set at `initialize`).
#[derive(Clone, Default)]
pub struct EditorLink(Arc<RwLock<Option<Outgoing>>>);

impl EditorLink {
    pub fn connect(&self, out: Outgoing) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(out);
    }

    pub fn disconnect(&self) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    fn get(&self) -> Option<Outgoing> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

pub struct EmacsActuator {
    link: EditorLink,
}

impl EmacsActuator {
    pub fn new(link: EditorLink) -> Self {
        EmacsActuator { link }
    }
}

/// Longest wait for Emacs when the action sets no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[async_trait::async_trait]
impl Actuator for EmacsActuator {
    fn target(&self) -> &str {
        "emacs"
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let Effect::EvalElisp { code, bindings } = &action.effect else {
            return Err(ActError::Unsupported {
                target: "emacs".into(),
                effect: "anything but Emacs Lisp".into(),
            });
        };
        let Some(out) = self.link.get() else {
            return Err(ActError::Unavailable(
                "no Emacs is connected to this daemon, so Emacs Lisp cannot run; use other tools"
                    .into(),
            ));
        };
        let limit = action
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT);
        let request = out.request(
            EXT_EMACS_EVAL,
            json!({ "code": code, "bindings": bindings, "sessionId": ctx.session_id }),
        );
        let answer = tokio::select! {
            _ = ctx.cancel.cancelled() => return Err(ActError::Cancelled),
            r = tokio::time::timeout(limit, request) => r,
        };
        Ok(match answer {
            Err(_) => {
                ActOutput::error(format!("Emacs did not answer within {} s", limit.as_secs()))
            }
            Ok(Err(e)) => ActOutput::error(format!("Emacs signalled an error: {}", e.message)),
            Ok(Ok(v)) => match v.get("value").and_then(|v| v.as_str()) {
                Some(s) => ActOutput::ok(s.to_string()),
                None => ActOutput::ok(v.to_string()),
            },
        })
    }
}
