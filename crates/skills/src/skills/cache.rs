//! The skill parse cache: a skill file is parsed once per content, not once
//! per daemon start, and a file that did not change is not even read.
//!
//! Parsing (orgize, then every rule's regex and examples) costs about a
//! millisecond per file in a release build, so a daemon with 1,000 skills
//! paid seconds at its first `session/new`. The cache keeps, per file,
//! what parsing produced (the skill and its diagnostics, with their
//! file:line) together with the SHA-256 of the bytes parsed, in ONE file
//! per set of skill directories: `STATE/skill-cache/<scope>.json`, where
//! the scope is a hash of the user and project skill directories. Reading
//! one file of a few MiB and decoding it from a slice is what makes a
//! cached load of 1,000 skills cost tens of milliseconds rather than a
//! hundred (1,000 opens, and serde_json reading through `io::Read`).
//!
//! **Which entry stands for a file.** An entry is used only when the file's
//! bytes hash to the entry's SHA-256, so an edit always parses afresh. The
//! hash is skipped when the file's `lstat` is the one recorded (device,
//! inode, size, mtime and ctime, to the nanosecond) *and* that record was
//! settled: both times lay more than [`SETTLE_MARGIN`] before the moment
//! the file was examined. A write after that moment stamps a ctime at
//! least the clock's time minus one coarse tick (a filesystem with
//! 1-second or 2-second timestamps included), so it cannot reproduce the
//! recorded ctime, and nobody can set a ctime by hand: a same-tick
//! rewrite is never mistaken for the old content (the "racy git" problem).
//! An unsettled file is read and hashed each load until it settles. The
//! `lstat` is taken before the bytes are read, so a write in between
//! leaves a record that no longer matches.
//!
//! Trust uses the same SHA-256: for a project file it is either the hash
//! of the bytes just read, or the hash recorded for exactly that settled
//! `lstat` (this file is beside the trust store, outside the project, where
//! the agent cannot write; like the store it is not used when the state
//! directory lies inside the project). Folders in the Agent Skills format
//! and symbolic links are always read and hashed (their content is more
//! than one inode).
//!
//! Bounded and self-healing: a cache file larger than [`MAX_CACHE_BYTES`]
//! or holding more than [`MAX_CACHE_FILES`] entries is not read; one that
//! does not decode, or was written by another format or binary version, is
//! ignored with a warning and rewritten by the same load. Each load rewrites
//! the file (atomically: temporary file, then rename) when anything
//! changed, keeping only the files it saw, so a deleted skill's entry goes
//! with it. At most [`MAX_SCOPES`] scope files are kept; when a new one
//! would pass that, the directory is emptied first.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_client_protocol_schema::v1::ToolKind;
use serde::{Deserialize, Serialize};

use crate::action::Approval;
use crate::gates::Decision;
use crate::llm::ToolSpec;
use crate::tools::{Tool, ToolSource};

use super::diagnostic::Diagnostic;
use super::lazy_regex::LazyRegex;
use super::planner::SkillPlanner;
use super::rules::Rule;
use super::trust::sha256_hex;
use super::{Command, Origin, Skill, Trigger};

/// The directory name under the state directory.
pub const CACHE_DIR_NAME: &str = crate::paths::SKILL_CACHE_DIR;

/// The largest cache file read or written (1,000 generated skills of 3 KiB
/// each take about 6 MiB).
pub const MAX_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// The most files one cache file describes; a larger skill set is loaded
/// without a cache for the files past it.
pub const MAX_CACHE_FILES: usize = 8192;

/// The most cache files (one per set of skill directories) kept in the
/// directory; when a new one would pass it, every file is removed first.
pub const MAX_SCOPES: usize = 256;

/// How long before the moment a file is examined its mtime and ctime must
/// lie for its `lstat` to stand for its content: more than the coarsest
/// timestamp granularity in use (2 s on FAT, 1 s on ext3 and HFS+; a
/// jiffy on ext4, btrfs, xfs and tmpfs).
pub const SETTLE_MARGIN: Duration = Duration::from_secs(3);

/// Bumped whenever the stored shape or the parser's output changes in a
/// way the crate version would not show.
const FORMAT: u32 = 2;

