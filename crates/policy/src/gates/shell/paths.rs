//! Paths as the gates see them: `~` and `$HOME` expanded, made absolute
//! against the working directory, normalised lexically, globs stripped.

use std::path::{Path, PathBuf};

use crate::gates::GateContext;
pub use crate::util::path::normalize;

/// Expand `~`, `$HOME` and `${HOME}` at the start of a path, make it
/// absolute against `cwd`, and normalise it lexically (`//`, `/./`, trailing
/// `/`, `..`). A trailing glob (`/*`, `/.*`) is kept as the last component.
pub fn resolve_path(word: &str, ctx: &GateContext) -> PathBuf {
    let mut expanded = expand_home(word, ctx.home.as_deref());
    if let Some(rest) = expanded.strip_prefix('~') {
        // `~name`: another account's home.
        let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
        if !user.is_empty()
            && user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            let home = if user == "root" {
                "/root".to_string()
            } else {
                format!("/home/{user}")
            };
            expanded = format!("{home}/{tail}");
        }
    }
    let path = Path::new(&expanded);
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        ctx.cwd.join(path)
    };
    normalize(&joined)
}

/// Strip a trailing glob component: `/etc/*` → (`/etc`, true).
pub fn strip_glob(path: &Path) -> (PathBuf, bool) {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(name) if name == "*" || name == ".*" || name == "*.*" || name == "{*,.*}" => {
            let parent = path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| "/".into());
            (parent, true)
        }
        _ => (path.to_path_buf(), false),
    }
}

/// Expand a leading `~`, `$HOME` or `${HOME}`.
pub fn expand_home(word: &str, home: Option<&Path>) -> String {
    let Some(home) = home else {
        return word.to_string();
    };
    let home = home.to_string_lossy();
    for prefix in ["~", "$HOME", "${HOME}"] {
        if let Some(rest) = word.strip_prefix(prefix) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{home}{rest}");
            }
        }
    }
    word.to_string()
}
