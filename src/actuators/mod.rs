//! Actuators: the parts that touch the world, chosen by an action's target.
//!
//! The act stage hands an approved [`Action`] to the [`ActuatorRegistry`],
//! which picks the actuator for the action's explicit target, else the
//! target of the source the request came from, else the configured default.
//! No actuator is privileged; adding one is a `register` call.

pub mod checkpoint;
pub mod client_fs;
pub mod emacs;
pub mod files;
pub mod mcp;
pub mod memex;
pub mod shell;
pub mod system;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::action::Action;
use crate::sandbox::limits::LimitOverrides;

/// What an actuator needs from the session it acts for.
#[derive(Clone)]
pub struct ActContext {
    pub session_id: String,
    pub cwd: PathBuf,
    pub cancel: CancellationToken,
    /// Speak to the person of this session (the system actuator).
    pub say: Option<system::Say>,
    /// Who approved this exact action, when a person did (a flight plan or
    /// a permission request). The files actuator writes control-surface
    /// paths only then.
    pub approved_by: Option<String>,
    /// The session is in read-only mode: the shell binds the working
    /// directory read-only (and will not run unsandboxed), the files
    /// actuator writes nothing.
    pub read_only: bool,
    /// The resource limits the calling tool sets for itself (`:LIMITS:`).
    pub limits: LimitOverrides,
    /// Show the person a line about the running call (an MCP server's
    /// progress), as the call's content until it ends; rate-limited.
    pub progress: Option<Progress>,
}

/// A line about a running call for the person (see [`ActContext::progress`]).
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// At most one progress line per this interval reaches the person; the
/// ones between are dropped (the call's end shows the outcome anyway).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `show`, called at most once per `every`: the lines between are dropped.
pub fn rate_limited(
    every: std::time::Duration,
    show: impl Fn(&str) + Send + Sync + 'static,
) -> Progress {
    let last: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    Arc::new(move |line: &str| {
        let now = std::time::Instant::now();
        {
            let mut last = crate::util::sync::lock(&last);
            if last.is_some_and(|t| now.duration_since(t) < every) {
                return;
            }
            *last = Some(now);
        }
        show(line);
    })
}

impl std::fmt::Debug for ActContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActContext")
            .field("session_id", &self.session_id)
            .field("cwd", &self.cwd)
            .field("can_say", &self.say.is_some())
            .field("approved_by", &self.approved_by)
            .field("read_only", &self.read_only)
            .field("limits", &self.limits)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// The outcome of an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct ActOutput {
    /// Text for the model (and the person).
    pub text: String,
    /// True when the action ran but failed (non-zero exit, I/O error).
    pub is_error: bool,
    /// Images for the model beside the text (an MCP tool's screenshot).
    pub images: Vec<crate::llm::Image>,
}

impl ActOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ActOutput {
            text: text.into(),
            is_error: false,
            images: Vec::new(),
        }
    }
    pub fn error(text: impl Into<String>) -> Self {
        ActOutput {
            text: text.into(),
            is_error: true,
            images: Vec::new(),
        }
    }

    /// The output with `images` beside its text.
    pub fn with_images(mut self, images: Vec<crate::llm::Image>) -> Self {
        self.images = images;
        self
    }
}

/// Errors that stop an action from running at all. They reach the model as
/// the tool result; the turn goes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ActError {
    #[error("no actuator for target `{0}`")]
    UnknownTarget(String),
    #[error("actuator `{target}` cannot perform {effect}")]
    Unsupported { target: String, effect: String },
    #[error("{0}")]
    Unavailable(String),
    #[error("cancelled")]
    Cancelled,
}

/// Something that performs actions for one target.
#[async_trait::async_trait]
pub trait Actuator: Send + Sync {
    /// The target name this actuator answers to.
    fn target(&self) -> &str;
    /// Whether its output should go back to the model as the next
    /// perception. Messages the person already sees return false.
    fn feeds_back(&self) -> bool {
        true
    }
    async fn execute(&self, action: &Action, ctx: &ActContext) -> Result<ActOutput, ActError>;
}

/// Actuators by target.
#[derive(Clone, Default)]
pub struct ActuatorRegistry {
    actuators: BTreeMap<String, Arc<dyn Actuator>>,
    default_target: Option<String>,
}

impl ActuatorRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, actuator: Arc<dyn Actuator>) {
        self.actuators
            .insert(actuator.target().to_string(), actuator);
    }

    pub fn set_default(&mut self, target: impl Into<String>) {
        self.default_target = Some(target.into());
    }

    /// Pick the actuator: explicit target, else the source's target, else
    /// the default.
    pub fn resolve(
        &self,
        explicit: Option<&str>,
        source: Option<&str>,
    ) -> Result<Arc<dyn Actuator>, ActError> {
        let name = explicit
            .filter(|t| !t.is_empty())
            .or(source.filter(|t| !t.is_empty()))
            .or(self.default_target.as_deref())
            .unwrap_or("");
        self.actuators
            .get(name)
            .cloned()
            .ok_or_else(|| ActError::UnknownTarget(name.to_string()))
    }

    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.actuators.keys().map(String::as_str)
    }
}
