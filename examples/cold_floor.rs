//! The floor of a cold start: the least a process can do to answer an
//! ACP `initialize` on stdio. `bench_daemon -- cold` starts it next to
//! `passepartout serve`, so the difference between the two is what the
//! daemon itself costs (its binary's loading and relocation, its runtime,
//! its configuration, discovery and diagnostics), not what any process
//! costs on this machine (fork, exec, pipes, the scheduler).
//!
//! Standard library only, no async runtime, no threads: it reads one
//! request in either framing (`Content-Length` headers or one JSON line)
//! and writes a minimal reply in the same framing, then exits.

use std::io::{BufRead, Read, Write};

/// The largest request read; the benchmark sends well under 1 KiB.
const MAX_REQUEST: usize = 64 * 1024;

fn main() -> std::process::ExitCode {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut first = String::new();
    if input.read_line(&mut first).is_err() || first.is_empty() {
        return std::process::ExitCode::from(1);
    }
    let (body, lsp) = match first.strip_prefix("Content-Length: ") {
        Some(len) => {
            let Ok(len) = len.trim().parse::<usize>() else {
                return std::process::ExitCode::from(1);
            };
            // The blank line ending the headers.
            let mut blank = String::new();
            if input.read_line(&mut blank).is_err() || len > MAX_REQUEST {
                return std::process::ExitCode::from(1);
            }
            let mut body = vec![0; len];
            if input.read_exact(&mut body).is_err() {
                return std::process::ExitCode::from(1);
            }
            (String::from_utf8_lossy(&body).into_owned(), true)
        }
        None => (first, false),
    };
    // The request's id, as written (the benchmark's ids are numbers).
    let id = body
        .split_once("\"id\":")
        .and_then(|(_, rest)| rest.split([',', '}']).next())
        .unwrap_or("null")
        .trim();
    let reply = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"protocolVersion\":1,\
         \"agentCapabilities\":{{}},\"authMethods\":[]}}}}"
    );
    let frame = if lsp {
        format!("Content-Length: {}\r\n\r\n{reply}", reply.len())
    } else {
        format!("{reply}\n")
    };
    let mut out = std::io::stdout().lock();
    if out
        .write_all(frame.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return std::process::ExitCode::from(1);
    }
    std::process::ExitCode::SUCCESS
}
