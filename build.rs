//! Build script: lays out the daemon's start-up code in one place.
//!
//! A cold start runs about a thousand functions scattered over 21 MB of
//! machine code, and each 64 KB window of it that is touched costs a page
//! fault. `link/startup.order` lists those functions; handed to the
//! linker, it puts them first, side by side, so a start touches a few
//! windows of code instead of 60–140 (docs/performance.md, "The start-up
//! code side by side").
//!
//! Only release builds (and profiles inheriting from release) are laid
//! out, and only when the linker takes `--symbol-ordering-file` (lld, the
//! default linker of Rust ≥ 1.90 on x86-64 Linux): a one-line program is
//! linked with the same compiler, linker and flags first, and any failure
//! leaves the layout to the linker. Names the list has that the binary
//! lacks (another compiler's hashes, functions since renamed) are skipped
//! without a word, so a stale list costs speed, never the build;
//! `scripts/startup-order.sh` writes it anew.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The start-up functions, one linker symbol per line.
const ORDER_FILE: &str = "link/startup.order";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let order = manifest.join(ORDER_FILE);
    if env::var("PROFILE").as_deref() != Ok("release") || !order.is_file() {
        return;
    }
    if order.to_string_lossy().contains(',') {
        // `-Wl,` splits its argument at commas.
        println!(
            "cargo:warning=start-up code left where the linker puts it \
             ({} has a comma, which -Wl, would split)",
            order.display()
        );
        return;
    }
    let flags = ordering_flags(&order);
    match linker_takes(&flags) {
        Ok(()) => {
            for flag in flags {
                println!("cargo:rustc-link-arg-bin=passepartout={flag}");
            }
        }
        Err(why) => println!(
            "cargo:warning=start-up code left where the linker puts it \
             (no --symbol-ordering-file: {why})"
        ),
    }
}

fn ordering_flags(order: &Path) -> Vec<String> {
    vec![
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // The list names functions of one build; others lack some.
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ]
}

/// Link an empty program with the flags, as this build would link ours.
fn linker_takes(flags: &[String]) -> Result<(), String> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("no OUT_DIR")?);
    let source = out_dir.join("link_probe.rs");
    std::fs::write(&source, "fn main() {}\n").map_err(|e| e.to_string())?;
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut probe = Command::new(rustc);
    probe
        .arg("--crate-type=bin")
        .arg("--edition=2021")
        .arg("-o")
        .arg(out_dir.join("link_probe"))
        .arg(&source);
    if let Ok(target) = env::var("TARGET") {
        probe.arg("--target").arg(target);
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        probe.arg("-C").arg({
            let mut arg = std::ffi::OsString::from("linker=");
            arg.push(linker);
            arg
        });
    }
    if let Ok(encoded) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        probe.args(encoded.split('\x1f').filter(|f| !f.is_empty()));
    }
    for flag in flags {
        probe.arg("-C").arg(format!("link-arg={flag}"));
    }
    let output = probe
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("the probe link failed");
        Err(first.trim().chars().take(200).collect())
    }
}
