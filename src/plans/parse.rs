//! Reading a person's edits back from a flight plan's Org text.
//!
//! Only two things are read: the plan id (the `:PLAN_ID:` property, which
//! must name the plan being decided) and the body of the one source block
//! named `action` (plus its `:path` header for writes and searches).
//! Everything else a person may have changed (prose, the gate trace, the
//! heading) is ignored, and the tool, the target and the interpreter cannot
//! be changed by editing: the edited action is the original with its editable
//! text replaced. The model's raw `arguments` are kept as they were; what
//! runs is the effect.
//!
//! The body follows the convention of [`mod@super::render`]: comma escapes are
//! undone and the final line break before `#+end_src` is dropped.

use std::path::PathBuf;

use serde::Deserialize;

use super::render::{run_language, ACTION_BLOCK_NAME};
use super::FlightPlan;
use crate::action::{Action, Effect};

/// Why an edited flight plan could not be read back. Line numbers are
/// 1-based, in the text that was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanParseError {
    #[error("no :PLAN_ID: property found in the plan's heading")]
    MissingId,
    #[error(
        "the action block holds {label}, which the plan cannot put a value back for (the \
         secret file changed since the plan was shown, or the label was written in): \
         approve the block as shown, or write the value out"
    )]
    UnknownRedaction { label: String },
    #[error("the edited action could not be read back to put its values in: {0}")]
    Unrestorable(String),
    #[error("line {line}: this text is flight plan {found}, not {expected}")]
    IdMismatch {
        line: usize,
        found: String,
        expected: String,
    },
    #[error(
        "no source block named `{ACTION_BLOCK_NAME}` (a `#+NAME: {ACTION_BLOCK_NAME}` line \
         right before `#+begin_src`)"
    )]
    MissingActionBlock,
    #[error(
        "line {line}: the action block is never closed: `#+end_src` is missing, or a line in \
         it starts with `*` or `#+` (write `,*` or `,#+` for those)"
    )]
    UnterminatedActionBlock { line: usize },
    #[error("lines {first} and {second}: two blocks are named `{ACTION_BLOCK_NAME}`; keep one")]
    DuplicateActionBlock { first: usize, second: usize },
    #[error(
        "line {line}: the action block's language is `{found}` but must stay `{expected}` \
         (the interpreter cannot be changed by editing)"
    )]
    LanguageChanged {
        line: usize,
        found: String,
        expected: String,
    },
    #[error("line {line}: the action block needs a `:path` header argument")]
    MissingPath { line: usize },
    #[error("line {line}: the path is empty")]
    EmptyPath { line: usize },
    #[error("line {line}: {message}")]
    InvalidHeader { line: usize, message: String },
    #[error("line {line}, column {column}: invalid JSON: {message}")]
    InvalidJson {
        line: usize,
        column: usize,
        message: String,
    },
}

/// The action a person approved, read from `org_text` (a rendering of
/// `original`, possibly edited). Returns `original.action` unchanged when
/// the block was not edited.
pub fn parse_edited(original: &FlightPlan, org_text: &str) -> Result<Action, PlanParseError> {
    check_plan_id(org_text, &original.id)?;
    let block = find_action_block(org_text)?;

    let mut action = original.action.clone();
    match &mut action.effect {
        Effect::Run {
            interpreter,
            script,
            ..
        } => {
            let expected = run_language(interpreter);
            if block.language.as_deref() != Some(expected.as_str()) {
                return Err(PlanParseError::LanguageChanged {
                    line: block.begin_line,
                    found: block.language.unwrap_or_default(),
                    expected,
                });
            }
            *script = block.body;
        }
        Effect::WriteFile { path, content } => {
            *path = block.header_path()?;
            *content = block.body;
        }
        Effect::ReadFile { path } | Effect::ListDir { path } => {
            if block.body.is_empty() {
                return Err(PlanParseError::EmptyPath {
                    line: block.begin_line + 1,
                });
            }
            *path = PathBuf::from(block.body);
        }
        Effect::SearchText { path, pattern } => {
            *path = block.header_path()?;
            *pattern = block.body;
        }
        Effect::EvalElisp { code, .. } => *code = block.body,
        Effect::Message { text } => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct MessageBody {
                text: String,
            }
            let parsed: MessageBody = block.json()?;
            *text = parsed.text;
        }
        Effect::Op { args, .. } => *args = block.json()?,
    }
    Ok(action)
}

/// The action block, lifted out of the syntax tree into owned data.
struct ActionBlock {
    /// Line of `#+begin_src`.
    begin_line: usize,
    /// Line of the first body line.
    body_line: usize,
    language: Option<String>,
    parameters: Option<String>,
    /// Unescaped, without the final line break.
    body: String,
}

impl ActionBlock {
    fn header_path(&self) -> Result<PathBuf, PlanParseError> {
        let params = self.parameters.as_deref().unwrap_or("");
        let path = header_value(params, ":path").map_err(|e| PlanParseError::InvalidHeader {
            line: self.begin_line,
            message: e.to_string(),
        })?;
        match path {
            None => Err(PlanParseError::MissingPath {
                line: self.begin_line,
            }),
            Some(p) if p.is_empty() => Err(PlanParseError::EmptyPath {
                line: self.begin_line,
            }),
            Some(p) => Ok(PathBuf::from(p)),
        }
    }

    fn json<T: for<'de> Deserialize<'de>>(&self) -> Result<T, PlanParseError> {
        serde_json::from_str(&self.body).map_err(|e| PlanParseError::InvalidJson {
            line: self.body_line + e.line().saturating_sub(1),
            column: e.column(),
            message: e.to_string(),
        })
    }
}

