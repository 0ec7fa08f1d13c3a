//! The word-level shell lexer: quoting, expansion of known variables,
//! operators, redirections, here-documents, substitutions and wrappers,
//! turned into [`Command`]s. The shell gate's tree-sitter pass
//! ([`crate::gates::shell::syntax`]) fails closed where this lexer can only
//! guess.

use std::collections::BTreeMap;
use std::path::Path;

use super::{basename, is_shell, Command, Origin, Redirect, Script, MAX_COMMANDS, MAX_DEPTH};
use crate::gates::shell::embedded::{code_shell_strings, python_shell_strings, shell_quote};

#[derive(Default)]
struct Word {
    text: String,
    /// Whether any part was quoted (quoted words are never operators or
    /// assignments' names, and a quoted empty word still counts).
    quoted: bool,
    /// Scripts inside `$(...)`, backticks and `<(...)`.
    substitutions: Vec<String>,
    /// Extra words produced by `$@` or `${IFS}` splitting, pushed before
    /// this one.
    split_before: Vec<String>,
}

enum Token {
    Word(Word),
    /// `;`, `&&`, `||`, `|`, `|&`, `&`, newline, `(`, `)`.
    Separator(String),
    Redirect {
        op: String,
        target: Word,
    },
    Heredoc {
        body: String,
        /// `$(...)` and backticks in an unquoted-delimiter body: the shell
        /// runs them while it builds the text, whatever the text is fed to.
        substitutions: Vec<String>,
    },
}

pub(super) struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    home: Option<&'a Path>,
    vars: BTreeMap<String, String>,
    argv: &'a [String],
    pub(super) origin: Origin,
    /// Substitutions an enclosing command already followed (for `eval`).
    already_seen: Vec<String>,
    /// The directory of the latest `cd`, as written.
    cwd: Option<String>,
}

