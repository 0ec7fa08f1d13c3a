//! The MCP actuator: performs `mcp_call` ops by calling a tool on one of
//! the session's MCP servers, with the call's time limit and the output
//! cap. A server that is gone, slow or failing gives an error result the
//! model reads; the turn goes on. What the server answered reaches the
//! model inside the untrusted-data wrapper (`mcp::tool::wrap_untrusted`);
//! our own errors about the server do not.

use std::sync::Arc;
use std::time::Duration;

use crate::action::{Action, Effect};
use crate::mcp::tool::{
    cap_text, resource_text, result_images, result_text, wrap_untrusted, OP_CALL, OP_READ_RESOURCE,
    TARGET,
};
use crate::mcp::{CallError, McpManager};

use super::{ActContext, ActError, ActOutput, Actuator};

pub struct McpActuator {
    manager: Arc<McpManager>,
}

impl McpActuator {
    pub fn new(manager: Arc<McpManager>) -> Self {
        McpActuator { manager }
    }
}

impl McpActuator {
    /// `mcp_read_resource`: read one resource; its text reaches the model
    /// inside the untrusted-data wrapper, capped like a tool result.
    async fn read_resource(
        &self,
        action: &Action,
        args: &serde_json::Value,
        ctx: &ActContext,
    ) -> Result<ActOutput, ActError> {
        let (Some(server), Some(uri)) = (
            args.get("server").and_then(|v| v.as_str()),
            args.get("uri").and_then(|v| v.as_str()),
        ) else {
            return Err(ActError::Unavailable(
                "an mcp_read_resource needs `server` and `uri`".into(),
            ));
        };
        let limits = self.manager.limits();
        let timeout = action
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(limits.call);
        let server = match self.manager.server(&ctx.session_id, server) {
            Ok(s) => s,
            Err(e) => return Ok(ActOutput::error(e.to_string())),
        };
        match server.read_resource(uri, timeout, &ctx.cancel).await {
            Ok(result) => {
                let text = resource_text(&result, limits.output_cap, limits.output_cap_setting);
                Ok(ActOutput::ok(wrap_untrusted(&server.spec.name, uri, &text)))
            }
            Err(CallError::Cancelled) => Err(ActError::Cancelled),
            Err(e) => Ok(ActOutput::error(e.to_string())),
        }
    }
}

#[async_trait::async_trait]
impl Actuator for McpActuator {
    fn target(&self) -> &str {
        TARGET
    }

    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError> {
        let unsupported = || ActError::Unsupported {
            target: TARGET.into(),
            effect: serde_json::to_string(&action.effect).unwrap_or_default(),
        };
        let Effect::Op { op, args } = &action.effect else {
            return Err(unsupported());
        };
        if op == OP_READ_RESOURCE {
            return self.read_resource(action, args, ctx).await;
        }
        if op != OP_CALL {
            return Err(unsupported());
        }
        let (Some(server), Some(tool)) = (
            args.get("server").and_then(|v| v.as_str()),
            args.get("tool").and_then(|v| v.as_str()),
        ) else {
            return Err(ActError::Unavailable(
                "an mcp_call needs `server` and `tool`".into(),
            ));
        };
        let arguments = args
            .get("arguments")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let limits = self.manager.limits();
        let timeout = action
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(limits.call);
        let server = match self.manager.server(&ctx.session_id, server) {
            Ok(s) => s,
            Err(e) => return Ok(ActOutput::error(e.to_string())),
        };
        let progress = ctx.progress.clone().map(|show| {
            let name = server.spec.name.clone();
            Arc::new(move |p: &rmcp::model::ProgressNotificationParam| {
                show(&progress_line(&name, p))
            }) as crate::mcp::client::ProgressFn
        });
        match server
            .call(tool, arguments, timeout, &ctx.cancel, progress)
            .await
        {
            Ok(result) => {
                let text = result_text(&result, limits.output_cap, limits.output_cap_setting);
                let (images, left_out) = result_images(&result);
                let text = wrap_untrusted(&server.spec.name, tool, &text);
                // The daemon's lines about the server's questions and the
                // images that could not travel, if any.
                let mut text = server.with_notes(text);
                for line in left_out {
                    text.push('\n');
                    text.push_str(&line);
                }
                let output = if result.is_error == Some(true) {
                    ActOutput::error(text)
                } else {
                    ActOutput::ok(text)
                };
                Ok(output.with_images(images))
            }
            Err(CallError::Cancelled) => Err(ActError::Cancelled),
            Err(e) => Ok(ActOutput::error(cap_text(
                e.to_string(),
                limits.output_cap,
                limits.output_cap_setting,
            ))),
        }
    }
}

/// A server's progress notification as one line for the person: the
/// server's name, its message (escaped: it is the server's text), and how
/// far, `3/10` or `3`.
fn progress_line(server: &str, p: &rmcp::model::ProgressNotificationParam) -> String {
    let done = match p.total {
        Some(total) => format!("{}/{}", p.progress, total),
        None => p.progress.to_string(),
    };
    match p
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        Some(message) => format!(
            "{server}: {} ({done})",
            crate::util::terminal::escape_line(message)
        ),
        None => format!("{server}: {done}"),
    }
}

#[cfg(test)]
mod progress_tests {
    use super::*;
    use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};

    #[test]
    fn a_progress_notification_becomes_one_escaped_line() {
        let token = ProgressToken(NumberOrString::Number(1));
        let p = ProgressNotificationParam::new(token.clone(), 2.0)
            .with_total(5.0)
            .with_message("copying\u{1b}[2K files");
        assert_eq!(
            progress_line("echo", &p),
            "echo: copying\\x1b[2K files (2/5)"
        );
        let bare = ProgressNotificationParam::new(token, 7.0);
        assert_eq!(progress_line("echo", &bare), "echo: 7");
    }

    #[test]
    fn progress_lines_closer_than_the_interval_are_dropped() {
        let shown = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let into = shown.clone();
        let progress = crate::actuators::rate_limited(Duration::from_secs(3600), move |l| {
            into.lock().unwrap().push(l.to_string())
        });
        progress("one");
        progress("two");
        progress("three");
        assert_eq!(*shown.lock().unwrap(), ["one"]);
        let every = crate::actuators::rate_limited(Duration::ZERO, |_| {});
        every("a");
        every("b");
    }
}
