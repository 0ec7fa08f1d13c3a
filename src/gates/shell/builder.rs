//! The tree walk behind [`super::commands`]: tree-sitter-bash nodes turned
//! into [`Command`]s.
//!
//! Statements come from the tree (lists, pipelines, compound commands,
//! redirected statements, here-documents, declarations, tests); each word
//! is evaluated from its nodes — quotes removed, escapes decoded (`\x`,
//! `"..."`, `$'...'`), known variables expanded (`$HOME`, `${X:-d}`,
//! `$1`, `$@`, `${IFS}`), unknown ones kept as written. What a command
//! nests — `$(...)`, backquotes, `<(...)`, `bash -c STRING`, `eval`,
//! `xargs`, `find -exec`, `trap`, `watch`, a heredoc or `echo ... |` fed to
//! a shell, the substitutions of an unquoted heredoc body, shell strings in
//! interpreter one-liners — is parsed again as a script of its own, to a
//! bounded depth ([`MAX_DEPTH`]) and a bounded number of commands
//! ([`MAX_COMMANDS`]); past either, the script is marked truncated.

use std::collections::BTreeMap;
use std::path::Path;

use tree_sitter::Node;

use super::commands::{
    basename, is_shell, Command, Origin, Redirect, Script, MAX_COMMANDS, MAX_DEPTH,
};
use super::embedded::{code_shell_strings, python_shell_strings, shell_quote};
use super::syntax::{parse_tree, MAX_SCRIPT_BYTES};

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

    /// `cmd > f`, `{ ...; } > f`, `while ...; done < f`, `cat <<EOF | sh`.
    fn redirected(
        &mut self,
        out: &mut Script,
        src: &[u8],
        node: Node,
        parent: Option<usize>,
        depth: usize,
        pos: Position,
    ) {
        let body = node.child_by_field_name("body");
        let mut cursor = node.walk();
        let redirect_nodes: Vec<Node> = node
            .children_by_field_name("redirect", &mut cursor)
            .collect();
        let mut extra = Gathered::default();
        // What a heredoc's start line continues with: `| sh`, `&& x`, `> f`.
        let mut continuation: Vec<Node> = Vec::new();
        for r in redirect_nodes {
            self.redirect(src, r, &mut extra, &mut continuation);
        }
        // `cat <<EOF | sh`: the heredoc's command is the first stage of the
        // pipeline its start line continues with.
        let piped = continuation
            .iter()
            .find(|c| c.kind() == "pipeline")
            .copied();
        let body_pos = match (piped, pos) {
            (Some(_), Position::Own) => Position::Stage(out.new_pipeline(), 0),
            _ => pos,
        };
        match body {
            Some(b) if b.kind() == "command" => {
                let redirect_at = redirect_nodes_start(node);
                let mut g = self.gather_command(src, b, redirect_at);
                g.words.append(&mut extra.words);
                g.redirects.append(&mut extra.redirects);
                if extra.heredoc.is_some() {
                    g.heredoc = extra.heredoc.take();
                }
                self.emit(out, g, body_pos, parent, depth, false);
            }
            Some(b) if matches!(b.kind(), "list" | "pipeline") && extra.heredoc.is_none() => {
                // tree-sitter-bash 0.25 hangs `a && b > f` and `a | b > f`
                // on the whole list; bash binds a redirection to the
                // simple command before it, `b`.
                let first = out.commands.len();
                self.statement(out, src, b, parent, depth, body_pos);
                let last = out.commands[first..]
                    .iter()
                    .rposition(|c| c.parent == parent)
                    .map(|i| first + i);
                let has_substitutions = extra
                    .redirects
                    .iter()
                    .any(|(_, t)| !t.substitutions.is_empty());
                match last {
                    Some(i) if extra.words.is_empty() && !has_substitutions => {
                        for (op, target) in extra.redirects {
                            out.commands[i].redirects.push(Redirect {
                                op,
                                target: target.text,
                            });
                        }
                    }
                    _ => {
                        self.emit(out, extra, body_pos, parent, depth, false);
                    }
                }
            }
            Some(b) => {
                self.statement(out, src, b, parent, depth, body_pos);
                // The redirection of a compound statement: a command with
                // no program that carries it (`{ ...; } > ~/.bashrc`).
                if !extra.redirects.is_empty() || !extra.words.is_empty() || extra.heredoc.is_some()
                {
                    self.emit(out, extra, body_pos, parent, depth, false);
                }
            }
            None => {
                self.emit(out, extra, body_pos, parent, depth, false);
            }
        }
        for c in continuation {
            if c.kind() == "pipeline" {
                let Position::Stage(pipeline, first) = body_pos else {
                    self.statement(out, src, c, parent, depth, pos);
                    continue;
                };
                let mut stage = first + 1;
                self.pipeline_stages(out, src, c, pipeline, &mut stage, parent, depth);
            } else {
                self.statement(out, src, c, parent, depth, pos);
            }
        }
    }

    /// One redirection node into `g`; statements a heredoc's start line
    /// continues with go to `continuation`.
    fn redirect<'t>(
        &mut self,
        src: &[u8],
        node: Node<'t>,
        g: &mut Gathered,
        continuation: &mut Vec<Node<'t>>,
    ) {
        match node.kind() {
            "file_redirect" => {
                let mut op = String::new();
                let mut target: Option<Word> = None;
                let mut cursor = node.walk();
                let children: Vec<Node> = node.children(&mut cursor).collect();
                let next_redirect_at = node
                    .next_named_sibling()
                    .filter(|n| is_redirect_kind(n.kind()))
                    .map(|n| n.start_byte());
                for child in children {
                    if child.kind() == "file_descriptor" {
                        continue;
                    }
                    let t = text(src, child);
                    let operator_error =
                        child.is_error() && !t.is_empty() && t.chars().all(|c| "<>&|".contains(c));
                    if !child.is_named() || operator_error {
                        // `3<>f` comes out as `<`, ERROR `>`: one operator.
                        op.push_str(t);
                    } else if target.is_some()
                        && is_fd_number(t)
                        && next_redirect_at == Some(child.end_byte())
                    {
                        // `>& f 0>&1`: the grammar hands `0` to this
                        // redirection; it is the next one's descriptor.
                    } else if target.is_none() {
                        target = Some(self.word(src, child, false));
                    } else {
                        // `> a b`: the extra words are arguments.
                        g.words.push(self.word(src, child, false));
                    }
                }
                g.redirects.push((op, target.unwrap_or_default()));
            }
            "herestring_redirect" => {
                let mut cursor = node.walk();
                let target = node
                    .named_children(&mut cursor)
                    .next()
                    .map(|n| self.word(src, n, false))
                    .unwrap_or_default();
                g.redirects.push(("<<<".into(), target));
            }
            "heredoc_redirect" => {
                let mut quoted = false;
                let mut substitutions = Vec::new();
                let mut cursor = node.walk();
                let children: Vec<Node> = node.children(&mut cursor).collect();
                // The body is the text between the end of the start line and
                // the delimiter line, whatever the grammar made of it.
                let line_end = src[node.start_byte()..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(src.len(), |i| node.start_byte() + i + 1);
                let body_end = children
                    .iter()
                    .find(|c| c.kind() == "heredoc_end")
                    .map_or(node.end_byte(), |c| c.start_byte())
                    .max(line_end);
                let body = String::from_utf8_lossy(src.get(line_end..body_end).unwrap_or(&[]))
                    .into_owned();
                for child in children {
                    if child.start_byte() >= line_end {
                        // Body text (or what the grammar misread of it).
                        if child.kind() == "heredoc_body" && !quoted {
                            heredoc_substitutions(src, child, &mut substitutions);
                        }
                        continue;
                    }
                    match child.kind() {
                        "heredoc_start" => {
                            quoted = text(src, child).contains(['\'', '"', '\\']);
                        }
                        "file_redirect" | "herestring_redirect" => {
                            self.redirect(src, child, g, continuation)
                        }
                        _ if child.is_named() => continuation.push(child),
                        _ => {}
                    }
                }
                g.heredoc = Some(body);
                // A word with no text: it only carries the substitutions the
                // shell runs while it builds the body, so they nest under
                // the command that owns the heredoc.
                g.words.push(Word {
                    substitutions,
                    ..Word::default()
                });
            }
            _ => continuation.push(node),
        }
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

    /// Evaluate one word node.
    fn word(&mut self, src: &[u8], node: Node, in_quotes: bool) -> Word {
        let mut w = Word::default();
        self.word_into(src, node, &mut w, in_quotes);
        w
    }

    /// Append the value of `node` to `w`.
    fn word_into(&mut self, src: &[u8], node: Node, w: &mut Word, in_quotes: bool) {
        let mut written = text(src, node);
        if in_quotes && node.kind() != "string_content" {
            // Inside double quotes tree-sitter-bash 0.25 can start an
            // expansion's span at the blank before its `$`: that blank is
            // literal text of the string.
            let trimmed = written.trim_start();
            w.text.push_str(&written[..written.len() - trimmed.len()]);
            written = trimmed;
        }
        match node.kind() {
            "word" | "number" => {
                let mut t = written;
                if !in_quotes && w.text.is_empty() && !w.quoted && t.starts_with('~') {
                    let after = t[1..].chars().next();
                    if let (Some(h), None | Some('/' | ':')) = (self.home, after) {
                        w.text.push_str(&h.to_string_lossy());
                        t = &t[1..];
                    }
                }
                unescape_unquoted(t, w);
            }
            "raw_string" => {
                w.quoted = true;
                w.text.push_str(strip_delims(written, 1, 1));
            }
            "ansi_c_string" => {
                w.quoted = true;
                decode_ansi_c(strip_delims(written, 2, 1), &mut w.text);
            }
            "translated_string" => {
                w.quoted = true;
                let mut cursor = node.walk();
                let inner: Vec<Node> = node.named_children(&mut cursor).collect();
                for part in inner {
                    self.word_into(src, part, w, in_quotes);
                }
            }
            "string" => {
                w.quoted = true;
                // Literal text is whatever lies between the expansions.
                let mut at = node.start_byte() + 1;
                let end = node.end_byte().saturating_sub(1).max(at);
                let mut cursor = node.walk();
                let parts: Vec<Node> = node.named_children(&mut cursor).collect();
                for part in parts {
                    if part.kind() == "string_content" {
                        continue;
                    }
                    if part.start_byte() > at {
                        unescape_double_quoted(
                            &String::from_utf8_lossy(&src[at..part.start_byte()]),
                            w,
                        );
                    }
                    self.word_into(src, part, w, true);
                    at = part.end_byte();
                }
                if end > at {
                    unescape_double_quoted(&String::from_utf8_lossy(&src[at..end]), w);
                }
            }
            "concatenation" => {
                let mut at = node.start_byte();
                let mut cursor = node.walk();
                let parts: Vec<Node> = node.children(&mut cursor).collect();
                for part in parts {
                    if part.start_byte() > at {
                        unescape_unquoted(&String::from_utf8_lossy(&src[at..part.start_byte()]), w);
                    }
                    if part.is_named() {
                        self.word_into(src, part, w, in_quotes);
                    } else {
                        unescape_unquoted(text(src, part), w);
                    }
                    at = part.end_byte();
                }
                if node.end_byte() > at {
                    unescape_unquoted(&String::from_utf8_lossy(&src[at..node.end_byte()]), w);
                }
            }
            "simple_expansion" => self.simple_expansion(written, w, in_quotes),
            "expansion" => {
                let inner = strip_delims(written, 2, 1);
                let value = self.expand_braced(inner);
                self.push_value(w, value, written, in_quotes);
                // `${X:-$(cmd)}`, `${X:=`cmd`}`: the shell may run the
                // substitution inside; judge it as if it does.
                let mut stack: Vec<Node> = {
                    let mut cursor = node.walk();
                    node.named_children(&mut cursor).collect()
                };
                while let Some(n) = stack.pop() {
                    if matches!(n.kind(), "command_substitution" | "process_substitution") {
                        let mut inner = Word::default();
                        self.word_into(src, n, &mut inner, true);
                        w.substitutions.extend(inner.substitutions);
                    } else {
                        let mut cursor = n.walk();
                        stack.extend(n.named_children(&mut cursor));
                    }
                }
            }
            "command_substitution" => {
                let inner = if let Some(rest) = written.strip_prefix("$(") {
                    rest.strip_suffix(')').unwrap_or(rest).to_string()
                } else {
                    let raw = strip_delims(written, 1, 1);
                    if in_quotes {
                        raw.to_string()
                    } else {
                        // Inside backquotes a backslash quotes the next
                        // character.
                        let mut t = Word::default();
                        unescape_unquoted(raw, &mut t);
                        t.text
                    }
                };
                w.text.push_str(&format!("$({inner})"));
                w.substitutions.push(inner);
            }
            "process_substitution" => {
                // `<(cmd)`: a word whose value is a path.
                w.text.push_str("/dev/fd/63");
                w.substitutions
                    .push(strip_delims(written, 2, 1).to_string());
            }
            _ => w.text.push_str(written),
        }
    }

    /// `$NAME`, `$1`, `$@`, `$*`; anything else (`$?`, `$$`) as written.
    fn simple_expansion(&mut self, written: &str, w: &mut Word, in_quotes: bool) {
        let name = written.strip_prefix('$').unwrap_or(written);
        let mut chars = name.chars();
        match chars.next() {
            Some(c) if c.is_ascii_digit() => {
                let n = c.to_digit(10).unwrap_or(0) as usize;
                let value = if n == 0 {
                    Some("bash".to_string())
                } else {
                    self.argv.get(n - 1).cloned()
                };
                self.push_value(w, value, &format!("${c}"), in_quotes);
                // `$10` is `$1` followed by `0`.
                w.text.push_str(chars.as_str());
            }
            Some('@' | '*') => {
                if self.argv.is_empty() {
                    return;
                }
                if w.text.is_empty() && !in_quotes {
                    if let Some((last, init)) = self.argv.split_last() {
                        w.split_before.extend(init.iter().cloned());
                        w.text.push_str(last);
                        w.quoted = true;
                    }
                } else {
                    w.text.push_str(&self.argv.join(" "));
                }
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let value = self.lookup(name);
                self.push_value(w, value, written, in_quotes);
            }
            _ => w.text.push_str(written),
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

/// Where the first redirection of a `redirected_statement` starts.
fn redirect_nodes_start(node: Node) -> Option<usize> {
    let mut cursor = node.walk();
    let first = node.children_by_field_name("redirect", &mut cursor).next();
    first.map(|r| r.start_byte())
}

fn is_redirect_kind(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "heredoc_redirect" | "herestring_redirect"
    )
}

/// A file descriptor number (`2` in `2>&1`).
fn is_fd_number(t: &str) -> bool {
    !t.is_empty() && t.len() <= 4 && t.chars().all(|c| c.is_ascii_digit())
}

fn text<'s>(src: &'s [u8], node: Node) -> &'s str {
    node.utf8_text(src).unwrap_or("")
}

/// `text` without `head` bytes at the start and `tail` at the end (the
/// quotes or `$(`/`)` around a node), or empty when too short.
fn strip_delims(text: &str, head: usize, tail: usize) -> &str {
    if text.len() < head + tail {
        return "";
    }
    text.get(head..text.len() - tail).unwrap_or("")
}

/// A bare word's characters: a backslash quotes the next character, a
/// backslash-newline disappears.
fn unescape_unquoted(text: &str, w: &mut Word) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') => {}
                Some(n) => {
                    w.text.push(n);
                    w.quoted = true;
                }
                None => {}
            }
        } else {
            w.text.push(c);
        }
    }
}

