//! `passepartout mcp list | trust | login | logout`: the MCP servers from a
//! terminal. `list` starts the configured servers (and the project's, when
//! trusted), prints each one's state and tools, and stops them; `trust`
//! shows what a project's `.passepartout/config.toml` starts and records
//! the person's trust in exactly those bytes; `login` runs the OAuth flow
//! for a streamable HTTP server and stores its tokens, `logout` removes
//! them (`crate::mcp::oauth`).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;

use super::{exit_code, load_config, CliError, ConfigFlags};
use crate::action::Approval;
use crate::mcp::project::{self, ProjectServers, PROJECT_CONFIG};
use crate::mcp::{McpConfig, McpManager};
use crate::skills::trust::sha256_hex;
use crate::util::terminal::Escaping;

/// The `mcp` subcommands.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Start the configured MCP servers, list their state and tools, stop them.
    List(ConfigFlags),
    /// Trust a project's `.passepartout/config.toml` (its `[[mcp.servers]]`)
    /// with exactly its current content, after showing what it starts.
    Trust {
        #[command(flatten)]
        flags: ConfigFlags,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
        /// The project directory or its `.passepartout/config.toml`
        /// (default: the current directory).
        path: Option<PathBuf>,
    },
    /// Log in to a streamable HTTP MCP server with OAuth (authorization
    /// code + PKCE): prints the URL to open, waits for the browser's
    /// redirect on 127.0.0.1, and stores the tokens in the state directory.
    Login {
        #[command(flatten)]
        flags: ConfigFlags,
        /// How long to wait for the browser, in seconds.
        #[arg(long, default_value_t = crate::mcp::oauth::DEFAULT_LOGIN_TIMEOUT.as_secs())]
        timeout: u64,
        /// The server's name in config.toml, or its URL.
        server: String,
    },
    /// Remove the OAuth tokens stored for a server.
    Logout {
        #[command(flatten)]
        flags: ConfigFlags,
        /// The server's name in config.toml, or its URL.
        server: String,
    },
}

/// Run an `mcp` subcommand on the terminal.
pub async fn command(command: McpCommand) -> ExitCode {
    crate::logging::init_cli();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match command {
        McpCommand::List(flags) => {
            let config = match load_config(&flags) {
                Ok(c) => c,
                Err(e) => return e.report(),
            };
            super::log_to_file(&config);
            exit_code(
                list_command(
                    &config.mcp,
                    config.trust_file(),
                    &config.state().mcp_oauth(),
                    config.trust_project_tool_approval,
                    &cwd,
                    &mut Escaping(std::io::stdout()),
                )
                .await,
            )
        }
        McpCommand::Trust { flags, yes, path } => {
            let config = match load_config(&flags) {
                Ok(c) => c,
                Err(e) => return e.report(),
            };
            super::log_to_file(&config);
            let given = path.map_or(cwd.clone(), |p| cwd.join(p));
            let project = match project_of(given) {
                Ok(p) => p,
                Err(e) => return e.report(),
            };
            exit_code(trust_command(
                &project,
                &config.trust_file(),
                config.trust_project_tool_approval,
                yes,
                &mut std::io::stdin().lock(),
                &mut Escaping(std::io::stdout()),
            ))
        }
        McpCommand::Login {
            flags,
            timeout,
            server,
        } => {
            let config = match load_config(&flags) {
                Ok(c) => c,
                Err(e) => return e.report(),
            };
            super::log_to_file(&config);
            let mut out = Escaping(std::io::stdout());
            exit_code(
                login_command(
                    &config.mcp,
                    &config.state().mcp_oauth(),
                    &server,
                    std::time::Duration::from_secs(timeout),
                    &mut out,
                )
                .await,
            )
        }
        McpCommand::Logout { flags, server } => {
            let config = match load_config(&flags) {
                Ok(c) => c,
                Err(e) => return e.report(),
            };
            super::log_to_file(&config);
            exit_code(logout_command(
                &config.mcp,
                &config.state().mcp_oauth(),
                &server,
                &mut Escaping(std::io::stdout()),
            ))
        }
    }
}

