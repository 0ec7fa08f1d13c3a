//! What redacting one tool call's output costs, in an empty project and
//! in a given one, with no provider key configured and with two: the
//! search for the project's secret values (the secret files found and
//! read), the patterns compiled for the known values, and the whole
//! `redact_output` of a short output and of 64 KiB. The before figures of
//! docs/performance.md were taken with this bench's first version (the
//! scan and the compilation at every call).
//!
//! `cargo run --release --example bench_redact [RUNS] [DIR]`

use std::path::Path;
use std::time::{Duration, Instant};

use passepartout::gates::secret_values::{encoded_patterns, SecretValues};
use passepartout::gates::secrets::{redact_output_with, KnownPatterns};
use passepartout::sandbox::surface::redactable_files;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                f();
                started.elapsed()
            })
            .collect(),
    )
}

const OUTPUT: &str = "   Compiling passepartout v0.1.0\n    Finished `dev` profile in 0.42s\n\
                      test result: ok. 3 passed; 0 failed\n";

fn in_project(project: &Path, runs: usize, long_output: &str) {
    let keys = [
        "sk-local-provider-key-0123456789abcdef".to_string(),
        "another-provider-key-abcdef0123456789".to_string(),
    ];
    let cache = SecretValues::default();
    let patterns = KnownPatterns::default();
    let walk = time(runs, || {
        let _ = redactable_files(project);
    });
    let files = redactable_files(project);
    let values = cache.values(project, &files);
    let read = time(runs, || {
        let _ = cache.values(project, &files);
    });
    for configured in [0, 2] {
        let mut known: Vec<String> = keys[..configured].to_vec();
        known.extend(values.iter().cloned());
        let compile = time(runs, || {
            for v in &known {
                let _ = encoded_patterns(v);
            }
        });
        let whole = |output: &str| {
            time(runs, || {
                let mut known: Vec<String> = keys[..configured].to_vec();
                known.extend(cache.values(project, &redactable_files(project)));
                let _ = redact_output_with(output, &known, &patterns);
            })
        };
        let (short, long) = (whole(OUTPUT), whole(long_output));
        println!(
            "{}: {configured} provider key(s), {} secret file(s), {} project value(s): \
             the walk {walk:?}, the values {read:?}, compiling the patterns {compile:?} \
             (now once); the whole redaction {short:?}, of {} KiB of output {long:?} \
             (median of {runs})",
            project.display(),
            files.len(),
            values.len(),
            long_output.len() / 1024
        );
    }
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let long_output = OUTPUT.repeat(64 * 1024 / OUTPUT.len());
    let empty = tempfile::tempdir()?;
    in_project(empty.path(), runs, &long_output);
    if let Some(project) = std::env::args().nth(2) {
        in_project(Path::new(&project), runs, &long_output);
    }
    Ok(())
}
