//! Git refs as part of a changeset (issue 37): a commit, branch, tag,
//! stash, checkout, merge or rebase made inside the sandbox writes into the
//! overlay of the project's `.git`; the refs it moved are read by comparing
//! the project's refs (the lower layer) with the overlay's view of them
//! (the upper layer over the lower), so `history` can show
//! `ref main: a1b2c3d → d4e5f6a "subject"` and undo can move them back.
//! Objects are never removed: a ref moved back leaves its commits readable.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::effect::RefChange;

/// At most this many refs are read from one side (a repository with more
/// loose refs than this is read up to it; the rest are not compared).
const MAX_REFS: usize = 100_000;

/// Whether a changed `.git` path can move a ref.
pub fn touches_refs(path: &str) -> bool {
    path == ".git/HEAD" || path == ".git/packed-refs" || path.starts_with(".git/refs/")
}

/// The overlay's view of the project's `.git`: the upper layer over the
/// lower (a whiteout hides a lower file; an opaque directory hides the
/// lower directory).
struct View {
    lower: PathBuf,
    upper: Option<PathBuf>,
}

fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

fn opaque(path: &Path) -> bool {
    let mut buf = [0u8; 4];
    matches!(rustix::fs::lgetxattr(path, "user.overlay.opaque", &mut buf), Ok(1) if buf[0] == b'y')
}

impl View {
    /// `rel` beneath `.git`: where its current bytes are, if anywhere.
    fn locate(&self, rel: &str) -> Option<PathBuf> {
        if let Some(upper) = &self.upper {
            let at = upper.join(rel);
            if let Ok(meta) = std::fs::symlink_metadata(&at) {
                if is_whiteout(&meta) {
                    return None;
                }
                if meta.is_file() {
                    return Some(at);
                }
            }
            // An opaque directory above hides the lower file.
            let mut dir = Path::new(rel).parent();
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
                let up = upper.join(d);
                if let Ok(meta) = std::fs::symlink_metadata(&up) {
                    if is_whiteout(&meta) || (meta.is_dir() && opaque(&up)) {
                        return None;
                    }
                }
                dir = d.parent();
            }
        }
        let low = self.lower.join(rel);
        low.is_file().then_some(low)
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.locate(rel)?).ok()
    }

    /// Every loose ref name (`refs/…`) in the view.
    fn loose(&self) -> Vec<String> {
        let mut names = std::collections::BTreeSet::new();
        let mut roots = vec![self.lower.clone()];
        roots.extend(self.upper.clone());
        for root in roots {
            let mut stack = vec![String::from("refs")];
            while let Some(rel) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
                    continue;
                };
                for e in entries.flatten() {
                    let Some(name) = e.file_name().to_str().map(str::to_string) else {
                        continue;
                    };
                    let child = format!("{rel}/{name}");
                    match e.file_type() {
                        Ok(t) if t.is_dir() => stack.push(child),
                        Ok(t) if t.is_file() => {
                            names.insert(child);
                        }
                        _ => {}
                    }
                    if names.len() >= MAX_REFS {
                        break;
                    }
                }
            }
        }
        names
            .into_iter()
            .filter(|n| self.locate(n).is_some())
            .collect()
    }

    /// Every ref (loose over packed) and `HEAD`, with its value: a commit
    /// id, or `ref: refs/heads/x` for a symbolic ref.
    fn refs(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(packed) = self.read("packed-refs") {
            for line in packed.lines() {
                if line.starts_with('#') || line.starts_with('^') {
                    continue;
                }
                if let Some((oid, name)) = line.split_once(' ') {
                    out.insert(name.trim().to_string(), oid.trim().to_string());
                }
            }
        }
        for name in self.loose() {
            if let Some(v) = self.read(&name) {
                out.insert(name, v.trim().to_string());
            }
        }
        if let Some(head) = self.read("HEAD") {
            out.insert("HEAD".into(), head.trim().to_string());
        }
        out
    }
}

/// The refs the action changed: the project's `.git` (`root/.git`) against
/// the overlay's upper layer `upper` (its `.git` inside).
pub fn changed(root: &Path, upper: &Path) -> Vec<RefChange> {
    let git = root.join(".git");
    if !git.is_dir() {
        return vec![];
    }
    let before = View {
        lower: git.clone(),
        upper: None,
    }
    .refs();
    let after_view = View {
        lower: git,
        upper: Some(upper.join(".git")),
    };
    let after = after_view.refs();
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let objects = upper.join(".git/objects");
    let mut out = Vec::new();
    for name in names {
        let (old, new) = (before.get(name), after.get(name));
        if old == new {
            continue;
        }
        let subject = new
            .filter(|v| !v.starts_with("ref: "))
            .and_then(|oid| subject(root, &objects, oid));
        let mut change = RefChange {
            name: name.clone(),
            old: old.cloned(),
            new: new.cloned(),
            subject,
            rewrites_pushed: None,
        };
        if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
            change.rewrites_pushed = rewrites_pushed(root, &objects, &before, &change);
        }
        out.push(change);
    }
    out
}

