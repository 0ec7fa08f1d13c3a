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
//! Every form of every value is looked up at each position of the output
//! by its first bytes ([`Searcher`]), so the output is read once whatever
//! the number of values. Two more views
//! cover the forms a literal search cannot: runs of lines made only of
//! base64 or hex characters, joined (wrapped encodings), and runs of
//! single characters between spaces, with `od`'s offsets dropped (spaced
//! out). A match in a view is mapped back to the bytes of the output.

use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;

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

/// How many of a form's first bytes the search looks up: every form is at
/// least this long (a value is [`MIN_VALUE`] bytes or more, and no form is
/// shorter than its value).
const PREFIX: usize = MIN_VALUE;

/// The output is sampled every [`STRIDE`] bytes, [`GRAM`] bytes at a
/// time: any form (at least [`PREFIX`] bytes long) starting at a position
/// `p` has one sample `t` in `p..p + STRIDE`, and the [`GRAM`] bytes there
/// are its own bytes `t - p..t - p + GRAM`, all inside its first
/// [`PREFIX`].
const GRAM: usize = 4;
const STRIDE: usize = PREFIX - GRAM + 1;

/// Bits in each of the two filters of [`Searcher`]: 65,536, so 8 KiB each,
/// which stay in the processor's first cache.
const FILTER_BITS: usize = 1 << 16;

/// A set of byte strings of at least [`PREFIX`] bytes, found in output.
///
/// Why not the `aho-corasick` crate, used everywhere else for literals:
/// its automata (NFA or DFA alike) step from state to state, one
/// dependent memory read per byte of output, and that chain, not the
/// number of values, sets their speed: too slow for issue 38's budget for
/// the whole redaction (`examples/bench_redact`, docs/performance.md). This reads one sample of
/// [`GRAM`] bytes every [`STRIDE`] bytes and looks it up in a bit set of
/// the forms' own [`GRAM`]-byte pieces; where a bit is set, each position
/// the form could start at is looked up by its first [`PREFIX`] bytes (a
/// second bit set, then a map), and compared in full. A test checks it
/// against a plain search for every form.
struct Searcher {
    /// A bit per hash of each [`GRAM`]-byte piece a sample can see of a
    /// form: those starting in its first [`STRIDE`] bytes.
    pieces: Box<[u64; FILTER_BITS / 64]>,
    /// A bit per hash of the first [`PREFIX`] bytes of a form.
    first_bytes: Box<[u64; FILTER_BITS / 64]>,
    /// The forms (indices into `forms`) by their first [`PREFIX`] bytes.
    begun: FxHashMap<u64, Vec<u32>>,
    forms: Vec<(Vec<u8>, u32, Form)>,
}

fn bit(set: &[u64; FILTER_BITS / 64], at: usize) -> bool {
    set[at / 64 % set.len()] & (1 << (at % 64)) != 0
}

fn set_bit(set: &mut [u64; FILTER_BITS / 64], at: usize) {
    set[at / 64 % set.len()] |= 1 << (at % 64);
}

/// The top 16 bits of a multiplicative hash of `key` (Fibonacci hashing).
fn hashed(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize
}

/// The `N` bytes of `bytes` at `at`, as a number; None past the end.
fn word<const N: usize>(bytes: &[u8], at: usize) -> Option<u64> {
    let chunk = bytes.get(at..)?.first_chunk::<N>()?;
    Some(chunk.iter().rev().fold(0, |n, &b| n << 8 | u64::from(b)))
}

impl Searcher {
    fn build(forms: Vec<(Vec<u8>, u32, Form)>) -> Option<Searcher> {
        let mut searcher = Searcher {
            pieces: Box::new([0; FILTER_BITS / 64]),
            first_bytes: Box::new([0; FILTER_BITS / 64]),
            begun: FxHashMap::default(),
            forms: Vec::new(),
        };
        for (form, value, kind) in forms {
            let Some(key) = word::<PREFIX>(&form, 0) else {
                // Cannot happen (see `PREFIX`); say so rather than leave a
                // form out quietly.
                tracing::warn!(
                    "known secret values: a form shorter than {PREFIX} bytes is not searched for"
                );
                continue;
            };
            for at in 0..STRIDE {
                if let Some(piece) = word::<GRAM>(&form, at) {
                    set_bit(&mut searcher.pieces, hashed(piece));
                }
            }
            set_bit(&mut searcher.first_bytes, hashed(key));
            let index = u32::try_from(searcher.forms.len()).unwrap_or(u32::MAX);
            searcher.begun.entry(key).or_default().push(index);
            searcher.forms.push((form, value, kind));
        }
        (!searcher.forms.is_empty()).then_some(searcher)
    }