/// Why `mcp login`/`logout` has no URL to log in to.
#[derive(Debug, thiserror::Error)]
enum NoUrl {
    #[error(
        "no MCP server `{server}` in config.toml (servers: {names}); give its name or its URL"
    )]
    Unknown { server: String, names: String },
    #[error("MCP server `{server}` uses the `{kind}` transport; OAuth login is for streamable HTTP servers")]
    OtherTransport { server: String, kind: String },
    #[error("MCP server `{server}` is a stdio server; OAuth login is for streamable HTTP servers")]
    Stdio { server: String },
}

/// The URL of the streamable HTTP server `server` names: a URL as given,
/// or the `url` of the config.toml entry of that name.
fn server_url(config: &McpConfig, server: &str) -> Result<String, NoUrl> {
    if server.starts_with("http://") || server.starts_with("https://") {
        return Ok(server.to_string());
    }
    let Some(entry) = config.servers.iter().find(|s| s.name == server) else {
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        return Err(NoUrl::Unknown {
            server: server.to_string(),
            names: if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
        });
    };
    match (&entry.url, entry.kind.as_deref()) {
        (Some(url), None | Some("http")) => Ok(url.clone()),
        (Some(_), Some(kind)) => Err(NoUrl::OtherTransport {
            server: server.to_string(),
            kind: kind.to_string(),
        }),
        (None, _) => Err(NoUrl::Stdio {
            server: server.to_string(),
        }),
    }
}

/// `passepartout mcp login SERVER`: the OAuth flow; the tokens go to
/// `token_dir`. Returns the exit code.
pub async fn login_command(
    config: &McpConfig,
    token_dir: &Path,
    server: &str,
    timeout: std::time::Duration,
    out: &mut (dyn Write + Send),
) -> i32 {
    let url = match server_url(config, server) {
        Ok(u) => u,
        Err(e) => {
            let _ = writeln!(out, "{e}");
            return 1;
        }
    };
    match crate::mcp::oauth::login(&url, token_dir, timeout, out).await {
        Ok(path) => {
            let _ = writeln!(
                out,
                "logged in to {url}; the tokens are in {} (refreshed by the daemon when they expire)",
                path.display()
            );
            0
        }
        Err(e) => {
            let _ = writeln!(out, "login to {url} failed: {e}");
            1
        }
    }
}

/// `passepartout mcp logout SERVER`: remove its stored tokens.
pub fn logout_command(
    config: &McpConfig,
    token_dir: &Path,
    server: &str,
    out: &mut dyn Write,
) -> i32 {
    let url = match server_url(config, server) {
        Ok(u) => u,
        Err(e) => {
            let _ = writeln!(out, "{e}");
            return 1;
        }
    };
    let store = crate::mcp::oauth::FileStore::new(token_dir, &url);
    match store.remove() {
        Ok(true) => {
            let _ = writeln!(
                out,
                "logged out of {url} (removed {})",
                store.path().display()
            );
            0
        }
        Ok(false) => {
            let _ = writeln!(out, "no tokens stored for {url}");
            0
        }
        Err(e) => {
            let _ = writeln!(out, "{}: {e}", store.path().display());
            1
        }
    }
}

/// The project a path names: the directory itself, or the directory whose
/// `.passepartout/config.toml` it is.
fn project_of(given: PathBuf) -> Result<PathBuf, CliError> {
    if given.is_dir() {
        return Ok(given);
    }
    match given.parent().and_then(Path::parent) {
        Some(p) if given.ends_with(PROJECT_CONFIG) => Ok(p.to_path_buf()),
        _ => Err(CliError::NotAProject(given)),
    }
}

