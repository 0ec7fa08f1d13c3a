#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (the real binary over
# stdio, a fake provider on 127.0.0.1, real bwrap), then the Emacs ERT tests
# in batch Emacs against the same binary. Ends with one tally line.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

cargo build --locked --bins --examples
cargo test --locked --all-targets 2>&1 | tee -a "$log"
bash tests/elisp/run.sh 2>&1 | tee -a "$log"

rust_passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed;/) s += $i } END { print s + 0 }' "$log")
rust_failed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed;/) s += $i } END { print s + 0 }' "$log")
ert_line=$(grep -E '^Ran [0-9]+ tests?, [0-9]+ results? as expected, [0-9]+ unexpected' "$log" | tail -n 1)
ert_passed=$(sed -E 's/^Ran [0-9]+ tests?, ([0-9]+) results? as expected.*/\1/' <<<"$ert_line")
ert_failed=$(sed -E 's/.* ([0-9]+) unexpected.*/\1/' <<<"$ert_line")
echo "Rust: $rust_passed passed, $rust_failed failed; Emacs ERT: $ert_passed passed, $ert_failed failed"
echo "$((rust_passed + ert_passed)) passed, $((rust_failed + ert_failed)) failed"
