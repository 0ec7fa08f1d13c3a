//! Built-in tools that need no skill file: reading and listing files in the
//! session's working directory (read-only, confined), and a message to the
//! person. All are harmless, so their approval is `auto`.

use std::sync::Arc;

use agent_client_protocol_schema::v1::ToolKind;
use serde_json::{json, Value};

use crate::action::{Action, Approval, Effect};
use crate::llm::ToolSpec;

use super::{confine_to, PlanContext, Tool, ToolError, ToolPlanner, ToolRegistry, ToolSource};

/// Register the built-in tools.
pub fn register(registry: &mut ToolRegistry) {
    registry.register(read_file());
    registry.register(list_directory());
    registry.register(message_person());
}

fn path_arg(args: &Value, default: Option<&str>) -> Result<String, ToolError> {
    match args.get("path").and_then(Value::as_str).or(default) {
        Some(p) => Ok(p.to_string()),
        None => Err(ToolError::InvalidArguments(
            "missing required argument `path`".into(),
        )),
    }
}

struct ReadFile;
impl ToolPlanner for ReadFile {
    fn plan(&self, tool: &Tool, args: &Value, ctx: &PlanContext) -> Result<Action, ToolError> {
        let path = confine_to(&ctx.cwd, &path_arg(args, None)?)?;
        Ok(Action {
            tool: tool.spec.name.clone(),
            target: "files".into(),
            arguments: args.clone(),
            effect: Effect::ReadFile { path },
            approval: tool.approval,
            timeout_secs: tool.timeout_secs,
        })
    }
}

struct ListDirectory;
impl ToolPlanner for ListDirectory {
    fn plan(&self, tool: &Tool, args: &Value, ctx: &PlanContext) -> Result<Action, ToolError> {
        let path = confine_to(&ctx.cwd, &path_arg(args, Some("."))?)?;
        Ok(Action {
            tool: tool.spec.name.clone(),
            target: "files".into(),
            arguments: args.clone(),
            effect: Effect::ListDir { path },
            approval: tool.approval,
            timeout_secs: tool.timeout_secs,
        })
    }
}

pub fn read_file() -> Tool {
    Tool {
        spec: ToolSpec {
            name: "read_file".into(),
            description:
                "Read a UTF-8 text file inside the working directory and return its contents."
                    .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "File path, relative to the working directory." }
                },
                "required": ["path"]
            }),
        },
        kind: ToolKind::Read,
        approval: Approval::Auto,
        timeout_secs: None,
        source: ToolSource::Builtin,
        planner: Arc::new(ReadFile),
    }
}

pub fn list_directory() -> Tool {
    Tool {
        spec: ToolSpec {
            name: "list_directory".into(),
            description: "List the entries of a directory inside the working directory (directories end with /).".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "Directory path, relative to the working directory. Defaults to `.`." }
                }
            }),
        },
        kind: ToolKind::Read,
        approval: Approval::Auto,
        timeout_secs: None,
        source: ToolSource::Builtin,
        planner: Arc::new(ListDirectory),
    }
}

struct MessagePerson;
impl ToolPlanner for MessagePerson {
    fn plan(&self, tool: &Tool, args: &Value, _ctx: &PlanContext) -> Result<Action, ToolError> {
        let text = args.get("text").and_then(Value::as_str).ok_or_else(|| {
            ToolError::InvalidArguments("missing required argument `text`".into())
        })?;
        Ok(Action {
            tool: tool.spec.name.clone(),
            target: "system".into(),
            arguments: args.clone(),
            effect: Effect::Message {
                text: text.to_string(),
            },
            approval: tool.approval,
            timeout_secs: tool.timeout_secs,
        })
    }
}

/// Speak to the person now, apart from the final answer (progress, a
/// warning during long work). Handled by the system actuator.
pub fn message_person() -> Tool {
    Tool {
        spec: ToolSpec {
            name: "message_person".into(),
            description: "Show the person a short message right away, separate from your final answer: progress during long work, or a warning they should see now.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "text": { "type": "string", "description": "The message." }
                },
                "required": ["text"]
            }),
        },
        kind: ToolKind::Other,
        approval: Approval::Auto,
        timeout_secs: None,
        source: ToolSource::Builtin,
        planner: Arc::new(MessagePerson),
    }
}
