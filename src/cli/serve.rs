//! `passepartout serve`: the daemon editors launch. It logs to a file (ACP
//! clients show every stderr line as an error) and speaks JSON-RPC on
//! stdin/stdout until the client goes away. SIGTERM, SIGINT and SIGHUP end
//! input the way the client going away does, so a signalled daemon replies
//! to its running prompt, closes the turn in the journal and leaves plans
//! pending; a second signal exits at once.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{load_config, CliError, ConfigFlags};

/// What `serve` says when its stdin is a terminal.
pub const TERMINAL_NOTICE: &str =
    "passepartout serve: waiting for an editor's JSON-RPC 2.0 (Agent \
Client Protocol) messages on stdin; editors start it themselves (docs/protocol.md). To ask \
something from this terminal, use `passepartout run PROMPT`. Ctrl-D quits.";

/// Serve on stdio; returns only when the configuration is unusable (the
/// end of a normal session exits the process at once).
pub async fn serve(flags: ConfigFlags) -> ExitCode {
    let mut config = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => return e.report(),
    };
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        // A person typed `serve` at a terminal: say what it is waiting for.
        eprintln!("{TERMINAL_NOTICE}");
    }
    // Warnings to stderr (ACP clients show each stderr line as an error),
    // everything else to the log file; before anything that logs.
    let log_path = config
        .log_file
        .clone()
        .unwrap_or_else(|| crate::logging::default_log_file(&config.state_dir()));
    let (log_guard, opened) = crate::logging::init_daemon(&log_path);
    if let Err(e) = opened {
        tracing::warn!("{e}; logging to stderr only");
    }
    // The `initialize` reply carries the sandbox's limit diagnostics: what
    // they read from the host is found meanwhile, on a thread of its own.
    crate::sandbox::probe::prepare_limit_diagnostics();
    if let Err(e) = crate::setup::discover_if_unconfigured(&mut config).await {
        return CliError::from(e).report();
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
    let stdin = UntilSignal::new(tokio::io::stdin(), on_signals());
    crate::server::serve_on(env, stdin, tokio::io::stdout()).await;
    if let Some(log) = audit {
        // Records queued by the last turn reach the disk before we exit.
        log.flush();
    }
    // The run cgroups made for this daemon's commands go with it.
    crate::sandbox::enforce::remove_run_cgroups();
    // Its sessions end with it, and their `/tmp`s go.
    crate::sandbox::session_tmp::remove_all();
    tracing::info!("stopped");
    // `exit` runs no destructors: write out the queued log lines first.
    drop(log_guard);
    // Exit now: the runtime would otherwise wait for its blocking stdin
    // reader, and nothing is left to do.
    std::process::exit(0)
}

/// A token cancelled by the first SIGTERM, SIGINT or SIGHUP; the second
/// one exits the process without waiting for anything.
fn on_signals() -> CancellationToken {
    use tokio::signal::unix::{signal, SignalKind};
    let token = CancellationToken::new();
    let kinds = [
        ("SIGTERM", SignalKind::terminate()),
        ("SIGINT", SignalKind::interrupt()),
        ("SIGHUP", SignalKind::hangup()),
    ];
    let mut streams = Vec::new();
    for (name, kind) in kinds {
        match signal(kind) {
            Ok(s) => streams.push((name, s)),
            Err(e) => tracing::warn!("cannot handle {name}: {e}"),
        }
    }
    let fired = token.clone();
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let waits = streams.iter_mut().map(|(name, s)| {
                let name = *name;
                Box::pin(async move {
                    s.recv().await;
                    name
                })
            });
            let (name, _, _) = futures::future::select_all(waits).await;
            seen += 1;
            if seen == 1 {
                tracing::info!("{name}: stopping as if input ended");
                fired.cancel();
            } else {
                tracing::warn!("{name} again: exiting now");
                std::process::exit(1);
            }
        }
    });
    token
}

/// A reader that reports end of input once `stop` is cancelled, so a
/// signal takes the one shutdown path that end of input takes.
struct UntilSignal<R> {
    inner: R,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    stopped: bool,
}

impl<R> UntilSignal<R> {
    fn new(inner: R, stop: CancellationToken) -> Self {
        UntilSignal {
            inner,
            stop: Box::pin(stop.cancelled_owned()),
            stopped: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for UntilSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.stopped && self.stop.as_mut().poll(cx).is_ready() {
            self.stopped = true;
        }
        if self.stopped {
            // Nothing filled: end of input.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}
