//! The shadow git store: snapshots of a project's working tree, kept in a
//! git repository of the daemon's own under the state directory.
//!
//! Snapshots are taken in Rust ([`super::scan`]: one walk, a stat cache,
//! loose objects written directly), so the hot path runs no git process;
//! the `git` binary reads the store (`diff-tree` for a plan's patch,
//! `cat-file` for restores and diffs) — the store is a plain git repository
//! a person can inspect with git.
//!
//! Isolation from the project's own repository is explicit: `GIT_DIR`,
//! `GIT_WORK_TREE` and `GIT_INDEX_FILE` point at the shadow store; the global
//! and system configuration are not read; hooks, fsmonitor and filters are
//! switched off with `-c`; `$GIT_DIR/info/attributes` (which outranks the
//! project's `.gitattributes`) turns off end-of-line conversion and filters,
//! so a blob is exactly the bytes on disk and a restore is byte for byte.
//! git never descends into a `.git` directory, so the project's repository
//! is neither recorded nor touched.

use std::collections::{BTreeMap, BTreeSet};

use super::beneath::{Beneath, BeneathError, Node};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha1::{Digest, Sha1};
use sha2::Sha256;

/// Errors of the shadow store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unexpected git output: {0}")]
    Parse(String),
    #[error(
        "refused: {count} file(s) changed since the checkpoint was recorded: {paths}; \
         nothing was changed"
    )]
    ChangedSince { count: usize, paths: String },
    #[error(transparent)]
    Beneath(#[from] BeneathError),
    #[error(
        "refused: a symbolic link is on the path of {count} file(s): {paths}; a restore \
         never follows a link out of the project; nothing was changed"
    )]
    Linked { count: usize, paths: String },
    #[error("refused: {reason}; nothing was changed")]
    Blocked { reason: String },
    #[error(
        "stopped: {reason}; every file this restore had already changed was put back, \
         the project is as it was"
    )]
    Stopped { reason: StepError },
    #[error(
        "stopped: {reason}; putting back what this restore had already changed failed too \
         ({rollback}): check {paths}"
    )]
    Broken {
        reason: StepError,
        rollback: StepError,
        paths: String,
    },
}

/// Why one step of a checked restore failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Beneath(#[from] BeneathError),
    #[error("blob {0} is missing from the store")]
    MissingBlob(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One entry of a tree: mode (`100644`, `100755`, `120000`, `160000`) and
/// blob id. `None` means "no file at this path".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub mode: String,
    pub oid: String,
    /// The file's permission bits when it was seen (git keeps only the
    /// executable bit; a restore puts back exactly these). Not part of
    /// the entry's identity: see [`Entry::same_content`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm: Option<u32>,
}

impl Entry {
    /// The same file as git sees it: mode and blob.
    pub fn same_content(&self, other: &Entry) -> bool {
        self.mode == other.mode && self.oid == other.oid
    }
}

/// One path that differs between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    pub path: String,
    pub old: Option<Entry>,
    pub new: Option<Entry>,
}

/// A snapshot of the working tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The tree id.
    pub tree: String,
    /// Untracked files left out because they exceed the size cap.
    pub skipped: Vec<String>,
    /// The project's vital `.git` entries present at the time.
    pub git_vitals: Vec<String>,
    /// Every recorded path with its stat, mode and blob id.
    pub files: std::sync::Arc<BTreeMap<String, super::scan::FileState>>,
}

/// The shadow repository for one working tree.
#[derive(Debug, Clone)]
pub struct Store {
    git_dir: PathBuf,
    index: PathBuf,
    work_tree: PathBuf,
    /// Untracked files larger than this are not recorded.
    untracked_cap: u64,
    /// Ignored files matching these globs (gitignore syntax) are recorded.
    precious: Vec<String>,
    /// Use the kernel's watches ([`super::notify`]).
    watch: bool,
    racy_margin_ns: i64,
}

/// The empty tree's id (sha1).
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

