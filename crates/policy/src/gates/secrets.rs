//! Secrets in what the agent is about to write or send.
//!
//! Scans file contents, scripts, arguments, environment values, Emacs Lisp
//! and actuator arguments for credentials with a recognisable shape (cloud
//! keys, tokens, private key blocks, JWTs, `password=` assignments with a
//! high-entropy value). Private key material is denied; anything else is
//! held for approval. Reasons never repeat the secret: they show a redacted
//! form, and [`redact`] is reused by the audit log.

use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;
use rustc_hash::FxHashMap;

use crate::action::{Action, Effect};
use crate::gates::engine::verdict_from_findings;
use crate::gates::secret_reads;
use crate::gates::shell::{script_of, static_regex};
use crate::gates::{Decision, Gate, GateContext, Verdict};

/// One credential found in text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFinding {
    /// What it looks like ("AWS access key id", "GitHub token", ...).
    pub kind: &'static str,
    /// A form safe to show: the first characters and the length.
    pub redacted: String,
    /// Deny for private keys, Ask for the rest.
    pub decision: Decision,
    /// Byte range of the secret value in the scanned text.
    pub range: std::ops::Range<usize>,
}

struct Pattern {
    kind: &'static str,
    regex: Regex,
    decision: Decision,
    /// Capture group holding the secret value (0: the whole match).
    group: usize,
    /// Shown characters in the redacted form.
    keep: usize,
    /// Whether the value must look random (generic assignments).
    entropy_check: bool,
}

fn patterns() -> &'static [Pattern] {
    static PATTERNS: OnceLock<Vec<Pattern>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let p = |kind, re: &str, decision, group, keep, entropy_check| Pattern {
            kind,
            regex: static_regex(re),
            decision,
            group,
            keep,
            entropy_check,
        };
        vec![
            p(
                "private key",
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----\s*[A-Za-z0-9+/=](?s:.*?)(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\z)",
                Decision::Deny,
                0,
                0,
                false,
            ),
            p("AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", Decision::Ask, 0, 4, false),
            p("GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b", Decision::Ask, 0, 4, false),
            p("GitHub token", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", Decision::Ask, 0, 4, false),
            p("Slack token", r"\bxox[baprse]-[A-Za-z0-9-]{10,}", Decision::Ask, 0, 4, false),
            p("Anthropic API key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", Decision::Ask, 0, 4, false),
            p("OpenAI-style API key", r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_-]{32,}", Decision::Ask, 0, 4, false),
            p("Stripe key", r"\b[sr]k_live_[0-9A-Za-z]{20,}", Decision::Ask, 0, 4, false),
            p("Google API key", r"\bAIza[0-9A-Za-z_-]{35}", Decision::Ask, 0, 4, false),
            p(
                "JSON web token",
                r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
                Decision::Ask,
                0,
                4,
                false,
            ),
            p(
                "credential assignment",
                r#"(?i)(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|private[_-]?token|token)["']?\s*[:=]\s*["']?([^\s"'`;&|,)}\]]{8,})"#,
                Decision::Ask,
                1,
                2,
                true,
            ),
        ]
    })
}

