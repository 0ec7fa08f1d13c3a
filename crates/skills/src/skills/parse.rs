//! From Org text to a [`Skill`]: reads the owned structs of [`super::org`],
//! validates every keyword, property, table cell and rule example, and
//! reports each problem at its place in the file.
//!
//! Any error keeps the skill's tools, prompts and commands from loading (a
//! half-loaded skill could offer a tool without the rule meant to guard
//! it); warnings never do. Its rules fail closed instead: the valid ones
//! stay in force, and a broken deny or ask rule becomes an ask rule over
//! its `:TOOL:`/`:TARGET:` scope (see [`Parser::rule`]), so a typo never
//! weakens the policy. Line endings are normalised (CRLF → LF) before
//! anything else, so `skills check` and the run-time see the same script.

use std::path::Path;
use std::sync::Arc;

use agent_client_protocol_schema::v1::ToolKind;
use regex::Regex;
use serde_json::Value;

use crate::action::Approval;
use crate::gates::Decision;
use crate::llm::ToolSpec;
use crate::sandbox::limits::LimitOverrides;
use crate::tools::{Tool, ToolSource};

use super::diagnostic::{Diagnostic, Finding, LineIndex};
use super::planner::{schema, Binding, Body, Param, ParamType, SkillPlanner};
use super::rules::Rule;
use super::{Origin, Skill, Trigger};
use crate::org::{self, Element, Headline, ListItem, OrgFile, Property, Row, Table};

/// Larger files are refused unread: the daemon re-checks skills every turn
/// and a skill that size is a mistake (a log pasted into the directory).
pub const MAX_SKILL_BYTES: usize = 1024 * 1024;

/// Priority of a skill that declares none.
pub const DEFAULT_PRIORITY: i32 = 50;

const PROPERTIES_TO_IGNORE: [&str; 2] = ["ID", "CUSTOM_ID"];

/// Parse a skill file's text.
pub fn parse_skill(path: &Path, text: &str, origin: Origin) -> (Option<Skill>, Vec<Diagnostic>) {
    let text = normalise_newlines(text);
    let index = LineIndex::new(&text);
    let (skill, findings) = skill_from_text(path, &text, origin);
    (skill, index.resolve(path, findings))
}

