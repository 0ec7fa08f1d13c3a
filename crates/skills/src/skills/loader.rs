//! Loading skills from the built-in set, the person's directory and the
//! project's directory, and reloading them cheaply when files change.
//!
//! Layers only add: built-in, user and trusted project skills are all kept,
//! even when they share a name, so every layer's rules judge every action
//! and no later layer can drop an earlier layer's rules. A project skill
//! loads only when the person trusts its exact content ([`super::trust`]);
//! it may not redefine a tool of the binary, the built-in skills or the
//! user's skills; and its tools ask before running unless the person's own
//! configuration opts in. One broken file never stops the others: it is
//! left out and its diagnostics are kept with the set.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::action::Approval;
use crate::gates::Gate;
use crate::tools::{builtin, Tool, ToolRegistry};

use super::cache::{CacheSession, ParseCache, Parsed, StatRecord};
use super::diagnostic::{Diagnostic, Severity};
use super::parse::{parse_skill_bytes, MAX_SKILL_BYTES};
use super::rules::{Rule, RuleGate};
use super::trust::{sha256_hex, TrustState, TrustStore, Trusted};
use super::{Origin, Skill};

/// The built-in skills, embedded at compile time.
pub const BUILTIN_SKILLS: [(&str, &str); 4] = [
    ("shell.org", include_str!("../../../../skills/shell.org")),
    ("files.org", include_str!("../../../../skills/files.org")),
    ("memex.org", include_str!("../../../../skills/memex.org")),
    ("emacs.org", include_str!("../../../../skills/emacs.org")),
];

/// Where skills are looked for, and how project skills are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillDirs {
    /// Whether to load the embedded built-in skills.
    pub builtin: bool,
    /// Usually `$XDG_CONFIG_HOME/passepartout/skills`.
    pub user: Option<PathBuf>,
    /// Usually `<cwd>/.passepartout/skills`.
    pub project: Option<PathBuf>,
    /// The trust store file (`STATE/trusted-skills.json`). Without one, no
    /// project skill loads.
    pub trust: Option<PathBuf>,
    /// Whether trusted project tools keep a declared `:APPROVAL: auto`
    /// (`trust_project_tool_approval = true` in config.toml). Off: they ask.
    pub project_auto_approval: bool,
}

impl SkillDirs {
    /// The standard places: built-ins, `$XDG_CONFIG_HOME/passepartout/skills`
    /// (or `~/.config/...`), and `<cwd>/.passepartout/skills`, with the trust
    /// store in the default state directory.
    pub fn standard(cwd: &Path) -> Self {
        SkillDirs {
            builtin: true,
            user: Some(crate::paths::user_skills_dir(&crate::paths::config_dir())),
            project: Some(project_dir(cwd)),
            trust: Some(crate::paths::StateDir::from_env().trust_file()),
            project_auto_approval: false,
        }
    }

    fn sources(&self) -> Vec<(Origin, &Path)> {
        let mut out = Vec::new();
        if let Some(u) = &self.user {
            out.push((Origin::User, u.as_path()));
        }
        if let Some(p) = &self.project {
            out.push((Origin::Project, p.as_path()));
        }
        out
    }
}

/// The project a skill directory `<root>/.passepartout/skills` belongs to.
fn project_root(skill_dir: &Path) -> Option<PathBuf> {
    let dot = skill_dir.parent()?;
    let standard = skill_dir.file_name()? == "skills" && dot.file_name()? == ".passepartout";
    standard
        .then(|| dot.parent().map(Path::to_path_buf))
        .flatten()
}

/// Whether `path` is at or under `dir`, comparing canonical forms where
/// they exist (the store file itself may not exist yet).
fn inside(path: &Path, dir: &Path) -> bool {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let dir = canonical(dir);
    let mut probe = path.to_path_buf();
    // Canonicalise the nearest existing ancestor, keep the rest lexically.
    let mut rest = Vec::new();
    while !probe.exists() {
        match (
            probe.file_name().map(std::ffi::OsStr::to_os_string),
            probe.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                probe = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut full = canonical(&probe);
    for name in rest.into_iter().rev() {
        full.push(name);
    }
    full.starts_with(&dir)
}

/// The parse cache beside the trust store, unless that directory lies in
/// the project, where the agent could forge an entry.
fn parse_cache(dirs: &SkillDirs) -> Option<ParseCache> {
    let state = dirs.trust.as_deref()?.parent()?;
    if let Some(root) = dirs.project.as_deref().and_then(project_root) {
        if inside(state, &root) {
            return None;
        }
    }
    // One cache file per set of directories: daemons of two projects do
    // not rewrite each other's.
    let scope = format!(
        "builtin={}\0user={}\0project={}",
        dirs.builtin,
        dirs.user
            .as_deref()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
        dirs.project
            .as_deref()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
    );
    Some(ParseCache::in_state_dir(state, &scope))
}

/// A project's skill directory: `<cwd>/.passepartout/skills`.
pub fn project_dir(cwd: &Path) -> PathBuf {
    cwd.join(".passepartout").join("skills")
}

/// The `.org` files directly in `dir`, sorted; editor lock files
/// (`.#x.org`), auto-save files (`#x.org#`) and backups (`x.org~`, which
/// do not end in `.org` anyway) are skipped.
pub fn org_files(dir: &Path) -> Vec<PathBuf> {
    list_sources(dir, false)
}

/// Every skill source directly in `dir`, sorted: the `.org` files (see
/// [`org_files`]) and the `SKILL.md` of each Agent Skill folder.
pub fn skill_files(dir: &Path) -> Vec<PathBuf> {
    list_sources(dir, true)
}

/// One pass over `dir`: its `.org` files and, with `agent_skills`, the
/// `SKILL.md` of each folder that has one. The entry's type comes from the
/// directory listing itself; only symbolic links cost a `stat` (the
/// per-turn change check lists the directories every turn). Sorted by the
/// entry's name, which orders the paths as comparing them would (they
/// differ in that one component) without `Path`'s component-wise compare.
fn list_sources(dir: &Path, agent_skills: bool) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in rd.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let (is_file, is_dir) = if kind.is_symlink() {
            (path.is_file(), path.is_dir())
        } else {
            (kind.is_file(), kind.is_dir())
        };
        if is_file && is_skill_file_name(&name) {
            out.push((entry.file_name(), path));
        } else if agent_skills
            && is_dir
            && !name.starts_with('.')
            && super::agent_skill::is_agent_skill_dir(&path)
        {
            out.push((entry.file_name(), path.join(super::agent_skill::SKILL_MD)));
        }
    }
    out.sort_unstable_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
    out.into_iter().map(|(_, path)| path).collect()
}

