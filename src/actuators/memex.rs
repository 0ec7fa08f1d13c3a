//! The memex actuator: the agent's long-term memory as a directory of Org
//! notes, one file per note.
//!
//! A note is plain Org a person can read, edit, grep or delete: a heading
//! carrying the note's tags, a `:CREATED:` timestamp property, and the text.
//! `remember` writes one; `recall` scores every note by the query's words
//! (title words count most, then tags, then the text) and returns the best.
//! Notes are read through the skills' Org adapter, the crate's only orgize
//! user.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::action::{Action, Effect};
use crate::org;

use super::{ActContext, ActError, ActOutput, Actuator};

/// Most notes `recall` returns.
const MAX_RESULTS: usize = 5;
/// Characters of a note's text shown in a recall result.
const EXCERPT_CHARS: usize = 240;

/// Performs `remember` and `recall` operations (target `memex`).
pub struct MemexActuator {
    dir: PathBuf,
}

impl MemexActuator {
    /// A memex kept in `dir` (created on the first note).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MemexActuator { dir: dir.into() }
    }

    /// Where the notes live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[async_trait::async_trait]
impl Actuator for MemexActuator {
    fn target(&self) -> &str {
        "memex"
    }

    async fn execute(&self, action: &Action, _ctx: &ActContext) -> Result<ActOutput, ActError> {
        let Effect::Op { op, args } = &action.effect else {
            return Err(ActError::Unsupported {
                target: "memex".into(),
                effect: "anything but `remember` and `recall` operations".into(),
            });
        };
        let dir = self.dir.clone();
        let args = args.clone();
        let op = op.clone();
        let job = move || match op.as_str() {
            "remember" => Ok(remember(&dir, &args, SystemTime::now())),
            "recall" => Ok(recall(&dir, &args)),
            other => Err(ActError::Unsupported {
                target: "memex".into(),
                effect: format!("operation `{other}`"),
            }),
        };
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| ActError::Unavailable(format!("memex task failed: {e}")))?
    }
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// Tags as Org allows them (letters, digits, `_@#%`), lower-cased. Accepts
/// an array or a string of words separated by spaces, commas or colons.
fn tags_arg(args: &Value) -> Vec<String> {
    let raw: Vec<String> = match args.get("tags") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        Some(Value::String(s)) => s.split([' ', ',', ':']).map(String::from).collect(),
        _ => Vec::new(),
    };
    let mut tags: Vec<String> = Vec::new();
    for t in raw {
        let clean: String = t
            .trim()
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_alphanumeric() || "_@#%".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if !clean.is_empty() && !tags.contains(&clean) {
            tags.push(clean);
        }
    }
    tags
}

/// Write one note; refuses to overwrite an existing file.
pub fn remember(dir: &Path, args: &Value, now: SystemTime) -> ActOutput {
    let (Some(title), Some(text)) = (string_arg(args, "title"), string_arg(args, "text")) else {
        return ActOutput::error("remember needs a `title` and a `text`");
    };
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return ActOutput::error("remember needs a non-empty `title`");
    }
    let tags = tags_arg(args);
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let t = Civil::from_unix(secs);
    if let Err(e) = std::fs::create_dir_all(dir) {
        return ActOutput::error(format!("cannot create {}: {e}", dir.display()));
    }
    let mut note = format!("#+TITLE: {title}\n\n* {title}");
    if !tags.is_empty() {
        let _ = write!(note, " :{}:", tags.join(":"));
    }
    let _ = write!(
        note,
        "\n:PROPERTIES:\n:CREATED:  [{:04}-{:02}-{:02} {} {:02}:{:02}]\n:END:\n",
        t.year, t.month, t.day, t.weekday, t.hour, t.minute
    );
    for line in text.trim_end().lines() {
        // A line starting with `*` would become a heading and split the note.
        if line.starts_with('*') {
            note.push(' ');
        }
        note.push_str(line);
        note.push('\n');
    }
    let stem = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}-{}",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        slug(&title)
    );
    for n in 1..100 {
        let name = if n == 1 {
            format!("{stem}.org")
        } else {
            format!("{stem}-{n}.org")
        };
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match file {
            Ok(mut f) => {
                use std::io::Write;
                return match f.write_all(note.as_bytes()) {
                    Ok(()) => {
                        ActOutput::ok(format!("remembered \"{title}\" in {}", path.display()))
                    }
                    Err(e) => ActOutput::error(format!("cannot write {}: {e}", path.display())),
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return ActOutput::error(format!("cannot write {}: {e}", path.display())),
        }
    }
    ActOutput::error(format!("too many notes named {stem} in {}", dir.display()))
}

fn slug(title: &str) -> String {
    let mut s = String::new();
    for c in title.to_lowercase().chars() {
        if c.is_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
        if s.chars().count() >= 48 {
            break;
        }
    }
    let s = s.trim_end_matches('-').to_string();
    if s.is_empty() {
        "note".into()
    } else {
        s
    }
}

/// A note as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub path: PathBuf,
    pub title: String,
    pub tags: Vec<String>,
    pub text: String,
}

