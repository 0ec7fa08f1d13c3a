//! Scripts inside a command, followed as scripts of their own: `$(...)`,
//! backquotes and `<(...)` in its words, what `echo`/`printf` print into a
//! code position, `bash -c STRING`, `eval`, `xargs`, `find -exec`, `trap`,
//! `watch`, a heredoc or here-string fed to a shell, and shell strings in
//! interpreter one-liners. Each is re-parsed by a builder of its own that
//! inherits the variables and directory, to a bounded depth ([`MAX_DEPTH`])
//! and number of commands ([`MAX_COMMANDS`]); past either the script is
//! marked truncated so the gates do not trust they saw everything.

use super::Builder;
use crate::gates::shell::commands::{is_shell, Command, Origin, Script, MAX_COMMANDS, MAX_DEPTH};
use crate::gates::shell::embedded::{code_shell_strings, python_shell_strings, shell_quote};

impl Builder<'_> {
    /// Follow what the command at `index` nests: its words' substitutions
    /// first, then the scripts its program runs ([`nested_scripts`]).
    pub(super) fn follow_nested(
        &mut self,
        out: &mut Script,
        index: usize,
        substitutions: Vec<String>,
        depth: usize,
    ) {
        if depth >= MAX_DEPTH || out.commands.len() >= MAX_COMMANDS {
            let cmd = &out.commands[index];
            if !substitutions.is_empty() || !nested_scripts(cmd, out).is_empty() {
                out.truncated = true;
            }
            return;
        }
        let mut seen = Vec::new();
        for sub in substitutions {
            if self.already_seen.contains(&sub) {
                continue;
            }
            let first_child = out.commands.len();
            self.nested(out, &sub, Origin::Substitution, index, depth, &[]);
            // `$(echo rm) -rf /`, `eval "$(printf ...)"`, `sh -c "$(echo ...)"`:
            // what echo or printf prints there is code.
            let placeholder = format!("$({sub})");
            let cmd = &out.commands[index];
            let program_word = cmd.program_path == placeholder;
            let code_position = program_word
                || (cmd.program == "eval" && cmd.args.contains(&placeholder))
                || (is_shell(&cmd.program)
                    && cmd.args.windows(2).any(|w| {
                        w[0].starts_with('-') && w[0].contains('c') && w[1] == placeholder
                    }));
            if code_position {
                let produced = &out.commands[first_child..];
                let printed: Vec<String> = produced
                    .iter()
                    .filter(|c| matches!(c.program.as_str(), "echo" | "printf"))
                    .filter(|c| {
                        !produced
                            .iter()
                            .any(|o| o.pipeline == c.pipeline && o.stage > c.stage)
                    })
                    .flat_map(|c| c.args.iter().filter(|a| !a.starts_with('-')).cloned())
                    .collect();
                if !printed.is_empty() {
                    let rest: Vec<String> = if program_word {
                        cmd.args.iter().map(|a| shell_quote(a)).collect()
                    } else {
                        Vec::new()
                    };
                    let line = format!("{} {}", printed.join(" "), rest.join(" "));
                    self.nested(out, &line, Origin::Eval, index, depth, &[]);
                }
            }
            seen.push(sub);
        }
        let cmd = out.commands[index].clone();
        for (text, origin) in nested_scripts(&cmd, out) {
            // `eval "$(cmd)"` re-reads text whose substitutions were already
            // followed above; follow only what is new.
            if origin == Origin::Eval && seen.iter().any(|s| text.trim() == format!("$({s})")) {
                continue;
            }
            self.nested(out, &text, origin, index, depth, &seen);
        }
    }

    /// Walk `text` as a script of its own nested under `parent`, with a
    /// builder that inherits the variables and the directory.
    fn nested(
        &mut self,
        out: &mut Script,
        text: &str,
        origin: Origin,
        parent: usize,
        depth: usize,
        already_seen: &[String],
    ) {
        let mut inner = Builder {
            home: self.home,
            vars: self.vars.clone(),
            argv: self.argv,
            origin,
            already_seen: already_seen.to_vec(),
            cwd: self.cwd.clone(),
        };
        inner.run(out, text, Some(parent), depth + 1);
    }
}

