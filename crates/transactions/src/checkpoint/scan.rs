//! The fast path of a snapshot: one directory walk in Rust, compared with a
//! stat cache of the last snapshot, so that only files whose metadata
//! changed are read and hashed; blobs and trees are written into the shadow
//! store as git loose objects from Rust. A snapshot of an unchanged tree
//! costs one walk and no git process; a changed one adds the hashing of the
//! changed files and the rewrite of the tree objects (in memory, sha1).
//!
//! Why our own walk (read_dir + the `ignore` crate's gitignore matcher) and
//! not the `ignore` crate's walker or git's untracked cache: the walker
//! hides ignored files completely, but ignored-but-precious files (`.env`,
//! keys) must be seen; and git would cost processes on every action. The
//! matcher is the `ignore` crate's, which implements gitignore semantics
//! (anchoring, `**`, negation, directory-only patterns); precedence is
//! git's: the deepest `.gitignore` with a matching pattern decides, then the
//! project's `.git/info/exclude`. As in git, an ignored directory is not
//! entered.
//!
//! The stat cache trusts an entry only if size, mtime, ctime, inode, device
//! and mode all match and the file was not modified within [`RACY_MARGIN_NS`]
//! of the snapshot that cached it ("racy git": a write in the same timestamp
//! granule as the snapshot would leave the stat unchanged). It lives in
//! memory per store and on disk next to the store (`stat-cache`, versioned;
//! any doubt — wrong version, bad length, a different work tree, a missing
//! tree object — means a full rehash, never a wrong answer).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use flate2::write::ZlibEncoder;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use sha1::{Digest, Sha1};

use super::notify;
use super::store::StoreError;

/// A cached entry is trusted only if its mtime and ctime are older than the
/// snapshot that cached it by this much. Two seconds covers file systems with
/// coarse timestamps (FAT: 2 s; ext3/HFS+: 1 s) as well as the kernel's
/// coarse clock; the cost is rehashing files touched in the last 2 s.
pub const RACY_MARGIN_NS: i64 = 2_000_000_000;

/// git modes as numbers.
pub const MODE_FILE: u32 = 0o100644;
pub const MODE_EXEC: u32 = 0o100755;
pub const MODE_LINK: u32 = 0o120000;
const MODE_TREE: u32 = 0o40000;

/// What the last snapshot knew about one recorded path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    pub mode: u32,
    /// The permission bits (`st_mode & 0o7777`; 0 for a symlink), so a
    /// restore puts a 0600 file back as 0600.
    pub perm: u32,
    pub oid: [u8; 20],
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    /// Ignored by `.gitignore` but recorded because it matches a precious
    /// glob.
    pub precious: bool,
}

impl FileState {
    pub fn mode_str(&self) -> String {
        format!("{:06o}", self.mode)
    }

    pub fn oid_hex(&self) -> String {
        hex(&self.oid)
    }

    /// Whether the file on disk, as `stat` shows it now, is certainly the
    /// one cached at `taken_ns`.
    fn trusted(&self, now: &FileState, taken_ns: i64, margin_ns: i64) -> bool {
        self.mode == now.mode
            && self.perm == now.perm
            && self.size == now.size
            && self.mtime_ns == now.mtime_ns
            && self.ctime_ns == now.ctime_ns
            && self.ino == now.ino
            && self.dev == now.dev
            && self.mtime_ns.max(self.ctime_ns) < taken_ns.saturating_sub(margin_ns)
    }
}

/// The recorded state of a working tree at one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeState {
    /// The tree object id (hex).
    pub tree: String,
    /// When the walk started (ns since the epoch).
    pub taken_ns: i64,
    pub files: Arc<BTreeMap<String, FileState>>,
}

/// The result of one walk.
pub struct Scanned {
    pub state: TreeState,
    /// How the state was found.
    pub how: ScanKind,
    /// Files left out because they exceed the size cap (not recorded before).
    pub skipped: Vec<String>,
}

/// Which path a snapshot took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanKind {
    /// The whole tree walked.
    Walked,
    /// Only directories with file events read again.
    Incremental,
    /// The watches saw nothing: the last state, no walk.
    Unchanged,
}

/// What to walk and how.
pub struct ScanConfig<'a> {
    pub git_dir: &'a Path,
    pub work_tree: &'a Path,
    pub untracked_cap: u64,
    pub precious: &'a [String],
    /// Use (and arm) the kernel's watches.
    pub watch: bool,
    /// [`RACY_MARGIN_NS`], smaller only in tests.
    pub racy_margin_ns: i64,
}

/// The in-memory caches, one per shadow store (keyed by its git dir).
fn memory() -> &'static Mutex<HashMap<PathBuf, TreeState>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, TreeState>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Snapshot the working tree: walk, reuse what the cache vouches for, hash
/// and store the rest, write the trees. Updates the cache. When the
/// kernel's watches ([`super::notify`]) vouch for the last state, only the
/// directories with file events are read again — or nothing at all.
pub fn snapshot(cfg: &ScanConfig) -> Result<Scanned, StoreError> {
    // One snapshot of a store at a time: draining the watches and
    // recording the state they vouch for must not interleave.
    let serial = serial(cfg.git_dir);
    let _one_at_a_time = serial
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let previous = previous_state(cfg);
    let known = previous.as_ref().map(|p| p.files.clone());
    let scanned = cached_snapshot(cfg, previous)?;
    if differential_checks() {
        check_against_fresh_read(cfg, known.as_deref(), &scanned)?;
    }
    Ok(scanned)
}

/// [`snapshot`] from the caches: the last state where the watches vouch
/// for it, the directories with events read again, or a whole walk that
/// trusts the stat cache.
fn cached_snapshot(cfg: &ScanConfig, previous: Option<TreeState>) -> Result<Scanned, StoreError> {
    if let Some(prev) = previous.as_ref().filter(|_| cfg.watch) {
        if let Some((since, skipped)) =
            notify::since(cfg.git_dir, &armed(cfg, prev, Default::default()))
        {
            match since {
                notify::Since::Nothing => {
                    return Ok(Scanned {
                        how: ScanKind::Unchanged,
                        state: prev.clone(),
                        skipped: skipped.into_iter().collect(),
                    })
                }
                notify::Since::Dirs(dirs) => match incremental(cfg, prev, &dirs, skipped) {
                    Ok(Some(scanned)) => return Ok(scanned),
                    Ok(None) => {}
                    Err(e) => {
                        // The events are drained but not recorded: only a
                        // whole walk can vouch for the tree again.
                        notify::forget(cfg.git_dir);
                        return Err(e);
                    }
                },
            }
        }
    }
    full_snapshot(cfg, previous)
}

