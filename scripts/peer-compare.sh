#!/usr/bin/env bash
# The same scripted 20-call task through `passepartout run` against the fake
# provider, so a regression in start-up, per-call time or memory shows.
#
# Prints: start-up (a one-request turn, no tool call), per-call time (the
# 20-call turn minus the start-up, divided by 20; each call is a sandboxed
# `shell` action) and the peak RSS of each. Peers (Codex, Claude Code) are
# npm installs and usually absent: when one is on PATH its start-up and peak
# RSS (`--version`) are printed too; driving a peer's tool calls needs the
# fake provider to speak its wire (Responses API, Anthropic tools), which it
# does not yet, so a peer's per-call time is not measured.
#
# Usage: scripts/peer-compare.sh [RUNS]   (default 5; medians are printed)
# It runs in a fresh empty project; PEER_PROJECT=DIR runs it in DIR instead
# (a large repository shows what the project's size adds per call).
# PEER_STEPS=1 adds one more 20-call run with the debug log on and prints
# where a call's time goes, step by step (median µs over calls 2–20, from
# the log's timestamps: `call step` lines of agent::act and the turn's
# perceive/reason/act lines; the log itself adds a little to each step).
# Binaries: PASSEPARTOUT_BIN (default target/release/passepartout, else
# target/debug/passepartout) and PASSEPARTOUT_FAKE_PROVIDER (likewise
# examples/fake_provider). Build first: cargo build --release --bins --examples
set -euo pipefail

runs=${1:-5}
calls=20
root=$(cd "$(dirname "$0")/.." && pwd)
pick() {
    for p in "$@"; do
        if [ -x "$p" ]; then
            echo "$p"
            return
        fi
    done
    echo "missing: $*; build with cargo build --release --bins --examples" >&2
    exit 1
}
bin=${PASSEPARTOUT_BIN:-$(pick "$root/target/release/passepartout" "$root/target/debug/passepartout")}
fake=${PASSEPARTOUT_FAKE_PROVIDER:-$(pick "$root/target/release/examples/fake_provider" "$root/target/debug/examples/fake_provider")}

