//! `passepartout skills check | list | trust | untrust`: skill files from a
//! terminal. The functions take their output (and, for `trust`, input) as
//! arguments and return the exit code, so tests drive them without a
//! process.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::{exit_code, load_config, CliError, ConfigFlags};
use crate::skills::loader::{is_skill_file_name, skill_files, trust_hint};
use crate::skills::trust::TrustStore;
use crate::skills::{Diagnostic, Review, Severity, SkillDirs, SkillSet};
use crate::util::terminal::Escaping;

/// The `skills` subcommands.
#[derive(Subcommand, Debug)]
pub enum SkillsCommand {
    /// Check skill files (or directories of them); prints
    /// `file:line:col: severity: message` and fails on errors.
    Check {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Skill files (`.org`, or an Agent Skill's `SKILL.md`), or
        /// directories searched for them recursively. Without any: every
        /// layer the daemon loads here (built-in, user, project skills, the
        /// policy file and the AGENTS.md files), exactly as it loads them.
        paths: Vec<PathBuf>,
    },
    /// Turn an Agent Skill folder (SKILL.md, scripts/) into a literate Org
    /// skill a person can read and edit; it is checked before it is written.
    Import {
        /// The folder holding SKILL.md.
        dir: PathBuf,
        /// Where to write the Org skill (default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
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
    // Skill files, their names and diagnostics may come from a project the
    // agent writes: nothing in them may steer the terminal.
    let mut out = Escaping(std::io::stdout());
    match command {
        SkillsCommand::Check { flags, paths } if paths.is_empty() => {
            match (skill_dirs(&flags), load_config(&flags)) {
                (Ok(dirs), Ok(config)) => exit_code(check_layers_command(
                    &dirs,
                    Some(&config.policy_file()),
                    &mut out,
                )),
                (Err(e), _) | (_, Err(e)) => e.report(),
            }
        }
        SkillsCommand::Check { paths, .. } => exit_code(check_command(&paths, &mut out)),
        // The Org text of an import is the output itself when piped into a
        // file; escaped only on a terminal.
        SkillsCommand::Import { dir, output } if !std::io::stdout().is_terminal() => exit_code(
            import_command(&dir, output.as_deref(), &mut std::io::stdout()),
        ),
        SkillsCommand::Import { dir, output } => {
            exit_code(import_command(&dir, output.as_deref(), &mut out))
        }
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
        if p.is_dir() && crate::skills::agent_skill::is_agent_skill_dir(p) {
            files.push(p.join(crate::skills::agent_skill::SKILL_MD));
        } else if p.is_dir() {
            collect_org_files(p, &mut files);
        } else {
            files.push(p.clone());
        }
    }
    // The loader's own code path: the built-in skills, then these files as
    // one layer, so cross-file clashes read exactly as the daemon reports
    // them. Only the findings about these files are printed.
    let set = SkillSet::load_files(true, &files);
    let diags: Vec<&Diagnostic> = set
        .diagnostics()
        .iter()
        .filter(|d| files.contains(&d.path))
        .collect();
    write_check_summary(&diags, files.len(), out)
}

/// `skills check` without paths: every layer for the current directory as
/// the daemon loads it (untrusted project files included: they are
/// checked, and said to be untrusted), and the person's policy file.
pub fn check_layers_command(dirs: &SkillDirs, policy: Option<&Path>, out: &mut dyn Write) -> i32 {
    let set = SkillSet::load(dirs);
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    for dir in [&dirs.user, &dirs.project].into_iter().flatten() {
        files.extend(skill_files(dir));
    }
    files.extend(set.instructions().iter().map(|i| i.path.clone()));
    let mut diags: Vec<Diagnostic> = set.diagnostics().to_vec();
    if let Some(policy) = policy.filter(|p| p.exists()) {
        files.insert(policy.to_path_buf());
        diags.extend(crate::skills::load_policy(policy).1);
    }
    let diags: Vec<&Diagnostic> = diags.iter().collect();
    write_check_summary(&diags, files.len(), out)
}

fn write_check_summary(diags: &[&Diagnostic], files: usize, out: &mut dyn Write) -> i32 {
    let (mut errors, mut warnings) = (0, 0);
    for d in diags {
        match d.severity {
            Severity::Error => errors += 1,
            Severity::Warning => warnings += 1,
        }
        let _ = writeln!(out, "{d}");
    }
    let _ = writeln!(
        out,
        "checked {files} file{}: {errors} error{}, {warnings} warning{}",
        plural(files),
        plural(errors),
        plural(warnings)
    );
    i32::from(errors > 0)
}

/// `passepartout skills import DIR [-o OUT]`: the Org skill for an Agent
/// Skill folder, checked before it is written (a file with errors is not
/// written). Returns the exit code.
pub fn import_command(dir: &Path, output: Option<&Path>, out: &mut dyn Write) -> i32 {
    let org = match crate::skills::agent_skill::to_org(dir) {
        Ok(org) => org,
        Err(d) => {
            let _ = writeln!(out, "{d}");
            return 1;
        }
    };
    let shown = output.map_or_else(|| dir.join("SKILL.md"), Path::to_path_buf);
    let diags = crate::skills::check_text(&shown, &org);
    if diags.iter().any(Diagnostic::is_error) {
        for d in &diags {
            let _ = writeln!(out, "{d}");
        }
        let _ = writeln!(out, "not imported: the skill has errors");
        return 1;
    }
    match output {
        None => {
            let _ = write!(out, "{org}");
            0
        }
        Some(path) => match std::fs::write(path, &org) {
            Ok(()) => {
                let _ = writeln!(out, "wrote {}", path.display());
                0
            }
            Err(e) => {
                let _ = writeln!(out, "{}: {e}", path.display());
                1
            }
        },
    }
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
            if crate::skills::agent_skill::is_agent_skill_dir(&p) {
                out.push(p.join(crate::skills::agent_skill::SKILL_MD));
            } else {
                collect_org_files(&p, out);
            }
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
    for i in set.instructions() {
        let _ = writeln!(out, "instructions — {}", i.path.display());
        if !i.trusted {
            let _ = writeln!(
                out,
                "  status:   untrusted, not used; {}",
                trust_hint(&i.path)
            );
        }
        let _ = writeln!(
            out,
            "  from:     {}, applies to {}",
            i.origin,
            i.scope.display()
        );
        let _ = writeln!(out, "  size:     {} characters", i.text.chars().count());
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
fn targets(dirs: &SkillDirs, paths: &[PathBuf]) -> Vec<PathBuf> {
    if !paths.is_empty() {
        return paths
            .iter()
            .map(|p| {
                if p.is_dir() && crate::skills::agent_skill::is_agent_skill_dir(p) {
                    p.join(crate::skills::agent_skill::SKILL_MD)
                } else {
                    p.clone()
                }
            })
            .collect();
    }
    let mut files = dirs.project.as_deref().map(skill_files).unwrap_or_default();
    files.extend(
        SkillSet::load(dirs)
            .instructions()
            .iter()
            .filter(|i| i.origin == crate::skills::Origin::Project)
            .map(|i| i.path.clone()),
    );
    files
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
    let files = targets(dirs, paths);
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
    let mut code = 0;
    for f in targets(dirs, paths) {
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