/// Whether `path` is an Agent Skill's `SKILL.md`.
pub fn is_agent_skill_file(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n == super::agent_skill::SKILL_MD)
}

/// The bytes a skill source is parsed (and trusted) as: an Org file's own
/// bytes, or for a `SKILL.md` the Org text of its folder
/// ([`super::agent_skill::to_org`]), which holds every script that runs.
pub fn read_skill_source(path: &Path) -> Result<Vec<u8>, Box<Diagnostic>> {
    if is_agent_skill_file(path) {
        let dir = path.parent().unwrap_or(Path::new("."));
        super::agent_skill::to_org(dir).map(String::into_bytes)
    } else {
        read_limited(path)
    }
}

/// Whether a file name can be a skill: `x.org`, not an Emacs lock file
/// (`.#x.org`), auto-save file (`#x.org#`) or backup (`x.org~`).
pub fn is_skill_file_name(name: &str) -> bool {
    name.ends_with(".org") && !name.starts_with('.') && !name.starts_with('#')
}

/// One line of `skills list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillSummary {
    pub name: String,
    pub description: String,
    pub origin: Origin,
    pub path: PathBuf,
    pub priority: i32,
    pub trigger: String,
    pub tools: Vec<String>,
    pub rules: usize,
    /// False for a project skill the person has not trusted (or that
    /// changed since): it is listed, but not loaded.
    pub trusted: bool,
}

/// A project skill file that did not load because it is not trusted.
#[derive(Debug, Clone)]
pub struct UntrustedSkill {
    pub path: PathBuf,
    /// SHA-256 of the bytes seen.
    pub sha256: String,
    /// Whether it was trusted once with other bytes.
    pub changed: bool,
    /// What it would load, when it parses (for `skills list`).
    pub skill: Option<Skill>,
}

/// The skills in effect, with every diagnostic found loading them.
#[derive(Debug, Clone, Default)]
pub struct SkillSet {
    skills: Vec<Skill>,
    untrusted: Vec<UntrustedSkill>,
    diagnostics: Vec<Diagnostic>,
    /// `AGENTS.md` files for the working directory, trusted or not.
    instructions: Vec<super::instructions::Instructions>,
    /// How many files came from the parse cache rather than the parser.
    cache_hits: usize,
    /// How many of those were not even read (their settled `lstat` matched).
    cache_unread: usize,
}

/// One skill file as the loader sees it.
struct Source {
    /// SHA-256 of its content (what trust is judged on).
    sha256: String,
    parsed: Parsed,
    /// Whether it is a regular file (not a symbolic link or a folder's
    /// `SKILL.md`), so its canonical path is its directory's plus its name.
    regular: bool,
}

/// How to trust a file, said the same way everywhere.
pub fn trust_hint(path: &Path) -> String {
    format!(
        "read it, then run `passepartout skills trust {}` or M-x passepartout-skill-trust",
        path.display()
    )
}

impl SkillSet {
    /// Load every source in `dirs`. Never fails: problems become diagnostics.
    pub fn load(dirs: &SkillDirs) -> SkillSet {
        let mut set = SkillSet::default();
        let cache = parse_cache(dirs);
        let mut session = cache.as_ref().map(ParseCache::open);
        if let Some(why) = session.as_ref().and_then(CacheSession::warning) {
            set.diagnostics.push(Diagnostic {
                path: session
                    .as_ref()
                    .map_or_else(PathBuf::new, |s| s.file().to_path_buf()),
                line: 1,
                column: 1,
                severity: Severity::Warning,
                message: format!("the skill parse cache was not used and is rebuilt: {why}"),
            });
        }
        if dirs.builtin {
            set.load_builtin(session.as_mut());
        }
        let trusted = set.trusted(dirs);
        let layers: Vec<(Origin, Vec<PathBuf>)> = dirs
            .sources()
            .into_iter()
            .map(|(origin, dir)| (origin, skill_files(dir)))
            .collect();
        set.load_layers(dirs, &layers, &trusted, session.as_mut());
        if let Some(session) = session {
            session.finish();
        }
        let user_config = dirs.user.as_deref().and_then(Path::parent);
        let cwd = dirs.project.as_deref().and_then(project_root);
        let (instructions, diags) =
            super::instructions::load(user_config, cwd.as_deref(), &trusted);
        set.instructions = instructions;
        set.diagnostics.extend(diags);
        set
    }

