//! The changeset of a transactional action, read from its overlay's upper
//! layer (see `crate::sandbox::overlay`): exactly what the command wrote,
//! created, deleted, renamed or chmod-ed — nothing anyone else did to the
//! project meanwhile.
//!
//! The upper layer holds every file the command wrote (whole: a chmod or an
//! append copies the file up), a character device 0/0 for every path it
//! deleted (a "whiteout"), and `user.overlay.opaque = y` on a directory
//! that replaced a lower one (the lower contents are all gone). A rename
//! is a new file plus a whiteout at the old name.
//!
//! Each changed path is sorted into one of four piles:
//! - **recorded** (an [`ObservedEffect`]): project files, with the
//!   pre-image read from the project now and the agent's version, both
//!   written to the store as blobs — judged by the effect gates, applied,
//!   undoable;
//! - **conflicts**: the person (or anything else) changed the path since
//!   the action started (its ctime is not older than the start): never
//!   applied, the agent's version kept as a blob and named;
//! - **passthrough**: what checkpoints never recorded — the project's
//!   `.git` internals, ignored files (build output) and new untracked files
//!   over the size cap — applied as is, not undoable;
//! - **dropped**: paths of the control surface the command created (the
//!   sandbox binds the existing ones read-only): never applied, reported.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::Gitignore;
use serde::{Deserialize, Serialize};

use super::beneath::{Beneath, Node};
use super::effect::{perm_text, ChangeKind, DirChange, FileChange, ObservedEffect};
use super::scan;
use super::store::{Entry, Store, StoreError};

/// A path the agent changed that someone else changed too, since the
/// action started: refused, the agent's version kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub path: String,
    pub why: String,
    /// The agent's version (None: the agent deleted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Entry>,
}

/// A path applied from the upper layer outside the recorded effect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passthrough {
    pub path: String,
    /// Removed (a whiteout), rather than written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove: bool,
    /// A directory the command made (git records none; `.git/refs` and
    /// an empty `build/` must exist all the same); with `remove`, a
    /// directory the command removed, removed only once it is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dir: bool,
    /// In a tree the project ignores (`.venv`, `node_modules`, build
    /// output): not part of the effect the gates count, but listed by
    /// `history` and undone by `undo` (what the action created there is
    /// removed; what it overwrote or removed comes back when its pre-image
    /// was small enough to keep).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// Bytes of the file written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Something was at the path before the action (overwritten or
    /// removed), rather than created by it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub existed: bool,
    /// The pre-image of what was there, kept as a blob when at most
    /// [`IGNORED_PRE_IMAGE_MAX_BYTES`] (and the action's total under
    /// [`IGNORED_PRE_IMAGES_MAX_TOTAL`]); `existed` without it: not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Entry>,
    /// Bytes of the kept pre-image (`before`), for the quota's estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_size: Option<u64>,
    /// The blob id of the bytes applied (not stored): undo removes or
    /// restores the path only while it still holds exactly these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// The permission bits of a directory the command removed, so undo
    /// makes it again (an empty folder holds nothing else to restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm: Option<u32>,
}

impl Passthrough {
    fn new(path: String, remove: bool, dir: bool) -> Self {
        Passthrough {
            path,
            remove,
            dir,
            ..Default::default()
        }
    }

    /// A file written into an ignored tree (what `history` lists).
    pub fn ignored_file(&self) -> bool {
        self.ignored && !self.dir
    }
}

/// An ignored-tree file the action overwrote or removed is kept as a blob
/// (so undo can put it back) only up to this size …
pub const IGNORED_PRE_IMAGE_MAX_BYTES: u64 = 256 * 1024;
/// A file ignored by its own name rather than inside an ignored folder
/// keeps its pre-image up to the untracked cap, while such files of one
/// action stay under this total.
pub const IGNORED_SINGLE_PRE_IMAGES_MAX_TOTAL: u64 = 256 * 1024 * 1024;
/// … and only while the action's kept pre-images stay under this total
/// (`rm -rf node_modules` must not copy the whole tree into the store).
pub const IGNORED_PRE_IMAGES_MAX_TOTAL: u64 = 16 * 1024 * 1024;

/// Everything one transactional action changed.
#[derive(Debug, Clone, Default)]
pub struct Changeset {
    pub effect: ObservedEffect,
    pub conflicts: Vec<Conflict>,
    pub passthrough: Vec<Passthrough>,
    pub dropped: Vec<String>,
}

impl Changeset {
    pub fn is_empty(&self) -> bool {
        self.effect.is_empty()
            && self.conflicts.is_empty()
            && self.passthrough.is_empty()
            && self.dropped.is_empty()
    }
}

