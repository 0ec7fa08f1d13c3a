//! The observed effect of an action: which files it created, modified and
//! deleted, with sizes, as read from two snapshots of the working tree — and
//! the ways it is shown (a one-line summary, the `raw_output` record, ACP
//! `diff` content).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::scan::FileState;
use super::store::{Entry, RawChange, Snapshot, Store, StoreError};
use crate::protocol::acp;

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the working directory, `/`-separated.
    pub path: String,
    pub kind: ChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Entry>,
}

/// Every change one action made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedEffect {
    pub changes: Vec<FileChange>,
    /// Untracked files over the size cap that were not recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Parts of the project's own `.git` (HEAD, objects, refs) the action
    /// removed: checkpoints do not cover `.git` and cannot bring them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_damage: Vec<String>,
    /// Ignored-but-precious files (`[checkpoints] precious`) the action
    /// modified or deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precious: Vec<String>,
    /// The project's git refs (branches, tags, the stash, `HEAD`) the
    /// action moved, made or deleted: applied with `.git`, moved back by
    /// undo (the objects stay).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<RefChange>,
    /// Permission bits the action set that were not applied (setuid,
    /// setgid, sticky, file capabilities, newly added group/world write
    /// bits), one line each: said in the result and in `history`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripped: Vec<String>,
    /// Directories the action made (`+ a/b/c/` in `history`) or removed,
    /// parents first; undo removes the ones it made once they are empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<DirChange>,
}

/// A directory the action made, removed or re-moded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirChange {
    pub path: String,
    pub kind: ChangeKind,
    /// Permission bits before (removed, re-moded) and after (made,
    /// re-moded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_perm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_perm: Option<u32>,
}

impl DirChange {
    /// `+ a/b/c/`, `− build/`, `~ bin/  mode 0755 → 0700`.
    pub fn line(&self) -> String {
        match self.kind {
            ChangeKind::Created => format!("+ {}/", self.path),
            ChangeKind::Deleted => format!("− {}/", self.path),
            ChangeKind::Modified => format!(
                "~ {}/  mode {} → {}",
                self.path,
                perm_text(self.old_perm),
                perm_text(self.new_perm)
            ),
        }
    }
}

/// A ref the action changed: `None` is "not there".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefChange {
    /// The full name (`refs/heads/main`, `HEAD`).
    pub name: String,
    /// A commit id, or `ref: refs/heads/x` for a symbolic ref.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    /// The subject of the new commit, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The remote-tracking ref that already contains the old commit when
    /// the new one does not: commits others may have, rewritten or dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrites_pushed: Option<String>,
}

impl RefChange {
    /// The name as a person reads it: `main`, `tag v1`, `stash`, `HEAD`.
    pub fn short_name(&self) -> String {
        short_ref(&self.name)
    }

    /// Deleted by the action.
    pub fn deleted(&self) -> bool {
        self.old.is_some() && self.new.is_none()
    }

    /// `ref main: a1b2c3d → d4e5f6a "subject"`.
    pub fn line(&self) -> String {
        let side = |v: &Option<String>, none: &str| match v {
            None => none.to_string(),
            Some(v) => match v.strip_prefix("ref: ") {
                Some(target) => short_ref(target.trim()),
                None => v.chars().take(7).collect(),
            },
        };
        let mut line = format!(
            "ref {}: {} → {}",
            self.short_name(),
            side(&self.old, "(new)"),
            side(&self.new, "(deleted)")
        );
        if let Some(s) = &self.subject {
            line.push_str(&format!(" {s:?}"));
        }
        if let Some(remote) = &self.rewrites_pushed {
            line.push_str(&format!(
                " (drops commits {} already has)",
                short_ref(remote)
            ));
        }
        line
    }
}

fn short_ref(name: &str) -> String {
    if let Some(b) = name.strip_prefix("refs/heads/") {
        b.to_string()
    } else if let Some(t) = name.strip_prefix("refs/tags/") {
        format!("tag {t}")
    } else if let Some(r) = name.strip_prefix("refs/") {
        r.to_string()
    } else {
        name.to_string()
    }
}