impl Store {
    /// The store directory for a work tree: `<root>/<sha256(cwd)[..16]>`.
    pub fn dir_for(root: &Path, work_tree: &Path) -> PathBuf {
        let digest = Sha256::digest(work_tree.as_os_str().as_encoded_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        root.join(hex)
    }

    /// Open (creating on first use) the shadow store for `work_tree` under
    /// `dir`.
    pub fn open(dir: &Path, work_tree: &Path, untracked_cap: u64) -> Result<Store, StoreError> {
        let git_dir = dir.join("git");
        let store = Store {
            index: dir.join("index"),
            git_dir,
            work_tree: work_tree.to_path_buf(),
            untracked_cap,
            precious: Vec::new(),
            watch: true,
            racy_margin_ns: super::scan::RACY_MARGIN_NS,
        };
        if !store.git_dir.join("HEAD").exists() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            // Made aside and renamed into place: two openers at once (a
            // session's warm-up and its first action, or two daemons) would
            // otherwise run `git init` into the same directory, and one
            // fails ("cannot mkdir …: File exists").
            let making = tempfile::Builder::new()
                .prefix(".git-init-")
                .tempdir_in(dir)
                .map_err(io(dir))?;
            let out = Command::new("git")
                .args(["init", "--quiet", "--bare"])
                .arg(making.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_TEMPLATE_DIR", "")
                .output()
                .map_err(StoreError::Spawn)?;
            if !out.status.success() {
                return Err(StoreError::Git {
                    args: "init".into(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
            let info = making.path().join("info");
            std::fs::create_dir_all(&info).map_err(io(&info))?;
            // Outranks the project's .gitattributes: blobs are the bytes on
            // disk, with no end-of-line conversion and no filter programs.
            let attributes = info.join("attributes");
            std::fs::write(
                &attributes,
                "* -text -filter -ident -working-tree-encoding\n",
            )
            .map_err(io(&attributes))?;
            match std::fs::rename(making.path(), &store.git_dir) {
                // Moved: nothing left for the guard to remove.
                Ok(()) => drop(making.keep()),
                // Another opener's store took the place first: use it (ours
                // is removed with the guard).
                Err(_) if store.git_dir.join("HEAD").is_file() => {}
                Err(e) => return Err(io(&store.git_dir)(e)),
            }
        }
        Ok(store)
    }

    /// Record ignored files matching these globs anyway (see
    /// `[checkpoints] precious`).
    pub fn with_precious(mut self, globs: Vec<String>) -> Store {
        self.precious = globs;
        self
    }

    /// Whether snapshots may use the kernel's watches (`[checkpoints]
    /// watch`).
    pub fn with_watch(mut self, watch: bool) -> Store {
        self.watch = watch;
        self
    }

    /// The store's object directory (blobs and trees are written there
    /// as loose objects).
    pub fn objects(&self) -> PathBuf {
        self.git_dir.join("objects")
    }

    /// The store's own directory (holds `git/`, `records/`, `txn/`).
    pub fn dir(&self) -> &Path {
        self.git_dir.parent().unwrap_or(&self.git_dir)
    }

    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("git");
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_CEILING_DIRECTORIES",
            "GIT_NAMESPACE",
        ] {
            cmd.env_remove(var);
        }
        let excludes = self.work_tree.join(".git/info/exclude");
        let excludes = if excludes.is_file() {
            excludes
        } else {
            PathBuf::from("/dev/null")
        };
        cmd.env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_INDEX_FILE", &self.index)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .args(["-c", "core.bare=false"])
            .args(["-c", "core.hooksPath=/dev/null"])
            .args(["-c", "core.fsmonitor=false"])
            .args(["-c", "core.untrackedCache=true"])
            .args(["-c", "core.autocrlf=false"])
            .args(["-c", "core.safecrlf=false"])
            .args(["-c", "core.quotePath=false"])
            .args(["-c", "core.symlinks=true"])
            .args(["-c", "core.fileMode=true"])
            .args(["-c", "gc.auto=0"])
            .args(["-c", "index.version=4"])
            .arg("-c")
            .arg(format!("core.excludesFile={}", excludes.display()))
            .current_dir(&self.work_tree)
            .stdin(Stdio::null());
        cmd
    }

    fn git(&self, args: &[&str]) -> Result<Vec<u8>, StoreError> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(StoreError::Spawn)?;
        if !out.status.success() {
            return Err(StoreError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(out.stdout)
    }

    /// Record the working tree as it is now: one walk, compared with the
    /// stat cache of the last snapshot ([`super::scan`]); only changed files
    /// are hashed, and no git process runs.
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let scanned = super::scan::snapshot(&super::scan::ScanConfig {
            git_dir: &self.git_dir,
            work_tree: &self.work_tree,
            untracked_cap: self.untracked_cap,
            precious: &self.precious,
            watch: self.watch,
            racy_margin_ns: self.racy_margin_ns,
        })?;
        let git_vitals = super::effect::git_vitals(&self.work_tree);
        Ok(Snapshot {
            tree: scanned.state.tree,
            skipped: scanned.skipped,
            git_vitals,
            files: scanned.state.files,
        })
    }

    /// The tree of the last snapshot (from the stat cache), if known.
    pub fn snapshot_tree(&self) -> Option<String> {
        super::scan::cached_tree(&self.git_dir, &self.work_tree)
    }

    /// Keep only the objects reachable from `roots` (tree ids), plus any
    /// younger than an hour: refs are written for the roots, then `git gc
    /// --prune=1.hour.ago` packs and drops the rest.
    ///
    /// `now`: drop unreachable objects whatever their age (eviction for
    /// the storage quota, under the project's lock), not only those older
    /// than an hour.
    pub fn collect_garbage(&self, roots: &[String], now: bool) -> Result<(), StoreError> {
        let mut input = String::from("start\n");
        let mut keep = std::collections::BTreeSet::new();
        for root in roots.iter().filter(|r| r.len() == 40) {
            keep.insert(format!("refs/keep/{root}"));
        }
        // Replace the previous set of keep refs wholesale: drop those no
        // longer kept (one update per ref: git refuses two in one
        // transaction), then (re)point the kept ones.
        let old = self.git(&["for-each-ref", "--format=%(refname)", "refs/keep/"])?;
        for r in String::from_utf8_lossy(&old).lines() {
            if !keep.contains(r) {
                input.push_str(&format!("delete {r}\n"));
            }
        }
        for r in &keep {
            let oid = r.trim_start_matches("refs/keep/");
            input.push_str(&format!("update {r} {oid}\n"));
        }
        input.push_str("prepare\ncommit\n");
        let mut child = self
            .command()
            .args(["update-ref", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(StoreError::Spawn)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .map_err(io(&self.git_dir))?;
        }
        let out = child.wait_with_output().map_err(StoreError::Spawn)?;
        if !out.status.success() {
            return Err(StoreError::Git {
                args: "update-ref --stdin".into(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let expire = if now {
            "--prune=now"
        } else {
            "--prune=1.hour.ago"
        };
        self.git(&["gc", "--quiet", expire])?;
        Ok(())
    }

    /// Bytes on disk of the objects reachable from `roots` (trees), packed
    /// or loose (`git rev-list --objects --disk-usage`): what the store
    /// would keep if only these were kept.
    pub fn disk_usage(&self, roots: &[String]) -> Result<u64, StoreError> {
        let mut args = vec!["rev-list", "--objects", "--disk-usage"];
        let mut seen = std::collections::BTreeSet::new();
        args.extend(
            roots
                .iter()
                .filter(|r| r.len() == 40 && seen.insert(r.as_str()))
                .map(String::as_str),
        );
        if args.len() == 3 {
            return Ok(0);
        }
        let out = self.git(&args)?;
        let text = String::from_utf8_lossy(&out);
        text.trim().parse().map_err(|_| StoreError::Git {
            args: "rev-list --disk-usage".into(),
            stderr: format!("not a byte count: {}", text.trim()),
        })
    }

    /// Bytes of this store's object database on disk.
    pub fn objects_bytes(&self) -> u64 {
        super::store_bytes(&self.git_dir.join("objects"))
    }

    /// Every path that differs between two trees.
    pub fn diff(&self, before: &str, after: &str) -> Result<Vec<RawChange>, StoreError> {
        if before == after {
            return Ok(vec![]);
        }
        let out = self.git(&[
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--raw",
            before,
            after,
        ])?;
        parse_raw(&out)
    }

    /// A unified diff between two trees, at most `cap` bytes (cut at a line).
    pub fn patch(&self, before: &str, after: &str, cap: usize) -> Result<String, StoreError> {
        let mut child = self
            .command()
            .args([
                "diff-tree",
                "-r",
                "-p",
                "--no-renames",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                before,
                after,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(StoreError::Spawn)?;
        let mut buf = Vec::new();
        if let Some(out) = child.stdout.take() {
            out.take(cap as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(io(&self.git_dir))?;
        }
        let _ = child.kill();
        let _ = child.wait();
        let mut text = String::from_utf8_lossy(&buf).to_string();
        if buf.len() > cap {
            let cut = text[..cap.min(text.len())].rfind('\n').unwrap_or(0);
            text.truncate(cut);
            text.push_str("\n… (diff cut at the size limit)\n");
        }
        Ok(text)
    }

    /// The contents of blobs, by id: loose objects are read (inflated) in
    /// Rust — an action's changeset writes its blobs loose, so applying
    /// it spawns no process — and the rest by one `cat-file --batch`.
    pub fn blobs(&self, oids: &[&str]) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        let mut result = BTreeMap::new();
        let packed: Vec<&str> = oids
            .iter()
            .copied()
            .filter(|oid| match self.loose_blob(oid) {
                Some(bytes) => {
                    result.insert(oid.to_string(), bytes);
                    false
                }
                None => true,
            })
            .collect();
        if packed.is_empty() {
            return Ok(result);
        }
        let oids = &packed[..];
        let mut child = self
            .command()
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(StoreError::Spawn)?;
        let mut input = String::new();
        for oid in oids {
            input.push_str(oid);
            input.push('\n');
        }
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| StoreError::Parse("no stdin".into()))?;
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let mut out = Vec::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout.read_to_end(&mut out).map_err(io(&self.git_dir))?;
        }
        let _ = writer.join();
        let _ = child.wait();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let nl = rest
                .iter()
                .position(|b| *b == b'\n')
                .ok_or_else(|| StoreError::Parse("cat-file header".into()))?;
            let header = String::from_utf8_lossy(&rest[..nl]).to_string();
            rest = &rest[nl + 1..];
            let parts: Vec<&str> = header.split(' ').collect();
            if parts.len() < 3 {
                continue; // "<oid> missing"
            }
            let size: usize = parts[2]
                .parse()
                .map_err(|_| StoreError::Parse(header.clone()))?;
            if rest.len() < size + 1 {
                return Err(StoreError::Parse("cat-file body".into()));
            }
            result.insert(parts[0].to_string(), rest[..size].to_vec());
            rest = &rest[size + 1..];
        }
        Ok(result)
    }

    /// A loose blob's bytes (None: not loose, not a blob, or damaged —
    /// the caller asks git).
    fn loose_blob(&self, oid: &str) -> Option<Vec<u8>> {
        if oid.len() != 40 || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        // Just written or read by this process (a changeset's blobs, read
        // a moment before it is applied): no read, no inflating.
        if let Some(bytes) = super::scan::recent_blobs::get(oid) {
            return Some(bytes);
        }
        let path = self.objects().join(&oid[..2]).join(&oid[2..]);
        // Read whole, then inflated in memory: the decoder reading the
        // file itself asked it for more after its end, again and again.
        let compressed = std::fs::read(path).ok()?;
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&compressed[..])
            .read_to_end(&mut raw)
            .ok()?;
        let nul = raw.iter().position(|b| *b == 0)?;
        let header = std::str::from_utf8(&raw[..nul]).ok()?;
        let len: usize = header.strip_prefix("blob ")?.parse().ok()?;
        let body = raw.split_off(nul + 1);
        // What was read must be what was asked for.
        (body.len() == len && blob_id(&body) == oid).then_some(body)
    }

    /// Sizes of blobs, by id.
    pub fn sizes(&self, oids: &[&str]) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut result = BTreeMap::new();
        if oids.is_empty() {
            return Ok(result);
        }
        let mut child = self
            .command()
            .args(["cat-file", "--batch-check=%(objectname) %(objectsize)"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(StoreError::Spawn)?;
        let input: String = oids.iter().map(|o| format!("{o}\n")).collect();
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| StoreError::Parse("no stdin".into()))?;
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout.read_to_string(&mut out).map_err(io(&self.git_dir))?;
        }
        let _ = writer.join();
        let _ = child.wait();
        for line in out.lines() {
            if let Some((oid, size)) = line.split_once(' ') {
                if let Ok(n) = size.parse() {
                    result.insert(oid.to_string(), n);
                }
            }
        }
        Ok(result)
    }

    /// What is at `rel` in the working tree now, as a tree entry, reached
    /// beneath the work tree without following any link.
    pub fn current(&self, rel: &str) -> Result<Option<Entry>, StoreError> {
        let b = self.beneath()?;
        current_in(&b, rel)
    }

    /// [`Store::current`] through the project already opened as `b`.
    pub fn current_beneath(b: &Beneath, rel: &str) -> Result<Option<Entry>, StoreError> {
        current_in(b, rel)
    }

    pub fn beneath(&self) -> Result<Beneath, StoreError> {
        Beneath::open(&self.work_tree).map_err(io(&self.work_tree))
    }

    /// Put the listed paths into the state `target` (None: no file), but
    /// only if every one of them is still in the state `expect` — otherwise
    /// refuse and change nothing. `(path, expect, target)`.
    ///
    /// All or nothing: every path is resolved beneath the work tree with
    /// no symlink followed, at the moment of each write; what would block
    /// a write (a directory holding other files, a file where a directory
    /// must go) is found before anything is written; and should a write
    /// still fail, what was already done is put back.
    pub fn restore(
        &self,
        changes: &[(String, Option<Entry>, Option<Entry>)],
    ) -> Result<(), StoreError> {
        self.restore_beneath(&self.beneath()?, changes)
    }

    /// [`Store::restore`] through the project already opened as `b` (an
    /// apply that has just checked each path through it).
    pub fn restore_beneath(
        &self,
        b: &Beneath,
        changes: &[(String, Option<Entry>, Option<Entry>)],
    ) -> Result<(), StoreError> {
        // Paths this restore removes (a file, or a link, that goes).
        let removed: BTreeSet<&str> = changes
            .iter()
            .filter(|(_, expect, target)| expect.is_some() && target.is_none())
            .map(|(p, _, _)| p.as_str())
            .collect();
        let mut differ = Vec::new();
        let mut linked = Vec::new();
        let mut blocked = Vec::new();
        let mut now_of: BTreeMap<&str, Option<Entry>> = BTreeMap::new();
        for (path, expect, target) in changes {
            let now = match current_in(b, path) {
                Ok(now) => now,
                Err(StoreError::Beneath(BeneathError::Link { .. })) => {
                    // A link this restore itself removes (an action replaced a
                    // directory with it) stands where the directory goes back.
                    match removed_link_above(b, path, &removed) {
                        true => None,
                        false => {
                            linked.push(path.clone());
                            continue;
                        }
                    }
                }
                Err(e) => return Err(e),
            };
            let consistent = match (&now, expect) {
                // A directory where no file was: it holds what the change
                // made there, all of which this restore removes.
                (Some(n), None) if n.mode == "040000" => {
                    let inside = b.files_under(path)?;
                    if inside.iter().all(|f| removed.contains(f.as_str())) {
                        true
                    } else {
                        blocked.push(format!(
                            "{path} is a directory holding files this change did not make"
                        ));
                        continue;
                    }
                }
                _ => same(&now, expect),
            };
            if !consistent {
                differ.push(path.clone());
                continue;
            }
            if target.is_some() {
                if let Some(why) = blocked_parent(b, path, &removed)? {
                    blocked.push(why);
                    continue;
                }
            }
            now_of.insert(path.as_str(), now);
        }
        if !linked.is_empty() {
            let (count, paths) = shown(linked);
            return Err(StoreError::Linked { count, paths });
        }
        if !differ.is_empty() {
            let (count, paths) = shown(differ);
            return Err(StoreError::ChangedSince { count, paths });
        }
        if !blocked.is_empty() {
            return Err(StoreError::Blocked {
                reason: shown(blocked).1,
            });
        }
        // The bytes to write, and those to put back should a step fail.
        let wanted: Vec<&str> = changes
            .iter()
            .flat_map(|(_, e, t)| [e.as_ref(), t.as_ref()])
            .flatten()
            .filter(|e| e.mode != "160000" && e.mode != "040000")
            .map(|e| e.oid.as_str())
            .collect();
        let blobs = self.blobs(&wanted)?;
        let mut done: Vec<(&str, Option<&Entry>)> = Vec::new();
        let result = apply_steps(b, changes, &now_of, &blobs, &mut done);
        let Err(reason) = result else {
            // What the daemon left, so the next action's changeset does
            // not take this write for someone else's (`super::left`).
            for (path, _, _) in changes {
                super::left::remember(b, path);
            }
            return Ok(());
        };
        // Put back, newest step first, what was already changed.
        let mut failed = Vec::new();
        for (path, prior) in done.iter().rev() {
            let back = match prior {
                None => b.remove(path).map_err(StepError::from),
                Some(e) => put_entry(b, path, e, &blobs, None),
            };
            if let Err(e) = back {
                failed.push((path.to_string(), e));
            }
        }
        let paths = failed
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match failed.into_iter().next() {
            None => Err(StoreError::Stopped { reason }),
            Some((_, rollback)) => Err(StoreError::Broken {
                reason,
                rollback,
                paths,
            }),
        }
    }
}

/// The steps of a checked restore: removals, then the directories they
/// emptied (git records no empty directories, so the action made them),
/// then writes. Each finished step is listed in `done` with what was there
/// before it, so a failure can be put back.
fn apply_steps<'a>(
    b: &Beneath,
    changes: &'a [(String, Option<Entry>, Option<Entry>)],
    now_of: &BTreeMap<&str, Option<Entry>>,
    blobs: &BTreeMap<String, Vec<u8>>,
    done: &mut Vec<(&'a str, Option<&'a Entry>)>,
) -> Result<(), StepError> {
    let mut emptied: Vec<String> = Vec::new();
    for (path, expect, target) in changes {
        if target.is_none() && expect.is_some() {
            b.remove(path)?;
            done.push((path.as_str(), expect.as_ref()));
            let mut parent = Path::new(path.as_str()).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                emptied.push(p.to_string_lossy().into_owned());
                parent = p.parent();
            }
        }
    }
    emptied.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    emptied.dedup();
    for dir in &emptied {
        b.remove_empty_dir(dir);
    }
    for (path, expect, target) in changes {
        let Some(entry) = target else { continue };
        if entry.mode == "160000" {
            continue; // a submodule: its contents are its own repository's
        }
        // Keep the permission bits of the file being replaced when the
        // record has none (a record written before they were kept).
        let keep = match now_of.get(path.as_str()) {
            Some(Some(now)) => now.perm,
            _ => None,
        };
        put_entry(b, path, entry, blobs, keep)?;
        done.push((path.as_str(), expect.as_ref()));
    }
    Ok(())
}

/// Write one tree entry at `path`: its recorded permission bits, else
/// `keep` (with the executable bits the mode says), else git's defaults.
fn put_entry(
    b: &Beneath,
    path: &str,
    entry: &Entry,
    blobs: &BTreeMap<String, Vec<u8>>,
    keep: Option<u32>,
) -> Result<(), StepError> {
    let bytes = blobs
        .get(&entry.oid)
        .ok_or_else(|| StepError::MissingBlob(entry.oid.clone()))?;
    let exec = entry.mode == "100755";
    let perm = match (entry.perm, keep) {
        (Some(p), _) => p,
        (None, Some(p)) if exec => p | ((p & 0o444) >> 2),
        (None, Some(p)) => p & !0o111,
        (None, None) if exec => 0o755,
        (None, None) => 0o644,
    };
    let link = entry.mode == "120000";
    Ok(b.put(path, bytes, perm, link)?)
}

/// What is at `rel` beneath `b`, as a tree entry.
fn current_in(b: &Beneath, rel: &str) -> Result<Option<Entry>, StoreError> {
    Ok(match b.node(rel)? {
        None => None,
        Some(Node::Symlink) => Some(Entry {
            mode: "120000".into(),
            oid: blob_id(&b.read_link(rel)?),
            perm: None,
        }),
        // A directory where a file was: "something else is here".
        Some(Node::Dir) | Some(Node::Other) => Some(Entry {
            mode: "040000".into(),
            oid: String::new(),
            perm: None,
        }),
        Some(Node::File { perm }) => Some(Entry {
            mode: if perm & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            }
            .into(),
            oid: blob_id(&b.read(rel)?),
            perm: Some(perm),
        }),
    })
}

/// Whether the link that stops `path` from resolving is one this restore
/// removes.
fn removed_link_above(b: &Beneath, path: &str, removed: &BTreeSet<&str>) -> bool {
    let mut prefix = String::new();
    for part in path.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        match b.node(&prefix) {
            Ok(Some(Node::Symlink)) => return removed.contains(prefix.as_str()),
            Ok(Some(Node::Dir)) => continue,
            _ => return false,
        }
    }
    false
}

/// Why a write at `path` could not happen: a file (not removed by this
/// restore) where one of its directories must be.
fn blocked_parent(
    b: &Beneath,
    path: &str,
    removed: &BTreeSet<&str>,
) -> Result<Option<String>, StoreError> {
    let mut prefix = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        match b.node(&prefix) {
            Ok(None) => return Ok(None),
            Ok(Some(Node::Dir)) => continue,
            Ok(Some(_)) if removed.contains(prefix.as_str()) => return Ok(None),
            Ok(Some(_)) => {
                return Ok(Some(format!(
                    "{path} cannot be written: {prefix} is not a directory"
                )))
            }
            Err(BeneathError::Link { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// At most ten paths, and how many there were.
fn shown(paths: Vec<String>) -> (usize, String) {
    let count = paths.len();
    let mut list: Vec<String> = paths.into_iter().take(10).collect();
    if count > 10 {
        list.push(format!("… {} more", count - 10));
    }
    (count, list.join(", "))
}

fn same(now: &Option<Entry>, expect: &Option<Entry>) -> bool {
    match (now, expect) {
        (None, None) => true,
        (Some(a), Some(b)) if b.mode == "160000" => a.mode == "040000",
        (Some(a), Some(b)) => a.same_content(b),
        _ => false,
    }
}

/// git's blob id: sha1 over `blob <len>\0<bytes>`.
pub fn blob_id(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Parse `diff-tree -r -z --raw`: `:m1 m2 o1 o2 S\0path\0`.
fn parse_raw(out: &[u8]) -> Result<Vec<RawChange>, StoreError> {
    let mut changes = Vec::new();
    let mut fields = out.split(|b| *b == 0).filter(|s| !s.is_empty());
    while let Some(meta) = fields.next() {
        let meta = String::from_utf8_lossy(meta);
        let path = fields
            .next()
            .ok_or_else(|| StoreError::Parse(meta.to_string()))?;
        let path = String::from_utf8_lossy(path).to_string();
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        if parts.len() < 5 {
            return Err(StoreError::Parse(meta.to_string()));
        }
        let entry = |mode: &str, oid: &str| {
            (mode != "000000").then(|| Entry {
                mode: mode.to_string(),
                oid: oid.to_string(),
                perm: None,
            })
        };
        changes.push(RawChange {
            path,
            old: entry(parts[0], parts[2]),
            new: entry(parts[1], parts[3]),
        });
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, tree: &Path) -> Store {
        Store::open(dir, tree, 1024 * 1024).unwrap()
    }

    #[test]
    fn snapshots_diff_and_restore_byte_for_byte() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::create_dir_all(t.join("src")).unwrap();
        std::fs::write(t.join("src/a.rs"), "fn a() {}\r\n").unwrap();
        std::fs::write(t.join("b.bin"), [0u8, 1, 2, 255]).unwrap();
        std::fs::write(t.join(".gitattributes"), "* text eol=crlf\n").unwrap();
        let s = store(state.path(), t);
        let before = s.snapshot().unwrap();

        std::fs::remove_file(t.join("src/a.rs")).unwrap();
        std::fs::write(t.join("b.bin"), "").unwrap();
        std::fs::write(t.join("new.txt"), "new\n").unwrap();
        let after = s.snapshot().unwrap();
        let changes = s.diff(&before.tree, &after.tree).unwrap();
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["b.bin", "new.txt", "src/a.rs"]);

        let back: Vec<_> = changes
            .iter()
            .map(|c| (c.path.clone(), c.new.clone(), c.old.clone()))
            .collect();
        s.restore(&back).unwrap();
        assert_eq!(std::fs::read(t.join("src/a.rs")).unwrap(), b"fn a() {}\r\n");
        assert_eq!(std::fs::read(t.join("b.bin")).unwrap(), [0u8, 1, 2, 255]);
        assert!(!t.join("new.txt").exists());
        assert_eq!(s.snapshot().unwrap().tree, before.tree);
    }

    #[test]
    fn restore_refuses_when_a_file_changed_since() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("a.txt"), "one").unwrap();
        let s = store(state.path(), t);
        let before = s.snapshot().unwrap();
        std::fs::write(t.join("a.txt"), "two").unwrap();
        let after = s.snapshot().unwrap();
        let changes = s.diff(&before.tree, &after.tree).unwrap();
        std::fs::write(t.join("a.txt"), "three").unwrap();
        let back: Vec<_> = changes
            .iter()
            .map(|c| (c.path.clone(), c.new.clone(), c.old.clone()))
            .collect();
        let err = s.restore(&back).unwrap_err().to_string();
        assert!(
            err.contains("changed since") && err.contains("a.txt"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(t.join("a.txt")).unwrap(), "three");
    }

    #[test]
    fn honours_gitignore_skips_large_untracked_and_never_records_dot_git() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::create_dir_all(t.join(".git")).unwrap();
        std::fs::write(t.join(".git/HEAD"), "ref: x").unwrap();
        std::fs::write(t.join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir_all(t.join("target")).unwrap();
        std::fs::write(t.join("target/out"), "x").unwrap();
        std::fs::write(t.join("big.dat"), vec![7u8; 2000]).unwrap();
        std::fs::write(t.join("small.txt"), "s").unwrap();
        let s = Store::open(state.path(), t, 1000).unwrap();
        let snap = s.snapshot().unwrap();
        assert_eq!(snap.skipped, ["big.dat"]);
        let all = s.diff(EMPTY_TREE, &snap.tree).unwrap();
        let paths: Vec<&str> = all.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, [".gitignore", "small.txt"]);
        // The big file shrinks: it is recorded from then on.
        std::fs::write(t.join("big.dat"), "now small").unwrap();
        let snap = s.snapshot().unwrap();
        assert!(snap.skipped.is_empty());
        let all = s.diff(EMPTY_TREE, &snap.tree).unwrap();
        assert!(all.iter().any(|c| c.path == "big.dat"));
    }

    #[test]
    fn a_nested_repository_without_commits_does_not_stop_snapshots() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::create_dir_all(t.join("sub")).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .current_dir(t.join("sub"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap()
            .success();
        assert!(ok);
        std::fs::write(t.join("a.txt"), "a").unwrap();
        let s = store(state.path(), t);
        let snap = s.snapshot().unwrap();
        let all = s.diff(EMPTY_TREE, &snap.tree).unwrap();
        assert_eq!(all[0].path, "a.txt");
    }

    fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn trees_written_in_rust_are_the_trees_git_writes() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        // Names whose order differs between "sorted paths" and git's tree
        // order ("a-b" < "a/" < "a.b" is wrong; git compares "a/" as a dir).
        for p in ["a/b.txt", "a-b", "a.b", "a0", "z/y/x.rs", "sp ace.txt"] {
            let abs = t.join(p);
            std::fs::create_dir_all(abs.parent().unwrap()).unwrap();
            std::fs::write(&abs, p).unwrap();
        }
        std::fs::write(t.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(t.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a/b.txt", t.join("link")).unwrap();
        std::fs::write(t.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(t.join("x.log"), "ignored").unwrap();
        // A deeper .gitignore re-includes what the root's ignores, and
        // ignores more of its own.
        std::fs::write(t.join("z/.gitignore"), "!keep.log\n*.tmp\n").unwrap();
        std::fs::write(t.join("z/keep.log"), "kept").unwrap();
        std::fs::write(t.join("z/y/q.tmp"), "ignored").unwrap();
        let s = store(state.path(), t);
        let snap = s.snapshot().unwrap();

        git_in(t, &["init", "-q"]);
        git_in(t, &["add", "-A"]);
        assert_eq!(snap.tree, git_in(t, &["write-tree"]));
        // The shadow store's objects are sound.
        let out = s.git(&["fsck", "--strict", "--no-dangling"]);
        assert!(out.is_ok(), "{out:?}");
    }

    #[test]
    fn the_stat_cache_catches_what_stat_alone_would_miss() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join("same.txt"), "aaaa").unwrap();
        std::fs::write(t.join("gone.txt"), "gone").unwrap();
        std::fs::write(t.join("tool"), "x").unwrap();
        std::fs::write(t.join("k.tmp"), "tmp").unwrap();
        // Old enough not to be racy.
        for f in ["same.txt", "gone.txt", "tool", "k.tmp"] {
            let ok = Command::new("touch")
                .args(["-d", "2020-01-01 00:00:00"])
                .arg(t.join(f))
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }
        // A small racy margin, so that stat alone must tell (the full
        // margin would rehash everything touched in the last 2 s).
        let mut s = store(state.path(), t);
        s.racy_margin_ns = 10_000_000;
        std::thread::sleep(std::time::Duration::from_millis(30));
        let first = s.snapshot().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let oid = |snap: &Snapshot, p: &str| {
            snap.files
                .get(p)
                .map(super::super::scan::FileState::oid_hex)
        };

        // Same size, mtime put back with `touch -d`: ctime and inode differ.
        std::fs::remove_file(t.join("same.txt")).unwrap();
        std::fs::write(t.join("same.txt"), "bbbb").unwrap();
        Command::new("touch")
            .args(["-d", "2020-01-01 00:00:00"])
            .arg(t.join("same.txt"))
            .status()
            .unwrap();
        // Deleted and recreated with the same content: same blob.
        std::fs::remove_file(t.join("gone.txt")).unwrap();
        std::fs::write(t.join("gone.txt"), "gone").unwrap();
        // The exec bit alone.
        std::fs::set_permissions(t.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A symlink appears.
        std::os::unix::fs::symlink("same.txt", t.join("ln")).unwrap();
        let second = s.snapshot().unwrap();
        assert_eq!(oid(&second, "same.txt"), Some(blob_id(b"bbbb")));
        assert_eq!(oid(&second, "gone.txt"), oid(&first, "gone.txt"));
        assert_eq!(second.files["tool"].mode_str(), "100755");
        assert_eq!(second.files["ln"].mode_str(), "120000");
        assert_eq!(oid(&second, "ln"), Some(blob_id(b"same.txt")));
        let changed: Vec<String> =
            super::super::effect::ObservedEffect::between_snapshots(&first, &second)
                .changes
                .into_iter()
                .map(|c| c.path)
                .collect();
        assert_eq!(changed, ["ln", "same.txt", "tool"]);

        // A .gitignore change is re-evaluated at once.
        std::fs::write(t.join(".gitignore"), "*.tmp\n").unwrap();
        let third = s.snapshot().unwrap();
        assert!(!third.files.contains_key("k.tmp"));
        std::fs::remove_file(t.join(".gitignore")).unwrap();
        let fourth = s.snapshot().unwrap();
        assert!(fourth.files.contains_key("k.tmp"));

        // Nothing changed: the same tree, and a fresh process (no memory
        // cache, the stat cache from disk) agrees.
        assert_eq!(s.snapshot().unwrap().tree, fourth.tree);
        super::super::scan::forget(&s.git_dir);
        assert_eq!(s.snapshot().unwrap().tree, fourth.tree);
        std::fs::write(state.path().join("stat-cache"), "garbage").unwrap();
        super::super::scan::forget(&s.git_dir);
        assert_eq!(s.snapshot().unwrap().tree, fourth.tree);
    }

    #[test]
    fn ignored_precious_files_are_recorded_and_marked() {
        let state = tempfile::tempdir().unwrap();
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::write(t.join(".gitignore"), ".env\ntarget/\n*.log\n").unwrap();
        std::fs::write(t.join(".env"), "KEY=1").unwrap();
        std::fs::write(t.join("x.log"), "log").unwrap();
        std::fs::create_dir_all(t.join("target")).unwrap();
        std::fs::write(t.join("target/.env"), "in an ignored dir").unwrap();
        let s = store(state.path(), t).with_precious(vec![".env".into()]);
        let snap = s.snapshot().unwrap();
        let paths: Vec<&str> = snap.files.keys().map(String::as_str).collect();
        assert_eq!(paths, [".env", ".gitignore"]);
        assert!(snap.files[".env"].precious);
        std::fs::remove_file(t.join(".env")).unwrap();
        let after = s.snapshot().unwrap();
        let e = super::super::effect::ObservedEffect::between_snapshots(&snap, &after);
        assert_eq!(e.precious, [".env"]);
    }

    #[test]
    fn blob_ids_match_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }
}