impl<'a> Parser<'a> {
    pub(super) fn new(
        text: &str,
        home: Option<&'a Path>,
        env: &BTreeMap<String, String>,
        argv: &'a [String],
    ) -> Self {
        let mut vars = env.clone();
        if let Some(h) = home {
            vars.insert("HOME".into(), h.to_string_lossy().into_owned());
        }
        Parser {
            chars: text.chars().collect(),
            pos: 0,
            home,
            vars,
            argv,
            origin: Origin::Top,
            already_seen: Vec::new(),
            cwd: None,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.chars.get(self.pos + n).copied()
    }

    /// Parse the whole input, appending commands to `out`.
    pub(super) fn run(&mut self, out: &mut Script, parent: Option<usize>, depth: usize) {
        let mut words: Vec<Word> = Vec::new();
        let mut redirects: Vec<(String, Word)> = Vec::new();
        let mut heredoc: Option<String> = None;
        let mut pipeline = out.new_pipeline();
        let mut stage = 0;
        loop {
            let token = self.next_token();
            match token {
                Some(Token::Word(w)) => words.push(w),
                Some(Token::Redirect { op, target }) => redirects.push((op, target)),
                Some(Token::Heredoc {
                    body,
                    substitutions,
                }) => {
                    heredoc = Some(body);
                    // A word with no text: it only carries the substitutions
                    // so the command that owns the heredoc nests them.
                    words.push(Word {
                        substitutions,
                        ..Word::default()
                    });
                }
                Some(Token::Separator(sep)) => {
                    let background = sep == "&";
                    let emitted = self.emit(
                        out,
                        std::mem::take(&mut words),
                        std::mem::take(&mut redirects),
                        heredoc.take(),
                        (pipeline, stage),
                        parent,
                        depth,
                        background,
                    );
                    if sep == "|" || sep == "|&" {
                        if emitted {
                            stage += 1;
                        }
                    } else {
                        stage = 0;
                        pipeline = out.new_pipeline();
                    }
                }
                None => {
                    self.emit(
                        out,
                        std::mem::take(&mut words),
                        std::mem::take(&mut redirects),
                        heredoc.take(),
                        (pipeline, stage),
                        parent,
                        depth,
                        false,
                    );
                    break;
                }
            }
        }
    }

    /// Turn collected words into a command (stripping wrappers and shell
    /// keywords), record it, and recurse into whatever it nests.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        out: &mut Script,
        words: Vec<Word>,
        redirects: Vec<(String, Word)>,
        heredoc: Option<String>,
        (pipeline, stage): (usize, usize),
        parent: Option<usize>,
        depth: usize,
        background: bool,
    ) -> bool {
        let mut substitutions: Vec<String> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for w in words {
            substitutions.extend(w.substitutions);
            texts.extend(w.split_before);
            if !w.text.is_empty() || w.quoted {
                texts.push(w.text);
            }
        }
        let mut redirs = Vec::new();
        for (op, target) in redirects {
            substitutions.extend(target.substitutions);
            redirs.push(Redirect {
                op,
                target: target.text,
            });
        }

        // Shell keywords that introduce a command.
        while let Some(first) = texts.first() {
            if matches!(
                first.as_str(),
                "if" | "then"
                    | "else"
                    | "elif"
                    | "do"
                    | "while"
                    | "until"
                    | "!"
                    | "{"
                    | "}"
                    | "fi"
                    | "done"
                    | "esac"
                    | "time"
            ) {
                texts.remove(0);
            } else {
                break;
            }
        }
        if matches!(
            texts.first().map(String::as_str),
            Some("for" | "case" | "function" | "select")
        ) {
            texts.clear();
        }

        // Leading assignments.
        let mut assignments = Vec::new();
        while let Some(first) = texts.first() {
            match split_assignment(first) {
                Some((k, v)) => {
                    assignments.push((k, v));
                    texts.remove(0);
                }
                None => break,
            }
        }

        let (wrappers, rest) = strip_wrappers(texts, &mut assignments);
        let index = out.commands.len();
        let has_program = !rest.is_empty();
        if has_program || !redirs.is_empty() || !assignments.is_empty() {
            let program_path = rest.first().cloned().unwrap_or_default();
            // A computed program (`$(...)`) is kept whole: its slashes are
            // not directories.
            let program = if program_path.contains("$(") {
                program_path.clone()
            } else {
                basename(&program_path).to_string()
            };
            if !has_program {
                // A bare assignment list changes the variables later words see.
                for (k, v) in &assignments {
                    // `d=$(mktemp -d)`: a fresh directory under /tmp.
                    let v = if v.starts_with("$(mktemp") && v.ends_with(')') {
                        "/tmp/tmp.XXXXXXXXXX".to_string()
                    } else {
                        v.clone()
                    };
                    self.vars.insert(k.clone(), v);
                }
            }
            if program == "export"
                || program == "declare"
                || program == "typeset"
                || program == "local"
                || program == "readonly"
            {
                for a in rest.iter().skip(1) {
                    if let Some((k, v)) = split_assignment(a) {
                        self.vars.insert(k, v);
                    }
                }
            }
            out.commands.push(Command {
                program,
                program_path,
                args: rest.iter().skip(1).cloned().collect(),
                assignments,
                redirects: redirs,
                wrappers,
                pipeline,
                stage,
                origin: self.origin,
                parent,
                stdin_text: heredoc.clone(),
                background,
                cwd: self.cwd.clone(),
            });
            if matches!(out.commands[index].program.as_str(), "cd" | "pushd") {
                let target = out.commands[index]
                    .operands()
                    .first()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "~".to_string());
                self.cwd = Some(match (&self.cwd, target.starts_with(['/', '~', '$'])) {
                    (Some(prev), false) => format!("{prev}/{target}"),
                    _ => target,
                });
            }
        } else if substitutions.is_empty() {
            return false;
        } else {
            // `$(cmd)` alone on a line: record an empty command to nest under.
            out.commands.push(Command {
                program: String::new(),
                program_path: String::new(),
                args: vec![],
                assignments,
                redirects: redirs,
                wrappers,
                pipeline,
                stage,
                origin: self.origin,
                parent,
                stdin_text: None,
                background,
                cwd: self.cwd.clone(),
            });
        }
        if depth >= MAX_DEPTH || out.commands.len() >= MAX_COMMANDS {
            let cmd = &out.commands[index];
            if !substitutions.is_empty() || !nested_scripts(cmd, out).is_empty() {
                out.truncated = true;
            }
            return true;
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
        true
    }

