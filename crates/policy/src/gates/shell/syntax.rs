//! What a real parser says about shell text: the constructs the gates cannot
//! reduce to known words.
//!
//! The script is parsed with tree-sitter-bash (the grammar codex-rs uses).
//! We do not try to evaluate the tree; we look for the places where the
//! words a shell would run are only known at run time — brace expansion,
//! globs, variables or substitutions in a program name, `eval`, `IFS`,
//! `source` of a computed or just-written file, a here-document fed to an
//! interpreter, a function that calls itself — and for anything the parser
//! could not read (an `ERROR` node) or a node kind this code does not know.
//! Each becomes an [`Opaque`] finding; the gate turns findings into *ask*,
//! never *allow*. The same tree, walked by [`super::commands`], supplies
//! the literal commands the other gates judge.

use std::cell::RefCell;
use std::collections::VecDeque;

use tree_sitter::{Node, Parser, Tree};

/// The longest script the parser reads; longer text is opaque by size.
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;

/// How deep the walk follows nested nodes before giving up (fails closed).
const MAX_NODE_DEPTH: usize = 200;

/// The construct name of code fed to an interpreter on its standard input.
pub const HEREDOC_TO_INTERPRETER: &str = "a here-document fed to an interpreter";

/// One construct the gates cannot see through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque {
    /// What it is, in words a person reads ("brace expansion").
    pub construct: &'static str,
    /// The text it spans, shortened for reasons.
    pub text: String,
}

/// Programs that take another program as an argument; their first
/// non-option word must be literal too.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nice", "nohup", "timeout", "command", "exec", "xargs", "stdbuf",
    "setsid", "time", "ionice", "chrt", "taskset", "builtin", "unbuffer", "watch", "strace",
    "ltrace", "flock", "chroot", "su", "runuser",
];

/// Interpreters that read a program from standard input.
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "php",
    "lua",
    "Rscript",
    "osascript",
    "tclsh",
    "julia",
    "deno",
    "bun",
];

/// Node kinds of tree-sitter-bash 0.25 this module understands. Anything
/// else (a newer grammar's addition) is opaque.
const KNOWN_KINDS: &[&str] = &[
    "program",
    "comment",
    "command",
    "command_name",
    "word",
    "string",
    "string_content",
    "raw_string",
    "ansi_c_string",
    "translated_string",
    "concatenation",
    "simple_expansion",
    "expansion",
    "command_substitution",
    "process_substitution",
    "arithmetic_expansion",
    "variable_name",
    "special_variable_name",
    "variable_assignment",
    "variable_assignments",
    "subscript",
    "array",
    "number",
    "pipeline",
    "list",
    "subshell",
    "compound_statement",
    "redirected_statement",
    "file_redirect",
    "file_descriptor",
    "heredoc_redirect",
    "heredoc_start",
    "heredoc_body",
    "heredoc_content",
    "heredoc_end",
    "herestring_redirect",
    "negated_command",
    "if_statement",
    "elif_clause",
    "else_clause",
    "while_statement",
    "for_statement",
    "c_style_for_statement",
    "do_group",
    "case_statement",
    "case_item",
    "function_definition",
    "declaration_command",
    "unset_command",
    "test_command",
    "test_operator",
    "binary_expression",
    "unary_expression",
    "ternary_expression",
    "postfix_expression",
    "parenthesized_expression",
    "regex",
    "extglob_pattern",
    "brace_expression",
];

/// How many parsed scripts each thread keeps. The syntax pass and the
/// command builder read the same text (the action's script, and each
/// nested `bash -c` string), and the gates of one action run on one thread:
/// with the tree kept, each text is parsed once per action, not once per
/// pass.
const RECENT_TREES: usize = 8;

/// How much source the kept trees may span together: one script of the
/// largest size read ([`MAX_SCRIPT_BYTES`]) still parses once, while a
/// worker thread never holds more than that much text's trees.
const RECENT_TREES_BYTES: usize = MAX_SCRIPT_BYTES;

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
    static TREES: RefCell<VecDeque<(String, Tree)>> = const { RefCell::new(VecDeque::new()) };
}

