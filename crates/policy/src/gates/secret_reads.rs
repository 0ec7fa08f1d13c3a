//! Reading a secret by a route other than its name: a glob that can match
//! `.env`, a recursive search for key names, an interpreter that opens a
//! file whose name it builds at run time, `search_text` for `API_KEY`.
//!
//! `cat .env` asks (see [`crate::gates::protected_paths`]); each of these
//! routes reaches the same bytes, so each gets the same verdict. The output
//! of whatever runs is also redacted before the model reads it
//! ([`crate::gates::secrets::redact_output`]); this gate is the first line,
//! redaction the second.

use std::sync::OnceLock;

use regex::Regex;

use crate::action::Effect;
use crate::gates::shell::semantics::one_liner;
use crate::gates::shell::{basename, static_regex, Command, Script};
use crate::gates::Decision;
use crate::util::glob::{self, Glob, Slash};

/// File names that hold secrets, as a glob could meet them in a project or
/// a home directory.
const SECRET_NAMES: &[&str] = &[
    ".env",
    ".env.local",
    ".env.production",
    ".env.development",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "credentials",
    "credentials.json",
    "secrets.json",
    "secrets.yaml",
    "secrets.yml",
    "token.json",
];

/// Programs that never print a file's contents: a glob in their words
/// names files without reading them.
const NAME_ONLY: &[&str] = &[
    "ls", "echo", "printf", "stat", "du", "wc", "file", "test", "[", "chmod", "touch", "mkdir",
    "rm", "rmdir", "basename", "dirname", "realpath", "readlink", "for",
];

/// Text that looks like the name or shape of a credential.
fn key_like() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        static_regex(
            r"(?i)api[_-]?key|secret|token|passw|credential|private[_ -]?key|bearer|access[_-]?key|auth[_-]?key|\bsk-|sk-ant|akia|ghp_|github_pat|xox[abprs]-|begin [a-z ]*private",
        )
    })
}

/// Whether a search pattern hunts for credentials.
pub fn is_key_like(pattern: &str) -> bool {
    key_like().is_match(pattern)
}

/// The secret file names a glob word (`.e*`, `*`, `config/.en?`) can match.
/// Bash's `*` and `?` never match a leading dot unless the pattern has one.
pub fn secret_matches(word: &str) -> Vec<&'static str> {
    let name = basename(word);
    if !glob::has_wildcard(name) {
        return Vec::new();
    }
    let glob = Glob::new(name, Slash::Stops);
    SECRET_NAMES
        .iter()
        .copied()
        .filter(|n| (name.starts_with('.') || !n.starts_with('.')) && glob.is_match(n))
        .collect()
}

/// Findings for reads of secrets in a script's commands.
pub fn script_findings(script: &Script) -> Vec<(Decision, String)> {
    let mut out = Vec::new();
    for cmd in &script.commands {
        globbed_reads(cmd, &mut out);
        key_searches(cmd, &mut out);
        built_names(cmd, &mut out);
    }
    out
}

/// Findings for an effect that is not a shell script.
pub fn effect_findings(effect: &Effect) -> Vec<(Decision, String)> {
    match effect {
        Effect::SearchText { pattern, .. } if is_key_like(pattern) => vec![(
            Decision::Ask,
            format!(
                "searches for `{pattern}`, the name or shape of a credential: same as reading .env"
            ),
        )],
        _ => Vec::new(),
    }
}