/// Permission bits as `0755` (`04755` with special bits), or `none`.
pub fn perm_text(perm: Option<u32>) -> String {
    match perm {
        Some(p) if p & 0o7000 != 0 => format!("{p:05o}"),
        Some(p) => format!("{p:04o}"),
        None => "none".into(),
    }
}

impl FileChange {
    /// The permission change, when the bits differ: `mode 0644 → 0755`.
    pub fn mode_change(&self) -> Option<String> {
        let (o, n) = (self.old.as_ref()?, self.new.as_ref()?);
        let (op, np) = (o.perm?, n.perm?);
        (op != np).then(|| format!("mode {} → {}", perm_text(Some(op)), perm_text(Some(np))))
    }
}

/// Which of the project's vital `.git` entries exist (a cheap fingerprint
/// taken before and after each action).
pub fn git_vitals(cwd: &Path) -> Vec<String> {
    ["HEAD", "objects", "refs"]
        .iter()
        .filter(|name| cwd.join(".git").join(name).exists())
        .map(|name| format!(".git/{name}"))
        .collect()
}

impl ObservedEffect {
    /// The effect between two snapshots, from their recorded files alone
    /// (no git process). Paths in the order git's `diff-tree` gives them
    /// for the same change (sorted by path).
    pub fn between_snapshots(before: &Snapshot, after: &Snapshot) -> Self {
        let mut changes = Vec::new();
        let mut precious = Vec::new();
        if before.tree != after.tree {
            let entry = |f: &FileState| Entry {
                mode: f.mode_str(),
                oid: f.oid_hex(),
                perm: (f.perm != 0).then_some(f.perm),
            };
            // A merge of the two sorted maps: O(n), no lookups.
            use std::cmp::Ordering;
            let mut a = before.files.iter().peekable();
            let mut b = after.files.iter().peekable();
            loop {
                let order = match (a.peek(), b.peek()) {
                    (None, None) => break,
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
                };
                let (path, old, new) = match order {
                    Ordering::Less => match a.next() {
                        Some((p, o)) => (p, Some(o), None),
                        None => break,
                    },
                    Ordering::Greater => match b.next() {
                        Some((p, n)) => (p, None, Some(n)),
                        None => break,
                    },
                    Ordering::Equal => match (a.next(), b.next()) {
                        (Some((p, o)), Some((_, n))) => (p, Some(o), Some(n)),
                        _ => break,
                    },
                };
                let kind = match (old, new) {
                    (Some(o), Some(n)) if o.mode == n.mode && o.oid == n.oid => continue,
                    (None, None) => continue,
                    (None, Some(_)) => ChangeKind::Created,
                    (Some(_), None) => ChangeKind::Deleted,
                    (Some(_), Some(_)) => ChangeKind::Modified,
                };
                if kind != ChangeKind::Created && old.is_some_and(|o| o.precious) {
                    precious.push(path.clone());
                }
                changes.push(FileChange {
                    path: path.clone(),
                    kind,
                    old_size: old.map(|f| f.size),
                    new_size: new.map(|f| f.size),
                    old: old.map(entry),
                    new: new.map(entry),
                });
            }
        }
        ObservedEffect {
            changes,
            precious,
            ..Default::default()
        }
    }

