//! The action: the one thing every stage after "reason" talks about.
//!
//! A tool call from the model is first *planned* into an [`Action`] (what it
//! would do, concretely), the gates judge the action, a person may edit it in a
//! flight plan, the last-mile check judges it again, and an actuator chosen by
//! [`Action::target`] executes it. Keeping the action as plain data is what
//! makes "the exact action that runs is the one that was approved" checkable:
//! see [`Action::content_hash`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A concrete effect an actuator knows how to perform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// Run a script with an interpreter (`bash`, `sh`, `python3`).
    /// Model-provided values travel only in `env` and `argv`, never spliced
    /// into `script`.
    Run {
        interpreter: String,
        script: String,
        #[serde(default)]
        argv: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// Whether the sandbox should grant network access.
        #[serde(default)]
        network: bool,
    },
    ReadFile {
        path: PathBuf,
    },
    ListDir {
        path: PathBuf,
    },
    SearchText {
        path: PathBuf,
        pattern: String,
    },
    WriteFile {
        path: PathBuf,
        content: String,
    },
    /// Evaluate Emacs Lisp in the connected editor. Model-provided values
    /// travel in `bindings` (bound as variables by the editor), never spliced
    /// into `code`.
    EvalElisp {
        code: String,
        #[serde(default)]
        bindings: BTreeMap<String, Value>,
    },
    /// A message to the person (the system actuator); not fed back to the model.
    Message {
        text: String,
    },
    /// Anything else an actuator understands, named by `op`.
    Op {
        op: String,
        #[serde(default)]
        args: Value,
    },
}

/// How much approval a tool asks for, as declared by its author. The gate
/// engine may only make this stricter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Run without asking (gates may still ask or deny).
    Auto,
    /// Always ask a person first.
    #[default]
    Ask,
    /// Never run.
    Never,
}

/// A planned action, ready for the gates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// The tool the model called.
    pub tool: String,
    /// The actuator that performs it (`shell`, `files`, `emacs`, `memex`,
    /// `system`, ...).
    pub target: String,
    /// The model's arguments, verbatim.
    pub arguments: Value,
    /// What will concretely happen.
    pub effect: Effect,
    /// The approval level the tool's author declared.
    pub approval: Approval,
    /// Time limit in seconds for the execution (None: the actuator's default).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

impl Action {
    /// A stable SHA-256 over everything in the action that decides what
    /// runs: the target (which actuator), the whole effect (for a script:
    /// its text, interpreter, arguments, environment and network grant) and
    /// the time limit. What a person approves; re-computed at the last
    /// mile, where a mismatch means the action changed. The model's raw
    /// arguments and the tool's declared approval are left out: they do
    /// not change what runs.
    pub fn content_hash(&self) -> String {
        self.hash_of(None)
    }

    /// [`Action::content_hash`] plus the working directory the action runs
    /// in (it is not part of the action: a session or a flight plan carries
    /// it). What a flight plan records, so that editing a pending plan's
    /// directory is caught like editing its command.
    pub fn content_hash_in(&self, cwd: &Path) -> String {
        self.hash_of(Some(cwd))
    }

    fn hash_of(&self, cwd: Option<&Path>) -> String {
        let mut canonical = serde_json::json!({
            "target": self.target,
            "effect": self.effect,
            "timeout_secs": self.timeout_secs,
        });
        if let Some(cwd) = cwd {
            canonical["cwd"] = serde_json::json!(cwd);
        }
        let digest = Sha256::digest(canonical.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Action {
    /// The `shell` tool's call of `script` (bash, approval *ask*), as the
    /// unit tests of actions, gates and plans build it (public because those
    /// tests live in other crates of the workspace).
    #[doc(hidden)]
    pub fn shell_for_tests(script: &str) -> Action {
        Action {
            tool: "shell".into(),
            target: "shell".into(),
            arguments: serde_json::json!({ "command": script }),
            effect: Effect::Run {
                interpreter: "bash".into(),
                script: script.into(),
                argv: vec![],
                env: BTreeMap::new(),
                network: false,
            },
            approval: Approval::Ask,
            timeout_secs: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Action {
        Action::shell_for_tests(script)
    }

    #[test]
    fn hash_follows_the_effect_not_the_arguments() {
        let a = shell("ls");
        let mut b = shell("ls");
        b.arguments = serde_json::json!({ "command": "something else" });
        assert_eq!(a.content_hash(), b.content_hash());
        assert_ne!(a.content_hash(), shell("ls -la").content_hash());
        assert_eq!(a.content_hash().len(), 64);
    }

    #[test]
    fn hash_covers_everything_that_decides_what_runs() {
        let base = shell("ls");
        let differs = |change: &dyn Fn(&mut Action)| {
            let mut a = shell("ls");
            change(&mut a);
            a.content_hash() != base.content_hash()
        };
        assert!(differs(&|a| a.timeout_secs = Some(9999)));
        assert!(differs(&|a| a.target = "files".into()));
        assert!(differs(&|a| {
            if let Effect::Run { network, .. } = &mut a.effect {
                *network = true;
            }
        }));
        assert!(differs(&|a| {
            if let Effect::Run { env, .. } = &mut a.effect {
                env.insert("PATH".into(), "/tmp/evil".into());
            }
        }));
        assert!(differs(&|a| {
            if let Effect::Run { interpreter, .. } = &mut a.effect {
                *interpreter = "sh".into();
            }
        }));
        assert!(!differs(&|a| a.approval = Approval::Auto));
        let here = base.content_hash_in(Path::new("/work/project"));
        assert_ne!(here, base.content_hash());
        assert_ne!(here, base.content_hash_in(Path::new("/")));
        assert_eq!(
            here,
            shell("ls").content_hash_in(Path::new("/work/project"))
        );
    }

    #[test]
    fn effect_serialises_with_a_kind_tag() {
        let e = Effect::ReadFile {
            path: "a.txt".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"kind":"read_file","path":"a.txt"}"#
        );
    }
}