#[cfg(test)]
thread_local! {
    static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times this thread ran the tree-sitter parser (tests count
/// parses per action with it).
#[cfg(test)]
pub(crate) fn parses_on_this_thread() -> usize {
    PARSES.with(std::cell::Cell::get)
}

/// The tree of `script`, parsed with this thread's tree-sitter-bash parser
/// (made once per thread), or the tree kept from an earlier parse of the
/// same text ([`RECENT_TREES`], [`RECENT_TREES_BYTES`]). `None` when the grammar cannot be loaded
/// or the parse fails; callers fail closed. The size limit is the caller's
/// to check.
pub(crate) fn parse_tree(script: &str) -> Option<Tree> {
    let kept = TREES.with(|trees| {
        trees
            .borrow()
            .iter()
            .find(|(text, _)| text == script)
            .map(|(_, tree)| tree.clone())
    });
    if kept.is_some() {
        return kept;
    }
    let tree = parse_fresh(script)?;
    TREES.with(|trees| {
        let mut trees = trees.borrow_mut();
        let mut kept_bytes: usize = trees.iter().map(|(text, _)| text.len()).sum();
        while trees.len() >= RECENT_TREES
            || (!trees.is_empty() && kept_bytes + script.len() > RECENT_TREES_BYTES)
        {
            if let Some((text, _)) = trees.pop_back() {
                kept_bytes -= text.len();
            }
        }
        trees.push_front((script.to_string(), tree.clone()));
    });
    Some(tree)
}

fn parse_fresh(script: &str) -> Option<Tree> {
    #[cfg(test)]
    PARSES.with(|p| p.set(p.get() + 1));
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut p = Parser::new();
            if p.set_language(&tree_sitter_bash::LANGUAGE.into()).is_err() {
                return None;
            }
            *slot = Some(p);
        }
        slot.as_mut().and_then(|p| p.parse(script, None))
    })
}

/// Parse `script` and list what cannot be reduced to known words. An empty
/// list means every program name and every `eval`/`source` is literal.
pub fn opaque_constructs(script: &str) -> Vec<Opaque> {
    if script.len() > MAX_SCRIPT_BYTES {
        return vec![Opaque {
            construct: "a script longer than the parser reads",
            text: format!("{} bytes, limit {MAX_SCRIPT_BYTES}", script.len()),
        }];
    }
    let tree = parse_tree(script);
    let Some(tree) = tree else {
        return vec![Opaque {
            construct: "text the shell parser could not read",
            text: shorten(script),
        }];
    };
    let mut walk = Walk {
        src: script.as_bytes(),
        found: Vec::new(),
        written: Vec::new(),
    };
    walk.node(tree.root_node(), 0);
    walk.found
}

struct Walk<'a> {
    src: &'a [u8],
    found: Vec<Opaque>,
    /// Files the script writes by redirection, in order: sourcing one later
    /// runs text this analysis never saw.
    written: Vec<String>,
}