/// Scripts nested in a command's words: `bash -c STR`, `eval WORDS`,
/// `xargs CMD`, `find -exec CMD ;`, a heredoc fed to a shell, `watch CMD`,
/// `ssh host CMD` is remote and not followed.
fn nested_scripts(cmd: &Command, script: &Script) -> Vec<(String, Origin)> {
    let mut out = Vec::new();
    let prog = cmd.program.as_str();
    if is_shell(prog) {
        // The script string follows `-c` (possibly inside a cluster `-lc`).
        let mut i = 0;
        while i < cmd.args.len() {
            let a = &cmd.args[i];
            if a.starts_with('-') && !a.starts_with("--") && a.contains('c') {
                if let Some(s) = cmd.args.get(i + 1) {
                    out.push((s.clone(), Origin::ShellString));
                }
                break;
            }
            if !a.starts_with('-') {
                break;
            }
            i += 1;
        }
        if let Some(body) = &cmd.stdin_text {
            out.push((body.clone(), Origin::Heredoc));
        }
        if let Some(here) = cmd.redirects.iter().find(|r| r.op == "<<<") {
            out.push((here.target.clone(), Origin::Heredoc));
        }
    }
    if is_shell(prog)
        && cmd.stage > 0
        && !cmd
            .args
            .iter()
            .any(|a| a.starts_with('-') && a.contains('c'))
    {
        // `echo 'rm -rf /' | sh`: what echo prints is the script.
        for up in script.upstream(cmd) {
            if up.program == "cat" {
                if let Some(body) = &up.stdin_text {
                    out.push((body.clone(), Origin::Heredoc));
                }
            }
            if matches!(up.program.as_str(), "echo" | "printf") {
                let text: Vec<&str> = up
                    .args
                    .iter()
                    .filter(|a| !(a.starts_with('-') && a.len() <= 3))
                    .map(String::as_str)
                    .collect();
                out.push((text.join(" "), Origin::Heredoc));
            }
        }
    }
    if prog.starts_with("python") {
        if let Some(body) = &cmd.stdin_text {
            out.extend(
                python_shell_strings(body)
                    .into_iter()
                    .map(|s| (s, Origin::Embedded)),
            );
        }
    }
    let code_args = match prog {
        p if p.starts_with("python") => cmd.option_values(&["-c"], &[]),
        "perl" | "ruby" | "node" | "nodejs" => cmd.option_values(&["-e", "-E"], &["--eval"]),
        "php" => cmd.option_values(&["-r"], &[]),
        "awk" | "gawk" | "mawk" | "nawk" => cmd.operands().into_iter().take(1).collect(),
        _ => Vec::new(),
    };
    for code in code_args {
        let strings = if prog.starts_with("python") {
            python_shell_strings(code)
        } else {
            code_shell_strings(code)
        };
        out.extend(strings.into_iter().map(|s| (s, Origin::Embedded)));
    }
    match prog {
        "eval" => out.push((cmd.args.join(" "), Origin::Eval)),
        "trap" => {
            if let Some(code) = cmd.operands().first() {
                out.push((code.to_string(), Origin::ShellString));
            }
        }
        "watch" => {
            let words: Vec<&str> = cmd
                .args
                .iter()
                .skip_while(|a| a.starts_with('-'))
                .map(String::as_str)
                .collect();
            if !words.is_empty() {
                out.push((words.join(" "), Origin::ShellString));
            }
        }
        "xargs" => {
            let valued = [
                "-I",
                "-i",
                "-n",
                "-P",
                "-L",
                "-s",
                "-d",
                "-E",
                "-a",
                "--max-args",
                "--max-procs",
                "--delimiter",
                "--arg-file",
            ];
            let mut i = 0;
            while i < cmd.args.len() {
                let a = &cmd.args[i];
                if !a.starts_with('-') {
                    break;
                }
                if valued.contains(&a.as_str()) {
                    i += 1;
                }
                i += 1;
            }
            let mut words: Vec<String> = cmd.args[i.min(cmd.args.len())..]
                .iter()
                .map(|w| shell_quote(w))
                .collect();
            // A here-string, and words `echo` or `printf` feed into xargs,
            // become its arguments.
            for r in cmd.redirects.iter().filter(|r| r.op == "<<<") {
                words.extend(r.target.split_whitespace().map(shell_quote));
            }
            for up in script.upstream(cmd) {
                if matches!(up.program.as_str(), "echo" | "printf") {
                    words.extend(
                        up.args
                            .iter()
                            .filter(|a| !a.starts_with('-'))
                            .flat_map(|a| a.split_whitespace())
                            .map(shell_quote),
                    );
                }
            }
            if !words.is_empty() {
                out.push((words.join(" "), Origin::Spawned));
            }
        }
        "find" => {
            let mut i = 0;
            while i < cmd.args.len() {
                let a = cmd.args[i].as_str();
                if matches!(a, "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let mut words = Vec::new();
                    i += 1;
                    while i < cmd.args.len() && cmd.args[i] != ";" && cmd.args[i] != "+" {
                        words.push(shell_quote(&cmd.args[i]));
                        i += 1;
                    }
                    if !words.is_empty() {
                        out.push((words.join(" "), Origin::Spawned));
                    }
                }
                i += 1;
            }
        }
        _ => {}
    }
    out
}
