#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (the real binary over
# stdio, a fake provider on 127.0.0.1, real bwrap), then the Emacs ERT tests
# in batch Emacs against the same binary.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked --bins --examples
cargo test --locked --all-targets

if [ -x tests/elisp/run.sh ] || [ -f tests/elisp/run.sh ]; then
  bash tests/elisp/run.sh
fi