impl Walk<'_> {
    fn text(&self, node: Node) -> &str {
        node.utf8_text(self.src).unwrap_or("")
    }

    fn flag(&mut self, construct: &'static str, node: Node) {
        let text = shorten(self.text(node));
        if !self
            .found
            .iter()
            .any(|o| o.construct == construct && o.text == text)
        {
            self.found.push(Opaque { construct, text });
        }
    }

    fn node(&mut self, node: Node, depth: usize) {
        if depth > MAX_NODE_DEPTH {
            self.flag("nesting deeper than the parser follows", node);
            return;
        }
        if node.is_error() {
            if has_brace_expansion(self.text(node)) {
                self.flag("brace expansion", node);
            } else {
                self.flag("a parse error", node);
            }
        } else if node.is_missing() {
            self.flag("an incomplete construct (something is missing)", node);
        } else if node.is_named() && !KNOWN_KINDS.contains(&node.kind()) {
            self.flag("a construct the analyser does not know", node);
        }
        match node.kind() {
            "command" => self.command(node),
            "brace_expression" => self.flag("brace expansion", node),
            "word" | "concatenation" if has_brace_expansion(self.text(node)) => {
                self.flag("brace expansion", node)
            }
            "variable_assignment" => {
                let name = node
                    .child_by_field_name("name")
                    .map(|n| self.text(n).to_string());
                // `IFS= read -r line` scopes IFS to one `read`, which only
                // splits the line it reads: nothing is run from it.
                let for_read = node
                    .parent()
                    .filter(|p| p.kind() == "command")
                    .and_then(|p| p.child_by_field_name("name"))
                    .is_some_and(|n| self.text(n) == "read");
                if name.as_deref() == Some("IFS") && !for_read {
                    self.flag("an `IFS` assignment (it changes how words split)", node);
                }
            }
            "function_definition" => self.function(node),
            "redirected_statement" => self.redirected(node),
            "file_redirect" => self.note_write(node),
            _ => {}
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            self.node(child, depth + 1);
        }
    }

    fn command(&mut self, node: Node) {
        let Some(name) = node.child_by_field_name("name") else {
            return;
        };
        let Some(program) = self.literal(name) else {
            self.flag_program(name);
            return;
        };
        let args: Vec<Node> = {
            let mut cursor = node.walk();
            node.children_by_field_name("argument", &mut cursor)
                .collect()
        };
        let base = program.rsplit('/').next().unwrap_or(&program).to_string();
        match base.as_str() {
            "eval" => self.flag("`eval` (it runs text built at run time)", node),
            "source" | "." => {
                if let Some(arg) = args.first() {
                    match self.literal(*arg) {
                        Some(file) if self.written.iter().any(|w| same_file(w, &file)) => {
                            self.flag("`source` of a file the same script wrote", node)
                        }
                        Some(_) => {}
                        None => self.flag("`source` of a file named at run time", node),
                    }
                }
            }
            // `command -v NAME` / `-V` looks a name up; it runs nothing.
            "command"
                if args
                    .first()
                    .is_some_and(|a| matches!(self.text(*a), "-v" | "-V")) => {}
            _ if WRAPPERS.contains(&base.as_str()) => {
                // `sudo $c`, `xargs $(…)`: the wrapped program must be known.
                let wrapped = args.iter().find(|a| {
                    let t = self.text(**a);
                    !t.starts_with('-') && !is_assignment_word(t) && !t.is_empty()
                });
                if let Some(arg) = wrapped {
                    if self.literal(*arg).is_none() && !is_numeric_word(self.text(*arg)) {
                        self.flag_program(*arg);
                    }
                }
            }
            _ => {}
        }
    }

    /// Name why a program word is not literal.
    fn flag_program(&mut self, word: Node) {
        let text = self.text(word);
        let construct = if has_brace_expansion(text) || contains_kind(word, "brace_expression") {
            "brace expansion in the program name"
        } else if contains_kind(word, "command_substitution")
            || contains_kind(word, "process_substitution")
        {
            "a program name computed by a command substitution"
        } else if contains_kind(word, "simple_expansion")
            || contains_kind(word, "expansion")
            || contains_kind(word, "arithmetic_expansion")
        {
            "a variable in the program name"
        } else if has_glob(text) {
            "a glob in the program name"
        } else {
            "a program name the analyser cannot reduce to a word"
        };
        self.flag(construct, word);
    }

    fn function(&mut self, node: Node) {
        let (Some(name), Some(body)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("body"),
        ) else {
            return;
        };
        let name = self.text(name).to_string();
        if calls(body, &name, self.src) {
            self.flag(
                "a function that calls itself (the shape of a fork bomb)",
                node,
            );
        }
    }

    fn redirected(&mut self, node: Node) {
        let Some(body) = node.child_by_field_name("body") else {
            return;
        };
        if body.kind() != "command" {
            return;
        }
        let program = body
            .child_by_field_name("name")
            .and_then(|n| self.literal(n))
            .unwrap_or_default();
        let base = program.rsplit('/').next().unwrap_or(&program);
        let stem = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let is_interpreter = INTERPRETERS.contains(&base) || INTERPRETERS.contains(&stem);
        if !is_interpreter {
            return;
        }
        let mut cursor = node.walk();
        let feeds_code = node
            .children_by_field_name("redirect", &mut cursor)
            .any(|r| matches!(r.kind(), "heredoc_redirect" | "herestring_redirect"));
        if feeds_code {
            self.flag(HEREDOC_TO_INTERPRETER, node);
        }
    }

    fn note_write(&mut self, node: Node) {
        let op = {
            let mut cursor = node.walk();
            let first_operator = node.children(&mut cursor).find(|c| !c.is_named());
            first_operator
                .map(|o| self.text(o).to_string())
                .unwrap_or_default()
        };
        if !op.contains('>') {
            return;
        }
        let mut cursor = node.walk();
        let dest: Vec<Node> = node
            .children_by_field_name("destination", &mut cursor)
            .collect();
        for d in dest {
            if let Some(path) = self.literal(d) {
                self.written.push(path);
            }
        }
    }

    /// The word a node stands for when it is made only of literal text
    /// (quotes removed); `None` when any part is computed or globbed.
    fn literal(&self, node: Node) -> Option<String> {
        match node.kind() {
            "command_name" => {
                let mut cursor = node.walk();
                let children: Vec<Node> = node.named_children(&mut cursor).collect();
                match children.as_slice() {
                    [only] => self.literal(*only),
                    _ => None,
                }
            }
            "word" => {
                let t = self.text(node);
                if has_glob(t) || has_brace_expansion(t) || t.starts_with('~') && t.len() > 1 {
                    return None;
                }
                Some(unescape(t))
            }
            "raw_string" => {
                let t = self.text(node);
                Some(t.trim_matches('\'').to_string())
            }
            "number" => Some(self.text(node).to_string()),
            "string" => {
                let mut out = String::new();
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    if child.kind() != "string_content" {
                        return None;
                    }
                    out.push_str(self.text(child));
                }
                Some(out)
            }
            "concatenation" => {
                let mut out = String::new();
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    out.push_str(&self.literal(child)?);
                }
                Some(out)
            }
            _ => None,
        }
    }
}

