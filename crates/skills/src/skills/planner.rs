//! Planners for skill tools: how a call to a tool defined in Org becomes an
//! [`Action`].
//!
//! A tool's body is either an Org src block (run as written; the model's
//! arguments reach it only as environment variables or elisp bindings) or a
//! [`Binding`] to a built-in actuator. Nothing the model sends is ever
//! spliced into a script: that is what makes a src-block tool's script a
//! fixed, reviewable thing, and why `shell.run` (whose whole purpose is to
//! run the model's command) is the one binding whose script *is* an argument.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agent_client_protocol_schema::v1::ToolKind;
use serde_json::{json, Map, Value};

use crate::action::{Action, Approval, Effect};
use crate::tools::{confine_to, PlanContext, Tool, ToolError, ToolPlanner};

/// The JSON type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
}

impl ParamType {
    /// The accepted type names, for messages.
    pub const NAMES: &'static str = "string, integer, number, boolean, array, object";

    /// A type name as written in a parameter table (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "string" => ParamType::String,
            "integer" => ParamType::Integer,
            "number" => ParamType::Number,
            "boolean" => ParamType::Boolean,
            "array" => ParamType::Array,
            "object" => ParamType::Object,
            _ => return None,
        })
    }

    /// The JSON Schema name of the type.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Array => "array",
            ParamType::Object => "object",
        }
    }

    /// Whether `v` has this type.
    pub fn accepts(self, v: &Value) -> bool {
        match self {
            ParamType::String => v.is_string(),
            ParamType::Integer => v.is_i64() || v.is_u64(),
            ParamType::Number => v.is_number(),
            ParamType::Boolean => v.is_boolean(),
            ParamType::Array => v.is_array(),
            ParamType::Object => v.is_object(),
        }
    }
}

/// One declared parameter of a tool.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
    pub required: bool,
    pub description: String,
    /// Filled in when the model omits the argument.
    pub default: Option<Value>,
}

impl Param {
    fn new(name: &str, ty: ParamType, required: bool, description: &str) -> Self {
        Param {
            name: name.into(),
            ty,
            required,
            description: description.into(),
            default: None,
        }
    }

    /// The environment variable a src-block body reads this parameter from.
    pub fn env_name(&self) -> String {
        env_name(&self.name)
    }
}

/// `ARG_` + the parameter name upper-cased. The prefix keeps a parameter
/// called `path` from replacing `PATH` (or `IFS`, `BASH_ENV`, ...).
pub fn env_name(param: &str) -> String {
    format!("ARG_{}", param.to_ascii_uppercase())
}

/// The JSON Schema the model sees for a parameter list.
pub fn schema(params: &[Param]) -> Value {
    let mut props = Map::new();
    for p in params {
        let mut prop = Map::new();
        prop.insert("type".into(), json!(p.ty.as_str()));
        if !p.description.is_empty() {
            prop.insert("description".into(), json!(p.description));
        }
        if let Some(d) = &p.default {
            prop.insert("default".into(), d.clone());
        }
        props.insert(p.name.clone(), Value::Object(prop));
    }
    let required: Vec<&str> = params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.as_str())
        .collect();
    json!({ "type": "object", "properties": props, "required": required })
}

/// A built-in actuator a tool can be bound to with `:ACTUATOR:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Binding {
    ShellRun,
    FilesRead,
    FilesList,
    FilesWrite,
    FilesSearch,
    MemexRemember,
    MemexRecall,
    EmacsEval,
}

impl Binding {
    /// Every binding, in documentation order.
    pub const ALL: [Binding; 8] = [
        Binding::ShellRun,
        Binding::FilesRead,
        Binding::FilesList,
        Binding::FilesWrite,
        Binding::FilesSearch,
        Binding::MemexRemember,
        Binding::MemexRecall,
        Binding::EmacsEval,
    ];

