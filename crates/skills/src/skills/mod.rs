//! Skills: tools, prompts and gate rules written as literate Org files.
//!
//! A skill is an Org document a person can read: prose for humans, and in
//! it a few tagged headings the daemon loads — `:prompt:` sections for the
//! system prompt, `:tool:` headings that become [`crate::tools::Tool`]s, and
//! `:rules:` headings whose rules become a [`crate::gates::Gate`]. The
//! format is specified in `docs/skills.md`.
//!
//! The pipeline is: [`crate::org`] (the only code that touches orgize) → [`parse`]
//! (owned structs → a [`Skill`] plus [`Diagnostic`]s) → [`loader`] (built-in,
//! user and project directories; layers only add, cheap reload); [`review`]
//! reads a project file for a person to trust (the terminal side, `skills
//! check` / `list` / `trust` / `untrust`, is `crate::cli::skills`). A broken file
//! never stops the others from loading; its diagnostics say exactly what to
//! fix. Project skills load only when the person trusts their exact
//! content ([`trust`]). Two formats people bring from other agents join
//! the same pipeline: [`agent_skill`] turns an Agent Skills `SKILL.md`
//! folder into Org text for the one parser, and [`instructions`] reads
//! `AGENTS.md` files into the system prompt (project ones trusted by
//! content, like project skills).

pub mod agent_skill;
pub mod cache;
pub mod diagnostic;
pub mod instructions;
pub mod lazy_regex;
pub mod loader;
pub mod parse;
pub mod planner;
pub mod review;
pub mod rules;
pub mod trust;

use std::path::PathBuf;

use lazy_regex::LazyRegex;

pub use diagnostic::{Diagnostic, Severity};
pub use loader::{project_dir, SkillDirs, SkillLoader, SkillSet, SkillSummary, UntrustedSkill};
pub use parse::{check_text, parse_skill, parse_skill_bytes, MAX_SKILL_BYTES};
pub use planner::{Binding, Body, Param, ParamType, SkillPlanner};
pub use review::{Review, ReviewError};
pub use rules::{load_policy, Rule, RuleGate};
pub use trust::{TrustError, TrustStore};

use crate::tools::Tool;

/// Most error lines a turn's notice shows (the rest are counted).
pub const MAX_NOTICE_LINES: usize = 5;

/// What the person is told at the start of a turn while skill or policy
/// files have errors: the first [`MAX_NOTICE_LINES`] error lines and what
/// it means (only their rules are in force). `None` without errors.
pub fn load_error_notice(diagnostics: &[Diagnostic]) -> Option<String> {
    let errors: Vec<&Diagnostic> = diagnostics.iter().filter(|d| d.is_error()).collect();
    if errors.is_empty() {
        return None;
    }
    let mut text = format!(
        "⚠ {} error{} in skill or policy files: a broken file offers no tools or prompts, only its rules (a broken deny/ask rule asks for its whole scope). Fix with `passepartout skills check`:\n",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for d in errors.iter().take(MAX_NOTICE_LINES) {
        text.push_str(&format!("  {d}\n"));
    }
    if errors.len() > MAX_NOTICE_LINES {
        text.push_str(&format!(
            "  … and {} more\n",
            errors.len() - MAX_NOTICE_LINES
        ));
    }
    text.push('\n');
    Some(text)
}

/// Where a skill file came from, in layer order: builtin < user < project.
/// Layers only add: a later skill of the same name is loaded beside the
/// earlier one and never removes its rules.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Origin {
    /// Embedded in the binary (`skills/*.org` in the source tree).
    Builtin,
    /// `$XDG_CONFIG_HOME/passepartout/skills`.
    User,
    /// `<project>/.passepartout/skills`.
    Project,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Builtin => "builtin",
            Origin::User => "user",
            Origin::Project => "project",
        })
    }
}

/// When a skill's prompt sections join the system prompt.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// Every turn.
    Always,
    /// Only when the person's message names the skill as `@name`.
    Never,
    /// When the person's message matches (case-insensitively), or names
    /// the skill as `@name`.
    Pattern(LazyRegex),
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Always => f.write_str("always"),
            Trigger::Never => f.write_str("never"),
            Trigger::Pattern(re) => {
                let src = re.as_str();
                write!(f, "/{}/", src.strip_prefix("(?i)").unwrap_or(src))
            }
        }
    }
}