/// Whether a subtree runs a command called `name`.
fn calls(node: Node, name: &str, src: &[u8]) -> bool {
    if node.kind() == "command" {
        if let Some(n) = node.child_by_field_name("name") {
            if n.utf8_text(src).ok() == Some(name) {
                return true;
            }
        }
    }
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    children.into_iter().any(|c| calls(c, name, src))
}

fn contains_kind(node: Node, kind: &str) -> bool {
    if node.kind() == kind {
        return true;
    }
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    children.into_iter().any(|c| contains_kind(c, kind))
}

/// Unquoted glob characters in a bare word (a backslash escapes one).
fn has_glob(word: &str) -> bool {
    let mut escaped = false;
    for c in word.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// `{a,b}` or `{1..3}` in a bare word: bash expands it into several words.
fn has_brace_expansion(word: &str) -> bool {
    let Some(open) = word.find('{') else {
        return false;
    };
    if open > 0 && word[..open].ends_with('$') {
        return false;
    }
    let rest = &word[open + 1..];
    match rest.find('}') {
        Some(close) => rest[..close].contains(',') || rest[..close].contains(".."),
        None => false,
    }
}

fn is_assignment_word(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// `timeout 10 cmd`, `nice -n 5`: a duration or niceness, not a program.
fn is_numeric_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || ".smhd".contains(c))
}