/// What the upper layer holds at one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upper {
    File,
    Whiteout,
}

/// Settings of one read.
pub struct ReadConfig<'a> {
    pub untracked_cap: u64,
    pub precious: &'a [String],
    /// When the action started (ns since the epoch, the fine clock): a
    /// lower path whose ctime is later changed after the command could
    /// have read it — a conflict.
    pub started_ns: i64,
    /// The kernel's coarse clock when the action started: the start of
    /// the clock tick it started in. File timestamps come from that clock,
    /// so a ctime in `[start_tick_ns, started_ns]` may be a change made
    /// just before the start or just after it (the command is not held
    /// back until the tick is over): it counts as a conflict unless the
    /// file is still exactly as the daemon left it (`super::left`). An
    /// older ctime is a change made before the start.
    pub start_tick_ns: i64,
}

/// The kernel's coarse real-time clock now, in ns: the clock file
/// timestamps are taken from, so "changed since" compares like with like.
pub fn coarse_now_ns() -> i64 {
    crate::sandbox::overlay::coarse_now_ns()
}

/// Read the changeset in `upper` against the project of `store`.
pub fn read(upper: &Path, store: &Store, cfg: &ReadConfig<'_>) -> Result<Changeset, StoreError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io { path, source }
    };
    let mut items: BTreeMap<String, Upper> = BTreeMap::new();
    // Files the overlay copied up from the project (`user.overlay.origin`):
    // the project held them when the command first wrote them.
    let mut copied_up: BTreeSet<String> = BTreeSet::new();
    let mut opaque: Vec<String> = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = upper.join(&rel);
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                tracing::warn!("changeset: a file name that is not UTF-8 in {rel:?} is skipped");
                continue;
            };
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let abs = upper.join(&child);
            let meta = std::fs::symlink_metadata(&abs).map_err(io(&abs))?;
            let ft = meta.file_type();
            if ft.is_char_device() && meta.rdev() == 0 {
                items.insert(child, Upper::Whiteout);
            } else if ft.is_dir() {
                if xattr(&abs, "user.overlay.redirect").is_some()
                    || xattr(&abs, "user.overlay.metacopy").is_some()
                {
                    return Err(StoreError::Parse(format!(
                        "{child}: the overlay redirected or meta-copied it, which a changeset \
                         does not model"
                    )));
                }
                if xattr(&abs, "user.overlay.opaque").as_deref() == Some(b"y") {
                    opaque.push(child.clone());
                }
                dirs.push(child.clone());
                stack.push(child);
            } else if ft.is_file() || ft.is_symlink() {
                if xattr(&abs, "user.overlay.origin").is_some() {
                    copied_up.insert(child.clone());
                }
                items.insert(child, Upper::File);
            } else {
                tracing::warn!("changeset: {child} is neither a file nor a link; not applied");
            }
        }
    }
    let b = store.beneath()?;
    // What the project holds at a path, looked up once per read (the same
    // path is asked about by several of the steps below).
    let mut nodes: HashMap<String, Option<Node>> = HashMap::new();
    let mut node_at = |rel: &str| -> Result<Option<Node>, StoreError> {
        if let Some(n) = nodes.get(rel) {
            return Ok(*n);
        }
        let n = b.node(rel)?;
        nodes.insert(rel.to_string(), n);
        Ok(n)
    };
    // Every path whose state changes, with what the upper layer holds there
    // (None: gone with a whiteout or an opaque directory above it).
    let mut paths: BTreeMap<String, Option<Upper>> = BTreeMap::new();
    for (path, item) in &items {
        match item {
            Upper::File => {
                // A file where a lower directory was: its files are gone.
                if matches!(node_at(path), Ok(Some(Node::Dir))) {
                    for f in b.files_under(path)? {
                        paths.entry(f).or_insert(None);
                    }
                }
                paths.insert(path.clone(), Some(Upper::File));
            }
            Upper::Whiteout => {
                let lower_files = match node_at(path)? {
                    Some(Node::Dir) => b.files_under(path)?,
                    Some(_) => vec![path.clone()],
                    None => vec![],
                };
                for f in lower_files {
                    paths.entry(f).or_insert(None);
                }
            }
        }
    }
    for d in &dirs {
        // A directory where a lower file was: the file is gone.
        if matches!(
            b.node(d),
            Ok(Some(Node::File { .. })) | Ok(Some(Node::Symlink))
        ) {
            paths.entry(d.clone()).or_insert(None);
        }
    }
    for d in &opaque {
        if matches!(b.node(d), Ok(Some(Node::Dir))) {
            for f in b.files_under(d)? {
                paths.entry(f).or_insert(None);
            }
        }
    }
    // Directories of the project the command removed (`rm -r dir`, an
    // opaque directory hiding the old one): once their files are gone they
    // are removed too, when empty — a file someone else put there keeps
    // its folder.
    let mut gone_dirs: Vec<String> = Vec::new();
    for (path, item) in &items {
        if matches!(item, Upper::Whiteout) && matches!(b.node(path), Ok(Some(Node::Dir))) {
            gone_dirs.extend(b.dirs_under(path)?);
            gone_dirs.push(path.clone());
        }
    }
    for d in &opaque {
        if matches!(b.node(d), Ok(Some(Node::Dir))) {
            gone_dirs.extend(
                b.dirs_under(d)?
                    .into_iter()
                    .filter(|sub| !upper.join(sub).is_dir()),
            );
        }
    }

    let root = store.work_tree().to_path_buf();
    let mut rules = Ignores::new(&root, cfg.precious);
    let objects = store.objects();
    let mut out = Changeset::default();
    let mut kept_pre_images = 0u64;
    let mut refs_touched = false;
    let mut kept_single = 0u64;
    let mut tracked = Tracked::default();
    for (path, upper_item) in paths {
        // First: the control surface (`.git/config`, hooks, the agent's
        // own skills…) that the command created is never applied.
        if let Some(entry) = control_entry(&path) {
            let shown = format!("`{}` ({})", entry.path, entry.why);
            if !out.dropped.contains(&shown) {
                out.dropped.push(shown);
            }
            continue;
        }
        let is_git = path == ".git" || path.starts_with(".git/");
        if is_git {
            let remove = upper_item.is_none();
            if remove {
                for vital in ["HEAD", "objects", "refs"] {
                    let v = format!(".git/{vital}");
                    // A ref the action deleted is a ref change (recorded,
                    // judged by the git-refs gate, undoable); the refs
                    // folder itself, or a whole namespace of it, is damage.
                    let hit = if vital == "refs" {
                        path == v
                            || (path.starts_with(&format!("{v}/"))
                                && path.matches('/').count() <= 2)
                    } else {
                        path == v || path.starts_with(&format!("{v}/"))
                    };
                    if hit && !out.effect.git_damage.contains(&v) {
                        out.effect.git_damage.push(v);
                    }
                }
            }
            if super::refs::touches_refs(&path) {
                refs_touched = true;
            }
            out.passthrough.push(Passthrough::new(path, remove, false));
            continue;
        }
        let (mut ignored, precious) = rules.classify(&path);
        // Ignore rules never hide a file git tracks (nor does git): an
        // action cannot make its own victim "ignored" by editing
        // `.gitignore` first.
        if ignored
            && !precious
            && node_at(&path)?.is_some()
            && tracked.contains(store.work_tree(), &path)
        {
            ignored = false;
        }
        if ignored && !precious {
            let was_copied_up = copied_up.contains(&path);
            if upper_item.is_some() {
                let abs = upper.join(&path);
                if let Ok(meta) = std::fs::symlink_metadata(&abs) {
                    if meta.is_file() {
                        let old = b.stat(&path).ok().flatten().map(|st| st.st_mode & 0o7777);
                        out.effect.stripped.extend(strip_notes(
                            &path,
                            &abs,
                            meta.mode() & 0o7777,
                            old,
                        ));
                    }
                }
            }
            // A file ignored by its own name (`notes.txt`, `*.log`, `.env`),
            // not as part of an ignored tree: one file, perhaps the person's
            // only copy, whose name an earlier action may have added to
            // `.gitignore`. Its pre-image is kept up to the untracked cap,
            // outside the per-action total meant for trees.
            let single = !rules.in_ignored_dir(&path);
            let limit = if single {
                cfg.untracked_cap.max(IGNORED_PRE_IMAGE_MAX_BYTES)
            } else {
                IGNORED_PRE_IMAGE_MAX_BYTES
            };
            let budget = if single {
                Budget {
                    kept: &mut kept_single,
                    per_file: limit,
                    total: IGNORED_SINGLE_PRE_IMAGES_MAX_TOTAL,
                }
            } else {
                Budget {
                    kept: &mut kept_pre_images,
                    per_file: limit,
                    total: IGNORED_PRE_IMAGES_MAX_TOTAL,
                }
            };
            let pass = ignored_write(
                &b,
                upper,
                &objects,
                path,
                upper_item.is_none(),
                was_copied_up,
                budget,
            )?;
            out.passthrough.push(pass);
            continue;
        }
        let lower_node = node_at(&path)?;
        let lower_perm = match lower_node {
            Some(Node::File { perm }) => Some(perm),
            _ => None,
        };
        if let Some(Upper::File) = upper_item {
            // A new file over the cap is not read whole (nor stored): it
            // is applied from the upper layer, holes kept.
            let meta =
                std::fs::symlink_metadata(upper.join(&path)).map_err(io(&upper.join(&path)))?;
            let fresh = !matches!(lower_node, Some(Node::File { .. } | Node::Symlink));
            if fresh
                && !copied_up.contains(&path)
                && meta.is_file()
                && meta.len() > cfg.untracked_cap
            {
                out.effect.stripped.extend(strip_notes(
                    &path,
                    &upper.join(&path),
                    meta.mode() & 0o7777,
                    None,
                ));
                out.effect.skipped.push(path.clone());
                out.passthrough.push(Passthrough {
                    size: Some(meta.len()),
                    ..Passthrough::new(path, false, false)
                });
                continue;
            }
        }
        let new = match upper_item {
            Some(Upper::File) => {
                let abs = upper.join(&path);
                let (entry, size, raw) = upper_entry(&abs, &objects, lower_perm)?;
                if let Some(raw) = raw {
                    out.effect
                        .stripped
                        .extend(strip_notes(&path, &abs, raw, lower_perm));
                }
                Some((entry, size))
            }
            _ => None,
        };
        let old = match lower_node {
            Some(Node::Dir) | Some(Node::Other) | None => None,
            Some(node) => Some(lower_entry(&b, &path, node, &objects)?),
        };
        let (old, old_size, lower_stat) = match old {
            Some((e, size, st)) => (Some(e), Some(size), st),
            None => (None, None, None),
        };
        let (new, new_size): (Option<Entry>, Option<u64>) = match new {
            Some((e, size)) => (Some(e), Some(size)),
            None => (None, None),
        };
        let kind = match (&old, &new) {
            (None, None) => continue,
            (Some(o), Some(n)) if o.same_content(n) && o.perm == n.perm => continue,
            (None, Some(_)) => ChangeKind::Created,
            (Some(_), None) => ChangeKind::Deleted,
            (Some(_), Some(_)) => ChangeKind::Modified,
        };
        // Only a file the project holds can have been changed by someone
        // else; a folder's ctime moves with anything inside it. Its status
        // is taken after its pre-image was read (`lower_entry`).
        if let Some(st) = lower_stat {
            if changed_since(b.base(), &path, &st, cfg) {
                out.conflicts.push(Conflict {
                    why: "changed in the project while the action ran".into(),
                    path,
                    agent: new,
                });
                continue;
            }
        }
        // The command wrote a file the project held (the overlay copied it
        // up), and the project no longer holds it: someone deleted it
        // meanwhile. Applying the agent's version would bring back what
        // the person removed.
        if kind == ChangeKind::Created && copied_up.contains(&path) {
            out.conflicts.push(Conflict {
                why: "deleted in the project while the action ran".into(),
                path,
                agent: new,
            });
            continue;
        }
        if kind == ChangeKind::Created && new_size.unwrap_or(0) > cfg.untracked_cap {
            out.effect.skipped.push(path.clone());
            out.passthrough.push(Passthrough::new(path, false, false));
            continue;
        }
        if ignored && kind != ChangeKind::Created {
            out.effect.precious.push(path.clone());
        }
        out.effect.changes.push(FileChange {
            path,
            kind,
            old_size,
            new_size,
            old,
            new,
        });
    }
    // Directories the command made where the project has none: made too
    // (parents first; the sorted order gives that).
    dirs.sort();
    for d in dirs {
        if matches!(b.node(&d), Ok(Some(Node::Dir))) {
            // A folder the project holds: re-moded by the command?
            let is_git = d == ".git" || d.starts_with(".git/");
            let old = b.stat(&d).ok().flatten().map(|st| st.st_mode & 0o7777);
            let raw = std::fs::symlink_metadata(upper.join(&d))
                .map(|m| m.mode() & 0o7777)
                .ok();
            if let (false, Some(old), Some(raw)) = (is_git, old, raw) {
                let (new, _) = safe_dir_perm(raw, Some(old));
                out.effect
                    .stripped
                    .extend(strip_notes(&d, &upper.join(&d), raw, Some(old)));
                if new != old && control_entry(&d).is_none() {
                    out.effect.dirs.push(DirChange {
                        path: d.clone(),
                        kind: ChangeKind::Modified,
                        old_perm: Some(old),
                        new_perm: Some(new),
                    });
                    out.passthrough.push(Passthrough {
                        existed: true,
                        perm: Some(old),
                        ..Passthrough::new(d, false, true)
                    });
                }
            }
            continue;
        }
        if let Some(entry) = control_entry(&d) {
            let shown = format!("`{}` ({})", entry.path, entry.why);
            if !out.dropped.contains(&shown) {
                out.dropped.push(shown);
            }
            continue;
        }
        let ignored = rules.ignored_dir(&d);
        let is_git = d == ".git" || d.starts_with(".git/");
        if !ignored && !is_git {
            let raw = std::fs::symlink_metadata(upper.join(&d))
                .map(|m| m.mode() & 0o7777)
                .unwrap_or(0o755);
            out.effect
                .stripped
                .extend(strip_notes(&d, &upper.join(&d), raw, None));
            out.effect.dirs.push(DirChange {
                path: d.clone(),
                kind: ChangeKind::Created,
                old_perm: None,
                new_perm: Some(safe_dir_perm(raw, None).0),
            });
        }
        out.passthrough.push(Passthrough {
            ignored,
            ..Passthrough::new(d, false, true)
        });
    }
    // Deepest first, after every file (passthrough is applied in order).
    gone_dirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    gone_dirs.dedup();
    for d in gone_dirs {
        if control_entry(&d).is_some() {
            continue;
        }
        let perm = b.stat(&d).ok().flatten().map(|st| st.st_mode & 0o7777);
        let is_git = d == ".git" || d.starts_with(".git/");
        let ignored = !is_git && rules.ignored_dir(&d);
        if !ignored && !is_git {
            out.effect.dirs.push(DirChange {
                path: d.clone(),
                kind: ChangeKind::Deleted,
                old_perm: perm,
                new_perm: None,
            });
        }
        out.passthrough.push(Passthrough {
            ignored,
            perm,
            ..Passthrough::new(d, true, true)
        });
    }
    if refs_touched {
        out.effect.refs = super::refs::changed(store.work_tree(), upper);
    }
    Ok(out)
}