/// What a cache file must say it is to be used.
fn format_tag() -> String {
    format!(
        "passepartout skill cache {FORMAT} {}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The parse cache for one set of skill directories.
#[derive(Debug, Clone)]
pub struct ParseCache {
    dir: PathBuf,
    file: PathBuf,
}

/// What a cache file holds.
#[derive(Serialize, Deserialize)]
struct Stored {
    /// [`format_tag`] of the binary that wrote it.
    format: String,
    files: Vec<StoredFile>,
}

/// One skill file's entry.
#[derive(Serialize, Deserialize)]
struct StoredFile {
    path: PathBuf,
    origin: Origin,
    /// SHA-256 of the bytes parsed, lowercase hex.
    sha256: String,
    /// The file's `lstat` when those bytes were read, if it had settled.
    stat: Option<StatRecord>,
    skill: Option<CachedSkill>,
    diagnostics: Vec<Diagnostic>,
}

/// What identifies one version of a file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatRecord {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl StatRecord {
    /// The record of a regular file's `lstat`; `None` for anything else
    /// (a symbolic link's target could change without its own times).
    pub fn of(meta: &std::fs::Metadata) -> Option<StatRecord> {
        meta.file_type().is_file().then(|| StatRecord {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        })
    }

    /// Whether both times lie more than [`SETTLE_MARGIN`] before `examined`
    /// (the clock read before the `lstat`).
    pub fn settled(&self, examined: SystemTime) -> bool {
        let Ok(now) = examined.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let Some(limit) = now.checked_sub(SETTLE_MARGIN) else {
            return false;
        };
        let limit = (limit.as_secs() as i64, i64::from(limit.subsec_nanos()));
        (self.mtime, self.mtime_nsec) < limit && (self.ctime, self.ctime_nsec) < limit
    }
}

#[derive(Serialize, Deserialize)]
struct CachedSkill {
    name: String,
    description: String,
    priority: i32,
    trigger: CachedTrigger,
    prompt: String,
    tools: Vec<CachedTool>,
    rules: Vec<CachedRule>,
    commands: Vec<Command>,
    path: PathBuf,
    origin: Origin,
}

#[derive(Serialize, Deserialize)]
enum CachedTrigger {
    Always,
    Never,
    /// The compiled regex's source (with its `(?i)`).
    Pattern(String),
}

#[derive(Serialize, Deserialize)]
struct CachedTool {
    spec: ToolSpec,
    kind: ToolKind,
    approval: Approval,
    timeout_secs: Option<u64>,
    source: ToolSource,
    planner: SkillPlanner,
}

#[derive(Serialize, Deserialize)]
struct CachedRule {
    name: String,
    decision: Decision,
    tool: String,
    target: String,
    pattern: Option<String>,
    reason: String,
    gate: String,
}

/// What parsing one file produced.
pub type Parsed = (Option<Skill>, Vec<Diagnostic>);

/// An entry the next load keeps.
enum Kept {
    /// Taken from the file read at the start, with its `lstat` record now.
    Stored {
        path: PathBuf,
        origin: Origin,
        sha256: String,
        stat: Option<StatRecord>,
    },
    /// Parsed by this load.
    Fresh(Box<StoredFile>),
}

/// One load's use of the cache: the entries read at its start, and those
/// it keeps for the next load.
///
/// A hit moves the stored parse into the skill set (no copy: a cached load
/// of 1,000 skills would otherwise hold every skill twice and spend its
/// time in `malloc` and `free`); the entry is remembered by its key. Only
/// when the file must be rewritten (something changed) is it read once
/// more, for the entries kept unchanged.
pub struct CacheSession<'a> {
    cache: &'a ParseCache,
    previous: HashMap<(PathBuf, Origin), StoredFile>,
    kept: Vec<Kept>,
    /// Whether the file must be rewritten (an entry added, changed or gone).
    changed: bool,
    /// Why the cache file was not used, when it existed but was unusable.
    warning: Option<String>,
}

impl ParseCache {
    /// The cache for the skill directories named by `scope` (any text that
    /// differs between sets of directories) under a state directory.
    pub fn in_state_dir(state: &Path, scope: &str) -> Self {
        let dir = state.join(CACHE_DIR_NAME);
        let name = &sha256_hex(format!("skill cache scope\0{scope}").as_bytes())[..32];
        let file = dir.join(format!("{name}.json"));
        ParseCache { dir, file }
    }

