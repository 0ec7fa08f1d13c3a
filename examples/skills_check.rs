//! `cargo run --example skills_check -- PATH...`: print the diagnostics of
//! skill files the way `passepartout skills check` will.
fn main() {
    let paths: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    let code = passepartout::skills::check_command(&paths, &mut std::io::stdout());
    std::process::exit(code);
}
