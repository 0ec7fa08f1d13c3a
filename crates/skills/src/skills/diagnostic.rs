//! Diagnostics: what a skill file's author is told, in the form compilers
//! and flymake already understand (`file:line:col: severity: message`).
//!
//! The parser works in byte offsets (that is what orgize reports); a
//! [`LineIndex`] turns them into 1-based lines and character columns once,
//! at the end, so the rest of the code never counts lines.

use std::fmt;
use std::path::PathBuf;

/// How bad a finding is. Any error keeps the file from loading; warnings
/// never do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Severity {
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding about one place in one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Diagnostic {
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters (what Emacs calls a column
    /// for non-tab text).
    pub column: usize,
    pub severity: Severity,
    pub message: String,
}

impl Diagnostic {
    /// Whether this finding keeps the file from loading.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.severity,
            self.message
        )
    }
}

/// A finding still expressed as a byte offset into the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub offset: usize,
    pub severity: Severity,
    pub message: String,
}

impl Finding {
    /// An error at a byte offset.
    pub fn error(offset: usize, message: impl Into<String>) -> Self {
        Finding {
            offset,
            severity: Severity::Error,
            message: message.into(),
        }
    }
    /// A warning at a byte offset.
    pub fn warning(offset: usize, message: impl Into<String>) -> Self {
        Finding {
            offset,
            severity: Severity::Warning,
            message: message.into(),
        }
    }
}

/// Byte offset → (line, column) for one text.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    /// Byte offset where each line starts.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    /// Index the line starts of `text`.
    pub fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    /// 1-based line and character column of `offset` (clamped to the text).
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        let column = self.text[start..offset].chars().count() + 1;
        (line, column)
    }

    /// Turn findings into sorted diagnostics for `path`.
    pub fn resolve(&self, path: &std::path::Path, findings: Vec<Finding>) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = findings
            .into_iter()
            .map(|f| {
                let (line, column) = self.line_col(f.offset);
                Diagnostic {
                    path: path.to_path_buf(),
                    line,
                    column,
                    severity: f.severity,
                    message: f.message,
                }
            })
            .collect();
        out.sort_by_key(|d| (d.line, d.column));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_one_based_lines_and_character_columns() {
        let idx = LineIndex::new("ab\nçd\n\nx");
        assert_eq!(idx.line_col(0), (1, 1));
        assert_eq!(idx.line_col(2), (1, 3));
        assert_eq!(idx.line_col(3), (2, 1));
        // `ç` is two bytes: the `d` after it is column 2.
        assert_eq!(idx.line_col(5), (2, 2));
        assert_eq!(idx.line_col(7), (3, 1));
        assert_eq!(idx.line_col(8), (4, 1));
        assert_eq!(idx.line_col(999), (4, 2));
    }

    #[test]
    fn display_is_the_compiler_form() {
        let d = Diagnostic {
            path: PathBuf::from("skills/git.org"),
            line: 12,
            column: 3,
            severity: Severity::Error,
            message: "bad".into(),
        };
        assert_eq!(d.to_string(), "skills/git.org:12:3: error: bad");
    }
}