    fn nested(
        &mut self,
        out: &mut Script,
        text: &str,
        origin: Origin,
        parent: usize,
        depth: usize,
        already_seen: &[String],
    ) {
        let mut p = Parser::new(text, self.home, &BTreeMap::new(), self.argv);
        p.vars = self.vars.clone();
        p.origin = origin;
        p.already_seen = already_seen.to_vec();
        p.cwd = self.cwd.clone();
        p.run(out, Some(parent), depth + 1);
    }

    fn next_token(&mut self) -> Option<Token> {
        // Skip blanks and comments; a newline is a separator.
        loop {
            match self.peek() {
                None => return None,
                Some(' ' | '\t' | '\r') => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                Some('#') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                Some('\n') => {
                    self.pos += 1;
                    return Some(Token::Separator("\n".into()));
                }
                _ => break,
            }
        }
        let c = self.peek()?;
        let two: String = [Some(c), self.peek_at(1)].iter().flatten().collect();
        match c {
            ';' => {
                self.pos += if two == ";;" { 2 } else { 1 };
                Some(Token::Separator(";".into()))
            }
            '&' if two == "&&" => {
                self.pos += 2;
                Some(Token::Separator("&&".into()))
            }
            '&' if two == "&>" => self.redirect(),
            '&' => {
                self.pos += 1;
                Some(Token::Separator("&".into()))
            }
            '|' => {
                if two == "||" {
                    self.pos += 2;
                    Some(Token::Separator("||".into()))
                } else if two == "|&" {
                    self.pos += 2;
                    Some(Token::Separator("|&".into()))
                } else {
                    self.pos += 1;
                    Some(Token::Separator("|".into()))
                }
            }
            '(' | ')' => {
                self.pos += 1;
                Some(Token::Separator(c.to_string()))
            }
            '<' | '>' if self.peek_at(1) == Some('(') => {
                // Process substitution `<(cmd)`: a word whose value is a path.
                self.pos += 2;
                let inner = self.read_balanced(')');
                let mut w = Word {
                    text: "/dev/fd/63".into(),
                    ..Word::default()
                };
                w.substitutions.push(inner);
                Some(Token::Word(w))
            }
            '<' | '>' => self.redirect(),
            _ => {
                let w = self.read_word();
                // `2>` / `2>>`: a digit-only unquoted word glued to a redirect.
                if !w.quoted
                    && !w.text.is_empty()
                    && w.text.chars().all(|c| c.is_ascii_digit())
                    && matches!(self.peek(), Some('<' | '>'))
                    && w.split_before.is_empty()
                {
                    return self.redirect();
                }
                Some(Token::Word(w))
            }
        }
    }

    fn redirect(&mut self) -> Option<Token> {
        let mut op = String::new();
        while let Some(c) = self.peek() {
            if matches!(c, '<' | '>' | '&' | '|') && op.len() < 3 {
                // `>|` is clobber; but `> |` never happens in valid shell.
                if c == '|' && !op.ends_with('>') {
                    break;
                }
                op.push(c);
                self.pos += 1;
                if op == "<<<" {
                    break;
                }
            } else {
                break;
            }
        }
        if op == "<<" {
            if self.peek() == Some('-') {
                self.pos += 1;
                op.push('-');
            }
            while matches!(self.peek(), Some(' ' | '\t')) {
                self.pos += 1;
            }
            let delim = self.read_word();
            let strip_tabs = op.ends_with('-');
            // The body starts after the end of the current line.
            let mut saved = self.pos;
            while let Some(c) = self.chars.get(saved) {
                if *c == '\n' {
                    break;
                }
                saved += 1;
            }
            let body = self.take_heredoc_body(saved + 1, &delim.text, strip_tabs);
            let substitutions = if delim.quoted {
                Vec::new()
            } else {
                heredoc_substitutions(&body)
            };
            return Some(Token::Heredoc {
                body,
                substitutions,
            });
        }
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        let target = self.read_word();
        Some(Token::Redirect { op, target })
    }

