//! Loading skills from the built-in set, the person's directory and the
//! project's directory, and reloading them cheaply when files change.
//!
//! Later sources override earlier ones by skill name (builtin < user <
//! project), so a project can replace the built-in `shell` skill with its
//! own. One broken file never stops the others: it is left out and its
//! diagnostics are kept with the set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::gates::Gate;
use crate::tools::{Tool, ToolRegistry};

use super::diagnostic::{Diagnostic, Severity};
use super::parse::{parse_skill, parse_skill_bytes, MAX_SKILL_BYTES};
use super::rules::{Rule, RuleGate};
use super::{Origin, Skill};

/// The built-in skills, embedded at compile time.
pub const BUILTIN_SKILLS: [(&str, &str); 4] = [
    ("shell.org", include_str!("../../skills/shell.org")),
    ("files.org", include_str!("../../skills/files.org")),
    ("memex.org", include_str!("../../skills/memex.org")),
    ("emacs.org", include_str!("../../skills/emacs.org")),
];

/// Where skills are looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillDirs {
    /// Whether to load the embedded built-in skills.
    pub builtin: bool,
    /// Usually `$XDG_CONFIG_HOME/passepartout/skills`.
    pub user: Option<PathBuf>,
    /// Usually `<cwd>/.passepartout/skills`.
    pub project: Option<PathBuf>,
}

impl SkillDirs {
    /// The standard places: built-ins, `$XDG_CONFIG_HOME/passepartout/skills`
    /// (or `~/.config/...`), and `<cwd>/.passepartout/skills`.
    pub fn standard(cwd: &Path) -> Self {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
        SkillDirs {
            builtin: true,
            user: config.map(|c| c.join("passepartout").join("skills")),
            project: Some(cwd.join(".passepartout").join("skills")),
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

/// The `.org` files directly in `dir`, sorted; editor lock and autosave
/// files (`.#x.org`, `#x.org#`) are skipped.
pub fn org_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            name.ends_with(".org")
                && !name.starts_with('.')
                && !name.starts_with('#')
                && p.is_file()
        })
        .collect();
    files.sort();
    files
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
}

/// The skills in effect, by name, with every diagnostic found loading them.
#[derive(Debug, Clone, Default)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
    diagnostics: Vec<Diagnostic>,
}

impl SkillSet {
    /// Load every source in `dirs`. Never fails: problems become diagnostics.
    pub fn load(dirs: &SkillDirs) -> SkillSet {
        let mut set = SkillSet::default();
        if dirs.builtin {
            let mut seen = BTreeMap::new();
            for (file, text) in BUILTIN_SKILLS {
                let path = PathBuf::from("<builtin>").join(file);
                let (skill, diags) = parse_skill(&path, text, Origin::Builtin);
                set.add(skill, diags, &mut seen);
            }
        }
        for (origin, dir) in dirs.sources() {
            let mut seen = BTreeMap::new();
            for path in org_files(dir) {
                let (skill, diags) = load_file(&path, origin);
                set.add(skill, diags, &mut seen);
            }
        }
        set.check_tool_clashes();
        set
    }

    /// Build a set from skills already parsed (tests, embedding).
    pub fn from_skills(skills: Vec<Skill>) -> SkillSet {
        let mut set = SkillSet::default();
        let mut seen = BTreeMap::new();
        for s in skills {
            set.add(Some(s), Vec::new(), &mut seen);
        }
        set.check_tool_clashes();
        set
    }