/// `passepartout mcp list`: start the configured servers in `cwd` (with
/// the OAuth tokens in `token_dir`), print each one's state and tools,
/// stop them. Exit status 1 when any entry is
/// invalid or failed to start.
pub async fn list_command(
    config: &McpConfig,
    trust_file: PathBuf,
    token_dir: &Path,
    keep_auto: bool,
    cwd: &Path,
    out: &mut dyn Write,
) -> i32 {
    let manager = McpManager::new(config)
        .with_project_trust(trust_file, keep_auto)
        .with_oauth_tokens(token_dir.to_path_buf());
    let mut code = 0;
    for problem in manager.invalid() {
        let _ = writeln!(out, "invalid  {problem}");
        code = 1;
    }
    let in_project = project::project_servers(cwd, None, false) != ProjectServers::None;
    if !manager.has_configured() && !in_project {
        if manager.invalid().is_empty() {
            let _ = writeln!(
                out,
                "no MCP servers configured (add [[mcp.servers]] to config.toml)"
            );
        }
        return code;
    }
    let statuses = match manager.start_session("mcp-list", cwd, &[]).await {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "{e}");
            return 1;
        }
    };
    for s in &statuses {
        // Entries that never started (untrusted, refused) have no transport.
        let from = if s.transport.is_empty() {
            format!("from {}", s.origin)
        } else {
            format!("{}, from {}", s.transport, s.origin)
        };
        let _ = writeln!(out, "{}  {}  ({from})", s.name, s.state);
        for t in &s.tools {
            let _ = writeln!(out, "  {t}");
        }
        // An untrusted project entry is the person's choice, not a failure.
        if s.state != "running" && !s.state.starts_with("untrusted") {
            code = 1;
        }
    }
    manager.shutdown().await;
    code
}

/// `passepartout mcp trust [--yes] [PATH]`: show the servers the project
/// file names, ask once (unless `assume_yes`), then record its canonical
/// path and the SHA-256 of the very bytes shown (refused if the file
/// changed meanwhile). Returns the exit code.
pub fn trust_command(
    cwd: &Path,
    trust_file: &Path,
    keep_auto: bool,
    assume_yes: bool,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> i32 {
    let shown = cwd.join(PROJECT_CONFIG);
    let bytes = match project::read_project_file(cwd) {
        Ok(Some((_, bytes))) => bytes,
        Ok(None) => {
            let _ = writeln!(out, "no project config at {}", shown.display());
            return 1;
        }
        Err(e) => {
            let _ = writeln!(out, "{e}");
            return 1;
        }
    };
    let specs = match project::parse_servers(&bytes, keep_auto) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "{}: {e}\n  not trusted: fix it first", shown.display());
            return 1;
        }
    };
    let sha256 = sha256_hex(&bytes);
    let _ = writeln!(
        out,
        "{} (sha256 {sha256}) starts {} MCP server{} on this machine:",
        shown.display(),
        specs.len(),
        if specs.len() == 1 { "" } else { "s" }
    );
    for s in &specs {
        let _ = writeln!(
            out,
            "  {}  {}  (approval: {})",
            s.name,
            crate::mcp::describe(&s.transport),
            match s.approval {
                Approval::Auto => "auto",
                Approval::Ask => "ask",
                Approval::Never => "never",
            }
        );
    }
    match crate::mcp::binding::bound_files(cwd, &specs) {
        Ok(files) if !files.is_empty() => {
            let _ = writeln!(out, "They run these project files, bound into the trust:");
            for f in &files {
                let _ = writeln!(out, "  {}", f.path.display());
            }
        }
        Ok(_) => {}
        Err(e) => {
            let _ = writeln!(out, "{}: {e}\n  not trusted", shown.display());
            return 1;
        }
    }
    if !assume_yes {
        let _ = write!(out, "Trust this file with exactly this content? [y/N] ");
        let _ = out.flush();
        let mut answer = String::new();
        let _ = input.read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            let _ = writeln!(out, "nothing trusted");
            return 1;
        }
    }
    match project::trust_shown(cwd, trust_file, keep_auto, &sha256) {
        Ok(trusted) => {
            let _ = writeln!(
                out,
                "trusted {} (sha256 {})",
                trusted.path.display(),
                trusted.sha256
            );
            if !trusted.files.is_empty() {
                let _ = writeln!(
                    out,
                    "and the project files its servers run, as they are now (a change asks again):"
                );
                for f in &trusted.files {
                    let _ = writeln!(out, "  {}  {}", f.sha256, f.path.display());
                }
            }
            0
        }
        Err(e) => {
            let _ = writeln!(out, "{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_after_it_was_shown_is_not_trusted() {
        let project = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = state.path().join("trusted-skills.json");
        let file = project.path().join(PROJECT_CONFIG);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            "[[mcp.servers]]\nname = \"p\"\ncommand = \"/bin/true\"\n",
        )
        .unwrap();
        // The person is asked; while they read, the file changes.
        struct Swap<'a>(&'a Path);
        impl std::io::Read for Swap<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::fs::write(
                    self.0,
                    "[[mcp.servers]]\nname = \"p\"\ncommand = \"/bin/evil\"\n",
                )?;
                buf[..2].copy_from_slice(b"y\n");
                Ok(2)
            }
        }
        let mut input = std::io::BufReader::new(Swap(&file));
        let mut out = Vec::new();
        let code = trust_command(project.path(), &store, false, false, &mut input, &mut out);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("changed since it was shown"), "{out}");
        assert!(!matches!(
            project::project_servers(project.path(), Some(&store), false),
            ProjectServers::Trusted(_)
        ));
    }

    #[test]
    fn a_path_names_its_project() {
        let project = tempfile::tempdir().unwrap();
        let dir = project.path().to_path_buf();
        assert_eq!(project_of(dir.clone()).unwrap(), dir);
        assert_eq!(project_of(dir.join(PROJECT_CONFIG)).unwrap(), dir);
        assert!(matches!(
            project_of(dir.join("elsewhere.toml")),
            Err(CliError::NotAProject(_))
        ));
    }
}