    /// The directory cache files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// This scope's cache file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Read the cache file for one load. Never fails: an unusable file
    /// starts an empty session that says why ([`CacheSession::warning`]).
    pub fn open(&self) -> CacheSession<'_> {
        let mut session = CacheSession {
            cache: self,
            previous: HashMap::new(),
            kept: Vec::new(),
            changed: false,
            warning: None,
        };
        match self.read() {
            Ok(files) => {
                session.previous = files
                    .into_iter()
                    .map(|f| ((f.path.clone(), f.origin), f))
                    .collect();
            }
            Err(Some(why)) => {
                tracing::warn!(file = %self.file.display(), "skill parse cache not used, rebuilding it: {why}");
                session.warning = Some(why);
                session.changed = true;
            }
            Err(None) => session.changed = true,
        }
        session
    }

    /// The stored entries; `Err(None)` when there is none to use and
    /// nothing to say (no file yet, or another version's).
    fn read(&self) -> Result<Vec<StoredFile>, Option<String>> {
        let bytes = match read_bounded(&self.file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
            Err(e) => return Err(Some(e.to_string())),
        };
        // `format` is the first field written: another binary's file is
        // told apart without decoding it.
        let ours = format!("{{\"format\":\"{}\"", format_tag());
        if !bytes.starts_with(ours.as_bytes()) {
            if bytes.starts_with(b"{\"format\":\"passepartout skill cache ") {
                // Another binary's: expected after an upgrade, not worth a word.
                return Err(None);
            }
            return Err(Some("it is not a skill cache file of any version".into()));
        }
        let stored: Stored = serde_json::from_slice(&bytes)
            .map_err(|e| Some(format!("it does not decode ({e})")))?;
        if stored.files.len() > MAX_CACHE_FILES {
            return Err(Some(format!(
                "it describes {} files, more than the limit of {MAX_CACHE_FILES}",
                stored.files.len()
            )));
        }
        Ok(stored.files)
    }

    /// Replace the file with `files`. Failures are ignored: the cache is an
    /// optimisation.
    fn write(&self, files: Vec<StoredFile>) {
        let stored = Stored {
            format: format_tag(),
            files,
        };
        let Ok(json) = serde_json::to_vec(&stored) else {
            return;
        };
        if json.len() as u64 > MAX_CACHE_BYTES {
            tracing::warn!(
                bytes = json.len(),
                "skill parse cache not written: larger than {MAX_CACHE_BYTES} bytes"
            );
            let _ = std::fs::remove_file(&self.file);
            return;
        }
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        self.make_room();
        // Write then rename, so a reader never sees half a file.
        let tmp = self.dir.join(format!(
            ".{}.{}.tmp",
            self.file
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            std::process::id()
        ));
        let written =
            std::fs::write(&tmp, &json).is_ok() && std::fs::rename(&tmp, &self.file).is_ok();
        if !written {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Empty the directory when a new scope file would pass [`MAX_SCOPES`]
    /// (entries of older formats, one file per skill, count too).
    fn make_room(&self) {
        if self.file.exists() {
            return;
        }
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let entries: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        if entries.len() < MAX_SCOPES {
            return;
        }
        for path in entries {
            if path.extension().is_some_and(|e| e == "json") {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// A file's bytes, refusing one larger than [`MAX_CACHE_BYTES`] before
/// reading it.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > MAX_CACHE_BYTES {
        return Err(std::io::Error::other(format!(
            "it is {len} bytes, more than the limit of {MAX_CACHE_BYTES}"
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(MAX_CACHE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CACHE_BYTES {
        return Err(std::io::Error::other(format!(
            "it grew past the limit of {MAX_CACHE_BYTES} bytes while read"
        )));
    }
    Ok(bytes)
}

impl CacheSession<'_> {
    /// Why the cache file was set aside, if it was (it is rewritten).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The cache file this session reads and writes.
    pub fn file(&self) -> &Path {
        self.cache.file()
    }

    /// The content hash and parse of the file at `path`, when its current
    /// `lstat` (`stat`, taken before anything was read) is the settled one
    /// recorded: the file is then neither read nor hashed.
    pub fn by_stat(
        &mut self,
        path: &Path,
        origin: Origin,
        stat: StatRecord,
    ) -> Option<(String, Parsed)> {
        let key = (path.to_path_buf(), origin);
        if self.previous.get(&key)?.stat != Some(stat) {
            return None;
        }
        let entry = self.previous.remove(&key)?;
        let sha256 = entry.sha256.clone();
        let parsed = self.take(entry, Some(stat))?;
        Some((sha256, parsed))
    }

    /// The parse of `path` whose bytes hash to `sha256`, if stored; the
    /// entry is kept, its `lstat` record replaced by `stat` (settled, or
    /// `None`).
    pub fn by_hash(
        &mut self,
        path: &Path,
        origin: Origin,
        sha256: &str,
        stat: Option<StatRecord>,
    ) -> Option<Parsed> {
        let key = (path.to_path_buf(), origin);
        if self.previous.get(&key)?.sha256 != sha256 {
            return None;
        }
        let entry = self.previous.remove(&key)?;
        if entry.stat != stat {
            self.changed = true;
        }
        self.take(entry, stat)
    }

    /// Move a stored entry's parse out, remembering to keep the entry.
    /// `None` (and the entry dropped) when it cannot stand.
    fn take(&mut self, entry: StoredFile, stat: Option<StatRecord>) -> Option<Parsed> {
        let StoredFile {
            path,
            origin,
            sha256,
            skill,
            diagnostics,
            ..
        } = entry;
        let skill = match skill {
            Some(s) => match s.into_skill() {
                Some(skill) => Some(skill),
                None => {
                    self.changed = true;
                    return None;
                }
            },
            None => None,
        };
        self.kept.push(Kept::Stored {
            path,
            origin,
            sha256,
            stat,
        });
        Some((skill, diagnostics))
    }

    /// Store a fresh parse of bytes hashing to `sha256`.
    pub fn put(
        &mut self,
        path: &Path,
        origin: Origin,
        sha256: String,
        stat: Option<StatRecord>,
        parsed: &Parsed,
    ) {
        self.previous.remove(&(path.to_path_buf(), origin));
        self.changed = true;
        if self.kept.len() >= MAX_CACHE_FILES || path.to_str().is_none() {
            // Past the bound, or a path JSON cannot hold: parsed each time.
            return;
        }
        let skill = match &parsed.0 {
            Some(s) => match CachedSkill::from_skill(s) {
                Some(c) => Some(c),
                // A tool not planned by a skill planner: not cacheable.
                None => return,
            },
            None => None,
        };
        self.kept.push(Kept::Fresh(Box::new(StoredFile {
            path: path.to_path_buf(),
            origin,
            sha256,
            stat,
            skill,
            diagnostics: parsed.1.clone(),
        })));
    }

    /// Write the cache file if this load changed anything: an entry added
    /// or updated, or one left unused (its file is gone or was not seen).
    pub fn finish(self) {
        if !self.changed && self.previous.is_empty() {
            return;
        }
        let mut unchanged: HashMap<(PathBuf, Origin), StoredFile> =
            if self.kept.iter().any(|k| matches!(k, Kept::Stored { .. })) {
                self.cache
                    .read()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|f| ((f.path.clone(), f.origin), f))
                    .collect()
            } else {
                HashMap::new()
            };
        let files = self
            .kept
            .into_iter()
            .filter_map(|kept| match kept {
                Kept::Fresh(entry) => Some(*entry),
                Kept::Stored {
                    path,
                    origin,
                    sha256,
                    stat,
                } => {
                    // Gone or replaced meanwhile (another daemon wrote the
                    // file): left out, parsed again next time.
                    let mut entry = unchanged.remove(&(path, origin))?;
                    (entry.sha256 == sha256).then(|| {
                        entry.stat = stat;
                        entry
                    })
                }
            })
            .collect();
        self.cache.write(files);
    }
}

impl CachedSkill {
    fn from_skill(s: &Skill) -> Option<Self> {
        let tools = s
            .tools
            .iter()
            .map(|t| {
                let planner = t.planner.as_any()?.downcast_ref::<SkillPlanner>()?.clone();
                Some(CachedTool {
                    spec: t.spec.clone(),
                    kind: t.kind,
                    approval: t.approval,
                    timeout_secs: t.timeout_secs,
                    source: t.source.clone(),
                    planner,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(CachedSkill {
            name: s.name.clone(),
            description: s.description.clone(),
            priority: s.priority,
            trigger: match &s.trigger {
                Trigger::Always => CachedTrigger::Always,
                Trigger::Never => CachedTrigger::Never,
                Trigger::Pattern(re) => CachedTrigger::Pattern(re.as_str().to_string()),
            },
            prompt: s.prompt.clone(),
            tools,
            rules: s
                .rules
                .iter()
                .map(|r| CachedRule {
                    name: r.name.clone(),
                    decision: r.decision,
                    tool: r.tool.clone(),
                    target: r.target.clone(),
                    pattern: r.pattern.as_ref().map(|p| p.as_str().to_string()),
                    reason: r.reason.clone(),
                    gate: r.gate.clone(),
                })
                .collect(),
            commands: s.commands.clone(),
            path: s.path.clone(),
            origin: s.origin,
        })
    }

    /// The skill again. Its regexes compile when first used (they compiled
    /// when the file was parsed); see [`LazyRegex`].
    fn into_skill(self) -> Option<Skill> {
        let trigger = match self.trigger {
            CachedTrigger::Always => Trigger::Always,
            CachedTrigger::Never => Trigger::Never,
            CachedTrigger::Pattern(p) => Trigger::Pattern(LazyRegex::deferred(p)),
        };
        let rules = self
            .rules
            .into_iter()
            .map(|r| Rule {
                name: r.name,
                decision: r.decision,
                tool: r.tool,
                target: r.target,
                pattern: r.pattern.map(LazyRegex::deferred),
                reason: r.reason,
                gate: r.gate,
            })
            .collect();
        let tools = self
            .tools
            .into_iter()
            .map(|t| Tool {
                spec: t.spec,
                kind: t.kind,
                approval: t.approval,
                timeout_secs: t.timeout_secs,
                source: t.source,
                planner: Arc::new(t.planner),
            })
            .collect();
        Some(Skill {
            name: self.name,
            description: self.description,
            priority: self.priority,
            trigger,
            prompt: self.prompt,
            tools,
            rules,
            commands: self.commands,
            path: self.path,
            origin: self.origin,
        })
    }
}
