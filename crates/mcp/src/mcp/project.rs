//! MCP servers a project names in `<cwd>/.passepartout/config.toml`
//! (`[[mcp.servers]]`), started only when the person trusts that file's
//! exact content.
//!
//! The file lives inside the working directory, which the agent (and
//! anyone who sends the person a repository) can write, and a server entry
//! runs a program on the host. So it gets the same trust as a project
//! skill: the skills' trust store ([`crate::skills::trust`]), keyed by the
//! file's canonical path and the SHA-256 of its bytes, the bytes hashed
//! being the bytes parsed. Any change makes it untrusted again. A store
//! inside the project is ignored (the agent could forge it). A trusted
//! entry's `approval = "auto"` is kept only when the person's own config
//! says `trust_project_tool_approval = true`, as for project skill tools.
//! A project entry never replaces a global one: a name the global config
//! (or the client) already uses is refused.
//!
//! Trust binds content, not names: the files inside the project that the
//! servers run (a script, a `-m` module, an `npx` package) are hashed into
//! the trust record ([`super::binding`]), so changing one of them makes the
//! config untrusted again, and its servers do not start until the person
//! trusts it anew.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::binding::{self, BindingError, BoundFile};
use super::config::{McpServerConfig, Origin, ServerSpec, SpecError};
use crate::action::Approval;
use crate::skills::trust::{sha256_hex, TrustError, TrustState, TrustStore};

pub use crate::protocol::EXT_MCP_TRUST;

/// The project file, relative to the working directory.
pub const PROJECT_CONFIG: &str = ".passepartout/config.toml";
/// The largest project config read, in bytes.
pub const MAX_PROJECT_CONFIG_BYTES: u64 = 256 * 1024;

/// The part of the project file this module reads. Other top-level
/// sections are left to whoever reads them; inside `[mcp]` only `servers`
/// is accepted (limits are the person's, not the project's).
#[derive(Debug, Default, Deserialize)]
struct ProjectFile {
    #[serde(default)]
    mcp: ProjectMcp,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectMcp {
    #[serde(default)]
    servers: Vec<McpServerConfig>,
}

/// What a project's config says about MCP servers.
#[derive(Debug, Clone, PartialEq)]
pub enum ProjectServers {
    /// No project config, or one without servers.
    None,
    /// Servers named in a file the person has not trusted (or that changed
    /// since); none of them start.
    Untrusted {
        path: PathBuf,
        names: Vec<String>,
        changed: bool,
        /// The project files its servers run (bound into the trust).
        bound: Vec<PathBuf>,
    },
    /// The file cannot be used (unreadable, too big, bad TOML, bad entry).
    Invalid { path: PathBuf, problem: String },
    /// Trusted servers, ready to start.
    Trusted(Vec<ServerSpec>),
}

/// How to trust the project file, said the same way everywhere.
pub fn trust_hint(path: &Path) -> String {
    format!(
        "untrusted: run `passepartout mcp trust {}` after reading it",
        path.display()
    )
}

/// Why the project file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: more than the {MAX_PROJECT_CONFIG_BYTES}-byte project config limit", path.display())]
    TooBig { path: PathBuf },
}

/// The project file's bytes and canonical path (`None`: no file).
pub fn read_project_file(cwd: &Path) -> Result<Option<(PathBuf, Vec<u8>)>, ReadError> {
    let path = cwd.join(PROJECT_CONFIG);
    let io = |source| ReadError::Io {
        path: path.clone(),
        source,
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_PROJECT_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_PROJECT_CONFIG_BYTES {
        return Err(ReadError::TooBig { path });
    }
    let canonical = path.canonicalize().map_err(io)?;
    Ok(Some((canonical, bytes)))
}

/// Why the project file's server entries cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ServersError {
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error(transparent)]
    Entry(#[from] SpecError),
}

/// The server entries in the project file's bytes (disabled ones left out).
pub fn parse_servers(bytes: &[u8], keep_auto: bool) -> Result<Vec<ServerSpec>, ServersError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ServersError::NotUtf8)?;
    let file: ProjectFile = toml::from_str(text)?;
    let mut specs = Vec::new();
    for entry in &file.mcp.servers {
        if let Some(mut spec) = entry.to_spec()? {
            spec.origin = Origin::Project;
            if spec.approval == Approval::Auto && !keep_auto {
                spec.approval = Approval::Ask;
            }
            specs.push(spec);
        }
    }
    Ok(specs)
}

