//! The skill parse cache through the real binary: a cache file damaged on
//! disk costs one parse and one warning, never a skill, and is rewritten.

use crate::harness::cli;

const RULE_SKILL: &str = "#+SKILL: mine\n#+DESCRIPTION: Mine.\n* Rules :rules:\n** No rm\n:PROPERTIES:\n:DECISION: deny\n:TARGET: shell\n:PATTERN: \\brm\\b\n:END:\nDangerous.\n\n- match :: =rm x=\n- no match :: =ls=\n";

fn cache_files(home: &std::path::Path) -> Vec<std::path::PathBuf> {
    let dir = home.join("state/passepartout/skill-cache");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_garbage_cache_file_costs_a_warning_and_is_rewritten() {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let user = home.path().join("config/passepartout/skills");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("mine.org"), RULE_SKILL).unwrap();

    let (code, out) = cli(home.path(), project.path(), &["skills", "check"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 errors, 0 warnings"), "{out}");
    let files = cache_files(home.path());
    assert_eq!(files.len(), 1, "one cache file for the layers: {files:?}");
    let cache = &files[0];

    // Cut short (as after a crash of an older writer), then not JSON at all.
    let whole = std::fs::read(cache).unwrap();
    for garbage in [&whole[..whole.len() / 2], b"\0\xff garbage"] {
        std::fs::write(cache, garbage).unwrap();
        let (code, out) = cli(home.path(), project.path(), &["skills", "check"]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!(
                "{}:1:1: warning: the skill parse cache was not used and is rebuilt",
                cache.display()
            )),
            "{out}"
        );
        assert!(out.contains("0 errors, 1 warning"), "{out}");
        let rewritten = std::fs::read(cache).unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&rewritten).unwrap();
        assert!(
            stored["files"].as_array().is_some_and(|f| f.len() > 1),
            "{stored}"
        );
        let (code, out) = cli(home.path(), project.path(), &["skills", "check"]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("0 errors, 0 warnings"), "{out}");
    }

    // Damaged again: `skills list` still shows the skill.
    std::fs::write(cache, "not json {").unwrap();
    let (code, out) = cli(home.path(), project.path(), &["skills", "list"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("mine"), "{out}");
}
