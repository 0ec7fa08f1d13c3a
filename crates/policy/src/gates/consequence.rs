//! Consequence classes: what an action's changeset *does*, whatever command
//! wrote it (issue 36).
//!
//! A command that runs into an overlay (or a file tool whose one write is
//! recorded) changes nothing before its changeset is judged, so the judge
//! reads the result, not the command text:
//!
//! - project edits, creations and deletions undo can restore: applied,
//!   recorded, undoable, never asked (the other effect gates keep their
//!   configured thresholds);
//! - **a loss undo cannot restore**: a file outside the build folders
//!   whose earlier content was too big to keep ([`judge`], `effect-loss`;
//!   `git_damage` is `effect-project-git`'s), or project files deleted or
//!   cut whose pre-images exceed the checkpoint quota ([`over_quota`]) →
//!   asked, with the diff;
//! - **the host-executed surface** ([`host_executed`], `effect-host-executed`):
//!   files the person's own tools run or source on the host without the
//!   person choosing to run project code — a virtual environment's `bin/`,
//!   `node_modules/.bin`, hook folders and hook-framework configuration,
//!   direnv and editor auto-run files. The list is data
//!   (`host_surface.toml`, each entry with its source), completed at run
//!   time by the repository's `core.hooksPath` and by every folder holding
//!   a `pyvenv.cfg`. Changed or created by any command → asked, with the
//!   diff. `.pth` files and modules named like standard ones stay
//!   [`crate::gates::runtime_plants`]'s.
//!
//! [`ConsequenceGate`] is the text stage of the same idea: a `write_file`
//! onto the host-executed surface asks before it writes, and where an
//! action cannot run contained (`GateContext::contained` false: sandbox or
//! checkpoints off, no overlay) the asks the changeset would otherwise
//! replace stay: every `write_file`, and a recursive `rm`.

use std::path::Path;
use std::sync::OnceLock;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use crate::action::{Action, Effect};
use crate::checkpoint::changeset::Passthrough;
use crate::checkpoint::effect::{ChangeKind, ObservedEffect};
use crate::control_surface::control_entry;
use crate::gates::engine::verdict_from_findings;
use crate::gates::shell::{resolve_path, script_of};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// The data file: the host-executed surface and the regenerable folders.
const SURFACE_TOML: &str = include_str!("host_surface.toml");

/// One kind of file the person's tools run on the host.
#[derive(Debug, Clone, Deserialize)]
pub struct SurfaceEntry {
    /// The tool that runs it ("pre-commit").
    pub tool: String,
    /// Project-relative globs (`/`-separated; `**/` for any depth).
    pub globs: Vec<String>,
    /// What runs when, as the question shows it.
    pub why: String,
    /// The tool's own documentation of the behaviour.
    pub source: String,
    /// A path the test of this entry writes (it must be asked).
    pub example: String,
    /// The globs are relative to any folder holding a `pyvenv.cfg`.
    #[serde(default)]
    pub venv: bool,
}

#[derive(Deserialize)]
struct SurfaceFile {
    surface: Vec<SurfaceEntry>,
    regenerable: Regenerable,
}

#[derive(Deserialize)]
struct Regenerable {
    dirs: Vec<String>,
}

/// The compiled list.
pub struct Surface {
    pub entries: Vec<SurfaceEntry>,
    sets: Vec<GlobSet>,
    /// Folder names whose contents the build makes again.
    pub regenerable: Vec<String>,
}

/// The host-executed surface, parsed once. The data file is part of the
/// binary and a unit test reads it, so a broken entry never ships.
#[allow(clippy::expect_used)] // the built-in data file: a unit test reads every entry
pub fn surface() -> &'static Surface {
    static SURFACE: OnceLock<Surface> = OnceLock::new();
    SURFACE.get_or_init(|| {
        let file: SurfaceFile =
            toml::from_str(SURFACE_TOML).expect("host_surface.toml is checked by its tests");
        let sets = file
            .surface
            .iter()
            .map(|e| {
                let mut set = GlobSetBuilder::new();
                for g in &e.globs {
                    let glob = GlobBuilder::new(g)
                        .literal_separator(true)
                        .build()
                        .expect("host_surface.toml globs are checked by its tests");
                    set.add(glob);
                }
                set.build().expect("a set of valid globs builds")
            })
            .collect();
        Surface {
            entries: file.surface,
            sets,
            regenerable: file.regenerable.dirs,
        }
    })
}

/// What the judge may know of the project beyond the changeset, read by
/// the caller (the judge itself does no I/O).
pub struct Surroundings<'a> {
    /// Project-relative folders the repository's git settings make hook
    /// folders (`core.hooksPath`, e.g. `.husky/_`).
    pub hook_dirs: &'a [String],
    /// Whether the project-relative folder holds a `pyvenv.cfg` (in the
    /// project, or written by the action).
    pub is_venv: &'a dyn Fn(&str) -> bool,
}