    /// The name written after `:ACTUATOR:`.
    pub fn name(self) -> &'static str {
        match self {
            Binding::ShellRun => "shell.run",
            Binding::FilesRead => "files.read",
            Binding::FilesList => "files.list",
            Binding::FilesWrite => "files.write",
            Binding::FilesSearch => "files.search",
            Binding::MemexRemember => "memex.remember",
            Binding::MemexRecall => "memex.recall",
            Binding::EmacsEval => "emacs.eval",
        }
    }

    /// The binding called `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The actuator target its actions go to.
    pub fn target(self) -> &'static str {
        match self {
            Binding::ShellRun => "shell",
            Binding::FilesRead
            | Binding::FilesList
            | Binding::FilesWrite
            | Binding::FilesSearch => "files",
            Binding::MemexRemember | Binding::MemexRecall => "memex",
            Binding::EmacsEval => "emacs",
        }
    }

    /// The ACP tool kind a tool bound to it gets unless `:KIND:` says otherwise.
    pub fn kind(self) -> ToolKind {
        match self {
            Binding::ShellRun | Binding::EmacsEval => ToolKind::Execute,
            Binding::FilesRead | Binding::FilesList => ToolKind::Read,
            Binding::FilesWrite | Binding::MemexRemember => ToolKind::Edit,
            Binding::FilesSearch | Binding::MemexRecall => ToolKind::Search,
        }
    }

    /// The least approval the binding allows: evaluating model-written
    /// elisp always asks.
    pub fn min_approval(self) -> Approval {
        match self {
            Binding::EmacsEval => Approval::Ask,
            _ => Approval::Auto,
        }
    }

    /// The parameters the binding understands, with the descriptions used
    /// when a tool declares no parameter table.
    pub fn params(self) -> Vec<Param> {
        use ParamType::*;
        match self {
            Binding::ShellRun => vec![Param::new(
                "command",
                String,
                true,
                "The bash command to run in the working directory.",
            )],
            Binding::FilesRead => vec![Param::new(
                "path",
                String,
                true,
                "File path, relative to the working directory.",
            )],
            Binding::FilesList => vec![Param::new(
                "path",
                String,
                false,
                "Directory path, relative to the working directory. Defaults to `.`.",
            )],
            Binding::FilesWrite => vec![
                Param::new("path", String, true, "File path, relative to the working directory."),
                Param::new("content", String, true, "The complete new content of the file."),
            ],
            Binding::FilesSearch => vec![
                Param::new("pattern", String, true, "Text to look for (plain text, not a regex)."),
                Param::new(
                    "path",
                    String,
                    false,
                    "Directory or file to search, relative to the working directory. Defaults to `.`.",
                ),
            ],
            Binding::MemexRemember => vec![
                Param::new("title", String, true, "A short title for the note."),
                Param::new("text", String, true, "The note itself."),
                Param::new("tags", Array, false, "Tags (words) to find the note by later."),
            ],
            Binding::MemexRecall => vec![
                Param::new("query", String, true, "Words to look for in titles, tags and text."),
                Param::new("tags", Array, false, "Only notes carrying all these tags."),
            ],
            Binding::EmacsEval => vec![Param::new(
                "code",
                String,
                true,
                "Emacs Lisp to evaluate in the connected Emacs.",
            )],
        }
    }
}

/// What a skill tool does when called.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Body {
    /// A src block run by the shell actuator.
    Script { interpreter: String, script: String },
    /// An emacs-lisp src block evaluated by the connected Emacs.
    Elisp { code: String },
    /// A built-in actuator.
    Binding(Binding),
}

impl Body {
    /// The src block language → body, or `None` for a language that cannot
    /// run a tool.
    pub fn from_src(language: &str, value: String) -> Option<Body> {
        let interpreter = match language {
            "sh" => "sh",
            "bash" => "bash",
            "python" | "python3" => "python3",
            "emacs-lisp" | "elisp" => return Some(Body::Elisp { code: value }),
            _ => return None,
        };
        Some(Body::Script {
            interpreter: interpreter.into(),
            script: value,
        })
    }

    /// The actuator target of the actions it plans.
    pub fn target(&self) -> &'static str {
        match self {
            Body::Script { .. } => "shell",
            Body::Elisp { .. } => "emacs",
            Body::Binding(b) => b.target(),
        }
    }

    /// The ACP tool kind unless `:KIND:` says otherwise.
    pub fn default_kind(&self) -> ToolKind {
        match self {
            Body::Script { .. } | Body::Elisp { .. } => ToolKind::Execute,
            Body::Binding(b) => b.kind(),
        }
    }

    /// The least approval a tool with this body may have.
    pub fn min_approval(&self) -> Approval {
        match self {
            Body::Elisp { .. } => Approval::Ask,
            Body::Binding(b) => b.min_approval(),
            Body::Script { .. } => Approval::Auto,
        }
    }
}

/// The planner of every skill tool.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SkillPlanner {
    pub body: Body,
    pub params: Vec<Param>,
    /// Whether a `Run` effect may use the network (`:NETWORK: yes`).
    pub network: bool,
    /// Resource limits for its runs (`:LIMITS:`).
    pub limits: crate::sandbox::limits::LimitOverrides,
}

impl SkillPlanner {
    /// The model's arguments with defaults filled in; unknown names refused.
    fn complete_arguments(&self, args: &Value) -> Result<Map<String, Value>, ToolError> {
        let mut obj = args.as_object().cloned().unwrap_or_default();
        if let Some(unknown) = obj
            .keys()
            .find(|k| !self.params.iter().any(|p| &p.name == *k))
        {
            let known: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
            return Err(ToolError::InvalidArguments(if known.is_empty() {
                format!("unknown argument `{unknown}`: this tool takes no arguments")
            } else {
                format!(
                    "unknown argument `{unknown}`: this tool takes {}",
                    known.join(", ")
                )
            }));
        }
        for p in &self.params {
            if let (false, Some(d)) = (obj.contains_key(&p.name), &p.default) {
                obj.insert(p.name.clone(), d.clone());
            }
        }
        Ok(obj)
    }

