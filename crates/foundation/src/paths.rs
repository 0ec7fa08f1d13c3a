//! Where passepartout keeps its files, said once.
//!
//! Every module that needs a path on disk (the configuration, the state
//! directory and what lies in it, the memex) asks here, so the XDG rule and
//! the state directory's layout cannot drift apart between copies. It sits
//! at the bottom of the layer table and imports nothing of the crate.
//!
//! The XDG rule follows the Base Directory specification: a variable that
//! is unset, empty or *relative* is ignored ("If an implementation
//! encounters a relative path in any of these variables it should consider
//! the path invalid and ignore it"), and the default under `$HOME` is used.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The directory name under each XDG base directory.
const APP: &str = "passepartout";

/// `$HOME`, or `/` when it is unset or empty (a daemon started without a
/// home still needs somewhere to look).
pub fn home_dir() -> PathBuf {
    home_from(std::env::var_os("HOME").as_deref())
}

fn home_from(home: Option<&OsStr>) -> PathBuf {
    match home {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => PathBuf::from("/"),
    }
}

/// One XDG base directory from the variable's value and `$HOME`: the value
/// when it is an absolute path, else `home/fallback`.
pub fn xdg_base(value: Option<&OsStr>, home: Option<&OsStr>, fallback: &str) -> PathBuf {
    match value.map(Path::new) {
        Some(p) if p.is_absolute() => p.to_path_buf(),
        _ => home_from(home).join(fallback),
    }
}

fn xdg_from_env(var: &str, fallback: &str) -> PathBuf {
    xdg_base(
        std::env::var_os(var).as_deref(),
        std::env::var_os("HOME").as_deref(),
        fallback,
    )
    .join(APP)
}

/// `$XDG_CONFIG_HOME/passepartout`, else `~/.config/passepartout`.
pub fn config_dir() -> PathBuf {
    xdg_from_env("XDG_CONFIG_HOME", ".config")
}

/// `$XDG_STATE_HOME/passepartout`, else `~/.local/state/passepartout`.
pub fn default_state_dir() -> PathBuf {
    xdg_from_env("XDG_STATE_HOME", ".local/state")
}

/// `$XDG_DATA_HOME/passepartout`, else `~/.local/share/passepartout`.
pub fn default_data_dir() -> PathBuf {
    xdg_from_env("XDG_DATA_HOME", ".local/share")
}

/// The configuration file inside a configuration directory.
pub fn config_file(config_dir: &Path) -> PathBuf {
    config_dir.join("config.toml")
}

/// The default configuration file as a person would type it: the real
/// path (`$XDG_CONFIG_HOME` honoured), with `$HOME` written `~`. What
/// messages name when they tell the person where to add a setting.
pub fn config_file_shown() -> String {
    shown(
        &config_file(&config_dir()),
        std::env::var_os("HOME").as_deref(),
    )
}

/// `path` with a leading `home` written `~`.
fn shown(path: &Path, home: Option<&OsStr>) -> String {
    match home.filter(|h| !h.is_empty() && *h != "/") {
        Some(h) => match path.strip_prefix(h) {
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => path.display().to_string(),
        },
        None => path.display().to_string(),
    }
}

/// The person's skills inside a configuration directory.
pub fn user_skills_dir(config_dir: &Path) -> PathBuf {
    config_dir.join("skills")
}

/// The person's policy file inside a configuration directory.
pub fn policy_file(config_dir: &Path) -> PathBuf {
    config_dir.join("policy.org")
}

/// The memex inside a data directory.
pub fn memex_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("memex")
}

/// The trust store's file name inside the state directory.
pub const TRUST_FILE_NAME: &str = "trusted-skills.json";

/// The skills parse cache's directory name inside the state directory,
/// beside the trust file (see `skills::cache`).
pub const SKILL_CACHE_DIR: &str = "skill-cache";

/// The daemon lock's file name inside the state directory.
pub const LOCK_FILE: &str = "daemon.lock";

