//! How long loading skills takes, and what it costs in memory.
//!
//! Generates 200 realistic skill files (prose, a prompt, three tools with
//! parameter tables and bash/python/elisp bodies, two rules with examples)
//! in a temporary directory, waits the parse cache's settle margin (real
//! skill files are written long before a daemon starts), then loads them
//! the way a daemon's first `session/new` does, each time in a fresh
//! process (this example run again as a child): once with an empty parse
//! cache (every file parsed, the cache filled) and once with the cache
//! filled (what every later daemon start pays). It prints each load's time,
//! the resident memory it added and how many files the cache served (and
//! of those, how many were not even read), then the in-process median of
//! repeated (cached) loads and the cost of the per-turn "did anything
//! change?" check.
//!
//! `bench_skills --setup DIR [FILES]` only generates and trusts the files
//! under DIR, and `bench_skills --load DIR` loads them once, for profiling
//! one load on its own (`perf record -g`, `strace -c`).
//!
//! `cargo run --example bench_skills [FILES]` (default 200; issue 20's
//! figure is `1000`).

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use passepartout::skills::{SkillDirs, SkillLoader, SkillSet, TrustStore};

const DEFAULT_FILES: usize = 200;
const RUNS: usize = 7;

fn skill(i: usize) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "#+TITLE: Generated skill {i}\n#+SKILL: gen-{i}\n#+DESCRIPTION: Tools for project area {i}.\n#+PRIORITY: {}\n#+TRIGGER: /\\b(area{i}|project)\\b/\n\n",
        i % 100
    );
    for p in 0..4 {
        let _ = writeln!(
            s,
            "This paragraph {p} explains what area {i} is about and why these tools exist. It is\nfilled prose over a few lines, like a person would write it in Org, with =code=\nand *emphasis* and a [[https://example.com][link]].\n"
        );
    }
    let _ = write!(
        s,
        "* Guidance                                                          :prompt:\nWhen working on area {i}, list before you change, and explain each step.\n\n"
    );
    let _ = write!(
        s,
        "* area{i}_list                                                        :tool:\n:PROPERTIES:\n:APPROVAL: auto\n:TIMEOUT:  30\n:KIND:     read\n:END:\nList the files of area {i}, newest first.\n\n| name  | type    | required | description              | default |\n|-------+---------+----------+--------------------------+---------|\n| dir   | string  | no       | Directory to list.       | .       |\n| count | integer | no       | How many entries.        | 20      |\n| all   | boolean | no       | Include hidden files.    | no      |\n\n#+begin_src bash\nls -t ${{ARG_ALL:+-a}} \"$ARG_DIR\" | head -n \"$ARG_COUNT\"\n#+end_src\n\n"
    );
    let _ = write!(
        s,
        "* area{i}_stats                                                       :tool:\nCount lines per file type in area {i}.\n\n| name | type   | required | description     |\n|------+--------+----------+-----------------|\n| path | string | yes      | Where to count. |\n\n#+begin_src python\nimport os, collections\ncounts = collections.Counter()\nfor root, _, files in os.walk(os.environ[\"ARG_PATH\"]):\n    for f in files:\n        counts[os.path.splitext(f)[1]] += 1\nprint(counts.most_common(10))\n#+end_src\n\n"
    );
    let _ = write!(
        s,
        "* area{i}_open                                                        :tool:\n:PROPERTIES:\n:APPROVAL: ask\n:END:\nOpen a file of area {i} in the connected Emacs.\n\n| name | type   | required | description |\n|------+--------+----------+-------------|\n| file | string | yes      | The file.   |\n\n#+begin_src emacs-lisp\n(find-file file)\n#+end_src\n\n"
    );
    let _ = write!(
        s,
        "* Rules                                                              :rules:\n** Ask before deleting in area {i}\n:PROPERTIES:\n:DECISION: ask\n:TARGET:   shell\n:PATTERN:  \\brm\\s+.*area{i}\\b\n:END:\nArea {i} holds work that is hard to redo.\n\n- match :: =rm -rf data/area{i}=\n- no match :: =ls area{i}=\n\n** Never touch the archive of area {i}\n:PROPERTIES:\n:DECISION: deny\n:TARGET:   files\n:PATTERN:  /archive/area{i}/\n:END:\nThe archive is read-only by agreement.\n\n- match :: =/srv/archive/area{i}/x.txt=\n- no match :: =/srv/live/area{i}/x.txt=\n"
    );
    s
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Child mode: `bench_skills --load DIR` loads the skills set up in DIR
/// once and prints `<milliseconds> <KiB added> <cache hits> <of them unread>`.
fn child(root: &std::path::Path) {
    let dirs = dirs_in(root);
    let rss_before = rss_kib().unwrap_or(0);
    let start = Instant::now();
    let set = SkillSet::load(&dirs);
    let elapsed = start.elapsed();
    let rss_after = rss_kib().unwrap_or(0);
    println!(
        "{:.2} {} {} {}",
        elapsed.as_secs_f64() * 1e3,
        rss_after.saturating_sub(rss_before),
        set.cache_hits(),
        set.cache_unread()
    );
}

