//! The project's own secret values, and the shapes they take in output.
//!
//! Redacting credentials by their shape (`KEY=value`, `sk-…`) misses a
//! secret that went through a transform: `git show HEAD:.env | base64`,
//! `xxd -p`, `rev`, `od -c`, `sed 's/./& /g'`. The daemon can do better
//! than guess: it knows the values, because it can read the project's
//! secret files host-side ([`SecretValues`]). Tool output is then
//! searched for each value in the common encodings
//! ([`crate::gates::known_values`]:
//! plain, base64 at the three byte alignments, hex lower and upper,
//! reversed, spaced out one character at a time) before the model sees it.
//!
//! Which values: every assignment of a dotenv or other secret-named file,
//! and from the files credentials are kept in, what is secret there
//! ([`values_of_file`]): passwords and tokens in URLs (`.git/config`'s
//! remotes, `.git-credentials`, `pip.conf`, a `DATABASE_URL`), the
//! environment of a `docker-compose.yml` whose name or value says secret,
//! Docker's `auth` (and the password inside it), the secret keys of JSON
//! credentials (a GCP service-account key's `private_key`), netrc and
//! pgpass passwords, npm/PyPI/cargo/gem tokens, kube config tokens and
//! private key files whole. The files are the project's (found by the
//! walk below, plus [`PROJECT_VALUE_FILES`]) and the person's own
//! ([`HOME_VALUE_FILES`]). Each value carries where it comes from, which
//! the redaction shows.
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
use crate::gates::known_values::{base64_decode, KnownValue};
use crate::gates::protected_paths::{is_project_secret, protection};
use crate::gates::shell::static_regex;
use crate::gates::GateContext;

pub use crate::gates::known_values::MIN_VALUE;

/// Files in a project that hold credentials under a name the walk does
/// not take for a secret (relative to the project's root).
pub const PROJECT_VALUE_FILES: &[&str] = &[
    ".git/config",
    ".docker/config.json",
    ".kube/config",
    ".aws/credentials",
    ".cargo/credentials.toml",
    ".cargo/credentials",
];

/// The person's credential files whose values are redacted (relative to
/// their home): the stores the gates ask about reading
/// (`protected_paths`), those that are files.
pub const HOME_VALUE_FILES: &[&str] = &[
    ".git-credentials",
    ".gitconfig",
    ".config/git/config",
    ".netrc",
    ".pgpass",
    ".docker/config.json",
    ".npmrc",
    ".pypirc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".kube/config",
    ".aws/credentials",
    ".azure/accessTokens.json",
    ".config/gcloud/application_default_credentials.json",
    ".config/gh/hosts.yml",
    ".ssh/id_rsa",
    ".ssh/id_ecdsa",
    ".ssh/id_ed25519",
    ".ssh/id_dsa",
];

/// Secret files larger than this are not read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Bytes of secret files whose values one call takes at most (the files
/// are taken in the walk's order, shallow first); past it the rest are
/// not read and a warning names this limit.
pub const MAX_SECRET_BYTES: u64 = 1024 * 1024;

