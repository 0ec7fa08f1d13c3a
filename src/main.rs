//! The `passepartout` binary: parse the command line and hand it to
//! [`passepartout::cli`], which holds every subcommand (kept in the library
//! so tests reach the same code the binary runs).

use std::process::ExitCode;

fn main() -> ExitCode {
    // Started by the sandbox to make listeners in a run's namespaces: it
    // must stay single-threaded, so before anything else.
    if let Some(code) = passepartout::sandbox::local_ports::helper_main() {
        return code;
    }
    let cli = passepartout::cli::Cli::from_env();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            let code = runtime.block_on(passepartout::cli::run(cli));
            // First, so the kernel retires the watches in the background
            // while the rest runs: an inotify instance closed with its
            // watches holds the exit up (see `unwatch_all`).
            passepartout::util::dir_watch::unwatch_all();
            // The run cgroups made for this process's commands go with it
            // (`serve` removes its own before it exits); busy ones are
            // left for the next start, never waited on.
            passepartout::sandbox::enforce::remove_run_cgroups();
            // So do its sessions' `/tmp`s: its sessions end with it.
            passepartout::sandbox::session_tmp::remove_all();
            // The command is done: what its background tasks were doing
            // (an overlay mounted ahead for a next action, a retry) is not
            // waited for; everything it must keep is written already.
            runtime.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!("passepartout: cannot start the async runtime: {e}");
            ExitCode::from(1)
        }
    }
}
