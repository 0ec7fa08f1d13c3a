//! The control surface's last walk taken whole (issue 20: a tool call in a
//! large project costs what it costs in an empty one): when the project's
//! inotify watch drained no event at all since the last walk, the next
//! snapshot reuses that walk's result instead of walking the tree again,
//! and looks again only at what the watch cannot see — the insides of the
//! directories holding control entries (`.git/hooks`, `.git/config`) and
//! the files the person's git settings name.
//!
//! Through the real binary (fake provider, real bubblewrap, real inotify):
//!
//! - the reuse happens: the daemon's debug log says so for a call after an
//!   unchanged tree;
//! - it is never too eager: what the person changes between two calls
//!   where the watch cannot see it (hooks made inside a nested
//!   repository's `.git`, a `core.hooksPath` set in `.git/config`) and
//!   where it can (a nested `.envrc`, `git init` in a subfolder) is
//!   read-only at the very next call, in an overlaid run and an observed
//!   one.
//!
//! Tests that need bubblewrap say so and return when it cannot run here.

use crate::harness;
use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use super::surface_watch::{attack, turn, warm, CONFIG, OBSERVED};
use harness::{Client, Framing};
use serde_json::json;
use support::fake_provider::FakeProvider;

/// What the debug log says of a snapshot that took the last walk whole.
const REUSED: &str = "the last walk reused: no event since";

/// A project with a tree and a nested repository (`vendor/lib`) whose
/// `.git` has no hooks folder yet, in a repository of its own.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    for d in ["src/a/b/c", "docs/d", "vendor", "githooks"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join("src/a/b/c/lib.rs"), "// lib\n").unwrap();
    std::fs::write(p.join("githooks/pre-commit"), "#!/bin/sh\n").unwrap();
    harness::git(p, &["init", "-q"]);
    harness::git(&p.join("vendor"), &["init", "-q", "lib"]);
    std::fs::remove_dir_all(p.join("vendor/lib/.git/hooks")).unwrap();
    dir
}

/// A daemon logging at debug level to `log`, with a session in `project`.
async fn daemon(home: &Path, log: &Path, url: &str, project: &Path) -> (Client, String) {
    let config_file = home.join("config/passepartout/config.toml");
    let mut config = std::fs::read_to_string(&config_file).unwrap();
    config.insert_str(0, &format!("log_file = {:?}\n", log.display().to_string()));
    std::fs::write(&config_file, config).unwrap();
    let mut client = Client::spawn_wrapped(
        Framing::Ndjson,
        home,
        &[
            "env",
            "PASSEPARTOUT_LOG=warn,passepartout_sandbox::sandbox::surface=debug",
        ],
        &["--provider-url", url],
    );
    client.initialize(json!({})).await;
    let session = client.new_session(project).await;
    (client, session)
}

/// The daemon's log once it holds `count` lines with `needle` (it is
/// written by a thread of its own), or whatever it holds after 10 s.
fn log_with(log: &Path, needle: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= count || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The snapshot lines of the log, one per shell call.
fn snapshot_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("control surface of"))
        .collect()
}

#[tokio::test]
async fn an_unchanged_project_reuses_the_last_walk() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let log = home.path().join("daemon.log");
    let project = project();
    let mut script = warm("w");
    script.extend(warm("v"));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (mut client, session) = daemon(home.path(), &log, &url, project.path()).await;
    turn(&mut client, &session, "warm").await;
    turn(&mut client, &session, "again").await;
    let text = log_with(&log, REUSED, 3);
    let lines = snapshot_lines(&text);
    assert_eq!(lines.len(), 4, "one snapshot per call:\n{text}");
    // The first call walks, unless the session's warm-up walked first
    // (the test below): either way the later ones reuse.
    for line in &lines[1..] {
        assert!(
            line.contains(REUSED) && line.contains(" 0 stat'ed"),
            "nothing changed since the first walk: {line}\n{text}"
        );
    }
}

/// What the debug log says once a session's warm-up walked its project.
const WARMED: &str = "walked ahead of its first call";