    /// What `skills check FILE…` sees: the built-in skills, then `files`
    /// as one user layer, loaded by the same code as the daemon's, so a
    /// clash between two files is reported exactly as the loader reports it.
    pub fn load_files(builtin: bool, files: &[PathBuf]) -> SkillSet {
        let dirs = SkillDirs {
            builtin,
            user: None,
            project: None,
            trust: None,
            project_auto_approval: false,
        };
        let mut set = SkillSet::default();
        if builtin {
            set.load_builtin(None);
        }
        set.load_layers(
            &dirs,
            &[(Origin::User, files.to_vec())],
            &Trusted::default(),
            None,
        );
        set
    }

    fn load_builtin(&mut self, mut cache: Option<&mut CacheSession>) {
        let mut seen = BTreeMap::new();
        for (file, text) in BUILTIN_SKILLS {
            let path = PathBuf::from("<builtin>").join(file);
            let sha256 = sha256_hex(text.as_bytes());
            let (skill, diags) = self.parse_cached(
                &path,
                text.as_bytes(),
                &sha256,
                None,
                Origin::Builtin,
                cache.as_deref_mut(),
            );
            self.add(skill, diags, &mut seen);
        }
    }

    /// Load each layer's files in order (project files only when trusted),
    /// then settle tool clashes across every layer.
    fn load_layers(
        &mut self,
        dirs: &SkillDirs,
        layers: &[(Origin, Vec<PathBuf>)],
        trusted: &Trusted,
        mut cache: Option<&mut CacheSession>,
    ) {
        for (origin, files) in layers {
            let mut seen = BTreeMap::new();
            // Canonicalised once: a regular file's canonical path is then
            // this plus its name (no `realpath` per file).
            let mut canonical_dirs: BTreeMap<PathBuf, Option<PathBuf>> = BTreeMap::new();
            for path in files {
                if *origin == Origin::Project {
                    let canonical_dir = path.parent().and_then(|dir| {
                        canonical_dirs
                            .entry(dir.to_path_buf())
                            .or_insert_with(|| dir.canonicalize().ok())
                            .clone()
                    });
                    self.load_project_file(
                        path,
                        canonical_dir.as_deref(),
                        trusted,
                        dirs,
                        cache.as_deref_mut(),
                        &mut seen,
                    );
                } else {
                    let (skill, diags) = match self.source(path, *origin, cache.as_deref_mut()) {
                        Ok(source) => source.parsed,
                        Err(d) => (None, vec![*d]),
                    };
                    self.add(skill, diags, &mut seen);
                }
            }
        }
        self.check_tool_clashes();
    }

    /// The trust store's snapshot; a store that cannot be read trusts
    /// nothing, and says why.
    fn trusted(&mut self, dirs: &SkillDirs) -> Trusted {
        let Some(path) = &dirs.trust else {
            return Trusted::default();
        };
        if let Some(root) = dirs.project.as_deref().and_then(project_root) {
            if inside(path, &root) {
                // The sandbox can write the project: a store in it could be
                // forged by the agent. Fail closed.
                self.diagnostics.push(Diagnostic {
                    path: path.clone(),
                    line: 1,
                    column: 1,
                    severity: Severity::Error,
                    message: format!(
                        "the trust store lies inside the project {}, where the agent can write; no project skill loads (move the state directory out of the project)",
                        root.display()
                    ),
                });
                return Trusted::default();
            }
        }
        match TrustStore::new(path).load() {
            Ok(t) => t,
            Err(e) => {
                self.diagnostics.push(Diagnostic {
                    path: path.clone(),
                    line: 1,
                    column: 1,
                    severity: Severity::Error,
                    message: e.to_string(),
                });
                Trusted::default()
            }
        }
    }

    /// A project file: read once, hashed, and loaded only when those exact
    /// bytes are trusted. The bytes hashed are the bytes parsed.
    fn load_project_file(
        &mut self,
        path: &Path,
        canonical_dir: Option<&Path>,
        trusted: &Trusted,
        dirs: &SkillDirs,
        cache: Option<&mut CacheSession>,
        seen: &mut BTreeMap<String, PathBuf>,
    ) {
        let Source {
            sha256,
            parsed: (skill, diags),
            regular,
        } = match self.source(path, Origin::Project, cache) {
            Ok(s) => s,
            Err(d) => {
                self.diagnostics.push(*d);
                return;
            }
        };
        let canonical = match (canonical_dir, path.file_name()) {
            (Some(dir), Some(name)) if regular => dir.join(name),
            _ => path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        };
        // Trust is judged on `sha256`: the hash of the bytes read, or the
        // one recorded for this exact settled lstat (see `super::cache`).
        let state = trusted.state(&canonical, &sha256);
        if state != TrustState::Trusted {
            let why = match state {
                TrustState::Changed => "it changed since it was trusted",
                _ => "it has not been trusted",
            };
            let name = skill
                .as_ref()
                .map_or_else(String::new, |s| format!(" `{}`", s.name));
            self.diagnostics.push(Diagnostic {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                severity: Severity::Warning,
                message: format!(
                    "project skill{name} is untrusted and was not loaded: {why}; {}",
                    trust_hint(path)
                ),
            });
            self.diagnostics.extend(diags);
            self.untrusted.push(UntrustedSkill {
                path: path.to_path_buf(),
                sha256,
                changed: state == TrustState::Changed,
                skill,
            });
            return;
        }
        let skill = skill.map(|s| restrict_project_skill(s, dirs.project_auto_approval));
        self.add(skill, diags, seen);
    }