impl Surroundings<'_> {
    /// Nothing known beyond the static list.
    pub fn none() -> Surroundings<'static> {
        Surroundings {
            hook_dirs: &[],
            is_venv: &|_| false,
        }
    }
}

/// Why the project-relative path `rel` is on the host-executed surface, or
/// `None`.
pub fn host_executed(rel: &str, around: &Surroundings<'_>) -> Option<String> {
    let rel = rel.trim_start_matches("./");
    for dir in around.hook_dirs {
        let dir = dir.trim_end_matches('/');
        if !dir.is_empty() && rel.starts_with(dir) && rel[dir.len()..].starts_with('/') {
            return Some(format!(
                "`{rel}` is in `{dir}`, the repository's `core.hooksPath`: git runs the hooks \
                 there at the person's next `git commit`, `git push` or `git checkout`"
            ));
        }
    }
    let s = surface();
    for (entry, set) in s.entries.iter().zip(&s.sets) {
        if entry.venv {
            // Every folder above the path that could be the environment.
            let hit = rel.match_indices('/').any(|(at, _)| {
                let (dir, rest) = (&rel[..at], &rel[at + 1..]);
                set.is_match(rest) && (around.is_venv)(dir)
            });
            if hit {
                return Some(reason(rel, entry));
            }
        } else if set.is_match(rel) {
            return Some(reason(rel, entry));
        }
    }
    None
}

fn reason(rel: &str, entry: &SurfaceEntry) -> String {
    format!("`{rel}` ({}): {}", entry.tool, entry.why)
}

/// Whether an unrecorded write (an overlay's passthrough) must wait for the
/// effect stage instead of being applied at once: a runtime plant, a path
/// of the static host-executed surface, or any `bin/` folder (a virtual
/// environment's, whatever its name; the effect stage looks for its
/// `pyvenv.cfg`).
pub fn needs_judging(path: &str) -> bool {
    crate::gates::runtime_plants::plant(path, true).is_some()
        || host_executed(path, &Surroundings::none()).is_some()
        || path.split('/').any(|part| part == "bin")
        || path.ends_with("pyvenv.cfg")
}

/// Whether a lost file lies in a folder the build makes again.
fn regenerable(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let dirs = &parts[..parts.len().saturating_sub(1)];
    dirs.iter()
        .any(|d| surface().regenerable.iter().any(|r| r == d) || d.ends_with(".egg-info"))
}

/// Judge a changeset by its consequences: the host-executed surface in
/// the recorded changes and in the unrecorded writes (ignored trees such as
/// `.venv` and `node_modules` included), and losses undo cannot restore.
/// Returns the verdicts that are not *allow* (empty: allow).
pub fn judge(
    effect: &ObservedEffect,
    passthrough: &[Passthrough],
    around: &Surroundings<'_>,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    let written = effect
        .changes
        .iter()
        .filter(|c| c.kind != ChangeKind::Deleted)
        .map(|c| c.path.as_str())
        .chain(
            passthrough
                .iter()
                .filter(|p| !p.remove && !p.dir)
                .map(|p| p.path.as_str()),
        );
    let mut host = Vec::new();
    for path in written {
        // The control surface's own gate names those already.
        if control_entry(Path::new(path)).is_some() {
            continue;
        }
        if let Some(why) = host_executed(path, around) {
            if !host.contains(&why) {
                host.push(why);
            }
        }
    }
    if !host.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-host-executed",
            format!(
                "the action changed what the person's own tools run on the host, outside any \
                 sandbox: {}. Approving applies exactly the change shown; it then runs the next \
                 time that tool does",
                listed(&host)
            ),
        ));
    }
    let lost: Vec<&str> = passthrough
        .iter()
        .filter(|p| p.existed && p.before.is_none() && !p.dir)
        .filter(|p| !(p.path == ".git" || p.path.starts_with(".git/")))
        .filter(|p| !regenerable(&p.path))
        .map(|p| p.path.as_str())
        .collect();
    if !lost.is_empty() {
        out.push(Verdict::new(
            Decision::Ask,
            "effect-loss",
            format!(
                "the action overwrote or removed {} whose earlier content was too big to keep \
                 (over 256 KiB a file, or 16 MiB an action), so undo could not bring it back. \
                 Approving applies the change and loses that content",
                listed(&lost.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>())
            ),
        ));
    }
    out
}

