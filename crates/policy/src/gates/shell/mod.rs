//! The shell gate: judges shell text by what a real parser and the literal
//! commands say, failing closed.
//!
//! Two passes over one script. [`syntax`] parses it with tree-sitter-bash
//! and names every construct that cannot be reduced to known words (brace
//! expansion, computed or globbed program names, `eval`, `IFS`, `source` of
//! a computed file, parse errors, unknown node kinds): each is *ask*, never
//! *allow*. [`semantics`] reads the normalised commands
//! ([`commands`], built from the same tree) for ordinary tools used destructively,
//! interpreter one-liners, write-then-run, symlinks out of the project,
//! writes to the control surface and resource bombs. Whole-file writes to
//! the control surface (`Effect::WriteFile`) are asked about here too.

mod builder;
pub mod commands;
pub mod embedded;
pub mod paths;
pub mod semantics;
pub mod syntax;

pub(crate) use commands::static_regex;
pub use commands::{
    basename, is_shell, parse, parse_with, script_of, Command, Origin, Redirect, Script,
};
pub use embedded::{code_shell_strings, elisp_shell_strings, python_shell_strings};
pub use paths::{expand_home, normalize, resolve_path, strip_glob};

use crate::action::{Action, Effect};
use crate::control_surface::control_entry_in;
use crate::gates::engine::verdict_from_findings;
use crate::gates::{
    destructive::DestructiveGate, exfiltration::ExfiltrationGate, injection::InjectionGate,
    protected_paths::ProtectedPathsGate,
};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// Fails closed on shell text the analysis cannot see through.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShellGate;

impl Gate for ShellGate {
    fn name(&self) -> &str {
        "shell"
    }

    fn priority(&self) -> i32 {
        15
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings: Vec<(Decision, String)> = Vec::new();
        match &action.effect {
            Effect::Run {
                interpreter,
                script,
                ..
            } => {
                if is_shell(basename(interpreter)) {
                    opaque(script, ctx, &mut findings);
                }
                if let Some(parsed) = script_of(&action.effect, ctx) {
                    // Strings handed to nested shells are shell text too.
                    for cmd in &parsed.commands {
                        if is_shell(&cmd.program) {
                            for inner in cmd.option_values(&["-c"], &[]) {
                                opaque(inner, ctx, &mut findings);
                            }
                        }
                    }
                    findings.extend(semantics::findings(&parsed, ctx));
                    // Contained, a script written now is judged by what it
                    // writes whenever it runs; only the person's own tools
                    // run files unjudged (the host-executed surface, asked
                    // from the changeset).
                    if !ctx.contained {
                        for cmd in &parsed.commands {
                            for (target, text) in semantics::written_scripts(cmd) {
                                findings.extend(judge_script_for_later(&target, &text, ctx));
                            }
                        }
                    }
                }
            }
            Effect::WriteFile { path, content } => {
                let shown = path.to_string_lossy();
                if !ctx.contained && semantics::is_shell_script(&shown, content) {
                    findings.extend(judge_script_for_later(&shown, content, ctx));
                }
                let abs = resolve_path(&shown, ctx);
                if let Some(entry) = control_entry_in(&ctx.cwd, &abs) {
                    findings.push((
                        Decision::Ask,
                        format!(
                            "writes {} in the project's control surface: {}",
                            entry.path, entry.why
                        ),
                    ));
                }
            }
            _ => {}
        }
        verdict_from_findings(self.name(), findings)
    }
}

/// Judge a script written now as if it ran now, by the gates that read
/// shell text (not recursively through this one's own write check): a
/// later `bash c.sh` would otherwise run it unjudged.
fn judge_script_for_later(target: &str, text: &str, ctx: &GateContext) -> Vec<(Decision, String)> {
    let action = Action {
        tool: "written script".into(),
        target: "shell".into(),
        arguments: serde_json::Value::Null,
        effect: Effect::Run {
            interpreter: "bash".into(),
            script: text.to_string(),
            argv: Vec::new(),
            env: Default::default(),
            network: false,
        },
        approval: crate::action::Approval::Auto,
        timeout_secs: None,
    };
    let mut inner: Vec<(Decision, String)> = Vec::new();
    opaque(text, ctx, &mut inner);
    if let Some(parsed) = script_of(&action.effect, ctx) {
        inner.extend(semantics::findings(&parsed, ctx));
    }
    // Secrets in the text are the secrets gate's business already.
    let gates: [&dyn Gate; 4] = [
        &DestructiveGate,
        &InjectionGate,
        &ExfiltrationGate,
        &ProtectedPathsGate,
    ];
    inner.extend(
        gates
            .iter()
            .filter_map(|g| g.check(&action, ctx))
            .map(|v| (v.decision, format!("{}: {}", v.gate, v.reason))),
    );
    let Some(worst) = inner.iter().map(|(d, _)| *d).max() else {
        return Vec::new();
    };
    if worst == Decision::Allow {
        return Vec::new();
    }
    let why = inner
        .into_iter()
        .find(|(d, _)| *d == worst)
        .map(|(_, r)| r)
        .unwrap_or_default();
    vec![(
        Decision::Ask,
        format!(
            "writes `{target}`, a script that would be {} if run now ({why})",
            match worst {
                Decision::Deny => "denied",
                _ => "held for approval",
            }
        ),
    )]
}

/// The constructs the analysis cannot see through. Contained, code fed
/// to an interpreter is no blind spot: whatever it writes is the
/// changeset, judged before it reaches the project.
fn opaque(script: &str, ctx: &GateContext, findings: &mut Vec<(Decision, String)>) {
    for o in syntax::opaque_constructs(script) {
        if ctx.contained && o.construct == syntax::HEREDOC_TO_INTERPRETER {
            continue;
        }
        findings.push((
            Decision::Ask,
            format!("cannot judge {}: `{}`", o.construct, o.text),
        ));
    }
}

#[cfg(test)]
mod tests {
    use crate::action::Action;
    use crate::gates::engine::GateEngine;
    use crate::gates::GateContext;

    /// Every gate of one action, the syntax pass and the command builder
    /// included, shares one parse of each shell text: the script, and each
    /// nested `bash -c` string once more.
    #[test]
    fn each_shell_text_is_parsed_once_per_action() {
        let ctx = GateContext {
            cwd: "/home/u/proj".into(),
            home: Some("/home/u".into()),
            network_allow: vec![],
            host_paths: Vec::new(),
            contained: false,
        };
        let engine = GateEngine::with_builtin_gates();
        for (script, texts) in [
            ("ls -la src | wc -l", 1),
            ("cd src && bash -c 'grep -rn todo .'", 2),
        ] {
            let before = super::syntax::parses_on_this_thread();
            engine.evaluate(&Action::shell_for_tests(script), &ctx);
            let parses = super::syntax::parses_on_this_thread() - before;
            assert_eq!(parses, texts, "{script}: {parses} parses for {texts} texts");
        }
    }
}