/// The permission bits that may land for a file the command left with
/// `new` where the project held `old`: setuid, setgid and sticky never;
/// group/world write only where the project had them. With the names of
/// what was taken off.
pub fn safe_perm(new: u32, old: Option<u32>) -> (u32, Vec<&'static str>) {
    perm_allowed(new, old, 0)
}

/// [`safe_perm`] for a folder: a setgid or sticky bit the project's folder
/// already had stays (a group-shared tree keeps its setgid folders); the
/// command cannot add one.
pub fn safe_dir_perm(new: u32, old: Option<u32>) -> (u32, Vec<&'static str>) {
    perm_allowed(new, old, old.unwrap_or(0) & 0o3000)
}

fn perm_allowed(new: u32, old: Option<u32>, kept_special: u32) -> (u32, Vec<&'static str>) {
    let mut gone = Vec::new();
    for (bit, name) in [
        (0o4000, "setuid bit"),
        (0o2000, "setgid bit"),
        (0o1000, "sticky bit"),
    ] {
        if new & bit & !kept_special != 0 {
            gone.push(name);
        }
    }
    let added_write = new & 0o022 & !old.unwrap_or(0);
    if added_write != 0 {
        gone.push("group/world write bits");
    }
    ((new & 0o777 & !added_write) | (new & kept_special), gone)
}

