//! Secrets in what the agent is about to write or send.
//!
//! Scans file contents, scripts, arguments, environment values, Emacs Lisp
//! and actuator arguments for credentials with a recognisable shape (the
//! rules of [`secret_rules`]: provider tokens, private key blocks, JWTs,
//! `password=` assignments with a high-entropy value). Private key
//! material is denied; anything else is held for approval. Reasons never
//! repeat the secret: they show a redacted form, and [`redact`] is reused
//! by the audit log. Tool output is redacted here too
//! ([`redact_output_with`]): by the same rules, and by the values the
//! daemon knows ([`crate::gates::known_values`]).

use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;

use crate::action::{Action, Effect};
use crate::gates::engine::verdict_from_findings;
use crate::gates::known_values::{KnownValue, ValueMatcher};
use crate::gates::shell::{script_of, static_regex};
use crate::gates::{secret_reads, secret_rules};
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
    /// Whether the secrets gate asks about it in what is written or run
    /// (false: a shape taken out of output only).
    pub gate: bool,
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
        // A key block's header (`-----BEGIN RSA PRIVATE KEY-----`) only:
        // its first line could be the whole block when the line breaks
        // are `\n` escapes inside a JSON string.
        let first_line = value.lines().next().unwrap_or("");
        let header = match first_line.get(5..).and_then(|rest| rest.find("-----")) {
            Some(end) => &first_line[..end + 10],
            None => first_line.get(..16).unwrap_or(""),
        };
        return format!("{header}…({len} chars)");
    }
    let head: String = value.chars().take(keep.min(len / 3)).collect();
    format!("{head}…({len} chars)")
}