fn read_note(path: &Path) -> Option<Note> {
    let text = std::fs::read_to_string(path).ok()?;
    let file = org::parse(&text);
    let h = file.headlines.first()?;
    Some(Note {
        path: path.to_path_buf(),
        title: h.title.clone(),
        tags: h.tags.iter().map(|t| t.to_lowercase()).collect(),
        text: h.section_text.trim().to_string(),
    })
}

fn words(s: &str) -> Vec<String> {
    s.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// Score of a note for the query words: a title word 3, a tag 2, each
/// occurrence in the text 1 (at most 5 per word).
fn score(note: &Note, query: &[String]) -> usize {
    let title = words(&note.title);
    let text = words(&note.text);
    query
        .iter()
        .map(|q| {
            let in_title = if title.contains(q) { 3 } else { 0 };
            let in_tags = if note.tags.contains(q) { 2 } else { 0 };
            let in_text = text.iter().filter(|w| *w == q).count().min(5);
            in_title + in_tags + in_text
        })
        .sum()
}

/// Search every note; best first, newest first among equals.
pub fn recall(dir: &Path, args: &Value) -> ActOutput {
    let query_text = string_arg(args, "query").unwrap_or("");
    let query = words(query_text);
    let want_tags = tags_arg(args);
    if query.is_empty() && want_tags.is_empty() {
        return ActOutput::error("recall needs a `query` (words to look for) or `tags`");
    }
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "org"))
            .collect(),
        Err(_) => Vec::new(),
    };
    // File names start with the creation time: reverse order is newest first.
    files.sort();
    files.reverse();
    let mut hits: Vec<(usize, Note)> = files
        .iter()
        .filter_map(|p| read_note(p))
        .filter(|n| want_tags.iter().all(|t| n.tags.contains(t)))
        .filter_map(|n| {
            let s = if query.is_empty() {
                1
            } else {
                score(&n, &query)
            };
            (s > 0).then_some((s, n))
        })
        .collect();
    // Stable sort keeps newest first among equal scores.
    hits.sort_by_key(|h| std::cmp::Reverse(h.0));
    let total = hits.len();
    if total == 0 {
        return ActOutput::ok(format!("no notes match \"{query_text}\""));
    }
    let mut out = format!(
        "{total} note{} match \"{query_text}\"{}:\n",
        if total == 1 { "" } else { "s" },
        if total > MAX_RESULTS {
            format!(" (showing the best {MAX_RESULTS})")
        } else {
            String::new()
        }
    );
    for (i, (_, note)) in hits.iter().take(MAX_RESULTS).enumerate() {
        let tags = if note.tags.is_empty() {
            String::new()
        } else {
            format!("  :{}:", note.tags.join(":"))
        };
        let _ = write!(
            out,
            "\n{}. {}{}\n   {}\n   {}\n",
            i + 1,
            note.title,
            tags,
            note.path.display(),
            excerpt(&note.text)
        );
    }
    ActOutput::ok(out)
}

fn excerpt(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= EXCERPT_CHARS {
        flat
    } else {
        let cut: String = flat.chars().take(EXCERPT_CHARS).collect();
        format!("{cut}…")
    }
}

/// A UTC civil time, enough for file names and Org timestamps without a
/// date library.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    weekday: &'static str,
}

