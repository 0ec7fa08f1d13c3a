//! What redacting one tool call's output costs, in an empty project and
//! in a given one, with no provider key configured and with two: the
//! search for the project's secret values (the secret files found and
//! read), the patterns compiled for the known values, and the whole
//! `redact_output` of a short output.
//!
//! `cargo run --release --example bench_redact [RUNS] [DIR]`

use std::path::Path;
use std::time::{Duration, Instant};

use passepartout::gates::secret_values::{encoded_patterns, project_secret_values};
use passepartout::gates::secrets::redact_output;

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

fn in_project(project: &Path, runs: usize) {
    let keys = [
        "sk-local-provider-key-0123456789abcdef".to_string(),
        "another-provider-key-abcdef0123456789".to_string(),
    ];
    let scan = time(runs, || {
        let _ = project_secret_values(project);
    });
    let values = project_secret_values(project);
    for configured in [0, 2] {
        let mut known: Vec<String> = keys[..configured].to_vec();
        known.extend(values.iter().cloned());
        let compile = time(runs, || {
            for v in &known {
                let _ = encoded_patterns(v);
            }
        });
        let whole = time(runs, || {
            let mut known: Vec<String> = keys[..configured].to_vec();
            known.extend(project_secret_values(project));
            let _ = redact_output(OUTPUT, &known);
        });
        println!(
            "{}: {configured} provider key(s), {} project value(s): secret files {scan:?}, \
             patterns {compile:?}, the whole redaction {whole:?} (median of {runs})",
            project.display(),
            values.len()
        );
    }
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let empty = tempfile::tempdir()?;
    in_project(empty.path(), runs);
    if let Some(project) = std::env::args().nth(2) {
        in_project(Path::new(&project), runs);
    }
    Ok(())
}
