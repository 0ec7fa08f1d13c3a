//! Finding known secret values in output, in the forms they take.
//!
//! The daemon knows the person's secret values ([`KnownValue`]: the
//! provider keys, and what [`crate::gates::secret_values`] reads from
//! their secret files). A value can reach output plain or transformed:
//! JSON-escaped (`cat key.json`), URL-encoded, reversed (`rev`), hex
//! (`xxd -p`, `od -tx1`), base64 at any of the three byte alignments a
//! value can have in a stream (`base64 .env`), wrapped over lines, or
//! spaced out one character at a time (`sed 's/./& /g'`, `od -c`).
//!
//! Every form of every value goes into one Aho-Corasick automaton, so the
//! output is read once whatever the number of values. Two more views
//! cover the forms a literal search cannot: runs of lines made only of
//! base64 or hex characters, joined (wrapped encodings), and runs of
//! single characters between spaces, with `od`'s offsets dropped (spaced
//! out). A match in a view is mapped back to the bytes of the output.

use std::ops::Range;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// Values shorter than this are not searched for: they would match
/// ordinary text.
pub const MIN_VALUE: usize = 8;

/// A secret value the daemon knows, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KnownValue {
    pub value: String,
    /// What the redaction says: `value of DATABASE_URL from
    /// docker-compose.yml`, `configured API key`.
    pub label: Arc<str>,
}

impl KnownValue {
    pub fn new(value: impl Into<String>, label: impl Into<Arc<str>>) -> KnownValue {
        KnownValue {
            value: value.into(),
            label: label.into(),
        }
    }
}

/// The form a value was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Plain,
    JsonEscaped,
    UrlEncoded,
    Reversed,
    Hex,
    Base64,
}

impl Form {
    fn suffix(self) -> &'static str {
        match self {
            Form::Plain => "",
            Form::JsonEscaped => ", JSON-escaped",
            Form::UrlEncoded => ", URL-encoded",
            Form::Reversed => ", reversed",
            Form::Hex => ", hex-encoded",
            Form::Base64 => ", base64-encoded",
        }
    }
}

/// One automaton and what each of its patterns is.
struct Searcher {
    automaton: AhoCorasick,
    forms: Vec<(u32, Form)>,
}

impl Searcher {
    fn build(patterns: Vec<(Vec<u8>, u32, Form)>) -> Option<Searcher> {
        if patterns.is_empty() {
            return None;
        }
        // The crate's own choice of automaton: a DFA for 100 values took
        // some 18 MiB without a clear gain on the 1 MB bench.
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(patterns.iter().map(|(p, _, _)| p))
            .map_err(|e| tracing::warn!("known secret values: cannot build the search: {e}"))
            .ok()?;
        Some(Searcher {
            automaton,
            forms: patterns.into_iter().map(|(_, v, f)| (v, f)).collect(),
        })
    }
}

/// A match: the bytes of the output, and what was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMatch {
    pub range: Range<usize>,
    pub label: String,
}

/// Every form of a set of known values, compiled for searching.
pub struct ValueMatcher {
    labels: Vec<Arc<str>>,
    /// Every form, searched in the output as it is.
    raw: Option<Searcher>,
    /// Hex and base64 forms, searched in runs of wrapped lines.
    joined: Option<Searcher>,
    /// Plain and reversed forms, searched in runs of spaced-out characters.
    spaced: Option<Searcher>,
}

impl ValueMatcher {
    /// Compile the forms of `values` (those shorter than [`MIN_VALUE`]
    /// are left out).
    pub fn new(values: &[KnownValue]) -> ValueMatcher {
        let mut labels = Vec::new();
        let (mut raw, mut joined, mut spaced) = (Vec::new(), Vec::new(), Vec::new());
        for known in values.iter().filter(|k| k.value.len() >= MIN_VALUE) {
            let id = u32::try_from(labels.len()).unwrap_or(u32::MAX);
            labels.push(known.label.clone());
            for (form, text) in forms(&known.value) {
                match form {
                    Form::Hex | Form::Base64 => joined.push((text.clone(), id, form)),
                    Form::Plain | Form::Reversed => spaced.push((text.clone(), id, form)),
                    Form::JsonEscaped | Form::UrlEncoded => {}
                }
                raw.push((text, id, form));
            }
        }
        ValueMatcher {
            labels,
            raw: Searcher::build(raw),
            joined: Searcher::build(joined),
            spaced: Searcher::build(spaced),
        }
    }

    /// The heap bytes its automata take.
    pub fn memory(&self) -> usize {
        [&self.raw, &self.joined, &self.spaced]
            .iter()
            .filter_map(|s| s.as_ref())
            .map(|s| s.automaton.memory_usage())
            .sum()
    }

