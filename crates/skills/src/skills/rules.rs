//! Gate rules declared in Org: allow / ask / deny over tool names, actuator
//! targets and a regular expression on the action's subject.
//!
//! Every rule carries examples that must and must not match; they are
//! checked when the file loads (see `parse`), so a rule file tests itself.
//! The person's policy file (`~/.config/passepartout/policy.org`) is a
//! skill file holding only rules, loaded by [`load_policy`].

use std::path::Path;

use crate::action::{Action, Effect};
use crate::gates::shell::{basename, is_shell, parse};
use crate::gates::{Decision, Gate, GateContext, Verdict};
use crate::util::glob::{Glob, Slash};

use super::diagnostic::Diagnostic;
use super::lazy_regex::LazyRegex;
use super::parse;

/// One declarative rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule's heading.
    pub name: String,
    pub decision: Decision,
    /// Glob (`*`, `?`) over the tool name.
    pub tool: String,
    /// Glob over the action's target (`shell`, `files`, `emacs`, `memex`).
    pub target: String,
    /// Regex over [`subject`]; `None` matches every action the globs match.
    pub pattern: Option<LazyRegex>,
    /// Why, in the author's words: shown to the person and the model.
    pub reason: String,
    /// The gate the rule belongs to (`skill:NAME` or `policy`).
    pub gate: String,
}

impl Rule {
    /// The verdict this rule gives `action`, if it applies.
    pub fn check(&self, action: &Action) -> Option<Verdict> {
        self.check_subjects(action, &subjects(action))
    }

    /// Like [`check`](Self::check) with the subjects computed once for
    /// every rule of a gate.
    fn check_subjects(&self, action: &Action, subjects: &[String]) -> Option<Verdict> {
        if !glob_match(&self.tool, &action.tool) || !glob_match(&self.target, &action.target) {
            return None;
        }
        if let Some(pattern) = &self.pattern {
            let Some(re) = pattern.regex() else {
                // Only a damaged parse-cache entry gets here (the parser
                // compiled this pattern once): fail closed.
                return Some(Verdict::new(
                    Decision::Deny,
                    self.gate.clone(),
                    format!(
                        "{}: its pattern does not compile (a damaged skill cache entry?); reload the skills",
                        self.name
                    ),
                ));
            };
            if !subjects.iter().any(|s| re.is_match(s)) {
                return None;
            }
        }
        Some(Verdict::new(
            self.decision,
            self.gate.clone(),
            format!("{}: {}", self.name, self.reason),
        ))
    }
}

/// The text a rule's pattern is matched against: the script for a run, the
/// path for a file effect, the code for elisp, otherwise the arguments as
/// JSON.
pub fn subject(action: &Action) -> String {
    match &action.effect {
        Effect::Run { script, .. } => script.clone(),
        Effect::ReadFile { path }
        | Effect::ListDir { path }
        | Effect::WriteFile { path, .. }
        | Effect::SearchText { path, .. } => path.display().to_string(),
        Effect::EvalElisp { code, .. } => code.clone(),
        Effect::Message { .. } | Effect::Op { .. } => action.arguments.to_string(),
    }
}