/// Remove backslash escapes from a bare word.
fn unescape(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn same_file(a: &str, b: &str) -> bool {
    a.trim_start_matches("./") == b.trim_start_matches("./")
}

fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    let one_line = text.replace('\n', "⏎");
    if one_line.chars().count() <= MAX {
        return one_line;
    }
    let head: String = one_line.chars().take(MAX).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constructs(script: &str) -> Vec<&'static str> {
        opaque_constructs(script)
            .into_iter()
            .map(|o| o.construct)
            .collect()
    }

    #[test]
    fn literal_scripts_are_transparent() {
        for s in [
            "ls -la",
            "cargo test 2>&1 | tail -n 20",
            "git commit -m 'fix: parser'",
            "for f in src/*.rs; do echo \"$f\"; done",
            "mkdir -p build && cd build && cmake .. && make",
            "find . -name '*.rs' | xargs wc -l",
            "echo \"${HOME}/x\" > out.txt",
            "timeout 10 cargo test",
            "sudo -u nobody ls",
            "X=1 make",
            "\"r\"m -rf x",
            "r\\m -rf x",
            "echo $(date)",
            "source ./env.sh",
        ] {
            assert_eq!(constructs(s), Vec::<&str>::new(), "{s}");
        }
    }

    #[test]
    fn computed_program_names_are_opaque() {
        assert_eq!(constructs("/bin/r? -rf ."), ["a glob in the program name"]);
        assert_eq!(
            constructs("c=rm; $c -rf ."),
            ["a variable in the program name"]
        );
        assert_eq!(
            constructs("$(echo rm) -rf ."),
            ["a program name computed by a command substitution"]
        );
        assert_eq!(
            constructs("sudo $c -rf ."),
            ["a variable in the program name"]
        );
        assert!(constructs("{rm,-rf,.}")
            .iter()
            .any(|c| c.contains("brace expansion")));
    }

    #[test]
    fn eval_ifs_source_and_heredocs_are_named() {
        assert!(constructs("eval \"$x\"").contains(&"`eval` (it runs text built at run time)"));
        assert!(constructs("IFS=,; c=rm,-rf,/*; $c")
            .contains(&"an `IFS` assignment (it changes how words split)"));
        assert_eq!(
            constructs("source $F"),
            ["`source` of a file named at run time"]
        );
        assert_eq!(
            constructs("echo x > c.sh; . ./c.sh"),
            ["`source` of a file the same script wrote"]
        );
        assert_eq!(
            constructs("python3 <<'EOF'\nprint(1)\nEOF"),
            ["a here-document fed to an interpreter"]
        );
        assert_eq!(
            constructs("bomb() { bomb | bomb & }; bomb"),
            ["a function that calls itself (the shape of a fork bomb)"]
        );
    }

    #[test]
    fn kept_trees_are_bounded_in_count_and_in_source_bytes() {
        let kept = || TREES.with(|t| t.borrow().iter().map(|(s, _)| s.len()).collect::<Vec<_>>());
        for i in 0..RECENT_TREES + 3 {
            parse_tree(&format!("echo {i}"));
        }
        assert_eq!(kept().len(), RECENT_TREES);
        let big = format!("echo {}", "a".repeat(MAX_SCRIPT_BYTES / 2));
        parse_tree(&big);
        parse_tree(&format!("{big}b"));
        let sizes = kept();
        assert!(
            sizes.iter().sum::<usize>() <= RECENT_TREES_BYTES,
            "{sizes:?}"
        );
        // The newest is kept, and asked again it is not parsed again.
        let before = parses_on_this_thread();
        parse_tree(&format!("{big}b"));
        assert_eq!(parses_on_this_thread(), before);
    }

    #[test]
    fn parse_errors_are_opaque() {
        assert!(!constructs("rm -rf . )(").is_empty());
        assert!(!constructs("if true; then").is_empty());
        let big = "a".repeat(MAX_SCRIPT_BYTES + 1);
        assert_eq!(constructs(&big), ["a script longer than the parser reads"]);
    }
}