    /// A skill file's content hash and parse. With a cache: when the
    /// file's `lstat` is the settled one recorded, neither read nor hashed;
    /// else read and hashed, and parsed unless those bytes were parsed
    /// before. The `lstat` comes before the read, so a write in between
    /// leaves a record that does not match next time.
    fn source(
        &mut self,
        path: &Path,
        origin: Origin,
        mut cache: Option<&mut CacheSession>,
    ) -> Result<Source, Box<Diagnostic>> {
        let examined = SystemTime::now();
        // A SKILL.md folder's content is more than one file: never by stat.
        let stat = if is_agent_skill_file(path) {
            None
        } else {
            std::fs::symlink_metadata(path)
                .ok()
                .as_ref()
                .and_then(StatRecord::of)
        };
        let regular = stat.is_some();
        if let (Some(session), Some(stat)) = (cache.as_deref_mut(), stat) {
            if let Some((sha256, parsed)) = session.by_stat(path, origin, stat) {
                self.cache_hits += 1;
                self.cache_unread += 1;
                return Ok(Source {
                    sha256,
                    parsed,
                    regular,
                });
            }
        }
        let bytes = read_skill_source(path)?;
        let sha256 = sha256_hex(&bytes);
        let settled = stat.filter(|s| s.settled(examined));
        let parsed = self.parse_cached(path, &bytes, &sha256, settled, origin, cache);
        Ok(Source {
            sha256,
            parsed,
            regular,
        })
    }

    /// Parse `bytes` (hashing to `sha256`), or take what parsing them
    /// produced last time.
    fn parse_cached(
        &mut self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
        settled: Option<StatRecord>,
        origin: Origin,
        cache: Option<&mut CacheSession>,
    ) -> Parsed {
        let Some(cache) = cache else {
            return parse_skill_bytes(path, bytes, origin);
        };
        if let Some(parsed) = cache.by_hash(path, origin, sha256, settled) {
            self.cache_hits += 1;
            return parsed;
        }
        let parsed = parse_skill_bytes(path, bytes, origin);
        cache.put(path, origin, sha256.to_string(), settled, &parsed);
        parsed
    }

    /// How many skill files this load took from the parse cache.
    pub fn cache_hits(&self) -> usize {
        self.cache_hits
    }

    /// How many of [`SkillSet::cache_hits`] were taken by their settled
    /// `lstat` alone, without reading or hashing the file.
    pub fn cache_unread(&self) -> usize {
        self.cache_unread
    }

    /// Build a set from skills already parsed (tests, embedding). Project
    /// skills given here are taken as trusted, with the project limits.
    pub fn from_skills(skills: Vec<Skill>) -> SkillSet {
        let mut set = SkillSet::default();
        let mut seen: BTreeMap<Origin, BTreeMap<String, PathBuf>> = BTreeMap::new();
        for s in skills {
            let s = if s.origin == Origin::Project {
                restrict_project_skill(s, false)
            } else {
                s
            };
            let seen = seen.entry(s.origin).or_default();
            set.add(Some(s), Vec::new(), seen);
        }
        set.check_tool_clashes();
        set
    }

    /// `seen`: skill names already defined by this same source, so two
    /// files of one directory claiming one name is reported. A later
    /// source with the same name does not replace the earlier one: both
    /// are kept, so both keep their rules.
    fn add(
        &mut self,
        skill: Option<Skill>,
        diags: Vec<Diagnostic>,
        seen: &mut BTreeMap<String, PathBuf>,
    ) {
        self.diagnostics.extend(diags);
        let Some(skill) = skill else {
            return;
        };
        if let Some(first) = seen.get(&skill.name) {
            self.diagnostics.push(Diagnostic {
                path: skill.path.clone(),
                line: 1,
                column: 1,
                severity: Severity::Error,
                message: format!(
                    "skill `{}` is already defined by {}; this file is ignored",
                    skill.name,
                    first.display()
                ),
            });
            return;
        }
        seen.insert(skill.name.clone(), skill.path.clone());
        self.skills.push(skill);
    }

