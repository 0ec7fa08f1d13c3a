//! The project's own secret values, and the shapes they take in output.
//!
//! Redacting credentials by their shape (`KEY=value`, `sk-…`) misses a
//! secret that went through a transform: `git show HEAD:.env | base64`,
//! `xxd -p`, `rev`, `od -c`, `sed 's/./& /g'`. The daemon can do better
//! than guess: it knows the values, because it can read the project's
//! secret files host-side ([`SecretValues`]). Tool output is then
//! searched for each value in the common encodings ([`encoded_patterns`]:
//! plain, base64 at the three byte alignments, hex lower and upper,
//! reversed, spaced out one character at a time) before the model sees it.
//!
//! This is paid at every tool call, so it must not grow with the project.
//! Which files are secret files is the sandbox surface's walk's to say
//! (`sandbox::surface::redactable_files`, at any depth, kept current by
//! its inotify watch); what they hold is remembered here per file by a
//! stamp (device, inode, size, modification and status-change time),
//! stat'ed again at every call. A stamp is trusted only when both times
//! lie more than [`TRUSTED_AGE`] before the read began (the kernel's
//! clock for them is coarse: a write in the same tick as the read could
//! leave them where they were); until then the file is read at every call.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use regex::Regex;
use rustc_hash::FxHashMap;

use crate::control_surface::TRUSTED_AGE;
use crate::gates::protected_paths::{is_project_secret, protection};
use crate::gates::GateContext;

/// Values shorter than this are not searched for: they would match
/// ordinary text.
pub const MIN_VALUE: usize = 8;

/// Secret files larger than this are not read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Bytes of secret files whose values one call takes at most (the files
/// are taken in the walk's order, shallow first); past it the rest are
/// not read and a warning names this limit.
pub const MAX_SECRET_BYTES: u64 = 1024 * 1024;

/// Values one call takes at most (each costs seven patterns run over
/// every output); past it the rest are not redacted and a warning names
/// this limit.
pub const MAX_SECRET_VALUES: usize = 256;

/// Files whose values [`SecretValues`] remembers at most (over every
/// project); past it everything is forgotten and read again.
pub const MAX_REMEMBERED_SECRET_FILES: usize = 4096;

/// Directories whose secret files are not searched: build output and
/// dependencies hold no secrets of the project's own (and their
/// `tokens.json` would make ordinary words "secrets"), and `.git` is not a
/// file a tool reads.
const SKIP_DIRS: &[&str] = &[".git", "target", "node_modules", ".venv", "venv", "vendor"];

/// Whether a file with this name is one whose values are redacted from
/// tool output: what the gates treat as a project secret (`.env*`,
/// `.envrc`, `*secret*`, `*token*`, credentials, key files). By the name
/// alone, as a directory listing gives it; the sandbox's walk asks
/// [`crate::control_surface::secret_names::is_project_secret_name`], the
/// rule the gates' [`protection`] is made of.
pub fn is_secret_file_name(name: &str) -> bool {
    protection(Path::new(name), &GateContext::default()).is_some_and(|p| is_project_secret(&p))
}

/// What a file was when its values were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether any change after `read_at` is sure to move this stamp:
    /// both times lie more than [`TRUSTED_AGE`] before it.
    fn trusted(&self, read_at: SystemTime) -> bool {
        let old = |(secs, nanos): (i64, i64)| {
            let at = UNIX_EPOCH
                + Duration::new(
                    u64::try_from(secs).unwrap_or(u64::MAX / 2),
                    u32::try_from(nanos).unwrap_or(0),
                );
            at + TRUSTED_AGE < read_at
        };
        old(self.mtime) && old(self.ctime)
    }
}

/// A secret file's values as last read.
struct Remembered {
    stamp: Stamp,
    values: Arc<Vec<String>>,
}

/// The project's own secret values, remembered per file while the file's
/// stamp stays (see the module's documentation). One per daemon.
#[derive(Default)]
pub struct SecretValues {
    files: Mutex<FxHashMap<PathBuf, Remembered>>,
    /// Files read (not taken from memory), for tests and measurements.
    reads: std::sync::atomic::AtomicUsize,
}

