//! `passepartout skills check`, `list`, `trust` and `untrust`, as functions
//! the binary calls with its stdout (and, for `trust`, its stdin).

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::action::Approval;

use super::diagnostic::{Diagnostic, Severity};
use super::loader::{
    is_skill_file_name, load_file, org_files, read_limited, restrict_project_skill, trust_hint,
    SkillDirs, SkillSet,
};
use super::parse::parse_skill_bytes;
use super::trust::{sha256_hex, TrustStore};
use super::Origin;
use super::Skill;

/// Check files (a directory: every `.org` file under it, recursively, but
/// not Emacs lock, auto-save or backup files) and
/// print their diagnostics as `file:line:col: severity: message`, then a
/// summary line. Returns the exit code: 1 when any error was found.
pub fn check_command(paths: &[PathBuf], out: &mut dyn Write) -> i32 {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            collect_org_files(p, &mut files);
        } else {
            files.push(p.clone());
        }
    }
    let (mut errors, mut warnings) = (0, 0);
    for f in &files {
        let (_, diags) = load_file(f, Origin::User);
        for d in &diags {
            match d.severity {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
            }
            let _ = writeln!(out, "{d}");
        }
    }
    let _ = writeln!(
        out,
        "checked {} file{}: {errors} error{}, {warnings} warning{}",
        files.len(),
        plural(files.len()),
        plural(errors),
        plural(warnings)
    );
    i32::from(errors > 0)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn collect_org_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect_org_files(&p, out);
        } else if p
            .file_name()
            .is_some_and(|n| is_skill_file_name(&n.to_string_lossy()))
        {
            out.push(p);
        }
    }
}

/// Print every skill in effect (name, origin and path, priority, trigger,
/// tools, number of rules), then the diagnostics. Returns 1 when any file
/// failed to load.
pub fn list_command(dirs: &SkillDirs, out: &mut dyn Write) -> i32 {
    let set = SkillSet::load(dirs);
    write_list(&set, out);
    i32::from(set.has_errors())
}

/// The body of [`list_command`], for a set already loaded. Untrusted
/// project skills are listed last, marked `untrusted`, with how to trust.
pub fn write_list(set: &SkillSet, out: &mut dyn Write) {
    for s in set.list() {
        let _ = writeln!(out, "{} — {}", s.name, s.description);
        if !s.trusted {
            let _ = writeln!(
                out,
                "  status:   untrusted, not loaded; {}",
                trust_hint(&s.path)
            );
        }
        let _ = writeln!(out, "  from:     {} {}", s.origin, s.path.display());
        let _ = writeln!(out, "  priority: {}, trigger: {}", s.priority, s.trigger);
        let tools = if s.tools.is_empty() {
            "none".to_string()
        } else {
            s.tools.join(", ")
        };
        let _ = writeln!(out, "  tools:    {tools}");
        let _ = writeln!(out, "  rules:    {}", s.rules);
    }
    let diags: &[Diagnostic] = set.diagnostics();
    if !diags.is_empty() {
        let _ = writeln!(out);
        for d in diags {
            let _ = writeln!(out, "{d}");
        }
    }
}

