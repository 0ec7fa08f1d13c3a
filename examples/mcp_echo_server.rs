//! A small MCP server over stdio, built with rmcp's server side, for the
//! tests of passepartout's MCP client (`tests/suite/mcp.rs`) and for trying
//! `passepartout mcp list` by hand.
//!
//! Tools: `echo` (returns its text), `sleep` (waits, to hit a call
//! timeout), `shout` (returns `n` bytes, to hit an output cap) and `crash`
//! (the process exits mid-call).
//!
//! Flags: `--record FILE` appends `start PID` and then one line per tool
//! call to FILE, so a test can prove a call never reached the server (and
//! find the process); `--fail-start` writes a
//! message to stderr and exits before speaking MCP; `--hang-start` never
//! answers `initialize`; `--http` serves MCP streamable HTTP on
//! 127.0.0.1 instead of stdio and prints its URL as the first line of
//! stdout.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_router, ServiceExt};
use serde::Deserialize;

#[derive(Clone)]
struct Echo {
    record: Option<PathBuf>,
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    /// How long to wait, in seconds.
    secs: u64,
}

#[derive(Deserialize, JsonSchema)]
struct ShoutArgs {
    /// How many bytes to return.
    n: usize,
}

impl Echo {
    fn note(&self, what: &str) {
        if let Some(path) = &self.record {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = writeln!(f, "{what}");
            }
        }
    }
}

#[tool_router(server_handler)]
impl Echo {
    #[tool(description = "Return the given text unchanged")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        self.note(&format!("echo {}", args.text));
        format!("echo: {}", args.text)
    }

    #[tool(description = "Wait for the given number of seconds")]
    async fn sleep(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        self.note(&format!("sleep {}", args.secs));
        tokio::time::sleep(std::time::Duration::from_secs(args.secs)).await;
        "slept".into()
    }

    #[tool(description = "Return n bytes of text")]
    async fn shout(&self, Parameters(args): Parameters<ShoutArgs>) -> String {
        self.note(&format!("shout {}", args.n));
        "A".repeat(args.n)
    }

    #[tool(description = "Exit the server process in the middle of the call")]
    async fn crash(&self) -> String {
        self.note("crash");
        std::process::exit(3);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut record = None;
    let mut http = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--record" => record = args.next().map(PathBuf::from),
            "--fail-start" => {
                eprintln!("mcp_echo_server: refusing to start (--fail-start)");
                std::process::exit(2);
            }
            "--http" => http = true,
            "--hang-start" => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let echo = Echo { record };
    echo.note(&format!("start {}", std::process::id()));
    if http {
        return serve_http(echo).await;
    }
    let service = echo.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// Serve MCP streamable HTTP at `http://127.0.0.1:PORT/mcp` until killed.
async fn serve_http(echo: Echo) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(echo.clone()),
        std::sync::Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{}/mcp", listener.local_addr()?);
    let app = axum::Router::new().nest_service("/mcp", service);
    axum::serve(listener, app).await?;
    Ok(())
}