/// What of `raw` (the bits the command left at `rel`, its upper copy at
/// `abs`) is not applied, one line each: `helper: setuid bit (04755 →
/// 0755)`; file capabilities (`security.capability`) never are.
fn strip_notes(rel: &str, abs: &Path, raw: u32, old: Option<u32>) -> Vec<String> {
    let is_dir = std::fs::symlink_metadata(abs).is_ok_and(|m| m.is_dir());
    let (applied, gone) = if is_dir {
        safe_dir_perm(raw, old)
    } else {
        safe_perm(raw, old)
    };
    let mut notes = Vec::new();
    if !gone.is_empty() {
        notes.push(format!(
            "{rel}: {} ({} → {})",
            gone.join(", "),
            perm_text(Some(raw)),
            perm_text(Some(applied))
        ));
    }
    if xattr(abs, "security.capability").is_some() {
        notes.push(format!("{rel}: file capabilities (security.capability)"));
    }
    notes
}

/// The paths the project's git index tracks, read once per changeset
/// read and only when an ignored path the project holds is written.
#[derive(Default)]
struct Tracked {
    paths: Option<BTreeSet<String>>,
}

impl Tracked {
    fn contains(&mut self, root: &Path, rel: &str) -> bool {
        self.paths
            .get_or_insert_with(|| tracked_paths(root))
            .contains(rel)
    }
}

