#!/usr/bin/env bash
# Write link/startup.order: the functions of this binary that a cold start
# runs, which build.rs hands to the linker so they sit side by side
# (docs/performance.md, "The start-up code side by side"). Run it after a
# change of compiler or dependencies, or when start-up code moved; a stale
# list only costs speed. Needs valgrind (apt-get install valgrind).
#
# The names are linker symbols, and the same code has other names in two
# builds that differ in features: `cargo build --release` (the README's)
# and a build with the examples (`--examples`, as the benchmarks want),
# whose dev-dependencies turn on more features of shared dependencies. So
# both binaries are built and traced, and the list holds the names of
# both; each build finds its own. BINS="path ..." traces those binaries
# instead (e.g. a `dist` build: a list must come from the build it is for).
#
# The starts traced, per binary and in this order (a function keeps its
# first place): `passepartout serve` from exec to its `initialize` reply
# and its exit at the end of input (what editors launch, and what
# `bench_daemon -- cold` times), `passepartout --version`, and
# `passepartout run` through a one-request turn against the fake provider
# (the start-up `scripts/peer-compare.sh` prints).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null 2>&1 || {
  echo "startup-order.sh needs valgrind: apt-get install -y valgrind" >&2
  exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${BINS:-}" ]; then
  cargo build --release --bin passepartout
  cp target/release/passepartout "$work/passepartout-plain"
  cargo build --release --bin passepartout --example fake_provider
  BINS="$work/passepartout-plain $PWD/target/release/passepartout"
fi
fake=${FAKE_PROVIDER:-$PWD/target/release/examples/fake_provider}
compiler=$(rustc -V)

# A home of its own: no configuration, so discovery runs, as in the bench.
export HOME=$work/home XDG_CONFIG_HOME=$work/home/config XDG_STATE_HOME=$work/home/state
export PASSEPARTOUT_LOG=error
fresh_home() {
  rm -rf "$HOME" "$work/project"
  mkdir -p "$HOME" "$work/project"
}

trace() {
  valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --dump-line=no --callgrind-out-file="$work/callgrind.%p" "$@" \
    2>>"$work/valgrind.log" || {
    echo "startup-order.sh: tracing $* failed:" >&2
    tail -5 "$work/valgrind.log" >&2
    exit 1
  }
}

# The function names one binary's starts run, in the order above, on
# stdout. Only symbol names are kept: callgrind names code without one by
# its address, and the start `(below main)`; the `'N` suffix marks a
# recursion depth, not another symbol.
names_of() {
  local bin
  bin=$(realpath "$1")
  rm -f "$work"/callgrind.*
  # From a fresh home, then again with the state the first start left (as
  # the bench's starts after its first); stdout a pipe, as an editor's:
  # the reply goes out the way it does there.
  fresh_home
  for _ in first again; do
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}' \
      | trace "$bin" serve | cat >/dev/null
  done
  trace "$bin" --version >/dev/null
  # `run`, one request answered with text: the fake provider serves the
  # script and prints its URL; it exits at the end of its input, so a
  # FIFO holds that open until the turn is over.
  if [ -x "$fake" ]; then
    chunk() { printf '{"choices":[{"index":0,"delta":%s%s}]}' "$1" "${2:+,\"finish_reason\":\"$2\"}"; }
    printf '[{"type":"open_ai","delay_ms":0,"done":true,"chunks":[%s,%s]}]' \
      "$(chunk '{"role":"assistant","content":"Done."}')" "$(chunk '{}' stop)" >"$work/script.json"
    rm -f "$work/in" "$work/url"
    mkfifo "$work/in"
    "$fake" "$work/script.json" <"$work/in" >"$work/url" &
    local fake_pid=$! url=
    exec {hold}>"$work/in"
    for _ in $(seq 500); do
      url=$(head -n1 "$work/url" 2>/dev/null || true)
      [ -n "$url" ] && break
      sleep 0.01
    done
    # A fresh home, as the peer script's: no skill cache yet.
    fresh_home
    (cd "$work/project" && trace "$bin" run --provider-url "$url" --mode auto "Say done." \
      </dev/null >/dev/null)
    exec {hold}>&-
    wait "$fake_pid" 2>/dev/null || true
  else
    echo "startup-order.sh: no fake provider at $fake (cargo build --release --example fake_provider): run not traced" >&2
  fi
  # Functions of this binary (`ob=` its path), as `fn=` names them.
  awk -v bin="$bin" '
    /^ob=/ { ours = (substr($0, 4) == bin) }
    /^fn=/ && ours { name = substr($0, 4); sub(/'"'"'[0-9]+$/, "", name); if (name ~ /^[A-Za-z_][A-Za-z0-9_$.]*$/) print name }
  ' $(ls -tr "$work"/callgrind.*)
}

order=link/startup.order
mkdir -p link
{
  echo "# Written by scripts/startup-order.sh: the functions a cold start runs,"
  echo "# for the linker's --symbol-ordering-file (build.rs). $compiler"
  for bin in $BINS; do names_of "$bin"; done | awk '!seen[$0]++'
} >"$order.tmp"
mv "$order.tmp" "$order"
echo "$(grep -vc '^#' "$order") functions in $order"