/// Values one call takes at most (each adds a dozen forms to the
/// search); past it the rest are not redacted and a warning names this
/// limit.
pub const MAX_SECRET_VALUES: usize = 512;

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
    values: Arc<Vec<KnownValue>>,
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
    /// The values of the project's secret `files` (relative to `root`, as
    /// `sandbox::surface::redactable_files` names them), of
    /// [`PROJECT_VALUE_FILES`] and of the person's [`HOME_VALUE_FILES`]
    /// under `home`, sorted and without duplicates. Reads the disk: call
    /// it from the daemon, not a gate.
    pub fn values(&self, root: &Path, files: &[PathBuf], home: Option<&Path>) -> Vec<KnownValue> {
        let mut sources: Vec<(PathBuf, String)> = files
            .iter()
            .filter(|rel| searched(rel))
            .map(|rel| (root.join(rel), rel.display().to_string()))
            .collect();
        sources.extend(
            PROJECT_VALUE_FILES
                .iter()
                .map(|rel| (root.join(rel), (*rel).to_string())),
        );
        if let Some(home) = home {
            sources.extend(
                HOME_VALUE_FILES
                    .iter()
                    .map(|rel| (home.join(rel), format!("~/{rel}"))),
            );
        }
        let mut out = Vec::new();
        let mut bytes = 0u64;
        let mut remembered = crate::util::sync::lock(&self.files);
        for (path, shown) in sources {
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
                     (MAX_SECRET_BYTES): the values of {shown} and the files after it are not \
                     redacted from tool output",
                    root.display(),
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
            let values = values_of_file(&shown, &text);
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
        out.sort_by(|a, b| a.value.cmp(&b.value));
        out.dedup_by(|a, b| a.value == b.value);
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

/// The values of assignments in a secret file's text (every key).
pub fn values_in(text: &str) -> Vec<String> {
    assignments(text)
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| v.len() >= MIN_VALUE && !v.starts_with('$'))
        .collect()
}

/// `KEY=value`, `KEY = "value"`, `KEY: value`, `- KEY=value` lines (dotenv,
/// INI, TOML, YAML), comments skipped, quotes taken off.
fn assignments(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("- ").unwrap_or(line);
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=').or_else(|| line.split_once(": ")) else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        out.push((key.to_string(), value.to_string()));
    }
    out
}

/// Whether a key names a secret (`password`, `_authToken`,
/// `aws_secret_access_key`, `client-key-data`, `DATABASE_DSN`).
fn secret_key(key: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        static_regex(
            r"(?i)pass|secret|token|auth|api.?key|private|credential|key.?data|access.?key|session|dsn|signing|(?:^|[_.:-])key$",
        )
    })
    .is_match(key)
}

/// The user and password of each `scheme://user:password@` in `text`.
fn url_userinfo(text: &str) -> Vec<(String, Option<String>)> {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        static_regex(
            r#"[A-Za-z][A-Za-z0-9+.-]{1,20}://([^\s/:@"'<>]{1,256})(?::([^\s/@"'<>]{1,256}))?@"#,
        )
    });
    re.captures_iter(text)
        .filter_map(|c| {
            let user = c.get(1)?.as_str().to_string();
            Some((user, c.get(2).map(|p| p.as_str().to_string())))
        })
        .collect()
}

/// A value worth searching for: long enough, not a reference.
fn worth(value: &str) -> bool {
    value.len() >= MIN_VALUE && !crate::gates::secret_rules::is_reference(value)
}

/// Passwords (and tokens standing in for a user) in the URLs of `value`.
fn url_secrets(value: &str, what: &str, shown: &str, out: &mut Vec<KnownValue>) {
    for (user, password) in url_userinfo(value) {
        match password {
            Some(p) if worth(&p) => {
                out.push(KnownValue::new(
                    p,
                    format!("password in {what} from {shown}"),
                ));
            }
            // `https://<token>@host`: the user is the credential.
            None if user.len() >= 20 => {
                out.push(KnownValue::new(
                    user,
                    format!("token in {what} from {shown}"),
                ));
            }
            _ => {}
        }
    }
}

