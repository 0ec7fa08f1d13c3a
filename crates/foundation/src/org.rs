//! The one adapter over orgize: every orgize call in the crate lives here.
//!
//! orgize 0.10 is a long-running alpha whose API moves between releases, and
//! its syntax nodes are `!Send` rowan handles. This module parses once and
//! copies what its users need into plain owned structs (with byte offsets
//! for diagnostics), so an orgize upgrade touches this file only and nothing
//! downstream ever holds a syntax node across an `.await`. Its users are the
//! skill parser ([`parse`]), the memex actuator (notes are Org files) and
//! the flight-plan reader ([`first_headline_property`],
//! [`src_blocks_named`]); it sits in the bottom layer so all of them can.

use orgize::ast;
use orgize::rowan::ast::AstNode;
use orgize::{Org, SyntaxKind, SyntaxNode};

/// A parsed Org file, reduced to what skills use.
#[derive(Debug, Clone, Default)]
pub struct OrgFile {
    /// `#+KEY: value` lines before the first headline.
    pub keywords: Vec<Keyword>,
    /// `#+KEY: value` lines inside headline sections (skills only read the
    /// preamble; these are kept so misplaced metadata can be reported).
    pub section_keywords: Vec<Keyword>,
    /// Every headline in document order.
    pub headlines: Vec<Headline>,
    /// Byte offsets of `#+begin_src` lines that orgize did not turn into a
    /// source block (no matching `#+end_src`): it drops them silently.
    pub unterminated_src: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A `#+KEY: value` line.
pub struct Keyword {
    /// As written (case preserved).
    pub key: String,
    /// Trimmed.
    pub value: String,
    pub offset: usize,
    /// Where the trimmed value starts.
    pub value_offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One `:KEY: value` line of a property drawer.
pub struct Property {
    pub key: String,
    pub value: String,
    pub offset: usize,
    pub value_offset: usize,
}

#[derive(Debug, Clone)]
/// A headline with its own section, owned.
pub struct Headline {
    pub level: usize,
    /// Trimmed raw title (markup kept, tags removed).
    pub title: String,
    pub tags: Vec<String>,
    pub offset: usize,
    /// Offset of the title text (for diagnostics about the name).
    pub title_offset: usize,
    /// The `:PROPERTIES:` drawer directly under the headline.
    pub properties: Vec<Property>,
    /// The headline's own section (not its sub-headlines), element by element.
    pub elements: Vec<Element>,
    /// The section's raw text and where it starts.
    pub section_text: String,
    pub section_offset: usize,
    /// Index of the parent headline in [`OrgFile::headlines`].
    pub parent: Option<usize>,
}

#[derive(Debug, Clone)]
/// One element of a headline's section.
pub enum Element {
    Paragraph {
        text: String,
        offset: usize,
    },
    List(Vec<ListItem>),
    Table(Table),
    SrcBlock(SrcBlock),
    /// Anything else (drawers, quotes, comments, keywords...): ignored by
    /// skills, kept so positions stay meaningful.
    Other {
        offset: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One item of a plain or description list.
pub struct ListItem {
    /// The term of a description item (`- term :: text`), trimmed.
    pub tag: Option<String>,
    /// The item's text after the bullet (and tag), trimmed.
    pub content: String,
    pub offset: usize,
    /// Where the trimmed content starts.
    pub content_offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// An Org table, row by row.
pub struct Table {
    pub offset: usize,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A table row.
pub enum Row {
    /// A `|---+---|` separator.
    Rule {
        offset: usize,
    },
    Cells {
        offset: usize,
        cells: Vec<Cell>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A table cell, trimmed.
pub struct Cell {
    pub text: String,
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A `#+begin_src` … `#+end_src` block.
pub struct SrcBlock {
    pub language: Option<String>,
    /// The raw header arguments (`:dir x :results silent`), untokenized.
    pub parameters: Option<String>,
    /// The body with Org's comma escapes removed.
    pub value: String,
    pub offset: usize,
}

fn start(node: &SyntaxNode) -> usize {
    usize::from(node.text_range().start())
}

/// Parse `text` and copy out everything skills need.
pub fn parse(text: &str) -> OrgFile {
    let org = Org::parse(text);
    let doc = org.document();
    let mut file = OrgFile::default();

    if let Some(section) = doc.section() {
        for kw in section.syntax().children().filter_map(ast::Keyword::cast) {
            file.keywords.push(keyword(&kw));
        }
    }
    for h in doc.headlines() {
        collect_headline(&h, None, &mut file);
    }
    file.unterminated_src = unterminated_src(text, doc.syntax());
    file
}

fn keyword(kw: &ast::Keyword) -> Keyword {
    let value_token = kw.value();
    let raw: &str = &value_token;
    let lead = raw.len() - raw.trim_start().len();
    Keyword {
        key: kw.key().to_string(),
        value: raw.trim().to_string(),
        offset: usize::from(kw.start()),
        value_offset: usize::from(value_token.text_range().start()) + lead,
    }
}

fn collect_headline(h: &ast::Headline, parent: Option<usize>, file: &mut OrgFile) {
    let title_node = h
        .syntax()
        .children()
        .find(|n| n.kind() == SyntaxKind::HEADLINE_TITLE);
    let raw_title = h.title_raw();
    let title_offset = title_node
        .as_ref()
        .map(|n| start(n) + (raw_title.len() - raw_title.trim_start().len()))
        .unwrap_or_else(|| usize::from(h.start()));
    let properties = h
        .properties()
        .map(|drawer| {
            drawer
                .node_properties()
                .filter_map(|p| property(p.syntax()))
                .collect()
        })
        .unwrap_or_default();
    let (elements, section_text, section_offset) = match h.section() {
        Some(s) => (
            s.syntax().children().map(|n| element(&n, file)).collect(),
            s.syntax().to_string(),
            start(s.syntax()),
        ),
        None => (Vec::new(), String::new(), usize::from(h.end())),
    };
    let index = file.headlines.len();
    file.headlines.push(Headline {
        level: h.level(),
        title: raw_title.trim().to_string(),
        tags: h.tags().map(|t| t.to_string()).collect(),
        offset: usize::from(h.start()),
        title_offset,
        properties,
        elements,
        section_text,
        section_offset,
        parent,
    });
    for child in h.headlines() {
        collect_headline(&child, Some(index), file);
    }
}

fn property(node: &SyntaxNode) -> Option<Property> {
    let mut texts = node
        .children_with_tokens()
        .filter_map(orgize::rowan::NodeOrToken::into_token)
        .filter(|t| t.kind() == SyntaxKind::TEXT);
    let key = texts.next()?;
    let (value, value_offset) = match texts.next() {
        Some(v) => (
            v.text().trim().to_string(),
            usize::from(v.text_range().start()) + (v.text().len() - v.text().trim_start().len()),
        ),
        None => (String::new(), usize::from(node.text_range().end())),
    };
    Some(Property {
        key: key.text().to_string(),
        value,
        offset: start(node),
        value_offset,
    })
}

fn element(node: &SyntaxNode, file: &mut OrgFile) -> Element {
    let offset = start(node);
    match node.kind() {
        SyntaxKind::PARAGRAPH => Element::Paragraph {
            text: node.to_string().trim_end().to_string(),
            offset,
        },
        SyntaxKind::LIST => Element::List(
            node.children()
                .filter(|n| n.kind() == SyntaxKind::LIST_ITEM)
                .map(|n| list_item(&n))
                .collect(),
        ),
        SyntaxKind::ORG_TABLE => Element::Table(table(node)),
        SyntaxKind::SOURCE_BLOCK => match ast::SourceBlock::cast(node.clone()) {
            Some(b) => Element::SrcBlock(SrcBlock {
                language: b.language().map(|l| l.to_string()),
                parameters: b.parameters().map(|p| p.to_string()),
                value: b.value(),
                offset,
            }),
            None => Element::Other { offset },
        },
        SyntaxKind::KEYWORD => {
            if let Some(kw) = ast::Keyword::cast(node.clone()) {
                file.section_keywords.push(keyword(&kw));
            }
            Element::Other { offset }
        }
        _ => Element::Other { offset },
    }
}

fn list_item(node: &SyntaxNode) -> ListItem {
    let tag = node
        .children()
        .find(|n| n.kind() == SyntaxKind::LIST_ITEM_TAG)
        .map(|n| {
            let s = n.to_string();
            s.strip_suffix("::").unwrap_or(&s).trim().to_string()
        });
    let (content, content_offset) = match node
        .children()
        .find(|n| n.kind() == SyntaxKind::LIST_ITEM_CONTENT)
    {
        Some(c) => {
            let raw = c.to_string();
            let lead = raw.len() - raw.trim_start().len();
            (raw.trim().to_string(), start(&c) + lead)
        }
        None => (String::new(), usize::from(node.text_range().end())),
    };
    ListItem {
        tag,
        content,
        offset: start(node),
        content_offset,
    }
}

fn table(node: &SyntaxNode) -> Table {
    let rows = node
        .children()
        .filter_map(|row| match row.kind() {
            SyntaxKind::ORG_TABLE_RULE_ROW => Some(Row::Rule {
                offset: start(&row),
            }),
            SyntaxKind::ORG_TABLE_STANDARD_ROW => Some(Row::Cells {
                offset: start(&row),
                cells: row_cells(&row),
            }),
            _ => None,
        })
        .collect();
    Table {
        offset: start(node),
        rows,
    }
}

/// Cells of a standard row. orgize emits a cell node only for non-empty
/// cells, so empty cells are reconstructed from the pipes.
fn row_cells(row: &SyntaxNode) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    let mut pending: Option<Cell> = None;
    let mut seen_pipe = false;
    for e in row.children_with_tokens() {
        match e {
            orgize::SyntaxElement::Token(t) if t.kind() == SyntaxKind::PIPE => {
                if seen_pipe {
                    cells.push(pending.take().unwrap_or(Cell {
                        text: String::new(),
                        offset: usize::from(t.text_range().start()),
                    }));
                }
                seen_pipe = true;
            }
            orgize::SyntaxElement::Node(n) if n.kind() == SyntaxKind::ORG_TABLE_CELL => {
                pending = Some(Cell {
                    text: n.to_string().trim().to_string(),
                    offset: start(&n),
                });
            }
            _ => {}
        }
    }
    // A row may omit its closing pipe: `| a | b`.
    if let Some(last) = pending {
        cells.push(last);
    }
    cells
}

/// Find `#+begin_src` lines that are neither the start of a parsed source
/// block nor text inside some other block.
fn unterminated_src(text: &str, root: &SyntaxNode) -> Vec<usize> {
    let mut block_starts = Vec::new();
    let mut contents = Vec::new();
    for n in root.descendants() {
        match n.kind() {
            SyntaxKind::BLOCK_BEGIN => block_starts.push(start(&n)),
            SyntaxKind::BLOCK_CONTENT => {
                let r = n.text_range();
                contents.push(usize::from(r.start())..usize::from(r.end()));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start_matches([' ', '\t']);
        let at = line_start + (line.len() - trimmed.len());
        let is_begin = trimmed
            .get(..11)
            .is_some_and(|p| p.eq_ignore_ascii_case("#+begin_src"))
            && trimmed[11..].chars().next().is_none_or(char::is_whitespace);
        if is_begin
            && !block_starts.iter().any(|&s| s == line_start || s == at)
            && !contents.iter().any(|r| r.contains(&at))
        {
            out.push(at);
        }
        line_start += line.len();
    }
    out
}

/// A source block found by its `#+NAME:`, as byte offsets into the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSrcBlock {
    /// Where the `#+begin_src` line starts.
    pub begin: usize,
    /// The raw body (comma escapes kept): `text[content_start..content_end]`.
    pub content_start: usize,
    pub content_end: usize,
    pub language: Option<String>,
    /// The raw header arguments, trimmed.
    pub parameters: Option<String>,
}

/// Every source block of `text` whose `#+NAME:` is `name` (ASCII case
/// ignored), in document order. An unterminated block is not one: orgize
/// drops it silently.
pub fn src_blocks_named(text: &str, name: &str) -> Vec<NamedSrcBlock> {
    let org = Org::parse(text);
    let blocks = org
        .document()
        .syntax()
        .descendants()
        .filter_map(ast::SourceBlock::cast)
        .filter(|b| {
            b.name()
                .and_then(|k| k.value())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case(name))
        });
    blocks
        .map(|block| NamedSrcBlock {
            begin: block
                .syntax()
                .children()
                .find(|n| n.kind() == SyntaxKind::BLOCK_BEGIN)
                .map(|n| start(&n))
                .unwrap_or_else(|| usize::from(block.start())),
            content_start: usize::from(block.content_start()),
            content_end: usize::from(block.content_end()),
            language: block.language().map(|t| t.trim().to_string()),
            parameters: block.parameters().map(|t| t.trim().to_string()),
        })
        .collect()
}

/// The first headline property `key` in `text`, untrimmed, with the byte
/// offset of its value.
pub fn first_headline_property(text: &str, key: &str) -> Option<(String, usize)> {
    let org = Org::parse(text);
    let token = org
        .document()
        .syntax()
        .descendants()
        .filter_map(ast::Headline::cast)
        .find_map(|h| h.properties().and_then(|p| p.get(key)))?;
    Some((token.to_string(), usize::from(token.start())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "#+SKILL:  demo \n#+PRIORITY: 3\n\n* Tool :tool:x:\n:PROPERTIES:\n:APPROVAL: auto\n:END:\nSome prose.\n\n| name | type |\n|------+------|\n| path |      |\n\n#+begin_src bash :dir x\necho \"$ARG_PATH\"\n,* not a heading\n#+end_src\n- match :: git push | x\n** sub\n#+begin_src sh\necho\n";

    #[test]
    fn extracts_keywords_headlines_tables_blocks_and_lists() {
        let f = parse(SAMPLE);
        assert_eq!(
            f.keywords[0],
            Keyword {
                key: "SKILL".into(),
                value: "demo".into(),
                offset: 0,
                value_offset: 10
            }
        );
        assert_eq!(f.keywords[1].value, "3");
        assert_eq!(f.headlines.len(), 2);
        let h = &f.headlines[0];
        assert_eq!(h.title, "Tool");
        assert_eq!(h.tags, vec!["tool", "x"]);
        assert_eq!(h.properties[0].key, "APPROVAL");
        assert_eq!(h.properties[0].value, "auto");
        assert_eq!(&SAMPLE[h.properties[0].value_offset..][..4], "auto");
        assert_eq!(f.headlines[1].parent, Some(0));
        let kinds: Vec<&str> = h
            .elements
            .iter()
            .map(|e| match e {
                Element::Paragraph { .. } => "p",
                Element::List(_) => "list",
                Element::Table(_) => "table",
                Element::SrcBlock(_) => "src",
                Element::Other { .. } => "other",
            })
            .collect();
        assert_eq!(kinds, vec!["p", "table", "src", "list"]);
        let Element::Table(t) = &h.elements[1] else {
            panic!()
        };
        assert_eq!(t.rows.len(), 3);
        let Row::Cells { cells, .. } = &t.rows[2] else {
            panic!()
        };
        assert_eq!(
            cells.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
            vec!["path", ""]
        );
        let Element::SrcBlock(b) = &h.elements[2] else {
            panic!()
        };
        assert_eq!(b.language.as_deref(), Some("bash"));
        assert_eq!(b.parameters.as_deref(), Some(":dir x"));
        assert_eq!(b.value, "echo \"$ARG_PATH\"\n* not a heading\n");
        let Element::List(items) = &h.elements[3] else {
            panic!()
        };
        assert_eq!(items[0].tag.as_deref(), Some("match"));
        assert_eq!(items[0].content, "git push | x");
    }

    #[test]
    fn an_unterminated_src_block_is_reported() {
        let f = parse(SAMPLE);
        let at = SAMPLE.rfind("#+begin_src sh").unwrap();
        assert_eq!(f.unterminated_src, vec![at]);
        assert!(parse("#+begin_src sh\necho\n#+end_src\n")
            .unterminated_src
            .is_empty());
        // Inside an example block it is just text.
        assert!(parse("#+begin_example\n#+begin_src sh\n#+end_example\n")
            .unterminated_src
            .is_empty());
    }
}
