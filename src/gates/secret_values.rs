//! The project's own secret values, and the shapes they take in output.
//!
//! Redacting credentials by their shape (`KEY=value`, `sk-…`) misses a
//! secret that went through a transform: `git show HEAD:.env | base64`,
//! `xxd -p`, `rev`, `od -c`, `sed 's/./& /g'`. The daemon can do better
//! than guess: it knows the values, because it can read the project's
//! secret files host-side ([`project_secret_values`]). Tool output is then
//! searched for each value in the common encodings ([`encoded_patterns`]:
//! plain, base64 at the three byte alignments, hex lower and upper,
//! reversed, spaced out one character at a time) before the model sees it.

use std::path::Path;

use regex::Regex;

use crate::gates::protected_paths::{is_project_secret, protection};
use crate::gates::GateContext;

/// Values shorter than this are not searched for: they would match
/// ordinary text.
pub const MIN_VALUE: usize = 8;

/// How many directory entries the scan for secret files reads at most.
const MAX_ENTRIES: usize = 4000;

/// How deep below the project the scan looks for secret files.
const MAX_DEPTH: usize = 3;

/// Secret files larger than this are not read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Directories the scan never enters: build output and dependencies hold
/// no secrets of the project's own, and `.git` is not a file a tool reads.
const SKIP_DIRS: &[&str] = &[".git", "target", "node_modules", ".venv", "venv", "vendor"];