/// Whether every snapshot is checked against the tree read afresh (every
/// file read and hashed, the ignore files compiled anew): on in debug
/// builds (every test) and wherever `PASSEPARTOUT_CHECK_CACHES=1` is set.
/// What a snapshot records is what undo restores and what the effect
/// gates judge, so a stale cache must fail loudly where it can be seen.
pub fn differential_checks() -> bool {
    cfg!(debug_assertions)
        || std::env::var_os("PASSEPARTOUT_CHECK_CACHES").is_some_and(|v| v == "1")
}

/// What a snapshot records, however it was had: each path's mode,
/// permission bits, blob id and preciousness; the files left out for the
/// size cap; the tree id.
type Record = (
    BTreeMap<String, (u32, u32, [u8; 20], bool)>,
    BTreeSet<String>,
    String,
);

/// The tree at `cfg.work_tree` read from the disk alone: walked with the
/// ignore files compiled now, every file read and hashed, no stat
/// trusted. `known`: the paths recorded before this snapshot (the size cap
/// spares them, as it spares tracked files).
fn fresh_read(
    cfg: &ScanConfig,
    known: Option<&BTreeMap<String, FileState>>,
) -> Result<Record, StoreError> {
    let precious = precious_matcher(cfg.work_tree, cfg.precious);
    let mut exclude = GitignoreBuilder::new(cfg.work_tree);
    let exclude_file = cfg.work_tree.join(".git/info/exclude");
    if exclude_file.is_file() {
        exclude.add(exclude_file);
    }
    let exclude = exclude.build().unwrap_or_else(|_| Gitignore::empty());
    let walked = walk_tree(cfg.work_tree, &precious, &exclude, None)?;
    let objects = cfg.git_dir.join("objects");
    let mut states = BTreeMap::new();
    let mut skipped = BTreeSet::new();
    for found in walked.found {
        let old = known.and_then(|k| k.get(&found.rel));
        if old.is_none() && found.state.mode != MODE_LINK && found.state.size > cfg.untracked_cap {
            skipped.insert(found.rel);
            continue;
        }
        let Ok(bytes) = read_content(&cfg.work_tree.join(&found.rel), found.state.mode) else {
            continue;
        };
        let mut state = found.state;
        state.oid = write_object(&objects, "blob", &bytes)?;
        states.insert(found.rel, state);
    }
    let tree = write_trees(&objects, &states)?;
    Ok((record_of(&states), skipped, tree))
}

fn record_of(files: &BTreeMap<String, FileState>) -> BTreeMap<String, (u32, u32, [u8; 20], bool)> {
    files
        .iter()
        .map(|(p, f)| (p.clone(), (f.mode, f.perm, f.oid, f.precious)))
        .collect()
}

/// The differential check of [`snapshot`]: what the caches (the watches,
/// the stat cache, the compiled ignore files, the reused tree) gave must
/// be what reading the tree afresh gives. A tree that changed between two
/// fresh reads gives no verdict; a stable tree the cached answer misreads
/// panics with the paths that differ.
// The differential check exists to fail loudly (debug builds and CI).
#[allow(clippy::panic)]
fn check_against_fresh_read(
    cfg: &ScanConfig,
    known: Option<&BTreeMap<String, FileState>>,
    cached: &Scanned,
) -> Result<(), StoreError> {
    let given: Record = (
        record_of(&cached.state.files),
        cached.skipped.iter().cloned().collect(),
        cached.state.tree.clone(),
    );
    let first = fresh_read(cfg, known)?;
    if first == given {
        return Ok(());
    }
    if fresh_read(cfg, known)? != first {
        tracing::debug!(
            "checkpoint snapshot of {}: the tree changed during the differential check",
            cfg.work_tree.display()
        );
        return Ok(());
    }
    let differ: Vec<&String> = first
        .0
        .keys()
        .chain(given.0.keys())
        .filter(|p| first.0.get(*p) != given.0.get(*p))
        .collect();
    panic!(
        "the checkpoint snapshot of {} ({:?}) disagrees with a fresh read of the tree: \
         paths {differ:?}; skipped (cached) {:?} vs (fresh) {:?}; tree (cached) {} vs (fresh) {}",
        cfg.work_tree.display(),
        cached.how,
        given.1,
        first.1,
        given.2,
        first.2
    );
}

/// The lock serialising the snapshots of one store.
fn serial(git_dir: &Path) -> Arc<Mutex<()>> {
    static SERIAL: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    SERIAL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(git_dir.to_path_buf())
        .or_default()
        .clone()
}

/// What a watch armed after a snapshot of `state` vouches for.
fn armed(cfg: &ScanConfig, state: &TreeState, skipped: BTreeSet<String>) -> notify::Armed {
    notify::Armed {
        taken_ns: state.taken_ns,
        tree: state.tree.clone(),
        untracked_cap: cfg.untracked_cap,
        precious: cfg.precious.to_vec(),
        skipped,
    }
}

/// A whole walk, arming the watches for the next snapshot as it goes.
fn full_snapshot(cfg: &ScanConfig, previous: Option<TreeState>) -> Result<Scanned, StoreError> {
    let t0 = std::time::Instant::now();
    let taken_ns = now_ns();
    let precious = cached_precious(cfg.work_tree, cfg.precious);
    let t_matchers = t0.elapsed();
    let exclude = root_excludes(cfg.work_tree);
    let arming = cfg.watch.then(|| notify::Arming::start(cfg.work_tree));
    let walked = walk_tree(cfg.work_tree, &precious, &exclude, arming.as_ref())?;
    if let Some(arming) = arming.as_ref().filter(|_| walked.hardlinks) {
        arming.fail("a file has more than one link");
    }
    let mut found = walked.found;
    // Sorted by path: merged with the (sorted) previous state below, and
    // the map is then built in one pass.
    found.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    let t_walk = t0.elapsed();

    let objects = cfg.git_dir.join("objects");
    let empty = BTreeMap::new();
    let old_files = previous.as_ref().map(|p| &*p.files).unwrap_or(&empty);
    let old_taken = previous.as_ref().map(|p| p.taken_ns).unwrap_or(0);
    let mut files: Vec<(String, FileState)> = Vec::with_capacity(found.len());
    let mut skipped = Vec::new();
    let mut olds = old_files.iter().peekable();
    for found in found {
        while olds.next_if(|(p, _)| **p < found.rel).is_some() {}
        let old = olds.next_if(|(p, _)| **p == found.rel).map(|(_, f)| f);
        match settle(cfg, &objects, &found, old, old_taken)? {
            Settled::Keep(state) => files.push((found.rel, state)),
            Settled::TooLarge => skipped.push(found.rel),
            Settled::Gone => {}
        }
    }
    let files: BTreeMap<String, FileState> = files.into_iter().collect();

    let t_hash = t0.elapsed();
    let unchanged = previous
        .as_ref()
        .is_some_and(|p| same_content(&p.files, &files));
    let tree = match previous {
        Some(p) if unchanged => p.tree,
        _ => write_trees(&objects, &files)?,
    };
    let state = TreeState {
        tree,
        taken_ns,
        files: Arc::new(files),
    };
    let t_tree = t0.elapsed();
    remember(cfg, &state, !unchanged);
    match arming {
        Some(arming) => arming.finish(
            cfg.git_dir,
            armed(cfg, &state, skipped.iter().cloned().collect()),
        ),
        None => notify::forget(cfg.git_dir),
    }
    tracing::debug!(
        files = state.files.len(),
        "checkpoint scan: matchers {:?}, walk {:?}, hash {:?}, tree {:?}, cache {:?}",
        t_matchers,
        t_walk - t_matchers,
        t_hash - t_walk,
        t_tree - t_hash,
        t0.elapsed() - t_tree
    );
    Ok(Scanned {
        state,
        skipped,
        how: ScanKind::Walked,
    })
}

