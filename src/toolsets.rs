//! Toolsets from skills: for each working directory, the built-in Rust
//! tools plus every tool of the skills in effect there (built-in skills,
//! the user's, and the project's that the person trusts), the active
//! skills' prompt sections, and a gate engine of the built-in gates, every
//! layer's skill rules and the user's policy file.
//!
//! Skill directories are fingerprinted at the start of every turn and
//! re-read only when a file changed, so a new skill is seen on the next turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::agent::{Toolset, ToolsetSource};
use crate::gates::engine::GateEngine;
use crate::skills::{
    load_policy, Diagnostic, RuleGate, SkillDirs, SkillLoader, SkillSet, SkillSummary,
};
use crate::tools::{builtin, ToolRegistry};
use crate::util::sync::lock;

/// Where skills come from.
#[derive(Debug, Clone)]
pub struct SkillSources {
    pub builtin: bool,
    pub user_dir: Option<PathBuf>,
    pub policy_file: Option<PathBuf>,
    /// The trust store for project skills; without one, none load.
    pub trust_file: Option<PathBuf>,
    /// `trust_project_tool_approval` from config.toml: trusted project
    /// tools keep `:APPROVAL: auto` instead of asking.
    pub project_auto_approval: bool,
}

impl SkillSources {
    pub fn dirs_for(&self, cwd: &Path) -> SkillDirs {
        SkillDirs {
            builtin: self.builtin,
            user: self.user_dir.clone(),
            project: Some(crate::skills::project_dir(cwd)),
            trust: self.trust_file.clone(),
            project_auto_approval: self.project_auto_approval,
        }
    }
}

struct Entry {
    loader: SkillLoader,
    /// The gate engine built for `loader.current()`; rebuilt when it changes.
    gates: Arc<GateEngine>,
    built_for: Arc<SkillSet>,
}

pub struct SkillToolsets {
    sources: SkillSources,
    by_cwd: Mutex<HashMap<PathBuf, Entry>>,
    policy: Mutex<Arc<RuleGate>>,
    policy_diagnostics: Mutex<Vec<Diagnostic>>,
}

impl SkillToolsets {
    pub fn new(sources: SkillSources) -> SkillToolsets {
        let toolsets = SkillToolsets {
            sources,
            by_cwd: Mutex::default(),
            policy: Mutex::new(Arc::new(RuleGate::new("policy", Vec::new()))),
            policy_diagnostics: Mutex::default(),
        };
        toolsets.load_policy();
        toolsets
    }

    fn load_policy(&self) {
        let Some(path) = &self.sources.policy_file else {
            return;
        };
        let (rules, diagnostics) = load_policy(path);
        // For the log file: the person is told at the start of each turn
        // (`skills::load_error_notice`), once.
        for d in &diagnostics {
            tracing::info!("{d}");
        }
        *lock(&self.policy) = Arc::new(RuleGate::new("policy", rules));
        *lock(&self.policy_diagnostics) = diagnostics;
    }

    fn engine(&self, set: &SkillSet) -> Arc<GateEngine> {
        let mut engine = GateEngine::with_builtin_gates();
        for gate in set.gates() {
            engine.add(Arc::from(gate));
        }
        engine.add(lock(&self.policy).clone());
        Arc::new(engine)
    }

    /// The current skill set for `cwd` (re-read if a file changed).
    pub fn skills(&self, cwd: &Path) -> Arc<SkillSet> {
        let mut map = lock(&self.by_cwd);
        let entry = self.entry(&mut map, cwd);
        entry.loader.current()
    }

    fn entry<'m>(&self, map: &'m mut HashMap<PathBuf, Entry>, cwd: &Path) -> &'m mut Entry {
        let entry = map.entry(cwd.to_path_buf()).or_insert_with(|| {
            let loader = SkillLoader::new(self.sources.dirs_for(cwd));
            let set = loader.current();
            for d in set.diagnostics() {
                tracing::info!("{d}");
            }
            Entry {
                gates: self.engine(&set),
                built_for: set,
                loader,
            }
        });
        if entry.loader.refresh() {
            let set = entry.loader.current();
            tracing::info!(cwd = %cwd.display(), skills = set.len(), "skills reloaded");
            for d in set.diagnostics() {
                tracing::info!("{d}");
            }
        }
        let current = entry.loader.current();
        if !Arc::ptr_eq(&current, &entry.built_for) {
            entry.gates = self.engine(&current);
            entry.built_for = current;
        }
        entry
    }

    /// Re-read every skill directory and the policy file now. Returns the
    /// skill names and diagnostics for `cwd` (or for the first known
    /// directory when `cwd` is None).
    pub fn reload_all(&self, cwd: Option<&Path>) -> (Vec<String>, Vec<Diagnostic>) {
        self.load_policy();
        let mut map = lock(&self.by_cwd);
        for entry in map.values_mut() {
            entry.loader.reload();
            let set = entry.loader.current();
            entry.gates = self.engine(&set);
            entry.built_for = set;
        }
        let set = match cwd {
            Some(cwd) => Some(self.entry(&mut map, cwd).loader.current()),
            None => map.values().next().map(|e| e.loader.current()),
        };
        let mut diagnostics = lock(&self.policy_diagnostics).clone();
        let names = match set {
            Some(set) => {
                diagnostics.extend(set.diagnostics().iter().cloned());
                set.names()
            }
            None => Vec::new(),
        };
        (names, diagnostics)
    }
}

