//! The tool registry: what the model may call.
//!
//! A [`Tool`] is a name, prose, a JSON Schema and a [`ToolPlanner`] that turns
//! the model's arguments into a concrete [`Action`]. Tools never execute
//! anything themselves: execution belongs to the actuators, after the gates
//! (see `agent::act`). Tools come from built-in Rust code and from Org skills;
//! both register here the same way, so adding a tool touches no core code.

pub mod builtin;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::action::{Action, Approval};
use crate::llm::ToolSpec;

/// Where a tool was defined, for `skills list` and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ToolSource {
    /// Compiled into the binary.
    Builtin,
    /// Defined in an Org skill file.
    Skill { skill: String, path: PathBuf },
    /// Offered by an MCP server of the session.
    Mcp { server: String },
}

/// What a planner needs to know about the call's surroundings.
#[derive(Debug, Clone)]
pub struct PlanContext {
    /// The session's working directory; file tools are confined to it.
    pub cwd: PathBuf,
}

/// Errors a tool reports while planning. All of them go back to the model as
/// the tool result (it can correct itself); none ends the turn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// Turns a model's arguments into an [`Action`].
pub trait ToolPlanner: Send + Sync {
    fn plan(&self, tool: &Tool, args: &Value, ctx: &PlanContext) -> Result<Action, ToolError>;
    /// The resource limits the tool sets for its sandboxed runs (a skill's
    /// `:LIMITS:`); none by default.
    fn limits(&self) -> crate::sandbox::limits::LimitOverrides {
        Default::default()
    }
    /// The planner as `Any`, for a layer that stores its own planners (the
    /// skill parse cache); none by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// A tool the model can call.
#[derive(Clone)]
pub struct Tool {
    pub spec: ToolSpec,
    /// ACP tool kind shown to clients (`read`, `edit`, `execute`, ...).
    pub kind: agent_client_protocol_schema::v1::ToolKind,
    pub approval: Approval,
    pub timeout_secs: Option<u64>,
    pub source: ToolSource,
    pub planner: Arc<dyn ToolPlanner>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.spec.name)
            .field("approval", &self.approval)
            .field("source", &self.source)
            .finish()
    }
}

impl Tool {
    /// Validate `args` against the declared schema's required properties and
    /// basic types, then plan.
    pub fn plan(&self, args: &Value, ctx: &PlanContext) -> Result<Action, ToolError> {
        check_arguments(&self.spec.parameters, args)?;
        self.planner.plan(self, args, ctx)
    }
}

/// Whether a call of `tool` runs as a long-running command (a dev server,
/// a watcher): its definition declares a boolean `long_running` parameter
/// and the call sets it. Such a command must show its writes to the
/// outside while it runs, so it runs without an overlay, its effect
/// observed after the fact (marked so in its result).
pub fn long_running(tool: &Tool, args: &Value) -> bool {
    let declared = tool
        .spec
        .parameters
        .pointer("/properties/long_running/type")
        .and_then(Value::as_str)
        == Some("boolean");
    declared && args.get("long_running").and_then(Value::as_bool) == Some(true)
}

/// A light JSON Schema check: arguments must be an object, carry every
/// `required` property, and each known property must have the declared
/// primitive `type`. Enough to give a model a precise correction.
pub fn check_arguments(schema: &Value, args: &Value) -> Result<(), ToolError> {
    let Some(obj) = args.as_object() else {
        return Err(ToolError::InvalidArguments(format!(
            "expected a JSON object of arguments, got {}",
            truncate_for_message(&args.to_string(), 200)
        )));
    };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(name) {
                return Err(ToolError::InvalidArguments(format!(
                    "missing required argument `{name}`"
                )));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    for (name, value) in obj {
        let Some(prop) = props.and_then(|p| p.get(name)) else {
            continue;
        };
        let Some(ty) = prop.get("type").and_then(Value::as_str) else {
            continue;
        };
        let ok = match ty {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        };
        if !ok {
            return Err(ToolError::InvalidArguments(format!(
                "argument `{name}` must be of type {ty}, got {value}"
            )));
        }
    }
    Ok(())
}

fn truncate_for_message(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Resolve `requested` against `cwd` and refuse anything that leaves it.
/// Works lexically (no symlink resolution) and then, when the path exists,
/// checks the canonical form too, so `link-to-etc/passwd` is refused.
pub fn confine_to(cwd: &Path, requested: &str) -> Result<PathBuf, ToolError> {
    let joined = if Path::new(requested).is_absolute() {
        PathBuf::from(requested)
    } else {
        cwd.join(requested)
    };
    let normal = crate::util::path::normalize(&joined);
    let outside = || {
        ToolError::Refused(format!(
            "path `{requested}` is outside the working directory {}",
            cwd.display()
        ))
    };
    if !normal.starts_with(cwd) {
        return Err(outside());
    }
    if let (Ok(real), Ok(real_cwd)) = (normal.canonicalize(), cwd.canonicalize()) {
        if !real.starts_with(&real_cwd) {
            return Err(outside());
        }
    }
    Ok(normal)
}

/// All tools known to a session, by name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<Tool>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace a tool (later registrations override earlier ones).
    pub fn register(&mut self, tool: Tool) {
        self.tools.insert(tool.spec.name.clone(), Arc::new(tool));
    }

    pub fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_checked_against_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": { "path": { "type": "string" }, "n": { "type": "integer" } },
            "required": ["path"]
        });
        assert!(check_arguments(&schema, &json!({ "path": "a" })).is_ok());
        assert_eq!(
            check_arguments(&schema, &json!({})),
            Err(ToolError::InvalidArguments(
                "missing required argument `path`".into()
            ))
        );
        assert_eq!(
            check_arguments(&schema, &json!({ "path": "a", "n": "3" })),
            Err(ToolError::InvalidArguments(
                "argument `n` must be of type integer, got \"3\"".into()
            ))
        );
        assert!(check_arguments(&schema, &json!("not an object")).is_err());
    }

    #[test]
    fn paths_are_confined_to_the_working_directory() {
        let cwd = Path::new("/work/project");
        assert_eq!(
            confine_to(cwd, "src/main.rs").unwrap(),
            PathBuf::from("/work/project/src/main.rs")
        );
        assert_eq!(
            confine_to(cwd, ".").unwrap(),
            PathBuf::from("/work/project")
        );
        assert!(confine_to(cwd, "../other").is_err());
        assert!(confine_to(cwd, "/etc/passwd").is_err());
        assert!(confine_to(cwd, "a/../../x").is_err());
        assert_eq!(
            confine_to(cwd, "/work/project/a/../b").unwrap(),
            PathBuf::from("/work/project/b")
        );
    }

    #[test]
    fn symlinks_out_of_the_working_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", cwd.join("etc-link")).unwrap();
        assert!(confine_to(&cwd, "etc-link/hostname").is_err());
    }
}
