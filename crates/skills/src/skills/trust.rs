//! Trust for project skills, keyed by exact content (like direnv's `allow`).
//!
//! A project's `.passepartout/skills/` lives inside the working directory,
//! which the agent itself (and anyone who sends the person a repository)
//! can write. A skill there can add tools, prompts and rules, so it loads
//! only after the person has said "I trust this exact file": the store
//! records the file's canonical path and the SHA-256 of its bytes. Any
//! change to the file changes the hash, and the file is untrusted again
//! until the person looks at it and trusts it once more.
//!
//! The store is one JSON file in the state directory (outside every
//! project, never mounted writable in the sandbox), mode 0600, replaced
//! atomically (temporary file, fsync, rename, fsync of the directory). Two
//! trust commands racing can lose one of the two entries; the loser's file
//! then stays untrusted, which fails closed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::paths::TRUST_FILE_NAME;

/// The largest trust store read, in bytes: far more than any person trusts
/// by hand, small enough that a corrupted file cannot exhaust memory.
pub const MAX_TRUST_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// What the trust store could not do.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: unreadable trust store: {message}; fix or delete it (every project skill is untrusted meanwhile)")]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{path}: the trust store is {len} bytes, more than the {MAX_TRUST_FILE_BYTES}-byte limit"
    )]
    TooBig { path: PathBuf, len: u64 },
}

fn io_err(path: &Path, source: std::io::Error) -> TrustError {
    TrustError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One trusted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// SHA-256 of the file's bytes when the person trusted it, lowercase hex.
    pub sha256: String,
    /// When, RFC 3339 UTC.
    pub trusted_at: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TrustFile {
    version: u32,
    /// By canonical path.
    skills: BTreeMap<PathBuf, TrustEntry>,
}

/// A snapshot of the store: what the loader consults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trusted(BTreeMap<PathBuf, TrustEntry>);

/// Whether a file may load, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    /// Trusted with exactly these bytes.
    Trusted,
    /// Never trusted.
    Unknown,
    /// Trusted once, but the bytes changed since.
    Changed,
}

impl Trusted {
    /// The state of the file at `canonical` whose bytes hash to `sha256`.
    pub fn state(&self, canonical: &Path, sha256: &str) -> TrustState {
        match self.0.get(canonical) {
            Some(e) if e.sha256 == sha256 => TrustState::Trusted,
            Some(_) => TrustState::Changed,
            None => TrustState::Unknown,
        }
    }

    /// Number of trusted files.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn insert_for_test(&mut self, canonical: &Path, sha256: &str) {
        self.0.insert(
            canonical.to_path_buf(),
            TrustEntry {
                sha256: sha256.into(),
                trusted_at: String::new(),
            },
        );
    }
}

/// The trust store file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl TrustStore {
    /// The store at `path`.
    pub fn new(path: impl Into<PathBuf>) -> TrustStore {
        TrustStore { path: path.into() }
    }

    /// The store in a state directory (`STATE/trusted-skills.json`).
    pub fn in_state_dir(state_dir: &Path) -> TrustStore {
        TrustStore::new(crate::paths::StateDir::new(state_dir).trust_file())
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The trusted files now. A missing store trusts nothing.
    pub fn load(&self) -> Result<Trusted, TrustError> {
        Ok(Trusted(self.read()?.skills))
    }

    fn read(&self) -> Result<TrustFile, TrustError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustFile::default()),
            Err(e) => return Err(io_err(&self.path, e)),
        };
        if meta.len() > MAX_TRUST_FILE_BYTES {
            return Err(TrustError::TooBig {
                path: self.path.clone(),
                len: meta.len(),
            });
        }
        let bytes = std::fs::read(&self.path).map_err(|e| io_err(&self.path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| TrustError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Trust `bytes` as the content of the file at `canonical` (the caller
    /// read the bytes once, showed them to the person, and hashes the very
    /// bytes shown). Returns the hash recorded.
    pub fn trust(&self, canonical: &Path, bytes: &[u8]) -> Result<String, TrustError> {
        let sha256 = sha256_hex(bytes);
        let mut file = self.read()?;
        file.version = 1;
        file.skills.insert(
            canonical.to_path_buf(),
            TrustEntry {
                sha256: sha256.clone(),
                trusted_at: crate::util::time::now_rfc3339(),
            },
        );
        self.write(&file)?;
        Ok(sha256)
    }

    /// Forget the file at `canonical`. Returns whether it was trusted.
    pub fn untrust(&self, canonical: &Path) -> Result<bool, TrustError> {
        let mut file = self.read()?;
        let was = file.skills.remove(canonical).is_some();
        if was {
            file.version = 1;
            self.write(&file)?;
        }
        Ok(was)
    }

    fn write(&self, file: &TrustFile) -> Result<(), TrustError> {
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        // Plain data with path keys that serde_json writes as strings; a
        // non-UTF-8 path is the only failure and is reported, not unwrapped.
        let mut bytes = serde_json::to_vec_pretty(file).map_err(|e| TrustError::Corrupt {
            path: self.path.clone(),
            message: format!("cannot serialise: {e}"),
        })?;
        bytes.push(b'\n');
        crate::util::fs::write_atomic(&self.path, &bytes, crate::util::fs::Atomic::DURABLE)
            .map_err(|e| io_err(&self.path, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_follows_the_exact_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_state_dir(&dir.path().join("state"));
        let file = Path::new("/p/.passepartout/skills/a.org");
        assert_eq!(
            store.load().unwrap().state(file, &sha256_hex(b"x")),
            TrustState::Unknown
        );
        let sha = store.trust(file, b"x").unwrap();
        assert_eq!(sha, sha256_hex(b"x"));
        let trusted = store.load().unwrap();
        assert_eq!(trusted.state(file, &sha256_hex(b"x")), TrustState::Trusted);
        assert_eq!(trusted.state(file, &sha256_hex(b"y")), TrustState::Changed);
        assert_eq!(
            trusted.state(Path::new("/other.org"), &sha),
            TrustState::Unknown
        );
        assert!(store.untrust(file).unwrap());
        assert!(!store.untrust(file).unwrap());
        assert!(store.load().unwrap().is_empty());
    }

    #[test]
    fn the_store_is_private_and_a_corrupt_one_says_how_to_fix_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_state_dir(dir.path());
        store.trust(Path::new("/a.org"), b"a").unwrap();
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(store.path(), "{ not json").unwrap();
        let err = store.load().unwrap_err().to_string();
        assert!(
            err.contains("unreadable trust store") && err.contains("fix or delete it"),
            "{err}"
        );
    }
}