    /// Cut the heredoc body starting at `start` out of the input so the
    /// lines are not parsed as commands, and return it.
    fn take_heredoc_body(&mut self, start: usize, delim: &str, strip_tabs: bool) -> String {
        if start > self.chars.len() {
            return String::new();
        }
        let rest: String = self.chars[start..].iter().collect();
        let mut body = String::new();
        let mut consumed = 0;
        let mut found = false;
        for line in rest.split_inclusive('\n') {
            consumed += line.chars().count();
            let trimmed = line.trim_end_matches('\n');
            let cmp = if strip_tabs {
                trimmed.trim_start_matches('\t')
            } else {
                trimmed
            };
            if cmp == delim {
                found = true;
                break;
            }
            body.push_str(line);
        }
        if !found {
            consumed = rest.chars().count();
        }
        self.chars.drain(start..start + consumed);
        body
    }

    /// Read until the matching closing bracket, honouring quotes and nesting.
    fn read_balanced(&mut self, close: char) -> String {
        let open = if close == ')' { '(' } else { '{' };
        let mut depth = 1;
        let mut out = String::new();
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '\\' => {
                    out.push(c);
                    if let Some(n) = self.peek() {
                        out.push(n);
                        self.pos += 1;
                    }
                    continue;
                }
                '\'' => {
                    out.push(c);
                    while let Some(n) = self.peek() {
                        self.pos += 1;
                        out.push(n);
                        if n == '\'' {
                            break;
                        }
                    }
                    continue;
                }
                '"' => {
                    out.push(c);
                    while let Some(n) = self.peek() {
                        self.pos += 1;
                        out.push(n);
                        if n == '\\' {
                            if let Some(m) = self.peek() {
                                out.push(m);
                                self.pos += 1;
                            }
                        } else if n == '"' {
                            break;
                        }
                    }
                    continue;
                }
                _ => {}
            }
            if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return out;
                }
            }
            out.push(c);
        }
        out
    }

    fn read_word(&mut self) -> Word {
        let mut w = Word::default();
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                    // `=(`... and `$(` are handled below; a bare `(` ends a word
                    // except in an array assignment, which gates need not see.
                    break;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(n) => {
                            w.text.push(n);
                            w.quoted = true;
                            self.pos += 1;
                        }
                        None => {}
                    }
                }
                '\'' => {
                    self.pos += 1;
                    w.quoted = true;
                    while let Some(n) = self.peek() {
                        self.pos += 1;
                        if n == '\'' {
                            break;
                        }
                        w.text.push(n);
                    }
                }
                '"' => {
                    self.pos += 1;
                    w.quoted = true;
                    self.read_double_quoted(&mut w);
                }
                '`' => {
                    self.pos += 1;
                    let mut inner = String::new();
                    while let Some(n) = self.peek() {
                        self.pos += 1;
                        if n == '\\' {
                            if let Some(m) = self.peek() {
                                inner.push(m);
                                self.pos += 1;
                            }
                        } else if n == '`' {
                            break;
                        } else {
                            inner.push(n);
                        }
                    }
                    w.text.push_str(&format!("$({inner})"));
                    w.substitutions.push(inner);
                }
                '$' => self.read_dollar(&mut w, false),
                '~' if w.text.is_empty() && !w.quoted => {
                    self.pos += 1;
                    let next = self.peek();
                    match (self.home, next) {
                        (
                            Some(h),
                            None | Some('/' | ' ' | '\t' | '\n' | ';' | '&' | '|' | ')' | ':'),
                        ) => w.text.push_str(&h.to_string_lossy()),
                        _ => w.text.push('~'),
                    }
                }
                _ => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
        w
    }

    fn read_double_quoted(&mut self, w: &mut Word) {
        while let Some(n) = self.peek() {
            match n {
                '"' => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some(m @ ('$' | '`' | '"' | '\\')) => {
                            w.text.push(m);
                            self.pos += 1;
                        }
                        Some('\n') => self.pos += 1,
                        _ => w.text.push('\\'),
                    }
                }
                '$' => self.read_dollar(w, true),
                '`' => {
                    self.pos += 1;
                    let mut inner = String::new();
                    while let Some(m) = self.peek() {
                        self.pos += 1;
                        if m == '`' {
                            break;
                        }
                        inner.push(m);
                    }
                    w.text.push_str(&format!("$({inner})"));
                    w.substitutions.push(inner);
                }
                _ => {
                    w.text.push(n);
                    self.pos += 1;
                }
            }
        }
    }

    /// `$'..'`, `$"..."`, `$(...)`, `$((...))`, `${...}`, `$NAME`, `$1`, `$@`.
    fn read_dollar(&mut self, w: &mut Word, in_quotes: bool) {
        self.pos += 1; // the `$`
        match self.peek() {
            Some('\'') if !in_quotes => {
                self.pos += 1;
                w.quoted = true;
                self.read_ansi_c(w);
            }
            Some('"') if !in_quotes => {
                self.pos += 1;
                w.quoted = true;
                self.read_double_quoted(w);
            }
            Some('(') => {
                if self.peek_at(1) == Some('(') {
                    self.pos += 2;
                    let inner = self.read_balanced(')');
                    // Consume the second closing paren.
                    if self.peek() == Some(')') {
                        self.pos += 1;
                    }
                    w.text.push_str(&format!("$(({inner}))"));
                } else {
                    self.pos += 1;
                    let inner = self.read_balanced(')');
                    w.text.push_str(&format!("$({inner})"));
                    w.substitutions.push(inner);
                }
            }
            Some('{') => {
                self.pos += 1;
                let inner = self.read_balanced('}');
                let value = self.expand_braced(&inner);
                self.push_value(w, value, &format!("${{{inner}}}"), in_quotes);
            }
            Some(c) if c.is_ascii_digit() => {
                self.pos += 1;
                let n = c.to_digit(10).unwrap_or(0) as usize;
                let value = if n == 0 {
                    Some("bash".to_string())
                } else {
                    self.argv.get(n - 1).cloned()
                };
                self.push_value(w, value, &format!("${c}"), in_quotes);
            }
            Some('@' | '*') => {
                self.pos += 1;
                if self.argv.is_empty() {
                    return;
                }
                if w.text.is_empty() && !in_quotes {
                    let (last, init) = self.argv.split_last().unwrap_or((&self.argv[0], &[]));
                    w.split_before.extend(init.iter().cloned());
                    w.text.push_str(last);
                    w.quoted = true;
                } else {
                    w.text.push_str(&self.argv.join(" "));
                }
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let mut name = String::new();
                while let Some(n) = self.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                let value = self.lookup(&name);
                self.push_value(w, value, &format!("${name}"), in_quotes);
            }
            _ => w.text.push('$'),
        }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        if name == "IFS" {
            return Some(" ".into());
        }
        self.vars.get(name).cloned()
    }

    /// `${NAME}`, `${NAME:-default}`, `${NAME:off:len}`, `${#NAME}`.
    fn expand_braced(&self, inner: &str) -> Option<String> {
        let name_end = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len());
        let name = &inner[..name_end];
        let rest = &inner[name_end..];
        if name.is_empty() {
            return None;
        }
        let value = if name.chars().all(|c| c.is_ascii_digit()) {
            name.parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|n| self.argv.get(n).cloned())
        } else {
            self.lookup(name)
        };
        if rest.is_empty() {
            return value;
        }
        if let Some(default) = rest.strip_prefix(":-").or_else(|| rest.strip_prefix('-')) {
            return Some(value.unwrap_or_else(|| default.to_string()));
        }
        if let Some(spec) = rest.strip_prefix(':') {
            let value = value?;
            let mut parts = spec.splitn(2, ':');
            let off: usize = parts.next()?.trim().parse().ok()?;
            let chars: Vec<char> = value.chars().collect();
            let len: usize = match parts.next() {
                Some(l) => l.trim().parse().ok()?,
                None => chars.len().saturating_sub(off),
            };
            return Some(chars.iter().skip(off).take(len).collect());
        }
        None
    }

    /// Append an expansion: a known value, or the text as written. An
    /// unquoted value containing spaces (notably `${IFS}`) splits the word.
    fn push_value(&mut self, w: &mut Word, value: Option<String>, written: &str, in_quotes: bool) {
        match value {
            Some(v) if !in_quotes && v.contains([' ', '\t', '\n']) => {
                let mut parts = v.split([' ', '\t', '\n']).peekable();
                let mut first = true;
                while let Some(part) = parts.next() {
                    if !first && !w.text.is_empty() {
                        w.split_before.push(std::mem::take(&mut w.text));
                    }
                    first = false;
                    w.text.push_str(part);
                    if parts.peek().is_none() {
                        break;
                    }
                }
            }
            Some(v) => w.text.push_str(&v),
            None => w.text.push_str(written),
        }
    }

    fn read_ansi_c(&mut self, w: &mut Word) {
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '\'' => return,
                '\\' => {
                    let Some(e) = self.peek() else { return };
                    self.pos += 1;
                    match e {
                        'n' => w.text.push('\n'),
                        't' => w.text.push('\t'),
                        'r' => w.text.push('\r'),
                        'a' => w.text.push('\x07'),
                        'b' => w.text.push('\x08'),
                        'e' | 'E' => w.text.push('\x1b'),
                        'f' => w.text.push('\x0c'),
                        'v' => w.text.push('\x0b'),
                        'x' => {
                            let digits = self.take_digits(2, 16);
                            push_code(w, u32::from_str_radix(&digits, 16).ok(), &digits);
                        }
                        'u' | 'U' => {
                            let digits = self.take_digits(if e == 'u' { 4 } else { 8 }, 16);
                            push_code(w, u32::from_str_radix(&digits, 16).ok(), &digits);
                        }
                        '0'..='7' => {
                            self.pos -= 1;
                            let digits = self.take_digits(3, 8);
                            push_code(w, u32::from_str_radix(&digits, 8).ok(), &digits);
                        }
                        other => w.text.push(other),
                    }
                }
                _ => w.text.push(c),
            }
        }
    }

    fn take_digits(&mut self, max: usize, radix: u32) -> String {
        let mut out = String::new();
        while out.len() < max {
            match self.peek() {
                Some(c) if c.is_digit(radix) => {
                    out.push(c);
                    self.pos += 1;
                }
                _ => break,
            }
        }
        out
    }
}