/// `git ls-files` of the project (its config's programs off). Empty when
/// it is no repository or git fails.
fn tracked_paths(root: &Path) -> BTreeSet<String> {
    if !root.join(".git").exists() {
        return BTreeSet::new();
    }
    let out = std::process::Command::new("git")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(["-c", "core.quotePath=false", "ls-files", "-z", "--cached"])
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => o
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .filter_map(|p| std::str::from_utf8(p).ok().map(str::to_string))
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// The control-surface entry `rel` is, if any. A path none of whose
/// names starts an entry is none, found in one pass over its names
/// (`control_surface::control_entry` compares every suffix with every
/// entry: a folder 1,392 levels deep took seconds of that per read).
fn control_entry(rel: &str) -> Option<&'static crate::control_surface::ControlEntry> {
    static FIRST: std::sync::OnceLock<BTreeSet<&'static str>> = std::sync::OnceLock::new();
    let first = FIRST.get_or_init(|| {
        crate::control_surface::CONTROL_SURFACE
            .iter()
            .filter_map(|e| e.path.split('/').next())
            .collect()
    });
    if !rel.split('/').any(|name| first.contains(name)) {
        return None;
    }
    crate::control_surface::control_entry(Path::new(rel))
}

/// Whether the project file `rel` (status `st` now) may have been changed
/// by someone else since the action started (see [`ReadConfig`]).
fn changed_since(base: &Path, rel: &str, st: &rustix::fs::Stat, cfg: &ReadConfig<'_>) -> bool {
    let ctime = st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec as i64;
    if ctime > cfg.started_ns {
        return true;
    }
    ctime >= cfg.start_tick_ns && !super::left::is_as_left(base, rel, st)
}

