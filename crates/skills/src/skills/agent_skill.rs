//! Agent Skills: a folder with a `SKILL.md` (YAML front matter with `name`
//! and `description`, a Markdown body, and optionally `scripts/`), the
//! format Claude Code, Codex and others share.
//!
//! Such a folder is turned into the literate Org skill a person would have
//! written: the front matter becomes `#+SKILL:` / `#+DESCRIPTION:`, the body
//! a `:prompt:` section (a `#+begin_src markdown` block, word for word), and
//! each `sh`/`bash`/`python` script a `:tool:` heading whose src block is
//! the script. The loader parses that Org text with the one skill parser,
//! so a `SKILL.md` folder is judged, sandboxed and trusted exactly like an
//! Org skill (the trust hash is over the Org text, which holds every byte
//! that runs), and `passepartout skills import DIR` writes the same text to
//! a file — what loads and what `skills check` accepts cannot differ.
//!
//! The front matter is read as the flat `key: value` subset the format
//! uses (plain, single- or double-quoted scalars, and `>`/`|` blocks for a
//! long description); nested keys (`metadata:`) are skipped. A YAML crate
//! would buy nothing for two strings and cost a build on two cores.

use std::path::{Path, PathBuf};

use super::diagnostic::{Diagnostic, Severity};
use super::parse::{escape_org_line, MAX_SKILL_BYTES};

/// The file that makes a folder an Agent Skill.
pub const SKILL_MD: &str = "SKILL.md";

/// At most this many scripts become tools (a folder of a thousand scripts
/// is a mistake, not a skill).
pub const MAX_SCRIPTS: usize = 64;

/// Whether `dir` holds a `SKILL.md`.
pub fn is_agent_skill_dir(dir: &Path) -> bool {
    dir.join(SKILL_MD).is_file()
}

/// The folders directly in `dir` that hold a `SKILL.md`, sorted.
pub fn agent_skill_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && p.is_dir()
                && is_agent_skill_dir(p)
        })
        .collect();
    out.sort();
    out
}

/// The front matter fields a skill needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrontMatter {
    pub name: String,
    pub description: String,
}

fn diagnostic(path: &Path, line: usize, message: String) -> Box<Diagnostic> {
    Box::new(Diagnostic {
        path: path.to_path_buf(),
        line,
        column: 1,
        severity: Severity::Error,
        message,
    })
}

/// Split `SKILL.md` text into its front matter and body.
pub fn split_front_matter(
    path: &Path,
    text: &str,
) -> Result<(FrontMatter, String), Box<Diagnostic>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(diagnostic(
            path,
            1,
            "SKILL.md must start with YAML front matter: a `---` line, `name:` and `description:`, then `---`".into(),
        ));
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut body_start = None;
    let all: Vec<&str> = text.lines().collect();
    let mut i = 1;
    while i < all.len() {
        let line = all[i];
        if line.trim_end() == "---" {
            body_start = Some(i + 1);
            break;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        if indented || line.trim().is_empty() || line.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(diagnostic(
                path,
                i + 1,
                format!("front matter line `{line}` is not `key: value`"),
            ));
        };
        let value = value.trim();
        let value =
            if value == ">" || value == "|" || value.starts_with(">-") || value.starts_with("|-") {
                // A block scalar: the indented lines that follow.
                let folded = value.starts_with('>');
                let mut parts = Vec::new();
                while i + 1 < all.len()
                    && (all[i + 1].starts_with(' ')
                        || all[i + 1].starts_with('\t')
                        || all[i + 1].trim().is_empty())
                    && all[i + 1].trim_end() != "---"
                {
                    i += 1;
                    parts.push(all[i].trim());
                }
                parts
                    .join(if folded { " " } else { "\n" })
                    .trim()
                    .to_string()
            } else {
                unquote(value)
            };
        fields.push((key.trim().to_string(), value));
        i += 1;
    }
    let Some(body_start) = body_start else {
        return Err(diagnostic(
            path,
            1,
            "the front matter has no closing `---` line".into(),
        ));
    };
    let field = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let name = field("name").filter(|v| !v.is_empty());
    let description = field("description").filter(|v| !v.is_empty());
    let (Some(name), Some(description)) = (name, description) else {
        return Err(diagnostic(
            path,
            1,
            "the front matter needs both `name:` and `description:`".into(),
        ));
    };
    let body = all[body_start.min(all.len())..].join("\n");
    Ok((FrontMatter { name, description }, body.trim().to_string()))
}

