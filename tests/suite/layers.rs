//! The layer test: the crate's import graph must follow the layer table in
//! `docs/architecture.md`.
//!
//! One crate has no compiler-enforced layering (a workspace of crates
//! would), so this test stands in for it. The table in the document is the
//! data: each top-level module of `src/` sits in one layer, and production
//! code may name (`crate::x`, or `passepartout::x` from the binary) only
//! modules of its own layer or of a layer below. Modules of one layer may
//! use each other only acyclically. Test code (`#[cfg(test)]` items, and
//! the files of `#[cfg(test)] mod name;`) is not looked at: tests may reach
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A layer table: module → (layer index, layer name); index 0 is the bottom.
#[derive(Debug, Default)]
struct Layers {
    of: BTreeMap<String, (usize, String)>,
}

/// Reads the table that follows the `## Layers` heading: rows of
/// `| layer | modules |`, bottom layer first, module names in backticks.
fn parse_layers(doc: &str) -> Layers {
    let mut layers = Layers::default();
    let mut in_section = false;
    let mut index = 0;
    for line in doc.lines() {
        if line.starts_with("## ") {
            if in_section {
                break;
            }
            in_section = line.trim() == "## Layers";
            continue;
        }
        if !in_section || !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0] == "layer" || cells[0].starts_with("---") {
            continue;
        }
        let name = cells[0].trim_matches('*').to_string();
        for module in cells[1].split('`').skip(1).step_by(2) {
            layers.of.insert(module.to_string(), (index, name.clone()));
        }
        index += 1;
    }
    layers
}