/// The secret values of a file, by what kind of file it is; `shown` is
/// its name as the redaction says it (`docker-compose.yml`, `~/.npmrc`).
pub fn values_of_file(shown: &str, text: &str) -> Vec<KnownValue> {
    let mut out = Vec::new();
    let name = shown.rsplit('/').next().unwrap_or(shown);
    let in_git =
        shown.ends_with(".git/config") || name == ".gitconfig" || shown.ends_with("git/config");
    if text.contains("PRIVATE KEY-----") && !name.ends_with(".json") {
        // A key file (or a key pasted into another file): whole, so it is
        // found also base64-encoded; the rules find it as text.
        out.push(KnownValue::new(text, format!("private key from {shown}")));
        return out;
    }
    if in_git {
        for (key, value) in assignments(text) {
            let key = key.to_ascii_lowercase();
            if key == "url"
                || key == "pushurl"
                || key.starts_with("url ")
                || key.starts_with("insteadof")
            {
                url_secrets(&value, "the remote URL", shown, &mut out);
            } else if key == "extraheader" || secret_key(&key) {
                // `AUTHORIZATION: basic <base64>`: the credential is the
                // last word.
                if let Some(last) = value.split_whitespace().last().filter(|v| worth(v)) {
                    out.push(KnownValue::new(
                        last,
                        format!("value of {key} from {shown}"),
                    ));
                }
            }
        }
        return out;
    }
    if name == ".git-credentials" {
        for line in text.lines() {
            url_secrets(line.trim(), "a stored URL", shown, &mut out);
        }
        return out;
    }
    if matches!(name, ".netrc" | "_netrc" | ".authinfo") {
        let words: Vec<&str> = text.split_whitespace().collect();
        for pair in words.windows(2) {
            if matches!(pair[0], "password" | "account") && worth(pair[1]) {
                out.push(KnownValue::new(pair[1], format!("password from {shown}")));
            }
        }
        return out;
    }
    if name == ".pgpass" {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some(p) = line.rsplit(':').next().filter(|p| worth(p)) {
                out.push(KnownValue::new(p, format!("password from {shown}")));
            }
        }
        return out;
    }
    if name.ends_with(".json") {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
            json_values(&json, "", shown, &mut out);
            return out;
        }
    }
    // Every assignment of an environment file or a file named like a
    // secret; of other credential files (INI, TOML, YAML, compose), those
    // whose key says secret, and the passwords of URLs anywhere.
    let every_key = crate::control_surface::secret_names::is_project_secret_name(name)
        && !matches!(name, "credentials" | "credentials.toml" | "config");
    for (key, value) in assignments(text) {
        if !worth(&value) {
            continue;
        }
        let with_url = !url_userinfo(&value).is_empty();
        if every_key || secret_key(&key) || with_url {
            url_secrets(&value, &key, shown, &mut out);
            out.push(KnownValue::new(
                value,
                format!("value of {key} from {shown}"),
            ));
        }
    }
    out
}