/// How much of an ignored write's pre-image may be kept: per file, and
/// in total (`kept` so far) for the pile it counts against.
struct Budget<'a> {
    kept: &'a mut u64,
    per_file: u64,
    total: u64,
}

/// A write (or removal) in an ignored tree: its size, whether something
/// was there before, and — when small enough — that pre-image as a blob.
fn ignored_write(
    b: &Beneath,
    upper: &Path,
    objects: &Path,
    path: String,
    remove: bool,
    copied_up: bool,
    budget: Budget<'_>,
) -> Result<Passthrough, StoreError> {
    let Budget {
        kept,
        per_file: limit,
        total,
    } = budget;
    let size = if remove {
        None
    } else {
        std::fs::symlink_metadata(upper.join(&path))
            .ok()
            .map(|m| m.len())
    };
    let lower = b.stat(&path)?;
    let lower_node = match &lower {
        Some(_) => b.node(&path)?,
        None => None,
    };
    let existed = copied_up || matches!(lower_node, Some(Node::File { .. } | Node::Symlink));
    let mut before = None;
    let mut before_size = None;
    if let (Some(st), Some(node @ (Node::File { .. } | Node::Symlink))) = (lower, lower_node) {
        let bytes = st.st_size.max(0) as u64;
        let fits = bytes <= limit && kept.saturating_add(bytes) <= total;
        if fits {
            *kept += bytes;
            before = Some(lower_entry(b, &path, node, objects)?.0);
            before_size = Some(bytes);
        }
    }
    Ok(Passthrough {
        ignored: true,
        size,
        existed,
        before,
        before_size,
        ..Passthrough::new(path, remove, false)
    })
}

/// What is at `rel` in the project now, its bytes stored as a blob (the
/// pre-image a file tool's write is undone to), and its size.
pub fn pre_image(store: &Store, rel: &str) -> Result<Option<(Entry, u64)>, StoreError> {
    let b = store.beneath()?;
    match b.node(rel)? {
        Some(node @ (Node::File { .. } | Node::Symlink)) => {
            let (entry, size, _) = lower_entry(&b, rel, node, &store.objects())?;
            Ok(Some((entry, size)))
        }
        _ => Ok(None),
    }
}

/// The effect of one path going from `before` to `after` (None: no
/// change), with the precious mark the effect gates read.
pub fn one_path(
    store: &Store,
    cfg: &super::CheckpointConfig,
    rel: &str,
    before: Option<(Entry, u64)>,
    after: Option<(Entry, u64)>,
) -> Option<ObservedEffect> {
    let (old, old_size) = before.map_or((None, None), |(e, s)| (Some(e), Some(s)));
    let (new, new_size) = after.map_or((None, None), |(e, s)| (Some(e), Some(s)));
    let kind = match (&old, &new) {
        (None, None) => return None,
        (Some(o), Some(n)) if o.same_content(n) && o.perm == n.perm => return None,
        (None, Some(_)) => ChangeKind::Created,
        (Some(_), None) => ChangeKind::Deleted,
        (Some(_), Some(_)) => ChangeKind::Modified,
    };
    let mut rules = Ignores::new(store.work_tree(), &cfg.precious);
    let (ignored, precious) = rules.classify(rel);
    let mut effect = ObservedEffect::default();
    if ignored && precious && kind != ChangeKind::Created {
        effect.precious.push(rel.to_string());
    }
    effect.changes.push(FileChange {
        path: rel.to_string(),
        kind,
        old_size,
        new_size,
        old,
        new,
    });
    Some(effect)
}