    /// Every form in `haystack`: where, which value, in which form. Two
    /// finds may overlap; the caller merges them.
    fn find(&self, haystack: &[u8], mut found: impl FnMut(Range<usize>, u32, Form)) {
        let mut sample = 0;
        while let Some(piece) = word::<GRAM>(haystack, sample) {
            if bit(&self.pieces, hashed(piece)) {
                // The forms this sample may be inside start at most
                // `STRIDE - 1` bytes before it; each start is seen from
                // this sample alone.
                for start in sample.saturating_sub(STRIDE - 1)..=sample {
                    let Some(key) = word::<PREFIX>(haystack, start) else {
                        break;
                    };
                    if !bit(&self.first_bytes, hashed(key)) {
                        continue;
                    }
                    let rest = &haystack[start..];
                    for &i in self.begun.get(&key).into_iter().flatten() {
                        if let Some((form, value, kind)) = self.forms.get(i as usize) {
                            if rest.starts_with(form) {
                                found(start..start + form.len(), *value, *kind);
                            }
                        }
                    }
                }
            }
            sample += STRIDE;
        }
    }

    fn memory(&self) -> usize {
        (self.pieces.len() + self.first_bytes.len()) * 8
            + self.begun.len() * (8 + std::mem::size_of::<Vec<u32>>())
            + self
                .forms
                .iter()
                .map(|(f, _, _)| f.len() + 12)
                .sum::<usize>()
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
            .map(Searcher::memory)
            .sum()
    }

