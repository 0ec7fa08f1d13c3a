//! The documentation against the program it documents: every
//! `passepartout …` command line in `README.md` and `docs/*.md` parses with
//! the current command line (clap's `try_parse_from`), every flag named on
//! its own exists, every `config.toml` the docs show loads (no unknown key),
//! and every configuration key the program reads is named in the docs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use passepartout::cli::Cli;
use passepartout::llm::ProviderConfigExt;
use serde_json::Value;

/// The documentation files: the README and every `docs/*.md`.
fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// One documentation file split into fenced blocks (language, text) and
/// the prose between them.
struct Doc {
    name: String,
    blocks: Vec<(String, String)>,
    prose: String,
}

fn read_doc(path: &Path) -> Doc {
    let text = std::fs::read_to_string(path).unwrap();
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    Doc {
        name: path.file_name().unwrap().to_string_lossy().into_owned(),
        blocks,
        prose,
    }
}

/// The inline code spans of prose (a span may run over a line break).
fn code_spans(prose: &str) -> Vec<String> {
    let flat = prose.replace('\n', " ");
    let mut spans = Vec::new();
    let mut parts = flat.split('`');
    parts.next(); // before the first backtick
    while let Some(inside) = parts.next() {
        spans.push(inside.trim().to_string());
        parts.next(); // the prose after it
    }
    spans
}

/// Split a command line as a shell would (quotes), stopping at a comment
/// or a shell operator.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    let end = out
        .iter()
        .position(|w| {
            w.starts_with('#') || ["&&", "||", ";", "|", ">", "2>&1"].contains(&w.as_str())
        })
        .unwrap_or(out.len());
    out.truncate(end);
    out
}