/// An extended attribute of `path` (not following a link), if set.
fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    match rustix::fs::lgetxattr(path, name, &mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(_) => None,
    }
}

fn mode_of(perm: u32) -> String {
    if perm & 0o111 != 0 {
        "100755"
    } else {
        "100644"
    }
    .into()
}

/// The agent's version of a path: its bytes stored as a blob, its
/// permission bits as they may land ([`safe_perm`] against `old`), and the
/// bits the command left when some were taken off.
fn upper_entry(
    abs: &Path,
    objects: &Path,
    old: Option<u32>,
) -> Result<(Entry, u64, Option<u32>), StoreError> {
    let io = |source| StoreError::Io {
        path: abs.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(abs).map_err(io)?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(abs)
            .map_err(io)?
            .into_os_string()
            .into_encoded_bytes();
        let oid = scan::write_object(objects, "blob", &target)?;
        let size = target.len() as u64;
        return Ok((
            Entry {
                mode: "120000".into(),
                oid: scan::hex(&oid),
                perm: None,
            },
            size,
            None,
        ));
    }
    let bytes = std::fs::read(abs).map_err(io)?;
    let oid = scan::write_object(objects, "blob", &bytes)?;
    let raw = meta.mode() & 0o7777;
    let perm = safe_perm(raw, old).0;
    Ok((
        Entry {
            mode: mode_of(perm),
            oid: scan::hex(&oid),
            perm: Some(perm),
        },
        bytes.len() as u64,
        Some(raw),
    ))
}

/// The project's version of a path now (the pre-image), stored as a blob,
/// and the path's status taken *after* it was read: a change made after
/// the read shows in that status (a conflict), so what is recorded as the
/// pre-image is never a version someone wrote after the action started.
/// For a file, the status of the file read (`fstat` on the descriptor it
/// was read through: one call, where a lookup by name cost three); were
/// the file replaced by another between the read and the apply, the apply
/// finds the content changed and refuses it as a conflict.
fn lower_entry(
    b: &Beneath,
    rel: &str,
    node: Node,
    objects: &Path,
) -> Result<(Entry, u64, Option<rustix::fs::Stat>), StoreError> {
    let (bytes, mode, perm, st) = match node {
        Node::Symlink => {
            let target = b.read_link(rel)?;
            (target, "120000".to_string(), None, b.stat(rel)?)
        }
        Node::File { perm } => {
            let (bytes, st) = b.read_with_stat(rel)?;
            (bytes, mode_of(perm), Some(perm), Some(st))
        }
        Node::Dir | Node::Other => {
            return Err(StoreError::Parse(format!("{rel} is not a file")));
        }
    };
    let oid = scan::write_object(objects, "blob", &bytes)?;
    Ok((
        Entry {
            mode,
            oid: scan::hex(&oid),
            perm,
        },
        bytes.len() as u64,
        st,
    ))
}

/// `.gitignore` rules of the project, read once per directory per read.
/// Each directory's matchers and whether it is ignored are worked out once
/// from its parent's (never by recursion: a tree 1,392 levels deep is
/// classified in time linear in its depth per path, and no stack grows).
struct Ignores {
    root: PathBuf,
    exclude: Arc<Gitignore>,
    precious: Arc<Gitignore>,
    /// The ignore files that apply to entries directly inside a directory
    /// (`""`: the root), outermost first.
    by_dir: HashMap<String, Arc<Vec<Arc<Gitignore>>>>,
    /// Whether a directory is ignored (itself or through an ancestor).
    dir_ignored: HashMap<String, bool>,
}

fn parent_of(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(p, _)| p)
}

impl Ignores {
    fn new(root: &Path, precious: &[String]) -> Self {
        Ignores {
            root: root.to_path_buf(),
            exclude: scan::shared_root_excludes(root),
            precious: scan::cached_precious(root, precious),
            by_dir: HashMap::new(),
            dir_ignored: HashMap::new(),
        }
    }

    /// (ignored, precious): ignored as git would (a file inside an ignored
    /// directory is ignored), precious by the `precious` globs.
    fn classify(&mut self, rel: &str) -> (bool, bool) {
        self.classify_as(rel, false)
    }