/// `git` on the project's repository, its config's programs off (no
/// hooks, no fsmonitor), with the overlay's new objects readable too.
fn git(root: &Path, objects: Option<&Path>) -> Command {
    let mut cmd = Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_DIR", root.join(".git"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(["-c", "core.fsmonitor=false"])
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    if let Some(o) = objects.filter(|o| o.is_dir()) {
        cmd.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", o);
    }
    cmd
}

fn is_oid(v: &str) -> bool {
    v.len() >= 40 && v.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The subject line of commit `oid`, read from the overlay's loose objects
/// or the project's repository.
fn subject(root: &Path, objects: &Path, oid: &str) -> Option<String> {
    if !is_oid(oid) {
        return None;
    }
    let out = git(root, Some(objects))
        .args(["cat-file", "commit", oid])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (_, message) = text.split_once("\n\n")?;
    let line = message.lines().next()?.trim();
    Some(line.chars().take(72).collect())
}

fn is_ancestor(root: &Path, objects: &Path, a: &str, b: &str) -> bool {
    git(root, Some(objects))
        .args(["merge-base", "--is-ancestor", a, b])
        .status()
        .is_ok_and(|s| s.success())
}

/// The remote-tracking ref that contains the ref's old commit when the new
/// value does not (a force-push-shaped rewrite, or a deletion, of commits
/// others may have).
fn rewrites_pushed(
    root: &Path,
    objects: &Path,
    before: &BTreeMap<String, String>,
    change: &RefChange,
) -> Option<String> {
    let old = change.old.as_deref().filter(|o| is_oid(o))?;
    let remotes: Vec<(&String, &String)> = before
        .iter()
        .filter(|(name, v)| name.starts_with("refs/remotes/") && is_oid(v))
        .collect();
    if remotes.is_empty() {
        return None; // nothing was pushed anywhere this clone knows of
    }
    if let Some(new) = change.new.as_deref().filter(|n| is_oid(n)) {
        if is_ancestor(root, objects, old, new) {
            return None; // a fast-forward: nothing dropped
        }
    }
    remotes
        .into_iter()
        .find(|(_, remote)| is_ancestor(root, objects, old, remote))
        .map(|(name, _)| name.clone())
}

/// Move the refs of `changes` back (undo): each ref still at its new
/// value goes back to its old one (a ref the action made is deleted, one
/// it deleted made again), `HEAD` last. Hooks never run. Returns what was
/// done and what was left, one line each.
pub fn move_back(root: &Path, changes: &[RefChange]) -> (Vec<String>, Vec<String>) {
    let mut moved = Vec::new();
    let mut left = Vec::new();
    let mut ordered: Vec<&RefChange> = changes.iter().filter(|c| c.name != "HEAD").collect();
    ordered.extend(changes.iter().filter(|c| c.name == "HEAD"));
    let zero = "0000000000000000000000000000000000000000";
    for c in ordered {
        let mut cmd = git(root, None);
        let symbolic = |v: &Option<String>| {
            v.as_deref()
                .and_then(|v| v.strip_prefix("ref: "))
                .map(str::trim)
                .map(str::to_string)
        };
        match (&c.old, &c.new) {
            (Some(_), _) if symbolic(&c.old).is_some() => {
                // `HEAD` back to the branch it named, when it still names
                // (or points to) what the action left.
                let now = std::fs::read_to_string(root.join(".git").join(&c.name))
                    .map(|s| s.trim().to_string())
                    .ok();
                if now.as_deref() != c.new.as_deref() {
                    left.push(format!("{} (changed since)", c.short_name()));
                    continue;
                }
                cmd.args(["symbolic-ref", &c.name]);
                cmd.arg(symbolic(&c.old).unwrap_or_default());
            }
            (None, Some(new)) => {
                cmd.args(["update-ref", "--no-deref", "-d", &c.name, new]);
            }
            (Some(old), Some(new)) => {
                cmd.args(["update-ref", "--no-deref", &c.name, old]);
                if symbolic(&c.new).is_none() {
                    cmd.arg(new);
                }
            }
            (Some(old), None) => {
                cmd.args(["update-ref", "--no-deref", &c.name, old, zero]);
            }
            (None, None) => continue,
        }
        match cmd.status() {
            Ok(s) if s.success() => moved.push(c.line()),
            _ => left.push(format!(
                "{} (changed since, or not movable)",
                c.short_name()
            )),
        }
    }
    (moved, left)
}