fn check_plan_id(text: &str, expected: &str) -> Result<(), PlanParseError> {
    let Some((token, offset)) = crate::org::first_headline_property(text, "PLAN_ID") else {
        return Err(PlanParseError::MissingId);
    };
    let id = token.trim();
    if id != expected {
        return Err(PlanParseError::IdMismatch {
            line: line_of(text, offset),
            found: id.to_string(),
            expected: expected.to_string(),
        });
    }
    Ok(())
}

fn find_action_block(text: &str) -> Result<ActionBlock, PlanParseError> {
    let mut found: Option<ActionBlock> = None;
    for block in crate::org::src_blocks_named(text, ACTION_BLOCK_NAME) {
        let begin_line = line_of(text, block.begin);
        if let Some(first) = &found {
            return Err(PlanParseError::DuplicateActionBlock {
                first: first.begin_line,
                second: begin_line,
            });
        }
        let raw = text
            .get(block.content_start..block.content_end)
            .unwrap_or("");
        let mut body = unescape_block_body(raw);
        if body.ends_with('\n') {
            body.pop();
        }
        found = Some(ActionBlock {
            begin_line,
            body_line: line_of(text, block.content_start),
            language: block.language,
            parameters: block.parameters,
            body,
        });
    }
    match found {
        Some(block) => Ok(block),
        None => Err(match unterminated_action_block(text) {
            Some(line) => PlanParseError::UnterminatedActionBlock { line },
            None => PlanParseError::MissingActionBlock,
        }),
    }
}

/// The line of a `#+begin_src` named `action` that Org did not accept as a
/// block (the parser silently drops unterminated blocks).
fn unterminated_action_block(text: &str) -> Option<usize> {
    let mut named = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        let lower = t.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("#+name:") {
            named = value.trim() == ACTION_BLOCK_NAME;
        } else if named && lower.starts_with("#+begin_src") {
            return Some(i + 1);
        } else if !t.is_empty() {
            named = false;
        }
    }
    None
}

/// Undo [`super::render::escape_block_body`]: drop one comma from lines
/// whose first non-blank characters are commas followed by `*` or `#+`.
pub fn unescape_block_body(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        let rest = &line[indent..];
        let after = rest.trim_start_matches(',');
        if after.len() < rest.len() && (after.starts_with('*') || after.starts_with("#+")) {
            out.push_str(&line[..indent]);
            out.push_str(&rest[1..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Why a header argument could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum HeaderError {
    /// A quoted value that is not a JSON string (the parser's reason).
    #[error("bad quoted header value: {0}")]
    BadQuote(String),
    #[error("bad quoted header value")]
    NoQuote,
    #[error("`{0}` is given twice")]
    Twice(String),
}

/// The value of header argument `key` in a raw `:key value :key2 value`
/// string. A value is a JSON string (`"a b"`) or bare words up to the next
/// `:key`.
fn header_value(params: &str, key: &str) -> Result<Option<String>, HeaderError> {
    let mut rest = params.trim_start();
    let mut current: Option<&str> = None;
    let mut value: Option<String> = None;
    while !rest.is_empty() {
        if rest.starts_with('"') {
            let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<String>();
            let word = match stream.next() {
                Some(Ok(word)) => word,
                Some(Err(e)) => return Err(HeaderError::BadQuote(e.to_string())),
                None => return Err(HeaderError::NoQuote),
            };
            let used = stream.byte_offset();
            if current == Some(key) {
                push_word(&mut value, &word);
            }
            rest = rest[used..].trim_start();
            continue;
        }
        let end = rest.find([' ', '\t']).unwrap_or(rest.len());
        let word = &rest[..end];
        if word.starts_with(':') {
            if word == key && value.is_some() {
                return Err(HeaderError::Twice(key.to_string()));
            }
            current = Some(word);
            if word == key {
                value = Some(String::new());
            }
        } else if current == Some(key) {
            push_word(&mut value, word);
        }
        rest = rest[end..].trim_start();
    }
    Ok(value)
}

fn push_word(value: &mut Option<String>, word: &str) {
    let v = value.get_or_insert_with(String::new);
    if !v.is_empty() {
        v.push(' ');
    }
    v.push_str(word);
}

fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plans::render::escape_block_body;

    #[test]
    fn unescape_undoes_escape() {
        for text in [
            "* h\n#+end_src\n  #+x\n,* y\n,,,#+z\nplain\n",
            ",",
            "",
            "  ,\n*\n",
            "é *\n\t* tab",
        ] {
            assert_eq!(unescape_block_body(&escape_block_body(text)), text);
        }
        // Lines that were never escaped keep their commas.
        assert_eq!(unescape_block_body(",x\n, *\n"), ",x\n, *\n");
    }

    #[test]
    fn header_values_are_bare_or_json() {
        assert_eq!(
            header_value(r#":path "a b/c:d" :x 1"#, ":path"),
            Ok(Some("a b/c:d".to_string()))
        );
        assert_eq!(
            header_value(":x 1 :path notes/a.txt", ":path"),
            Ok(Some("notes/a.txt".to_string()))
        );
        assert_eq!(header_value(":x 1", ":path"), Ok(None));
        assert_eq!(
            header_value(r#":path "a\nb""#, ":path"),
            Ok(Some("a\nb".to_string()))
        );
        assert!(header_value(r#":path "open"#, ":path").is_err());
        assert!(header_value(":path a :path b", ":path").is_err());
    }

    #[test]
    fn lines_count_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }

    #[test]
    fn unterminated_named_block_is_found() {
        assert_eq!(
            unterminated_action_block("x\n#+NAME: action\n#+begin_src bash\nls\n"),
            Some(3)
        );
        assert_eq!(
            unterminated_action_block("#+NAME: other\n#+begin_src bash\n"),
            None
        );
    }
}
