//! A regular expression compiled on first use.
//!
//! Compiling a regex is most of what loading a cached skill costs (a skill
//! has a trigger and rules; `examples/bench_skills`), and most
//! patterns of most skills are never needed in a given session. A pattern
//! that came from the parser is already compiled (the parser had to, to
//! report errors and check the rule's examples); one read back from the
//! parse cache keeps its source and compiles when first matched. Such a
//! source compiled once before, so failing now means the cache entry was
//! damaged: callers then fail closed ([`super::rules::Rule`] denies).

use std::sync::OnceLock;

use regex::Regex;

/// A regex that is compiled at most once, when first needed.
#[derive(Debug, Clone)]
pub struct LazyRegex {
    source: String,
    compiled: OnceLock<Option<Regex>>,
}

impl LazyRegex {
    /// A pattern compiled already.
    pub fn compiled(re: Regex) -> Self {
        let compiled = OnceLock::new();
        let source = re.as_str().to_string();
        let _ = compiled.set(Some(re));
        LazyRegex { source, compiled }
    }

    /// A pattern to compile when first used.
    pub fn deferred(source: String) -> Self {
        LazyRegex {
            source,
            compiled: OnceLock::new(),
        }
    }

    /// The pattern's source.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The compiled regex, or `None` when the source does not compile.
    pub fn regex(&self) -> Option<&Regex> {
        self.compiled
            .get_or_init(|| Regex::new(&self.source).ok())
            .as_ref()
    }

    /// Whether `text` matches; a pattern that does not compile matches
    /// nothing (use [`LazyRegex::regex`] to fail closed instead).
    pub fn is_match(&self, text: &str) -> bool {
        self.regex().is_some_and(|re| re.is_match(text))
    }

    /// Whether it has been compiled yet (for tests).
    pub fn is_compiled(&self) -> bool {
        self.compiled.get().is_some()
    }
}

impl From<Regex> for LazyRegex {
    fn from(re: Regex) -> Self {
        LazyRegex::compiled(re)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_pattern_compiles_on_first_use_only() {
        let re = LazyRegex::deferred(r"\bgit\b".into());
        assert!(!re.is_compiled());
        assert!(re.is_match("git status"));
        assert!(re.is_compiled());
        let broken = LazyRegex::deferred("(".into());
        assert!(broken.regex().is_none());
        assert!(!broken.is_match("("));
    }
}