/// CRLF → LF. A script block saved on Windows would otherwise reach bash
/// with a `\r` on every line ("unexpected end of file"). Dropping the `\r`
/// before a `\n` keeps every line number and column, so diagnostics still
/// point at the file as written.
pub fn normalise_newlines(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains("\r\n") {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The closest of `known` to `word` (case-insensitive), when it is close
/// enough to be a slip of the keyboard: at most one edit for short words,
/// two for longer ones, and never the word itself.
pub fn near_miss<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let word = word.to_ascii_lowercase();
    known
        .iter()
        .map(|k| {
            (
                strsim::damerau_levenshtein(&word, &k.to_ascii_lowercase()),
                *k,
            )
        })
        .filter(|(d, k)| *d > 0 && *d <= if word.len().min(k.len()) >= 4 { 2 } else { 1 })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Org's own keywords, which a skill may use freely and which must not be
/// mistaken for a misspelt skill keyword (`#+PRIORITIES:` is not
/// `#+PRIORITY:`).
const ORG_KEYWORDS: [&str; 24] = [
    "TITLE",
    "AUTHOR",
    "DATE",
    "EMAIL",
    "OPTIONS",
    "STARTUP",
    "FILETAGS",
    "TAGS",
    "PROPERTY",
    "LANGUAGE",
    "CATEGORY",
    "SETUPFILE",
    "INCLUDE",
    "NAME",
    "CAPTION",
    "RESULTS",
    "HEADER",
    "CALL",
    "TODO",
    "ARCHIVE",
    "LINK",
    "MACRO",
    "PRIORITIES",
    "SUBTITLE",
];

/// Tags people use on their own headings that sit close to a role tag
/// (`:todo:` is two edits from `:tool:`): never reported as misspellings.
const ORDINARY_TAGS: [&str; 6] = ["todo", "noexport", "export", "ignore", "note", "notes"];

/// Parse a skill file's bytes; text that is not UTF-8 is reported at the
/// first bad byte.
pub fn parse_skill_bytes(
    path: &Path,
    bytes: &[u8],
    origin: Origin,
) -> (Option<Skill>, Vec<Diagnostic>) {
    match decode(path, bytes) {
        Ok(text) => parse_skill(path, text, origin),
        Err(d) => (None, vec![d]),
    }
}

/// Diagnostics for a buffer that may not be saved yet (the editor's live
/// check). Same rules as loading.
pub fn check_text(path: &Path, text: &str) -> Vec<Diagnostic> {
    parse_skill(path, text, Origin::User).1
}

/// Rules of a policy file: every valid rule, whatever else is broken.
pub(crate) fn parse_policy_bytes(path: &Path, bytes: &[u8]) -> (Vec<Rule>, Vec<Diagnostic>) {
    let text = match decode(path, bytes) {
        Ok(t) => t,
        Err(d) => return (Vec::new(), vec![d]),
    };
    let text = normalise_newlines(text);
    let text = text.as_ref();
    let index = LineIndex::new(text);
    let mut p = Parser::new(path, "policy".into());
    if text.len() > MAX_SKILL_BYTES {
        p.findings.push(too_big(text.len()));
        return (Vec::new(), index.resolve(path, p.findings));
    }
    let file = org::parse(text);
    p.unterminated(&file);
    let mut rules = Vec::new();
    for (i, h) in file.headlines.iter().enumerate() {
        if p.is_commented(&file, i) {
            continue;
        }
        p.near_miss_tags(&file, i);
        if role(h) == Some(Role::Rules) {
            rules.extend(p.rules_under(&file, i));
        }
    }
    (rules, index.resolve(path, p.findings))
}

fn decode<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, Diagnostic> {
    std::str::from_utf8(bytes).map_err(|e| {
        let good = e.valid_up_to();
        // The prefix is valid UTF-8 by definition, so this cannot fail.
        let prefix = std::str::from_utf8(&bytes[..good]).unwrap_or_default();
        let (line, column) = LineIndex::new(prefix).line_col(good);
        Diagnostic {
            path: path.to_path_buf(),
            line,
            column,
            severity: super::Severity::Error,
            message: format!(
                "file is not UTF-8 text (byte 0x{:02x} at offset {good}); save it as UTF-8",
                bytes[good]
            ),
        }
    })
}

fn too_big(len: usize) -> Finding {
    Finding::error(
        0,
        format!("file is {len} bytes, more than the {MAX_SKILL_BYTES}-byte limit for skill files"),
    )
}

fn skill_from_text(path: &Path, text: &str, origin: Origin) -> (Option<Skill>, Vec<Finding>) {
    if text.len() > MAX_SKILL_BYTES {
        return (None, vec![too_big(text.len())]);
    }
    if text.trim().is_empty() {
        return (
            None,
            vec![Finding::warning(0, "file is empty: it defines no skill")],
        );
    }
    let file = org::parse(text);
    let mut p = Parser::new(path, String::new());
    p.unterminated(&file);
    let meta = p.metadata(&file, path);
    p.gate = format!("skill:{}", meta.name);

    let mut prompts = Vec::new();
    let mut tools = Vec::new();
    let mut rules = Vec::new();
    let mut commands: Vec<super::Command> = Vec::new();
    for (i, h) in file.headlines.iter().enumerate() {
        if p.is_commented(&file, i) {
            continue;
        }
        p.near_miss_tags(&file, i);
        match role(h) {
            Some(Role::Prompt) => {
                let text = prompt_text(&h.section_text);
                if text.is_empty() {
                    p.findings.push(Finding::warning(
                        h.title_offset,
                        "this :prompt: section is empty",
                    ));
                } else {
                    prompts.push(text);
                }
            }
            Some(Role::Tool) => {
                if let Some(tool) = p.tool(h, &meta.name) {
                    if let Some(prev) = tools.iter().find(|t: &&Tool| t.spec.name == tool.spec.name)
                    {
                        p.findings.push(Finding::error(
                            h.title_offset,
                            format!("tool `{}` is defined twice in this file", prev.spec.name),
                        ));
                    } else {
                        tools.push(tool);
                    }
                }
            }
            Some(Role::Rules) => rules.extend(p.rules_under(&file, i)),
            Some(Role::Command) => {
                if let Some(command) = p.command(h, &meta.name) {
                    if commands.iter().any(|c| c.name == command.name) {
                        p.findings.push(Finding::error(
                            h.title_offset,
                            format!("command `/{}` is defined twice in this file", command.name),
                        ));
                    } else {
                        commands.push(command);
                    }
                }
            }
            Some(Role::Conflict) => p.findings.push(Finding::error(
                h.title_offset,
                "a heading can carry only one of the tags :prompt:, :tool:, :rules:, :command:",
            )),
            None => {}
        }
    }
    if prompts.is_empty()
        && tools.is_empty()
        && rules.is_empty()
        && commands.is_empty()
        && !p.has_errors()
    {
        p.findings.push(Finding::warning(
            0,
            "this file defines no prompt, tool, rule or command: tag a heading :prompt:, :tool:, \
             :rules: or :command:",
        ));
    }
    if p.has_errors() {
        // Fail closed: no tool, prompt or command of a broken file is
        // offered, but its rules (the valid ones, and an ask rule in place
        // of each broken deny/ask rule) stay in force.
        if rules.is_empty() {
            return (None, p.findings);
        }
        p.findings.push(Finding::warning(
            0,
            format!(
                "this file has errors, so only its {} in force (no prompt, tool or command of it is offered)",
                if rules.len() == 1 { "1 rule is".to_string() } else { format!("{} rules are", rules.len()) }
            ),
        ));
        let skill = Skill {
            name: meta.name,
            description: meta.description,
            priority: meta.priority,
            trigger: Trigger::Never,
            prompt: String::new(),
            tools: Vec::new(),
            rules,
            commands: Vec::new(),
            path: path.to_path_buf(),
            origin,
        };
        return (Some(skill), p.findings);
    }
    let skill = Skill {
        name: meta.name,
        description: meta.description,
        priority: meta.priority,
        trigger: meta.trigger,
        prompt: prompts.join("\n\n"),
        tools,
        rules,
        commands,
        path: path.to_path_buf(),
        origin,
    };
    (Some(skill), p.findings)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Prompt,
    Tool,
    Rules,
    Command,
    Conflict,
}

fn role(h: &Headline) -> Option<Role> {
    let mut found = None;
    for t in &h.tags {
        let r = match t.to_ascii_lowercase().as_str() {
            "prompt" => Role::Prompt,
            "tool" => Role::Tool,
            "rules" => Role::Rules,
            "command" => Role::Command,
            _ => continue,
        };
        found = match found {
            None => Some(r),
            Some(prev) if prev == r => Some(r),
            Some(_) => Some(Role::Conflict),
        };
    }
    found
}

/// A section's text without its leading `:PROPERTIES:` drawer.
fn without_drawer(section: &str) -> String {
    let mut lines = section.lines().peekable();
    while lines.peek().is_some_and(|l| l.trim().is_empty()) {
        lines.next();
    }
    if lines
        .peek()
        .is_some_and(|l| l.trim().eq_ignore_ascii_case(":PROPERTIES:"))
    {
        for l in lines.by_ref() {
            if l.trim().eq_ignore_ascii_case(":END:") {
                break;
            }
        }
    }
    lines.collect::<Vec<_>>().join("\n")
}

/// The section text minus Org comment lines (notes to the author, not the
/// model), trimmed. A `#+begin_src markdown` block is the model's text
/// verbatim: its wrapper lines go, Org's comma escapes (`,*`, `,#+`) are
/// undone, and its `# ` lines are Markdown headings, not comments (this is
/// how an imported Agent Skill keeps its SKILL.md body word for word).
fn prompt_text(section: &str) -> String {
    let mut kept: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    let mut in_markdown = false;
    for l in section.lines() {
        let t = l.trim_start();
        if in_markdown {
            if t.trim_end().eq_ignore_ascii_case("#+end_src") {
                in_markdown = false;
            } else {
                kept.push(unescape_org_line(l));
            }
            continue;
        }
        let lower = t.to_ascii_lowercase();
        let mut words = lower.split_whitespace();
        if words.next() == Some("#+begin_src") && matches!(words.next(), Some("markdown" | "md")) {
            in_markdown = true;
            continue;
        }
        if !(t == "#" || t.starts_with("# ")) {
            kept.push(std::borrow::Cow::Borrowed(l));
        }
    }
    kept.join("\n").trim().to_string()
}

/// Undo Org's escape of a block line: the comma Org puts before a leading
/// `*`, `#+` or further commas (after any indentation) is removed.
fn unescape_org_line(line: &str) -> std::borrow::Cow<'_, str> {
    let t = line.trim_start();
    let indent = &line[..line.len() - t.len()];
    if needs_org_escape(t) && t.starts_with(',') {
        std::borrow::Cow::Owned(format!("{indent}{}", &t[1..]))
    } else {
        std::borrow::Cow::Borrowed(line)
    }
}

/// Whether text (indentation removed) starts with commas then `*` or `#+`.
fn needs_org_escape(t: &str) -> bool {
    let rest = t.trim_start_matches(',');
    rest.starts_with('*') || rest.starts_with("#+")
}

/// Escape a line for an Org block as Org does: a comma after the
/// indentation when the text starts with `*`, `#+` or commas before them.
pub fn escape_org_line(line: &str) -> String {
    let t = line.trim_start();
    if needs_org_escape(t) {
        format!("{},{t}", &line[..line.len() - t.len()])
    } else {
        line.to_string()
    }
}

/// Paragraphs of a section as the model should read them: filled lines
/// joined, paragraphs separated by blank lines, list items kept as items.
fn prose(h: &Headline) -> String {
    let mut parts = Vec::new();
    for e in &h.elements {
        match e {
            Element::Paragraph { text, .. } => {
                parts.push(text.lines().map(str::trim).collect::<Vec<_>>().join(" "))
            }
            Element::List(items) if items.iter().all(|i| i.tag.is_none()) => parts.push(
                items
                    .iter()
                    .map(|i| format!("- {}", i.content))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => {}
        }
    }
    parts.join("\n\n")
}

struct Meta {
    name: String,
    description: String,
    priority: i32,
    trigger: Trigger,
}

struct Parser<'p> {
    path: &'p Path,
    gate: String,
    findings: Vec<Finding>,
}

fn valid_skill_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn valid_tool_name(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

fn valid_param_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "yes" | "y" | "true" | "t" => Some(true),
        "no" | "n" | "false" | "nil" => Some(false),
        _ => None,
    }
}

