//! A project skill file (or `AGENTS.md`) read once for a person to review before trusting
//! it: what `passepartout skills trust` prints and the editor's trust
//! request (`server.rs`) shows, and the exact bytes whose hash is recorded.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::action::Approval;

use super::diagnostic::Diagnostic;
use super::instructions::is_instructions_file;
use super::loader::{read_skill_source, restrict_project_skill};
use super::parse::parse_skill_bytes;
use super::trust::sha256_hex;
use super::{Origin, Skill};

/// Why a skill file could not be read for review.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Missing, unreadable or too large (the diagnostic says which).
    #[error("{0}")]
    Unreadable(Box<Diagnostic>),
    #[error("{}: {source}", path.display())]
    Canonicalize {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A project skill file as read for the person to review before trusting:
/// the bytes read once, their hash, and what they would load.
#[derive(Debug)]
pub struct Review {
    /// The path as given.
    pub path: PathBuf,
    /// The canonical path: the trust store's key.
    pub canonical: PathBuf,
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// What the file would load as a project skill (with project limits).
    pub skill: Option<Skill>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Review {
    /// Read and parse `path` once.
    pub fn read(path: &Path, keep_auto: bool) -> Result<Review, ReviewError> {
        let bytes = if is_instructions_file(path) {
            match super::instructions::read_bytes(path) {
                Ok(Some(b)) => b,
                Ok(None) => {
                    return Err(ReviewError::Unreadable(Box::new(Diagnostic {
                        path: path.to_path_buf(),
                        line: 1,
                        column: 1,
                        severity: super::Severity::Error,
                        message: "cannot read file: no such file".into(),
                    })))
                }
                Err(d) => {
                    return Err(ReviewError::Unreadable(Box::new(d.unwrap_or_else(|| {
                        Diagnostic {
                            path: path.to_path_buf(),
                            line: 1,
                            column: 1,
                            severity: super::Severity::Error,
                            message: "cannot read file".into(),
                        }
                    }))))
                }
            }
        } else {
            read_skill_source(path).map_err(ReviewError::Unreadable)?
        };
        let canonical = path
            .canonicalize()
            .map_err(|source| ReviewError::Canonicalize {
                path: path.to_path_buf(),
                source,
            })?;
        // An instruction file (AGENTS.md) is text for the model, not a skill.
        let (skill, diagnostics) = if is_instructions_file(path) {
            (None, Vec::new())
        } else {
            parse_skill_bytes(path, &bytes, Origin::Project)
        };
        Ok(Review {
            path: path.to_path_buf(),
            canonical,
            sha256: sha256_hex(&bytes),
            skill: skill.map(|s| restrict_project_skill(s, keep_auto)),
            bytes,
            diagnostics,
        })
    }

    /// Whether the file has errors (it would not load even when trusted).
    pub fn has_errors(&self) -> bool {
        (self.skill.is_none() && !is_instructions_file(&self.path))
            || self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// What the person is about to trust, in a few lines. `taken`: tool
    /// names of the binary, built-in and user skills, which a project
    /// skill's tool may not redefine.
    pub fn describe(&self, keep_auto: bool, taken: &BTreeSet<String>) -> String {
        let mut text = format!("{}\n  sha256:   {}\n", self.path.display(), self.sha256);
        if is_instructions_file(&self.path) {
            text.push_str("  instructions that join the system prompt, word for word:\n");
            for line in String::from_utf8_lossy(&self.bytes).lines() {
                text.push_str(&format!("  | {line}\n"));
            }
            return text;
        }
        match &self.skill {
            Some(s) => {
                text.push_str(&format!("  skill:    {} — {}\n", s.name, s.description));
                if s.prompt.is_empty() {
                    text.push_str("  prompt:   none\n");
                } else {
                    text.push_str(&format!(
                        "  prompt:   trigger {}, joins the system prompt word for word:\n",
                        s.trigger
                    ));
                    for line in s.prompt.lines() {
                        text.push_str(&format!("  | {line}\n"));
                    }
                }
                if s.tools.is_empty() {
                    text.push_str("  tools:    none\n");
                }
                for t in &s.tools {
                    let approval = match t.approval {
                        Approval::Auto => "auto (runs without asking)",
                        Approval::Ask if !keep_auto => "ask (project tools always ask)",
                        Approval::Ask => "ask",
                        Approval::Never => "never",
                    };
                    if taken.contains(&t.spec.name) {
                        text.push_str(&format!(
                            "  tool:     {} (not offered: it would redefine a built-in or user tool)\n",
                            t.spec.name
                        ));
                    } else {
                        text.push_str(&format!(
                            "  tool:     {} (approval: {approval})\n",
                            t.spec.name
                        ));
                    }
                }
                if s.rules.is_empty() {
                    text.push_str(
                        "  rules:    none (rules from a project skill can only add restrictions)\n",
                    );
                }
                for r in &s.rules {
                    text.push_str(&format!("  rule:     {} → {}\n", r.name, r.decision));
                }
            }
            None => text.push_str("  does not parse\n"),
        }
        for d in &self.diagnostics {
            text.push_str(&format!("  {d}\n"));
        }
        text
    }
}