/// Read again only the files directly in `dirs` (the rest is as the
/// previous state recorded it: the watches saw no event there). None: the
/// incremental path cannot vouch for the result (a hard link): walk.
fn incremental(
    cfg: &ScanConfig,
    prev: &TreeState,
    dirs: &BTreeSet<String>,
    old_skipped: BTreeSet<String>,
) -> Result<Option<Scanned>, StoreError> {
    let precious = cached_precious(cfg.work_tree, cfg.precious);
    let exclude = root_excludes(cfg.work_tree);
    let mut found = Vec::new();
    for rel in dirs {
        let abs = if rel.is_empty() {
            cfg.work_tree.to_path_buf()
        } else {
            cfg.work_tree.join(rel)
        };
        let mut matchers = ancestor_matchers(cfg.work_tree, rel);
        let mut walk = Walk {
            root: cfg.work_tree,
            precious: &precious,
            exclude: &exclude,
            found: Vec::new(),
            arming: None,
            hardlinks: false,
        };
        // Subdirectories are not entered: nothing in them had an event.
        let mut subdirs = Vec::new();
        walk.dir(&abs, rel, &mut matchers, Some(&mut subdirs))?;
        if walk.hardlinks {
            notify::forget(cfg.git_dir);
            return Ok(None);
        }
        found.extend(walk.found);
    }
    let in_dirty = |rel: &str| dirs.contains(rel.rsplit_once('/').map_or("", |(d, _)| d));
    let objects = cfg.git_dir.join("objects");
    let mut files: BTreeMap<String, FileState> = prev
        .files
        .iter()
        .filter(|(rel, _)| !in_dirty(rel))
        .map(|(rel, f)| (rel.clone(), *f))
        .collect();
    let mut skipped: BTreeSet<String> = old_skipped.into_iter().filter(|r| !in_dirty(r)).collect();
    for found in found {
        let old = prev.files.get(&found.rel);
        match settle(cfg, &objects, &found, old, prev.taken_ns)? {
            Settled::Keep(state) => {
                files.insert(found.rel, state);
            }
            Settled::TooLarge => {
                skipped.insert(found.rel);
            }
            Settled::Gone => {}
        }
    }
    let unchanged = same_content(&prev.files, &files);
    let tree = if unchanged {
        prev.tree.clone()
    } else {
        write_trees(&objects, &files)?
    };
    // The previous walk's time stays: files vouched for by the watches were
    // not looked at now, so the racy margin keeps counting from then.
    let state = TreeState {
        tree,
        taken_ns: prev.taken_ns,
        files: Arc::new(files),
    };
    remember(cfg, &state, !unchanged);
    notify::rearm(cfg.git_dir, armed(cfg, &state, skipped.clone()));
    Ok(Some(Scanned {
        how: ScanKind::Incremental,
        state,
        skipped: skipped.into_iter().collect(),
    }))
}

/// What one walked file becomes in the new state.
enum Settled {
    Keep(FileState),
    /// Untracked and over the size cap: left out.
    TooLarge,
    /// Gone or unreadable since the walk saw it.
    Gone,
}

/// Reuse the previous record of a file if its stat vouches for it, else
/// read, hash and store it.
fn settle(
    cfg: &ScanConfig,
    objects: &Path,
    found: &Found,
    old: Option<&FileState>,
    old_taken: i64,
) -> Result<Settled, StoreError> {
    if let Some(old) = old {
        if old.trusted(&found.state, old_taken, cfg.racy_margin_ns) {
            // The content is vouched for; whether it is precious is the
            // ignore rules' of now (a `.gitignore` edited since may have
            // made an ignored file a plain one, or the reverse).
            return Ok(Settled::Keep(FileState {
                precious: found.state.precious,
                ..*old
            }));
        }
    }
    if old.is_none() && found.state.mode != MODE_LINK && found.state.size > cfg.untracked_cap {
        return Ok(Settled::TooLarge);
    }
    let abs = cfg.work_tree.join(&found.rel);
    let bytes = match read_content(&abs, found.state.mode) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settled::Gone),
        Err(e) => {
            // Unreadable: not observed, as `git add --ignore-errors`.
            tracing::warn!(path = %abs.display(), "checkpoint: not recorded: {e}");
            return Ok(Settled::Gone);
        }
    };
    let oid = write_object(objects, "blob", &bytes)?;
    let mut state = found.state;
    state.oid = oid;
    state.size = bytes.len() as u64;
    Ok(Settled::Keep(state))
}

/// The `.gitignore` matchers of the directories above `rel` (outermost
/// first), as a walk arriving at `rel` would hold them.
pub(crate) fn ancestor_matchers(root: &Path, rel: &str) -> Vec<Arc<Gitignore>> {
    let mut out = Vec::new();
    if rel.is_empty() {
        return out;
    }
    let mut dir = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for i in 0..parts.len() {
        if i > 0 {
            dir.push(parts[i - 1]);
        }
        if let Some(m) = cached_gitignore(&dir, &dir.join(".gitignore")) {
            out.push(m);
        }
    }
    out
}

