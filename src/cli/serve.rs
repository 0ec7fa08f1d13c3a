//! `passepartout serve`: the daemon editors launch. It logs to a file (ACP
//! clients show every stderr line as an error) and speaks JSON-RPC on
//! stdin/stdout until the client goes away.

use std::process::ExitCode;
use std::sync::Arc;

use super::{load_discovered_config, CliError, ConfigFlags};

/// Serve on stdio; returns only when the configuration is unusable (the
/// end of a normal session exits the process at once).
pub async fn serve(flags: ConfigFlags) -> ExitCode {
    let config = match load_discovered_config(&flags).await {
        Ok(c) => c,
        Err(e) => return e.report(),
    };
    // Warnings to stderr (ACP clients show each stderr line as an error),
    // everything else to the log file.
    let log_path = config
        .log_file
        .clone()
        .unwrap_or_else(|| crate::logging::default_log_file(&config.state_dir()));
    let (log_guard, opened) = crate::logging::init_daemon(&log_path);
    if let Err(e) = opened {
        tracing::warn!("{e}; logging to stderr only");
    }
    if let Some(report) = config.discovery.as_ref().map(|d| d.report()) {
        match report.announcement() {
            Some(text) => tracing::info!("{text}"),
            // Not fatal, and not for stderr (ACP clients show every stderr
            // line as an error): the editor may send providers or a server
            // may start; a prompt that finds none fails with this same list.
            None => tracing::info!("{}", report.failure_message()),
        }
    }
    let env = match crate::setup::build_env(config) {
        Ok(env) => Arc::new(env),
        Err(e) => return CliError::from(e).report(),
    };
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "serving on stdio");
    let audit = env.audit.clone();
    crate::server::serve_on(env, tokio::io::stdin(), tokio::io::stdout()).await;
    if let Some(log) = audit {
        // Records queued by the last turn reach the disk before we exit.
        log.flush();
    }
    tracing::info!("stopped");
    // `exit` runs no destructors: write out the queued log lines first.
    drop(log_guard);
    // Exit now: the runtime would otherwise wait for its blocking stdin
    // reader, and nothing is left to do.
    std::process::exit(0)
}