/// The layout of one state directory: the only place that spells the names
/// of what the daemon keeps there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The layout under `root` (nothing is created).
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// The layout under [`default_state_dir`].
    pub fn from_env() -> StateDir {
        StateDir::new(default_state_dir())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Flight plans, one JSON file each.
    pub fn plans(&self) -> PathBuf {
        self.root.join("plans")
    }

    /// Session journals, one JSONL file each.
    pub fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// The append-only audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.root.join("audit.jsonl")
    }

    /// The daemon's log directory.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// The daemon's log file.
    pub fn log_file(&self) -> PathBuf {
        self.logs().join("passepartout.log")
    }

    /// Shadow stores and records of observed effects, per working directory.
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// The token and cost ledger.
    pub fn usage(&self) -> PathBuf {
        self.root.join("usage")
    }

    /// Trusted project skills and MCP configurations.
    pub fn trust_file(&self) -> PathBuf {
        self.root.join(TRUST_FILE_NAME)
    }

    /// Parsed skills by content, so unchanged files are not parsed again.
    pub fn skill_cache(&self) -> PathBuf {
        self.root.join(SKILL_CACHE_DIR)
    }

    /// OAuth tokens of streamable HTTP MCP servers, one 0600 file per
    /// server URL (`mcp login`).
    pub fn mcp_oauth(&self) -> PathBuf {
        self.root.join("mcp-oauth")
    }

    /// The lock held by the one deciding daemon.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join(LOCK_FILE)
    }
}

/// Create `dir` (and its parents) readable by its owner only, and tighten
/// it if it exists with wider permissions: the state directory holds
/// commands, their output and plans.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_under_home_is_shown_with_a_tilde_and_others_in_full() {
        let home = Some(OsStr::new("/home/ann"));
        assert_eq!(
            shown(
                Path::new("/home/ann/.config/passepartout/config.toml"),
                home
            ),
            "~/.config/passepartout/config.toml"
        );
        assert_eq!(
            shown(Path::new("/srv/cfg/passepartout/config.toml"), home),
            "/srv/cfg/passepartout/config.toml"
        );
        assert_eq!(shown(Path::new("/x/config.toml"), None), "/x/config.toml");
    }

    #[test]
    fn the_xdg_rule() {
        fn s(v: &str) -> Option<&OsStr> {
            Some(OsStr::new(v))
        }
        // (variable's value, HOME, expected base)
        let table: &[(Option<&OsStr>, Option<&OsStr>, &str)] = &[
            (s("/state"), s("/home/p"), "/state"),
            (s("/state/"), s("/home/p"), "/state/"),
            // Relative values are invalid and ignored, per the spec.
            (s("relative"), s("/home/p"), "/home/p/.local/state"),
            (s("./state"), s("/home/p"), "/home/p/.local/state"),
            (s(""), s("/home/p"), "/home/p/.local/state"),
            (None, s("/home/p"), "/home/p/.local/state"),
            // No home: the root stands in.
            (None, None, "/.local/state"),
            (None, s(""), "/.local/state"),
            (s("rel"), None, "/.local/state"),
            (s("/state"), None, "/state"),
        ];
        for (value, home, want) in table {
            assert_eq!(
                xdg_base(*value, *home, ".local/state"),
                PathBuf::from(want),
                "value {value:?}, home {home:?}"
            );
        }
    }

    #[test]
    fn the_state_layout() {
        let s = StateDir::new("/s");
        assert_eq!(s.plans(), Path::new("/s/plans"));
        assert_eq!(s.sessions(), Path::new("/s/sessions"));
        assert_eq!(s.audit_log(), Path::new("/s/audit.jsonl"));
        assert_eq!(s.log_file(), Path::new("/s/logs/passepartout.log"));
        assert_eq!(s.checkpoints(), Path::new("/s/checkpoints"));
        assert_eq!(s.usage(), Path::new("/s/usage"));
        assert_eq!(s.trust_file(), Path::new("/s/trusted-skills.json"));
        assert_eq!(s.lock_file(), Path::new("/s/daemon.lock"));
    }

    #[test]
    fn private_dirs_are_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }
}