    /// How many values it searches for.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn label(&self, searcher: &Searcher, pattern: usize) -> String {
        let (value, form) = searcher.forms[pattern];
        let label = self
            .labels
            .get(value as usize)
            .map(std::convert::AsRef::as_ref)
            .unwrap_or("a known secret");
        format!("{label}{}", form.suffix())
    }

    /// Every place in `text` a known value is, in any form; may overlap.
    pub fn find(&self, text: &str) -> Vec<ValueMatch> {
        let mut out = Vec::new();
        if let Some(s) = &self.raw {
            for m in s.automaton.find_iter(text) {
                out.push(ValueMatch {
                    range: m.range(),
                    label: self.label(s, m.pattern().as_usize()),
                });
            }
        }
        if let Some(s) = &self.joined {
            let view = View::wrapped(text);
            for m in s.automaton.find_iter(&view.text) {
                out.push(ValueMatch {
                    range: view.back(m.range()),
                    label: self.label(s, m.pattern().as_usize()),
                });
            }
        }
        if let Some(s) = &self.spaced {
            let view = View::spaced(text);
            for m in s.automaton.find_iter(&view.text) {
                out.push(ValueMatch {
                    range: view.back(m.range()),
                    label: self.label(s, m.pattern().as_usize()),
                });
            }
        }
        out
    }
}

/// Every form of `value`, as the bytes searched for.
fn forms(value: &str) -> Vec<(Form, Vec<u8>)> {
    let bytes = value.as_bytes();
    let mut out = vec![(Form::Plain, bytes.to_vec())];
    let mut add = |form, text: Vec<u8>| {
        if !out.iter().any(|(_, t)| *t == text) {
            out.push((form, text));
        }
    };
    if let Ok(json) = serde_json::to_string(value) {
        add(
            Form::JsonEscaped,
            json.as_bytes()[1..json.len() - 1].to_vec(),
        );
    }
    add(Form::UrlEncoded, url_encoded(bytes).into_bytes());
    add(
        Form::Reversed,
        value.chars().rev().collect::<String>().into_bytes(),
    );
    let lower: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    add(Form::Hex, lower.to_uppercase().into_bytes());
    add(Form::Hex, lower.into_bytes());
    // base64 at each of the three alignments a value can have in a stream:
    // only the characters made of the value's bits alone are kept. The
    // URL-safe alphabet too (JWTs, Kubernetes, Python's urlsafe_b64encode).
    for k in 0..3usize {
        let mut padded = vec![0u8; k];
        padded.extend_from_slice(bytes);
        let encoded = base64(&padded);
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + bytes.len())) / 6;
        if end > start + 4 {
            let core = &encoded[start..end];
            add(Form::Base64, core.as_bytes().to_vec());
            add(
                Form::Base64,
                core.replace('+', "-").replace('/', "_").into_bytes(),
            );
        }
    }
    out
}

/// Percent-encoding of every byte outside RFC 3986's unreserved set.
fn url_encoded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Standard base64 without padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len() * 4 / 3 + 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Standard or URL-safe base64, decoded (padding and line breaks
/// ignored); None when it is not base64.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in text.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// Characters that may make up a wrapped hex or base64 line.
fn is_encoding_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_')
}

/// Lines of a wrapped encoding shorter than this (but the last) are not
/// taken for one: `base64` wraps at 76, `xxd -p` at 60.
const MIN_WRAPPED_LINE: usize = 16;

/// Part of the output rearranged for a search, with the way back.
struct View {
    text: Vec<u8>,
    /// For each stretch copied whole: where it starts in the view and in
    /// the output, ascending.
    segments: Vec<(usize, usize)>,
}

impl View {
    /// Runs of two or more lines made only of base64 or hex characters,
    /// each joined without its line breaks (runs apart by a NUL).
    fn wrapped(text: &str) -> View {
        let mut view = View {
            text: Vec::new(),
            segments: Vec::new(),
        };
        let mut run: Vec<(usize, usize)> = Vec::new();
        let mut at = 0usize;
        let bytes = text.as_bytes();
        let flush = |run: &mut Vec<(usize, usize)>, view: &mut View| {
            if run.len() >= 2 {
                for &(start, end) in run.iter() {
                    view.segments.push((view.text.len(), start));
                    view.text.extend_from_slice(&bytes[start..end]);
                }
                view.text.push(0);
            }
            run.clear();
        };
        for line in text.split('\n') {
            let start = at;
            at += line.len() + 1;
            let line = line.strip_suffix('\r').unwrap_or(line);
            let encoded = !line.is_empty() && line.bytes().all(is_encoding_byte);
            if !encoded {
                flush(&mut run, &mut view);
                continue;
            }
            // A short line ends a run (the last line of a wrapped block).
            let short = line.len() < MIN_WRAPPED_LINE;
            if short && run.is_empty() {
                continue;
            }
            run.push((start, start + line.len()));
            if short {
                flush(&mut run, &mut view);
            }
        }
        flush(&mut run, &mut view);
        view
    }

