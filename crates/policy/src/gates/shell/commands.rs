//! The commands a shell script would run, read from the tree-sitter tree.
//!
//! The gates never match raw text against patterns alone, because raw text is
//! what an attacker controls: `r\m`, `"r"m`, `$'\x72\x6d'`, `/bin/rm`,
//! `sudo env X=1 rm`, `rm${IFS}-rf` and `bash -c 'rm -rf /'` all run `rm`.
//! [`parse`] reads a script with tree-sitter-bash (the same parse the
//! [`super::syntax`] pass fails closed on), does the quoting, expansion and
//! unwrapping a shell would do — without running anything — and hands each
//! gate a flat list of [`Command`]s with the program's basename, its words,
//! its redirections and where it came from (a pipeline stage, a `$(...)` or
//! `<(...)`, a `bash -c` string, an `eval`, an `xargs`, a `find -exec`, a
//! heredoc fed to a shell or holding a substitution, or a string passed to
//! `os.system` in Python). The tree walk itself is in [`super::builder`].
//!
//! It is deliberately a *recogniser*, not a shell: when it cannot know a value
//! (an unset variable) it keeps the text as written, so gates can still see
//! `$DIR` and decide to ask.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use super::builder;
use super::embedded::{code_shell_strings, elisp_shell_strings, python_shell_strings};
use super::paths::resolve_path;
use crate::action::Effect;
use crate::gates::GateContext;

/// How deep nested shells (`bash -c "sh -c '...'"`) are followed.
pub(crate) const MAX_DEPTH: usize = 8;

/// How many commands one script may expand to before the parser stops
/// following nested scripts (and marks the script truncated).
pub(crate) const MAX_COMMANDS: usize = 4096;

/// Where a command was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Written directly in the script.
    Top,
    /// Inside `$(...)`, backticks or `<(...)`; `parent` is the command whose
    /// words contained it.
    Substitution,
    /// The string given to `bash -c`, `sh -c`, `su -c` and the like.
    ShellString,
    /// The words given to `eval`.
    Eval,
    /// The command `xargs` or `find -exec` runs.
    Spawned,
    /// A heredoc or here-string fed to a shell, or what `echo`, `printf` or
    /// `cat <<EOF` pipes into one.
    Heredoc,
    /// A string handed to a shell from Python (`os.system`, `subprocess`) or
    /// Emacs Lisp (`shell-command`).
    Embedded,
}

/// Compile one of the gates' built-in patterns. They are literals in this
/// crate, exercised by the unit tests, so a failure is a programming error
/// caught before release — the one place the gates may panic.
pub(crate) fn static_regex(pattern: &str) -> regex::Regex {
    #[allow(clippy::expect_used)]
    regex::Regex::new(pattern).expect("built-in gate pattern is valid")
}

/// One redirection: `2> file`, `>> log`, `< input`, `>& /dev/tcp/h/p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The operator with any `&`, without the fd number (`>`, `>>`, `<`,
    /// `>&`, `&>`, `<>`, `>|`, `<<<`).
    pub op: String,
    /// The target after expansion.
    pub target: String,
}

impl Redirect {
    /// Whether the redirection writes to its target (rather than reading it
    /// or duplicating a file descriptor such as `2>&1`).
    pub fn writes(&self) -> bool {
        let is_fd_dup = self.op.contains('&')
            && (self.target.chars().all(|c| c.is_ascii_digit()) || self.target == "-");
        !is_fd_dup && self.op.contains('>')
    }
}

