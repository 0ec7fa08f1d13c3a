//! A one-tool MCP server handler (rmcp's server side) for the HTTP
//! transports' tests: `echo` returns its text as `echo: TEXT`, and every
//! call is counted, so a test can tell that a call reached the server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::*;
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde::Deserialize;

#[derive(Clone)]
pub struct Echo {
    /// Tool calls received.
    pub calls: Arc<AtomicUsize>,
    tool_router: ToolRouter<Echo>,
}

#[derive(Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    text: String,
}

impl Echo {
    pub fn new(calls: Arc<AtomicUsize>) -> Echo {
        Echo {
            calls,
            tool_router: Echo::tool_router(),
        }
    }
}

#[tool_router]
impl Echo {
    #[tool(description = "Return the given text unchanged")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        format!("echo: {}", args.text)
    }
}

#[tool_handler]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}
