//! A small MCP server over stdio, built with rmcp's server side, for the
//! tests of passepartout's MCP client (`tests/suite/mcp*.rs`) and for trying
//! `passepartout mcp list` by hand.
//!
//! Tools: `echo` (returns its text), `sleep` (waits, to hit a call
//! timeout), `shout` (returns `n` bytes, to hit an output cap or the
//! message cap), `crash` (the process exits mid-call), `whoami` (the
//! client's `clientInfo` and its roots), `add_tool` (adds the tool `late`
//! and sends `notifications/tools/list_changed`), `ask` (asks the person
//! a form through MCP elicitation and returns the outcome: `accept
//! {"name":…}`, `decline` or `cancel`), `ask_twice` (two questions at
//! once, both outcomes), `ask_url` (a URL-mode question), `screenshot`
//! (a caption and a one-pixel PNG). A resource
//! `memo://readme` and a prompt `review` (argument `focus`).
//!
//! Flags: `--record FILE` appends `start PID`, `listed tools` for each
//! `tools/list`, and one line per tool call to FILE, so a test can prove a
//! call never reached the server (and find the process); `--fail-start`
//! writes a message to stderr and exits before speaking MCP;
//! `--hang-start` never answers `initialize`; `--slow-start SECS` waits
//! that long first; `--http` serves MCP streamable HTTP on 127.0.0.1
//! instead of stdio and prints its URL as the first line of stdout.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::PathBuf;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::*;
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;

/// A 1×1 red PNG, base64 (what `screenshot` returns).
const RED_DOT_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

#[derive(Clone)]
struct Echo {
    record: Option<PathBuf>,
    /// Whether `add_tool` was called: `late` is listed from then on.
    late: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tool_router: ToolRouter<Echo>,
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
struct WorkArgs {
    /// How many steps of 300 ms to work, with a progress notification
    /// after each.
    steps: u32,
}

#[derive(Deserialize, JsonSchema)]
struct ShoutArgs {
    /// How many bytes to return.
    n: usize,
}

/// The form `ask` shows: a name (required), a size (one of two) and a
/// yes/no.
fn ask_form() -> ElicitationSchema {
    serde_json::from_value(serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 1},
            "size": {"type": "string", "title": "Size", "enum": ["small", "large"]},
            "urgent": {"type": "boolean", "title": "Urgent"}
        },
        "required": ["name"]
    }))
    .unwrap()
}

/// `accept {content}`, `decline`, `cancel` or `error: …`.
fn outcome(answer: Result<ElicitResult, rmcp::ServiceError>) -> String {
    match answer {
        Ok(r) => match r.action {
            ElicitationAction::Accept => format!(
                "accept {}",
                r.content.map(|c| c.to_string()).unwrap_or_default()
            ),
            ElicitationAction::Decline => "decline".into(),
            ElicitationAction::Cancel => "cancel".into(),
            _ => "other".into(),
        },
        Err(e) => format!("error: {e}"),
    }
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

#[tool_router]
impl Echo {
    #[tool(description = "Say who the client is and which roots it offers")]
    async fn whoami(&self, context: RequestContext<RoleServer>) -> String {
        let info = context
            .peer
            .peer_info()
            .map(|i| format!("{} {}", i.client_info.name, i.client_info.version))
            .unwrap_or_default();
        #[allow(deprecated)]
        let roots = match context.peer.list_roots().await {
            Ok(r) => r
                .roots
                .into_iter()
                .map(|r| r.uri)
                .collect::<Vec<_>>()
                .join(","),
            Err(e) => format!("no roots: {e}"),
        };
        self.note(&format!("whoami {info} roots={roots}"));
        format!("client {info}; roots {roots}")
    }

    #[tool(description = "Add the tool `late` and tell the client its tool list changed")]
    async fn add_tool(&self, context: RequestContext<RoleServer>) -> String {
        self.note("add_tool");
        self.late.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = context.peer.notify_tool_list_changed().await;
        "added".into()
    }

    #[tool(description = "A tool that exists only after add_tool")]
    async fn late(&self) -> String {
        self.note("late");
        "late tool ran".into()
    }

    #[tool(description = "Ask the person for a name, a size and whether it is urgent")]
    async fn ask(&self, context: RequestContext<RoleServer>) -> String {
        self.note("ask");
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "What is your name?".into(),
            requested_schema: ask_form(),
        };
        let answer = outcome(context.peer.create_elicitation(params).await);
        self.note(&format!("asked: {answer}"));
        answer
    }

    #[tool(description = "Ask the person two questions at once")]
    async fn ask_twice(&self, context: RequestContext<RoleServer>) -> String {
        self.note("ask_twice");
        let params = |n: u8| ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Question {n}: what is your name?"),
            requested_schema: ask_form(),
        };
        let (first, second) = tokio::join!(context.peer.create_elicitation(params(1)), async {
            // The second after the first is surely on its way.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            context.peer.create_elicitation(params(2)).await
        });
        format!("first: {}; second: {}", outcome(first), outcome(second))
    }

    #[tool(description = "Ask the person to visit a page")]
    async fn ask_url(&self, context: RequestContext<RoleServer>) -> String {
        self.note("ask_url");
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: "Sign in to continue".into(),
            url: "https://example.com/sign-in".into(),
            elicitation_id: "sign-in-1".into(),
        };
        outcome(context.peer.create_elicitation(params).await)
    }

    #[tool(description = "Return a one-pixel PNG picture and a caption")]
    async fn screenshot(&self) -> CallToolResult {
        self.note("screenshot");
        CallToolResult::success(vec![
            ContentBlock::text("a red dot"),
            ContentBlock::image(RED_DOT_PNG, "image/png"),
        ])
    }

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

    #[tool(description = "Work in steps of 300 ms, reporting progress after each")]
    async fn work(
        &self,
        Parameters(args): Parameters<WorkArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        self.note(&format!("work {}", args.steps));
        let token = context.meta.get_progress_token();
        for step in 1..=args.steps {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            if let Some(token) = &token {
                let _ = context
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), f64::from(step))
                            .with_total(f64::from(args.steps))
                            .with_message(format!("step {step} of {}", args.steps)),
                    )
                    .await;
            }
        }
        match token {
            Some(_) => format!("worked {} steps", args.steps),
            None => format!("worked {} steps (no progress token was sent)", args.steps),
        }
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

#[tool_handler]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.note("listed tools");
        let late = self.late.load(std::sync::atomic::Ordering::SeqCst);
        let tools = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|t| late || t.name != "late")
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            "memo://readme",
            "readme",
        )]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.note(&format!("read {}", request.uri));
        if request.uri != "memo://readme" {
            return Err(ErrorData::resource_not_found("no such resource", None));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            "The memo says: ship it.",
            request.uri,
        )])
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "review",
            Some("Review the code with a focus"),
            Some(vec![PromptArgument::new("focus")]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let focus = request
            .arguments
            .and_then(|a| a.get("focus").and_then(|v| v.as_str()).map(String::from))
            .unwrap_or_else(|| "everything".into());
        self.note(&format!("prompt review {focus}"));
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Please review the code, focusing on {focus}."),
        )])
        .into())
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
            "--slow-start" => {
                let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
                tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
            }
            "--hang-start" => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let echo = Echo {
        record,
        late: Default::default(),
        tool_router: Echo::tool_router(),
    };
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
