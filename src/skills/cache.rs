//! The skill parse cache: a skill file is parsed once per content, not once
//! per daemon start.
//!
//! Parsing (orgize, then every rule's regex and examples) costs tens of
//! milliseconds per file in a debug build, so a daemon with 1,000 skills
//! paid seconds at its first `session/new`. The cache keeps, per file
//! content, what parsing produced: the skill and its diagnostics, as one
//! JSON file `STATE/skill-cache/<key>.json`. The key is the SHA-256 of the
//! cache format, the binary's version, the file's origin and path, and the
//! bytes parsed — so an edit, a move or a new binary each parse afresh.
//!
//! Trust is never taken from the cache: the loader hashes the bytes it read
//! and checks them against the trust store first; the cache only replaces
//! the parse of those same bytes. An entry that cannot be read, does not
//! decode, names another key or holds a regex that does not compile is
//! ignored and rewritten: the cache can make loading faster, never fail.
//! The cache lives beside the trust store, and like the store it is not
//! used when that directory lies inside the project (where the agent could
//! forge an entry).
//!
//! Bounded: at most [`MAX_CACHE_ENTRIES`] entries (when full, the
//! directory is emptied and refilled by later loads), each at most
//! [`MAX_ENTRY_BYTES`] (larger entries are neither written nor read).

use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// The most entries the cache directory holds; when a write finds it full,
/// every entry is removed first (the next loads refill it).
pub const MAX_CACHE_ENTRIES: usize = 4096;

/// The largest entry written or read (a skill source is at most
/// [`super::MAX_SKILL_BYTES`]; its parsed form is of the same order).
pub const MAX_ENTRY_BYTES: u64 = 4 * 1024 * 1024;

/// Bumped whenever the stored shape or the parser's output changes in a
/// way the crate version would not show.
const FORMAT: u32 = 1;

/// A parse cache in one directory.
#[derive(Debug, Clone)]
pub struct ParseCache {
    dir: PathBuf,
}

/// What one entry holds.
#[derive(Serialize, Deserialize)]
struct Entry {
    /// The key again, so a file renamed by hand is not taken for another.
    key: String,
    skill: Option<CachedSkill>,
    diagnostics: Vec<Diagnostic>,
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

impl ParseCache {
    /// The cache under a state directory.
    pub fn in_state_dir(state: &Path) -> Self {
        ParseCache {
            dir: state.join(CACHE_DIR_NAME),
        }
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of `bytes` read from `path` as a skill of `origin`.
    pub fn key(path: &Path, origin: Origin, bytes: &[u8]) -> String {
        let mut input = format!(
            "passepartout skill cache {FORMAT}\0{}\0{origin}\0{}\0",
            env!("CARGO_PKG_VERSION"),
            path.display()
        )
        .into_bytes();
        input.extend_from_slice(bytes);
        sha256_hex(&input)
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The cached parse for `key`, or `None` when there is none or it
    /// cannot be used (then the caller parses and [`ParseCache::put`]s).
    pub fn get(&self, key: &str) -> Option<Parsed> {
        let path = self.entry_path(key);
        let file = std::fs::File::open(&path).ok()?;
        if file.metadata().ok()?.len() > MAX_ENTRY_BYTES {
            return None;
        }
        let entry: Entry = serde_json::from_reader(std::io::BufReader::new(file)).ok()?;
        if entry.key != key {
            return None;
        }
        let skill = match entry.skill {
            Some(s) => Some(s.into_skill()?),
            None => None,
        };
        Some((skill, entry.diagnostics))
    }

    /// Store a parse. Failures are ignored: the cache is an optimisation.
    pub fn put(&self, key: &str, parsed: &Parsed) {
        let skill = match &parsed.0 {
            Some(s) => match CachedSkill::from_skill(s) {
                Some(c) => Some(c),
                // A tool not planned by a skill planner: not cacheable.
                None => return,
            },
            None => None,
        };
        let entry = Entry {
            key: key.to_string(),
            skill,
            diagnostics: parsed.1.clone(),
        };
        let Ok(json) = serde_json::to_vec(&entry) else {
            return;
        };
        if json.len() as u64 > MAX_ENTRY_BYTES {
            return;
        }
        if std::fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        self.make_room();
        // Write then rename, so a reader never sees half an entry.
        let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let written = std::fs::write(&tmp, &json).is_ok()
            && std::fs::rename(&tmp, self.entry_path(key)).is_ok();
        if !written {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// Empty the directory when it holds [`MAX_CACHE_ENTRIES`] entries.
    fn make_room(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let entries: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        if entries.len() < MAX_CACHE_ENTRIES {
            return;
        }
        for path in entries {
            if path.extension().is_some_and(|e| e == "json") {
                let _ = std::fs::remove_file(path);
            }
        }
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
