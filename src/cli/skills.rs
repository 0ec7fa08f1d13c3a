//! `passepartout skills check | list | trust | untrust`: skill files from a
//! terminal. The functions take their output (and, for `trust`, input) as
//! arguments and return the exit code, so tests drive them without a
//! process.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::{exit_code, load_config, CliError, ConfigFlags};
use crate::skills::loader::{is_skill_file_name, load_file, org_files, trust_hint};
use crate::skills::trust::TrustStore;
use crate::skills::{Diagnostic, Origin, Review, Severity, SkillDirs, SkillSet};

/// The `skills` subcommands.
#[derive(Subcommand, Debug)]
pub enum SkillsCommand {
    /// Check skill files (or directories of them); prints
    /// `file:line:col: severity: message` and fails on errors.
    Check {
        /// Skill files, or directories searched for them recursively.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Show the skills loaded for the current directory, and from where;
    /// untrusted project skills are marked and not loaded.
    List(ConfigFlags),
    /// Trust project skills (default: every file in ./.passepartout/skills)
    /// with exactly their current content, after showing what each adds.
    Trust {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        /// The skill files to trust.
        paths: Vec<PathBuf>,
    },
    /// Forget the trust in project skills (default: every file in
    /// ./.passepartout/skills).
    Untrust {
        #[command(flatten)]
        flags: ConfigFlags,
        /// The skill files to forget.
        paths: Vec<PathBuf>,
    },
}

/// Run a `skills` subcommand on the terminal.
pub fn command(command: SkillsCommand) -> ExitCode {
    let mut out = std::io::stdout();
    match command {
        SkillsCommand::Check { paths } => exit_code(check_command(&paths, &mut out)),
        SkillsCommand::List(flags) => match skill_dirs(&flags) {
            Ok(dirs) => exit_code(list_command(&dirs, &mut out)),
            Err(e) => e.report(),
        },
        SkillsCommand::Trust { flags, yes, paths } => match skill_dirs(&flags) {
            Ok(dirs) => exit_code(trust_command(
                &dirs,
                &paths,
                yes,
                &mut std::io::stdin().lock(),
                &mut out,
            )),
            Err(e) => e.report(),
        },
        SkillsCommand::Untrust { flags, paths } => match skill_dirs(&flags) {
            Ok(dirs) => exit_code(untrust_command(&dirs, &paths, &mut out)),
            Err(e) => e.report(),
        },
    }
}

/// The skill directories and trust store for the current directory.
pub fn skill_dirs(flags: &ConfigFlags) -> Result<SkillDirs, CliError> {
    let config = load_config(flags)?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Ok(SkillDirs {
        builtin: config.builtin_skills,
        user: Some(config.user_skills_dir()),
        project: Some(crate::skills::project_dir(&cwd)),
        trust: Some(config.trust_file()),
        project_auto_approval: config.trust_project_tool_approval,
    })
}

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
