//! What an MCP server is, wherever it was named: the `[mcp]` section of the
//! global config.toml, or an ACP `session/new` request's `mcpServers`.
//! Both become a [`ServerSpec`], checked here so a bad entry is refused
//! with its name before anything is spawned.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::action::Approval;
use crate::protocol::acp;

/// The default output cap: a quarter of the 16,384-token default context
/// window (`[context] default_window`), a third of what compaction allows.
pub const DEFAULT_OUTPUT_CAP_TOKENS: usize = 4096;
/// Bytes per token, the estimate compaction uses (`budget::estimate_tokens`).
pub const BYTES_PER_TOKEN: usize = 4;

/// The `[mcp]` section of config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Servers started for every session (`[[mcp.servers]]`).
    pub servers: Vec<McpServerConfig>,
    /// How long a server may take to start and list its tools, in seconds.
    /// Servers start side by side, each on its own task, each with this
    /// whole time.
    pub startup_timeout_secs: u64,
    /// Time limit for one tool call, in seconds.
    pub call_timeout_secs: u64,
    /// Cap on the text of one tool result (or resource read), in tokens
    /// (estimated at four bytes a token, as compaction does). The default
    /// is a quarter of the smallest default context window, so one result
    /// never pushes a session past its compaction threshold on its own.
    pub output_cap_tokens: usize,
    /// The same cap in bytes; when set it replaces `output_cap_tokens`.
    pub output_cap_bytes: Option<usize>,
    /// Cap on one MCP message from a server, in bytes, enforced before it
    /// is decoded; an answer over it becomes an error for that call.
    pub max_message_bytes: usize,
    /// Most MCP servers one session may run at once.
    pub max_servers_per_session: usize,
}

impl McpConfig {
    /// The output cap in bytes, and the setting that set it (for the
    /// message that names it).
    pub fn output_cap(&self) -> (usize, &'static str) {
        match self.output_cap_bytes {
            Some(bytes) => (bytes, "mcp.output_cap_bytes"),
            None => (
                self.output_cap_tokens.saturating_mul(BYTES_PER_TOKEN),
                "mcp.output_cap_tokens",
            ),
        }
    }
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: Vec::new(),
            startup_timeout_secs: 30,
            call_timeout_secs: 60,
            output_cap_tokens: DEFAULT_OUTPUT_CAP_TOKENS,
            output_cap_bytes: None,
            max_message_bytes: super::transport::DEFAULT_MAX_MESSAGE_BYTES,
            max_servers_per_session: 8,
        }
    }
}

/// One `[[mcp.servers]]` entry: `command` (stdio) or `url` (streamable
/// HTTP, or the legacy HTTP+SSE transport with `type = "sse"`), never both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    pub name: String,
    #[serde(default)]
    pub command: Option<PathBuf>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The transport of a `url`: `http` (streamable HTTP, the default) or
    /// `sse` (the legacy HTTP+SSE transport of MCP 2024-11-05).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// How the server's tools are approved: `ask` (default), `auto` or
    /// `never`. Rules can still make any of them stricter.
    #[serde(default)]
    pub approval: Approval,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        command: PathBuf,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// MCP streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// Where OAuth tokens from `mcp login` are looked for (the
        /// daemon's `<state_dir>/mcp-oauth`); set when the session starts.
        token_dir: Option<PathBuf>,
    },
    /// The legacy HTTP+SSE transport: an event stream to read, an endpoint
    /// it names to post to.
    Sse {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// Look for OAuth tokens of a streamable HTTP server in `dir`.
    pub fn set_token_dir(&mut self, dir: &std::path::Path) {
        if let Transport::Http { token_dir, .. } = self {
            *token_dir = Some(dir.to_path_buf());
        }
    }
}

/// Where a server was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The person's global config.toml.
    Config,
    /// The ACP client's `session/new` or `session/load`.
    Client,
    /// The project's `.passepartout/config.toml`, trusted by the person.
    Project,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Config => "config",
            Origin::Client => "session/new",
            Origin::Project => "project",
        })
    }
}

/// A server ready to start.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// The name as given (shown to the person).
    pub name: String,
    /// The name as it appears in tool names: `mcp__<prefix>__<tool>`.
    pub prefix: String,
    pub transport: Transport,
    pub approval: Approval,
    pub origin: Origin,
}