    /// Runs of single characters between blanks (`s e c r e t`, `od -c`,
    /// whose lines begin with an octal offset), each joined (runs apart by
    /// a NUL). Only runs long enough to hold a value are kept.
    fn spaced(text: &str) -> View {
        let mut view = View {
            text: Vec::new(),
            segments: Vec::new(),
        };
        let bytes = text.as_bytes();
        let mut run: Vec<usize> = Vec::new();
        let flush = |run: &mut Vec<usize>, view: &mut View| {
            if run.len() >= MIN_VALUE {
                for &i in run.iter() {
                    view.segments.push((view.text.len(), i));
                    view.text.push(bytes[i]);
                }
                view.text.push(0);
            }
            run.clear();
        };
        let mut line_start = true;
        let mut i = 0usize;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b' ' || b == b'\t' {
                i += 1;
                continue;
            }
            if b == b'\n' || b == b'\r' {
                line_start = true;
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
                i += 1;
            }
            let single = i - start == 1 && b.is_ascii();
            let offset = line_start && bytes[start..i].iter().all(|c| (b'0'..=b'7').contains(c));
            line_start = false;
            if single {
                run.push(start);
            } else if !offset {
                flush(&mut run, &mut view);
            }
        }
        flush(&mut run, &mut view);
        view
    }

    /// The output's bytes a range of the view came from.
    fn back(&self, range: Range<usize>) -> Range<usize> {
        let at = |pos: usize| {
            let i = self.segments.partition_point(|&(v, _)| v <= pos);
            let (v, o) = self.segments[i.saturating_sub(1)];
            o + (pos - v)
        };
        if range.is_empty() {
            let start = at(range.start);
            return start..start;
        }
        at(range.start)..at(range.end - 1) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "s3cr3t-Value-42xyz";

    fn matcher() -> ValueMatcher {
        ValueMatcher::new(&[
            KnownValue::new(V, "value of API_TOKEN from .env"),
            KnownValue::new("short", "too short"),
        ])
    }

    /// What the single match in `out` is labelled, and the text it covers.
    fn found(out: &str) -> Vec<(String, String)> {
        matcher()
            .find(out)
            .into_iter()
            .map(|m| (m.label, out[m.range].to_string()))
            .collect()
    }

    #[test]
    fn base64_matches_the_standard_encoding() {
        assert_eq!(base64(b"hello world"), "aGVsbG8gd29ybGQ");
        assert_eq!(base64(b"ab"), "YWI");
        assert_eq!(
            base64_decode("aGVsbG8gd29ybGQ=").as_deref(),
            Some(&b"hello world"[..])
        );
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn a_value_is_found_in_each_form_with_its_origin() {
        let b64 = |prefix: &str| base64(format!("{prefix}{V}\n").as_bytes());
        let label = "value of API_TOKEN from .env";
        let hex: String = V.bytes().map(|b| format!("{b:02x}")).collect();
        for (out, suffix) in [
            (format!("API_TOKEN={V}"), ""),
            (b64("API_TOKEN="), ", base64-encoded"),
            (b64("X="), ", base64-encoded"),
            (b64("XY="), ", base64-encoded"),
            (hex.clone(), ", hex-encoded"),
            (hex.to_uppercase(), ", hex-encoded"),
            (V.chars().rev().collect::<String>(), ", reversed"),
            (V.chars().map(|c| format!("{c} ")).collect::<String>(), ""),
            (V.chars().map(|c| format!("   {c}")).collect::<String>(), ""),
            (
                format!(
                    "0000000  {}\n0000020  {}",
                    V[..9].chars().map(|c| format!("  {c}")).collect::<String>(),
                    V[9..].chars().map(|c| format!("  {c}")).collect::<String>()
                ),
                "",
            ),
        ] {
            let got = found(&out);
            assert_eq!(got.len(), 1, "{out}: {got:?}");
            assert_eq!(got[0].0, format!("{label}{suffix}"), "{out}");
        }
        assert!(found("nothing to see here, s3cr3t-Val short").is_empty());
    }

    #[test]
    fn escaped_and_encoded_forms_are_found() {
        let value = "line one\nline \"two\"/x?y&z";
        let m = ValueMatcher::new(&[KnownValue::new(value, "private key from key.json")]);
        let json = serde_json::to_string(value).unwrap();
        let got = m.find(&format!("{{\"k\": {json}}}"));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].label, "private key from key.json, JSON-escaped");
        let url = url_encoded(value.as_bytes());
        let got = m.find(&format!("?p={url}&q=1"));
        assert_eq!(got[0].label, "private key from key.json, URL-encoded");
    }

    #[test]
    fn a_wrapped_encoding_is_found_across_its_line_breaks() {
        let long = format!("TOKEN={V}{V}{V}{V}{V}\n");
        let encoded = base64(long.as_bytes());
        let wrapped: String = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let out = format!("before\n{wrapped}after\n");
        let got = matcher().find(&out);
        assert!(got.len() >= 4, "{got:?}");
        // Every match covers only the encoding's lines.
        for m in &got {
            assert!(m.range.start >= "before\n".len(), "{m:?}");
            assert!(m.range.end <= out.len() - "after\n".len(), "{m:?}");
        }
        let hex: String = long.bytes().map(|b| format!("{b:02x}")).collect();
        let xxd: String = hex
            .as_bytes()
            .chunks(60)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        assert!(
            matcher()
                .find(&xxd)
                .iter()
                .any(|m| m.label.ends_with("hex-encoded")),
            "{xxd}"
        );
    }
}