/// Shannon entropy in bits per character.
fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&k| {
            let p = k as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

/// Whether a generic assignment's value is a reference rather than a secret
/// (`$VAR`, `os.environ[...]`, `<placeholder>`, `process.env.X`).
fn is_reference(value: &str) -> bool {
    value.starts_with('$')
        || value.starts_with('<')
        || value.starts_with('{')
        || value.starts_with('%')
        || value.contains("environ")
        || value.contains("getenv")
        || value.contains("process.env")
        || value.contains('(')
        || value.chars().all(|c| c == '*' || c == 'x' || c == 'X')
        // Code, not a value: `self.tokens[i`, `config.api_key`.
        || value.chars().all(|c| c.is_ascii_alphabetic() || matches!(c, '_' | '.' | '[' | ':'))
}

fn redacted_form(value: &str, keep: usize) -> String {
    let len = value.chars().count();
    if keep == 0 {
        let first_line = value.lines().next().unwrap_or("");
        return format!("{first_line}…({len} chars)");
    }
    let head: String = value.chars().take(keep.min(len / 3)).collect();
    format!("{head}…({len} chars)")
}

/// Every credential-shaped value in `text`, earliest first, without overlap.
pub fn scan(text: &str) -> Vec<SecretFinding> {
    let mut found: Vec<SecretFinding> = Vec::new();
    for pat in patterns() {
        for caps in pat.regex.captures_iter(text) {
            let Some(m) = caps.get(pat.group) else {
                continue;
            };
            let value = m.as_str();
            // `${NAME_SECRET:-default}`: the `-` is the shell's operator,
            // not part of the value (issue 36).
            let judged = value.trim_start_matches(['-', '=', '+', '?']);
            if pat.entropy_check && (is_reference(judged) || entropy(judged) < 3.0) {
                continue;
            }
            let overlaps = found
                .iter()
                .any(|f| f.range.start < m.end() && m.start() < f.range.end);
            if overlaps {
                continue;
            }
            found.push(SecretFinding {
                kind: pat.kind,
                redacted: redacted_form(value, pat.keep),
                decision: pat.decision,
                range: m.range(),
            });
        }
    }
    found.sort_by_key(|f| f.range.start);
    found
}

/// `text` with every credential replaced by its redacted form.
pub fn redact(text: &str) -> String {
    let findings = scan(text);
    if findings.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in findings {
        out.push_str(&text[at..f.range.start]);
        out.push_str(&f.redacted);
        at = f.range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Tool output after redaction, and how many secrets were taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    /// The output with each secret replaced by `[redacted: KIND]`.
    pub text: String,
    /// How many secrets were replaced.
    pub hits: usize,
}

/// Known secrets shorter than this are not searched for: a short value
/// would match ordinary text and says little about a key.
const MIN_KNOWN_SECRET: usize = 8;

/// The patterns of one known value ([`crate::gates::secret_values::encoded_patterns`]).
type ValuePatterns = Arc<Vec<(Regex, &'static str)>>;

/// Known values whose patterns [`KnownPatterns`] keeps at most; past it
/// everything is forgotten and compiled again as needed.
pub const MAX_REMEMBERED_PATTERNS: usize = 1024;

/// The compiled patterns of every known value seen, by value: compiling
/// them (seven regular expressions a value) costs far more than running
/// them, and the values (provider keys, the project's secret values)
/// rarely change between two tool calls. One per daemon.
#[derive(Default)]
pub struct KnownPatterns {
    by_value: Mutex<FxHashMap<String, ValuePatterns>>,
}

impl KnownPatterns {
    fn of(&self, value: &str) -> ValuePatterns {
        let mut by_value = crate::util::sync::lock(&self.by_value);
        if let Some(patterns) = by_value.get(value) {
            return patterns.clone();
        }
        let patterns = Arc::new(crate::gates::secret_values::encoded_patterns(value));
        if by_value.len() >= MAX_REMEMBERED_PATTERNS {
            by_value.clear();
        }
        by_value.insert(value.to_string(), patterns.clone());
        patterns
    }
}

/// Redact tool output before a hosted model reads it: every occurrence of
/// a `known` secret (the configured provider keys), every credential shape
/// [`scan`] recognises (`sk-…`, `AKIA…`, private key blocks, `*_KEY=`,
/// `*_TOKEN=`, `*_SECRET=` assignments with random-looking values) and
/// bearer tokens. Pure: the caller decides what to do with the count.
/// Compiles the known values' patterns each time; the daemon keeps them
/// ([`redact_output_with`]).
pub fn redact_output(text: &str, known: &[String]) -> Redacted {
    redact_output_with(text, known, &KnownPatterns::default())
}

/// [`redact_output`] with the known values' patterns taken from
/// `patterns` (compiled there on first use).
pub fn redact_output_with(text: &str, known: &[String], patterns: &KnownPatterns) -> Redacted {
    static BEARER: OnceLock<Regex> = OnceLock::new();
    let bearer = BEARER.get_or_init(|| static_regex(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"));
    let mut hits = 0;
    let mut out = text.to_string();
    for key in known.iter().filter(|k| k.len() >= MIN_KNOWN_SECRET) {
        let n = out.matches(key.as_str()).count();
        if n > 0 {
            hits += n;
            out = out.replace(key.as_str(), "[redacted: configured API key]");
        }
        // The same value through base64, hex, rev or spacing out.
        for (re, what) in patterns.of(key).iter() {
            let n = re.find_iter(&out).count();
            if n > 0 {
                hits += n;
                out = re
                    .replace_all(&out, format!("[redacted: {what}]").as_str())
                    .into_owned();
            }
        }
    }
    let mut ranges: Vec<(std::ops::Range<usize>, &str)> =
        scan(&out).into_iter().map(|f| (f.range, f.kind)).collect();
    for caps in bearer.captures_iter(&out) {
        if let Some(m) = caps.get(1) {
            if !ranges
                .iter()
                .any(|(r, _)| r.start < m.end() && m.start() < r.end)
            {
                ranges.push((m.range(), "bearer token"));
            }
        }
    }
    if ranges.is_empty() {
        return Redacted { text: out, hits };
    }
    ranges.sort_by_key(|(r, _)| r.start);
    let mut redacted = String::with_capacity(out.len());
    let mut at = 0;
    for (range, kind) in ranges {
        if range.start < at {
            continue;
        }
        redacted.push_str(&out[at..range.start]);
        redacted.push_str(&format!("[redacted: {kind}]"));
        at = range.end;
        hits += 1;
    }
    redacted.push_str(&out[at..]);
    Redacted {
        text: redacted,
        hits,
    }
}

/// The texts of an effect that leave the agent: what is written, run or sent.
fn outgoing_texts(effect: &Effect) -> Vec<(String, String)> {
    match effect {
        Effect::WriteFile { path, content } => {
            vec![(
                format!("the content for {}", path.display()),
                content.clone(),
            )]
        }
        Effect::Run {
            script, argv, env, ..
        } => {
            let mut out = vec![("the script".to_string(), script.clone())];
            out.extend(argv.iter().map(|a| ("an argument".to_string(), a.clone())));
            out.extend(
                env.iter()
                    .map(|(k, v)| (format!("the environment variable {k}"), format!("{k}={v}"))),
            );
            out
        }
        Effect::EvalElisp { code, bindings } => {
            let mut out = vec![("the Emacs Lisp code".to_string(), code.clone())];
            out.extend(bindings.iter().map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                };
                (format!("the binding {k}"), text)
            }));
            out
        }
        Effect::Op { op, args } => {
            vec![(format!("the arguments of `{op}`"), args.to_string())]
        }
        _ => vec![],
    }
}

/// Holds for approval anything that carries a credential out; denies private
/// key material.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretsGate;

impl Gate for SecretsGate {
    fn name(&self) -> &str {
        "secrets"
    }

    fn priority(&self) -> i32 {
        50
    }

    fn check(&self, action: &Action, ctx: &GateContext) -> Option<Verdict> {
        let mut findings = secret_reads::effect_findings(&action.effect);
        if let Some(script) = script_of(&action.effect, ctx) {
            findings.extend(secret_reads::script_findings(&script));
        }
        for (place, text) in outgoing_texts(&action.effect) {
            for f in scan(&text) {
                findings.push((f.decision, format!("{} in {place}: {}", f.kind, f.redacted)));
            }
        }
        verdict_from_findings(self.name(), findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;

    const OPENAI: &str = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678";

    fn write(content: &str) -> Option<Verdict> {
        let action = Action {
            tool: "write".into(),
            target: "files".into(),
            arguments: serde_json::json!({}),
            effect: Effect::WriteFile {
                path: "config.py".into(),
                content: content.into(),
            },
            approval: Approval::Auto,
            timeout_secs: None,
        };
        SecretsGate.check(&action, &GateContext::default())
    }

    #[test]
    fn output_redaction_takes_out_known_keys_and_shapes() {
        let known = vec![
            "local-provider-key-0123456789".to_string(),
            "short".to_string(),
        ];
        let text = "OPENAI_API_KEY=local-provider-key-0123456789\n\
                    aws AKIAIOSFODNN7EXAMPLE\n\
                    GITHUB_TOKEN=Zx8Qw2Er5Ty7Ui9Op1As3Df\n\
                    Authorization: Bearer abcdefghijklmnop1234\n\
                    short words stay, and so does cargo test";
        let r = redact_output(text, &known);
        assert_eq!(r.hits, 4, "{}", r.text);
        assert!(!r.text.contains("local-provider-key"));
        assert!(!r.text.contains("AKIAIOSFODNN7EXAMPLE"));
        assert!(!r.text.contains("Zx8Qw2Er5Ty7Ui9Op1As3Df"));
        assert!(!r.text.contains("abcdefghijklmnop1234"));
        assert!(r.text.contains("[redacted: configured API key]"));
        assert!(r.text.contains("[redacted: AWS access key id]"));
        assert!(r.text.contains("short words stay, and so does cargo test"));
        let clean = redact_output("test result: ok. 3 passed", &known);
        assert_eq!(clean.hits, 0);
        assert_eq!(clean.text, "test result: ok. 3 passed");
    }

    #[test]
    fn remembered_patterns_redact_exactly_as_compiled_ones() {
        let value = "s3cr3t-Value-42xyz";
        let known = vec![
            "local-provider-key-0123456789".to_string(),
            value.to_string(),
            "short".to_string(),
        ];
        let b64 = |s: &str| {
            // Standard base64 of `s`, as `base64 -w0` prints it.
            let out = std::process::Command::new("base64")
                .arg("-w0")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    use std::io::Write as _;
                    child.stdin.take().expect("stdin").write_all(s.as_bytes())?;
                    child.wait_with_output()
                })
                .expect("base64 runs");
            String::from_utf8(out.stdout).expect("ascii")
        };
        let texts = [
            "nothing here".to_string(),
            format!("KEY=local-provider-key-0123456789 and {value}"),
            format!(
                "{} then {}",
                b64(&format!("T={value}\n")),
                value.chars().rev().collect::<String>()
            ),
            format!("{value}{value} Authorization: Bearer abcdefghijklmnop1234"),
            format!(
                "aws AKIAIOSFODNN7EXAMPLE {}",
                value
                    .bytes()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        ];
        assert!(texts[1..]
            .iter()
            .all(|t| redact_output(t, &known).hits >= 2));
        let patterns = KnownPatterns::default();
        for round in 0..2 {
            for text in &texts {
                assert_eq!(
                    redact_output_with(text, &known, &patterns),
                    redact_output(text, &known),
                    "round {round}: {text}"
                );
            }
        }
        // Each value of at least eight characters compiled once.
        assert_eq!(crate::util::sync::lock(&patterns.by_value).len(), 2);
    }

    #[test]
    fn recognises_each_shape() {
        let kinds = |t: &str| scan(t).into_iter().map(|f| f.kind).collect::<Vec<_>>();
        assert_eq!(
            kinds("key AKIAIOSFODNN7EXAMPLE here"),
            ["AWS access key id"]
        );
        assert_eq!(
            kinds("ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
            ["GitHub token"]
        );
        assert_eq!(
            kinds("github_pat_11ABCDEFG0123456789_abcdefghijklmnop"),
            ["GitHub token"]
        );
        assert_eq!(kinds("xoxb-123456789012-abcdefABCDEF"), ["Slack token"]);
        assert_eq!(
            kinds("sk-ant-api03-aaaaBBBBccccDDDDeeee1234"),
            ["Anthropic API key"]
        );
        assert_eq!(kinds(OPENAI), ["OpenAI-style API key"]);
        assert_eq!(
            kinds("AIzaSyA1234567890abcdefghijklmnopqrstuv"),
            ["Google API key"]
        );
        assert_eq!(
            kinds("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            ["JSON web token"]
        );
        assert_eq!(
            kinds("password = \"Xk9#mQ2$vL7pR4wz\""),
            ["credential assignment"]
        );
        assert_eq!(
            kinds("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"),
            ["private key"]
        );
    }

    #[test]
    fn ordinary_text_is_not_a_secret() {
        assert!(scan("password = os.environ['DB_PASSWORD']").is_empty());
        assert!(scan("api_key=$API_KEY").is_empty());
        assert!(scan("password=changeme").is_empty());
        assert!(scan("let token = next_token(&mut lexer);").is_empty());
        assert!(scan("let token = self.tokens[i];").is_empty());
        assert!(scan("api_key: config.api_key,").is_empty());
        assert!(scan("sk-short").is_empty());
        assert!(scan("fn main() { println!(\"hello\"); }").is_empty());
    }

    #[test]
    fn reasons_are_redacted() {
        let v = write(&format!("OPENAI_API_KEY = \"{OPENAI}\"\n")).expect("found");
        assert_eq!(v.decision, Decision::Ask);
        assert_eq!(
            v.reason,
            "OpenAI-style API key in the content for config.py: sk-p…(44 chars)"
        );
        assert!(!v.reason.contains(OPENAI));
    }

    #[test]
    fn private_keys_are_denied() {
        let v = write("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n")
            .expect("found");
        assert_eq!(v.decision, Decision::Deny);
        assert_eq!(
            v.reason,
            "private key in the content for config.py: -----BEGIN RSA PRIVATE KEY-----…(68 chars)"
        );
        assert_eq!(write("just text"), None);
    }

    #[test]
    fn redact_replaces_every_secret() {
        assert_eq!(
            redact(&format!("a {OPENAI} b AKIAIOSFODNN7EXAMPLE c")),
            "a sk-p…(44 chars) b AKIA…(20 chars) c"
        );
        assert_eq!(redact("nothing here"), "nothing here");
        // Redacting twice changes nothing: the audit log and the engine both
        // redact the same reasons.
        for text in [
            format!("a {OPENAI} b"),
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----".to_string(),
            "password = \"Xk9#mQ2$vL7pR4wz\"".to_string(),
        ] {
            let once = redact(&text);
            assert_eq!(redact(&once), once);
        }
    }
}