impl ToolsetSource for SkillToolsets {
    fn toolset(&self, cwd: &Path, user_message: &str) -> Toolset {
        let mut map = lock(&self.by_cwd);
        let entry = self.entry(&mut map, cwd);
        let set = entry.loader.current();
        let mut tools = ToolRegistry::new();
        builtin::register(&mut tools);
        register_active_tools(&set, user_message, &mut tools);
        let mut problems = lock(&self.policy_diagnostics).clone();
        problems.extend(set.diagnostics().iter().cloned());
        Toolset {
            tools,
            prompt: set.system_prompt(user_message),
            gates: entry.gates.clone(),
            notices: crate::skills::load_error_notice(&problems)
                .into_iter()
                .collect(),
        }
    }

    fn reload(&self, cwd: Option<&Path>) -> (Vec<String>, Vec<Diagnostic>) {
        self.reload_all(cwd)
    }

    fn commands(&self, cwd: &Path) -> Vec<crate::skills::Command> {
        self.skills(cwd).commands()
    }

    fn list(&self, cwd: &Path) -> (Vec<SkillSummary>, Vec<Diagnostic>) {
        let set = self.skills(cwd);
        let mut diagnostics = lock(&self.policy_diagnostics).clone();
        diagnostics.extend(set.diagnostics().iter().cloned());
        (set.list(), diagnostics)
    }
}

/// Tool selection: only the tools of skills active for `user_message`
/// (always-on, triggered, or mentioned as `@name`) are offered, so a
/// thousand installed skills do not ride along with every request. A tool
/// name offered by several active skills goes to the highest-ranked one
/// (the clash rule of [`SkillSet::tools`]); a skill tool replaces a built-in
/// of the same name.
fn register_active_tools(set: &SkillSet, user_message: &str, registry: &mut ToolRegistry) {
    let mut taken = std::collections::BTreeSet::new();
    for skill in set.skills() {
        if !skill.is_active(user_message) {
            continue;
        }
        for tool in &skill.tools {
            if taken.insert(tool.spec.name.clone()) {
                registry.register(tool.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, trigger: &str) -> String {
        format!(
            "#+TITLE: {name}\n#+SKILL: {name}\n#+DESCRIPTION: Test skill.\n#+TRIGGER: {trigger}\n\n\
             * {name}_tool :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:END:\nDoes a thing.\n\n\
             | name | type   | required | description |\n|------+--------+----------+-------------|\n| path | string | yes      | A path.     |\n\n\
             #+begin_src bash\necho \"$ARG_PATH\"\n#+end_src\n"
        )
    }

    #[test]
    fn only_active_skills_contribute_tools() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("skills");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("git.org"), skill("gitty", r"/\bcommit\b/")).unwrap();
        std::fs::write(dir.join("base.org"), skill("basey", "always")).unwrap();
        std::fs::write(dir.join("off.org"), skill("offy", "never")).unwrap();
        let toolsets = SkillToolsets::new(SkillSources {
            builtin: false,
            user_dir: Some(dir),
            policy_file: None,
            trust_file: None,
            project_auto_approval: false,
        });
        let names = |msg: &str| -> Vec<String> {
            let t = toolsets.toolset(tmp.path(), msg);
            t.tools.names().map(str::to_string).collect()
        };
        let plain = names("hello");
        assert!(plain.contains(&"basey_tool".to_string()), "{plain:?}");
        assert!(!plain.contains(&"gitty_tool".to_string()), "{plain:?}");
        assert!(!plain.contains(&"offy_tool".to_string()), "{plain:?}");
        let triggered = names("please commit this");
        assert!(
            triggered.contains(&"gitty_tool".to_string()),
            "{triggered:?}"
        );
        let mentioned = names("use @offy");
        assert!(
            mentioned.contains(&"offy_tool".to_string()),
            "{mentioned:?}"
        );
        // The built-in Rust tools are always there.
        assert!(plain.contains(&"read_file".to_string()), "{plain:?}");
    }
}