work=$(mktemp -d)
fake_pid=
cleanup() {
    if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

chunk() { printf '{"choices":[{"index":0,"delta":%s%s}]}' "$1" "${2:+,\"finish_reason\":\"$2\"}"; }
tool_reply() {
    printf '{"type":"open_ai","delay_ms":0,"done":true,"chunks":[%s,%s,%s]}' \
        "$(chunk '{"role":"assistant","content":null}')" \
        "$(chunk "{\"tool_calls\":[{\"index\":0,\"id\":\"c$1\",\"type\":\"function\",\"function\":{\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":\\\"echo call $1\\\"}\"}}]}")" \
        "$(chunk '{}' tool_calls)"
}
text_reply() {
    printf '{"type":"open_ai","delay_ms":0,"done":true,"chunks":[%s,%s]}' \
        "$(chunk '{"role":"assistant","content":"Done."}')" "$(chunk '{}' stop)"
}

# One script per task: the one-request turn, then the 20-call turn.
script() {
    local n=$1
    printf '['
    for ((i = 1; i <= n; i++)); do tool_reply "$i"; printf ','; done
    text_reply
    printf ']'
}

# Runs `passepartout run` once against a fresh fake provider; prints
# "<wall ms> <peak RSS KiB>".
measure() {
    local n=$1
    script "$n" >"$work/script.json"
    # The fake provider exits at the end of its input: hold a FIFO open.
    : >"$work/url"
    rm -f "$work/in"
    mkfifo "$work/in"
    "$fake" "$work/script.json" <"$work/in" >"$work/url" &
    fake_pid=$!
    exec {hold}>"$work/in"
    local url=
    while [ -z "$url" ]; do
        sleep 0.01
        url=$(head -n1 "$work/url")
    done
    local home=$work/home project=$work/project
    rm -rf "$home" "$project"
    mkdir -p "$home" "$project"
    local start end log_env=()
    if [ -n "${STEPS_LOG:-}" ]; then log_env=(PASSEPARTOUT_LOG=passepartout=debug); fi
    start=$(date +%s%N)
    # In the fresh, empty project (PEER_PROJECT names another one, e.g. a
    # large repository, to see what its size costs).
    (cd "${PEER_PROJECT:-$project}" &&
    env "${log_env[@]}" HOME=$home XDG_CONFIG_HOME=$home/config XDG_STATE_HOME=$home/state XDG_DATA_HOME=$home/data \
        /usr/bin/time -f '%M' -o "$work/rss" \
        "$bin" run --provider-url "$url" --max-rounds $((n + 2)) --mode auto \
        "Run the $n commands." </dev/null >"$work/out" 2>"$work/err") || {
        echo "passepartout run failed:" >&2
        cat "$work/out" "$work/err" >&2
        exit 1
    }
    end=$(date +%s%N)
    exec {hold}>&-
    wait "$fake_pid" 2>/dev/null || true
    fake_pid=
    if [ "$(cat "$work/out" "$work/err" | grep -c 'exit code: 0' || true)" -lt "$n" ]; then
        echo "the $n-call turn did not run every call:" >&2
        cat "$work/out" "$work/err" >&2
        exit 1
    fi
    echo "$(((end - start) / 1000)) $(cat "$work/rss")"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for ((r = 0; r < runs; r++)); do
    measure 0 >>"$work/start"
    measure "$calls" >>"$work/task"
done
start_us=$(cut -d' ' -f1 "$work/start" | median)
task_us=$(cut -d' ' -f1 "$work/task" | median)
start_rss=$(cut -d' ' -f2 "$work/start" | median)
task_rss=$(cut -d' ' -f2 "$work/task" | median)
per_call_us=$(((task_us - start_us) / calls))

echo "passepartout ($bin), median of $runs runs, load $(cut -d' ' -f1 /proc/loadavg), project ${PEER_PROJECT:-a fresh empty folder}"
printf '  start-up (one request, no tool call): %d.%03d ms, peak RSS %d KiB\n' \
    $((start_us / 1000)) $((start_us % 1000)) "$start_rss"
printf '  %d sandboxed shell calls: %d.%03d ms, peak RSS %d KiB\n' \
    "$calls" $((task_us / 1000)) $((task_us % 1000)) "$task_rss"
printf '  per call (model round trip + sandboxed action): %d.%03d ms\n' \
    $((per_call_us / 1000)) $((per_call_us % 1000))

# Where a call's time goes: the gap between consecutive events of the debug
# log, per kind of gap, median over every call but the first.
steps() {
    STEPS_LOG=1 measure "$calls" >/dev/null
    awk '
        function at(ts,   t) { split(substr(ts, 12, 15), t, ":"); return t[1] * 3600 + t[2] * 60 + t[3] }
        {
            ev = ""
            if ($0 ~ /agent::turn: act /) { ev = "act"; acts++ }
            else if ($0 ~ /agent::turn: perceive /) ev = "perceive"
            else if ($0 ~ /agent::turn: reason /) ev = "reason"
            else if (match($0, /step="[^"]*"/)) ev = substr($0, RSTART + 6, RLENGTH - 7)
            if (ev == "") next
            now = at($1)
            if (acts >= 2 && prev != "" && !(ev == "act" && prev == "act")) {
                key = prev " -> " ev
                if (!(key in n)) order[++kinds] = key
                v[key, ++n[key]] = (now - last) * 1e6
            }
            prev = ev; last = now
        }
        END {
            for (k = 1; k <= kinds; k++) {
                key = order[k]; m = n[key]
                for (i = 1; i <= m; i++) a[i] = v[key, i]
                for (i = 2; i <= m; i++) { x = a[i]; j = i - 1; while (j > 0 && a[j] > x) { a[j + 1] = a[j]; j-- } a[j + 1] = x }
                printf "  %-36s %8.0f µs  (%d calls)\n", key, a[int((m + 1) / 2)], m
                total += a[int((m + 1) / 2)]
            }
            printf "  %-36s %8.0f µs\n", "sum of the medians", total
        }' "$work/err"
}
if [ -n "${PEER_STEPS:-}" ]; then
    echo "where a call goes (debug log on, one run, calls 2-$calls):"
    steps
fi

for peer in codex claude; do
    if command -v "$peer" >/dev/null 2>&1; then
        start=$(date +%s%N)
        /usr/bin/time -f '%M' -o "$work/rss" "$peer" --version >/dev/null 2>&1 || true
        end=$(date +%s%N)
        us=$(((end - start) / 1000))
        printf '%s: start-up (--version) %d.%03d ms, peak RSS %d KiB; per call not measured\n' \
            "$peer" $((us / 1000)) $((us % 1000)) "$(cat "$work/rss")"
    else
        echo "$peer: not installed (npm), not measured"
    fi
done