/// One reference from production code to a top-level module.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The top-level module a file under `src/` belongs to (`None` for the
/// crate roots, which only declare modules).
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// `text` with comments, string and char literals blanked out (newlines
/// kept, so line numbers stay true).
fn blank_non_code(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_') || c[i - 1] == 'b')
            && matches!(next, Some('"') | Some('#'))
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &ch in &c[i..=end] {
                        blank(&mut out, ch);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c[i]);
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `code` (already blanked) with every `#[cfg(test)]` item blanked too: the
/// attribute up to the end of the item it applies to (its matching `}` or
/// its `;`).
fn blank_test_items(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let needle: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + needle.len() <= c.len() {
        if c[i..i + needle.len()] != needle[..] {
            i += 1;
            continue;
        }
        let mut j = i + needle.len();
        let mut depth = 0usize;
        while j < c.len() {
            match c[j] {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = j.min(c.len());
        for ch in &mut c[i..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = j;
    }
    c.into_iter().collect()
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The references from one file's production code to other top-level
/// modules: `crate::x…`, `passepartout::x…`, and each name of a
/// `crate::{x, y::z}` group.
fn references(rel: &str, from: &str, text: &str) -> Vec<Reference> {
    let code = blank_test_items(&blank_non_code(text));
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let line_at = |pos: usize| c[..pos].iter().filter(|&&ch| ch == '\n').count() + 1;
    let mut push = |pos: usize, to: String| {
        if to != from && !to.is_empty() && to != "self" && to != "super" {
            out.push(Reference {
                file: rel.to_string(),
                line: line_at(pos),
                from: from.to_string(),
                to,
            });
        }
    };
    for root in ["crate::", "passepartout::"] {
        let needle: Vec<char> = root.chars().collect();
        let mut i = 0;
        while i + needle.len() <= c.len() {
            let starts = c[i..i + needle.len()] == needle[..]
                && (i == 0 || !(is_ident(c[i - 1]) || c[i - 1] == ':'));
            if !starts {
                i += 1;
                continue;
            }
            let mut j = i + needle.len();
            while c.get(j).is_some_and(|ch| ch.is_whitespace()) {
                j += 1;
            }
            if c.get(j) == Some(&'{') {
                // A group: every name at its first level.
                let mut depth = 0;
                let mut name = String::new();
                let mut name_pos = j;
                let mut expect_name = true;
                while j < c.len() {
                    let ch = c[j];
                    match ch {
                        '{' => {
                            depth += 1;
                            expect_name = depth == 1;
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => expect_name = true,
                        _ if depth == 1 && expect_name && is_ident(ch) => {
                            if name.is_empty() {
                                name_pos = j;
                            }
                            name.push(ch);
                        }
                        _ if !name.is_empty() => {
                            push(name_pos, std::mem::take(&mut name));
                            expect_name = false;
                        }
                        _ => {}
                    }
                    j += 1;
                }
            } else {
                let start = j;
                while c.get(j).is_some_and(|&ch| is_ident(ch)) {
                    j += 1;
                }
                push(start, c[start..j].iter().collect());
            }
            i = j.max(i + 1);
        }
    }
    out
}

/// What breaks the layering.
#[derive(Debug, Default)]
struct Report {
    /// References to a module of a higher layer.
    upward: Vec<String>,
    /// Cycles between modules of one layer, each with its witnesses.
    loops: Vec<String>,
    /// Modules the table does not place.
    unplaced: BTreeSet<String>,
}

impl Report {
    fn is_clean(&self) -> bool {
        self.upward.is_empty() && self.loops.is_empty() && self.unplaced.is_empty()
    }
}

/// Judges `(file, module, text)` triples against `layers`.
fn check(layers: &Layers, files: &[(String, String, String)]) -> Report {
    let mut report = Report::default();
    let mut edges: BTreeMap<(String, String), Reference> = BTreeMap::new();
    let layer = |m: &str| layers.of.get(m);
    for (rel, module, text) in files {
        if layer(module).is_none() {
            report.unplaced.insert(module.clone());
        }
        for r in references(rel, module, text) {
            match (layer(&r.from), layer(&r.to)) {
                (Some((lf, nf)), Some((lt, nt))) if lt > lf => report.upward.push(format!(
                    "{}:{}: {} ({nf}) -> {} ({nt})",
                    r.file, r.line, r.from, r.to
                )),
                (_, None) => {
                    report.unplaced.insert(r.to.clone());
                }
                _ => {}
            }
            edges.entry((r.from.clone(), r.to.clone())).or_insert(r);
        }
    }
    // Loops within a layer: strongly connected components of the graph of
    // same-layer edges (an edge between layers cannot close a loop unless
    // one already points up, reported above).
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        if let (Some((a, _)), Some((b, _))) = (layer(from), layer(to)) {
            if a == b {
                graph.entry(from).or_default().push(to);
            }
        }
    }
    for component in strongly_connected(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: BTreeSet<&str> = component.iter().copied().collect();
        let witnesses: Vec<String> = edges
            .iter()
            .filter(|((f, t), _)| members.contains(f.as_str()) && members.contains(t.as_str()))
            .map(|((f, t), r)| format!("{f} -> {t} ({}:{})", r.file, r.line))
            .collect();
        report.loops.push(format!(
            "loop in layer {}: {}",
            layer(component[0]).map(|(_, n)| n.as_str()).unwrap_or("?"),
            witnesses.join(", ")
        ));
    }
    report
}

/// Tarjan's algorithm, iteratively small enough to write recursively.
fn strongly_connected<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in graph.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of modules declared `#[cfg(test)] mod name;` in `text` (a
/// file at `path`): test code kept in a file of its own.
fn test_module_files(path: &Path, text: &str) -> Vec<PathBuf> {
    let dir = match path.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs") | Some("lib.rs") | Some("main.rs") => {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        }
        _ => path.with_extension(""),
    };
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        rest = &rest[at + "#[cfg(test)]".len()..];
        let item = rest.trim_start();
        let Some(decl) = item.strip_prefix("mod ") else {
            continue;
        };
        let name: String = decl.chars().take_while(|&c| is_ident(c)).collect();
        if decl[name.len()..].trim_start().starts_with(';') {
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(&name).join("mod.rs"));
        }
    }
    out
}

fn crate_files() -> Vec<(String, String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let texts: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable source");
            (p, text)
        })
        .collect();
    let test_only: BTreeSet<PathBuf> = texts
        .iter()
        .flat_map(|(p, text)| test_module_files(p, text))
        .collect();
    texts
        .into_iter()
        .filter(|(p, _)| !test_only.contains(p))
        .filter_map(|(p, text)| {
            let rel = p.strip_prefix(&src).expect("under src");
            let module = module_of(rel)?;
            Some((format!("src/{}", rel.display()), module, text))
        })
        .collect()
}

#[test]
fn the_crate_follows_the_layer_table() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .expect("docs/architecture.md");
    let layers = parse_layers(&doc);
    assert!(
        layers.of.len() > 10,
        "no layer table under `## Layers` in docs/architecture.md"
    );
    let report = check(&layers, &crate_files());
    assert!(
        report.is_clean(),
        "the import graph breaks the layer table in docs/architecture.md:\n\
         upward references:\n  {}\nloops:\n  {}\nmodules without a layer: {:?}",
        report.upward.join("\n  "),
        report.loops.join("\n  "),
        report.unplaced
    );
}