/// A compiled ignore file (`.gitignore`, `.git/info/exclude`) rooted at
/// `root`, None when there is no such regular file. Compiled once per
/// version of the file: reused while its device, inode, size, mtime and
/// ctime are unchanged and that ctime is older than [`RACY_MARGIN_NS`] (a
/// rewrite within the same timestamp tick, same size, is not trusted to
/// the cache). Every transaction classifies its paths with these, so
/// compiling the project's globs anew for each action would cost more
/// than the action.
pub(crate) fn cached_gitignore(root: &Path, file: &Path) -> Option<Arc<Gitignore>> {
    type Identity = (u64, u64, u64, i64, i64);
    type Compiled = HashMap<PathBuf, (Identity, Arc<Gitignore>)>;
    static CACHE: OnceLock<Mutex<Compiled>> = OnceLock::new();
    /// Compiled ignore files kept at most (a project with more `.gitignore`
    /// files than this compiles the rest each time).
    const MAX_CACHED_IGNORE_FILES: usize = 4096;
    let meta = std::fs::metadata(file)
        .ok()
        .filter(std::fs::Metadata::is_file)?;
    let identity = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
    );
    let trusted = identity.4 < now_ns() - RACY_MARGIN_NS;
    let cache = CACHE.get_or_init(Mutex::default);
    if trusted {
        let map = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((id, m)) = map.get(file) {
            if *id == identity {
                return Some(m.clone());
            }
        }
    }
    let mut b = GitignoreBuilder::new(root);
    b.add(file);
    let built = Arc::new(b.build().unwrap_or_else(|_| Gitignore::empty()));
    if trusted {
        let mut map = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_CACHED_IGNORE_FILES {
            map.clear();
        }
        map.insert(file.to_path_buf(), (identity, built.clone()));
    }
    Some(built)
}

/// Drop the in-memory cache of a store (the next snapshot reads the one on
/// disk, as a new process would).
pub fn forget(git_dir: &Path) {
    flush_all();
    notify::forget(git_dir);
    memory()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(git_dir);
}

/// Whether two snapshots record the same content (paths, modes, blobs).
pub fn same_content(a: &BTreeMap<String, FileState>, b: &BTreeMap<String, FileState>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((pa, fa), (pb, fb))| pa == pb && fa.mode == fb.mode && fa.oid == fb.oid)
}

/// The tree of the last snapshot of a store, if the cache knows it.
pub fn cached_tree(git_dir: &Path, work_tree: &Path) -> Option<String> {
    if let Some(s) = memory()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(git_dir)
    {
        return Some(s.tree.clone());
    }
    load_cache(&cache_path(git_dir), work_tree).map(|s| s.tree)
}

fn previous_state(cfg: &ScanConfig) -> Option<TreeState> {
    let key = cfg.git_dir.to_path_buf();
    if let Some(s) = memory()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return Some(s.clone());
    }
    let loaded = load_cache(&cache_path(cfg.git_dir), cfg.work_tree)?;
    // Doubt: the tree it names must be in the store (loose, or packed by
    // a garbage collection that kept it).
    let objects = cfg.git_dir.join("objects");
    let packed = std::fs::read_dir(objects.join("pack"))
        .map(|mut d| d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "pack"))))
        .unwrap_or(false);
    if !object_path(&objects, &loaded.tree).exists() && !packed {
        return None;
    }
    Some(loaded)
}

fn remember(cfg: &ScanConfig, state: &TreeState, changed: bool) {
    memory()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(cfg.git_dir.to_path_buf(), state.clone());
    // On disk only when the content changed (or the cache is missing): an
    // unchanged tree's stat cache on disk stays valid, merely a little more
    // often racy.
    // Written by a thread of its own, off the action's path; a newer
    // state waiting to be written replaces an older one.
    let path = cache_path(cfg.git_dir);
    if changed || !path.exists() {
        save_in_background(path, cfg.work_tree.to_path_buf(), state.clone());
    }
}

type Pending = HashMap<PathBuf, (PathBuf, TreeState)>;

fn pending() -> &'static Mutex<Pending> {
    static PENDING: OnceLock<Mutex<Pending>> = OnceLock::new();
    PENDING.get_or_init(Mutex::default)
}

fn save_in_background(path: PathBuf, work_tree: PathBuf, state: TreeState) {
    let first = pending()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(path.clone(), (work_tree, state))
        .is_none();
    if first {
        std::thread::spawn(move || flush(&path));
    }
}

/// Write the newest pending state for `path` (until none is left).
fn flush(path: &Path) {
    loop {
        let next = pending()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(path);
        let Some((work_tree, state)) = next else {
            return;
        };
        if let Err(e) = save_cache(path, &work_tree, &state) {
            tracing::warn!(path = %path.display(), "checkpoint: stat cache not saved: {e}");
        }
    }
}

/// Wait until the stat caches are on disk (tests, and a CLI process that
/// is about to exit).
pub fn flush_all() {
    let paths: Vec<PathBuf> = pending()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .keys()
        .cloned()
        .collect();
    for p in paths {
        flush(&p);
    }
}

fn cache_path(git_dir: &Path) -> PathBuf {
    git_dir.parent().unwrap_or(git_dir).join("stat-cache")
}

const CACHE_MAGIC: &[u8; 8] = b"PPSTAT02";
/// At most this many entries are read back from a cache file (a bigger one
/// is treated as damaged and rebuilt).
const CACHE_MAX_ENTRIES: u64 = 10_000_000;

fn save_cache(path: &Path, work_tree: &Path, state: &TreeState) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(64 + state.files.len() * 96);
    out.extend_from_slice(CACHE_MAGIC);
    let wt = work_tree.as_os_str().as_encoded_bytes();
    out.extend_from_slice(&(wt.len() as u64).to_le_bytes());
    out.extend_from_slice(wt);
    out.extend_from_slice(state.tree.as_bytes());
    out.extend_from_slice(&state.taken_ns.to_le_bytes());
    out.extend_from_slice(&(state.files.len() as u64).to_le_bytes());
    for (p, f) in state.files.iter() {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(p.as_bytes());
        out.extend_from_slice(&f.mode.to_le_bytes());
        out.extend_from_slice(&f.perm.to_le_bytes());
        out.extend_from_slice(&f.oid);
        out.extend_from_slice(&f.size.to_le_bytes());
        out.extend_from_slice(&f.mtime_ns.to_le_bytes());
        out.extend_from_slice(&f.ctime_ns.to_le_bytes());
        out.extend_from_slice(&f.ino.to_le_bytes());
        out.extend_from_slice(&f.dev.to_le_bytes());
        out.push(u8::from(f.precious));
    }
    // A temporary file of its own per writer: two writers never mix.
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&out)?;
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