    /// Project skills may not redefine a tool of the binary, of a built-in
    /// skill or of a user skill: such a tool is dropped and reported (the
    /// rest of the skill loads). Then, two skills offering one tool name:
    /// the higher priority wins (then the later origin, then the name), and
    /// the loser is told.
    fn check_tool_clashes(&mut self) {
        let mut protected: BTreeMap<String, String> = BTreeMap::new();
        let mut rust_tools = ToolRegistry::new();
        builtin::register(&mut rust_tools);
        for name in rust_tools.names() {
            protected.insert(name.to_string(), "the binary's built-in tools".into());
        }
        for skill in self.skills.iter().filter(|s| s.origin != Origin::Project) {
            for tool in &skill.tools {
                protected
                    .entry(tool.spec.name.clone())
                    .or_insert_with(|| format!("the {} skill `{}`", skill.origin, skill.name));
            }
        }
        let mut notes = Vec::new();
        for skill in self
            .skills
            .iter_mut()
            .filter(|s| s.origin == Origin::Project)
        {
            skill.tools.retain(|tool| match protected.get(&tool.spec.name) {
                Some(owner) => {
                    notes.push(Diagnostic {
                        path: skill.path.clone(),
                        line: 1,
                        column: 1,
                        severity: Severity::Error,
                        message: format!(
                            "project skills may not redefine the tool `{}` of {owner}; this tool is not offered (give it another name)",
                            tool.spec.name
                        ),
                    });
                    false
                }
                None => true,
            });
        }
        let mut owner: BTreeMap<String, &Skill> = BTreeMap::new();
        for skill in self.ranked() {
            for tool in &skill.tools {
                match owner.get(&tool.spec.name) {
                    Some(winner) => notes.push(Diagnostic {
                        path: skill.path.clone(),
                        line: 1,
                        column: 1,
                        severity: Severity::Warning,
                        message: format!(
                            "tool `{}` is also defined by skill `{}` ({}), which wins; this one is not offered",
                            tool.spec.name,
                            winner.name,
                            winner.path.display()
                        ),
                    }),
                    None => {
                        owner.insert(tool.spec.name.clone(), skill);
                    }
                }
            }
        }
        self.diagnostics.extend(notes);
    }

    /// Skills from most to least important: priority, then origin (later
    /// wins), then name.
    fn ranked(&self) -> Vec<&Skill> {
        let mut v: Vec<&Skill> = self.skills.iter().collect();
        v.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(b.origin.cmp(&a.origin))
                .then(a.name.cmp(&b.name))
        });
        v
    }

    /// The skill named `name` from the latest layer that defines one.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills
            .iter()
            .filter(|s| s.name == name)
            .max_by_key(|s| s.origin)
    }

    /// Every loaded skill named `name`, one per layer, earliest layer first.
    pub fn get_all(&self, name: &str) -> Vec<&Skill> {
        let mut v: Vec<&Skill> = self.skills.iter().filter(|s| s.name == name).collect();
        v.sort_by_key(|s| s.origin);
        v
    }

    /// Skills in priority order.
    pub fn skills(&self) -> Vec<&Skill> {
        self.ranked()
    }

    /// Project skill files left out because they are not trusted.
    pub fn untrusted(&self) -> &[UntrustedSkill] {
        &self.untrusted
    }

    /// Number of skills loaded.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill loaded.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every diagnostic of every file, including files that did not load.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Whether some file failed to load.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// Every tool offered, one per name (see the clash rule above).
    pub fn tools(&self) -> Vec<Tool> {
        let mut out: BTreeMap<String, Tool> = BTreeMap::new();
        for skill in self.ranked() {
            for tool in &skill.tools {
                out.entry(tool.spec.name.clone())
                    .or_insert_with(|| tool.clone());
            }
        }
        out.into_values().collect()
    }

    /// Register the skills' tools. Call after the Rust built-ins: a built-in
    /// or user skill tool with a built-in's name replaces it (a project
    /// skill's never does; see [`SkillSet::check_tool_clashes`]).
    pub fn register_tools(&self, registry: &mut ToolRegistry) {
        for tool in self.tools() {
            registry.register(tool);
        }
    }

    /// The prompt sections of the skills active for `user_message`, highest
    /// priority first, each under a `## skill: NAME` line.
    /// Trusted instruction files (`AGENTS.md`) come first, most general
    /// first, each under a `## instructions: PATH (applies to DIR)` line.
    pub fn system_prompt(&self, user_message: &str) -> String {
        let instructions = super::instructions::prompt(&self.instructions);
        let skills = self
            .ranked()
            .into_iter()
            .filter(|s| !s.prompt.is_empty() && s.is_active(user_message))
            .map(|s| format!("## skill: {}\n\n{}", s.name, s.prompt))
            .collect::<Vec<_>>()
            .join("\n\n");
        match (instructions.is_empty(), skills.is_empty()) {
            (true, _) => skills,
            (false, true) => instructions,
            (false, false) => format!("{instructions}\n\n{skills}"),
        }
    }

    /// The instruction files found for the working directory, trusted or
    /// not (for `skills list`).
    pub fn instructions(&self) -> &[super::instructions::Instructions] {
        &self.instructions
    }

    /// Every rule of every skill of every layer.
    pub fn rules(&self) -> Vec<Rule> {
        self.ranked()
            .into_iter()
            .flat_map(|s| s.rules.iter().cloned())
            .collect()
    }

    /// One gate per loaded skill that has rules, named `skill:NAME` (with
    /// `@user` / `@project` when another layer has a skill of that name). A
    /// skill's rules judge every action, not only its own tools (`:TOOL:`
    /// scopes); the engine takes the strictest verdict, so rules only add.
    pub fn gates(&self) -> Vec<Box<dyn Gate>> {
        let mut layers: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &self.skills {
            *layers.entry(s.name.as_str()).or_default() += 1;
        }
        self.ranked()
            .into_iter()
            .filter(|s| !s.rules.is_empty())
            .map(|s| {
                let name = if layers.get(s.name.as_str()).copied().unwrap_or(0) > 1
                    && s.origin != Origin::Builtin
                {
                    format!("skill:{}@{}", s.name, s.origin)
                } else {
                    format!("skill:{}", s.name)
                };
                Box::new(RuleGate::new(name, s.rules.clone())) as Box<dyn Gate>
            })
            .collect()
    }

    /// A summary per skill, in priority order, then the untrusted project
    /// files (for `skills list` and the editor).
    pub fn list(&self) -> Vec<SkillSummary> {
        let mut out: Vec<SkillSummary> = self
            .ranked()
            .into_iter()
            .map(|s| summarise(s, true))
            .collect();
        for u in &self.untrusted {
            out.push(match &u.skill {
                Some(s) => summarise(s, false),
                None => SkillSummary {
                    name: u
                        .path
                        .file_stem()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    description: "(does not parse)".into(),
                    origin: Origin::Project,
                    path: u.path.clone(),
                    priority: 0,
                    trigger: String::new(),
                    tools: Vec::new(),
                    rules: 0,
                    trusted: false,
                },
            });
        }
        out
    }

    /// The names of the skills in effect (trusted ones only), deduplicated.
    /// Every slash command, highest-ranked skill first; a name declared
    /// twice goes to the higher-ranked skill (as tool names do).
    pub fn commands(&self) -> Vec<super::Command> {
        let mut seen = BTreeSet::new();
        self.ranked()
            .into_iter()
            .flat_map(|s| s.commands.iter())
            .filter(|c| seen.insert(c.name.clone()))
            .cloned()
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.ranked()
            .into_iter()
            .filter(|s| seen.insert(s.name.clone()))
            .map(|s| s.name.clone())
            .collect()
    }
}

