//! Word evaluation: what a shell would make of one word's nodes, without
//! running anything — quotes removed, escapes decoded (`\x`, `"..."`,
//! `$'...'`), known variables expanded (`$HOME`, `${X:-d}`, `$1`, `$@`,
//! `${IFS}`), unknown ones kept as written, and the scripts inside
//! `$(...)`, backquotes and `<(...)` noted for the nested walk. Kept apart
//! from the statement walk because it is the part an attacker's spelling
//! (`r\m`, `"r"m`, `$'\x72\x6d'`) has to get through.

use tree_sitter::Node;

use super::{text, Builder, Word};

impl Builder<'_> {
    /// Evaluate one word node.
    pub(super) fn word(&mut self, src: &[u8], node: Node, in_quotes: bool) -> Word {
        let mut w = Word::default();
        self.word_into(src, node, &mut w, in_quotes);
        w
    }

    /// Append the value of `node` to `w`.
    pub(super) fn word_into(&mut self, src: &[u8], node: Node, w: &mut Word, in_quotes: bool) {
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
    pub(super) fn simple_expansion(&mut self, written: &str, w: &mut Word, in_quotes: bool) {
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

    pub(super) fn lookup(&self, name: &str) -> Option<String> {
        if name == "IFS" {
            return Some(" ".into());
        }
        self.vars.get(name).cloned()
    }

    /// `${NAME}`, `${NAME:-default}`, `${NAME:off:len}`, `${#NAME}`.
    pub(super) fn expand_braced(&self, inner: &str) -> Option<String> {
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
    pub(super) fn push_value(
        &mut self,
        w: &mut Word,
        value: Option<String>,
        written: &str,
        in_quotes: bool,
    ) {
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
}

/// `text` without `head` bytes at the start and `tail` at the end (the
/// quotes or `$(`/`)` around a node), or empty when too short.
pub(super) fn strip_delims(text: &str, head: usize, tail: usize) -> &str {
    if text.len() < head + tail {
        return "";
    }
    text.get(head..text.len() - tail).unwrap_or("")
}

/// A bare word's characters: a backslash quotes the next character, a
/// backslash-newline disappears.
pub(super) fn unescape_unquoted(text: &str, w: &mut Word) {
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
pub(super) fn unescape_double_quoted(text: &str, w: &mut Word) {
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
pub(super) fn decode_ansi_c(body: &str, out: &mut String) {
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