/// A session opening walks its project in the background, so its first
/// call, made after that, takes the walk whole instead of paying it.
#[tokio::test]
async fn a_session_walks_its_project_before_its_first_call() {
    if !harness::bwrap_available() {
        return;
    }
    let home = harness::home_with_config(CONFIG);
    let log = home.path().join("daemon.log");
    let project = project();
    let fake = FakeProvider::start(warm("w")).await;
    let url = fake.openai_url();
    let (mut client, session) = daemon(home.path(), &log, &url, project.path()).await;
    let text = log_with(&log, WARMED, 1);
    assert!(
        text.contains(WARMED),
        "the session's warm-up walked:\n{text}"
    );
    turn(&mut client, &session, "warm").await;
    let text = log_with(&log, REUSED, 1);
    let lines = snapshot_lines(&text);
    assert!(
        lines
            .first()
            .is_some_and(|l| l.contains(REUSED) && l.contains(" 0 stat'ed")),
        "the first call took the warm-up's walk:\n{text}"
    );
}

/// Between two calls of which the second reused the walk, the person makes
/// hooks inside a nested repository's `.git` (not watched), sets
/// `core.hooksPath` in the project's `.git/config` (not watched either),
/// makes a nested `.envrc` and a repository in a subfolder (events): the
/// next call finds each read-only.
async fn what_the_person_changes_is_read_only_at_the_next_call(config: &str) {
    let home = harness::home_with_config(config);
    let log = home.path().join("daemon.log");
    let project = project();
    let p = project.path();
    let hook = "vendor/lib/.git/hooks/pre-commit";
    let files = [
        hook,
        "githooks/pre-commit",
        "src/a/b/c/.envrc",
        "docs/d/sub/.git/config",
    ];
    let mut script = warm("w");
    script.extend(attack("x", &files[..2]));
    script.extend(attack("y", &files));
    let fake = FakeProvider::start(script).await;
    let url = fake.openai_url();
    let (mut client, session) = daemon(home.path(), &log, &url, p).await;
    turn(&mut client, &session, "warm").await;
    let text = log_with(&log, REUSED, 1);
    assert!(text.contains(REUSED), "the second call reused:\n{text}");

    // Only where the watch cannot see: inside `.git`.
    std::fs::create_dir_all(p.join("vendor/lib/.git/hooks")).unwrap();
    std::fs::write(p.join(hook), "#!/bin/sh\n").unwrap();
    harness::git(p, &["config", "core.hooksPath", "githooks"]);
    turn(&mut client, &session, "inside .git").await;
    let text = log_with(&log, REUSED, 2);
    let lines = snapshot_lines(&text);
    assert!(
        lines.last().is_some_and(|l| l.contains(REUSED)),
        "no event in a watched folder: the walk is reused:\n{text}"
    );
    let told = fake.last_tool_results().join("\n");
    assert!(told.contains(&format!("REFUSED {hook}")), "{told}");
    assert!(told.contains("REFUSED githooks/pre-commit"), "{told}");

    // And where it can: events, so the tree is walked again.
    std::fs::write(p.join("src/a/b/c/.envrc"), "export A=1\n").unwrap();
    harness::git(&p.join("docs/d"), &["init", "-q", "sub"]);
    turn(&mut client, &session, "events").await;
    let told = fake.last_tool_results().join("\n");
    for f in files {
        assert!(told.contains(&format!("REFUSED {f}")), "{f}: {told}");
    }
    assert_eq!(
        std::fs::read_to_string(p.join(hook)).unwrap(),
        "#!/bin/sh\n"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("src/a/b/c/.envrc")).unwrap(),
        "export A=1\n"
    );
}

#[tokio::test]
async fn what_the_person_changes_between_reused_walks_is_read_only_overlaid() {
    if !harness::bwrap_available() {
        return;
    }
    what_the_person_changes_is_read_only_at_the_next_call(CONFIG).await;
}

#[tokio::test]
async fn what_the_person_changes_between_reused_walks_is_read_only_observed() {
    if !harness::bwrap_available() {
        return;
    }
    what_the_person_changes_is_read_only_at_the_next_call(OBSERVED).await;
}