fn summarise(s: &Skill, trusted: bool) -> SkillSummary {
    SkillSummary {
        name: s.name.clone(),
        description: s.description.clone(),
        origin: s.origin,
        path: s.path.clone(),
        priority: s.priority,
        trigger: s.trigger.to_string(),
        tools: s.tools.iter().map(|t| t.spec.name.clone()).collect(),
        rules: s.rules.len(),
        trusted,
    }
}

/// The limits on a trusted project skill: its tools ask first unless the
/// person's configuration lets them keep `:APPROVAL: auto`.
pub fn restrict_project_skill(mut skill: Skill, keep_auto: bool) -> Skill {
    if !keep_auto {
        for tool in &mut skill.tools {
            tool.approval = tool.approval.max(Approval::Ask);
        }
    }
    skill
}

/// A file's bytes, refusing oversized files before reading them.
pub fn read_limited(path: &Path) -> Result<Vec<u8>, Box<Diagnostic>> {
    let fail = |message: String| {
        Box::new(Diagnostic {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            severity: Severity::Error,
            message,
        })
    };
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_SKILL_BYTES as u64 => {
            return Err(fail(format!(
                "file is {} bytes, more than the {MAX_SKILL_BYTES}-byte limit for skill files",
                m.len()
            )))
        }
        Ok(_) => {}
        Err(e) => return Err(fail(format!("cannot read file: {e}"))),
    }
    std::fs::read(path).map_err(|e| fail(format!("cannot read file: {e}")))
}

/// Read and parse one file, refusing oversized files before reading them.
pub fn load_file(path: &Path, origin: Origin) -> (Option<Skill>, Vec<Diagnostic>) {
    match read_skill_source(path) {
        Ok(bytes) => parse_skill_bytes(path, &bytes, origin),
        Err(d) => (None, vec![*d]),
    }
}

/// What the skill directories looked like: enough to notice an added,
/// removed, edited or touched file without reading any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(Vec<(PathBuf, Option<SystemTime>, u64)>);

impl Fingerprint {
    /// Path, modification time and size of every `.org` file in the user and
    /// project directories (the built-ins cannot change), and of the trust
    /// store, so trusting a file from a terminal is seen on the next turn.
    /// A file rewritten with its old size and time keeps the set loaded
    /// from the bytes that were hashed, which is safe.
    pub fn of(dirs: &SkillDirs) -> Fingerprint {
        let mut entries = Vec::new();
        let stat = |path: PathBuf| {
            let meta = std::fs::metadata(&path).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (path, modified, len)
        };
        for (_, dir) in dirs.sources() {
            for file in skill_files(dir) {
                if is_agent_skill_file(&file) {
                    // A SKILL.md folder loads its scripts too.
                    let scripts = file.with_file_name("scripts");
                    if let Ok(rd) = std::fs::read_dir(&scripts) {
                        let mut names: Vec<PathBuf> =
                            rd.filter_map(Result::ok).map(|e| e.path()).collect();
                        names.sort();
                        entries.extend(names.into_iter().map(stat));
                    }
                }
                entries.push(stat(file));
            }
        }
        let user_config = dirs.user.as_deref().and_then(Path::parent);
        let cwd = dirs.project.as_deref().and_then(project_root);
        entries.extend(
            super::instructions::candidates(user_config, cwd.as_deref())
                .into_iter()
                .map(stat),
        );
        if let Some(trust) = &dirs.trust {
            entries.push(stat(trust.clone()));
        }
        Fingerprint(entries)
    }
}

/// Keeps a [`SkillSet`] current: the daemon calls [`SkillLoader::refresh`]
/// at the start of every turn and on `_passepartout/skills/reload`.
#[derive(Debug)]
pub struct SkillLoader {
    dirs: SkillDirs,
    fingerprint: Fingerprint,
    set: Arc<SkillSet>,
}

impl SkillLoader {
    /// Load now.
    pub fn new(dirs: SkillDirs) -> Self {
        let fingerprint = Fingerprint::of(&dirs);
        let set = Arc::new(SkillSet::load(&dirs));
        SkillLoader {
            dirs,
            fingerprint,
            set,
        }
    }

