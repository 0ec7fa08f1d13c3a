//! Text for a terminal: what the model or the agent wrote (answers, file
//! names, commands, tool output) must never drive the person's terminal.
//!
//! A terminal obeys control sequences in what it prints: `ESC[1A ESC[2K`
//! erases the line above, OSC 52 (`ESC]52;c;…BEL`) writes the clipboard,
//! C1 controls (U+0080–U+009F) are escape sequences on some terminals, and
//! the Unicode bidi overrides reorder what the person reads. Every CLI
//! output of agent-written text goes through [`escape_text`] (multi-line
//! text: newlines and tabs kept) or [`escape_line`] (names and one-line
//! fields: those escaped too). Each character is escaped on its own, with
//! no state, so text streamed in chunks is escaped the same as whole.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that could steer a terminal shown visibly
/// (`\x1b`, `\u{202e}`, …), newlines and tabs kept: for answers, plans and
/// tool output printed as lines.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// `text` with every control character shown visibly, newlines and tabs
/// included: for file names, titles and other one-line fields.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

fn escape(text: &str, keep_layout: bool) -> Cow<'_, str> {
    let steers = |c: char| needs_escape(c) && !(keep_layout && matches!(c, '\n' | '\t'));
    if !text.chars().any(steers) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !steers(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// A writer that passes every write through [`escape_text`]: for commands
/// whose whole output is a report made of names and text from files the
/// agent could have written (`skills`, `mcp`, `history`). Bytes that are not
/// UTF-8 are shown as U+FFFD; a write is escaped on its own, which is exact
/// because escaping keeps no state between characters.
pub struct Escaping<W: std::io::Write>(pub W);

impl<W: std::io::Write> std::io::Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(escape_text(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// C0 controls (ESC, BEL, CR, BS, …), DEL, C1 controls, and the Unicode
/// marks that change the direction text is shown in.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'                    // Arabic letter mark
            | '\u{200e}' | '\u{200f}'     // left-to-right / right-to-left marks
            | '\u{202a}'..='\u{202e}'     // embeddings and overrides
            | '\u{2066}'..='\u{2069}' // isolates
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_movement_and_osc52_are_shown_not_obeyed() {
        let hostile = "a\x1b[1A\x1b[2Kb\x1b]52;c;ZXZpbA==\x07c";
        assert_eq!(
            escape_text(hostile),
            "a\\x1b[1A\\x1b[2Kb\\x1b]52;c;ZXZpbA==\\x07c"
        );
        assert!(!escape_line(hostile).contains('\x1b'));
    }

    #[test]
    fn layout_is_kept_in_text_and_escaped_in_lines() {
        assert_eq!(escape_text("one\n\ttwo\r\n"), "one\n\ttwo\\x0d\n");
        assert_eq!(escape_line("one\n\ttwo"), "one\\x0a\\x09two");
    }

    #[test]
    fn c1_and_bidi_overrides_are_visible() {
        assert_eq!(escape_text("x\u{9b}2J"), "x\\x9b2J");
        assert_eq!(escape_line("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(escape_line("\u{2066}a\u{2069}"), "\\u{2066}a\\u{2069}");
    }

    #[test]
    fn the_escaping_writer_escapes_every_write() {
        use std::io::Write as _;
        let mut out = Escaping(Vec::new());
        let name = "x\x1b[2K\x1b]52;c;aGk=\x07.org";
        let _ = writeln!(out, "file {name}");
        let _ = write!(out, "tab\there");
        assert_eq!(
            String::from_utf8_lossy(&out.0),
            "file x\\x1b[2K\\x1b]52;c;aGk=\\x07.org\ntab\there"
        );
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "héllo — wörld ✓\n";
        assert!(matches!(escape_text(text), Cow::Borrowed(t) if t == text));
    }
}