    /// Read the effect between two trees.
    pub fn between(store: &Store, before: &str, after: &str) -> Result<Self, StoreError> {
        let raw = store.diff(before, after)?;
        let oids: Vec<&str> = raw
            .iter()
            .flat_map(|c| [c.old.as_ref(), c.new.as_ref()])
            .flatten()
            .filter(|e| e.mode != "160000")
            .map(|e| e.oid.as_str())
            .collect();
        let sizes = store.sizes(&oids)?;
        let size = |e: &Option<Entry>| e.as_ref().map(|e| sizes.get(&e.oid).copied().unwrap_or(0));
        let changes = raw
            .into_iter()
            .map(|RawChange { path, old, new }| FileChange {
                kind: match (&old, &new) {
                    (None, _) => ChangeKind::Created,
                    (_, None) => ChangeKind::Deleted,
                    _ => ChangeKind::Modified,
                },
                old_size: size(&old),
                new_size: size(&new),
                path,
                old,
                new,
            })
            .collect();
        Ok(ObservedEffect {
            changes,
            ..Default::default()
        })
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.git_damage.is_empty()
            && self.refs.is_empty()
            && self.stripped.is_empty()
            && self.dirs.is_empty()
    }

    pub fn paths(&self, kind: ChangeKind) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.path.clone())
            .collect()
    }

    pub fn bytes_added(&self) -> u64 {
        self.changes
            .iter()
            .map(|c| {
                c.new_size
                    .unwrap_or(0)
                    .saturating_sub(c.old_size.unwrap_or(0))
            })
            .sum()
    }

    pub fn bytes_removed(&self) -> u64 {
        self.changes
            .iter()
            .map(|c| {
                c.old_size
                    .unwrap_or(0)
                    .saturating_sub(c.new_size.unwrap_or(0))
            })
            .sum()
    }

    /// "changed 3 files: +1 ~0 −2 (checkpoint c12)", then the refs moved,
    /// the directories made or removed, the mode changes and the bits not
    /// applied.
    pub fn summary(&self, checkpoint: &str) -> String {
        let n = self.changes.len();
        let count = |k| self.changes.iter().filter(|c| c.kind == k).count();
        let mut s = format!(
            "changed {n} file{}: +{} ~{} −{}, {} bytes added, {} removed (checkpoint {checkpoint})",
            if n == 1 { "" } else { "s" },
            count(ChangeKind::Created),
            count(ChangeKind::Modified),
            count(ChangeKind::Deleted),
            self.bytes_added(),
            self.bytes_removed(),
        );
        if !self.refs.is_empty() {
            let lines: Vec<String> = self.refs.iter().take(10).map(RefChange::line).collect();
            s.push_str(&format!("; {}", lines.join("; ")));
        }
        if !self.dirs.is_empty() {
            let made = self
                .dirs
                .iter()
                .filter(|d| d.kind == ChangeKind::Created)
                .count();
            let gone = self
                .dirs
                .iter()
                .filter(|d| d.kind == ChangeKind::Deleted)
                .count();
            let moded = self.dirs.len() - made - gone;
            s.push_str(&format!(
                "; folders: {made} made, {gone} removed, {moded} re-moded"
            ));
        }
        let modes: Vec<String> = self
            .changes
            .iter()
            .filter_map(|c| Some(format!("{} {}", c.path, c.mode_change()?)))
            .take(10)
            .collect();
        if !modes.is_empty() {
            s.push_str(&format!("; {}", modes.join(", ")));
        }
        if !self.stripped.is_empty() {
            s.push_str(&format!("; not applied: {}", self.stripped.join("; ")));
        }
        s
    }

    /// The `effect` object of a tool call's `raw_output` (the chat contract).
    pub fn wire(&self, checkpoint: &str) -> Value {
        json!({
            "checkpoint": checkpoint,
            "created": self.paths(ChangeKind::Created),
            "modified": self.paths(ChangeKind::Modified),
            "deleted": self.paths(ChangeKind::Deleted),
            "bytes_added": self.bytes_added(),
            "bytes_removed": self.bytes_removed(),
            "skipped": self.skipped,
            "refs": self.refs.iter().map(RefChange::line).collect::<Vec<_>>(),
            "dirs": self.dirs.iter().map(DirChange::line).collect::<Vec<_>>(),
            "modes": self
                .changes
                .iter()
                .filter_map(|c| Some(format!("{}: {}", c.path, c.mode_change()?)))
                .collect::<Vec<_>>(),
            "not_applied": self.stripped,
        })
    }

    /// ACP content for the changes: a `diff` item per text file (at most
    /// `max_files`, each side at most `max_bytes`), and one text line naming
    /// what could not be shown as a diff (binaries, large files, the rest).
    pub fn acp_content(
        &self,
        store: &Store,
        cwd: &Path,
        max_files: usize,
        max_bytes: u64,
    ) -> Vec<acp::ToolCallContent> {
        let small = |s: Option<u64>| s.unwrap_or(0) <= max_bytes;
        let shown: Vec<&FileChange> = self
            .changes
            .iter()
            .filter(|c| small(c.old_size) && small(c.new_size))
            .filter(|c| {
                [&c.old, &c.new]
                    .iter()
                    .all(|e| e.as_ref().is_none_or(|e| e.mode.starts_with("100")))
            })
            .take(max_files)
            .collect();
        let oids: Vec<&str> = shown
            .iter()
            .flat_map(|c| [c.old.as_ref(), c.new.as_ref()])
            .flatten()
            .map(|e| e.oid.as_str())
            .collect();
        let blobs = store.blobs(&oids).unwrap_or_default();
        let text_of = |e: &Option<Entry>| -> Option<Option<String>> {
            match e {
                None => Some(None),
                Some(e) => {
                    let bytes = blobs.get(&e.oid)?;
                    if bytes.contains(&0) {
                        return None;
                    }
                    String::from_utf8(bytes.clone()).ok().map(Some)
                }
            }
        };
        let mut content = Vec::new();
        let mut left_out = Vec::new();
        for c in &self.changes {
            let diff = shown
                .iter()
                .any(|s| s.path == c.path)
                .then(|| (text_of(&c.old), text_of(&c.new)));
            match diff {
                Some((Some(old), Some(new))) => {
                    let d =
                        acp::Diff::new(cwd.join(&c.path), new.unwrap_or_default()).old_text(old);
                    content.push(acp::ToolCallContent::Diff(d));
                }
                _ => left_out.push(c.path.clone()),
            }
        }
        let mut extra: Vec<String> = self.refs.iter().map(RefChange::line).collect();
        extra.extend(
            self.changes
                .iter()
                .filter_map(|c| Some(format!("{}: {}", c.path, c.mode_change()?))),
        );
        extra.extend(self.dirs.iter().map(DirChange::line));
        extra.extend(self.stripped.iter().map(|s| format!("not applied: {s}")));
        if !extra.is_empty() {
            let more = extra.len().saturating_sub(40);
            extra.truncate(40);
            if more > 0 {
                extra.push(format!("… {more} more"));
            }
            content.push(acp::ToolCallContent::from(extra.join("\n")));
        }
        if !left_out.is_empty() {
            let more = left_out.len();
            let names: Vec<String> = left_out.into_iter().take(20).collect();
            content.push(acp::ToolCallContent::from(format!(
                "not shown as a diff ({more} file(s): binary, large or over the limit): {}{}",
                names.join(", "),
                if more > 20 { ", …" } else { "" }
            )));
        }
        content
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, kind: ChangeKind, old: Option<u64>, new: Option<u64>) -> FileChange {
        FileChange {
            path: path.into(),
            kind,
            old_size: old,
            new_size: new,
            old: None,
            new: None,
        }
    }

    #[test]
    fn summary_and_wire_count_bytes_both_ways() {
        let e = ObservedEffect {
            changes: vec![
                change("a", ChangeKind::Created, None, Some(10)),
                change("b", ChangeKind::Modified, Some(5), Some(0)),
                change("c", ChangeKind::Deleted, Some(7), None),
            ],
            ..Default::default()
        };
        assert_eq!(
            e.summary("c3"),
            "changed 3 files: +1 ~1 −1, 10 bytes added, 12 removed (checkpoint c3)"
        );
        let w = e.wire("c3");
        assert_eq!(w["deleted"], json!(["c"]));
        assert_eq!(w["bytes_removed"], 12);
    }
}
