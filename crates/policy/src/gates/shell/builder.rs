//! The tree walk behind [`super::commands`]: tree-sitter-bash nodes turned
//! into [`Command`]s.
//!
//! This file walks statements (lists, pipelines, compound commands,
//! declarations, tests, loops, `case`) and records each simple command:
//! leading assignments, wrappers stripped, `cd` and `export` remembered for
//! the words that follow. The rest is split by concept:
//!
//! - [`words`]: one word's value — quotes, escapes, known variables.
//! - [`redirects`]: redirections, here-strings, here-documents and their
//!   bodies, and where the grammar hangs a redirection on the wrong node.
//! - [`wrappers`]: `sudo`, `env`, `nice`, `timeout`, ... stripped to the
//!   program they run.
//! - [`nested`]: scripts inside a command (`$(...)`, `bash -c`, `eval`,
//!   `xargs`, `find -exec`, heredocs fed to a shell, ...), walked again to a
//!   bounded depth ([`MAX_DEPTH`]) and number of commands
//!   ([`MAX_COMMANDS`]).
//!
//! [`MAX_DEPTH`]: super::commands::MAX_DEPTH
//! [`MAX_COMMANDS`]: super::commands::MAX_COMMANDS

mod nested;
mod redirects;
mod words;
mod wrappers;

use std::collections::BTreeMap;
use std::path::Path;

use tree_sitter::Node;

use super::commands::{basename, Command, Origin, Redirect, Script};
use super::syntax::{parse_tree, MAX_SCRIPT_BYTES};
use redirects::{is_fd_number, is_redirect_kind};
use wrappers::{split_assignment, strip_wrappers};

/// A word after evaluation.
#[derive(Default)]
struct Word {
    text: String,
    /// Whether any part was quoted (a quoted empty word still counts).
    quoted: bool,
    /// Scripts inside `$(...)`, backquotes and `<(...)`, as written.
    substitutions: Vec<String>,
    /// Extra words produced by `$@` or `${IFS}` splitting, pushed before
    /// this one.
    split_before: Vec<String>,
}

/// Where the commands of a statement sit in a pipeline.
#[derive(Clone, Copy)]
enum Position {
    /// Each command starts a pipeline of its own.
    Own,
    /// Every command directly in this statement is stage `.1` of pipeline
    /// `.0` (`{ a; b; } | c`: `a` and `b` both feed `c`).
    Stage(usize, usize),
}

/// A simple command gathered from the tree, before wrappers are stripped.
#[derive(Default)]
struct Gathered {
    words: Vec<Word>,
    redirects: Vec<(String, Word)>,
    heredoc: Option<String>,
}