    fn effect(&self, args: &Map<String, Value>, ctx: &PlanContext) -> Result<Effect, ToolError> {
        let text = |name: &str| -> Result<String, ToolError> {
            match args.get(name) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(ToolError::InvalidArguments(format!(
                    "argument `{name}` must be a string, got {other}"
                ))),
                None => Err(ToolError::InvalidArguments(format!(
                    "missing required argument `{name}`"
                ))),
            }
        };
        let text_or = |name: &str, default: &str| -> Result<String, ToolError> {
            if args.contains_key(name) {
                text(name)
            } else {
                Ok(default.to_string())
            }
        };
        let confined = |p: String| -> Result<PathBuf, ToolError> { confine_to(&ctx.cwd, &p) };
        Ok(match &self.body {
            Body::Script {
                interpreter,
                script,
            } => Effect::Run {
                interpreter: interpreter.clone(),
                script: script.clone(),
                argv: Vec::new(),
                env: args
                    .iter()
                    .map(|(k, v)| (env_name(k), env_value(v)))
                    .collect(),
                network: self.network,
            },
            Body::Elisp { code } => Effect::EvalElisp {
                code: code.clone(),
                bindings: args.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            },
            Body::Binding(b) => match b {
                Binding::ShellRun => Effect::Run {
                    interpreter: "bash".into(),
                    script: text("command")?,
                    argv: Vec::new(),
                    env: BTreeMap::new(),
                    network: self.network,
                },
                Binding::FilesRead => Effect::ReadFile {
                    path: confined(text("path")?)?,
                },
                Binding::FilesList => Effect::ListDir {
                    path: confined(text_or("path", ".")?)?,
                },
                Binding::FilesWrite => Effect::WriteFile {
                    path: confined(text("path")?)?,
                    content: text("content")?,
                },
                Binding::FilesSearch => Effect::SearchText {
                    path: confined(text_or("path", ".")?)?,
                    pattern: text("pattern")?,
                },
                Binding::MemexRemember => Effect::Op {
                    op: "remember".into(),
                    args: Value::Object(args.clone()),
                },
                Binding::MemexRecall => Effect::Op {
                    op: "recall".into(),
                    args: Value::Object(args.clone()),
                },
                Binding::EmacsEval => Effect::EvalElisp {
                    code: text("code")?,
                    bindings: BTreeMap::new(),
                },
            },
        })
    }
}

/// Strings travel as themselves; everything else as its JSON text.
fn env_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl ToolPlanner for SkillPlanner {
    fn plan(&self, tool: &Tool, args: &Value, ctx: &PlanContext) -> Result<Action, ToolError> {
        let completed = self.complete_arguments(args)?;
        let effect = self.effect(&completed, ctx)?;
        Ok(Action {
            tool: tool.spec.name.clone(),
            target: self.body.target().into(),
            arguments: args.clone(),
            effect,
            approval: tool.approval.max(self.body.min_approval()),
            timeout_secs: tool.timeout_secs,
        })
    }

    fn limits(&self) -> crate::sandbox::limits::LimitOverrides {
        self.limits
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_prefixed_so_parameters_cannot_replace_the_environment() {
        assert_eq!(env_name("path"), "ARG_PATH");
        assert_eq!(env_name("ld_preload"), "ARG_LD_PRELOAD");
    }

    #[test]
    fn the_schema_keeps_declaration_order_and_required_names() {
        let mut count = Param::new("count", ParamType::Integer, false, "");
        count.default = Some(json!(5));
        let params = vec![Param::new("path", ParamType::String, true, "Where."), count];
        assert_eq!(
            schema(&params),
            json!({
                "type": "object",
                "properties": {
                    "path": { "type": "string", "description": "Where." },
                    "count": { "type": "integer", "default": 5 }
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn src_languages_choose_the_runner() {
        let body = |l: &str| Body::from_src(l, "x".into());
        assert_eq!(
            body("python"),
            Some(Body::Script {
                interpreter: "python3".into(),
                script: "x".into()
            })
        );
        assert_eq!(body("elisp"), Some(Body::Elisp { code: "x".into() }));
        assert_eq!(body("ruby"), None);
        assert_eq!(body("elisp").unwrap().min_approval(), Approval::Ask);
        assert_eq!(Binding::parse("files.write"), Some(Binding::FilesWrite));
        assert_eq!(Binding::FilesWrite.target(), "files");
    }
}