fn parse_kind(s: &str) -> Option<ToolKind> {
    Some(match s.to_ascii_lowercase().as_str() {
        "read" => ToolKind::Read,
        "edit" => ToolKind::Edit,
        "delete" => ToolKind::Delete,
        "move" => ToolKind::Move,
        "search" => ToolKind::Search,
        "execute" => ToolKind::Execute,
        "think" => ToolKind::Think,
        "fetch" => ToolKind::Fetch,
        "other" => ToolKind::Other,
        _ => return None,
    })
}

/// Remove one pair of Org verbatim/code markers: `=git push=` → `git push`.
fn unwrap_verbatim(s: &str) -> &str {
    for m in ['=', '~'] {
        if s.len() >= 2 && s.starts_with(m) && s.ends_with(m) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

impl<'p> Parser<'p> {
    fn new(path: &'p Path, gate: String) -> Self {
        Parser {
            path,
            gate,
            findings: Vec::new(),
        }
    }

    fn has_errors(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == super::Severity::Error)
    }

    fn error(&mut self, offset: usize, msg: impl Into<String>) {
        self.findings.push(Finding::error(offset, msg));
    }

    fn warning(&mut self, offset: usize, msg: impl Into<String>) {
        self.findings.push(Finding::warning(offset, msg));
    }

    fn unterminated(&mut self, file: &OrgFile) {
        for &at in &file.unterminated_src {
            self.error(
                at,
                "`#+begin_src` has no matching `#+end_src`, so Org does not see a src block here",
            );
        }
    }

    /// A tag one slip away from a role tag (`:tols:`, `:tools:`) is
    /// reported with the tag meant. A misspelt `:rules:` over headings
    /// with a `:DECISION:` is an error: those rules are not in force, which
    /// the author must not miss.
    fn near_miss_tags(&mut self, file: &OrgFile, i: usize) {
        let h = &file.headlines[i];
        // Sub-headings with a :DECISION: are rules whatever the tag says.
        let holds_rules = file.headlines.iter().any(|c| {
            c.parent == Some(i)
                && c.properties
                    .iter()
                    .any(|p| p.key.eq_ignore_ascii_case("DECISION"))
        });
        const ROLES: [&str; 4] = ["prompt", "tool", "rules", "command"];
        for t in &h.tags {
            let lower = t.to_ascii_lowercase();
            if ROLES.contains(&lower.as_str()) || ORDINARY_TAGS.contains(&lower.as_str()) {
                continue;
            }
            match near_miss(&lower, &ROLES) {
                Some("rules") if holds_rules => self.error(
                    h.offset,
                    format!("tag :{t}: is not a skill tag, so the rules under this heading are not in force; did you mean :rules:?"),
                ),
                Some(meant) => self.warning(
                    h.offset,
                    format!("tag :{t}: is not a skill tag and this heading is ignored; did you mean :{meant}:?"),
                ),
                None => {}
            }
        }
    }

    /// A `COMMENT` headline disables its whole subtree, as in Org export.
    fn is_commented(&self, file: &OrgFile, mut i: usize) -> bool {
        loop {
            let h = &file.headlines[i];
            if h.title == "COMMENT" || h.title.starts_with("COMMENT ") {
                return true;
            }
            match h.parent {
                Some(p) => i = p,
                None => return false,
            }
        }
    }

    fn metadata(&mut self, file: &OrgFile, path: &Path) -> Meta {
        const KNOWN: [&str; 4] = ["SKILL", "DESCRIPTION", "PRIORITY", "TRIGGER"];
        for kw in &file.section_keywords {
            let key = kw.key.to_ascii_uppercase();
            if KNOWN.contains(&key.as_str()) {
                self.warning(
                    kw.offset,
                    format!(
                        "#+{} is ignored here: skill metadata belongs before the first heading",
                        kw.key
                    ),
                );
            }
        }
        let mut seen: Vec<String> = Vec::new();
        let mut name = None;
        let mut description = String::new();
        let mut priority = DEFAULT_PRIORITY;
        let mut trigger = Trigger::Always;
        for kw in &file.keywords {
            let key = kw.key.to_ascii_uppercase();
            if !KNOWN.contains(&key.as_str()) {
                if !ORG_KEYWORDS.contains(&key.as_str()) {
                    if let Some(meant) = near_miss(&key, &KNOWN) {
                        self.warning(
                            kw.offset,
                            format!("#+{}: is not a skill keyword and is ignored; did you mean #+{meant}:?", kw.key),
                        );
                    }
                }
                continue;
            }
            if seen.contains(&key) {
                self.error(kw.offset, format!("#+{key} is given more than once"));
                continue;
            }
            seen.push(key.clone());
            let v = kw.value.as_str();
            match key.as_str() {
                "SKILL" => {
                    if valid_skill_name(v) {
                        name = Some(v.to_string());
                    } else {
                        self.error(
                            kw.value_offset,
                            format!("skill name `{v}` must be letters, digits, `_`, `-` or `.`, starting with a letter or digit"),
                        );
                    }
                }
                "DESCRIPTION" => description = v.to_string(),
                "PRIORITY" => match v.parse::<i32>() {
                    Ok(n) => priority = n,
                    Err(_) => self.error(
                        kw.value_offset,
                        format!("#+PRIORITY must be an integer, got `{v}`"),
                    ),
                },
                _ => match parse_trigger(v) {
                    Ok(t) => trigger = t,
                    Err(e) => self.error(kw.value_offset, e.to_string()),
                },
            }
        }
        let name = name.unwrap_or_else(|| {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !seen.iter().any(|k| k == "SKILL") && !valid_skill_name(&stem) {
                self.error(
                    0,
                    format!("file name `{stem}` is not a valid skill name: add a #+SKILL: line"),
                );
            }
            stem
        });
        Meta {
            name,
            description,
            priority,
            trigger,
        }
    }

    fn known_properties(&mut self, props: &[Property], known: &[&str]) {
        for p in props {
            let key = p.key.to_ascii_uppercase();
            if !known.contains(&key.as_str()) && !PROPERTIES_TO_IGNORE.contains(&key.as_str()) {
                let message = match near_miss(&key, known) {
                    Some(meant) => format!(
                        "unknown property :{}: is ignored; did you mean :{meant}:?",
                        p.key
                    ),
                    None => format!(
                        "unknown property :{}: is ignored (known here: {})",
                        p.key,
                        known.join(", ")
                    ),
                };
                self.warning(p.offset, message);
            }
        }
    }

    /// A `:command:` heading: the title is the name, `:DESCRIPTION:` is
    /// required, `:INPUT:` optional, the section (drawer and comments left
    /// out) is the template.
    fn command(&mut self, h: &Headline, skill: &str) -> Option<super::Command> {
        let errors_before = self.error_count();
        self.known_properties(&h.properties, &["DESCRIPTION", "INPUT"]);
        let name = h.title.clone();
        if !valid_tool_name(&name) {
            self.error(
                h.title_offset,
                format!("command name `{name}` must be letters, digits, `_` or `-` (at most 64), starting with a letter or `_`"),
            );
        }
        let prop = |key: &str| {
            h.properties
                .iter()
                .find(|p| p.key.eq_ignore_ascii_case(key))
                .map(|p| p.value.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let description = prop("DESCRIPTION");
        if description.is_none() {
            self.error(
                h.title_offset,
                format!("command `/{name}` needs a :DESCRIPTION: property (one line, shown in completion lists)"),
            );
        }
        let template = prompt_text(&without_drawer(&h.section_text));
        if template.is_empty() {
            self.error(
                h.title_offset,
                format!("command `/{name}` has no template: write the prompt it stands for under the heading (use $ARGUMENTS for what follows the name)"),
            );
        }
        if self.error_count() > errors_before {
            return None;
        }
        Some(super::Command {
            name,
            description: description.unwrap_or_default(),
            input_hint: prop("INPUT"),
            template,
            skill: skill.to_string(),
        })
    }

    fn tool(&mut self, h: &Headline, skill: &str) -> Option<Tool> {
        const KNOWN: [&str; 6] = [
            "APPROVAL", "TIMEOUT", "KIND", "ACTUATOR", "NETWORK", "LIMITS",
        ];
        let errors_before = self.error_count();
        let name = h.title.clone();
        if !valid_tool_name(&name) {
            self.error(
                h.title_offset,
                format!("tool name `{name}` must be letters, digits, `_` or `-` (at most 64), starting with a letter or `_`"),
            );
        }
        self.known_properties(&h.properties, &KNOWN);
        let prop = |key: &str| {
            h.properties
                .iter()
                .find(|p| p.key.eq_ignore_ascii_case(key))
        };

        let mut approval = Approval::Ask;
        if let Some(p) = prop("APPROVAL") {
            match p.value.to_ascii_lowercase().as_str() {
                "auto" => approval = Approval::Auto,
                "ask" => approval = Approval::Ask,
                "never" => approval = Approval::Never,
                _ => self.error(
                    p.value_offset,
                    format!("`:APPROVAL:` must be auto, ask or never, got `{}`", p.value),
                ),
            }
        }
        let mut timeout_secs = None;
        if let Some(p) = prop("TIMEOUT") {
            match p.value.parse::<u64>() {
                Ok(n) if n > 0 => timeout_secs = Some(n),
                _ => self.error(
                    p.value_offset,
                    format!(
                        "`:TIMEOUT:` must be a whole number of seconds above 0, got `{}`",
                        p.value
                    ),
                ),
            }
        }
        let mut kind = None;
        if let Some(p) = prop("KIND") {
            match parse_kind(&p.value) {
                Some(k) => kind = Some(k),
                None => self.error(
                    p.value_offset,
                    format!("`:KIND:` must be one of read, edit, delete, move, search, execute, think, fetch, other; got `{}`", p.value),
                ),
            }
        }
        let mut network = false;
        if let Some(p) = prop("NETWORK") {
            match parse_bool(&p.value) {
                Some(b) => network = b,
                None => self.error(
                    p.value_offset,
                    format!("`:NETWORK:` must be yes or no, got `{}`", p.value),
                ),
            }
        }
        let mut limits = LimitOverrides::default();
        if let Some(p) = prop("LIMITS") {
            match LimitOverrides::parse(&p.value) {
                Ok(l) => limits = l,
                Err(e) => self.error(p.value_offset, format!("`:LIMITS:` {e}")),
            }
        }

        let body = self.body(h, &name, prop("ACTUATOR"));
        let table = h.elements.iter().find_map(|e| match e {
            Element::Table(t) => Some(t),
            _ => None,
        });
        let params = match (table, &body) {
            (Some(t), Some(Body::Binding(b))) => {
                let params = self.param_table(t);
                self.check_binding_params(t.offset, *b, &params);
                params
            }
            (Some(t), _) => self.param_table(t),
            (None, Some(Body::Binding(b))) => b.params(),
            (None, _) => Vec::new(),
        };
        let runs_in_sandbox = matches!(
            body,
            Some(Body::Script { .. } | Body::Binding(Binding::ShellRun))
        );
        if network && !runs_in_sandbox {
            if let Some(p) = prop("NETWORK") {
                self.warning(
                    p.offset,
                    "`:NETWORK:` only matters for sh, bash and python bodies and `shell.run`",
                );
            }
        }
        if limits != LimitOverrides::default() && !runs_in_sandbox {
            if let Some(p) = prop("LIMITS") {
                self.warning(
                    p.offset,
                    "`:LIMITS:` only matters for sh, bash and python bodies and `shell.run`",
                );
            }
        }
        if let Some(b) = &body {
            if approval < b.min_approval() {
                let at = prop("APPROVAL").map_or(h.title_offset, |p| p.value_offset);
                self.warning(at, "emacs-lisp runs inside the person's Emacs, so this tool always asks; `:APPROVAL: auto` is raised to ask");
                approval = b.min_approval();
            }
        }
        let description = prose(h);
        if description.is_empty() {
            self.warning(
                h.title_offset,
                format!("tool `{name}` has no description: the model chooses tools by their description"),
            );
        }
        if self.error_count() > errors_before {
            return None;
        }
        let body = body?;
        Some(Tool {
            spec: ToolSpec {
                name: name.clone(),
                description,
                parameters: schema(&params),
            },
            kind: kind.unwrap_or_else(|| body.default_kind()),
            approval,
            timeout_secs,
            source: ToolSource::Skill {
                skill: skill.to_string(),
                path: self.path.to_path_buf(),
            },
            planner: Arc::new(SkillPlanner {
                body,
                params,
                network,
                limits,
            }),
        })
    }

    fn error_count(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == super::Severity::Error)
            .count()
    }

    fn body(&mut self, h: &Headline, name: &str, actuator: Option<&Property>) -> Option<Body> {
        let mut runnable = Vec::new();
        let mut other_languages = Vec::new();
        for e in &h.elements {
            if let Element::SrcBlock(b) = e {
                let lang = b.language.clone().unwrap_or_default();
                match Body::from_src(&lang, b.value.clone()) {
                    Some(body) => runnable.push((b.offset, body)),
                    None => other_languages.push((b.offset, lang)),
                }
            }
        }
        if let Some(extra) = runnable.get(1) {
            self.error(
                extra.0,
                format!("tool `{name}` has a second src block body; a tool runs exactly one"),
            );
        }
        match (actuator, runnable.into_iter().next()) {
            (Some(p), Some((at, _))) => {
                self.error(
                    at,
                    format!(
                        "tool `{name}` has both `:ACTUATOR: {}` and a src block body; keep one",
                        p.value
                    ),
                );
                None
            }
            (Some(p), None) => match Binding::parse(&p.value) {
                Some(b) => Some(Body::Binding(b)),
                None => {
                    let known: Vec<&str> = Binding::ALL.iter().map(|b| b.name()).collect();
                    self.error(
                        p.value_offset,
                        format!(
                            "unknown actuator `{}` (known: {})",
                            p.value,
                            known.join(", ")
                        ),
                    );
                    None
                }
            },
            (None, Some((_, body))) => Some(body),
            (None, None) => {
                match other_languages.first() {
                    Some((at, lang)) if !lang.is_empty() => self.error(
                        *at,
                        format!("a `{lang}` src block cannot be a tool body; use sh, bash, python or emacs-lisp"),
                    ),
                    Some((at, _)) => self.error(
                        *at,
                        "this src block names no language; write `#+begin_src bash` (or sh, python, emacs-lisp)",
                    ),
                    None => self.error(
                        h.title_offset,
                        format!("tool `{name}` has no body: add a src block (sh, bash, python, emacs-lisp) or an `:ACTUATOR:` property"),
                    ),
                }
                None
            }
        }
    }

    /// Parse `| name | type | required | description | default |`.
    fn param_table(&mut self, t: &Table) -> Vec<Param> {
        const COLUMNS: [&str; 5] = ["name", "type", "required", "description", "default"];
        let mut rows = t.rows.iter();
        let Some(Row::Cells { cells: header, .. }) = rows.next() else {
            self.error(
                t.offset,
                "malformed parameter table: the first row must name the columns (name | type | required | description | default)",
            );
            return Vec::new();
        };
        if !matches!(rows.next(), Some(Row::Rule { .. })) {
            self.error(
                t.offset,
                "malformed parameter table: the header row must be followed by a |---+---| rule",
            );
            return Vec::new();
        }
        let mut columns: Vec<Option<&str>> = Vec::new();
        for cell in header {
            let lower = cell.text.to_ascii_lowercase();
            match COLUMNS.iter().find(|c| **c == lower) {
                Some(c) if columns.contains(&Some(c)) => {
                    self.error(
                        cell.offset,
                        format!("malformed parameter table: column `{c}` appears twice"),
                    );
                    columns.push(None);
                }
                Some(c) => columns.push(Some(c)),
                None => {
                    self.error(
                        cell.offset,
                        format!(
                            "malformed parameter table: unknown column `{}` (columns: {})",
                            cell.text,
                            COLUMNS.join(", ")
                        ),
                    );
                    columns.push(None);
                }
            }
        }
        for required in ["name", "type"] {
            if !columns.contains(&Some(required)) {
                self.error(
                    t.offset,
                    format!("malformed parameter table: no `{required}` column"),
                );
            }
        }
        if self.columns_unusable(&columns) {
            return Vec::new();
        }
        let mut params: Vec<Param> = Vec::new();
        for row in rows {
            let Row::Cells { cells, offset } = row else {
                continue;
            };
            if cells.iter().all(|c| c.text.is_empty()) {
                continue;
            }
            if cells.len() > columns.len() {
                self.error(
                    cells[columns.len()].offset,
                    format!(
                        "malformed parameter table: this row has {} cells but the header has {}",
                        cells.len(),
                        columns.len()
                    ),
                );
                continue;
            }
            let cell = |col: &str| {
                columns
                    .iter()
                    .position(|c| *c == Some(col))
                    .and_then(|i| cells.get(i))
            };
            let name_cell = cell("name");
            let name = name_cell.map(|c| c.text.clone()).unwrap_or_default();
            let name_at = name_cell.map_or(*offset, |c| c.offset);
            if !valid_param_name(&name) {
                self.error(
                    name_at,
                    format!("parameter name `{name}` must be letters, digits or `_`, starting with a letter or `_`"),
                );
                continue;
            }
            if let Some(p) = params.iter().find(|p| p.name.eq_ignore_ascii_case(&name)) {
                let msg = if p.name == name {
                    format!("parameter `{name}` is declared twice")
                } else {
                    format!(
                        "parameter `{name}` clashes with `{}`: both would be ${}",
                        p.name,
                        p.env_name()
                    )
                };
                self.error(name_at, msg);
                continue;
            }
            let type_cell = cell("type");
            let ty_text = type_cell.map(|c| c.text.as_str()).unwrap_or("");
            let Some(ty) = ParamType::parse(ty_text) else {
                self.error(
                    type_cell.map_or(*offset, |c| c.offset),
                    format!(
                        "parameter `{name}`: type `{ty_text}` is not one of {}",
                        ParamType::NAMES
                    ),
                );
                continue;
            };
            let required = match cell("required") {
                None => false,
                Some(c) if c.text.is_empty() => false,
                Some(c) => match parse_bool(&c.text) {
                    Some(b) => b,
                    None => {
                        self.error(
                            c.offset,
                            format!(
                                "parameter `{name}`: required must be yes or no, got `{}`",
                                c.text
                            ),
                        );
                        continue;
                    }
                },
            };
            let default = match cell("default").filter(|c| !c.text.is_empty()) {
                None => None,
                Some(c) => match default_value(ty, &c.text) {
                    Some(v) => Some(v),
                    None => {
                        self.error(
                            c.offset,
                            format!(
                                "parameter `{name}`: default `{}` is not a valid {}",
                                c.text,
                                ty.as_str()
                            ),
                        );
                        continue;
                    }
                },
            };
            if required && default.is_some() {
                self.warning(
                    cell("default").map_or(*offset, |c| c.offset),
                    format!("parameter `{name}` is required, so its default is never used"),
                );
            }
            params.push(Param {
                name,
                ty,
                required,
                description: cell("description")
                    .map(|c| c.text.clone())
                    .unwrap_or_default(),
                default,
            });
        }
        params
    }

    fn columns_unusable(&self, columns: &[Option<&str>]) -> bool {
        columns.iter().any(Option::is_none)
            || !columns.contains(&Some("name"))
            || !columns.contains(&Some("type"))
    }

    fn check_binding_params(&mut self, at: usize, b: Binding, params: &[Param]) {
        let wanted = b.params();
        for w in wanted.iter().filter(|w| w.required) {
            match params.iter().find(|p| p.name == w.name) {
                None => self.error(
                    at,
                    format!(
                        "actuator {} needs a parameter `{}` ({})",
                        b.name(),
                        w.name,
                        w.ty.as_str()
                    ),
                ),
                Some(p) if p.ty != w.ty => self.error(
                    at,
                    format!(
                        "parameter `{}` must be of type {} for actuator {}",
                        w.name,
                        w.ty.as_str(),
                        b.name()
                    ),
                ),
                Some(_) => {}
            }
        }
        for p in params {
            match wanted.iter().find(|w| w.name == p.name) {
                None => {
                    let names: Vec<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
                    self.error(
                        at,
                        format!(
                            "actuator {} takes no parameter `{}` (it takes: {})",
                            b.name(),
                            p.name,
                            names.join(", ")
                        ),
                    );
                }
                Some(w) if w.ty != p.ty => self.error(
                    at,
                    format!(
                        "parameter `{}` must be of type {} for actuator {}",
                        p.name,
                        w.ty.as_str(),
                        b.name()
                    ),
                ),
                Some(_) => {}
            }
        }
    }

    /// The rules under a `:rules:` heading: each direct child heading is one
    /// rule. Returns the rules that are valid.
    fn rules_under(&mut self, file: &OrgFile, parent: usize) -> Vec<Rule> {
        let mut out: Vec<Rule> = Vec::new();
        let mut any = false;
        for (i, h) in file.headlines.iter().enumerate() {
            if h.parent != Some(parent) || self.is_commented(file, i) {
                continue;
            }
            any = true;
            if let Some(rule) = self.rule(h) {
                if out.iter().any(|r| r.name == rule.name) {
                    self.error(
                        h.title_offset,
                        format!("rule `{}` is defined twice", rule.name),
                    );
                } else {
                    out.push(rule);
                }
            }
        }
        if !any {
            self.warning(
                file.headlines[parent].title_offset,
                "this :rules: heading has no rules: each rule is a sub-heading",
            );
        }
        out
    }

    fn rule(&mut self, h: &Headline) -> Option<Rule> {
        const KNOWN: [&str; 4] = ["DECISION", "TOOL", "TARGET", "PATTERN"];
        let errors_before = self.error_count();
        let name = h.title.clone();
        self.known_properties(&h.properties, &KNOWN);
        let prop = |key: &str| {
            h.properties
                .iter()
                .find(|p| p.key.eq_ignore_ascii_case(key))
        };
        let decision = match prop("DECISION") {
            None => {
                self.error(
                    h.title_offset,
                    format!("rule `{name}` has no `:DECISION:` (allow, ask or deny)"),
                );
                None
            }
            Some(p) => match p.value.to_ascii_lowercase().as_str() {
                "allow" => Some(Decision::Allow),
                "ask" => Some(Decision::Ask),
                "deny" => Some(Decision::Deny),
                _ => {
                    self.error(
                        p.value_offset,
                        format!("`:DECISION:` must be allow, ask or deny, got `{}`", p.value),
                    );
                    None
                }
            },
        };
        let glob = |p: Option<&Property>| {
            p.map(|p| p.value.clone())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "*".into())
        };
        let tool = glob(prop("TOOL"));
        let target = glob(prop("TARGET"));
        let pattern = match prop("PATTERN") {
            None => {
                self.error(
                    h.title_offset,
                    format!("rule `{name}` has no `:PATTERN:`; write `:PATTERN: .*` (and a `- match ::` example) to cover every action its :TOOL: and :TARGET: match"),
                );
                None
            }
            Some(p) => match Regex::new(&p.value) {
                Ok(re) => Some(re),
                Err(e) => {
                    self.error(
                        p.value_offset,
                        format!(
                            "`:PATTERN:` is not a valid regular expression: {}",
                            regex_error(&e)
                        ),
                    );
                    return self.broken_rule(h, errors_before, decision, tool, target);
                }
            },
        };
        let examples: Vec<&ListItem> = h
            .elements
            .iter()
            .filter_map(|e| match e {
                Element::List(items) => Some(items),
                _ => None,
            })
            .flatten()
            .filter(|i| i.tag.is_some())
            .collect();
        let mut positives = 0;
        for item in &examples {
            let tag = item.tag.as_deref().unwrap_or_default().to_ascii_lowercase();
            let should_match = match tag.as_str() {
                "match" => true,
                "no match" => false,
                other => {
                    self.warning(item.offset, format!("`- {other} ::` is not an example; write `- match ::` or `- no match ::`"));
                    continue;
                }
            };
            let input = unwrap_verbatim(&item.content);
            let Some(re) = &pattern else {
                continue;
            };
            if should_match {
                positives += 1;
            }
            match (should_match, re.find(input)) {
                (true, None) => self.error(
                    item.content_offset,
                    format!("rule `{name}`: example `{input}` should match /{}/ but does not", re.as_str()),
                ),
                (false, Some(m)) => self.error(
                    item.content_offset,
                    format!("rule `{name}`: example `{input}` should not match /{}/ but does (it matches `{}`)", re.as_str(), m.as_str()),
                ),
                _ => {}
            }
        }
        if let (Some(_), 0) = (&pattern, positives) {
            self.error(
                h.title_offset,
                format!(
                    "rule `{name}` has a `:PATTERN:` but no `- match ::` example; add at least one"
                ),
            );
        }
        let mut reason = prose(h);
        if reason.is_empty() {
            self.warning(
                h.title_offset,
                format!("rule `{name}` gives no reason: write one line of why under the heading"),
            );
            reason = name.clone();
        }
        if self.error_count() > errors_before {
            return self.broken_rule(h, errors_before, decision, tool, target);
        }
        Some(Rule {
            name,
            decision: decision?,
            tool,
            target,
            pattern: pattern.map(Into::into),
            reason,
            gate: self.gate.clone(),
        })
    }

    /// What stands in for a rule that did not load, so a typo never
    /// weakens the policy. A broken allow rule is dropped (dropping an
    /// allow only makes things stricter). Any other — deny, ask, or a
    /// decision that did not parse — asks for every action of its
    /// `:TOOL:`/`:TARGET:` scope (asking, not denying: the pattern that
    /// said which actions to deny is what is unknown). The reason carries
    /// the load error, so the person sees it in the approval question.
    fn broken_rule(
        &mut self,
        h: &Headline,
        errors_before: usize,
        decision: Option<Decision>,
        tool: String,
        target: String,
    ) -> Option<Rule> {
        if decision == Some(Decision::Allow) {
            return None;
        }
        let first_error = self
            .findings
            .iter()
            .filter(|f| f.severity == super::Severity::Error)
            .nth(errors_before)
            .map(|f| f.message.clone())
            .unwrap_or_default();
        let scope = format!("tool {tool}, target {target}");
        self.warning(
            h.title_offset,
            format!(
                "rule `{}` did not load; until it is fixed every action of its scope ({scope}) is asked about",
                h.title
            ),
        );
        Some(Rule {
            name: h.title.clone(),
            decision: Decision::Ask,
            tool,
            target,
            pattern: None,
            reason: format!(
                "this rule did not load ({first_error}); until {} is fixed, its scope ({scope}) asks",
                self.path.display()
            ),
            gate: self.gate.clone(),
        })
    }
}

/// Why a `#+TRIGGER` value did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum TriggerError {
    #[error("#+TRIGGER must be `always`, `never` or a /regular expression/, got `{0}`")]
    Shape(String),
    #[error("#+TRIGGER is not a valid regular expression: {0}")]
    Regex(String),
}