/// Literal text inside double quotes: only `\$`, `` \` ``, `\"`, `\\` and
/// backslash-newline are escapes.
fn unescape_double_quoted(text: &str, w: &mut Word) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            w.text.push(c);
            continue;
        }
        match chars.peek() {
            Some(&m @ ('$' | '`' | '"' | '\\')) => {
                w.text.push(m);
                chars.next();
            }
            Some('\n') => {
                chars.next();
            }
            _ => w.text.push('\\'),
        }
    }
}

/// The body of `$'...'`: C escapes decoded.
fn decode_ansi_c(body: &str, out: &mut String) {
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    let take_digits = |i: &mut usize, max: usize, radix: u32| -> String {
        let mut digits = String::new();
        while digits.len() < max {
            match chars.get(*i) {
                Some(c) if c.is_digit(radix) => {
                    digits.push(*c);
                    *i += 1;
                }
                _ => break,
            }
        }
        digits
    };
    let push_code =
        |out: &mut String, digits: &str, radix: u32| match u32::from_str_radix(digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(ch) => out.push(ch),
            None => out.push_str(digits),
        };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = chars.get(i) else { return };
        i += 1;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            'x' => {
                let d = take_digits(&mut i, 2, 16);
                push_code(out, &d, 16);
            }
            'u' | 'U' => {
                let d = take_digits(&mut i, if e == 'u' { 4 } else { 8 }, 16);
                push_code(out, &d, 16);
            }
            '0'..='7' => {
                i -= 1;
                let d = take_digits(&mut i, 3, 8);
                push_code(out, &d, 8);
            }
            other => out.push(other),
        }
    }
}