/// The loss class for what a contained action deleted or emptied: undo
/// restores project files from their pre-images in the record, but the
/// checkpoint store holds at most `max_store_bytes` (0: no quota). Past
/// it, keeping them would evict every older undo step and still leave the
/// store over its bound, so the deletion is asked rather than promised
/// undoable.
pub fn over_quota(effect: &ObservedEffect, max_store_bytes: u64) -> Option<Verdict> {
    let destroyed: Vec<_> = effect
        .changes
        .iter()
        .filter(|c| {
            c.kind == ChangeKind::Deleted
                || (c.kind == ChangeKind::Modified
                    && c.old_size.unwrap_or(0) > c.new_size.unwrap_or(0))
        })
        .collect();
    let bytes = destroyed
        .iter()
        .map(|c| c.old_size.unwrap_or(0))
        .fold(0u64, u64::saturating_add);
    if max_store_bytes == 0 || bytes <= max_store_bytes {
        return None;
    }
    let names: Vec<String> = destroyed.iter().map(|c| format!("`{}`", c.path)).collect();
    Some(Verdict::new(
        Decision::Ask,
        "effect-loss",
        format!(
            "the action deleted or cut {} file(s) whose earlier content ({bytes} bytes) is more \
             than the checkpoint store may hold ({max_store_bytes} bytes, `[checkpoints] \
             max_store_bytes`), so undo cannot be promised to bring them back: {}. Approving \
             applies the change; keeping its pre-images pushes older undo steps out of the store",
            destroyed.len(),
            listed(&names)
        ),
    ))
}

fn listed(items: &[String]) -> String {
    let mut shown = items.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 5 {
        shown.push_str(&format!("; and {} more", items.len() - 5));
    }
    shown
}

/// Whether a script removes recursively (`rm -r`, `rm -rf`, `rm
/// --recursive`).
fn removes_recursively(action: &Action, ctx: &GateContext) -> bool {
    let Some(script) = script_of(&action.effect, ctx) else {
        return false;
    };
    script
        .commands
        .iter()
        .any(|c| c.program == "rm" && c.has_flag(&['r', 'R'], &["recursive"]))
}

/// The text stage: a `write_file` onto the host-executed surface asks
/// before it writes; without containment, every `write_file` and every
/// recursive `rm` asks as before.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConsequenceGate;

impl Gate for ConsequenceGate {
    fn name(&self) -> &str {
        "consequence"
    }