/// A server entry that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("MCP server `{name}`: {problem}")]
    Invalid { name: String, problem: String },
}

fn invalid(name: &str, problem: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        name: name.to_string(),
        problem: problem.into(),
    }
}

/// The server's name as used in tool names: letters, digits, `_` and `-`
/// (what OpenAI accepts in a function name), other characters become `_`.
pub fn name_prefix(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn checked_name(name: &str) -> Result<String, SpecError> {
    let prefix = name_prefix(name);
    if prefix.is_empty() {
        return Err(invalid(name, "the name is empty"));
    }
    // Tool names are `mcp__<prefix>__<tool>` and must stay within 64
    // characters; leave room for the tool.
    if prefix.len() > 24 {
        return Err(invalid(name, "the name is longer than 24 characters"));
    }
    Ok(prefix)
}

impl McpServerConfig {
    /// Check the entry; `None` when it is disabled.
    pub fn to_spec(&self) -> Result<Option<ServerSpec>, SpecError> {
        if !self.enabled {
            return Ok(None);
        }
        let prefix = checked_name(&self.name)?;
        let transport = match (&self.command, &self.url) {
            (Some(command), None) => Transport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
            },
            (None, Some(url)) => {
                check_url(&self.name, url)?;
                let (url, headers) = (url.clone(), self.headers.clone());
                match self.kind.as_deref() {
                    None | Some("http") => Transport::Http {
                        url,
                        headers,
                        token_dir: None,
                    },
                    Some("sse") => Transport::Sse { url, headers },
                    Some(other) => {
                        return Err(invalid(
                            &self.name,
                            format!("`type = \"{other}\"` is not a transport; give `http` (streamable HTTP, the default) or `sse` (legacy HTTP+SSE)"),
                        ))
                    }
                }
            }
            (Some(_), Some(_)) => {
                return Err(invalid(&self.name, "give `command` or `url`, not both"))
            }
            (None, None) => {
                return Err(invalid(
                    &self.name,
                    "give `command` (a stdio server) or `url` (a streamable HTTP server)",
                ))
            }
        };
        if self.kind.is_some() && self.command.is_some() && self.kind.as_deref() != Some("stdio") {
            return Err(invalid(
                &self.name,
                "`type` names the transport of a `url`; a `command` is always stdio",
            ));
        }
        Ok(Some(ServerSpec {
            name: self.name.clone(),
            prefix,
            transport,
            approval: self.approval,
            origin: Origin::Config,
        }))
    }
}

fn check_url(name: &str, url: &str) -> Result<(), SpecError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(invalid(name, format!("`{url}` is not an http(s) URL")))
    }
}