fn push_code(w: &mut Word, code: Option<u32>, digits: &str) {
    match code.and_then(char::from_u32) {
        Some(ch) => w.text.push(ch),
        None => w.text.push_str(digits),
    }
}

fn split_assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    let valid = !name.is_empty()
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then(|| (name.to_string(), value.to_string()))
}

/// Strip `sudo`, `doas`, `env`, `command`, `builtin`, `exec`, `nice`,
/// `nohup`, `timeout`, `busybox`, ... with their own options.
fn strip_wrappers(
    mut words: Vec<String>,
    assignments: &mut Vec<(String, String)>,
) -> (Vec<String>, Vec<String>) {
    let mut wrappers = Vec::new();
    while let Some(first) = words.first() {
        let name = basename(first).to_string();
        // Options of each wrapper that take a value.
        let valued: &[&str] = match name.as_str() {
            "sudo" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"],
            "doas" => &["-u", "-C"],
            "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
            "nice" => &["-n", "--adjustment"],
            "ionice" => &["-c", "-n", "-p", "-P", "-u"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "stdbuf" => &["-i", "-o", "-e"],
            "chrt" | "taskset" => &[],
            "command" | "builtin" | "exec" | "nohup" | "busybox" | "setsid" | "time"
            | "unbuffer" | "caffeinate" | "strace" | "ltrace" | "fakeroot" | "torsocks"
            | "proxychains" | "proxychains4" | "su" | "runuser" | "xvfb-run" | "flock" => &[],
            _ => break,
        };
        if name == "command" && words.get(1).is_some_and(|w| w == "-v" || w == "-V") {
            break;
        }
        if name == "su" || name == "runuser" {
            // `su -c CMD [user]`: turn into `sh -c CMD`.
            if let Some(i) = words.iter().position(|w| w == "-c" || w == "--command") {
                if let Some(cmd) = words.get(i + 1).cloned() {
                    wrappers.push(name);
                    return (wrappers, vec!["sh".into(), "-c".into(), cmd]);
                }
            }
            break;
        }
        if name == "flock" {
            // `flock FILE CMD...`
            wrappers.push(name);
            words.drain(..2.min(words.len()));
            continue;
        }
        wrappers.push(name.clone());
        words.remove(0);
        // Options of the wrapper.
        while let Some(w) = words.first() {
            if w == "--" {
                words.remove(0);
                break;
            }
            if name == "env" {
                if let Some((k, v)) = split_assignment(w) {
                    assignments.push((k, v));
                    words.remove(0);
                    continue;
                }
            }
            if w.starts_with('-') && w.len() > 1 {
                let takes_value = valued.contains(&w.as_str());
                words.remove(0);
                if takes_value && !words.is_empty() {
                    words.remove(0);
                }
                continue;
            }
            break;
        }
        if name == "timeout" && !words.is_empty() {
            words.remove(0); // the duration
        }
        if (name == "chrt" || name == "taskset")
            && words
                .first()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_hexdigit() || c == 'x'))
        {
            // `chrt 10 cmd`, `taskset 0x1 cmd`: a leading number or mask.
            words.remove(0);
        }
        while let Some(first) = words.first() {
            match split_assignment(first) {
                Some(kv) => {
                    assignments.push(kv);
                    words.remove(0);
                }
                None => break,
            }
        }
    }
    if words.is_empty() {
        // `env` or `sudo` alone: the wrapper is the program.
        if let Some(last) = wrappers.pop() {
            words.push(last);
        }
    }
    (wrappers, words)
}

/// The command substitutions in a heredoc body whose delimiter is unquoted:
/// `cat > notes.md <<EOF` … `$(git reset --hard)` … `EOF` runs the reset
/// while building the note, so the reset is a command of the script.
fn heredoc_substitutions(body: &str) -> Vec<String> {
    let empty = BTreeMap::new();
    let mut p = Parser::new(body, None, &empty, &[]);
    let mut w = Word::default();
    while let Some(c) = p.peek() {
        match c {
            '\\' => p.pos += 2,
            '$' => p.read_dollar(&mut w, true),
            '`' => {
                p.pos += 1;
                let mut inner = String::new();
                while let Some(n) = p.peek() {
                    p.pos += 1;
                    if n == '\\' {
                        if let Some(m) = p.peek() {
                            inner.push(m);
                            p.pos += 1;
                        }
                    } else if n == '`' {
                        break;
                    } else {
                        inner.push(n);
                    }
                }
                w.substitutions.push(inner);
            }
            _ => p.pos += 1,
        }
    }
    w.substitutions
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