/// The values of `KEY=value` (or `KEY: value`) lines in the files of the
/// project that the gates treat as secrets (`.env*`, `*secret*`,
/// credentials, key files). Reads the disk: call it from the daemon, not a
/// gate.
pub fn project_secret_values(cwd: &Path) -> Vec<String> {
    let ctx = GateContext {
        cwd: cwd.to_path_buf(),
        ..GateContext::default()
    };
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut stack = vec![(cwd.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return out;
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            if kind.is_dir() {
                if depth < MAX_DEPTH && !SKIP_DIRS.contains(&name.as_str()) {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            if !kind.is_file() || !protection(&path, &ctx).is_some_and(|p| is_project_secret(&p)) {
                continue;
            }
            if let Some(text) = read_small_file(&path) {
                out.extend(values_in(&text));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A regular file's text, read on the host without following a link and
/// without blocking: a sandboxed command may have swapped the file for a
/// link or a FIFO since the directory was listed. Larger than
/// [`MAX_FILE_BYTES`], not a regular file, or not UTF-8: nothing.
fn read_small_file(path: &Path) -> Option<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The values of assignments in a secret file's text.
pub fn values_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((_, value)) = line.split_once('=').or_else(|| line.split_once(": ")) else {
            continue;
        };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        if value.len() >= MIN_VALUE && !value.starts_with('$') {
            out.push(value.to_string());
        }
    }
    out
}

/// Every pattern that finds `value` in output, with what form it was in.
/// Empty for values shorter than [`MIN_VALUE`].
pub fn encoded_patterns(value: &str) -> Vec<(Regex, &'static str)> {
    if value.len() < MIN_VALUE {
        return Vec::new();
    }
    let bytes = value.as_bytes();
    let mut forms: Vec<(String, &'static str)> = Vec::new();
    // Plain, or spaced out (`sed 's/./& /g'`, `fold -w1`, and `od -c`,
    // whose lines start with an octal offset).
    let spaced = r"[ \t]*(?:\n[0-7]*[ \t]*)?";
    forms.push((joined(value.chars(), spaced), "a project secret"));
    let reversed: String = value.chars().rev().collect();
    forms.push((
        joined(reversed.chars(), spaced),
        "a reversed project secret",
    ));
    // Hex as `xxd -p` and `od`-free tools print it, wrapped or not.
    let lower: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    forms.push((
        joined(lower.chars(), r"\n?"),
        "a hex-encoded project secret",
    ));
    forms.push((
        joined(lower.to_uppercase().chars(), r"\n?"),
        "a hex-encoded project secret",
    ));
    // base64 at each of the three alignments a value can have in a stream:
    // only the characters made of the value's bits alone are kept.
    for k in 0..3usize {
        let mut padded = vec![0u8; k];
        padded.extend_from_slice(bytes);
        let encoded = base64(&padded);
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + bytes.len())) / 6;
        if end > start + 4 {
            forms.push((
                joined(encoded[start..end].chars(), r"\n?"),
                "a base64-encoded project secret",
            ));
        }
    }
    forms
        .into_iter()
        .filter_map(|(p, what)| Regex::new(&p).ok().map(|r| (r, what)))
        .collect()
}

fn joined(chars: impl Iterator<Item = char>, sep: &str) -> String {
    chars
        .map(|c| regex::escape(&c.to_string()))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Standard base64 without padding.
fn base64(bytes: &[u8]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn found(value: &str, output: &str) -> Option<&'static str> {
        encoded_patterns(value)
            .into_iter()
            .find(|(r, _)| r.is_match(output))
            .map(|(_, w)| w)
    }

    #[test]
    fn base64_matches_the_standard_encoding() {
        assert_eq!(base64(b"hello world"), "aGVsbG8gd29ybGQ");
        assert_eq!(base64(b"ab"), "YWI");
    }

    #[test]
    fn a_secret_is_found_through_common_transforms() {
        let v = "s3cr3t-Value-42xyz";
        let b64 = |prefix: &str| base64(format!("{prefix}{v}\n").as_bytes());
        for (out, form) in [
            (format!("API_TOKEN={v}"), "a project secret"),
            (b64("API_TOKEN="), "a base64-encoded project secret"),
            (b64("X="), "a base64-encoded project secret"),
            (b64("XY="), "a base64-encoded project secret"),
            (
                v.bytes().map(|b| format!("{b:02x}")).collect::<String>(),
                "a hex-encoded project secret",
            ),
            (
                v.bytes().map(|b| format!("{b:02X}")).collect::<String>(),
                "a hex-encoded project secret",
            ),
            (
                v.chars().rev().collect::<String>(),
                "a reversed project secret",
            ),
            (
                v.chars().map(|c| format!("{c} ")).collect::<String>(),
                "a project secret",
            ),
            (
                v.chars().map(|c| format!("   {c}")).collect::<String>(),
                "a project secret",
            ),
            (
                format!(
                    "0000000  {}\n0000020  {}",
                    v[..9].chars().map(|c| format!("  {c}")).collect::<String>(),
                    v[9..].chars().map(|c| format!("  {c}")).collect::<String>()
                ),
                "a project secret",
            ),
        ] {
            assert_eq!(found(v, &out), Some(form), "{out}");
        }
        assert_eq!(found(v, "nothing to see here, s3cr3t-Val"), None);
        assert!(encoded_patterns("short").is_empty());
    }

    #[test]
    fn values_come_from_assignments() {
        let text = "# comment\nexport API_TOKEN=\"abcdefgh12345\"\nDB_HOST=db\nkey: zyxwvutsrq\n";
        assert_eq!(values_in(text), ["abcdefgh12345", "zyxwvutsrq"]);
    }

    #[test]
    fn a_secret_file_swapped_for_a_link_or_a_fifo_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.env");
        std::fs::write(&outside, "TOKEN=abcdefghijklmnop1234\n").unwrap();
        let link = dir.path().join("link.env");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert_eq!(read_small_file(&link), None);
        let fifo = dir.path().join("fifo.env");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Returns at once (no writer would ever come).
        assert_eq!(read_small_file(&fifo), None);
        assert!(read_small_file(&outside).unwrap().contains("TOKEN="));
    }

    #[test]
    fn secret_files_of_the_project_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(".env"), "TOKEN=abcdefgh12345\n").expect("write");
        std::fs::write(dir.path().join("README.md"), "TOKEN=notasecret99\n").expect("write");
        assert_eq!(project_secret_values(dir.path()), ["abcdefgh12345"]);
    }
}
