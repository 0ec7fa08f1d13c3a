//! Who commits made inside the sandbox are by.
//!
//! `HOME` inside is not the person's, so git there finds no `user.name`
//! and fails with "Author identity unknown"; the repository's own config
//! is read-only (a control file), so `git config user.email` fails too.
//! The identity is read on the host instead — `[git] author` from
//! passepartout's configuration when set, else the person's own
//! `user.name`/`user.email` as git reports them for the project (its local
//! config, then the person's, then the system's) — and given to git inside
//! as `GIT_AUTHOR_*`/`GIT_COMMITTER_*`. Nothing else of the person's git
//! configuration is shown. With no identity anywhere nothing is made up:
//! git fails as it would on the host, and the result says how to set one
//! ([`MISSING_IDENTITY_HINT`]).

use std::path::Path;
use std::process::{Command, Stdio};

/// A commit identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitIdentity {
    pub name: String,
    pub email: String,
}

/// Why `[git] author` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorError {
    #[error(
        "[git] author = {0:?} is not of the form \"Name <email>\" (both parts non-empty, \
         no line breaks or angle brackets inside)"
    )]
    Form(String),
}

/// Added to a command's result when git inside found no identity.
pub const MISSING_IDENTITY_HINT: &str = "passepartout: git has no identity in the sandbox; \
     set yours on the host (`git config --global user.name \"Your Name\"` and `git config \
     --global user.email you@example.com`) or set `[git] author = \"Name <email>\"` in \
     passepartout's config.toml. The sandbox does not let commands change git's \
     configuration.";

/// What git prints when it has no identity.
pub const MISSING_IDENTITY_MARK: &str = "Author identity unknown";

impl GitIdentity {
    /// `"Name <email>"`, as `[git] author` holds it.
    pub fn parse_author(s: &str) -> Result<GitIdentity, AuthorError> {
        let bad = || AuthorError::Form(s.to_string());
        let s2 = s.trim();
        let (name, rest) = s2.split_once('<').ok_or_else(bad)?;
        let email = rest.strip_suffix('>').ok_or_else(bad)?;
        let (name, email) = (name.trim(), email.trim());
        let clean = |v: &str| {
            !v.is_empty()
                && !v
                    .chars()
                    .any(|c| matches!(c, '<' | '>' | '\n' | '\r' | '\0'))
        };
        if !clean(name) || !clean(email) {
            return Err(bad());
        }
        Ok(GitIdentity {
            name: name.to_string(),
            email: email.to_string(),
        })
    }

    /// The person's identity as git on the host reports it for `project`
    /// (`git config --get`, run with arguments, in the project; its
    /// environment is the daemon's, so `HOME` is the person's). `None`
    /// when either part is missing or git cannot run.
    pub fn of_person(project: &Path) -> Option<GitIdentity> {
        let get = |key: &str| -> Option<String> {
            let out = Command::new("git")
                .args(["config", "--get", key])
                .current_dir(project)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            let v = String::from_utf8(out.stdout).ok()?;
            let v = v.trim();
            (!v.is_empty() && !v.contains('\0')).then(|| v.to_string())
        };
        Some(GitIdentity {
            name: get("user.name")?,
            email: get("user.email")?,
        })
    }

    /// The variables git inside takes it from.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("GIT_AUTHOR_NAME", &self.name),
            ("GIT_AUTHOR_EMAIL", &self.email),
            ("GIT_COMMITTER_NAME", &self.name),
            ("GIT_COMMITTER_EMAIL", &self.email),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
    }
}

/// The identity for a run in `project`: the configured author, else the
/// person's.
pub fn identity_for(author: Option<&GitIdentity>, project: &Path) -> Option<GitIdentity> {
    author.cloned().or_else(|| GitIdentity::of_person(project))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_author_is_name_and_email() {
        assert_eq!(
            GitIdentity::parse_author(" Ada Lovelace <ada@example.org> "),
            Ok(GitIdentity {
                name: "Ada Lovelace".into(),
                email: "ada@example.org".into()
            })
        );
        for bad in [
            "Ada",
            "<ada@x>",
            "Ada <>",
            "Ada <a@x",
            "Ada <a<b@x>",
            "A\nB <a@x>",
        ] {
            assert!(GitIdentity::parse_author(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_persons_identity_is_read_from_their_git_config() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join(".gitconfig"),
            "[user]\n\tname = Grace Hopper\n\temail = grace@example.org\n",
        )
        .unwrap();
        // Through a child with that HOME: the lookup reads the daemon's
        // environment, which a test cannot change for its own process.
        let out = Command::new("git")
            .args(["config", "--get", "user.email"])
            .current_dir(project.path())
            .env("HOME", home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "grace@example.org"
        );
        let id = GitIdentity {
            name: "Grace Hopper".into(),
            email: "grace@example.org".into(),
        };
        assert_eq!(identity_for(Some(&id), project.path()), Some(id.clone()));
        assert_eq!(
            id.env()[0],
            ("GIT_AUTHOR_NAME".into(), "Grace Hopper".into())
        );
        assert_eq!(
            id.env()[3],
            ("GIT_COMMITTER_EMAIL".into(), "grace@example.org".into())
        );
    }
}