fn unquote(v: &str) -> String {
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        v[1..v.len() - 1]
            .replace("\\\"", "\"")
            .replace("\\\\", "\\")
    } else if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        v[1..v.len() - 1].replace("''", "'")
    } else {
        v.to_string()
    }
}

/// A script of the folder that can run as a tool.
struct Script {
    file: String,
    language: &'static str,
    text: String,
}

/// The interpreter a script runs with: its `#!` line, else its extension.
fn language_of(file: &str, text: &str) -> Option<&'static str> {
    let first = text.lines().next().unwrap_or_default();
    if let Some(shebang) = first.strip_prefix("#!") {
        if shebang.contains("python") {
            return Some("python");
        }
        if shebang.contains("bash") {
            return Some("bash");
        }
        if shebang.trim_end().ends_with("/sh") || shebang.contains(" sh") {
            return Some("sh");
        }
    }
    match Path::new(file).extension().and_then(|e| e.to_str()) {
        Some("py") => Some("python"),
        Some("bash") => Some("bash"),
        Some("sh") => Some("bash"),
        _ => None,
    }
}

/// The tool name of `file` in skill `skill`: `skill_stem`, with anything
/// but letters, digits, `_` and `-` made `_`, at most 64 characters.
pub fn tool_name(skill: &str, file: &str) -> String {
    let stem = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = format!("{skill}_{stem}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert(0, '_');
    }
    name.truncate(64);
    name
}

/// What runs before the script so it sees `args` as its command line
/// (split on whitespace by the shell, with `shlex` by Python; never
/// evaluated as code).
fn argv_prelude(language: &str, script: &str) -> (String, String) {
    match language {
        "python" => {
            let prelude = "import os as _os, shlex as _shlex, sys as _sys\n_sys.argv[1:] = _shlex.split(_os.environ.get(\"ARG_ARGS\", \"\"))";
            // `from __future__` imports must stay first.
            let lines: Vec<&str> = script.lines().collect();
            let after = lines
                .iter()
                .rposition(|l| l.starts_with("from __future__"))
                .map_or(0, |i| i + 1);
            let (head, tail) = lines.split_at(after);
            let mut out = head.join("\n");
            if !out.is_empty() {
                out.push('\n');
            }
            (out, format!("{prelude}\n{}", tail.join("\n")))
        }
        _ => (
            String::new(),
            format!("set -f; set -- ${{ARG_ARGS-}}; set +f\n{script}"),
        ),
    }
}

/// Read the scripts of `dir/scripts`, sorted; the ones that cannot be
/// tools are named in `skipped` with why.
fn scripts(dir: &Path, skipped: &mut Vec<String>) -> Vec<Script> {
    let Ok(rd) = std::fs::read_dir(dir.join("scripts")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if out.len() >= MAX_SCRIPTS {
            skipped.push(format!("scripts/{file} (more than {MAX_SCRIPTS} scripts)"));
            continue;
        }
        let text = match std::fs::metadata(&path) {
            Ok(m) if m.len() > MAX_SKILL_BYTES as u64 => {
                skipped.push(format!(
                    "scripts/{file} (larger than {MAX_SKILL_BYTES} bytes)"
                ));
                continue;
            }
            _ => match std::fs::read(&path).map(String::from_utf8) {
                Ok(Ok(t)) => t,
                _ => {
                    skipped.push(format!("scripts/{file} (not readable UTF-8 text)"));
                    continue;
                }
            },
        };
        match language_of(&file, &text) {
            Some(language) => out.push(Script {
                file,
                language,
                text,
            }),
            None => skipped.push(format!(
                "scripts/{file} (only sh, bash and python scripts can be tools)"
            )),
        }
    }
    out
}