#[cfg(test)]
/// The trust of a project's MCP servers through `mcp trust` (the command
/// lives here, the rule in `mcp::project`).
mod project_trust_tests {
    use std::path::Path;

    use super::trust_command;
    use crate::action::Approval;
    use crate::mcp::config::Origin;
    use crate::mcp::project::*;
    use crate::skills::trust::TrustStore;

    fn write(cwd: &Path, text: &str) {
        std::fs::create_dir_all(cwd.join(".passepartout")).unwrap();
        std::fs::write(cwd.join(PROJECT_CONFIG), text).unwrap();
    }

    const ONE: &str =
        "[[mcp.servers]]\nname = \"p\"\ncommand = \"/bin/true\"\napproval = \"auto\"\n";

    #[test]
    fn trust_follows_the_exact_bytes_and_auto_needs_the_person() {
        let project = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = state.path().join("trusted-skills.json");
        assert_eq!(
            project_servers(project.path(), Some(&store), false),
            ProjectServers::None
        );
        write(project.path(), ONE);
        assert!(matches!(
            project_servers(project.path(), Some(&store), false),
            ProjectServers::Untrusted { changed: false, ref names, .. } if names == &["p"]
        ));
        let mut out = Vec::new();
        let code = trust_command(project.path(), &store, false, true, &mut &b""[..], &mut out);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
        match project_servers(project.path(), Some(&store), false) {
            ProjectServers::Trusted(specs) => {
                assert_eq!(specs[0].origin, Origin::Project);
                assert_eq!(specs[0].approval, Approval::Ask);
            }
            other => panic!("{other:?}"),
        }
        match project_servers(project.path(), Some(&store), true) {
            ProjectServers::Trusted(specs) => assert_eq!(specs[0].approval, Approval::Auto),
            other => panic!("{other:?}"),
        }
        write(project.path(), &ONE.replace("true", "false"));
        assert!(matches!(
            project_servers(project.path(), Some(&store), false),
            ProjectServers::Untrusted { changed: true, .. }
        ));
    }

    #[test]
    fn limits_and_a_store_inside_the_project_are_refused() {
        let project = tempfile::tempdir().unwrap();
        write(
            project.path(),
            "[mcp]\ncall_timeout_secs = 9999\n[[mcp.servers]]\nname = \"p\"\ncommand = \"/bin/true\"\n",
        );
        assert!(matches!(
            project_servers(project.path(), None, false),
            ProjectServers::Invalid { .. }
        ));
        write(project.path(), ONE);
        let inner = project.path().join("state/trusted-skills.json");
        let mut out = Vec::new();
        let code = trust_command(project.path(), &inner, false, true, &mut &b""[..], &mut out);
        assert_eq!(code, 1);
        // Even a store planted there by hand is not believed.
        TrustStore::new(&inner)
            .trust(
                &project.path().join(PROJECT_CONFIG).canonicalize().unwrap(),
                ONE.as_bytes(),
            )
            .unwrap();
        assert!(matches!(
            project_servers(project.path(), Some(&inner), false),
            ProjectServers::Untrusted { .. }
        ));
    }
}