fn dirs_in(root: &std::path::Path) -> SkillDirs {
    SkillDirs {
        builtin: true,
        user: None,
        project: Some(root.join("skills")),
        trust: Some(
            TrustStore::in_state_dir(&root.join("state"))
                .path()
                .to_path_buf(),
        ),
        project_auto_approval: false,
    }
}

/// Run one child load and return its output line.
fn load_in_child(root: &std::path::Path) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .arg("--load")
        .arg(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "child load failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn print_child(what: &str, line: &str) {
    let mut parts = line.split_whitespace();
    let ms = parts.next().unwrap_or("?");
    let kib = parts.next().unwrap_or("?");
    let hits = parts.next().unwrap_or("?");
    let unread = parts.next().unwrap_or("?");
    println!(
        "{what}: {ms} ms, +{kib} KiB resident, {hits} files from the cache ({unread} not even read)"
    );
}

/// Generate `files` skill files under `root/skills` and trust each one in
/// `root/state`; returns their total size in bytes.
fn setup(root: &std::path::Path, files: usize) -> usize {
    let dir = root.join("skills");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(1);
    }
    let mut bytes = 0;
    // Project skills load only when trusted: trust every generated file,
    // so the figures include hashing each file against the trust store.
    let trust = TrustStore::in_state_dir(&root.join("state"));
    for i in 0..files {
        let text = skill(i);
        bytes += text.len();
        let path = dir.join(format!("gen-{i:04}.org"));
        if let Err(e) = std::fs::write(&path, &text) {
            eprintln!("cannot write a skill file: {e}");
            std::process::exit(1);
        }
        let canonical = path.canonicalize().unwrap_or(path);
        if let Err(e) = trust.trust(&canonical, text.as_bytes()) {
            eprintln!("cannot trust a skill file: {e}");
            std::process::exit(1);
        }
    }
    bytes
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--load") => {
            child(std::path::Path::new(&args[2]));
            return;
        }
        // Generate and trust only, for profiling `--load DIR` on its own.
        Some("--setup") => {
            let files = args
                .get(3)
                .and_then(|a| a.parse().ok())
                .unwrap_or(DEFAULT_FILES);
            setup(std::path::Path::new(&args[2]), files);
            return;
        }
        _ => {}
    }
    let files: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(DEFAULT_FILES);
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot create a temporary directory: {e}");
            std::process::exit(1);
        }
    };
    let bytes = setup(tmp.path(), files);
    let dirs = dirs_in(tmp.path());
    // Skill files are written long before a daemon starts: let them settle
    // (a file changed within the cache's settle margin of a load is read
    // and hashed even when its lstat is known).
    std::thread::sleep(passepartout::skills::cache::SETTLE_MARGIN);

    // A daemon start: a fresh process, first with an empty parse cache,
    // then with the cache the first one filled.
    let cold = load_in_child(tmp.path());
    let warm = load_in_child(tmp.path());

    let set = SkillSet::load(&dirs);
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let again = SkillSet::load(&dirs);
        times.push(start.elapsed());
        drop(again);
    }
    let tools: usize = set.skills().iter().map(|s| s.tools.len()).sum();
    let rules: usize = set.skills().iter().map(|s| s.rules.len()).sum();

    let mut loader = SkillLoader::new(dirs);
    let mut checks = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let reloaded = loader.refresh();
        checks.push(start.elapsed());
        assert!(!reloaded);
    }

    println!(
        "generated {files} skill files, {:.1} KiB in all (+ 4 built-in)",
        bytes as f64 / 1024.0
    );
    println!(
        "loaded {} skills, {tools} tools, {rules} rules, {} diagnostics",
        set.len(),
        set.diagnostics().len()
    );
    let m = median(times.clone());
    print_child("first load, empty cache (parse + fill)", &cold);
    print_child("first load, cache filled", &warm);
    println!(
        "in-process cached reload: median {:.2} ms over {RUNS} runs (min {:.2} ms, max {:.2} ms), {:.1} µs per file",
        m.as_secs_f64() * 1e3,
        times.iter().min().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        times.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        m.as_secs_f64() * 1e6 / files as f64
    );
    println!(
        "per-turn change check (no change): median {:.3} ms",
        median(checks).as_secs_f64() * 1e3
    );
}