/// A loaded skill.
#[derive(Debug, Clone)]
pub struct Skill {
    pub name: String,
    /// One line, from `#+DESCRIPTION:`.
    pub description: String,
    /// Higher first in the system prompt, and wins a tool-name clash.
    pub priority: i32,
    pub trigger: Trigger,
    /// All `:prompt:` sections, joined by blank lines.
    pub prompt: String,
    pub tools: Vec<Tool>,
    pub rules: Vec<Rule>,
    /// Slash commands (`:command:` headings).
    pub commands: Vec<Command>,
    pub path: PathBuf,
    pub origin: Origin,
}

/// The placeholder a command template replaces with what the person typed
/// after `/name`.
pub const ARGUMENTS: &str = "$ARGUMENTS";

/// A slash command a skill declares: `/name args` in a prompt becomes the
/// template with [`ARGUMENTS`] replaced, and activates the skill.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Command {
    /// The name typed after `/`.
    pub name: String,
    /// One line for clients' completion lists (`:DESCRIPTION:`).
    pub description: String,
    /// A hint shown while the arguments are missing (`:INPUT:`).
    pub input_hint: Option<String>,
    /// The prompt the command stands for.
    pub template: String,
    /// The skill that declares it.
    pub skill: String,
}

impl Command {
    /// The prompt for `/name arguments`: the template with the arguments in
    /// place of every [`ARGUMENTS`], or after it (blank line between) when
    /// the template has no placeholder and arguments were given.
    pub fn expand(&self, arguments: &str) -> String {
        let arguments = arguments.trim();
        if self.template.contains(ARGUMENTS) {
            self.template.replace(ARGUMENTS, arguments)
        } else if arguments.is_empty() {
            self.template.clone()
        } else {
            format!("{}\n\n{arguments}", self.template)
        }
    }
}

/// `/name rest` at the start of `prompt`: the name and the rest. `None`
/// when the prompt does not start with a slash command's shape (`/` then a
/// name, then whitespace or the end), e.g. a path like `/etc/hosts`.
pub fn slash_command(prompt: &str) -> Option<(&str, &str)> {
    let rest = prompt.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    valid.then(|| (name, &rest[end..]))
}

impl Skill {
    /// Whether this skill's prompt belongs in the system prompt for a turn
    /// that starts with `user_message`.
    pub fn is_active(&self, user_message: &str) -> bool {
        if mentions(user_message, &self.name) {
            return true;
        }
        match &self.trigger {
            Trigger::Always => true,
            Trigger::Never => false,
            Trigger::Pattern(re) => re.is_match(user_message),
        }
    }
}

/// `@name` as a whole word in `message`.
fn mentions(message: &str, name: &str) -> bool {
    let needle = format!("@{name}");
    message.match_indices(&needle).any(|(i, _)| {
        let before_ok = message[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !is_name_char(c));
        let after_ok = message[i + needle.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_name_char(c));
        before_ok && after_ok
    })
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_is_mentioned_only_as_a_whole_word() {
        assert!(mentions("please @git status", "git"));
        assert!(mentions("@git", "git"));
        assert!(!mentions("please @github", "git"));
        assert!(!mentions("mail a@git", "git"));
        assert!(!mentions("git status", "git"));
    }
}

#[cfg(test)]
mod command_tests {
    use super::*;

    #[test]
    fn slash_commands_are_recognised_only_in_their_shape() {
        assert_eq!(
            slash_command("/review src/lib.rs"),
            Some(("review", " src/lib.rs"))
        );
        assert_eq!(slash_command("  /explain"), Some(("explain", "")));
        assert_eq!(slash_command("/etc/hosts is odd"), None);
        assert_eq!(slash_command("please /review"), None);
        assert_eq!(slash_command("/"), None);
    }

    #[test]
    fn arguments_go_in_place_of_the_placeholder_or_after_the_template() {
        let mut c = Command {
            name: "x".into(),
            description: "d".into(),
            input_hint: None,
            template: "Explain $ARGUMENTS simply.".into(),
            skill: "s".into(),
        };
        assert_eq!(c.expand("lifetimes"), "Explain lifetimes simply.");
        c.template = "Explain the project.".into();
        assert_eq!(c.expand(""), "Explain the project.");
        assert_eq!(c.expand("briefly"), "Explain the project.\n\nbriefly");
    }
}
