//! What several benches share: a project tree to measure in and the
//! median of their rounds. Included with `#[path]`; not an example itself.

// Each bench uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

/// `files` small files in folders of 100 under `root`, and a `.gitignore`.
pub fn build_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
}

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