    /// The directories this loader watches.
    pub fn dirs(&self) -> &SkillDirs {
        &self.dirs
    }

    /// The current set (cheap to clone and hand to a session).
    pub fn current(&self) -> Arc<SkillSet> {
        Arc::clone(&self.set)
    }

    /// Reload if any `.org` file was added, removed or changed. Returns
    /// whether it reloaded. Costs one `stat` per file when nothing changed.
    pub fn refresh(&mut self) -> bool {
        let now = Fingerprint::of(&self.dirs);
        if now == self.fingerprint {
            return false;
        }
        self.fingerprint = now;
        self.set = Arc::new(SkillSet::load(&self.dirs));
        true
    }

    /// Reload unconditionally.
    pub fn reload(&mut self) {
        self.fingerprint = Fingerprint::of(&self.dirs);
        self.set = Arc::new(SkillSet::load(&self.dirs));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_set_can_be_shared_between_sessions() {
        fn shareable<T: Send + Sync>() {}
        shareable::<SkillSet>();
        shareable::<SkillLoader>();
    }

    #[test]
    fn a_trust_store_inside_the_project_trusts_nothing() {
        let project = tempfile::tempdir().unwrap();
        let skills = project_dir(project.path());
        std::fs::create_dir_all(&skills).unwrap();
        let text = "#+SKILL: p\n* p :prompt:\nHi.\n";
        std::fs::write(skills.join("p.org"), text).unwrap();
        let store = TrustStore::new(project.path().join("state/trusted-skills.json"));
        store
            .trust(
                &skills.join("p.org").canonicalize().unwrap(),
                text.as_bytes(),
            )
            .unwrap();
        let dirs = SkillDirs {
            builtin: false,
            user: None,
            project: Some(skills),
            trust: Some(store.path().to_path_buf()),
            project_auto_approval: false,
        };
        let set = SkillSet::load(&dirs);
        assert!(set.is_empty());
        assert!(set.diagnostics()[0]
            .message
            .starts_with("the trust store lies inside the project"));
        let elsewhere = tempfile::tempdir().unwrap();
        let moved = SkillDirs {
            trust: Some(elsewhere.path().join("trusted-skills.json")),
            ..dirs
        };
        std::fs::copy(store.path(), elsewhere.path().join("trusted-skills.json")).unwrap();
        assert_eq!(SkillSet::load(&moved).len(), 1);
    }

    fn json_entries(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        v.retain(|p| p.extension().is_some_and(|e| e == "json"));
        v.sort();
        v
    }

    /// A user layer and a trusted project layer with one skill each, the
    /// state directory apart.
    struct CacheFixture {
        state: tempfile::TempDir,
        _project: tempfile::TempDir,
        user: tempfile::TempDir,
        skills: PathBuf,
        store: TrustStore,
        dirs: SkillDirs,
    }

    const RULE_SKILL: &str = "#+SKILL: u\n#+TRIGGER: /\\bdeploy\\b/\n* Rules :rules:\n** No rm\n:PROPERTIES:\n:DECISION: deny\n:TARGET: shell\n:PATTERN: \\brm\\b\n:END:\nDangerous.\n\n- match :: =rm x=\n- no match :: =ls=\n";
    const PROMPT_SKILL: &str = "#+SKILL: p\n* p :prompt:\nHi.\n";

    fn cache_fixture() -> CacheFixture {
        let state = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        let skills = project_dir(project.path());
        std::fs::create_dir_all(&skills).unwrap();
        std::fs::write(user.path().join("u.org"), RULE_SKILL).unwrap();
        std::fs::write(skills.join("p.org"), PROMPT_SKILL).unwrap();
        let store = TrustStore::in_state_dir(state.path());
        store
            .trust(
                &skills.join("p.org").canonicalize().unwrap(),
                PROMPT_SKILL.as_bytes(),
            )
            .unwrap();
        let dirs = SkillDirs {
            builtin: false,
            user: Some(user.path().to_path_buf()),
            project: Some(skills.clone()),
            trust: Some(store.path().to_path_buf()),
            project_auto_approval: false,
        };
        CacheFixture {
            state,
            _project: project,
            user,
            skills,
            store,
            dirs,
        }
    }

    #[test]
    fn a_second_load_comes_from_one_cache_file() {
        let f = cache_fixture();
        let cache_dir = f.state.path().join(super::super::cache::CACHE_DIR_NAME);

        let first = SkillSet::load(&f.dirs);
        assert_eq!(first.len(), 2, "{:?}", first.diagnostics());
        assert_eq!(first.cache_hits(), 0);
        assert_eq!(json_entries(&cache_dir).len(), 1, "one file per scope");

        let second = SkillSet::load(&f.dirs);
        assert_eq!(second.cache_hits(), 2);
        assert!(
            second.diagnostics().is_empty(),
            "{:?}",
            second.diagnostics()
        );
        let mut names: Vec<&str> = second.skills().iter().map(|s| s.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["p", "u"]);
        // The cached rule and trigger still judge, compiled on first use.
        let loaded = second.skills();
        let u = loaded.iter().find(|s| s.name == "u").unwrap();
        let pattern = u.rules[0].pattern.as_ref().unwrap();
        assert!(!pattern.is_compiled());
        assert!(pattern.is_match("rm -rf x") && !pattern.is_match("ls"));
        assert!(u.is_active("please deploy") && !u.is_active("hello"));

        // Trust is judged on the bytes read, never on the cache.
        std::fs::write(f.skills.join("p.org"), "#+SKILL: p\n* p :prompt:\nBye.\n").unwrap();
        let changed = SkillSet::load(&f.dirs);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed.untrusted().len(), 1);
    }