const TABLE: &str = "\
# Doc

## Layers

| layer | modules |
|---|---|
| foundation | `paths`, `util` |
| policy | `gates`, `audit` |
| top | `config` |

## Next
| x | `ignored` |
";

fn file(rel: &str, module: &str, text: &str) -> (String, String, String) {
    (rel.into(), module.into(), text.into())
}

#[test]
fn the_table_is_read_bottom_first() {
    let layers = parse_layers(TABLE);
    assert_eq!(layers.of["paths"], (0, "foundation".to_string()));
    assert_eq!(layers.of["audit"], (1, "policy".to_string()));
    assert_eq!(layers.of["config"], (2, "top".to_string()));
    assert!(!layers.of.contains_key("ignored"));
}

#[test]
fn an_upward_reference_is_reported_with_its_place() {
    let layers = parse_layers(TABLE);
    let files = [
        file(
            "src/paths.rs",
            "paths",
            "use std::path::Path;\n\nuse crate::config::Config;\n",
        ),
        file(
            "src/config.rs",
            "config",
            "use crate::{paths, gates::Gate};\n",
        ),
    ];
    let report = check(&layers, &files);
    assert_eq!(
        report.upward,
        vec!["src/paths.rs:3: paths (foundation) -> config (top)".to_string()]
    );
    assert!(report.loops.is_empty(), "{:?}", report.loops);
}

#[test]
fn a_loop_within_a_layer_is_reported() {
    let layers = parse_layers(TABLE);
    let files = [
        file(
            "src/gates/mod.rs",
            "gates",
            "fn f() { crate::audit::log(); }\n",
        ),
        file(
            "src/audit.rs",
            "audit",
            "use crate::{\n    gates::redact,\n};\n",
        ),
    ];
    let report = check(&layers, &files);
    assert!(report.upward.is_empty(), "{:?}", report.upward);
    assert_eq!(
        report.loops,
        vec![
            "loop in layer policy: audit -> gates (src/audit.rs:2), gates -> audit (src/gates/mod.rs:1)"
                .to_string()
        ]
    );
}

#[test]
fn tests_comments_and_strings_are_not_references() {
    let text = r##"
//! Talks about crate::config in a comment.
/* and crate::config /* nested */ here */
const S: &str = "crate::config";
const R: &str = r#"crate::config"#;
const C: char = '"';
fn f<'a>(x: &'a str) -> &'a str { x }

#[cfg(test)]
mod tests {
    use crate::config::Config;
}

#[cfg(test)]
use crate::config;
"##;
    let got = references("src/paths.rs", "paths", text);
    assert!(got.is_empty(), "{got:?}");
    // …while the same line in production code is one.
    let got = references(
        "src/paths.rs",
        "paths",
        "const C: char = '\"';\nuse crate::config;",
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].line, 2);
    assert_eq!(got[0].to, "config");
}

#[test]
fn test_only_module_files_are_found() {
    let text = "pub mod lexer;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {\n}\n";
    let found = test_module_files(Path::new("src/gates/shell_words/mod.rs"), text);
    assert_eq!(
        found,
        vec![
            PathBuf::from("src/gates/shell_words/tests.rs"),
            PathBuf::from("src/gates/shell_words/tests/mod.rs"),
        ]
    );
    let found = test_module_files(Path::new("src/audit.rs"), "#[cfg(test)]\nmod fixtures;\n");
    assert_eq!(found[0], PathBuf::from("src/audit/fixtures.rs"));
    // The real crate: the shell-words tests are test code.
    assert!(crate_files()
        .iter()
        .all(|(rel, _, _)| rel != "src/gates/shell_words/tests.rs"));
}

#[test]
fn a_module_missing_from_the_table_is_reported() {
    let layers = parse_layers(TABLE);
    let files = [file("src/newcomer.rs", "newcomer", "use crate::paths;\n")];
    let report = check(&layers, &files);
    assert!(report.unplaced.contains("newcomer"));
    assert!(!report.is_clean());
}
