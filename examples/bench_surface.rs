//! How long the control-surface snapshot takes before each shell call, on
//! a generated tree of 10,000 files (100 folders of 100 files, in a git
//! repository with a nested one): the first snapshot of the tree (cold:
//! every folder listed) and the ones after it (no event since: the last
//! walk's result is taken whole), and with one file added before each
//! (one folder listed again, the rest of the walk from memory).
//!
//! `cargo run --example bench_surface [RUNS]`; `bench_surface RUNS DIR
//! [EVENT_DIR]` times instead what a tool call pays in the project DIR (a
//! snapshot before and the sweep after, nothing changed between), median
//! of RUNS; with EVENT_DIR (relative to DIR; use it on a copy, never on a
//! checkout you work in) a file is made and removed there before each
//! snapshot, so each one walks (the watch's events) instead of reusing.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use passepartout::sandbox::surface::SurfaceSnapshot;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Snapshot and sweep medians in `project`; `event` makes an event in
/// that folder before each snapshot.
fn in_project(project: &Path, runs: usize, event: Option<&Path>) {
    let _ = SurfaceSnapshot::take(project).sweep();
    let (mut takes, mut sweeps, mut looked_at, mut reused) = (Vec::new(), Vec::new(), 0, 0);
    for n in 0..runs {
        if let Some(dir) = event {
            let file = project.join(dir).join(format!(".bench-surface-{n}"));
            let _ = std::fs::write(&file, "");
            let _ = std::fs::remove_file(&file);
        }
        let started = Instant::now();
        let snapshot = SurfaceSnapshot::take(project);
        takes.push(started.elapsed());
        let started = Instant::now();
        let _ = snapshot.sweep();
        sweeps.push(started.elapsed());
        looked_at = snapshot.directories_looked_at();
        reused += usize::from(snapshot.reused_last_walk());
    }
    println!(
        "in {}{}: snapshot median {:?} (the last stat'ed {looked_at} directories; \
         {reused} of {runs} reused the last walk), sweep median {:?}",
        project.display(),
        event.map_or(String::new(), |d| format!(
            " (an event in {} before each)",
            d.display()
        )),
        median(takes),
        median(sweeps)
    );
}

/// What hashing the walk's keys costs: every directory's relative path
/// inserted into a map and looked up twice (the walk's and the sweep's
/// uses), with std's SipHash and with FxHash.
fn hashers(project: &Path, runs: usize) {
    let mut keys: Vec<PathBuf> = Vec::new();
    let mut queue = vec![PathBuf::new()];
    while let Some(rel) = queue.pop() {
        if let Ok(rd) = std::fs::read_dir(project.join(&rel)) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git" {
                    queue.push(rel.join(e.file_name()));
                }
            }
        }
        keys.push(rel);
    }
    fn time<S: BuildHasher + Default>(keys: &[PathBuf], runs: usize) -> Duration {
        let mut times = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let mut map: HashMap<PathBuf, usize, S> = HashMap::default();
            for (i, k) in keys.iter().enumerate() {
                map.insert(k.clone(), i);
            }
            let mut found = 0;
            for k in keys.iter().chain(keys) {
                found += usize::from(map.contains_key(k));
            }
            assert_eq!(found, 2 * keys.len());
            times.push(started.elapsed());
        }
        median(times)
    }
    println!(
        "hashing {} directory paths (insert + 2 lookups each): SipHash median {:?}, \
         FxHash median {:?}",
        keys.len(),
        time::<std::hash::RandomState>(&keys, runs),
        time::<rustc_hash::FxBuildHasher>(&keys, runs)
    );
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    if let Some(project) = std::env::args().nth(2) {
        let project = Path::new(&project);
        let event = std::env::args().nth(3).map(PathBuf::from);
        in_project(project, runs, None);
        if let Some(dir) = &event {
            in_project(project, runs, Some(dir));
        }
        hashers(project, runs);
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    for d in 0..100 {
        let folder = root.join(format!("src/mod{d:03}"));
        std::fs::create_dir_all(&folder)?;
        for f in 0..100 {
            std::fs::write(folder.join(format!("file{f:03}.rs")), "fn main() {}\n")?;
        }
    }
    std::fs::write(root.join("src/mod042/.envrc"), "")?;
    let git = |dir: &Path| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["init", "-q"])
            .status()
    };
    git(root)?;
    git(&root.join("src/mod007"))?;
    // Let the folders' change times fall out of the clock tick the walk
    // would distrust.
    std::thread::sleep(Duration::from_millis(1100));

    let started = Instant::now();
    let first = SurfaceSnapshot::take(root);
    let cold = started.elapsed();
    let mut warm = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let again = SurfaceSnapshot::take(root);
        warm.push(started.elapsed());
        assert!(again.reused_last_walk(), "no event: the walk is reused");
        assert_eq!(
            again.mounts(),
            first.mounts(),
            "the reuse changed the mounts"
        );
    }
    let mut one_changed = Vec::new();
    for n in 0..runs {
        std::fs::write(root.join(format!("src/mod050/new{n}.rs")), "")?;
        let started = Instant::now();
        let again = SurfaceSnapshot::take(root);
        one_changed.push(started.elapsed());
        assert!(!again.reused_last_walk() && again.directories_looked_at() == 1);
    }
    let mut uncached = Vec::new();
    for _ in 0..runs {
        passepartout::sandbox::surface::forget_walks();
        let started = Instant::now();
        let _ = SurfaceSnapshot::take(root);
        uncached.push(started.elapsed());
    }
    let mut git_reads = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let _ = passepartout::control_surface::git_named_paths(root, Path::new("/"));
        let _ = passepartout::control_surface::git_named_paths(
            &root.join("src/mod007"),
            Path::new("/"),
        );
        git_reads.push(started.elapsed());
    }
    println!(
        "of which the person's git settings (two repositories): median {:?}",
        median(git_reads)
    );
    println!(
        "snapshot of 10,000 files in 100 folders: first {cold:?}; without the walk cache \
         or the watch median {:?}; unchanged tree (the last walk reused) median {:?}; \
         one folder changed median {:?} ({runs} runs each)",
        median(uncached),
        median(warm),
        median(one_changed)
    );
    Ok(())
}