/// Everything a rule's pattern is tried against: the [`subject`], and for
/// shell text each normalised command as `program arg arg…` (quotes
/// removed, wrappers such as `sudo`/`env` stripped, the program by its
/// basename), so a rule against `rm -rf` also catches `"r"m -rf`,
/// `/bin/rm -rf`, `sudo rm -rf` and `true; rm -rf x`.
pub fn subjects(action: &Action) -> Vec<String> {
    let mut out = vec![subject(action)];
    // Parsed without the action's environment or argv: model-provided
    // values (`ARG_*`) are data, and a rule about commands must not fire on
    // text a value happens to contain.
    if let Effect::Run {
        interpreter,
        script,
        ..
    } = &action.effect
    {
        if !is_shell(basename(interpreter)) {
            return out;
        }
        for cmd in &parse(script, None).commands {
            let line = std::iter::once(cmd.program.as_str())
                .chain(cmd.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// A rule's tool or target pattern against a name: `*` any run of
/// characters (`/` included), `?` one character, `[...]` a class
/// (`util::glob`, the matcher every rule shares).
pub fn glob_match(glob: &str, text: &str) -> bool {
    Glob::new(glob, Slash::Matches).is_match(text)
}

/// A gate made of rules: the strictest matching rule decides.
#[derive(Debug, Clone)]
pub struct RuleGate {
    name: String,
    rules: Vec<Rule>,
}

impl RuleGate {
    /// A gate named `name` (`skill:NAME`, `policy`) over `rules`.
    pub fn new(name: impl Into<String>, rules: Vec<Rule>) -> Self {
        RuleGate {
            name: name.into(),
            rules,
        }
    }

    /// The rules, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

impl Gate for RuleGate {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, action: &Action, _ctx: &GateContext) -> Option<Verdict> {
        // `max_by_key` keeps the last of equals; fold keeps the first, so the
        // reason shown is the first-written rule among the strictest.
        let subjects = subjects(action);
        self.rules
            .iter()
            .filter_map(|r| r.check_subjects(action, &subjects))
            .fold(None, |best: Option<Verdict>, v| match best {
                Some(b) if b.decision >= v.decision => Some(b),
                _ => Some(v),
            })
    }
}

/// Load the person's policy file. A missing file is no policy and no
/// diagnostic. Unlike a skill, a policy keeps every rule that is valid even
/// when others in the file are broken: dropping a person's deny rules
/// because a neighbour has a typo would fail open.
pub fn load_policy(path: &Path) -> (Vec<Rule>, Vec<Diagnostic>) {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), Vec::new()),
        Err(e) => {
            return (
                Vec::new(),
                vec![Diagnostic {
                    path: path.to_path_buf(),
                    line: 1,
                    column: 1,
                    severity: super::Severity::Error,
                    message: format!("cannot read policy file: {e}"),
                }],
            )
        }
    };
    parse::parse_policy_bytes(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use serde_json::json;

    fn run(tool: &str, script: &str) -> Action {
        Action {
            tool: tool.into(),
            target: "shell".into(),
            arguments: json!({ "command": script }),
            effect: Effect::Run {
                interpreter: "bash".into(),
                script: script.into(),
                argv: vec![],
                env: Default::default(),
                network: false,
            },
            approval: Approval::Ask,
            timeout_secs: None,
        }
    }

    fn rule(name: &str, decision: Decision, tool: &str, pattern: &str) -> Rule {
        Rule {
            name: name.into(),
            decision,
            tool: tool.into(),
            target: "*".into(),
            pattern: Some(regex::Regex::new(pattern).unwrap().into()),
            reason: format!("because {name}"),
            gate: "skill:test".into(),
        }
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("shell", "shell"));
        assert!(!glob_match("shell", "shell2"));
        assert!(glob_match("git_*", "git_log"));
        assert!(!glob_match("git_*", "legit_log"));
        assert!(glob_match("f?les.*", "files.read"));
        assert!(glob_match("*_*_*", "a_b_c"));
        assert!(!glob_match("a*b", "acbd"));
    }

    #[test]
    fn a_rule_checks_tool_and_pattern() {
        let r = rule("push", Decision::Ask, "shell", r"\bgit\s+push\b");
        assert_eq!(
            r.check(&run("shell", "git push origin main")),
            Some(Verdict::new(
                Decision::Ask,
                "skill:test",
                "push: because push"
            ))
        );
        assert_eq!(r.check(&run("shell", "git pull")), None);
        assert_eq!(r.check(&run("other", "git push")), None);
    }

    #[test]
    fn rules_match_the_normalised_commands() {
        let r = rule("rm", Decision::Deny, "*", r"^rm -rf\b");
        for script in [
            "rm -rf x",
            "\"r\"m -rf x",
            "/bin/rm -rf x",
            "sudo rm -rf x",
            "true; rm -rf x",
            "bash -c 'rm -rf x'",
        ] {
            assert!(r.check(&run("shell", script)).is_some(), "{script}");
        }
        assert!(r.check(&run("shell", "echo rm -rf x")).is_none());
    }

    #[test]
    fn the_strictest_rule_wins_and_the_first_among_equals() {
        let gate = RuleGate::new(
            "skill:test",
            vec![
                rule("a", Decision::Ask, "*", "rm"),
                rule("b", Decision::Deny, "*", "rm -rf"),
                rule("c", Decision::Deny, "*", "rf"),
            ],
        );
        let v = gate
            .check(&run("shell", "rm -rf x"), &GateContext::default())
            .unwrap();
        assert_eq!(v.decision, Decision::Deny);
        assert_eq!(v.reason, "b: because b");
        assert_eq!(
            gate.check(&run("shell", "ls"), &GateContext::default()),
            None
        );
    }
}