/// Walks one script's tree; nested scripts get a builder of their own
/// that inherits the variables and the directory.
pub(crate) struct Builder<'a> {
    home: Option<&'a Path>,
    vars: BTreeMap<String, String>,
    argv: &'a [String],
    origin: Origin,
    /// Substitutions an enclosing command already followed (for `eval`).
    already_seen: Vec<String>,
    /// The directory of the latest `cd`, as written.
    cwd: Option<String>,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(
        home: Option<&'a Path>,
        env: &BTreeMap<String, String>,
        argv: &'a [String],
        origin: Origin,
    ) -> Self {
        let mut vars = env.clone();
        if let Some(h) = home {
            vars.insert("HOME".into(), h.to_string_lossy().into_owned());
        }
        Builder {
            home,
            vars,
            argv,
            origin,
            already_seen: Vec::new(),
            cwd: None,
        }
    }

    /// Parse `text` and append its commands to `out`, nested under
    /// `parent`. Text the parser cannot take (too long, or no tree) marks
    /// the script truncated: the gates must not trust they saw everything.
    pub(crate) fn run(
        &mut self,
        out: &mut Script,
        text: &str,
        parent: Option<usize>,
        depth: usize,
    ) {
        if text.len() > MAX_SCRIPT_BYTES {
            out.truncated = true;
            return;
        }
        let Some(tree) = parse_tree(text) else {
            out.truncated = true;
            return;
        };
        let src = text.as_bytes();
        self.statement(out, src, tree.root_node(), parent, depth, Position::Own);
    }

    /// Walk a statement (or any node holding statements) in source order.
    fn statement(
        &mut self,
        out: &mut Script,
        src: &[u8],
        node: Node,
        parent: Option<usize>,
        depth: usize,
        pos: Position,
    ) {
        match node.kind() {
            "comment" | "heredoc_body" | "heredoc_start" | "heredoc_end" => {}
            "command" => {
                let g = self.gather_command(src, node, None);
                self.emit(out, g, pos, parent, depth, false);
            }
            "declaration_command" | "unset_command" | "test_command" => {
                let g = Gathered {
                    words: self.leaf_words(src, node),
                    ..Gathered::default()
                };
                self.emit(out, g, pos, parent, depth, false);
            }
            "variable_assignment" | "variable_assignments" => {
                let mut g = Gathered::default();
                self.assignments(src, node, &mut g.words);
                self.emit(out, g, pos, parent, depth, false);
            }
            "pipeline" => {
                let pipeline = out.new_pipeline();
                let mut stage = 0;
                self.pipeline_stages(out, src, node, pipeline, &mut stage, parent, depth);
            }
            "redirected_statement" => self.redirected(out, src, node, parent, depth, pos),
            "for_statement" | "select_statement" => {
                // The loop's values are expanded once, before the body.
                let mut cursor = node.walk();
                let values: Vec<Node> = node.children_by_field_name("value", &mut cursor).collect();
                let mut words = Vec::new();
                for v in values {
                    let w = self.word(src, v, false);
                    if !w.substitutions.is_empty() {
                        words.push(Word {
                            substitutions: w.substitutions,
                            ..Word::default()
                        });
                    }
                }
                if !words.is_empty() {
                    let g = Gathered {
                        words,
                        ..Gathered::default()
                    };
                    self.emit(out, g, pos, parent, depth, false);
                }
                if let Some(body) = node.child_by_field_name("body") {
                    self.statement(out, src, body, parent, depth, pos);
                }
            }
            "case_statement" => {
                if let Some(value) = node.child_by_field_name("value") {
                    let w = self.word(src, value, false);
                    if !w.substitutions.is_empty() {
                        let g = Gathered {
                            words: vec![Word {
                                substitutions: w.substitutions,
                                ..Word::default()
                            }],
                            ..Gathered::default()
                        };
                        self.emit(out, g, pos, parent, depth, false);
                    }
                }
                let mut cursor = node.walk();
                let items: Vec<Node> = node
                    .named_children(&mut cursor)
                    .filter(|c| c.kind() == "case_item")
                    .collect();
                for item in items {
                    // The patterns (`value` fields) are not commands.
                    let mut cursor = item.walk();
                    let mut index = 0u32;
                    let children: Vec<(Node, Option<&str>)> = item
                        .children(&mut cursor)
                        .map(|c| {
                            let field = item.field_name_for_child(index);
                            index += 1;
                            (c, field)
                        })
                        .collect();
                    for (child, field) in children {
                        if child.is_named() && field != Some("value") {
                            self.statement(out, src, child, parent, depth, pos);
                        }
                    }
                }
            }
            "c_style_for_statement" => {
                if let Some(body) = node.child_by_field_name("body") {
                    self.statement(out, src, body, parent, depth, pos);
                }
            }
            "function_definition" => {
                if let Some(body) = node.child_by_field_name("body") {
                    self.statement(out, src, body, parent, depth, pos);
                }
            }
            _ => {
                // Containers: program, list, subshell, compound_statement,
                // if/while/until, do_group, negated_command, ERROR, ... —
                // and, in an ERROR node, loose words the parser could not
                // place still make a command, so nothing goes unseen.
                let mut cursor = node.walk();
                let children: Vec<Node> = node.named_children(&mut cursor).collect();
                let mut loose: Vec<Node> = Vec::new();
                for child in children {
                    if node.is_error()
                        && (is_word_kind(child.kind()) || child.kind() == "command_name")
                    {
                        loose.push(child);
                        continue;
                    }
                    if !loose.is_empty() {
                        self.loose_command(
                            out,
                            src,
                            &std::mem::take(&mut loose),
                            pos,
                            parent,
                            depth,
                        );
                    }
                    let first = out.commands.len();
                    self.statement(out, src, child, parent, depth, pos);
                    if child.next_sibling().is_some_and(|s| s.kind() == "&") {
                        // `cmd &`: the statement's last command runs in the
                        // background.
                        if let Some(last) = out.commands[first..]
                            .iter_mut()
                            .rev()
                            .find(|c| c.parent == parent)
                        {
                            last.background = true;
                        }
                    }
                }
                if !loose.is_empty() {
                    self.loose_command(out, src, &loose, pos, parent, depth);
                }
            }
        }
    }

    /// The stages of a pipeline, flattened: tree-sitter-bash 0.25 reads
    /// `a | b 2>&1 | c` as the pipeline `a | b` redirected, then piped to
    /// `c`; bash runs three stages, the redirection on `b`.
    #[allow(clippy::too_many_arguments)]
    fn pipeline_stages(
        &mut self,
        out: &mut Script,
        src: &[u8],
        node: Node,
        pipeline: usize,
        stage: &mut usize,
        parent: Option<usize>,
        depth: usize,
    ) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.named_children(&mut cursor).collect();
        for child in children {
            if child.kind() == "comment" {
                continue;
            }
            if child.kind() == "pipeline" {
                self.pipeline_stages(out, src, child, pipeline, stage, parent, depth);
                continue;
            }
            let inner_pipeline = child.kind() == "redirected_statement"
                && child
                    .child_by_field_name("body")
                    .is_some_and(|b| b.kind() == "pipeline");
            let mut cursor = child.walk();
            let only_files = child
                .children_by_field_name("redirect", &mut cursor)
                .all(|r| r.kind() == "file_redirect");
            if inner_pipeline && only_files {
                if let Some(body) = child.child_by_field_name("body") {
                    self.pipeline_stages(out, src, body, pipeline, stage, parent, depth);
                }
                let mut extra = Gathered::default();
                let mut ignored = Vec::new();
                let mut cursor = child.walk();
                let redirects: Vec<Node> = child
                    .children_by_field_name("redirect", &mut cursor)
                    .collect();
                for r in redirects {
                    self.redirect(src, r, &mut extra, &mut ignored);
                }
                let last = out
                    .commands
                    .iter()
                    .rposition(|c| c.parent == parent && c.pipeline == pipeline);
                match last {
                    Some(i) if extra.words.is_empty() => {
                        for (op, target) in extra.redirects {
                            out.commands[i].redirects.push(Redirect {
                                op,
                                target: target.text,
                            });
                        }
                    }
                    _ => {
                        self.emit(
                            out,
                            extra,
                            Position::Stage(pipeline, *stage - 1),
                            parent,
                            depth,
                            false,
                        );
                    }
                }
                continue;
            }
            self.statement(
                out,
                src,
                child,
                parent,
                depth,
                Position::Stage(pipeline, *stage),
            );
            *stage += 1;
        }
    }

    fn loose_command(
        &mut self,
        out: &mut Script,
        src: &[u8],
        nodes: &[Node],
        pos: Position,
        parent: Option<usize>,
        depth: usize,
    ) {
        let words = nodes.iter().map(|n| self.word(src, *n, false)).collect();
        let g = Gathered {
            words,
            ..Gathered::default()
        };
        self.emit(out, g, pos, parent, depth, false);
    }

    /// The words and redirections of a `command` node, in source order.
    /// `redirect_at` is where the redirections of an enclosing
    /// `redirected_statement` start, if any.
    fn gather_command(&mut self, src: &[u8], node: Node, redirect_at: Option<usize>) -> Gathered {
        let mut g = Gathered::default();
        let mut ignored = Vec::new();
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for (i, child) in children.iter().enumerate() {
            let child = *child;
            let next = children.get(i + 1);
            // `0<&196`, `cmd 2>&1` read as a word `0` and a redirection: a
            // digit word glued to a redirection is its descriptor.
            let glued_to_redirect = match next {
                Some(n) => is_redirect_kind(n.kind()) && n.start_byte() == child.end_byte(),
                None => redirect_at == Some(child.end_byte()),
            };
            if glued_to_redirect && is_fd_number(text(src, child).trim()) {
                continue;
            }
            match child.kind() {
                "variable_assignment" => self.assignments(src, child, &mut g.words),
                "file_redirect" | "herestring_redirect" | "heredoc_redirect" => {
                    self.redirect(src, child, &mut g, &mut ignored)
                }
                "command_name" => {
                    let mut cursor = child.walk();
                    let inner: Vec<Node> = child.named_children(&mut cursor).collect();
                    let mut w = Word::default();
                    for part in inner {
                        self.word_into(src, part, &mut w, false);
                    }
                    if child.named_child_count() == 0 {
                        w.text.push_str(text(src, child));
                    }
                    g.words.push(w);
                }
                "comment" => {}
                // `$"text"` (a translated string) comes out as `$` and a
                // string: the `$` is not part of the word.
                "$" if next.is_some_and(|n| {
                    n.kind() == "string" && n.start_byte() == child.end_byte()
                }) => {}
                _ if child.is_named() => g.words.push(self.word(src, child, false)),
                // An anonymous token in argument position (`-` in
                // `python3 - <<EOF`) is a word as written.
                _ => g.words.push(Word {
                    text: text(src, child).to_string(),
                    ..Word::default()
                }),
            }
        }
        // tree-sitter-bash 0.25 drops a lone `-` before a heredoc
        // (`python3 - <<EOF`) from the tree: text between the command and
        // its redirections is kept as written.
        if let Some(at) = redirect_at.filter(|at| *at > node.end_byte()) {
            let gap = String::from_utf8_lossy(&src[node.end_byte()..at]).into_owned();
            for token in gap.split_whitespace() {
                g.words.push(Word {
                    text: token.to_string(),
                    ..Word::default()
                });
            }
        }
        g
    }

    /// `NAME=value` words (one node, or a `variable_assignments` list).
    fn assignments(&mut self, src: &[u8], node: Node, words: &mut Vec<Word>) {
        if node.kind() == "variable_assignments" {
            let mut cursor = node.walk();
            let children: Vec<Node> = node.named_children(&mut cursor).collect();
            for c in children {
                self.assignments(src, c, words);
            }
            return;
        }
        let mut w = Word::default();
        let Some(name) = node.child_by_field_name("name") else {
            words.push(self.word(src, node, false));
            return;
        };
        w.text.push_str(text(src, name));
        // `=` or `+=`, as written.
        let value = node.child_by_field_name("value");
        let op_end = value.map_or(node.end_byte(), |v| v.start_byte());
        w.text
            .push_str(&String::from_utf8_lossy(&src[name.end_byte()..op_end]));
        if let Some(v) = value {
            self.word_into(src, v, &mut w, false);
        }
        words.push(w);
    }

    /// The words of a builtin the grammar gives a node of its own
    /// (`export A=1`, `unset X`, `[ -d x ]`): every token in order.
    fn leaf_words(&mut self, src: &[u8], node: Node) -> Vec<Word> {
        let mut out = Vec::new();
        self.collect_leaf_words(src, node, &mut out);
        out
    }

    fn collect_leaf_words(&mut self, src: &[u8], node: Node, out: &mut Vec<Word>) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "variable_assignment" => self.assignments(src, child, out),
                k if is_word_kind(k) || k == "variable_name" || k == "test_operator" => {
                    out.push(self.word(src, child, false))
                }
                _ if child.child_count() == 0 => out.push(Word {
                    text: text(src, child).to_string(),
                    ..Word::default()
                }),
                _ => self.collect_leaf_words(src, child, out),
            }
        }
    }

    /// Turn gathered words into a command (stripping wrappers), record it,
    /// and recurse into whatever it nests. Returns whether a command was
    /// recorded.
    fn emit(
        &mut self,
        out: &mut Script,
        gathered: Gathered,
        pos: Position,
        parent: Option<usize>,
        depth: usize,
        background: bool,
    ) -> bool {
        let Gathered {
            words,
            redirects,
            heredoc,
        } = gathered;
        let (pipeline, stage) = match pos {
            Position::Own => (out.new_pipeline(), 0),
            Position::Stage(p, s) => (p, s),
        };
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
            if matches!(
                program.as_str(),
                "export" | "declare" | "typeset" | "local" | "readonly"
            ) {
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
                stdin_text: heredoc,
                background,
                cwd: self.cwd.clone(),
            });
            if matches!(out.commands[index].program.as_str(), "cd" | "pushd") {
                let target = out.commands[index]
                    .operands()
                    .first()
                    .map(std::string::ToString::to_string)
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
        self.follow_nested(out, index, substitutions, depth);
        true
    }
}

/// Node kinds that stand for one shell word.
fn is_word_kind(kind: &str) -> bool {
    matches!(
        kind,
        "word"
            | "number"
            | "string"
            | "raw_string"
            | "ansi_c_string"
            | "translated_string"
            | "concatenation"
            | "simple_expansion"
            | "expansion"
            | "command_substitution"
            | "process_substitution"
            | "arithmetic_expansion"
            | "brace_expression"
            | "regex"
            | "extglob_pattern"
    )
}

fn text<'s>(src: &'s [u8], node: Node) -> &'s str {
    node.utf8_text(src).unwrap_or("")
}
