//! Line diffs of text, written once for every place that shows a change
//! before or after it is made (a flight plan's `** Changes`, an ACP
//! permission request, a plan's audit evidence).
//!
//! Myers from the `similar` crate, given at most [`DIFF_TIME`] to find a
//! short diff: past that it may be longer, never wrong, so a hostile pair
//! of files cannot stall the daemon.

use std::time::Duration;

use similar::{ChangeTag, TextDiff};

/// The longest a diff may search for a short answer.
pub const DIFF_TIME: Duration = Duration::from_millis(50);

/// A unified diff of `old` → `new` with three lines of context under the
/// headers `a/LABEL` and `b/LABEL`; empty when nothing changed.
pub fn unified(old: &str, new: &str, label: &str) -> String {
    TextDiff::configure()
        .timeout(DIFF_TIME)
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{label}"), &format!("b/{label}"))
        .to_string()
}

/// Every line of `old` → `new`, marked `' '` (kept), `'-'` (removed) or
/// `'+'` (added), without its line ending.
pub fn marked_lines<'a>(old: &'a str, new: &'a str) -> Vec<(char, &'a str)> {
    TextDiff::configure()
        .timeout(DIFF_TIME)
        .diff_lines(old, new)
        .iter_all_changes()
        .map(|change| {
            let mark = match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            };
            (mark, change.value().trim_end_matches(['\n', '\r']))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_names_both_sides_and_is_empty_when_equal() {
        let d = unified("a\nb\n", "a\nc\n", "f.txt");
        assert_eq!(d, "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n");
        assert_eq!(unified("same\n", "same\n", "f.txt"), "");
    }

    #[test]
    fn marked_lines_drop_line_endings() {
        assert_eq!(
            marked_lines("a\r\nb\n", "a\r\nc\n"),
            vec![(' ', "a"), ('-', "b"), ('+', "c")]
        );
    }
}
