//! Redirections and here-documents: `> f`, `2>&1`, `<<<word`, `<<EOF`
//! bodies and the substitutions an unquoted body runs, and the places where
//! tree-sitter-bash 0.25 hangs a redirection on the wrong node (a whole
//! list or pipeline, a digit word glued to the operator). Apart from the
//! statement walk because each quirk of the grammar is handled here once.

use tree_sitter::Node;

use super::words::strip_delims;
use super::{text, Builder, Gathered, Position, Word};
use crate::gates::shell::commands::{Redirect, Script};

impl Builder<'_> {
    /// `cmd > f`, `{ ...; } > f`, `while ...; done < f`, `cat <<EOF | sh`.
    pub(super) fn redirected(
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
    pub(super) fn redirect<'t>(
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
                if op == "<" && follows_split_herestring(src, node) {
                    op = "<<<".into();
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
                    .map_or(node.end_byte(), tree_sitter::Node::start_byte)
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
}

/// Whether a `<` redirection is the tail of a here-string the grammar
/// split: after another redirection tree-sitter-bash 0.25 reads
/// `cmd >out <<<word` as `>out`, an ERROR `<<` and `<word`. Bash feeds
/// `word` on standard input; it reads no file named `word`.
fn follows_split_herestring(src: &[u8], node: Node) -> bool {
    node.prev_sibling().is_some_and(|before| {
        before.is_error() && before.end_byte() == node.start_byte() && text(src, before) == "<<"
    })
}

/// Where the first redirection of a `redirected_statement` starts.
pub(super) fn redirect_nodes_start(node: Node) -> Option<usize> {
    let mut cursor = node.walk();
    let first = node.children_by_field_name("redirect", &mut cursor).next();
    first.map(|r| r.start_byte())
}

pub(super) fn is_redirect_kind(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "heredoc_redirect" | "herestring_redirect"
    )
}

/// A file descriptor number (`2` in `2>&1`).
pub(super) fn is_fd_number(t: &str) -> bool {
    !t.is_empty() && t.len() <= 4 && t.chars().all(|c| c.is_ascii_digit())
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
