#!/usr/bin/env bash
# Write link/startup.order: the functions of this binary that a cold start
# runs, which build.rs hands to the linker so they sit side by side
# (docs/performance.md, "The start-up code side by side"). Run it after a change of
# compiler or dependencies, or when start-up code moved; a stale list only
# costs speed. Needs valgrind (apt-get install valgrind) and a release
# build, which it makes (or BIN=path/to/passepartout: trace that binary,
# e.g. a `dist` build; the list must come from the profile it is for).
#
# The starts traced, in this order (a function keeps its first place):
# `passepartout serve` from exec to its `initialize` reply and its exit at
# the end of input (what editors launch, and what `bench_daemon -- cold`
# times), `passepartout --version`, and `passepartout run` through a
# one-request turn against the fake provider (the start-up
# `scripts/peer-compare.sh` prints).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null 2>&1 || {
  echo "startup-order.sh needs valgrind: apt-get install -y valgrind" >&2
  exit 2
}
if [ -z "${BIN:-}" ]; then
  cargo build --release --bin passepartout --example fake_provider
  BIN=$PWD/target/release/passepartout
fi
fake=${FAKE_PROVIDER:-$PWD/target/release/examples/fake_provider}
bin=$(realpath "$BIN")
compiler=$(rustc -V)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A home of its own: no configuration, so discovery runs, as in the bench.
export HOME=$work/home XDG_CONFIG_HOME=$work/home/config XDG_STATE_HOME=$work/home/state
export PASSEPARTOUT_LOG=error
mkdir -p "$HOME"

trace() {
  valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --dump-line=no --callgrind-out-file="$work/callgrind.%p" "$@" \
    2>>"$work/valgrind.log" || {
    echo "startup-order.sh: tracing $* failed:" >&2
    tail -5 "$work/valgrind.log" >&2
    exit 1
  }
}
# stdout a pipe, as an editor's: the reply goes out the way it does there.
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}' \
  | trace "$bin" serve | cat >/dev/null
trace "$bin" --version >/dev/null

# `run`, one request answered with text: the fake provider serves the
# script and prints its URL; it exits at the end of its input, so a FIFO
# holds that open until the turn is over.
if [ -x "$fake" ]; then
  chunk() { printf '{"choices":[{"index":0,"delta":%s%s}]}' "$1" "${2:+,\"finish_reason\":\"$2\"}"; }
  printf '[{"type":"open_ai","delay_ms":0,"done":true,"chunks":[%s,%s]}]' \
    "$(chunk '{"role":"assistant","content":"Done."}')" "$(chunk '{}' stop)" >"$work/script.json"
  mkfifo "$work/in"
  "$fake" "$work/script.json" <"$work/in" >"$work/url" &
  fake_pid=$!
  exec {hold}>"$work/in"
  for _ in $(seq 500); do
    url=$(head -n1 "$work/url" 2>/dev/null || true)
    [ -n "$url" ] && break
    sleep 0.01
  done
  mkdir -p "$work/project"
  (cd "$work/project" && trace "$bin" run --provider-url "$url" --mode auto "Say done." \
    </dev/null >/dev/null)
  exec {hold}>&-
  wait "$fake_pid" 2>/dev/null || true
else
  echo "startup-order.sh: no fake provider at $fake (cargo build --release --example fake_provider): run not traced" >&2
fi

# Functions of this binary (`ob=` its path), as `fn=` names them; the
# `'N` suffix marks a recursion depth, not another symbol. Only symbol
# names are kept: callgrind names code without one by its address, and
# the start `(below main)`.
order=link/startup.order
mkdir -p link
{
  echo "# Written by scripts/startup-order.sh: the functions a cold start runs,"
  echo "# for the linker's --symbol-ordering-file (build.rs). $compiler"
  awk -v bin="$bin" '
    /^ob=/ { ours = (substr($0, 4) == bin) }
    /^fn=/ && ours { name = substr($0, 4); sub(/'"'"'[0-9]+$/, "", name); if (name ~ /^[A-Za-z_][A-Za-z0-9_$.]*$/ && !(name in seen)) { seen[name] = 1; print name } }
  ' $(ls -tr "$work"/callgrind.*)
} >"$order.tmp"
mv "$order.tmp" "$order"
echo "$(grep -vc '^#' "$order") functions in $order"