/// A single simple command after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Basename of the program after stripping wrappers (`/usr/bin/sudo rm`
    /// → `rm`).
    pub program: String,
    /// The program as written after expansion (`/bin/rm`).
    pub program_path: String,
    /// The arguments after quote removal and expansion.
    pub args: Vec<String>,
    /// `NAME=value` words before the program (including `env NAME=value`).
    pub assignments: Vec<(String, String)>,
    /// Redirections of this command.
    pub redirects: Vec<Redirect>,
    /// Wrappers that were stripped (`sudo`, `env`, `timeout`, ...).
    pub wrappers: Vec<String>,
    /// Commands in the same pipeline share this id.
    pub pipeline: usize,
    /// Position within the pipeline (0 is the first stage).
    pub stage: usize,
    /// How the command was found.
    pub origin: Origin,
    /// Index (in [`Script::commands`]) of the command this one was nested in.
    pub parent: Option<usize>,
    /// Text fed on standard input by a heredoc or here-string.
    pub stdin_text: Option<String>,
    /// Whether the command runs in the background (`cmd &`).
    pub background: bool,
    /// The directory an earlier `cd`/`pushd` in the script moved to, as
    /// written (None: the session's working directory).
    pub cwd: Option<String>,
}

impl Command {
    /// How the command is named in reasons: `` `rm` ``, or "a redirection"
    /// for a bare `> file`.
    pub fn label(&self) -> String {
        if self.program.is_empty() {
            "a redirection".to_string()
        } else {
            format!("`{}`", self.program)
        }
    }

    /// Resolve a word of this command to an absolute, normalised path,
    /// honouring an earlier `cd` in the script.
    pub fn resolve(&self, word: &str, ctx: &GateContext) -> PathBuf {
        let anchored = word.starts_with('/') || word.starts_with('~') || word.starts_with('$');
        match &self.cwd {
            Some(dir) if !anchored => resolve_path(&format!("{dir}/{word}"), ctx),
            _ => resolve_path(word, ctx),
        }
    }

    /// Whether a flag is present, in short (`-r`, also inside `-rf`) or long
    /// (`--recursive`, `--recursive=...`) form. Parsing stops at `--`.
    /// Short clusters are only matched on words made of letters, so `-1` or a
    /// negative number never counts as a flag.
    pub fn has_flag(&self, short: &[char], long: &[&str]) -> bool {
        for arg in &self.args {
            if arg == "--" {
                break;
            }
            if let Some(name) = arg.strip_prefix("--") {
                let name = name.split('=').next().unwrap_or(name);
                if long.contains(&name) {
                    return true;
                }
            } else if let Some(cluster) = arg.strip_prefix('-') {
                if !cluster.is_empty()
                    && cluster.chars().all(|c| c.is_ascii_alphabetic())
                    && cluster.chars().any(|c| short.contains(&c))
                {
                    return true;
                }
            }
        }
        false
    }

    /// The arguments that are not flags; everything after `--` counts as an
    /// operand.
    pub fn operands(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut after_dashdash = false;
        for arg in &self.args {
            if after_dashdash {
                out.push(arg.as_str());
            } else if arg == "--" {
                after_dashdash = true;
            } else if !arg.starts_with('-') || arg == "-" {
                out.push(arg.as_str());
            }
        }
        out
    }

