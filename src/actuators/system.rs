//! The system actuator: messages to the person. What it says is already in
//! front of the person, so by default it is not fed back to the model (the
//! model only learns that the message was delivered).

use std::sync::Arc;

use crate::action::{Action, Effect};

use super::{ActContext, ActError, ActOutput, Actuator};

pub struct SystemActuator {
    feed_back: bool,
}

impl SystemActuator {
    /// `feed_back`: whether the message text also goes back to the model.
    pub fn new(feed_back: bool) -> Self {
        SystemActuator { feed_back }
    }
}

/// How the act stage lets an actuator speak to the person of a session.
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

#[async_trait::async_trait]
impl Actuator for SystemActuator {
    fn target(&self) -> &str {
        "system"
    }

    fn feeds_back(&self) -> bool {
        self.feed_back
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let Effect::Message { text } = &action.effect else {
            return Err(ActError::Unsupported {
                target: "system".into(),
                effect: "anything but a message".into(),
            });
        };
        match &ctx.say {
            Some(say) => {
                say(text);
                Ok(ActOutput::ok(text.clone()))
            }
            None => Err(ActError::Unavailable(
                "no one is listening for messages in this session".into(),
            )),
        }
    }
}