    fn priority(&self) -> i32 {
        46
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = Vec::new();
        match &action.effect {
            Effect::WriteFile { path, .. } => {
                let abs = resolve_path(&path.to_string_lossy(), ctx);
                if let Ok(rel) = abs.strip_prefix(&ctx.cwd) {
                    let rel = rel.to_string_lossy();
                    if let Some(why) = host_executed(&rel, &Surroundings::none()) {
                        findings.push((
                            Decision::Ask,
                            format!(
                                "writes {why}. Approving writes the file; it then runs on the \
                                 host the next time that tool does"
                            ),
                        ));
                    }
                }
                if !ctx.contained {
                    findings.push((
                        Decision::Ask,
                        "writes straight into the directory without a checkpoint (checkpoints \
                         off, or a directory they do not cover, such as the home directory), so \
                         its change is neither judged before it lands nor undoable; approving \
                         writes the file"
                            .to_string(),
                    ));
                }
            }
            Effect::Run { .. } if !ctx.contained && removes_recursively(action, ctx) => {
                findings.push((
                    Decision::Ask,
                    "a recursive delete can remove a lot of work in one line, and this command \
                     does not run contained (sandbox, checkpoints or overlay transactions off, a \
                     network grant, a long-running tool, or a directory checkpoints do not \
                     cover), so nothing is judged before it lands; approving runs it"
                        .to_string(),
                ));
            }
            _ => {}
        }
        verdict_from_findings(self.name(), findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::effect::FileChange;

    fn created(path: &str) -> FileChange {
        FileChange {
            path: path.into(),
            kind: ChangeKind::Created,
            old_size: None,
            new_size: Some(1),
            old: None,
            new: None,
        }
    }

    fn pass(path: &str) -> Passthrough {
        serde_json::from_value(serde_json::json!({ "path": path, "ignored": true, "size": 1 }))
            .unwrap()
    }

    /// One test per entry of the data file: its example, written as a
    /// recorded change and as an unrecorded (ignored-tree) write, is asked
    /// — by this judge, or by the control surface's gate for the entries
    /// that are control surface too — and every entry names its source.
    #[test]
    fn every_entry_of_the_host_surface_is_asked() {
        let venv = |dir: &str| dir == "env3";
        let around = Surroundings {
            hook_dirs: &[],
            is_venv: &venv,
        };
        assert!(surface().entries.len() >= 18);
        for entry in &surface().entries {
            assert!(entry.source.starts_with("https://"), "{}", entry.tool);
            let ex = entry.example.as_str();
            assert!(
                host_executed(ex, &around).is_some(),
                "{ex} ({})",
                entry.tool
            );
            let by_change = judge(
                &ObservedEffect {
                    changes: vec![created(ex)],
                    ..Default::default()
                },
                &[],
                &around,
            );
            let by_pass = judge(&ObservedEffect::default(), &[pass(ex)], &around);
            if control_entry(Path::new(ex)).is_some() {
                assert!(
                    by_change.is_empty(),
                    "{ex}: the control surface's gate asks"
                );
                continue;
            }
            for v in [by_change, by_pass] {
                assert_eq!(v.len(), 1, "{ex}");
                assert_eq!(v[0].gate, "effect-host-executed");
                assert!(v[0].reason.contains(ex), "{}", v[0].reason);
                assert!(v[0].reason.contains("Approving"), "{}", v[0].reason);
            }
        }
    }

    #[test]
    fn ordinary_project_files_are_not_the_host_surface() {
        let none = Surroundings::none();
        for ok in [
            "src/main.rs",
            "README.md",
            "bin/tool.sh",
            "env3/bin/pip",
            ".venv/lib/python3.11/site-packages/x.py",
            "node_modules/jest/index.js",
            "docs/.husky.md",
            "pre-commit-config.yaml",
            "lefthook.yml.bak",
            "src/.env.example",
        ] {
            assert_eq!(host_executed(ok, &none), None, "{ok}");
        }
    }

    #[test]
    fn a_folder_with_pyvenv_cfg_is_a_venv_and_hooks_path_counts() {
        let venv = |dir: &str| dir == "tools/py";
        let around = Surroundings {
            hook_dirs: &[".githooks".to_string()],
            is_venv: &venv,
        };
        assert!(host_executed("tools/py/bin/activate", &around).is_some());
        assert!(host_executed("tools/py/pyvenv.cfg", &around).is_some());
        assert!(host_executed("tools/other/bin/activate", &around).is_none());
        assert!(host_executed(".githooks/pre-commit", &around).is_some());
        assert!(host_executed(".githooksx/pre-commit", &around).is_none());
    }

    #[test]
    fn a_loss_outside_build_folders_asks() {
        let lost = |path: &str| {
            let p: Passthrough = serde_json::from_value(serde_json::json!({
                "path": path, "ignored": true, "remove": true, "existed": true
            }))
            .unwrap();
            judge(&ObservedEffect::default(), &[p], &Surroundings::none())
        };
        assert_eq!(lost("data/model.bin")[0].gate, "effect-loss");
        assert!(lost("target/debug/app").is_empty());
        assert!(lost("build/out.o").is_empty());
        assert!(lost("pkg.egg-info/PKG-INFO").is_empty());
    }

    #[test]
    fn passthrough_that_waits_for_judging() {
        assert!(needs_judging(".venv/bin/activate"));
        assert!(needs_judging("myenv/bin/pip"));
        assert!(needs_judging("x/site-packages/a.pth"));
        assert!(!needs_judging("node_modules/jest/index.js"));
        assert!(!needs_judging("build/out.o"));
    }

    fn ctx(contained: bool) -> GateContext {
        GateContext {
            cwd: "/p".into(),
            contained,
            ..GateContext::default()
        }
    }

    #[test]
    fn the_text_stage_asks_only_where_nothing_contains_the_action() {
        let write = |path: &str| Action {
            tool: "write_file".into(),
            target: "files".into(),
            arguments: serde_json::json!({}),
            effect: Effect::WriteFile {
                path: path.into(),
                content: "x".into(),
            },
            approval: crate::action::Approval::Auto,
            timeout_secs: None,
        };
        assert!(ConsequenceGate
            .check(&write("src/a.rs"), &ctx(true))
            .is_none());
        let v = ConsequenceGate
            .check(&write("src/a.rs"), &ctx(false))
            .unwrap();
        assert_eq!(v.decision, Decision::Ask);
        let v = ConsequenceGate
            .check(&write(".pre-commit-config.yaml"), &ctx(true))
            .unwrap();
        assert!(v.reason.contains("pre-commit"), "{}", v.reason);
        let rm = Action::shell_for_tests("rm -rf build");
        assert!(ConsequenceGate.check(&rm, &ctx(true)).is_none());
        assert_eq!(
            ConsequenceGate.check(&rm, &ctx(false)).map(|v| v.decision),
            Some(Decision::Ask)
        );
        let plain = Action::shell_for_tests("rm notes.txt");
        assert!(ConsequenceGate.check(&plain, &ctx(false)).is_none());
    }
}