    /// The value of an option given as `-o VALUE`, `-oVALUE`, `--out VALUE`
    /// or `--out=VALUE`, for every occurrence.
    pub fn option_values(&self, short: &[&str], long: &[&str]) -> Vec<&str> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.args.len() {
            let arg = &self.args[i];
            if arg == "--" {
                break;
            }
            let mut matched = false;
            if !arg.starts_with("--") {
                if let Some(cluster) = arg.strip_prefix('-') {
                    for s in short {
                        let Some(letter) = s.strip_prefix('-').and_then(|l| l.chars().next())
                        else {
                            continue;
                        };
                        // `-o V`, `-oV`, and clusters `-so V` / `-qO-`.
                        let Some(idx) = cluster.find(letter) else {
                            continue;
                        };
                        if !cluster[..idx].chars().all(|c| c.is_ascii_alphabetic()) {
                            continue;
                        }
                        let rest = &cluster[idx + letter.len_utf8()..];
                        if !rest.is_empty() {
                            out.push(rest);
                        } else if let Some(v) = self.args.get(i + 1) {
                            out.push(v.as_str());
                            i += 1;
                        }
                        matched = true;
                        break;
                    }
                }
            }
            if !matched {
                for l in long {
                    if arg == l {
                        if let Some(v) = self.args.get(i + 1) {
                            out.push(v.as_str());
                            i += 1;
                        }
                        break;
                    } else if let Some(v) = arg.strip_prefix(l).and_then(|r| r.strip_prefix('=')) {
                        out.push(v);
                        break;
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Paths this command writes to: redirections, `tee`, `cp`/`mv`
    /// destinations, `sed -i`, `dd of=`, `touch`, `rm`, `truncate`, ...
    /// Returned as written (after expansion); resolve with [`resolve_path`].
    pub fn write_targets(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .redirects
            .iter()
            .filter(|r| r.writes())
            .map(|r| r.target.clone())
            .collect();
        let operands = self.operands();
        match self.program.as_str() {
            "tee" | "touch" | "mkdir" | "rm" | "rmdir" | "unlink" | "shred" | "truncate"
            | "chmod" | "chown" | "chgrp" | "chattr" => {
                // The first operand of chmod/chown/chgrp/chattr is a mode or
                // owner, unless `--reference=FILE` supplies it.
                let skip_first = matches!(
                    self.program.as_str(),
                    "chmod" | "chown" | "chgrp" | "chattr"
                ) && !self.args.iter().any(|a| a.starts_with("--reference"));
                out.extend(
                    operands
                        .iter()
                        .skip(usize::from(skip_first))
                        .map(std::string::ToString::to_string),
                );
            }
            "cp" | "mv" | "install" | "ln" | "rsync" => {
                let target_dir = self.option_values(&["-t"], &["--target-directory"]);
                if let Some(t) = target_dir.first() {
                    out.push(t.to_string());
                } else if operands.len() >= 2 {
                    out.push(operands[operands.len() - 1].to_string());
                }
                if self.program == "mv" {
                    // Moving a file away is a write to the source, too.
                    let n = if target_dir.is_empty() {
                        operands.len().saturating_sub(1)
                    } else {
                        operands.len()
                    };
                    out.extend(
                        operands
                            .iter()
                            .take(n)
                            .map(std::string::ToString::to_string),
                    );
                }
            }
            "sed" | "perl" => {
                let in_place = self.args.iter().any(|a| {
                    a == "-i"
                        || a.starts_with("-i")
                        || a == "--in-place"
                        || a.starts_with("--in-place=")
                        || (a.starts_with('-')
                            && !a.starts_with("--")
                            && a.contains('i')
                            && a.len() <= 4)
                });
                if in_place {
                    // The first operand is the expression unless -e/-f was used.
                    let has_expr = self
                        .args
                        .iter()
                        .any(|a| a == "-e" || a == "-f" || a == "--expression");
                    out.extend(
                        operands
                            .iter()
                            .skip(usize::from(!has_expr))
                            .map(std::string::ToString::to_string),
                    );
                }
            }
            "dd" => {
                out.extend(
                    self.args
                        .iter()
                        .filter_map(|a| a.strip_prefix("of="))
                        .map(std::string::ToString::to_string),
                );
            }
            "curl" => {
                out.extend(
                    self.option_values(&["-o"], &["--output"])
                        .into_iter()
                        .map(std::string::ToString::to_string),
                );
            }
            "wget" => {
                out.extend(
                    self.option_values(&["-O"], &["--output-document"])
                        .into_iter()
                        .filter(|s| *s != "-")
                        .map(std::string::ToString::to_string),
                );
            }
            _ => {}
        }
        out
    }

    /// Every word that could name a file this command reads: operands,
    /// option values (`--file=x`, `-F f=@x`, `-d @x`) and input redirections.
    /// Over-inclusive on purpose; gates only care about words that resolve
    /// to protected paths.
    pub fn path_words(&self) -> Vec<String> {
        let mut out = Vec::new();
        for arg in &self.args {
            // `--file=x`, `-F k=@x`, `-d @x`, `k=<x`: the part after the
            // marker is the path; the whole word is not.
            let tail = arg
                .rfind('@')
                .or_else(|| arg.find('<'))
                .or_else(|| arg.find('='))
                .map(|pos| arg[pos + 1..].to_string());
            match tail {
                Some(t) if !arg.starts_with('/') && !arg.starts_with('~') => out.push(t),
                _ => out.push(arg.clone()),
            }
        }
        for r in &self.redirects {
            if !r.writes() && !r.op.starts_with("<<") {
                out.push(r.target.clone());
            }
        }
        out.retain(|w| !w.is_empty() && w != "-");
        out
    }
}

/// The commands of a script, flattened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// Every command found, in the order the parser met them: a command's
    /// nested commands follow it.
    pub commands: Vec<Command>,
    /// Set when nesting went deeper than the parser follows: gates should
    /// not trust that they saw everything.
    pub truncated: bool,
    pub(crate) next_pipeline: usize,
}

impl Script {
    pub(crate) fn new_pipeline(&mut self) -> usize {
        self.next_pipeline += 1;
        self.next_pipeline
    }

    /// The commands that feed `cmd` through a pipe (earlier stages of its
    /// pipeline).
    pub fn upstream<'a>(&'a self, cmd: &'a Command) -> impl Iterator<Item = &'a Command> + 'a {
        self.commands
            .iter()
            .filter(move |c| c.pipeline == cmd.pipeline && c.stage < cmd.stage)
    }

    /// The commands nested directly inside the command at `index`.
    pub fn children(&self, index: usize) -> impl Iterator<Item = &Command> + '_ {
        self.commands
            .iter()
            .filter(move |c| c.parent == Some(index))
    }

    /// The commands nested inside the command at `index`, and their pipeline
    /// predecessors (so `$(curl x | base64 -d)` yields both stages).
    pub fn nested(&self, index: usize) -> Vec<&Command> {
        let mut out: Vec<&Command> = Vec::new();
        for c in self.children(index) {
            for u in self.upstream(c) {
                if !out.contains(&u) {
                    out.push(u);
                }
            }
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }
}

/// How many recently built scripts each thread keeps: every gate asks for
/// the commands of the same action, so the tree is walked once per action,
/// not once per gate.
const RECENT_SCRIPTS: usize = 4;

/// What a built script depends on: the effect, the working directory and
/// the home directory.
type ScriptKey = (Effect, PathBuf, Option<PathBuf>);

thread_local! {
    static RECENT: RefCell<VecDeque<(ScriptKey, Option<Script>)>> =
        const { RefCell::new(VecDeque::new()) };
}

/// The script an effect would hand to a shell, if any: a shell `Run`, the
/// shell strings inside a Python `Run`, or `shell-command` calls inside
/// Emacs Lisp. `None` for effects that run no shell. The result for the
/// last few effects is kept per thread ([`RECENT_SCRIPTS`]).
pub fn script_of(effect: &Effect, ctx: &GateContext) -> Option<Script> {
    if !matches!(effect, Effect::Run { .. } | Effect::EvalElisp { .. }) {
        return None;
    }
    let hit = RECENT.with(|recent| {
        recent
            .borrow()
            .iter()
            .find(|((e, cwd, home), _)| e == effect && *cwd == ctx.cwd && *home == ctx.home)
            .map(|(_, script)| script.clone())
    });
    if let Some(script) = hit {
        return script;
    }
    let script = build_script_of(effect, ctx);
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        if recent.len() >= RECENT_SCRIPTS {
            recent.pop_back();
        }
        recent.push_front((
            (effect.clone(), ctx.cwd.clone(), ctx.home.clone()),
            script.clone(),
        ));
    });
    script
}

fn build_script_of(effect: &Effect, ctx: &GateContext) -> Option<Script> {
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
        builder::Builder::new(ctx.home.as_deref(), env, argv, Origin::Embedded).run(
            &mut script,
            s,
            None,
            0,
        );
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
    builder::Builder::new(home, env, argv, Origin::Top).run(&mut out, script, None, 0);
    out
}

/// Whether a program name is a POSIX-ish shell.
pub fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "fish" | "csh" | "tcsh" | "rbash"
    )
}

/// The last path component of a program (`/usr/bin/rm` → `rm`).
pub fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

#[cfg(test)]
mod tests;