    /// `seen`: skill names already defined by this same source, so two
    /// files of one directory claiming one name is reported, while a later
    /// source overriding an earlier one is the intended feature.
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
        self.skills.insert(skill.name.clone(), skill);
    }

    /// Two skills offering one tool name: the higher priority wins (then
    /// the later origin, then the name), and the loser is told.
    fn check_tool_clashes(&mut self) {
        let mut owner: BTreeMap<String, &Skill> = BTreeMap::new();
        let mut notes = Vec::new();
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
        let mut v: Vec<&Skill> = self.skills.values().collect();
        v.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(b.origin.cmp(&a.origin))
                .then(a.name.cmp(&b.name))
        });
        v
    }

    /// The skill in effect under `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Skills in priority order.
    pub fn skills(&self) -> Vec<&Skill> {
        self.ranked()
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

    /// Register the skills' tools. Call after the Rust built-ins: a skill
    /// tool with a built-in's name replaces it.
    pub fn register_tools(&self, registry: &mut ToolRegistry) {
        for tool in self.tools() {
            registry.register(tool);
        }
    }

    /// The prompt sections of the skills active for `user_message`, highest
    /// priority first, each under a `## skill: NAME` line.
    pub fn system_prompt(&self, user_message: &str) -> String {
        self.ranked()
            .into_iter()
            .filter(|s| !s.prompt.is_empty() && s.is_active(user_message))
            .map(|s| format!("## skill: {}\n\n{}", s.name, s.prompt))
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Every rule of every skill.
    pub fn rules(&self) -> Vec<Rule> {
        self.ranked()
            .into_iter()
            .flat_map(|s| s.rules.iter().cloned())
            .collect()
    }

    /// One gate per skill that has rules, named `skill:NAME`. A skill's
    /// rules judge every action, not only its own tools (`:TOOL:` scopes).
    pub fn gates(&self) -> Vec<Box<dyn Gate>> {
        self.ranked()
            .into_iter()
            .filter(|s| !s.rules.is_empty())
            .map(|s| {
                Box::new(RuleGate::new(format!("skill:{}", s.name), s.rules.clone()))
                    as Box<dyn Gate>
            })
            .collect()
    }

    /// A summary per skill, in priority order (for `skills list` and the editor).
    pub fn list(&self) -> Vec<SkillSummary> {
        self.ranked()
            .into_iter()
            .map(|s| SkillSummary {
                name: s.name.clone(),
                description: s.description.clone(),
                origin: s.origin,
                path: s.path.clone(),
                priority: s.priority,
                trigger: s.trigger.to_string(),
                tools: s.tools.iter().map(|t| t.spec.name.clone()).collect(),
                rules: s.rules.len(),
            })
            .collect()
    }
}

/// Read and parse one file, refusing oversized files before reading them.
pub fn load_file(path: &Path, origin: Origin) -> (Option<Skill>, Vec<Diagnostic>) {
    let fail = |message: String| {
        (
            None,
            vec![Diagnostic {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                severity: Severity::Error,
                message,
            }],
        )
    };
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_SKILL_BYTES as u64 => {
            return fail(format!(
                "file is {} bytes, more than the {MAX_SKILL_BYTES}-byte limit for skill files",
                m.len()
            ))
        }
        Ok(_) => {}
        Err(e) => return fail(format!("cannot read file: {e}")),
    }
    match std::fs::read(path) {
        Ok(bytes) => parse_skill_bytes(path, &bytes, origin),
        Err(e) => fail(format!("cannot read file: {e}")),
    }
}

/// What the skill directories looked like: enough to notice an added,
/// removed, edited or touched file without reading any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fingerprint(Vec<(PathBuf, Option<SystemTime>, u64)>);

impl Fingerprint {
    /// Path, modification time and size of every `.org` file in the user and
    /// project directories (the built-ins cannot change).
    pub fn of(dirs: &SkillDirs) -> Fingerprint {
        let mut entries = Vec::new();
        for (_, dir) in dirs.sources() {
            for path in org_files(dir) {
                let meta = std::fs::metadata(&path).ok();
                let modified = meta.as_ref().and_then(|m| m.modified().ok());
                let len = meta.map_or(0, |m| m.len());
                entries.push((path, modified, len));
            }
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
    fn only_org_files_directly_in_the_directory_count() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.org", "a.org", ".#a.org", "#a.org#", "notes.txt"] {
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