/// A project skill file as read for the person to review before trusting:
/// the bytes read once, their hash, and what they would load.
#[derive(Debug)]
pub struct Review {
    /// The path as given.
    pub path: PathBuf,
    /// The canonical path: the trust store's key.
    pub canonical: PathBuf,
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// What the file would load as a project skill (with project limits).
    pub skill: Option<Skill>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Review {
    /// Read and parse `path` once.
    pub fn read(path: &Path, keep_auto: bool) -> Result<Review, String> {
        let bytes = read_limited(path).map_err(|d| d.to_string())?;
        let canonical = path
            .canonicalize()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let (skill, diagnostics) = parse_skill_bytes(path, &bytes, super::Origin::Project);
        Ok(Review {
            path: path.to_path_buf(),
            canonical,
            sha256: sha256_hex(&bytes),
            skill: skill.map(|s| restrict_project_skill(s, keep_auto)),
            bytes,
            diagnostics,
        })
    }

    /// Whether the file has errors (it would not load even when trusted).
    pub fn has_errors(&self) -> bool {
        self.skill.is_none() || self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// What the person is about to trust, in a few lines. `taken`: tool
    /// names of the binary, built-in and user skills, which a project
    /// skill's tool may not redefine.
    pub fn describe(&self, keep_auto: bool, taken: &BTreeSet<String>) -> String {
        let mut text = format!("{}\n  sha256:   {}\n", self.path.display(), self.sha256);
        match &self.skill {
            Some(s) => {
                text.push_str(&format!("  skill:    {} — {}\n", s.name, s.description));
                text.push_str(&format!(
                    "  prompt:   {}\n",
                    if s.prompt.is_empty() {
                        "none".to_string()
                    } else {
                        format!(
                            "{} characters, trigger {}",
                            s.prompt.chars().count(),
                            s.trigger
                        )
                    }
                ));
                if s.tools.is_empty() {
                    text.push_str("  tools:    none\n");
                }
                for t in &s.tools {
                    let approval = match t.approval {
                        Approval::Auto => "auto (runs without asking)",
                        Approval::Ask if !keep_auto => "ask (project tools always ask)",
                        Approval::Ask => "ask",
                        Approval::Never => "never",
                    };
                    if taken.contains(&t.spec.name) {
                        text.push_str(&format!(
                            "  tool:     {} (not offered: it would redefine a built-in or user tool)\n",
                            t.spec.name
                        ));
                    } else {
                        text.push_str(&format!(
                            "  tool:     {} (approval: {approval})\n",
                            t.spec.name
                        ));
                    }
                }
                if s.rules.is_empty() {
                    text.push_str(
                        "  rules:    none (rules from a project skill can only add restrictions)\n",
                    );
                }
                for r in &s.rules {
                    text.push_str(&format!("  rule:     {} → {}\n", r.name, r.decision));
                }
            }
            None => text.push_str("  does not parse\n"),
        }
        for d in &self.diagnostics {
            text.push_str(&format!("  {d}\n"));
        }
        text
    }
}

/// Tool names a project skill may not redefine: the binary's, the
/// built-in skills' and the user's skills'.
fn taken_tool_names(dirs: &SkillDirs) -> BTreeSet<String> {
    let without_project = SkillDirs {
        project: None,
        ..dirs.clone()
    };
    let mut registry = crate::tools::ToolRegistry::new();
    crate::tools::builtin::register(&mut registry);
    SkillSet::load(&without_project).register_tools(&mut registry);
    registry.names().map(str::to_string).collect()
}

/// The files `skills trust` / `untrust` act on: the given paths, or every
/// skill file in the project's skill directory.
fn targets(project: &Path, paths: &[PathBuf]) -> Vec<PathBuf> {
    if paths.is_empty() {
        org_files(project)
    } else {
        paths.to_vec()
    }
}

/// `passepartout skills trust [PATH…]`: show each file's tools, rules and
/// approval, ask once (unless `assume_yes`), then record each file's
/// canonical path and the SHA-256 of the very bytes shown. Files with
/// errors are not trusted. Returns the exit code.
pub fn trust_command(
    dirs: &SkillDirs,
    paths: &[PathBuf],
    assume_yes: bool,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> i32 {
    let Some(store) = dirs.trust.as_ref().map(TrustStore::new) else {
        let _ = writeln!(out, "no trust store is configured");
        return 2;
    };
    let project = dirs.project.clone().unwrap_or_default();
    let files = targets(&project, paths);
    if files.is_empty() {
        let _ = writeln!(out, "no project skills in {}", project.display());
        return 0;
    }
    let taken = taken_tool_names(dirs);
    let mut reviews = Vec::new();
    let mut code = 0;
    for f in &files {
        match Review::read(f, dirs.project_auto_approval) {
            Ok(r) if r.has_errors() => {
                let _ = write!(out, "{}", r.describe(dirs.project_auto_approval, &taken));
                let _ = writeln!(
                    out,
                    "  not trusted: fix its errors first (`passepartout skills check`)"
                );
                code = 1;
            }
            Ok(r) => {
                let _ = write!(out, "{}", r.describe(dirs.project_auto_approval, &taken));
                reviews.push(r);
            }
            Err(e) => {
                let _ = writeln!(out, "{e}");
                code = 1;
            }
        }
    }
    if reviews.is_empty() {
        return code.max(1);
    }
    if !assume_yes {
        let _ = write!(
            out,
            "Trust {} file{} with exactly this content? [y/N] ",
            reviews.len(),
            plural(reviews.len())
        );
        let _ = out.flush();
        let mut answer = String::new();
        let _ = input.read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            let _ = writeln!(out, "nothing trusted");
            return 1;
        }
    }
    for r in &reviews {
        match store.trust(&r.canonical, &r.bytes) {
            Ok(sha) => {
                let _ = writeln!(out, "trusted {} (sha256 {sha})", r.path.display());
            }
            Err(e) => {
                let _ = writeln!(out, "{e}");
                code = 1;
            }
        }
    }
    code
}

/// `passepartout skills untrust [PATH…]`: forget the files (default: every
/// skill file of the project). Returns the exit code.
pub fn untrust_command(dirs: &SkillDirs, paths: &[PathBuf], out: &mut dyn Write) -> i32 {
    let Some(store) = dirs.trust.as_ref().map(TrustStore::new) else {
        let _ = writeln!(out, "no trust store is configured");
        return 2;
    };
    let project = dirs.project.clone().unwrap_or_default();
    let mut code = 0;
    for f in targets(&project, paths) {
        let key = f.canonicalize().unwrap_or_else(|_| f.clone());
        match store.untrust(&key) {
            Ok(true) => {
                let _ = writeln!(out, "untrusted {}", f.display());
            }
            Ok(false) => {
                let _ = writeln!(out, "{} was not trusted", f.display());
            }
            Err(e) => {
                let _ = writeln!(out, "{e}");
                code = 1;
            }
        }
    }
    code
}