/// The project's servers for a session in `cwd`, judged against the trust
/// store at `trust_file` (`None`: nothing is trusted).
pub fn project_servers(cwd: &Path, trust_file: Option<&Path>, keep_auto: bool) -> ProjectServers {
    let shown = cwd.join(PROJECT_CONFIG);
    let (canonical, bytes) = match read_project_file(cwd) {
        Ok(Some(found)) => found,
        Ok(None) => return ProjectServers::None,
        Err(problem) => {
            return ProjectServers::Invalid {
                path: shown,
                problem: problem.to_string(),
            }
        }
    };
    // Parse the very bytes that are hashed.
    let specs = match parse_servers(&bytes, keep_auto) {
        Ok(s) if s.is_empty() => return ProjectServers::None,
        Ok(s) => s,
        Err(problem) => {
            return ProjectServers::Invalid {
                path: shown,
                problem: problem.to_string(),
            }
        }
    };
    let bound = match binding::bound_files(cwd, &specs) {
        Ok(files) => files,
        Err(problem) => {
            return ProjectServers::Invalid {
                path: shown,
                problem: problem.to_string(),
            }
        }
    };
    let state = match trust_file {
        // A store the agent can write proves nothing.
        Some(store) if !inside(store, cwd) => match TrustStore::new(store).load() {
            Ok(t) => t.state(&canonical, &binding::digest(&bytes, &bound)),
            Err(e) => {
                tracing::error!("{e}");
                TrustState::Unknown
            }
        },
        _ => TrustState::Unknown,
    };
    match state {
        TrustState::Trusted => ProjectServers::Trusted(specs),
        other => ProjectServers::Untrusted {
            path: shown,
            names: specs.into_iter().map(|s| s.name).collect(),
            changed: other == TrustState::Changed,
            bound: bound.into_iter().map(|f| f.path).collect(),
        },
    }
}

fn inside(path: &Path, dir: &Path) -> bool {
    let path = path
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| path.to_path_buf());
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    path.starts_with(dir)
}

/// What [`trust_shown`] recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrustedConfig {
    pub path: PathBuf,
    pub sha256: String,
    /// The servers the file names.
    pub servers: Vec<String>,
    /// The project files its servers run, hashed into the trust.
    pub files: Vec<BoundFile>,
}

/// Why [`trust_shown`] trusted nothing.
#[derive(Debug, thiserror::Error)]
pub enum TrustRefused {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("no project config at {}", path.display())]
    Missing { path: PathBuf },
    #[error("{} changed since it was shown (sha256 {now} now, {shown} shown); look at it again", path.display())]
    Changed {
        path: PathBuf,
        now: String,
        shown: String,
    },
    #[error("{}: {source}; not trusted: fix it first", path.display())]
    Invalid { path: PathBuf, source: ServersError },
    #[error("the trust store {} lies inside the project, where the agent can write; move the state directory out of it", store.display())]
    StoreInside { store: PathBuf },
    #[error("{}: {source}; not trusted", path.display())]
    Binding { path: PathBuf, source: BindingError },
    #[error(transparent)]
    Store(#[from] TrustError),
}

/// Trust the project file in `cwd` when its bytes still hash to
/// `expected_sha256` (what the person was shown). Refused, with why, when
/// the file is missing, invalid, changed, or the store lies in the project.
pub fn trust_shown(
    cwd: &Path,
    trust_file: &Path,
    keep_auto: bool,
    expected_sha256: &str,
) -> Result<TrustedConfig, TrustRefused> {
    let shown = cwd.join(PROJECT_CONFIG);
    let Some((canonical, bytes)) = read_project_file(cwd)? else {
        return Err(TrustRefused::Missing { path: shown });
    };
    let sha256 = sha256_hex(&bytes);
    if !sha256.eq_ignore_ascii_case(expected_sha256) {
        return Err(TrustRefused::Changed {
            path: shown,
            now: sha256,
            shown: expected_sha256.to_string(),
        });
    }
    let specs = match parse_servers(&bytes, keep_auto) {
        Ok(specs) => specs,
        Err(source) => {
            return Err(TrustRefused::Invalid {
                path: shown,
                source,
            })
        }
    };
    if inside(trust_file, cwd) {
        return Err(TrustRefused::StoreInside {
            store: trust_file.to_path_buf(),
        });
    }
    let files = match binding::bound_files(cwd, &specs) {
        Ok(files) => files,
        Err(source) => {
            return Err(TrustRefused::Binding {
                path: shown,
                source,
            })
        }
    };
    TrustStore::new(trust_file).trust(&canonical, &binding::manifest(&bytes, &files))?;
    Ok(TrustedConfig {
        path: shown,
        sha256,
        servers: specs.into_iter().map(|s| s.name).collect(),
        files,
    })
}