fn parse_trigger(v: &str) -> Result<Trigger, TriggerError> {
    match v.to_ascii_lowercase().as_str() {
        "always" => return Ok(Trigger::Always),
        "never" => return Ok(Trigger::Never),
        _ => {}
    }
    let Some(inner) = v
        .strip_prefix('/')
        .and_then(|s| s.strip_suffix('/'))
        .filter(|s| !s.is_empty())
    else {
        return Err(TriggerError::Shape(v.to_string()));
    };
    Regex::new(&format!("(?i){inner}"))
        .map(|re| Trigger::Pattern(re.into()))
        .map_err(|e| TriggerError::Regex(regex_error(&e)))
}

/// The regex crate's message without its multi-line picture of the pattern.
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    let last = text.lines().last().unwrap_or_default().trim();
    last.strip_prefix("error: ").unwrap_or(last).to_string()
}

fn default_value(ty: ParamType, text: &str) -> Option<Value> {
    match ty {
        ParamType::String => Some(Value::String(unwrap_verbatim(text).to_string())),
        ParamType::Integer => text.parse::<i64>().ok().map(Value::from),
        ParamType::Number => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        ParamType::Boolean => parse_bool(text).map(Value::Bool),
        ParamType::Array | ParamType::Object => serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| ty.accepts(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_property_reaches_the_planner_and_bad_values_are_errors() {
        let text = "#+SKILL: build\n* make :tool:\n:PROPERTIES:\n:LIMITS: processes=512 \
                    file_size=1G cpu=120\n:END:\nBuild it.\n#+begin_src sh\nmake\n#+end_src\n";
        let (skill, diags) = parse_skill(Path::new("b.org"), text, Origin::User);
        let skill = skill.unwrap_or_else(|| panic!("{diags:?}"));
        let limits = skill.tools[0].planner.limits();
        assert_eq!(limits.processes, Some(512));
        assert_eq!(limits.file_size, Some(1024 * 1024 * 1024));
        assert_eq!(limits.cpu_secs, Some(120));
        assert_eq!(limits.open_files, None);

        let bad = text.replace("processes=512", "forks=3");
        let (skill, diags) = parse_skill(Path::new("b.org"), &bad, Origin::User);
        assert!(skill.is_none());
        let shown: Vec<String> = diags.iter().map(std::string::ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|d| d.contains("`:LIMITS:` unknown limit `forks`")),
            "{shown:?}"
        );
    }

    #[test]
    fn triggers_parse_to_always_never_or_a_case_insensitive_regex() {
        assert!(matches!(parse_trigger("always"), Ok(Trigger::Always)));
        assert!(matches!(parse_trigger("NEVER"), Ok(Trigger::Never)));
        let Ok(Trigger::Pattern(re)) = parse_trigger(r"/\bgit\b/") else {
            panic!("not a pattern")
        };
        assert!(re.is_match("Git status"));
        assert_eq!(
            parse_trigger("git").unwrap_err().to_string(),
            "#+TRIGGER must be `always`, `never` or a /regular expression/, got `git`"
        );
        assert_eq!(
            parse_trigger("//").unwrap_err().to_string(),
            "#+TRIGGER must be `always`, `never` or a /regular expression/, got `//`"
        );
        assert_eq!(
            parse_trigger("/a[/").unwrap_err().to_string(),
            "#+TRIGGER is not a valid regular expression: unclosed character class"
        );
    }

    #[test]
    fn defaults_are_typed_by_the_parameter_type() {
        assert_eq!(
            default_value(ParamType::String, "=a b="),
            Some(json!("a b"))
        );
        assert_eq!(default_value(ParamType::Integer, "20"), Some(json!(20)));
        assert_eq!(default_value(ParamType::Integer, "2.5"), None);
        assert_eq!(default_value(ParamType::Number, "2.5"), Some(json!(2.5)));
        assert_eq!(default_value(ParamType::Boolean, "yes"), Some(json!(true)));
        assert_eq!(default_value(ParamType::Boolean, "nil"), Some(json!(false)));
        assert_eq!(
            default_value(ParamType::Array, "[1, 2]"),
            Some(json!([1, 2]))
        );
        assert_eq!(default_value(ParamType::Array, "{}"), None);
        assert_eq!(
            default_value(ParamType::Object, "{\"a\": 1}"),
            Some(json!({ "a": 1 }))
        );
    }

    #[test]
    fn prompt_text_drops_org_comments_only() {
        assert_eq!(
            prompt_text("# note to self\nBe brief.\n#+begin_quote\n#\n  # indented comment\nKeep #hashtags.\n"),
            "Be brief.\n#+begin_quote\nKeep #hashtags."
        );
    }

    #[test]
    fn verbatim_markers_are_removed_once() {
        assert_eq!(unwrap_verbatim("=git push="), "git push");
        assert_eq!(unwrap_verbatim("~a~"), "a");
        assert_eq!(unwrap_verbatim("==x=="), "=x=");
        assert_eq!(unwrap_verbatim("="), "=");
        assert_eq!(unwrap_verbatim("a = b"), "a = b");
    }

    #[test]
    fn a_tool_without_errors_becomes_a_tool() {
        let text = "#+SKILL: t\n* hi :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:END:\nSay hi.\n#+begin_src sh\necho hi\n#+end_src\n";
        let (skill, diags) = parse_skill(Path::new("t.org"), text, Origin::User);
        assert_eq!(diags, vec![]);
        let skill = skill.unwrap();
        assert_eq!(skill.tools[0].spec.name, "hi");
        assert_eq!(skill.tools[0].spec.description, "Say hi.");
        assert_eq!(
            skill.tools[0].spec.parameters,
            json!({ "type": "object", "properties": {}, "required": [] })
        );
        assert_eq!(skill.tools[0].kind, ToolKind::Execute);
    }

    #[test]
    fn a_command_heading_becomes_a_slash_command() {
        let text = "#+SKILL: rev
* review :command:
:PROPERTIES:
:DESCRIPTION: Review the changes
:INPUT: what to focus on
:END:
# a note for authors
Review the uncommitted changes.
Focus on: $ARGUMENTS
";
        let (skill, diags) = parse_skill(Path::new("rev.org"), text, Origin::User);
        assert_eq!(diags, vec![]);
        let c = &skill.unwrap().commands[0];
        assert_eq!(
            c,
            &crate::skills::Command {
                name: "review".into(),
                description: "Review the changes".into(),
                input_hint: Some("what to focus on".into()),
                template: "Review the uncommitted changes.\nFocus on: $ARGUMENTS".into(),
                skill: "rev".into(),
            }
        );
        assert_eq!(
            c.expand(" errors "),
            "Review the uncommitted changes.\nFocus on: errors"
        );
    }

    #[test]
    fn a_command_without_description_or_template_is_an_error_at_its_line() {
        let text = "#+SKILL: rev
#+DESCRIPTION: x

* bad name! :command:
Body.
* empty :command:
:PROPERTIES:
:DESCRIPTION: nothing
:END:
";
        let (skill, diags) = parse_skill(Path::new("rev.org"), text, Origin::User);
        assert!(skill.is_none());
        let shown: Vec<String> = diags.iter().map(std::string::ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|d| d.starts_with("rev.org:4:") && d.contains("command name `bad name!`")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|d| d.starts_with("rev.org:4:") && d.contains("needs a :DESCRIPTION:")),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|d| d.starts_with("rev.org:6:") && d.contains("has no template")),
            "{shown:?}"
        );
    }
}
