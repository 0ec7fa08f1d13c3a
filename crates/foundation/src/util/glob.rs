//! The one glob matcher every rule uses: shell patterns (`*`, `?`,
//! `[abc]`, `[a-z]`, `[!x]`/`[^x]`) compiled by `globset`.
//!
//! Two ways to treat `/`, because two kinds of text are matched:
//! - [`Slash::Stops`]: paths, as the shell expands them — `*`, `?` and a
//!   class never match a `/`, so `/[d-f]tc` names `/etc` and `/u*/lib`
//!   names `/usr/lib` but not `/usr/local/lib`;
//! - [`Slash::Matches`]: names that are not paths to expand (a rule's tool
//!   and target, `git_*`, `/etc/*`) — `*` matches any run of characters.
//!
//! A pattern globset cannot compile (an unterminated `[`) is matched
//! literally, as bash does.

use globset::{GlobBuilder, GlobMatcher};

/// Whether `*`, `?` and classes may match a `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slash {
    /// Path semantics: wildcards stop at `/`.
    Stops,
    /// Name semantics: `*` matches anything, `/` included.
    Matches,
}

/// A compiled shell pattern.
#[derive(Debug, Clone)]
pub enum Glob {
    Pattern(GlobMatcher),
    /// Not a valid pattern: only this very text matches.
    Literal(String),
}

impl Glob {
    /// `pattern` compiled with `slash`; a pattern that is not a valid glob
    /// (an unterminated `[`) matches only itself.
    pub fn new(pattern: &str, slash: Slash) -> Glob {
        let build = |p: &str| {
            GlobBuilder::new(p)
                .literal_separator(slash == Slash::Stops)
                .backslash_escape(true)
                .build()
        };
        match build(pattern) {
            Ok(glob) => Glob::Pattern(glob.compile_matcher()),
            Err(_) => Glob::Literal(pattern.to_string()),
        }
    }

    /// Whether the whole of `text` matches.
    pub fn is_match(&self, text: &str) -> bool {
        match self {
            Glob::Pattern(matcher) => matcher.is_match(text),
            Glob::Literal(literal) => literal == text,
        }
    }
}

/// Whether `text` has a wildcard the shell would expand.
pub fn has_wildcard(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_ranges_and_negation_match_as_in_bash() {
        let stops = |p: &str, t: &str| Glob::new(p, Slash::Stops).is_match(t);
        assert!(stops("/[e]tc", "/etc"));
        assert!(stops("/[d-f]tc", "/etc"), "a range names /etc too");
        assert!(!stops("/[a-c]tc", "/etc"));
        assert!(stops("/[!a-c]tc", "/etc"));
        assert!(stops("/[^a-c]tc", "/etc"));
        assert!(!stops("/[!e]tc", "/etc"));
        assert!(stops("/e?c", "/etc"));
        assert!(stops("/u*/lib", "/usr/lib"));
        assert!(!stops("/u*/lib", "/usr/local/lib"), "* stops at a slash");
        assert!(!stops("/u?r", "/u/r"), "? stops at a slash");
        assert!(stops("[ab", "[ab"), "an unterminated class is literal");
        assert!(!stops("[ab", "a"));
    }

    #[test]
    fn name_patterns_let_a_star_cross_slashes() {
        let names = |p: &str, t: &str| Glob::new(p, Slash::Matches).is_match(t);
        assert!(names("*", "anything/at/all"));
        assert!(names("git_*", "git_log"));
        assert!(!names("git_*", "legit_log"));
        assert!(names("/etc/*", "/etc/ssh/sshd_config"));
        assert!(names("f?les.*", "files.read"));
        assert!(!names("a*b", "acbd"));
        assert!(!names("shell", "shell2"));
    }
}