impl Civil {
    fn from_unix(secs: u64) -> Civil {
        let at = crate::util::time::utc(UNIX_EPOCH + std::time::Duration::from_secs(secs));
        const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        Civil {
            year: i64::from(at.year()),
            month: u32::from(u8::from(at.month())),
            day: u32::from(at.day()),
            hour: u64::from(at.hour()),
            minute: u64::from(at.minute()),
            second: u64::from(at.second()),
            weekday: WEEKDAYS[usize::from(at.weekday().number_days_from_monday())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Approval;
    use serde_json::json;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// 2026-11-22 20:01:05 UTC, a Sunday.
    fn at() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_795_377_665)
    }

    #[test]
    fn civil_time_is_right() {
        let c = Civil::from_unix(1_795_377_665);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second, c.weekday),
            (2026, 11, 22, 20, 1, 5, "Sun")
        );
        let epoch = Civil::from_unix(0);
        assert_eq!(
            (epoch.year, epoch.month, epoch.day, epoch.weekday),
            (1970, 1, 1, "Thu")
        );
        let leap = Civil::from_unix(951_782_400); // 2000-02-29
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
    }

    #[test]
    fn remember_writes_one_org_note_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let args = json!({
            "title": "Coffee  preferences",
            "text": "Black, no sugar.\n* not a heading",
            "tags": ["Prefs", "food", "prefs"]
        });
        let out = remember(dir.path(), &args, at());
        let path = dir.path().join("20261122T200105-coffee-preferences.org");
        assert_eq!(
            out,
            ActOutput::ok(format!(
                "remembered \"Coffee preferences\" in {}",
                path.display()
            ))
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#+TITLE: Coffee preferences\n\n* Coffee preferences :prefs:food:\n:PROPERTIES:\n:CREATED:  [2026-11-22 Sun 20:01]\n:END:\nBlack, no sugar.\n * not a heading\n"
        );
        // Same second, same title: a second file, never an overwrite.
        remember(dir.path(), &args, at());
        assert!(dir
            .path()
            .join("20261122T200105-coffee-preferences-2.org")
            .exists());
        assert!(remember(dir.path(), &json!({ "title": "x" }), at()).is_error);
    }

    #[test]
    fn recall_ranks_by_title_tags_and_text_and_filters_by_tags() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let t = |s: u64| at() + Duration::from_secs(s);
        remember(
            d,
            &json!({ "title": "Coffee", "text": "Black, no sugar.", "tags": ["prefs"] }),
            t(0),
        );
        remember(
            d,
            &json!({ "title": "Tea", "text": "Drinks coffee only before noon.", "tags": ["prefs", "health"] }),
            t(1),
        );
        remember(
            d,
            &json!({ "title": "Deploy", "text": "Use the staging cluster first." }),
            t(2),
        );

        let out = recall(d, &json!({ "query": "coffee" }));
        assert!(!out.is_error);
        let coffee = d.join("20261122T200105-coffee.org");
        let tea = d.join("20261122T200106-tea.org");
        assert_eq!(
            out.text,
            format!(
                "2 notes match \"coffee\":\n\n1. Coffee  :prefs:\n   {}\n   Black, no sugar.\n\n2. Tea  :prefs:health:\n   {}\n   Drinks coffee only before noon.\n",
                coffee.display(),
                tea.display()
            )
        );
        let out = recall(d, &json!({ "query": "coffee", "tags": ["health"] }));
        assert!(
            out.text.starts_with("1 note match \"coffee\":\n\n1. Tea"),
            "{}",
            out.text
        );
        let out = recall(d, &json!({ "query": "kubernetes" }));
        assert_eq!(out, ActOutput::ok("no notes match \"kubernetes\""));
        assert!(recall(d, &json!({})).is_error);
    }

    #[tokio::test]
    async fn the_actuator_serves_memex_operations_only() {
        let dir = tempfile::tempdir().unwrap();
        let memex = MemexActuator::new(dir.path());
        let ctx = ActContext {
            session_id: "s".into(),
            cwd: dir.path().to_path_buf(),
            cancel: CancellationToken::new(),
            say: None,
            approved_by: None,
            read_only: false,
            limits: Default::default(),
            progress: None,
        };
        let action = |effect| Action {
            tool: "remember".into(),
            target: "memex".into(),
            arguments: json!({}),
            effect,
            approval: Approval::Auto,
            timeout_secs: None,
        };
        let out = memex
            .execute(
                &action(Effect::Op {
                    op: "remember".into(),
                    args: json!({ "title": "Hello", "text": "World" }),
                }),
                &ctx,
            )
            .await
            .unwrap();
        assert!(out.text.starts_with("remembered \"Hello\""), "{}", out.text);
        let out = memex
            .execute(
                &action(Effect::Op {
                    op: "recall".into(),
                    args: json!({ "query": "world" }),
                }),
                &ctx,
            )
            .await
            .unwrap();
        assert!(
            out.text.starts_with("1 note match \"world\""),
            "{}",
            out.text
        );
        let err = memex
            .execute(
                &action(Effect::Op {
                    op: "forget".into(),
                    args: json!({}),
                }),
                &ctx,
            )
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ActError::Unsupported {
                target: "memex".into(),
                effect: "operation `forget`".into()
            }
        );
    }
}