    #[test]
    fn a_garbage_cache_file_costs_a_parse_and_a_warning_and_is_rewritten() {
        let f = cache_fixture();
        let cache_dir = f.state.path().join(super::super::cache::CACHE_DIR_NAME);
        SkillSet::load(&f.dirs);
        let [file] = json_entries(&cache_dir).try_into().unwrap();
        for garbage in [&b"not json {"[..], b"", &[0xff, 0xfe, 0x00][..]] {
            std::fs::write(&file, garbage).unwrap();
            let set = SkillSet::load(&f.dirs);
            assert_eq!(set.len(), 2, "{:?}", set.diagnostics());
            assert_eq!(set.cache_hits(), 0);
            let warnings: Vec<&Diagnostic> = set.diagnostics().iter().collect();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert_eq!(warnings[0].severity, Severity::Warning);
            assert_eq!(warnings[0].path, file);
            assert!(warnings[0].message.contains("parse cache was not used"));
            let rewritten = std::fs::read(&file).unwrap();
            assert!(serde_json::from_slice::<serde_json::Value>(&rewritten).is_ok());
            let again = SkillSet::load(&f.dirs);
            assert_eq!(again.cache_hits(), 2);
            assert!(again.diagnostics().is_empty());
        }
    }

    #[test]
    fn a_same_size_rewrite_with_the_old_mtime_is_parsed_and_a_deleted_file_dropped() {
        let f = cache_fixture();
        let cache_dir = f.state.path().join(super::super::cache::CACHE_DIR_NAME);
        let u = f.user.path().join("u.org");
        SkillSet::load(&f.dirs);
        let mtime = std::fs::metadata(&u).unwrap().modified().unwrap();
        // Same size, same mtime (set back by hand), a moment later: only
        // the content and the ctime differ.
        let edited = RULE_SKILL.replace("deploy", "DEPLOY");
        assert_eq!(edited.len(), RULE_SKILL.len());
        std::fs::write(&u, &edited).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&u)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let set = SkillSet::load(&f.dirs);
        assert_eq!(set.cache_hits(), 1, "the edited file is parsed again");
        let skills = set.skills();
        let skill = skills.iter().find(|s| s.name == "u").unwrap();
        assert_eq!(skill.trigger.to_string(), "/\\bDEPLOY\\b/");

        std::fs::remove_file(&u).unwrap();
        assert_eq!(SkillSet::load(&f.dirs).len(), 1);
        let [file] = json_entries(&cache_dir).try_into().unwrap();
        let stored: serde_json::Value =
            serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let paths: Vec<&str> = stored["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths.len(), 1, "{paths:?}");
        assert!(paths[0].ends_with("p.org"));
        drop(f.store);
    }

    #[test]
    fn a_settled_file_is_taken_by_its_lstat_and_an_edit_still_seen() {
        let f = cache_fixture();
        let first = SkillSet::load(&f.dirs);
        assert_eq!(first.cache_unread(), 0);
        // Just written: not settled, so read and hashed each time.
        let second = SkillSet::load(&f.dirs);
        assert_eq!((second.cache_hits(), second.cache_unread()), (2, 0));
        std::thread::sleep(
            super::super::cache::SETTLE_MARGIN + std::time::Duration::from_millis(100),
        );
        // Settled now: this load records the lstat, the next trusts it.
        assert_eq!(SkillSet::load(&f.dirs).cache_unread(), 0);
        let settled = SkillSet::load(&f.dirs);
        assert_eq!((settled.cache_hits(), settled.cache_unread()), (2, 2));
        assert_eq!(settled.len(), 2);
        // Any write changes the ctime: read, hashed, and (here) untrusted.
        std::fs::write(f.skills.join("p.org"), "#+SKILL: p\n* p :prompt:\nBye.\n").unwrap();
        let edited = SkillSet::load(&f.dirs);
        assert_eq!(edited.cache_unread(), 1);
        assert_eq!(edited.untrusted().len(), 1);
        assert_eq!(edited.len(), 1);
    }

    #[test]
    fn no_parse_cache_when_the_state_directory_is_inside_the_project() {
        let project = tempfile::tempdir().unwrap();
        let dirs = SkillDirs {
            builtin: false,
            user: None,
            project: Some(project_dir(project.path())),
            trust: Some(project.path().join("state/trusted-skills.json")),
            project_auto_approval: false,
        };
        assert!(parse_cache(&dirs).is_none());
        let elsewhere = tempfile::tempdir().unwrap();
        let dirs = SkillDirs {
            trust: Some(elsewhere.path().join("trusted-skills.json")),
            ..dirs
        };
        assert!(parse_cache(&dirs).is_some());
    }

    #[test]
    fn only_org_files_directly_in_the_directory_count() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "b.org",
            "a.org",
            ".#a.org",
            "#a.org#",
            "a.org~",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub.org")).unwrap();
        let names: Vec<String> = org_files(dir.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["a.org", "b.org"]);
        assert!(org_files(&dir.path().join("missing")).is_empty());
    }
}
