//! Credential shapes as data ([`secret_rules.toml`](secret_rules.toml)):
//! the token formats of the common providers, URL userinfo, private key
//! blocks (also `\n`-escaped inside a JSON or YAML string), Docker's
//! `auth` values and generic `password=` assignments. Each rule carries a
//! positive and a negative example; a test runs every one.

use std::sync::OnceLock;

use regex::Regex;
use serde::Deserialize;

use crate::gates::Decision;

/// One credential shape, compiled.
pub struct Rule {
    /// What it looks like ("GitLab token", "password in a URL", ...).
    pub kind: String,
    pub regex: Regex,
    pub decision: Decision,
    /// Capture group holding the secret value (0: the whole match).
    pub group: usize,
    /// Characters of the value shown in a gate's reason.
    pub keep: usize,
    /// Whether the value must look random (generic assignments).
    pub entropy: bool,
    /// Whether the secrets gate asks about it in what is written or run
    /// (false: output redaction only).
    pub gate: bool,
    /// Whether a value that is a reference (`${X}`, `$X`, `%X%`, `<x>`) is
    /// skipped.
    pub references: bool,
    /// Literals one of which every match holds: when the text holds none,
    /// the rule is not run (for a rule whose regex has no literal prefix
    /// the regex engine could search for itself).
    pub anchors: Vec<String>,
    /// The regex, written in lower case, runs over the text with its ASCII
    /// letters lowered (same byte offsets), instead of being `(?i)`: a
    /// case-insensitive keyword list leaves the regex engine no literal to
    /// search for, so it would walk every byte of a large output.
    pub fold_case: bool,
    /// Texts the rule must find, and texts it must not (tests).
    pub positive: Vec<String>,
    pub negative: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rule: Vec<RuleEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    kind: String,
    regex: String,
    decision: String,
    #[serde(default)]
    group: usize,
    #[serde(default = "default_keep")]
    keep: usize,
    #[serde(default)]
    entropy: bool,
    #[serde(default = "default_gate")]
    gate: bool,
    #[serde(default)]
    references: bool,
    #[serde(default)]
    anchors: Vec<String>,
    #[serde(default)]
    fold_case: bool,
    positive: Vec<String>,
    negative: Vec<String>,
}

fn default_keep() -> usize {
    4
}

fn default_gate() -> bool {
    true
}

/// What is wrong with the rule file (a test reads it; at run time a
/// broken built-in file is a build that must not ship).
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("secret_rules.toml does not parse: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("secret_rules.toml: rule `{kind}`: {why}")]
    Rule { kind: String, why: String },
}

/// The rule file's text, built in.
pub const RULES_TOML: &str = include_str!("secret_rules.toml");

/// Parse and compile a rule file.
pub fn parse(text: &str) -> Result<Vec<Rule>, RuleError> {
    let file: RuleFile = toml::from_str(text)?;
    file.rule
        .into_iter()
        .map(|e| {
            let bad = |why: String| RuleError::Rule {
                kind: e.kind.clone(),
                why,
            };
            let decision = match e.decision.as_str() {
                "deny" => Decision::Deny,
                "ask" => Decision::Ask,
                other => return Err(bad(format!("decision `{other}` is neither deny nor ask"))),
            };
            let regex = Regex::new(&e.regex).map_err(|err| bad(err.to_string()))?;
            if e.fold_case && has_upper_case_literal(&e.regex) {
                return Err(bad(
                    "`fold_case` needs the regex in lower case (it runs over lowered text)".into(),
                ));
            }
            if e.group >= regex.captures_len() {
                return Err(bad(format!("no capture group {}", e.group)));
            }
            if e.positive.is_empty() || e.negative.is_empty() {
                return Err(bad("needs a positive and a negative example".into()));
            }
            Ok(Rule {
                kind: e.kind,
                regex,
                decision,
                group: e.group,
                keep: e.keep,
                entropy: e.entropy,
                gate: e.gate,
                references: e.references,
                anchors: e.anchors,
                fold_case: e.fold_case,
                positive: e.positive,
                negative: e.negative,
            })
        })
        .collect()
}

/// The built-in rules, compiled once.
pub fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        #[allow(clippy::expect_used)]
        parse(RULES_TOML).expect("the built-in secret_rules.toml is valid (tested)")
    })
}

/// Whether `regex` holds an upper-case ASCII letter that is not the
/// letter of an escape (`\S`, `\D`, `\W`, `\B`) or a group flag.
fn has_upper_case_literal(regex: &str) -> bool {
    let mut escaped = false;
    regex.chars().any(|c| {
        let literal = !escaped && c.is_ascii_uppercase();
        escaped = !escaped && c == '\\';
        literal
    }) || regex.contains("(?i")
}

/// Whether a value is a reference to a secret rather than one
/// (`${DB_PASSWORD}`, `$TOKEN`, `%PASS%`, `<password>`).
pub fn is_reference(value: &str) -> bool {
    value.starts_with('$')
        || value.starts_with('{')
        || value.starts_with('%')
        || value.starts_with('<')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_finds_its_positives_and_not_its_negatives() {
        let rules = parse(RULES_TOML).expect("parses");
        assert!(rules.len() >= 20);
        let mut wrong = Vec::new();
        for rule in &rules {
            for text in &rule.positive {
                let found = crate::gates::secrets::scan(text)
                    .iter()
                    .any(|f| f.kind == rule.kind);
                if !found {
                    wrong.push(format!("`{}` misses {text:?}", rule.kind));
                }
            }
            for text in &rule.negative {
                let found = crate::gates::secrets::scan(text)
                    .iter()
                    .any(|f| f.kind == rule.kind);
                if found {
                    wrong.push(format!("`{}` finds {text:?}", rule.kind));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn the_common_providers_are_covered() {
        let kinds: Vec<&str> = rules().iter().map(|r| r.kind.as_str()).collect();
        for kind in [
            "GitHub token",
            "GitLab token",
            "Slack token",
            "AWS access key id",
            "Google API key",
            "Azure storage key",
            "Stripe key",
            "OpenAI-style API key",
            "Anthropic API key",
            "npm token",
            "PyPI token",
            "Hugging Face token",
            "password in a URL",
            "Docker registry auth",
            "private key",
        ] {
            assert!(kinds.contains(&kind), "{kind}");
        }
    }

    #[test]
    fn a_broken_rule_is_named() {
        let text = "[[rule]]\nkind = \"x\"\nregex = \"(\"\ndecision = \"ask\"\npositive = [\"a\"]\nnegative = [\"b\"]\n";
        let err = parse(text).err().expect("fails");
        assert!(err.to_string().contains("rule `x`"), "{err}");
        let text = "[[rule]]\nkind = \"y\"\nregex = \"a\"\ndecision = \"ask\"\npositive = []\nnegative = [\"b\"]\n";
        assert!(parse(text).is_err());
        let text = "[[rule]]\nkind = \"z\"\nregex = \"Token=(\\\\S+)\"\nfold_case = true\ndecision = \"ask\"\npositive = [\"a\"]\nnegative = [\"b\"]\n";
        let err = parse(text).err().expect("fails");
        assert!(err.to_string().contains("lower case"), "{err}");
    }
}
