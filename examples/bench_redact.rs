//! What redacting one tool call's output costs, in an empty project and
//! in a given one, with no provider key configured and with two: the
//! search for the project's secret values (the secret files found and
//! read), the patterns compiled for the known values, and the whole
//! `redact_output` of a short output and of 64 KiB; then issue 38's
//! figure: 1 MB of tool output with 100 known values (the matcher built
//! once, as the daemon keeps it). The before figures of
//! docs/performance.md were taken with this bench's first version (the
//! scan and the compilation at every call).
//!
//! `cargo run --release --example bench_redact [RUNS] [DIR]`

use std::path::Path;
use std::time::{Duration, Instant};

use passepartout::gates::known_values::{base64, KnownValue, ValueMatcher};
use passepartout::gates::secret_rules;
use passepartout::gates::secret_values::SecretValues;
use passepartout::gates::secrets::{redact_output_with, scan, KnownPatterns};
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
    let values = cache.values(project, &files, None);
    let read = time(runs, || {
        let _ = cache.values(project, &files, None);
    });
    let provider = |k: &String| KnownValue::new(k.as_str(), "configured API key");
    for configured in [0, 2] {
        let mut known: Vec<KnownValue> = keys[..configured].iter().map(provider).collect();
        known.extend(values.iter().cloned());
        let compile = time(runs, || {
            let _ = ValueMatcher::new(&known);
        });
        let whole = |output: &str| {
            time(runs, || {
                let mut known: Vec<KnownValue> = keys[..configured].iter().map(provider).collect();
                known.extend(cache.values(project, &redactable_files(project), None));
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

/// Issue 38's figure: 1 MB of build and test output with 100 known values,
/// 20 of them present (plain, base64 and hex), the matcher kept.
fn one_megabyte(runs: usize) {
    let known: Vec<KnownValue> = (0..100)
        .map(|i| {
            KnownValue::new(
                format!(
                    "Vq{i:03}-s3cr3t-{:016x}",
                    (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ),
                format!("value of KEY_{i} from .env"),
            )
        })
        .collect();
    let line = "   Compiling serde_json v1.0.128 (registry+https://github.com/rust-lang/crates.io-index)\n\
                test gates::secrets::tests::output_redaction_takes_out_known_keys_and_shapes ... ok\n\
                warning: unused variable: `x` --> src/main.rs:3:9 | let x = 5;\n";
    let mut output = String::with_capacity(1 << 20);
    let mut planted = 0;
    while output.len() < (1 << 20) {
        output.push_str(line);
        if output.len() / 50_000 > planted && planted < 20 {
            let v = &known[planted * 5].value;
            match planted % 3 {
                0 => output.push_str(&format!("DEBUG token={v}\n")),
                1 => output.push_str(&format!("{}\n", base64(format!("X={v}\n").as_bytes()))),
                _ => output.push_str(&format!(
                    "{}\n",
                    v.bytes().map(|b| format!("{b:02x}")).collect::<String>()
                )),
            }
            planted += 1;
        }
    }
    let patterns = KnownPatterns::default();
    let build = time(runs.min(20), || {
        let _ = ValueMatcher::new(&known);
    });
    let mut hits = 0;
    let whole = time(runs, || {
        hits = redact_output_with(&output, &known, &patterns).hits;
    });
    let matcher = ValueMatcher::new(&known);
    let by_value = time(runs, || {
        let _ = matcher.find(&output);
    });
    let by_rule = time(runs, || {
        let _ = scan(&output);
    });
    // The rules costing most, each run alone over the whole output as
    // `scan` runs it (not at all when none of its anchors is there).
    let mut per_rule: Vec<(Duration, &str)> = secret_rules::rules()
        .iter()
        .map(|rule| {
            let t = time(runs.min(10), || {
                let anchored = rule.anchors.iter().any(|a| output.contains(a.as_str()));
                if rule.anchors.is_empty() || anchored {
                    let _ = rule.regex.find_iter(&output).count();
                }
            });
            (t, rule.kind.as_str())
        })
        .collect();
    per_rule.sort_by_key(|r| std::cmp::Reverse(r.0));
    println!("the regexes alone, costliest first: {:?}", &per_rule[..5]);
    println!(
        "1 MB of output ({} bytes), 100 known values, {planted} planted: \
         the redaction {whole:?} ({hits} redacted; median of {runs}; by value {by_value:?}, \
         by rule {by_rule:?}), building the matcher once {build:?} ({} KiB)",
        output.len(),
        matcher.memory() / 1024
    );
}

fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let long_output = OUTPUT.repeat(64 * 1024 / OUTPUT.len());
    one_megabyte(runs);
    let empty = tempfile::tempdir()?;
    in_project(empty.path(), runs, &long_output);
    if let Some(project) = std::env::args().nth(2) {
        in_project(Path::new(&project), runs, &long_output);
    }
    Ok(())
}