impl SecretValues {
    /// The values of `KEY=value` (or `KEY: value`) lines in `files`
    /// (relative to `root`, as `sandbox::surface::redactable_files` names
    /// them), sorted and without duplicates. Reads the disk: call it from
    /// the daemon, not a gate.
    pub fn values(&self, root: &Path, files: &[PathBuf]) -> Vec<String> {
        let mut out = Vec::new();
        let mut bytes = 0u64;
        let mut remembered = crate::util::sync::lock(&self.files);
        for rel in files.iter().filter(|rel| searched(rel)) {
            let path = root.join(rel);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
                continue;
            }
            bytes += meta.len();
            if bytes > MAX_SECRET_BYTES {
                tracing::warn!(
                    "the secret files of {} hold more than {MAX_SECRET_BYTES} bytes \
                     (MAX_SECRET_BYTES): the values of {} and the files after it are not \
                     redacted from tool output",
                    root.display(),
                    rel.display()
                );
                break;
            }
            let stamp = Stamp::of(&meta);
            if let Some(known) = remembered.get(&path).filter(|r| r.stamp == stamp) {
                out.extend(known.values.iter().cloned());
                continue;
            }
            let read_at = SystemTime::now();
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some((text, read_stamp)) = read_small_file(&path) else {
                continue;
            };
            let values = values_in(&text);
            out.extend(values.iter().cloned());
            if read_stamp.trusted(read_at) {
                if remembered.len() >= MAX_REMEMBERED_SECRET_FILES {
                    remembered.clear();
                }
                remembered.insert(
                    path,
                    Remembered {
                        stamp: read_stamp,
                        values: Arc::new(values),
                    },
                );
            } else {
                remembered.remove(&path);
            }
        }
        drop(remembered);
        out.sort();
        out.dedup();
        if out.len() > MAX_SECRET_VALUES {
            tracing::warn!(
                "the secret files of {} hold {} values, more than {MAX_SECRET_VALUES} \
                 (MAX_SECRET_VALUES): the rest are not redacted from tool output",
                root.display(),
                out.len()
            );
            out.truncate(MAX_SECRET_VALUES);
        }
        out
    }

    /// How many secret files were read rather than taken from memory.
    pub fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Whether a secret file at `rel` is searched: not inside a directory
/// of [`SKIP_DIRS`].
fn searched(rel: &Path) -> bool {
    !rel.components().any(|c| match c {
        Component::Normal(name) => name.to_str().is_some_and(|n| SKIP_DIRS.contains(&n)),
        _ => false,
    })
}

/// A regular file's text, read on the host without following a link and
/// without blocking: a sandboxed command may have swapped the file for a
/// link or a FIFO since the directory was listed. Larger than
/// [`MAX_FILE_BYTES`], not a regular file, or not UTF-8: nothing. With the
/// text, the stamp of the file it was read from (taken before reading).
fn read_small_file(path: &Path) -> Option<(String, Stamp)> {
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
    Some((text, Stamp::of(&meta)))
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
        assert!(read_small_file(&link).is_none());
        let fifo = dir.path().join("fifo.env");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Returns at once (no writer would ever come).
        assert!(read_small_file(&fifo).is_none());
        assert!(read_small_file(&outside).unwrap().0.contains("TOKEN="));
    }

    #[test]
    fn secret_files_are_named_by_the_gates_rule() {
        for name in [
            ".env",
            ".env.local",
            ".envrc",
            "secrets.yaml",
            "api_token",
            "server.key",
        ] {
            assert!(is_secret_file_name(name), "{name}");
            // The sandbox's walk names the files by the same rule.
            assert!(
                crate::control_surface::secret_names::is_project_secret_name(name),
                "{name}"
            );
        }
        for name in [
            ".env.example",
            "README.md",
            "secrets.rs",
            "tokenizer.json",
            "Cargo.toml",
        ] {
            assert!(!is_secret_file_name(name), "{name}");
            assert!(
                !crate::control_surface::secret_names::is_project_secret_name(name),
                "{name}"
            );
        }
    }

    fn set_mtime(path: &Path, secs: i64) {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.unsigned_abs());
        let times = std::fs::FileTimes::new().set_accessed(at).set_modified(at);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_times(times)
            .unwrap();
    }

    #[test]
    fn values_are_remembered_while_the_stamp_stays_and_trusted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let env = root.join(".env");
        std::fs::write(&env, "TOKEN=abcdefgh12345\n").expect("write");
        let files = vec![PathBuf::from(".env"), PathBuf::from("target/.env")];
        std::fs::create_dir(root.join("target")).expect("mkdir");
        std::fs::write(root.join("target/.env"), "TOKEN=buildoutput999\n").expect("write");
        let cache = SecretValues::default();
        // Just written: its times are too recent to trust, read every call.
        assert_eq!(cache.values(root, &files), ["abcdefgh12345"]);
        assert_eq!(cache.values(root, &files), ["abcdefgh12345"]);
        assert_eq!(cache.reads(), 2, "a fresh file is not remembered");
        // Same size, the same modification time as before: only the
        // status-change time (and the racy rule) can tell.
        set_mtime(&env, 1_000_000_000);
        assert_eq!(cache.values(root, &files), ["abcdefgh12345"]);
        std::fs::write(&env, "TOKEN=zyxwvuts98765\n").expect("write");
        set_mtime(&env, 1_000_000_000);
        assert_eq!(cache.values(root, &files), ["zyxwvuts98765"]);
        assert_eq!(cache.reads(), 4);
        // Once the status-change time is old enough, the file is not read
        // again while nothing changes.
        std::thread::sleep(TRUSTED_AGE + Duration::from_millis(50));
        assert_eq!(cache.values(root, &files), ["zyxwvuts98765"]);
        assert_eq!(cache.values(root, &files), ["zyxwvuts98765"]);
        assert_eq!(cache.reads(), 5);
        // Replaced by a link: not read through it, and the old values go.
        std::fs::remove_file(&env).expect("rm");
        std::os::unix::fs::symlink(root.join("target/.env"), &env).expect("link");
        assert!(cache.values(root, &files).is_empty());
    }
}