/// The literate Org skill for the Agent Skill folder `dir`.
pub fn to_org(dir: &Path) -> Result<String, Box<Diagnostic>> {
    let md_path = dir.join(SKILL_MD);
    let bytes = super::loader::read_limited(&md_path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| diagnostic(&md_path, 1, "SKILL.md is not UTF-8 text".into()))?;
    let text = text.replace("\r\n", "\n");
    let (front, body) = split_front_matter(&md_path, &text)?;
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let name = one_line(&front.name);
    let mut org = String::new();
    org.push_str(&format!("#+TITLE: {name}\n#+SKILL: {name}\n"));
    org.push_str(&format!(
        "#+DESCRIPTION: {}\n",
        one_line(&front.description)
    ));
    org.push_str("#+TRIGGER: always\n\n");
    org.push_str(&format!(
        "Imported from the Agent Skill in {} (its SKILL.md and scripts). The\n\
         instructions below reach the model word for word; each script is a tool\n\
         that asks before it runs and runs in the sandbox like any skill script.\n\n",
        dir.display()
    ));
    org.push_str("* Instructions :prompt:\n");
    if body.is_empty() {
        org.push_str(&one_line(&front.description));
        org.push('\n');
    } else {
        org.push_str("#+begin_src markdown\n");
        for line in body.lines() {
            org.push_str(&escape_org_line(line));
            org.push('\n');
        }
        org.push_str("#+end_src\n");
    }
    let mut skipped = Vec::new();
    for s in scripts(dir, &mut skipped) {
        let (head, rest) = argv_prelude(s.language, &s.text);
        org.push_str(&format!(
            "\n* {} :tool:\n:PROPERTIES:\n:APPROVAL: ask\n:END:\n\
             Runs =scripts/{}= of the {name} skill; see its instructions for what it does \
             and which arguments it takes.\n\n\
             | name | type   | required | description                                   |\n\
             |------+--------+----------+-----------------------------------------------|\n\
             | args | string | no       | The script's command-line arguments, space-separated. |\n\n\
             #+begin_src {}\n",
            tool_name(&name, &s.file),
            s.file,
            s.language
        ));
        for line in head.lines().chain(rest.lines()) {
            org.push_str(&escape_org_line(line));
            org.push('\n');
        }
        org.push_str("#+end_src\n");
    }
    if !skipped.is_empty() {
        org.push_str("\n* Not imported\n");
        for s in skipped {
            org.push_str(&format!("- {s}\n"));
        }
    }
    if org.len() > MAX_SKILL_BYTES {
        return Err(diagnostic(
            &md_path,
            1,
            format!(
                "the skill is {} bytes as Org, more than the {MAX_SKILL_BYTES}-byte limit for skill files",
                org.len()
            ),
        ));
    }
    Ok(org)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_read_as_flat_keys() {
        let text = "---\nname: pdf-tools\ndescription: >\n  Fill and\n  merge PDFs.\nlicense: MIT\nmetadata:\n  version: \"1\"\n---\n# PDF\n\nUse it.\n";
        let (front, body) = split_front_matter(Path::new("SKILL.md"), text).unwrap();
        assert_eq!(front.name, "pdf-tools");
        assert_eq!(front.description, "Fill and merge PDFs.");
        assert_eq!(body, "# PDF\n\nUse it.");
        assert!(split_front_matter(Path::new("SKILL.md"), "# no front matter\n").is_err());
        assert!(split_front_matter(Path::new("SKILL.md"), "---\nname: x\n---\n").is_err());
        let quoted = "---\nname: 'a'\ndescription: \"say \\\"hi\\\"\"\n---\n";
        let (front, _) = split_front_matter(Path::new("SKILL.md"), quoted).unwrap();
        assert_eq!(front.description, "say \"hi\"");
    }

    #[test]
    fn tool_names_are_valid_names() {
        assert_eq!(
            tool_name("pdf-tools", "fill form.py"),
            "pdf-tools_fill_form"
        );
        assert_eq!(tool_name("1x", "a.sh"), "_1x_a");
    }
}