    /// Whether the directory `rel` is ignored (`node_modules/` matches a
    /// directory only).
    fn ignored_dir(&mut self, rel: &str) -> bool {
        self.classify_as(rel, true).0
    }

    /// Whether `rel` lies inside an ignored folder (rather than being
    /// ignored, if at all, by its own name).
    fn in_ignored_dir(&mut self, rel: &str) -> bool {
        self.dir_is_ignored(parent_of(rel))
    }

    /// The matchers for entries directly inside `dir`.
    fn matchers(&mut self, dir: &str) -> Arc<Vec<Arc<Gitignore>>> {
        if let Some(m) = self.by_dir.get(dir) {
            return m.clone();
        }
        // The uncached ancestors, innermost first; then filled outermost
        // first.
        let mut chain = vec![dir.to_string()];
        let mut at = dir;
        while !at.is_empty() {
            at = parent_of(at);
            if self.by_dir.contains_key(at) {
                break;
            }
            chain.push(at.to_string());
        }
        for d in chain.into_iter().rev() {
            let mut own: Vec<Arc<Gitignore>> = if d.is_empty() {
                Vec::new()
            } else {
                (*self.by_dir[parent_of(&d)]).clone()
            };
            let abs = if d.is_empty() {
                self.root.clone()
            } else {
                self.root.join(&d)
            };
            if let Some(m) = scan::cached_gitignore(&abs, &abs.join(".gitignore")) {
                own.push(m);
            }
            self.by_dir.insert(d, Arc::new(own));
        }
        self.by_dir[dir].clone()
    }

    /// Whether the directory `dir` (not the root) is ignored.
    fn dir_is_ignored(&mut self, dir: &str) -> bool {
        if dir.is_empty() {
            return false;
        }
        if let Some(v) = self.dir_ignored.get(dir) {
            return *v;
        }
        let mut chain = vec![dir.to_string()];
        let mut at = parent_of(dir);
        while !at.is_empty() && !self.dir_ignored.contains_key(at) {
            chain.push(at.to_string());
            at = parent_of(at);
        }
        for d in chain.into_iter().rev() {
            let parent = parent_of(&d).to_string();
            let up = !parent.is_empty() && self.dir_ignored[&parent];
            let v = up || {
                let m = self.matchers(&parent);
                scan::ignored(&self.root.join(&d), true, &self.exclude, &m)
            };
            self.dir_ignored.insert(d, v);
        }
        self.dir_ignored[dir]
    }

    fn classify_as(&mut self, rel: &str, dir: bool) -> (bool, bool) {
        let parent = parent_of(rel).to_string();
        let ignored = if dir {
            self.dir_is_ignored(rel)
        } else {
            self.dir_is_ignored(&parent) || {
                let m = self.matchers(&parent);
                scan::ignored(&self.root.join(rel), false, &self.exclude, &m)
            }
        };
        let precious = self
            .precious
            .matched(self.root.join(rel), false)
            .is_ignore();
        (ignored, precious)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_bits_never_land_and_write_bits_only_where_they_were() {
        assert_eq!(safe_perm(0o4755, None), (0o755, vec!["setuid bit"]));
        assert_eq!(safe_perm(0o2775, Some(0o775)), (0o775, vec!["setgid bit"]));
        assert_eq!(safe_perm(0o1777, Some(0o755)).0, 0o755);
        assert_eq!(
            safe_perm(0o777, Some(0o755)),
            (0o755, vec!["group/world write bits"])
        );
        assert_eq!(safe_perm(0o666, Some(0o664)).0, 0o664);
        assert_eq!(safe_perm(0o700, Some(0o644)), (0o700, vec![]));
        // A folder keeps the setgid bit it had; it cannot gain one.
        assert_eq!(safe_dir_perm(0o2775, Some(0o2775)), (0o2775, vec![]));
        assert_eq!(safe_dir_perm(0o2755, Some(0o755)).0, 0o755);
        assert_eq!(safe_perm(0o4755, Some(0o4755)).0, 0o755);
    }

    #[test]
    fn ignore_rules_of_a_deep_tree_are_read_without_recursion() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".gitignore"), "build/\n*.log\n").unwrap();
        let mut rules = Ignores::new(dir.path(), &[]);
        let deep = "d/".repeat(5_000);
        assert!(!rules.ignored_dir(deep.trim_end_matches('/')));
        assert!(rules.classify(&format!("{deep}x.log")).0);
        assert!(rules.classify("build/a/b.txt").0);
        assert!(!rules.classify("src/a.txt").0);
    }
}