fn load_cache(path: &Path, work_tree: &Path) -> Option<TreeState> {
    let bytes = std::fs::read(path).ok()?;
    let mut r = Reader { rest: &bytes };
    if r.take(8)? != CACHE_MAGIC {
        return None;
    }
    let wt_len = r.u64()? as usize;
    if r.take(wt_len)? != work_tree.as_os_str().as_encoded_bytes() {
        return None;
    }
    let tree = std::str::from_utf8(r.take(40)?).ok()?.to_string();
    let taken_ns = r.u64()? as i64;
    let count = r.u64()?;
    if count > CACHE_MAX_ENTRIES {
        return None;
    }
    let mut files = BTreeMap::new();
    for _ in 0..count {
        let len = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        let p = std::str::from_utf8(r.take(len)?).ok()?.to_string();
        let mode = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
        let perm = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
        let oid: [u8; 20] = r.take(20)?.try_into().ok()?;
        let state = FileState {
            mode,
            perm,
            oid,
            size: r.u64()?,
            mtime_ns: r.u64()? as i64,
            ctime_ns: r.u64()? as i64,
            ino: r.u64()?,
            dev: r.u64()?,
            precious: r.take(1)?[0] != 0,
        };
        files.insert(p, state);
    }
    if !r.rest.is_empty() {
        return None;
    }
    Some(TreeState {
        tree,
        taken_ns,
        files: Arc::new(files),
    })
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Some(a)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// One file found by the walk, with its stat (oid not yet known).
struct Found {
    rel: String,
    state: FileState,
}

/// What a whole walk found.
struct Walked {
    found: Vec<Found>,
    /// Some file has more than one link (the watches cannot vouch for it).
    hardlinks: bool,
}

/// Walk the work tree: the root in this thread, its subdirectories shared
/// out to a few threads (stat calls dominate and parallelise well). With
/// `arming`, each directory is watched before it is read.
fn walk_tree(
    root: &Path,
    precious: &Gitignore,
    exclude: &Gitignore,
    arming: Option<&notify::Arming>,
) -> Result<Walked, StoreError> {
    let mut top = Walk {
        root,
        precious,
        exclude,
        found: Vec::new(),
        arming,
        hardlinks: false,
    };
    let mut subdirs = Vec::new();
    let mut root_matchers = Vec::new();
    top.dir(root, "", &mut root_matchers, Some(&mut subdirs))?;
    let threads = std::thread::available_parallelism()
        .map(std::num::NonZero::get)
        .unwrap_or(1)
        .clamp(1, 4)
        .min(subdirs.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = |_: usize| -> Result<(Vec<Found>, bool), StoreError> {
        let mut w = Walk {
            root,
            precious,
            exclude,
            found: Vec::new(),
            arming,
            hardlinks: false,
        };
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some((abs, rel)) = subdirs.get(i) else {
                return Ok((w.found, w.hardlinks));
            };
            let mut matchers = root_matchers.clone();
            w.dir(abs, rel, &mut matchers, None)?;
        }
    };
    let mut found = top.found;
    let mut hardlinks = top.hardlinks;
    if threads <= 1 {
        let (more, links) = work(0)?;
        found.extend(more);
        return Ok(Walked {
            found,
            hardlinks: hardlinks || links,
        });
    }
    let parts: Vec<Result<(Vec<Found>, bool), StoreError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|i| s.spawn(move || work(i))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(StoreError::Parse(
                        "a checkpoint walker thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    for part in parts {
        let (more, links) = part?;
        found.extend(more);
        hardlinks |= links;
    }
    Ok(Walked { found, hardlinks })
}

struct Walk<'a> {
    root: &'a Path,
    precious: &'a Gitignore,
    exclude: &'a Gitignore,
    found: Vec<Found>,
    /// Watch each directory before reading it (a whole walk).
    arming: Option<&'a notify::Arming>,
    /// A file with more than one link was seen.
    hardlinks: bool,
}

impl Walk<'_> {
    /// Walk `abs` (relative path `rel`, "" for the root). `matchers`: the
    /// `.gitignore`s of the enclosing directories, outermost first (this
    /// directory's is pushed; with `defer` it stays pushed, for the caller
    /// to walk the subdirectories, which are put into `defer`).
    fn dir(
        &mut self,
        abs: &Path,
        rel: &str,
        matchers: &mut Vec<Arc<Gitignore>>,
        mut defer: Option<&mut Vec<(PathBuf, String)>>,
    ) -> Result<(), StoreError> {
        let exclude = self.exclude;
        if let Some(arming) = self.arming {
            arming.watch(abs, rel);
        }
        let entries = match std::fs::read_dir(abs) {
            Ok(e) => e,
            Err(e) if rel.is_empty() => {
                return Err(StoreError::Io {
                    path: abs.to_path_buf(),
                    source: e,
                })
            }
            Err(e) => {
                tracing::warn!(path = %abs.display(), "checkpoint: directory not recorded: {e}");
                return Ok(());
            }
        };
        let mut entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
        let own = entries.iter().any(|e| e.file_name() == ".gitignore");
        if own {
            let mut b = GitignoreBuilder::new(abs);
            b.add(abs.join(".gitignore"));
            matchers.push(Arc::new(b.build().unwrap_or_else(|_| Gitignore::empty())));
        }
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name();
            if name == ".git" {
                continue; // the project's repository (or a nested one's)
            }
            let Some(name) = name.to_str() else {
                tracing::warn!(dir = %abs.display(), "checkpoint: a file name that is not UTF-8 is not recorded");
                continue;
            };
            let child_rel = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            let child_abs = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                if ignored(&child_abs, true, exclude, matchers) {
                    continue;
                }
                // A nested repository is its own project (git records it
                // as a submodule link): not entered.
                if std::fs::symlink_metadata(child_abs.join(".git")).is_ok() {
                    continue;
                }
                match defer.as_deref_mut() {
                    Some(later) => later.push((child_abs, child_rel)),
                    None => self.dir(&child_abs, &child_rel, matchers, None)?,
                }
                continue;
            }
            if !(ft.is_file() || ft.is_symlink()) {
                continue; // sockets, fifos, devices: not content
            }
            let is_ignored = ignored(&child_abs, false, exclude, matchers);
            let precious = is_ignored
                && self
                    .precious
                    .matched_path_or_any_parents(
                        child_abs.strip_prefix(self.root).unwrap_or(&child_abs),
                        false,
                    )
                    .is_ignore();
            if is_ignored && !precious {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if !ft.is_symlink() && meta.nlink() > 1 {
                self.hardlinks = true;
            }
            let mode = if ft.is_symlink() {
                MODE_LINK
            } else if meta.mode() & 0o111 != 0 {
                MODE_EXEC
            } else {
                MODE_FILE
            };
            self.found.push(Found {
                rel: child_rel,
                state: FileState {
                    mode,
                    perm: if ft.is_symlink() {
                        0
                    } else {
                        meta.mode() & 0o7777
                    },
                    oid: [0; 20],
                    size: meta.len(),
                    mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
                    ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
                    ino: meta.ino(),
                    dev: meta.dev(),
                    precious,
                },
            });
        }
        if own && defer.is_none() {
            matchers.pop();
        }
        Ok(())
    }
}