/// The substitutions the shell runs while it builds an unquoted heredoc
/// body: `$(...)` from the tree (also inside `${x:-$(...)}`), and
/// backquotes, which tree-sitter-bash 0.25 leaves as body text — scanned
/// here so `` `rm -rf src` `` in a body is judged like bash runs it.
fn heredoc_substitutions(src: &[u8], body: Node, out: &mut Vec<String>) {
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut at = body.start_byte();
    let mut cursor = body.walk();
    let parts: Vec<Node> = body.named_children(&mut cursor).collect();
    let scan = |from: usize, to: usize, found: &mut Vec<(usize, String)>| {
        if to > from {
            let t = String::from_utf8_lossy(&src[from..to]);
            for (offset, inner) in backquoted(&t) {
                found.push((from + offset, inner));
            }
        }
    };
    for part in parts {
        if part.kind() == "heredoc_content" {
            continue;
        }
        scan(at, part.start_byte(), &mut found);
        let mut stack = vec![part];
        while let Some(node) = stack.pop() {
            if node.kind() == "command_substitution" {
                let t = text(src, node).trim_start();
                let inner = match t.strip_prefix("$(") {
                    Some(rest) => rest.strip_suffix(')').unwrap_or(rest).to_string(),
                    None => strip_delims(t, 1, 1).to_string(),
                };
                found.push((node.start_byte(), inner));
                continue;
            }
            let mut cursor = node.walk();
            stack.extend(node.named_children(&mut cursor));
        }
        at = part.end_byte();
    }
    scan(at, body.end_byte(), &mut found);
    found.sort_by_key(|(at, _)| *at);
    out.extend(found.into_iter().map(|(_, s)| s));
}

/// Backquoted spans in heredoc text (`\` escapes the next character).
fn backquoted(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '`' => {
                let mut inner = String::new();
                while let Some((_, n)) = chars.next() {
                    match n {
                        '\\' => {
                            if let Some((_, m)) = chars.next() {
                                inner.push(m);
                            }
                        }
                        '`' => break,
                        _ => inner.push(n),
                    }
                }
                out.push((at, inner));
            }
            _ => {}
        }
    }
    out
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
