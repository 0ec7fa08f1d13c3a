//! Shell normalisation: turn a script into the plain commands it would run.
//!
//! The gates never match raw text against patterns alone, because raw text is
//! what an attacker controls: `r\m`, `"r"m`, `$'\x72\x6d'`, `/bin/rm`,
//! `sudo env X=1 rm`, `rm${IFS}-rf` and `bash -c 'rm -rf /'` all run `rm`.
//! This module does the quoting, expansion and unwrapping a shell would do —
//! lexically, without running anything — and hands each gate a flat list of
//! [`Command`]s with the program's basename, its words, its redirections and
//! where it came from (a pipeline stage, a `$(...)`, a `bash -c` string, an
//! `eval`, an `xargs`, a `find -exec`, a heredoc fed to a shell, or a string
//! passed to `os.system` in Python).
//!
//! It is deliberately a *recogniser*, not a shell: when it cannot know a value
//! (an unset variable) it keeps the text as written, so gates can still see
//! `$DIR` and decide to ask.

//!
//! The types, helpers and the tree-based builder now live in
//! [`crate::gates::shell`]; this module keeps only the hand lexer, for the
//! differential test against the tree, until it is retired.

mod lexer;

pub use crate::gates::shell::commands::{basename, is_shell, Command, Origin, Redirect, Script};
pub(crate) use crate::gates::shell::commands::{static_regex, MAX_COMMANDS, MAX_DEPTH};
pub use crate::gates::shell::embedded::{
    code_shell_strings, elisp_shell_strings, python_shell_strings,
};
pub use crate::gates::shell::paths::{expand_home, normalize, resolve_path, strip_glob};

use std::collections::BTreeMap;
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;

use lexer::Parser;

use crate::action::Effect;
use crate::gates::GateContext;

/// Emacs Lisp. `None` for effects that run no shell.
pub fn script_of(effect: &Effect, ctx: &GateContext) -> Option<Script> {
    match effect {
        Effect::Run {
            interpreter,
            script,
            argv,
            env,
            ..
        } => {
            let name = basename(interpreter);
            let mut env = env.clone();
            env.entry("PWD".into())
                .or_insert_with(|| ctx.cwd.to_string_lossy().into_owned());
            let env = &env;
            if is_shell(name) {
                Some(parse_with(script, ctx.home.as_deref(), env, argv))
            } else if name.starts_with("python") {
                Some(parse_embedded(
                    &python_shell_strings(script),
                    ctx,
                    env,
                    argv,
                ))
            } else if matches!(
                name,
                "perl" | "ruby" | "node" | "nodejs" | "php" | "awk" | "lua"
            ) {
                Some(parse_embedded(&code_shell_strings(script), ctx, env, argv))
            } else {
                None
            }
        }
        Effect::EvalElisp { code, .. } => Some(parse_embedded(
            &elisp_shell_strings(code),
            ctx,
            &BTreeMap::new(),
            &[],
        )),
        _ => None,
    }
}

fn parse_embedded(
    strings: &[String],
    ctx: &GateContext,
    env: &BTreeMap<String, String>,
    argv: &[String],
) -> Script {
    let mut script = Script::default();
    for s in strings {
        let mut p = Parser::new(s, ctx.home.as_deref(), env, argv);
        p.origin = Origin::Embedded;
        p.run(&mut script, None, 0);
    }
    script
}

/// Parse a shell script with the given home directory, no environment and no
/// positional arguments.
pub fn parse(script: &str, home: Option<&Path>) -> Script {
    parse_with(script, home, &BTreeMap::new(), &[])
}

/// Parse a shell script; `env` seeds variable expansion and `argv` supplies
/// `$1`, `$2`, ... and `$@`.
pub fn parse_with(
    script: &str,
    home: Option<&Path>,
    env: &BTreeMap<String, String>,
    argv: &[String],
) -> Script {
    let mut out = Script::default();
    Parser::new(script, home, env, argv).run(&mut out, None, 0);
    out
}

#[cfg(test)]
mod tests;