/// The secret values in a JSON credential file: strings under a secret
/// key (`auth`, `password`, `private_key`, `client_secret`, `token`), the
/// password inside Docker's `auth`, and passwords in URLs.
fn json_values(json: &serde_json::Value, key: &str, shown: &str, out: &mut Vec<KnownValue>) {
    match json {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                json_values(v, k, shown, out);
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                json_values(v, key, shown, out);
            }
        }
        serde_json::Value::String(value) => {
            url_secrets(value, key, shown, out);
            if !secret_key(key) || !worth(value) {
                return;
            }
            out.push(KnownValue::new(
                value.as_str(),
                format!("value of {key} from {shown}"),
            ));
            if key == "auth" {
                // Docker's `auth` is base64 of `user:password`.
                let decoded = base64_decode(value).and_then(|b| String::from_utf8(b).ok());
                if let Some(password) = decoded
                    .as_deref()
                    .and_then(|d| d.split_once(':'))
                    .map(|(_, p)| p)
                {
                    if worth(password) {
                        out.push(KnownValue::new(
                            password,
                            format!("password in auth from {shown}"),
                        ));
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(shown: &str, text: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = values_of_file(shown, text)
            .into_iter()
            .map(|k| (k.value, k.label.to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn values_come_from_what_each_kind_of_file_keeps_secret() {
        let pair = |v: &str, l: &str| (v.to_string(), l.to_string());
        assert_eq!(
            labelled(
                ".git/config",
                "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://deploy:Hq7v2Lx9Wp@git.example.com/a.git\n\
                 [remote \"gl\"]\n\turl = https://oauth2:glpat-xY3kP9mQ2vL7nR4wZ8tB@gitlab.com/g/p.git\n"
            ),
            [
                pair("Hq7v2Lx9Wp", "password in the remote URL from .git/config"),
                pair("glpat-xY3kP9mQ2vL7nR4wZ8tB", "password in the remote URL from .git/config"),
            ]
        );
        assert_eq!(
            labelled(
                "docker-compose.yml",
                "services:\n  app:\n    image: postgres:16-alpine\n    environment:\n      - DATABASE_URL=postgres://app:Pq7Lm2Xv9Rt@db/app\n      - NODE_ENV=production\n      API_SECRET: Zz9Yy8Xx7Ww6\n"
            ),
            [
                pair("Pq7Lm2Xv9Rt", "password in DATABASE_URL from docker-compose.yml"),
                pair("Zz9Yy8Xx7Ww6", "value of API_SECRET from docker-compose.yml"),
                pair("postgres://app:Pq7Lm2Xv9Rt@db/app", "value of DATABASE_URL from docker-compose.yml"),
            ]
        );
        // base64 of `deploy:s3cretPw123`
        assert_eq!(
            labelled(
                ".docker/config.json",
                r#"{"auths": {"registry.example.com": {"auth": "ZGVwbG95OnMzY3JldFB3MTIz"}}}"#
            ),
            [
                pair(
                    "ZGVwbG95OnMzY3JldFB3MTIz",
                    "value of auth from .docker/config.json"
                ),
                pair("s3cretPw123", "password in auth from .docker/config.json"),
            ]
        );
        let sa = serde_json::json!({
            "type": "service_account",
            "project_id": "my-project-123456",
            "private_key_id": "0123456789abcdef0123",
            "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n",
            "client_email": "sa@my-project-123456.iam.gserviceaccount.com",
        });
        let got = labelled("my-project-123456-0123456789ab.json", &sa.to_string());
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|(v, _)| !v.contains("gserviceaccount")));
        assert_eq!(
            labelled(
                "~/.netrc",
                "machine api.example.com login me password n3tRcPass99\n"
            ),
            [pair("n3tRcPass99", "password from ~/.netrc")]
        );
        assert_eq!(
            labelled(
                "~/.npmrc",
                "registry=https://registry.npmjs.org/\n//registry.npmjs.org/:_authToken=npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789\n"
            ),
            [pair(
                "npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
                "value of //registry.npmjs.org/:_authToken from ~/.npmrc"
            )]
        );
        assert_eq!(
            labelled(
                ".aws/credentials",
                "[default]\nregion = eu-central-1\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
            )
            .len(),
            2
        );
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
        assert_eq!(
            labelled("~/.ssh/id_ed25519", key),
            [pair(key, "private key from ~/.ssh/id_ed25519")]
        );
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
        let plain = |v: Vec<KnownValue>| v.into_iter().map(|k| k.value).collect::<Vec<_>>();
        // Just written: its times are too recent to trust, read every call.
        assert_eq!(plain(cache.values(root, &files, None)), ["abcdefgh12345"]);
        assert_eq!(plain(cache.values(root, &files, None)), ["abcdefgh12345"]);
        assert_eq!(cache.reads(), 2, "a fresh file is not remembered");
        // Same size, the same modification time as before: only the
        // status-change time (and the racy rule) can tell.
        set_mtime(&env, 1_000_000_000);
        assert_eq!(plain(cache.values(root, &files, None)), ["abcdefgh12345"]);
        std::fs::write(&env, "TOKEN=zyxwvuts98765\n").expect("write");
        set_mtime(&env, 1_000_000_000);
        assert_eq!(plain(cache.values(root, &files, None)), ["zyxwvuts98765"]);
        assert_eq!(cache.reads(), 4);
        // Once the status-change time is old enough, the file is not read
        // again while nothing changes.
        std::thread::sleep(TRUSTED_AGE + Duration::from_millis(50));
        assert_eq!(plain(cache.values(root, &files, None)), ["zyxwvuts98765"]);
        assert_eq!(plain(cache.values(root, &files, None)), ["zyxwvuts98765"]);
        assert_eq!(cache.reads(), 5);
        // Replaced by a link: not read through it, and the old values go.
        std::fs::remove_file(&env).expect("rm");
        std::os::unix::fs::symlink(root.join("target/.env"), &env).expect("link");
        assert!(plain(cache.values(root, &files, None)).is_empty());
    }
}
