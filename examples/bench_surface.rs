//! How long the control-surface snapshot takes before each shell call, on
//! a generated tree of 10,000 files (100 folders of 100 files, in a git
//! repository with a nested one): the first snapshot of the tree (cold:
//! every folder listed) and the ones after it (every folder unchanged
//! since the last walk is taken from the walk cache), and after one file
//! is added (one folder listed again).
//!
//! `cargo run --example bench_surface [RUNS]`; `bench_surface RUNS DIR`
//! times instead what a tool call pays in the project DIR (a snapshot
//! before and the sweep after, nothing changed between), median of RUNS.

use std::time::{Duration, Instant};

use passepartout::sandbox::surface::SurfaceSnapshot;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    if let Some(project) = std::env::args().nth(2) {
        let project = std::path::Path::new(&project);
        let _ = SurfaceSnapshot::take(project).sweep();
        let (mut takes, mut sweeps, mut looked_at) = (Vec::new(), Vec::new(), 0);
        for _ in 0..runs {
            let started = Instant::now();
            let snapshot = SurfaceSnapshot::take(project);
            takes.push(started.elapsed());
            let started = Instant::now();
            let _ = snapshot.sweep();
            sweeps.push(started.elapsed());
            looked_at = snapshot.directories_looked_at();
        }
        println!(
            "in {}: snapshot median {:?} (the last stat'ed {looked_at} directories), \
             sweep median {:?} ({runs} runs)",
            project.display(),
            median(takes),
            median(sweeps)
        );
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
    let git = |dir: &std::path::Path| {
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
        assert_eq!(
            again.mounts(),
            first.mounts(),
            "the cache changed the mounts"
        );
    }
    std::fs::write(root.join("src/mod050/new.rs"), "")?;
    let started = Instant::now();
    let _ = SurfaceSnapshot::take(root);
    let one_changed = started.elapsed();
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
        let _ = passepartout::control_surface::git_named_paths(root, std::path::Path::new("/"));
        let _ = passepartout::control_surface::git_named_paths(
            &root.join("src/mod007"),
            std::path::Path::new("/"),
        );
        git_reads.push(started.elapsed());
    }
    println!(
        "of which the person's git settings (two repositories): median {:?}",
        median(git_reads)
    );
    println!(
        "snapshot of 10,000 files in 100 folders: first {cold:?}; without the walk cache \
         median {:?}; with it, unchanged tree median {:?}; one folder changed {one_changed:?} \
         ({runs} runs each)",
        median(uncached),
        median(warm)
    );
    Ok(())
}