/// git's precedence: the deepest `.gitignore` with a matching pattern
/// decides (a `!pattern` re-includes), then `.git/info/exclude`.
pub(crate) fn ignored(
    abs: &Path,
    is_dir: bool,
    exclude: &Gitignore,
    matchers: &[Arc<Gitignore>],
) -> bool {
    for m in matchers.iter().rev() {
        match m.matched(abs, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    exclude.matched(abs, is_dir).is_ignore()
}

pub(crate) fn root_excludes(root: &Path) -> Gitignore {
    (*shared_root_excludes(root)).clone()
}

/// `.git/info/exclude` of the work tree, compiled once per version.
pub(crate) fn shared_root_excludes(root: &Path) -> Arc<Gitignore> {
    cached_gitignore(root, &root.join(".git/info/exclude"))
        .unwrap_or_else(|| Arc::new(Gitignore::empty()))
}

/// The precious matcher, compiled once per (work tree, globs).
pub(crate) fn cached_precious(root: &Path, globs: &[String]) -> Arc<Gitignore> {
    type Key = (PathBuf, Vec<String>);
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Gitignore>>>> = OnceLock::new();
    let mut map = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    map.entry((root.to_path_buf(), globs.to_vec()))
        .or_insert_with(|| Arc::new(precious_matcher(root, globs)))
        .clone()
}

/// Precious globs, in gitignore syntax, rooted at the work tree.
pub fn precious_matcher(root: &Path, globs: &[String]) -> Gitignore {
    let mut b = GitignoreBuilder::new(root);
    for g in globs {
        if let Err(e) = b.add_line(None, g) {
            tracing::warn!("checkpoint: bad precious glob {g:?}: {e}");
        }
    }
    b.build().unwrap_or_else(|_| Gitignore::empty())
}

fn read_content(abs: &Path, mode: u32) -> std::io::Result<Vec<u8>> {
    if mode == MODE_LINK {
        Ok(std::fs::read_link(abs)?
            .into_os_string()
            .into_encoded_bytes())
    } else {
        std::fs::read(abs)
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub fn hex(oid: &[u8]) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}

fn object_path(objects: &Path, hex: &str) -> PathBuf {
    objects
        .join(&hex[..2.min(hex.len())])
        .join(hex.get(2..).unwrap_or(""))
}

/// The id of a git object, and the object written as a loose object into
/// `objects` (zlib of `<kind> <len>\0<bytes>`) unless it is already there.
pub fn write_object(objects: &Path, kind: &str, bytes: &[u8]) -> Result<[u8; 20], StoreError> {
    let header = format!("{kind} {}\0", bytes.len());
    let mut h = Sha1::new();
    h.update(header.as_bytes());
    h.update(bytes);
    let oid: [u8; 20] = h.finalize().into();
    let hex = hex(&oid);
    if kind == "blob" {
        recent_blobs::keep(&hex, bytes);
    }
    let path = object_path(objects, &hex);
    if path.exists() {
        return Ok(oid);
    }
    let dir = path.parent().unwrap_or(objects);
    let io = |source| StoreError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    let z = deflated(header.as_bytes(), bytes).map_err(io)?;
    tmp.write_all(&z).map_err(io)?;
    // Another writer may have stored the same object meanwhile: fine.
    tmp.persist(&path).map_err(|e| io(e.error))?;
    Ok(oid)
}

/// Objects up to this size are deflated by [`deflated`] with a compressor
/// kept per thread; larger ones stream through a new encoder.
const REUSED_DEFLATE_MAX_BYTES: usize = 1024 * 1024;

/// `header` and `bytes` deflated as one zlib stream (git's loose object
/// format) with the fast level. The compressor is kept per thread and
/// reset for each object: a new one allocates and zeroes some 300 KiB of
/// tables, which cost more than compressing an action's few small
/// objects. Objects over [`REUSED_DEFLATE_MAX_BYTES`] get an encoder of
/// their own.
fn deflated(header: &[u8], bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use flate2::{Compress, FlushCompress, Status};
    use std::cell::RefCell;
    if bytes.len() > REUSED_DEFLATE_MAX_BYTES {
        let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(header)?;
        z.write_all(bytes)?;
        return z.finish();
    }
    thread_local! {
        static DEFLATE: RefCell<Compress> =
            RefCell::new(Compress::new(flate2::Compression::fast(), true));
    }
    DEFLATE.with(|c| {
        let mut c = c.borrow_mut();
        c.reset();
        let mut input = Vec::with_capacity(header.len() + bytes.len());
        input.extend_from_slice(header);
        input.extend_from_slice(bytes);
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let mut rest = &input[..];
        loop {
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            let (in_before, out_before) = (c.total_in(), c.total_out());
            let status = c
                .compress_vec(rest, &mut out, FlushCompress::Finish)
                .map_err(std::io::Error::other)?;
            let used = usize::try_from(c.total_in() - in_before).unwrap_or(rest.len());
            rest = &rest[used.min(rest.len())..];
            if status == Status::StreamEnd {
                return Ok(out);
            }
            if c.total_in() == in_before && c.total_out() == out_before {
                // No progress: it needs more room to write into.
                out.reserve(out.capacity().max(64));
            }
        }
    })
}

/// The bytes of the blobs written or found most recently, by id, so that
/// applying a changeset just read (or undoing the change just made) does
/// not read and inflate from the store what this process had in memory a
/// moment before. Content-addressed: an entry is right for every store.
/// Bounded: blobs over [`recent_blobs::MAX_BLOB_BYTES`] are not kept, and
/// at most [`recent_blobs::MAX_BLOBS`] / [`recent_blobs::MAX_TOTAL_BYTES`]
/// are, the oldest dropped first.
pub mod recent_blobs {
    use std::collections::VecDeque;
    use std::sync::{Mutex, OnceLock};

    /// A blob larger than this is read from the store when needed.
    pub const MAX_BLOB_BYTES: usize = 256 * 1024;
    /// Blobs kept at most.
    pub const MAX_BLOBS: usize = 64;
    /// Bytes kept at most, all blobs together.
    pub const MAX_TOTAL_BYTES: usize = 4 * 1024 * 1024;

    #[derive(Default)]
    struct Recent {
        blobs: VecDeque<(String, Vec<u8>)>,
        bytes: usize,
    }

    fn recent() -> std::sync::MutexGuard<'static, Recent> {
        static RECENT: OnceLock<Mutex<Recent>> = OnceLock::new();
        RECENT
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep `bytes`, whose blob id is `oid` (the caller hashed them).
    pub fn keep(oid: &str, bytes: &[u8]) {
        if bytes.len() > MAX_BLOB_BYTES {
            return;
        }
        let mut r = recent();
        if r.blobs.iter().any(|(o, _)| o == oid) {
            return;
        }
        while !r.blobs.is_empty()
            && (r.blobs.len() >= MAX_BLOBS || r.bytes + bytes.len() > MAX_TOTAL_BYTES)
        {
            if let Some((_, old)) = r.blobs.pop_front() {
                r.bytes -= old.len();
            }
        }
        r.bytes += bytes.len();
        r.blobs.push_back((oid.to_string(), bytes.to_vec()));
    }

    /// The bytes of the blob `oid`, if kept.
    pub fn get(oid: &str) -> Option<Vec<u8>> {
        recent()
            .blobs
            .iter()
            .rev()
            .find(|(o, _)| o == oid)
            .map(|(_, b)| b.clone())
    }
}

#[derive(Default)]
struct DirNode<'a> {
    files: Vec<(&'a str, u32, [u8; 20])>,
    dirs: BTreeMap<&'a str, DirNode<'a>>,
}

/// Write the tree objects for `files` (sorted paths) and return the root
/// tree's id.
pub fn write_trees(
    objects: &Path,
    files: &BTreeMap<String, FileState>,
) -> Result<String, StoreError> {
    let mut root = DirNode::default();
    for (path, f) in files {
        let mut node = &mut root;
        let mut parts = path.split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                node.files.push((part, f.mode, f.oid));
            } else {
                node = node.dirs.entry(part).or_default();
            }
        }
    }
    let mut known = HashSet::new();
    let oid = write_node(objects, &root, &mut known)?;
    Ok(hex(&oid))
}

/// A tree entry's name as git orders it: a directory's with a '/' after.
fn git_name_key(mode: u32, name: &str) -> impl Iterator<Item = u8> + '_ {
    let tail: &'static [u8] = if mode == MODE_TREE { b"/" } else { b"" };
    name.bytes().chain(tail.iter().copied())
}