/// A server an ACP client named in `session/new`. Its tools always ask.
pub fn from_acp(server: &acp::McpServer) -> Result<ServerSpec, SpecError> {
    let (name, transport) = match server {
        acp::McpServer::Stdio(s) => {
            if !s.command.is_absolute() {
                return Err(invalid(
                    &s.name,
                    format!(
                        "the command must be an absolute path (ACP), got {}",
                        s.command.display()
                    ),
                ));
            }
            (
                s.name.clone(),
                Transport::Stdio {
                    command: s.command.clone(),
                    args: s.args.clone(),
                    env: s
                        .env
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect(),
                },
            )
        }
        acp::McpServer::Http(h) => {
            check_url(&h.name, &h.url)?;
            (
                h.name.clone(),
                Transport::Http {
                    url: h.url.clone(),
                    headers: h
                        .headers
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect(),
                    token_dir: None,
                },
            )
        }
        acp::McpServer::Sse(s) => {
            check_url(&s.name, &s.url)?;
            (
                s.name.clone(),
                Transport::Sse {
                    url: s.url.clone(),
                    headers: s
                        .headers
                        .iter()
                        .map(|e| (e.name.clone(), e.value.clone()))
                        .collect(),
                },
            )
        }
        _ => {
            return Err(invalid(
                "?",
                "this MCP transport is not supported; use stdio, streamable HTTP or SSE",
            ))
        }
    };
    let prefix = checked_name(&name)?;
    Ok(ServerSpec {
        name,
        prefix,
        transport,
        approval: Approval::Ask,
        origin: Origin::Client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_entries_parse_from_toml() {
        let text = r#"
            startup_timeout_secs = 5
            [[servers]]
            name = "git"
            command = "/usr/bin/mcp-git"
            args = ["--repo", "."]
            env = { GIT_DIR = ".git" }
            [[servers]]
            name = "docs"
            url = "http://127.0.0.1:8080/mcp"
            approval = "auto"
        "#;
        let config: McpConfig = toml::from_str(text).unwrap();
        assert_eq!(config.startup_timeout_secs, 5);
        assert_eq!(config.call_timeout_secs, 60);
        let git = config.servers[0].to_spec().unwrap().unwrap();
        assert_eq!(git.prefix, "git");
        assert_eq!(git.approval, Approval::Ask);
        assert!(matches!(git.transport, Transport::Stdio { ref args, .. } if args.len() == 2));
        let docs = config.servers[1].to_spec().unwrap().unwrap();
        assert_eq!(docs.approval, Approval::Auto);
        assert!(matches!(docs.transport, Transport::Http { .. }));
    }

    #[test]
    fn bad_entries_are_refused_with_their_name() {
        let both: McpServerConfig =
            toml::from_str("name = \"x\"\ncommand = \"/bin/x\"\nurl = \"http://a\"").unwrap();
        assert_eq!(
            both.to_spec().unwrap_err().to_string(),
            "MCP server `x`: give `command` or `url`, not both"
        );
        let neither: McpServerConfig = toml::from_str("name = \"y\"").unwrap();
        assert!(neither.to_spec().is_err());
        let typo = toml::from_str::<McpServerConfig>("name = \"z\"\ncomand = \"/bin/z\"");
        assert!(typo.is_err());
        let odd: McpServerConfig =
            toml::from_str("name = \"o\"\nurl = \"http://a\"\ntype = \"ws\"").unwrap();
        assert!(odd
            .to_spec()
            .unwrap_err()
            .to_string()
            .contains("`type = \"ws\"`"));
        let sse: McpServerConfig =
            toml::from_str("name = \"s\"\nurl = \"http://a/sse\"\ntype = \"sse\"").unwrap();
        assert!(matches!(
            sse.to_spec().unwrap().unwrap().transport,
            Transport::Sse { .. }
        ));
        let disabled: McpServerConfig =
            toml::from_str("name = \"d\"\ncommand = \"/bin/d\"\nenabled = false").unwrap();
        assert_eq!(disabled.to_spec().unwrap(), None);
    }

    #[test]
    fn names_become_safe_prefixes() {
        assert_eq!(name_prefix("my server.v2"), "my_server_v2");
        assert_eq!(name_prefix("echo"), "echo");
        assert!(checked_name("").is_err());
        assert!(checked_name(&"n".repeat(25)).is_err());
    }

    #[test]
    fn acp_servers_convert_and_relative_commands_are_refused() {
        let stdio: acp::McpServer = serde_json::from_value(serde_json::json!({
            "name": "echo", "command": "/bin/echo", "args": ["a"], "env": [{"name": "K", "value": "V"}]
        }))
        .unwrap();
        let spec = from_acp(&stdio).unwrap();
        assert_eq!(spec.origin, Origin::Client);
        assert_eq!(spec.approval, Approval::Ask);
        match spec.transport {
            Transport::Stdio { env, .. } => assert_eq!(env.get("K").map(String::as_str), Some("V")),
            other => panic!("{other:?}"),
        }
        let relative: acp::McpServer = serde_json::from_value(serde_json::json!({
            "name": "rel", "command": "echo", "args": [], "env": []
        }))
        .unwrap();
        assert!(from_acp(&relative)
            .unwrap_err()
            .to_string()
            .contains("absolute path"));
        let sse: acp::McpServer = serde_json::from_value(serde_json::json!({
            "type": "sse", "name": "s", "url": "http://a/sse", "headers": []
        }))
        .unwrap();
        assert!(matches!(
            from_acp(&sse).unwrap().transport,
            Transport::Sse { ref url, .. } if url == "http://a/sse"
        ));
    }
}