fn globbed_reads(cmd: &Command, out: &mut Vec<(Decision, String)>) {
    if NAME_ONLY.contains(&cmd.program.as_str()) {
        return;
    }
    // `find -name '.env*'` only lists unless it runs something on matches.
    if cmd.program == "find"
        && !cmd
            .args
            .iter()
            .any(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
    {
        return;
    }
    let words = cmd.args.iter().map(String::as_str).chain(
        cmd.redirects
            .iter()
            .filter(|r| !r.writes())
            .map(|r| r.target.as_str()),
    );
    for word in words {
        let hits = secret_matches(word);
        if let Some(first) = hits.first() {
            out.push((
                Decision::Ask,
                format!(
                    "{} reads `{word}`, a pattern that can match {first} (a file with secrets): same as reading it",
                    cmd.label()
                ),
            ));
        }
    }
}

fn key_searches(cmd: &Command, out: &mut Vec<(Decision, String)>) {
    let searcher = match cmd.program.as_str() {
        "grep" | "egrep" | "fgrep" => {
            cmd.has_flag(&['r', 'R'], &["recursive", "dereference-recursive"])
        }
        "rg" | "ag" | "ack" | "ack-grep" | "ugrep" => true,
        "git" => {
            cmd.args
                .iter()
                .find(|a| !a.starts_with('-'))
                .map(String::as_str)
                == Some("grep")
        }
        _ => false,
    };
    if !searcher {
        return;
    }
    let explicit = cmd.option_values(&["-e"], &["regexp"]);
    let pattern = explicit.first().copied().or_else(|| {
        cmd.operands()
            .into_iter()
            .find(|o| cmd.program != "git" || *o != "grep")
    });
    if let Some(p) = pattern.filter(|p| is_key_like(p)) {
        out.push((
            Decision::Ask,
            format!(
                "{} searches the files for `{p}`, the name or shape of a credential: same as reading .env",
                cmd.label()
            ),
        ));
    }
}

/// An interpreter one-liner that opens a file and builds names at run time
/// (`open('.e'+'nv')`) or names a secret file: it cannot be told apart
/// from reading `.env`.
fn built_names(cmd: &Command, out: &mut Vec<(Decision, String)>) {
    static OPENS: OnceLock<Regex> = OnceLock::new();
    static BUILDS: OnceLock<Regex> = OnceLock::new();
    static NAMES: OnceLock<Regex> = OnceLock::new();
    let opens = OPENS.get_or_init(|| {
        static_regex(
            r"(?i)\b(?:open|read|readfile|readfilesync|read_text|read_bytes|slurp|file_get_contents|fopen|readlines|createreadstream|io\.read|file\.read)\b",
        )
    });
    let builds = BUILDS.get_or_init(|| {
        static_regex(
            r#"['"]\s*\+|\+\s*['"]|\bjoin\b|\bchr\s*\(|fromcharcode|\\x[0-9a-fA-F]{2}|decode|b64|atob|reverse|\[::-1\]|%s|\.format\(|\bf['"]|\$\{|concat|\.\s*['"]|['"]\s*\."#,
        )
    });
    let names = NAMES.get_or_init(|| {
        static_regex(r"(?i)\.env|netrc|id_rsa|id_ed25519|credentials|\.ssh|\.aws|secret|token")
    });
    let Some(code) = one_liner(cmd).or(cmd.stdin_text.as_deref()) else {
        return;
    };
    if !opens.is_match(code) {
        return;
    }
    let why = if names.is_match(code) {
        "names a file with secrets"
    } else if builds.is_match(code) {
        "builds the file name at run time, so it may be .env"
    } else {
        return;
    };
    out.push((
        Decision::Ask,
        format!(
            "the `{}` code opens a file and {why}: same as reading .env",
            cmd.program
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::shell::parse;

    fn asks(script: &str) -> bool {
        !script_findings(&parse(script, None)).is_empty()
    }

    #[test]
    fn globs_that_can_match_secret_files_are_reads_of_them() {
        assert_eq!(
            secret_matches(".e*"),
            [".env", ".env.local", ".env.production", ".env.development"]
        );
        assert_eq!(secret_matches("config/.en?"), [".env"]);
        assert!(secret_matches("*").contains(&"credentials"));
        assert!(!secret_matches("*").contains(&".env"));
        assert!(secret_matches("src/*.rs").is_empty());
        assert!(secret_matches("plain").is_empty());
        assert_eq!(secret_matches("[.]env"), Vec::<&str>::new());
        assert_eq!(secret_matches(".[e]nv"), [".env"]);
        assert_eq!(secret_matches("id_[!x]sa"), ["id_rsa"]);
        assert!(secret_matches("[0-9]*").is_empty());
        assert!(asks("cat .e*"));
        assert!(asks("cat *"));
        assert!(!asks("ls -a .e*"));
        assert!(!asks("wc -l src/*.rs"));
        assert!(asks("find . -name '.env*' -exec cat {} \\;"));
        assert!(!asks("find . -name '.env*'"));
    }

    #[test]
    fn searches_for_key_names_are_reads_of_keys() {
        assert!(asks("grep -rn API_KEY ."));
        assert!(asks("rg -n TOKEN"));
        assert!(asks("git grep -e OPENAI_API_KEY"));
        assert!(!asks("grep -rn 'fn main' src"));
        assert!(!asks("grep API_KEY README.md"));
        assert!(!effect_findings(&Effect::SearchText {
            path: ".".into(),
            pattern: "sk-".into()
        })
        .is_empty());
        assert!(effect_findings(&Effect::SearchText {
            path: ".".into(),
            pattern: "fn main".into()
        })
        .is_empty());
    }

    #[test]
    fn interpreters_building_file_names_are_reads_of_secrets() {
        assert!(asks("python3 -c \"print(open('.e'+'nv').read())\""));
        assert!(asks(
            "node -e \"console.log(require('fs').readFileSync('.env','utf8'))\""
        ));
        assert!(!asks("python3 -c 'print(1+1)'"));
        assert!(!asks("python3 -c \"print(open('README.md').read())\""));
    }
}
