//! `passepartout skills check` and `passepartout skills list`, as functions
//! the binary calls with its stdout.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::diagnostic::{Diagnostic, Severity};
use super::loader::{load_file, SkillDirs, SkillSet};
use super::Origin;

/// Check files (a directory: every `.org` file under it, recursively) and
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
        } else if p.extension().is_some_and(|e| e == "org") {
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

/// The body of [`list_command`], for a set already loaded.
pub fn write_list(set: &SkillSet, out: &mut dyn Write) {
    for s in set.list() {
        let _ = writeln!(out, "{} — {}", s.name, s.description);
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
