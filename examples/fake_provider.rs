//! The fake model server as a program, for tests outside Rust (the Emacs ERT
//! suite): `fake_provider SCRIPT.json [--log FILE]`.
//!
//! It reads a JSON array of replies (the format is documented in
//! `tests/support/fake_provider.rs`), starts the server on 127.0.0.1, prints
//! `http://127.0.0.1:PORT` as its first line of standard output, appends
//! each request it receives as one JSON line to FILE when `--log` is given,
//! and exits when its standard input reaches end of file or on SIGTERM.

// Test and benchmark tooling, not the daemon: unwrap() is how it fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context as _};
use tokio::io::AsyncReadExt as _;
use tokio::signal::unix::{signal, SignalKind};

use fake_provider::{FakeProvider, Reply};

const USAGE: &str = "usage: fake_provider SCRIPT.json [--log FILE]";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut script_path: Option<PathBuf> = None;
    let mut log: Option<PathBuf> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--log" {
            log = Some(args.next().context(USAGE)?.into());
        } else if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            return Ok(());
        } else if script_path.is_none() {
            script_path = Some(arg.into());
        } else {
            bail!("{USAGE}");
        }
    }
    let script_path = script_path.context(USAGE)?;
    let text = std::fs::read_to_string(&script_path)
        .with_context(|| format!("cannot read {}", script_path.display()))?;
    let script: Vec<Reply> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a script of replies", script_path.display()))?;

    let fake = FakeProvider::start_with_log(script, log).await;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", fake.base_url)?;
    stdout.flush()?;

    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = stdin_closed() => {}
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(fake);
    Ok(())
}

/// Resolves when standard input reaches end of file (or cannot be read).
async fn stdin_closed() {
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 1024];
    while let Ok(read) = stdin.read(&mut buffer).await {
        if read == 0 {
            break;
        }
    }
}
