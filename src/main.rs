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
            // The run cgroups made for this process's commands go with it
            // (`serve` removes its own before it exits).
            passepartout::sandbox::enforce::remove_run_cgroups();
            // So do its sessions' `/tmp`s: its sessions end with it.
            passepartout::sandbox::session_tmp::remove_all();
            code
        }
        Err(e) => {
            eprintln!("passepartout: cannot start the async runtime: {e}");
            ExitCode::from(1)
        }
    }
}