/// A documented command line made into arguments: `[optional]` parts kept
/// without their brackets, `a|b` alternatives as their first, `…` dropped,
/// and the placeholder `N` as a number.
fn arguments(line: &str) -> Vec<String> {
    words(line)
        .into_iter()
        .filter(|w| !matches!(w.as_str(), "…" | "..." | "[…]"))
        .map(|w| {
            let w = w.trim_start_matches('[').trim_end_matches(']').to_string();
            let w = match w.split_once('|') {
                Some((first, _)) if !first.is_empty() => first.to_string(),
                _ => w,
            };
            match w.as_str() {
                "N" => "1".to_string(),
                "MODE" => "auto".to_string(),
                _ => w,
            }
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every `passepartout SUBCOMMAND …` line of the docs: (file, line, and
/// whether it stands in prose, where it may only name the command).
fn command_lines() -> Vec<(String, String, bool)> {
    let is_command = |text: &str| {
        let text = text.trim().trim_start_matches("$ ");
        let mut it = text.split_whitespace();
        it.next() == Some("passepartout")
            && it
                .next()
                .is_some_and(|sub| sub.chars().all(|c| c.is_ascii_lowercase()))
    };
    let mut found = Vec::new();
    for path in doc_files() {
        let doc = read_doc(&path);
        for (_, body) in &doc.blocks {
            for line in body.lines() {
                if is_command(line) {
                    let line = line.trim().trim_start_matches("$ ").to_string();
                    found.push((doc.name.clone(), line, false));
                }
            }
        }
        for span in code_spans(&doc.prose) {
            if is_command(&span) {
                found.push((doc.name.clone(), span, true));
            }
        }
    }
    found
}

#[test]
fn every_documented_command_line_parses() {
    let lines = command_lines();
    assert!(lines.len() > 30, "too few command lines found: {lines:?}");
    let failures: Vec<String> = lines
        .iter()
        .filter_map(|(file, line, in_prose)| {
            let args = arguments(line);
            let error = Cli::try_parse_from(&args).err()?;
            // In prose, `passepartout run` or `run --mode` names a command
            // or a flag: its arguments need not be there, the rest must be
            // right.
            let names_only = *in_prose
                && (error.kind() == clap::error::ErrorKind::MissingRequiredArgument
                    || (error.kind() == clap::error::ErrorKind::InvalidValue
                        && args.last().is_some_and(|a| a.starts_with("--"))));
            (!names_only).then(|| format!("{file}: `{line}` → {args:?}: {}", error.kind()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every long flag of the command line, any subcommand.
fn long_flags() -> BTreeSet<String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.insert(format!("--{long}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut flags = BTreeSet::from(["--help".to_string(), "--version".to_string()]);
    walk(&Cli::command(), &mut flags);
    flags
}

/// Flags of other programs the docs name in code on their own, with the
/// program: not passepartout's.
const OTHER_PROGRAMS_FLAGS: &[(&str, &str)] = &[
    ("--symbol-ordering-file", "lld"),
    ("--size", "bwrap"),
    ("--script", "an MCP server's command line"),
    ("--disable-host-loopback", "slirp4netns"),
    ("--hard", "git reset"),
    ("--overlay", "bwrap"),
];

#[test]
fn every_flag_named_on_its_own_exists() {
    let mut flags = long_flags();
    flags.extend(OTHER_PROGRAMS_FLAGS.iter().map(|(f, _)| f.to_string()));
    let mut failures = Vec::new();
    for path in doc_files() {
        let doc = read_doc(&path);
        for span in code_spans(&doc.prose) {
            let Some(flag) = span.split_whitespace().next() else {
                continue;
            };
            let flag = flag.split('=').next().unwrap_or(flag);
            if flag.starts_with("--")
                && flag.len() > 2
                && flag[2..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-')
                && !flags.contains(flag)
            {
                failures.push(format!("{}: `{span}`", doc.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "flags no subcommand has:\n{}",
        failures.join("\n")
    );
}

/// Whether a TOML block of the docs is a `config.toml` (not a skill's or a
/// project's file, which the docs also show).
fn is_config_toml(body: &str) -> bool {
    !body.contains("[package]") && !body.contains("[project]")
}

#[test]
fn every_config_toml_the_docs_show_loads() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for path in doc_files() {
        let doc = read_doc(&path);
        for (lang, body) in &doc.blocks {
            if lang != "toml" || !is_config_toml(body) {
                continue;
            }
            checked += 1;
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("config.toml");
            std::fs::write(&file, body).unwrap();
            if let Err(e) = passepartout::config::Config::from_file(&file) {
                failures.push(format!("{}: {e}\n{body}", doc.name));
            }
        }
    }
    assert!(checked >= 4, "only {checked} config.toml blocks found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every key the configuration file may hold, as `table.key` paths, read
/// from the defaults serialised (`#[serde(skip)]` fields are not keys).
fn config_keys() -> BTreeSet<String> {
    fn walk(prefix: &str, value: &Value, out: &mut BTreeSet<String>) {
        if let Value::Object(map) = value {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if let Value::Object(inner) = v {
                    if !inner.is_empty() && !k.starts_with("prices") {
                        walk(&path, v, out);
                        continue;
                    }
                }
                out.insert(path);
            }
        }
    }
    let mut keys = BTreeSet::new();
    let config = serde_json::to_value(passepartout::config::Config::default()).unwrap();
    walk("", &config, &mut keys);
    let provider = serde_json::to_value(passepartout::llm::config::ProviderConfig::from_url(
        "http://127.0.0.1:8080/v1",
        "m",
    ))
    .unwrap();
    walk("providers", &provider, &mut keys);
    keys
}

#[test]
fn every_config_key_is_documented() {
    let mut text = String::new();
    for path in doc_files() {
        text.push_str(&std::fs::read_to_string(path).unwrap());
    }
    let undocumented: Vec<String> = config_keys()
        .into_iter()
        .filter(|path| {
            let key = path.rsplit('.').next().unwrap_or(path);
            !(text.contains(&format!("`{key}`"))
                || text.contains(&format!("{key} ="))
                || text.contains(&format!("[[{path}]]"))
                || text.contains(&format!("[{path}.")))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "config keys the docs never name: {undocumented:?}"
    );
}

#[test]
fn the_extraction_reads_commands_flags_and_keys() {
    // The helpers above find what they look for (a broken extractor would
    // make the tests above pass on nothing).
    assert_eq!(
        arguments(r#"passepartout plans approve|reject ID --comment "not now"  # decide"#),
        [
            "passepartout",
            "plans",
            "approve",
            "ID",
            "--comment",
            "not now"
        ]
    );
    assert_eq!(
        arguments("passepartout history [--limit N] [--json] …"),
        ["passepartout", "history", "--limit", "1", "--json"]
    );
    assert_eq!(
        code_spans("a `passepartout run\n--continue` b `x`"),
        ["passepartout run --continue", "x"]
    );
    assert!(Cli::try_parse_from(arguments("passepartout run --api-key k hi")).is_err());
    let keys = config_keys();
    for key in [
        "shell_timeout_secs",
        "providers.connect_timeout_secs",
        "mcp.servers",
    ] {
        assert!(keys.contains(key), "{key} not in {keys:?}");
    }
}
