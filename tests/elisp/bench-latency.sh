#!/bin/sh
# How long a keystroke waits while a 1 MB answer streams into a chat, in a
# real terminal Emacs: tmux runs `emacs -nw' on bench-latency.el and types
# a key every 100 ms while the answer streams (newlines every 80
# characters, then one line).  With --batch: the same in batch Emacs,
# without keys nor redisplay (a floor).
#   EMACS                 the Emacs to measure (default emacs)
#   BENCH_LATENCY_KB      the answer's size (default 1000)
#   BENCH_LATENCY_RUNS    runs per shape (default 3)
#   BENCH_LATENCY_SHAPES  the shapes (default "lines one-line")
#   BENCH_LATENCY_PROFILE a file to write a CPU profile to
set -eu
cd "$(dirname "$0")/../.."
EMACS=${EMACS:-emacs}
RUNS=${BENCH_LATENCY_RUNS:-3}

# The package byte-compiled, as package.el installs it: interpreted, it
# allocates about ten times more while streaming, and so collects
# garbage that much more often.
elc=$(mktemp -d)
session=bench-latency-$$
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$elc"' EXIT
cp elisp/*.el "$elc"/
"$EMACS" -batch -Q -L "$elc" -f batch-byte-compile "$elc"/*.el 2>/dev/null

if [ "${1:-}" = "--batch" ]; then
    for shape in ${BENCH_LATENCY_SHAPES:-lines one-line}; do
        BENCH_LATENCY_SHAPE=$shape "$EMACS" -batch -Q -L "$elc" -L tests/elisp \
            -l bench-latency -f bench-latency-batch 2>/dev/null
    done
    exit 0
fi
command -v tmux >/dev/null || { echo "bench-latency.sh: needs tmux" >&2; exit 2; }

for shape in ${BENCH_LATENCY_SHAPES:-lines one-line}; do
    run=0
    while [ "$run" -lt "$RUNS" ]; do
        run=$((run + 1))
        out=$(mktemp -d)
        tmux new-session -d -s "$session" -x 100 -y 35 \
             "env BENCH_LATENCY_OUT=$out BENCH_LATENCY_PROFILE=${BENCH_LATENCY_PROFILE:-} BENCH_LATENCY_SHAPE=$shape BENCH_LATENCY_KB=${BENCH_LATENCY_KB:-1000} $EMACS -nw -Q -L $elc -L tests/elisp -l bench-latency -f bench-latency-terminal; sleep 1"
        while [ ! -e "$out/ready" ]; do sleep 0.05; done
        : >"$out/sent"
        while [ ! -e "$out/result" ]; do
            date +%s.%N >>"$out/sent"
            tmux send-keys -t "$session" x || { echo "bench-latency.sh: Emacs exited" >&2; exit 1; }
            sleep 0.1
        done
        cat "$out/result"
        tmux kill-session -t "$session" 2>/dev/null || true
        rm -rf "$out"
    done
done