    /// How many values it searches for.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn label(&self, value: u32, form: Form) -> String {
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
            s.find(text.as_bytes(), |range, value, form| {
                out.push(ValueMatch {
                    range,
                    label: self.label(value, form),
                });
            });
        }
        for (searcher, view) in [
            (&self.joined, View::wrapped as fn(&str) -> View),
            (&self.spaced, View::spaced),
        ] {
            let Some(s) = searcher else { continue };
            let view = view(text);
            if view.text.is_empty() {
                continue;
            }
            s.find(&view.text, |range, value, form| {
                out.push(ValueMatch {
                    range: view.back(range),
                    label: self.label(value, form),
                });
            });
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
    ///
    /// Single characters are rare in most output, so they are found first
    /// ([`single_characters`]), and only the gaps between two of them are
    /// read: a run goes on across blanks, line breaks and the octal offset
    /// that begins a line, and ends at any other word.
    fn spaced(text: &str) -> View {
        let mut view = View {
            text: Vec::new(),
            segments: Vec::new(),
        };
        let bytes = text.as_bytes();
        let mut run: Vec<usize> = Vec::new();
        let mut last: Option<usize> = None;
        single_characters(bytes, |at| {
            if let Some(before) = last {
                if !run_goes_on(bytes.get(before + 1..at).unwrap_or_default()) {
                    view.take_run(bytes, &mut run);
                }
            }
            run.push(at);
            last = Some(at);
        });
        view.take_run(bytes, &mut run);
        view
    }

    /// Append `run` (positions of single characters in `bytes`) when it is
    /// long enough to hold a value; empty it either way.
    fn take_run(&mut self, bytes: &[u8], run: &mut Vec<usize>) {
        if run.len() >= MIN_VALUE {
            for &i in run.iter() {
                self.segments.push((self.text.len(), i));
                self.text.push(bytes[i]);
            }
            self.text.push(0);
        }
        run.clear();
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

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether a run of single characters goes on across `gap`, the bytes
/// between two of them: only blanks, line breaks, and a word of octal
/// digits first on its line (`od`'s offsets).
fn run_goes_on(gap: &[u8]) -> bool {
    let mut line_start = false;
    let mut i = 0;
    while let Some(&b) = gap.get(i) {
        if b == b'\n' || b == b'\r' {
            line_start = true;
            i += 1;
            continue;
        }
        if is_blank(b) {
            i += 1;
            continue;
        }
        let start = i;
        while gap.get(i).is_some_and(|&c| !is_blank(c)) {
            i += 1;
        }
        let offset = line_start && gap[start..i].iter().all(|c| (b'0'..=b'7').contains(c));
        if !offset {
            return false;
        }
        line_start = false;
    }
    true
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const LOW_BITS: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The high bit of each byte of `word` that equals `byte`. Exact for every
/// byte: the sum of two 7-bit halves never carries into the next byte.
fn equal_bytes(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    !((x & LOW_BITS).wrapping_add(LOW_BITS) | x) & HIGH_BITS
}

/// The high bit of each blank byte of `word` (space, tab, line break).
fn blank_bytes(word: u64) -> u64 {
    equal_bytes(word, b' ')
        | equal_bytes(word, b'\t')
        | equal_bytes(word, b'\n')
        | equal_bytes(word, b'\r')
}

/// Calls `each` with the position of every one-character word of `bytes`
/// (an ASCII byte with a blank or the edge of the text on each side), in
/// order.
///
/// Eight bytes at a time, with no branch per byte: in ordinary output a
/// loop over the words costs a mispredicted branch every few bytes, and
/// this view is read for every tool output. The view's test checks it
/// against that plain loop.
fn single_characters(bytes: &[u8], mut each: impl FnMut(usize)) {
    // Past the end counts as blank, so the last word is padded with spaces.
    let word = |k: usize| -> u64 {
        let rest = bytes.get(k * 8..).unwrap_or_default();
        if let Some(whole) = rest.first_chunk::<8>() {
            return u64::from_le_bytes(*whole);
        }
        let mut padded = [b' '; 8];
        let n = rest.len().min(8);
        padded[..n].copy_from_slice(&rest[..n]);
        u64::from_le_bytes(padded)
    };
    // The byte before the text counts as blank too.
    let mut before_word = HIGH_BITS;
    let mut this = word(0);
    let mut blanks = blank_bytes(this);
    for k in 0..bytes.len().div_ceil(8) {
        let next = word(k + 1);
        let next_blanks = blank_bytes(next);
        // Little-endian: byte j of the word is bits 8j..8j+8, so shifting
        // left by 8 puts each byte's flag on the byte after it.
        let blank_before = blanks << 8 | before_word >> 56;
        let blank_after = blanks >> 8 | next_blanks << 56;
        let mut singles = !blanks & !this & HIGH_BITS & blank_before & blank_after;
        while singles != 0 {
            each(k * 8 + singles.trailing_zeros() as usize / 8);
            singles &= singles - 1;
        }
        before_word = blanks;
        this = next;
        blanks = next_blanks;
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

    /// Numbers below `n`, the same at every run (xorshift from `seed`).
    fn numbers(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        }
    }

    /// The searcher finds exactly what a plain search for every form
    /// finds, on output made of the forms' own bytes (so that most
    /// positions pass the filters and fail later), with forms planted
    /// whole, cut short, and overlapping one another.
    #[test]
    fn the_searcher_finds_what_a_plain_search_finds() {
        let mut next = numbers(0x2545_f491_4f6c_dd1du64);
        let values: Vec<KnownValue> = (0..40)
            .map(|i| {
                let len = 8 + i % 13;
                let v: String = (0..len)
                    .map(|_| char::from(b"ab01+/=-_%x"[next(11)]))
                    .collect();
                KnownValue::new(v, format!("value {i}"))
            })
            .collect();
        let mut forms_of: Vec<(Vec<u8>, u32, Form)> = Vec::new();
        for (i, v) in values.iter().enumerate() {
            for (form, text) in forms(&v.value) {
                forms_of.push((text, i as u32, form));
            }
        }
        let searcher = Searcher::build(forms_of.clone()).unwrap();
        for round in 0..200 {
            let mut out: Vec<u8> = Vec::new();
            while out.len() < 400 + round {
                match next(4) {
                    0 => out.extend_from_slice(&forms_of[next(forms_of.len())].0),
                    1 => {
                        let f = &forms_of[next(forms_of.len())].0;
                        out.extend_from_slice(&f[..next(f.len())]);
                    }
                    _ => out.push(b"ab01+/=-_%x\n 4"[next(14)]),
                }
            }
            let mut expected: Vec<(Range<usize>, u32)> = Vec::new();
            for (form, value, _) in &forms_of {
                for at in 0..out.len() {
                    if out[at..].starts_with(form) {
                        expected.push((at..at + form.len(), *value));
                    }
                }
            }
            let mut got = Vec::new();
            searcher.find(&out, |range, value, _| got.push((range, value)));
            let key = |r: &(Range<usize>, u32)| (r.0.start, r.0.end, r.1);
            expected.sort_by_key(key);
            expected.dedup();
            got.sort_by_key(key);
            got.dedup();
            assert_eq!(got, expected, "round {round}");
        }
    }

    /// The plain loop [`View::spaced`] replaced: word by word.
    fn spaced_word_by_word(text: &str) -> View {
        let mut view = View {
            text: Vec::new(),
            segments: Vec::new(),
        };
        let bytes = text.as_bytes();
        let mut run: Vec<usize> = Vec::new();
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
            while i < bytes.len() && !is_blank(bytes[i]) {
                i += 1;
            }
            let single = i - start == 1 && b.is_ascii();
            let offset = line_start && bytes[start..i].iter().all(|c| (b'0'..=b'7').contains(c));
            line_start = false;
            if single {
                run.push(start);
            } else if !offset {
                view.take_run(bytes, &mut run);
            }
        }
        view.take_run(bytes, &mut run);
        view
    }

    #[test]
    fn the_spaced_view_is_the_one_a_plain_loop_makes() {
        let mut next = numbers(0x9e37_79b9_7f4a_7c15u64);
        let pieces = [
            " ",
            "  ",
            "\t",
            "\n",
            "\r\n",
            "a",
            "7",
            "=",
            "é",
            "\u{1}",
            "ab",
            "0000020",
            "017",
            "0000020  ",
            "s e c r e t ",
            "x y z",
            "word ",
        ];
        for round in 0..2000 {
            let mut text = String::new();
            for _ in 0..next(60 + round % 40) {
                text.push_str(pieces[next(pieces.len())]);
            }
            let (fast, plain) = (View::spaced(&text), spaced_word_by_word(&text));
            assert_eq!(fast.text, plain.text, "{text:?}");
            assert_eq!(fast.segments, plain.segments, "{text:?}");
        }
        let od = "0000000   s   3   c   r   3   t   -   V   a   l   u   e   -   4   2   x\n0000020   y   z\n";
        assert_eq!(View::spaced(od).text, b"s3cr3t-Value-42xyz\0");
    }
}