/// Every credential-shaped value in `text`, earliest first, without
/// overlap: the rules of [`secret_rules`] (an earlier rule wins).
pub fn scan(text: &str) -> Vec<SecretFinding> {
    let mut found: Vec<SecretFinding> = Vec::new();
    // Lowering ASCII letters keeps every byte offset, so a `fold_case`
    // rule's match ranges hold in `text` as they are.
    let mut lowered: Option<String> = None;
    for rule in secret_rules::rules() {
        let searched = if rule.fold_case {
            lowered
                .get_or_insert_with(|| text.to_ascii_lowercase())
                .as_str()
        } else {
            text
        };
        if !rule.anchors.is_empty() && !rule.anchors.iter().any(|a| searched.contains(a.as_str())) {
            continue;
        }
        for caps in rule.regex.captures_iter(searched) {
            let Some(m) = caps.get(rule.group) else {
                continue;
            };
            let value = &text[m.range()];
            // `${NAME_SECRET:-default}`: the `-` is the shell's operator,
            // not part of the value (issue 36).
            let judged = value.trim_start_matches(['-', '=', '+', '?']);
            if rule.entropy && (is_reference(judged) || entropy(judged) < 3.0) {
                continue;
            }
            if rule.references && secret_rules::is_reference(judged) {
                continue;
            }
            let overlaps = found
                .iter()
                .any(|f| f.range.start < m.end() && m.start() < f.range.end);
            if overlaps {
                continue;
            }
            found.push(SecretFinding {
                kind: rule.kind.as_str(),
                redacted: redacted_form(value, rule.keep),
                decision: rule.decision,
                range: m.range(),
                gate: rule.gate,
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

/// The compiled forms of the last set of known values: compiling them
/// costs far more than a search, and the values (provider keys, the
/// person's secret values) rarely change between two tool calls. One per
/// daemon; a different set replaces it.
#[derive(Default)]
pub struct KnownPatterns {
    last: Mutex<Option<(Vec<KnownValue>, Arc<ValueMatcher>)>>,
    /// Sets compiled, for tests and measurements.
    builds: std::sync::atomic::AtomicUsize,
}

impl KnownPatterns {
    /// The matcher of `known` (sorted or not), compiled on first use.
    pub fn of(&self, known: &[KnownValue]) -> Arc<ValueMatcher> {
        let mut last = crate::util::sync::lock(&self.last);
        if let Some((values, matcher)) = last.as_ref() {
            if values.as_slice() == known {
                return matcher.clone();
            }
        }
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let matcher = Arc::new(ValueMatcher::new(known));
        *last = Some((known.to_vec(), matcher.clone()));
        matcher
    }

    /// The matcher last compiled (the audit log redacts with it).
    pub fn last(&self) -> Option<Arc<ValueMatcher>> {
        crate::util::sync::lock(&self.last)
            .as_ref()
            .map(|(_, m)| m.clone())
    }

    /// How many sets were compiled.
    pub fn builds(&self) -> usize {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Redact tool output before a hosted model reads it: every occurrence of
/// a `known` value (the configured provider keys, the person's secret
/// values) in any common form, every credential shape [`scan`] recognises
/// and bearer tokens. Pure: the caller decides what to do with the count.
/// Compiles the known values each time; the daemon keeps them
/// ([`redact_output_with`]).
pub fn redact_output(text: &str, known: &[KnownValue]) -> Redacted {
    redact_output_with(text, known, &KnownPatterns::default())
}

/// [`redact_output`] with the known values' matcher taken from
/// `patterns` (compiled there on first use).
pub fn redact_output_with(text: &str, known: &[KnownValue], patterns: &KnownPatterns) -> Redacted {
    let matcher = patterns.of(known);
    redact_with(text, Some(&matcher))
}

/// Redact `text` by `values` (when given) and by rule, each place once:
/// overlapping finds become one, named by the known value when one is
/// among them (it says where the secret comes from).
pub fn redact_with(text: &str, values: Option<&ValueMatcher>) -> Redacted {
    redact_spans(text, values, true)
}

/// `text` with each known value of `values` (in any form) replaced by
/// `[redacted: where it comes from]`, and nothing else: for texts already
/// redacted by rule (the audit log's).
pub fn redact_values(text: &str, values: &ValueMatcher) -> String {
    redact_spans(text, Some(values), false).text
}

fn redact_spans(text: &str, values: Option<&ValueMatcher>, rules: bool) -> Redacted {
    static BEARER: OnceLock<Regex> = OnceLock::new();
    let bearer = BEARER.get_or_init(|| static_regex(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"));
    // (range, label, whether a known value)
    let mut spans: Vec<(Range<usize>, String, bool)> = Vec::new();
    if let Some(m) = values {
        spans.extend(m.find(text).into_iter().map(|v| (v.range, v.label, true)));
    }
    if rules {
        spans.extend(
            scan(text)
                .into_iter()
                .map(|f| (f.range, f.kind.to_string(), false)),
        );
        // A case-insensitive search costs a pass of its own; most output
        // holds no `bearer` in any case, which two literal searches tell.
        let maybe_bearer = ["earer", "EARER"].iter().any(|l| text.contains(l));
        if maybe_bearer {
            for caps in bearer.captures_iter(text) {
                if let Some(m) = caps.get(1) {
                    spans.push((m.range(), "bearer token".to_string(), false));
                }
            }
        }
    }
    if spans.is_empty() {
        return Redacted {
            text: text.to_string(),
            hits: 0,
        };
    }
    let merged = merge_spans(text, spans);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, shown) in &merged {
        out.push_str(&text[at..range.start.max(at)]);
        out.push_str(shown);
        at = range.end.max(at);
    }
    out.push_str(&text[at..]);
    Redacted {
        text: out,
        hits: merged.len(),
    }
}

/// Where [`redact_values`] redacts `text`, and what it puts there: each
/// range (whole characters, ascending, apart) with its `[redacted: …]`.
/// A flight plan's read-back uses it to put the person's values back
/// where the plan showed them redacted.
pub fn value_redactions(text: &str, values: &ValueMatcher) -> Vec<(Range<usize>, String)> {
    let spans = values
        .find(text)
        .into_iter()
        .map(|v| (v.range, v.label, true))
        .collect();
    merge_spans(text, spans)
}

/// Overlapping finds made one (named by the known value when one is among
/// them: it says where the secret comes from), widened to whole
/// characters, each with the text that replaces it.
fn merge_spans(
    text: &str,
    mut spans: Vec<(Range<usize>, String, bool)>,
) -> Vec<(Range<usize>, String)> {
    spans.sort_by(|a, b| a.0.start.cmp(&b.0.start).then(b.0.end.cmp(&a.0.end)));
    let mut merged: Vec<(Range<usize>, String, bool)> = Vec::new();
    for (range, label, known) in spans {
        match merged.last_mut() {
            Some(last) if range.start < last.0.end => {
                last.0.end = last.0.end.max(range.end);
                if known && !last.2 {
                    last.1 = label;
                    last.2 = true;
                }
            }
            _ => merged.push((range, label, known)),
        }
    }
    merged
        .into_iter()
        .map(|(range, label, _)| {
            // A range from a view ends inside a character only if the
            // value did; widen it to whole characters.
            let mut start = range.start.min(text.len());
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = range.end.min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            (start..end, format!("[redacted: {label}]"))
        })
        .collect()
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
            for f in scan(&text).into_iter().filter(|f| f.gate) {
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

    fn known(values: &[&str]) -> Vec<KnownValue> {
        values
            .iter()
            .map(|v| KnownValue::new(*v, "configured API key"))
            .collect()
    }

    #[test]
    fn output_redaction_takes_out_known_keys_and_shapes() {
        let known = known(&["local-provider-key-0123456789", "short"]);
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
    fn a_known_value_inside_a_shape_is_named_by_where_it_comes_from() {
        let known = vec![KnownValue::new(
            "postgres://app:Pq7Lm2Xv9Rt@db/app",
            "value of DATABASE_URL from docker-compose.yml",
        )];
        let r = redact_output("DATABASE_URL=postgres://app:Pq7Lm2Xv9Rt@db/app\nok", &known);
        assert_eq!(
            r.text,
            "DATABASE_URL=[redacted: value of DATABASE_URL from docker-compose.yml]\nok"
        );
        assert_eq!(r.hits, 1);
        // By rule alone, the password goes and the host stays.
        let r = redact_output(
            "origin https://deploy:Hq7v2Lx9Wp@git.example.com/a.git",
            &[],
        );
        assert_eq!(
            r.text,
            "origin https://deploy:[redacted: password in a URL]@git.example.com/a.git"
        );
    }

    #[test]
    fn remembered_matchers_redact_exactly_as_compiled_ones() {
        let value = "s3cr3t-Value-42xyz";
        let known = known(&["local-provider-key-0123456789", value, "short"]);
        let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
        let texts = [
            "nothing here".to_string(),
            format!("KEY=local-provider-key-0123456789 and {value}"),
            format!(
                "{} then {}",
                crate::gates::known_values::base64(format!("T={value}\n").as_bytes()),
                value.chars().rev().collect::<String>()
            ),
            format!("{value}{value} Authorization: Bearer abcdefghijklmnop1234"),
            format!("aws AKIAIOSFODNN7EXAMPLE {hex}"),
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
        // The set compiled once.
        assert_eq!(patterns.builds(), 1);
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
    fn an_escaped_key_block_is_shown_by_its_header_only() {
        let text = r#"{"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END PRIVATE KEY-----\n"}"#;
        let once = redact(text);
        assert!(!once.contains("MIIEvQ"), "{once}");
        assert!(once.contains("-----BEGIN PRIVATE KEY-----…("), "{once}");
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
