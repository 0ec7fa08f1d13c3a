//! The one lexical path normaliser: `.` dropped, `..` applied, without
//! touching the disk. Gates, the control surface, effect gates and tool
//! confinement all compare paths this way, so they must agree on it.

use std::path::{Component, Path, PathBuf};

/// `path` with `.` components dropped and each `..` removing the component
/// before it; `..` above `/` stays at `/`, above a relative start it is
/// dropped. An empty result is `/` for an absolute path, else `.`.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(if path.is_absolute() { "/" } else { "." });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalisation() {
        let table = [
            ("/a/b/../c", "/a/c"),
            ("/a/./b/", "/a/b"),
            ("//a//b", "/a/b"),
            ("/..", "/"),
            ("/../../etc", "/etc"),
            ("/a/b/../../..", "/"),
            ("a/../b", "b"),
            ("a/..", "."),
            ("../a", "a"),
            ("./", "."),
            ("", "."),
            (
                "/home/p/.config/./passepartout/../passepartout/x",
                "/home/p/.config/passepartout/x",
            ),
        ];
        for (input, want) in table {
            assert_eq!(normalize(Path::new(input)), PathBuf::from(want), "{input}");
        }
    }
}
