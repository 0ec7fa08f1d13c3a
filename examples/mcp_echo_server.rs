//! A small MCP server over stdio, built with rmcp's server side, for the
//! tests of passepartout's MCP client (`tests/mcp.rs`) and for trying
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
//! answers `initialize`.

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
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--record" => record = args.next().map(PathBuf::from),
            "--fail-start" => {
                eprintln!("mcp_echo_server: refusing to start (--fail-start)");
                std::process::exit(2);
            }
            "--hang-start" => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let echo = Echo { record };
    echo.note(&format!("start {}", std::process::id()));
    let service = echo.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