fn write_node(
    objects: &Path,
    node: &DirNode,
    known: &mut HashSet<[u8; 20]>,
) -> Result<[u8; 20], StoreError> {
    // git sorts a tree by name, a directory's name compared as if it
    // ended in '/'.
    let mut items: Vec<(u32, &str, [u8; 20])> = Vec::with_capacity(node.files.len());
    for (name, mode, oid) in &node.files {
        items.push((*mode, name, *oid));
    }
    for (name, child) in &node.dirs {
        let oid = write_node(objects, child, known)?;
        items.push((MODE_TREE, name, oid));
    }
    items.sort_by(|a, b| git_name_key(a.0, a.1).cmp(git_name_key(b.0, b.1)));
    let mut body = Vec::with_capacity(items.len() * 48);
    for (mode, name, oid) in &items {
        let mode: &[u8] = match *mode {
            MODE_TREE => b"40000 ",
            MODE_EXEC => b"100755 ",
            MODE_LINK => b"120000 ",
            _ => b"100644 ",
        };
        body.extend_from_slice(mode);
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(oid);
    }
    let oid = write_object(objects, "tree", &body)?;
    known.insert(oid);
    Ok(oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_deflated_by_the_kept_compressor_inflate_to_what_was_given() {
        use std::io::Read;
        // Several objects in a row through the one compressor (each reset),
        // small, empty, incompressible, and one over the reuse limit.
        let mut noise = Vec::new();
        let mut x: u32 = 1;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            noise.push((x >> 16) as u8);
        }
        let big = vec![b'a'; REUSED_DEFLATE_MAX_BYTES + 1];
        for bytes in [
            &b"file 0\n"[..],
            &b""[..],
            &noise[..],
            &big[..],
            &b"again"[..],
        ] {
            let header = format!("blob {}\0", bytes.len());
            let z = deflated(header.as_bytes(), bytes).unwrap();
            let mut raw = Vec::new();
            flate2::read::ZlibDecoder::new(&z[..])
                .read_to_end(&mut raw)
                .unwrap();
            let mut want = header.into_bytes();
            want.extend_from_slice(bytes);
            assert_eq!(raw, want);
        }
    }

    #[test]
    fn recent_blobs_are_bounded_and_found_by_id() {
        let id = |n: usize| format!("{n:040x}");
        // Over the per-blob limit: not kept.
        recent_blobs::keep(&id(1), &vec![0; recent_blobs::MAX_BLOB_BYTES + 1]);
        assert!(recent_blobs::get(&id(1)).is_none());
        recent_blobs::keep(&id(2), b"two");
        assert_eq!(recent_blobs::get(&id(2)).as_deref(), Some(&b"two"[..]));
        // MAX_BLOBS later (other tests running alongside only add more),
        // it is gone.
        for n in 10..10 + recent_blobs::MAX_BLOBS {
            recent_blobs::keep(&id(n), b"x");
        }
        assert!(recent_blobs::get(&id(2)).is_none());
    }

    fn stat(mtime: i64) -> FileState {
        FileState {
            mode: MODE_FILE,
            perm: 0o644,
            oid: [1; 20],
            size: 4,
            mtime_ns: mtime,
            ctime_ns: mtime,
            ino: 7,
            dev: 1,
            precious: false,
        }
    }

    fn cfg<'a>(git_dir: &'a Path, work_tree: &'a Path, precious: &'a [String]) -> ScanConfig<'a> {
        ScanConfig {
            git_dir,
            work_tree,
            untracked_cap: 64,
            precious,
            watch: true,
            racy_margin_ns: 1_000_000,
        }
    }

    /// The state a fresh store (no cache, no watch) records: a whole walk.
    fn walked(work_tree: &Path, precious: &[String]) -> (String, Vec<String>) {
        let fresh = tempfile::tempdir().unwrap();
        let git = fresh.path().join("git");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        let mut c = cfg(&git, work_tree, precious);
        c.watch = false;
        let s = snapshot(&c).unwrap();
        assert_eq!(s.how, ScanKind::Walked);
        forget(&git);
        (s.state.tree, s.skipped)
    }

    #[test]
    fn the_watched_paths_record_what_a_whole_walk_records() {
        use std::os::unix::fs::PermissionsExt;
        let store = tempfile::tempdir().unwrap();
        let git = store.path().join("git");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        let precious = vec![".env".to_string()];
        for d in ["src/a", "src/b", "docs", "target"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::fs::write(t.join(".gitignore"), "target/\n.env\n*.log\n").unwrap();
        std::fs::write(t.join("src/a/x.rs"), "x").unwrap();
        std::fs::write(t.join("src/b/y.rs"), "y").unwrap();
        std::fs::write(t.join("docs/d.md"), "d").unwrap();
        std::fs::write(t.join(".env"), "K=1").unwrap();
        std::fs::write(t.join("big.bin"), vec![0u8; 100]).unwrap();
        let c = cfg(&git, t, &precious);
        let first = snapshot(&c).unwrap();
        assert_eq!(first.how, ScanKind::Walked);
        assert_eq!(first.skipped, ["big.bin"]);
        let again = snapshot(&c).unwrap();
        assert_eq!(again.how, ScanKind::Unchanged);
        assert_eq!(again.state.tree, first.state.tree);
        assert_eq!(again.skipped, ["big.bin"]);

        // Each step: the watched snapshot equals a whole walk of the tree.
        type Step = Box<dyn Fn(&Path)>;
        let steps: Vec<(&str, Step, ScanKind)> = vec![
            (
                "modify",
                Box::new(|t| std::fs::write(t.join("src/a/x.rs"), "x2").unwrap()),
                ScanKind::Incremental,
            ),
            (
                "create",
                Box::new(|t| std::fs::write(t.join("src/b/new.rs"), "n").unwrap()),
                ScanKind::Incremental,
            ),
            (
                "delete",
                Box::new(|t| std::fs::remove_file(t.join("docs/d.md")).unwrap()),
                ScanKind::Incremental,
            ),
            (
                "chmod",
                Box::new(|t| {
                    std::fs::set_permissions(
                        t.join("src/b/y.rs"),
                        std::fs::Permissions::from_mode(0o755),
                    )
                    .unwrap()
                }),
                ScanKind::Incremental,
            ),
            (
                "symlink",
                Box::new(|t| std::os::unix::fs::symlink("x.rs", t.join("src/a/l")).unwrap()),
                ScanKind::Incremental,
            ),
            (
                "ignored",
                Box::new(|t| std::fs::write(t.join("target/out"), "o").unwrap()),
                ScanKind::Unchanged,
            ),
            (
                "ignored log",
                Box::new(|t| std::fs::write(t.join("src/a/run.log"), "l").unwrap()),
                ScanKind::Incremental,
            ),
            (
                "precious",
                Box::new(|t| std::fs::write(t.join(".env"), "K=2").unwrap()),
                ScanKind::Incremental,
            ),
            (
                "too large",
                Box::new(|t| std::fs::write(t.join("src/b/huge"), vec![1u8; 100]).unwrap()),
                ScanKind::Incremental,
            ),
            (
                "rename",
                Box::new(|t| {
                    std::fs::rename(t.join("src/b/new.rs"), t.join("src/a/moved.rs")).unwrap()
                }),
                ScanKind::Incremental,
            ),
            (
                "same bytes",
                Box::new(|t| std::fs::write(t.join("src/a/x.rs"), "x2").unwrap()),
                ScanKind::Incremental,
            ),
            (
                "new dir",
                Box::new(|t| {
                    std::fs::create_dir(t.join("src/c")).unwrap();
                    std::fs::write(t.join("src/c/z"), "z").unwrap()
                }),
                ScanKind::Walked,
            ),
            (
                "gitignore",
                Box::new(|t| std::fs::write(t.join(".gitignore"), "target/\n").unwrap()),
                ScanKind::Walked,
            ),
            (
                "rm dir",
                Box::new(|t| std::fs::remove_dir_all(t.join("src/c")).unwrap()),
                ScanKind::Walked,
            ),
            (
                "hard link",
                Box::new(|t| {
                    std::fs::hard_link(t.join("src/a/x.rs"), t.join("docs/x.rs")).unwrap()
                }),
                ScanKind::Walked,
            ),
            (
                "through the other link",
                Box::new(|t| std::fs::write(t.join("docs/x.rs"), "via link").unwrap()),
                ScanKind::Walked,
            ),
        ];
        for (name, step, kind) in steps {
            step(t);
            let watched = snapshot(&c).unwrap();
            let (tree, skipped) = walked(t, &precious);
            assert_eq!(watched.how, kind, "{name}");
            assert_eq!(
                watched.state.tree, tree,
                "{name}: the tree differs from a whole walk"
            );
            assert_eq!(watched.skipped, skipped, "{name}: the skipped files differ");
        }
        assert_eq!(
            snapshot(&c).unwrap().state.files["src/a/x.rs"].oid,
            snapshot(&c).unwrap().state.files["docs/x.rs"].oid,
            "both links show the write"
        );
        forget(&git);
    }

    /// The differential check (on in every test build) stops a snapshot
    /// whose stat cache vouches for a blob the file does not hold, and
    /// lets a correct one through.
    #[test]
    fn a_stat_cache_that_misreads_the_tree_fails_the_differential_check() {
        assert!(differential_checks(), "on in debug builds");
        let store = tempfile::tempdir().unwrap();
        let git = store.path().join("git");
        std::fs::create_dir_all(git.join("objects")).unwrap();
        let tree = tempfile::tempdir().unwrap();
        std::fs::write(tree.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(tree.path().join("b.txt"), "b\n").unwrap();
        let mut c = cfg(&git, tree.path(), &[]);
        c.watch = false;
        // Older than the racy margin: the next walk trusts their stat.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let first = snapshot(&c).unwrap();
        assert_eq!(first.state.files.len(), 2);
        // A correct cache passes.
        assert_eq!(snapshot(&c).unwrap().state.tree, first.state.tree);
        // The cache now says a.txt holds b.txt's blob: stale.
        {
            let mut memory = memory().lock().unwrap();
            let cached = memory.get_mut(&git).unwrap();
            let mut files = (*cached.files).clone();
            let b = files["b.txt"].oid;
            files.get_mut("a.txt").unwrap().oid = b;
            cached.files = Arc::new(files);
        }
        let caught = std::panic::catch_unwind(|| snapshot(&c).map(|s| s.state.tree));
        forget(&git);
        let message = caught.expect_err("the stale cache passed the check");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            text.contains("disagrees with a fresh read") && text.contains("a.txt"),
            "{text}"
        );
    }

    #[test]
    fn a_racy_entry_is_not_trusted_even_with_identical_stat() {
        let t = 100 * 1_000_000_000;
        let old = stat(t - RACY_MARGIN_NS - 1);
        let m = RACY_MARGIN_NS;
        assert!(old.trusted(&old, t, m));
        // Written in the same granule as the snapshot: stat proves nothing.
        let racy = stat(t - 1);
        assert!(!racy.trusted(&racy, t, m));
        let mut other_inode = old;
        other_inode.ino = 8;
        assert!(!old.trusted(&other_inode, t, m));
        let mut other_ctime = old;
        other_ctime.ctime_ns += 1;
        assert!(!old.trusted(&other_ctime, t, m));
    }

    #[test]
    fn the_stat_cache_round_trips_and_rejects_another_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat-cache");
        let mut files = BTreeMap::new();
        files.insert("a/b.txt".to_string(), stat(5));
        let state = TreeState {
            tree: super::super::store::EMPTY_TREE.into(),
            taken_ns: 42,
            files: Arc::new(files),
        };
        save_cache(&path, Path::new("/w"), &state).unwrap();
        assert_eq!(load_cache(&path, Path::new("/w")).unwrap(), state);
        assert!(load_cache(&path, Path::new("/other")).is_none());
        // A cut file is doubt: rebuilt, never half-read.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        assert!(load_cache(&path, Path::new("/w")).is_none());
    }
}
