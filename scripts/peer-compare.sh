#!/usr/bin/env bash
# The same scripted 20-call task through `passepartout run` against the fake
# provider, so a regression in start-up, per-call time or memory shows.
#
# Prints: start-up (a one-request turn, no tool call), per-call time (the
# 20-call turn minus the start-up, divided by 20; each call is a sandboxed
# `shell` action) and the peak RSS of each; and issue 40's two figures:
# - per call against a bare bwrap spawn with the same flags: the bwrap
#   argument list and overlay of a real tool call, from the daemon's
#   `sandbox argv` debug line, run by bare `bwrap` 20 times a round in an
#   overlay of the project mounted ahead (as the daemon mounts it: a
#   holder's user and mount namespace, which the bare spawn joins with
#   `nsenter`); the median, the difference and whether it is within 10 ms;
# - `run`'s exit after its last model reply: from the debug log's last
#   `reason` line (the last request sent to the fake provider, so the
#   figure includes that round trip: an upper bound) to the process's
#   exit, in a one-call task; the median and whether it is within 30 ms.
# The three runs of a round and the bare spawns alternate. Peers (Codex, Claude Code) are
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
holder_pid=
cleanup() {
    if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; fi
    if [ -n "$holder_pid" ]; then kill "$holder_pid" 2>/dev/null || true; fi
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
    start=${EPOCHREALTIME/./}
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
    end=${EPOCHREALTIME/./}
    exec {hold}>&-
    wait "$fake_pid" 2>/dev/null || true
    fake_pid=
    if [ "$(cat "$work/out" "$work/err" | grep -c 'exit code: 0' || true)" -lt "$n" ]; then
        echo "the $n-call turn did not run every call:" >&2
        cat "$work/out" "$work/err" >&2
        exit 1
    fi
    echo "$((end - start)) $(cat "$work/rss") $end"
}

# The log file of the last run (the debug lines, with their timestamps).
run_log() { echo "$work/home/state/passepartout/logs/passepartout.log"; }

# The µs since the epoch of the last `reason` line of the last run's debug
# log (the turn's last request to the model).
last_request_us() {
    awk '/agent::turn: reason / { ts = $1 } END { print ts }' "$(run_log)" |
        python3 -c 'import sys, datetime as d; t = sys.stdin.read().strip(); print(int(d.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1e6))'
}

# The `sandbox argv` debug line of the last run's log as JSON (the last one).
sandbox_argv() {
    sed -n 's/.*sandbox argv argv=//p' "$(run_log)" | tail -n1
}

# One bare bwrap spawn with the daemon's arguments ($work/argv.json) in an
# overlay of its project mounted ahead by a holder process, as the daemon
# does; prints the µs the spawn took (the holder's set-up is not timed).
bare_once() {
    local upper=$work/bare/upper work_dir=$work/bare/work
    rm -rf "$work/bare"
    mkdir -p "$upper" "$work_dir"
    unshare --user --map-root-user --mount --propagation private -- sh -c \
        'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3,userxattr" "$1" && exec sleep 600' \
        sh "$project" "$upper" "$work_dir" </dev/null &
    holder_pid=$!
    until grep -q "^overlay $project " "/proc/$holder_pid/mounts" 2>/dev/null; do
        if ! kill -0 "$holder_pid" 2>/dev/null; then
            echo "the bare spawn's overlay could not be mounted" >&2
            exit 1
        fi
    done
    local t0 t1 ok=0
    t0=${EPOCHREALTIME/./}
    # In the run's directory already (the caller's `cd`), as the daemon
    # starts bwrap there.
    nsenter --target "$holder_pid" --user --mount --preserve-credentials -- \
        env -i "$bwrap_bin" "${bare_args[@]}" </dev/null >/dev/null 2>&1 || ok=$?
    t1=${EPOCHREALTIME/./}
    kill "$holder_pid" 2>/dev/null || true
    wait "$holder_pid" 2>/dev/null || true
    holder_pid=
    rm -rf "$work/bare"
    if [ "$ok" -ne 0 ]; then
        echo "the bare bwrap spawn failed ($ok):" >&2
        env -i "$bwrap_bin" "${bare_args[@]}" </dev/null >&2 || true
        exit 1
    fi
    echo $((t1 - t0))
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

bare_args=() project= bwrap_bin= cwd=
for ((r = 0; r < runs; r++)); do
    measure 0 >>"$work/start"
    measure "$calls" >>"$work/task"
    # One call: the task minus this, over the other calls, is a steady
    # call (the first call's one-time work, the sandbox's trial run and
    # the first walk of the project, left out).
    measure 1 >>"$work/one_call"
    # A one-call task with the debug log: the exit after the last model
    # reply, and the daemon's bwrap arguments for the bare spawns.
    STEPS_LOG=1 measure 1 >"$work/one"
    read -r _ _ exited <"$work/one"
    echo $((exited - $(last_request_us))) >>"$work/exit"
    # Each round's own: the paths it names are that run's.
    sandbox_argv >"$work/argv.json"
    if ! jq -e '.args and .overlay.project' "$work/argv.json" >/dev/null 2>&1; then
        echo "no sandbox argv with an overlay in the debug log:" >&2
        cat "$(run_log)" >&2
        exit 1
    fi
    mapfile -d '' -t bare_args < <(jq -j '.args[] | (., "\u0000")' "$work/argv.json")
    project=$(jq -r '.overlay.project' "$work/argv.json")
    bwrap_bin=$(jq -r '.bwrap' "$work/argv.json")
    cwd=$(jq -r '.cwd' "$work/argv.json")
    # The session's /tmp the arguments bind is gone with the run: made
    # again (empty) for the bare spawns.
    for ((i = 0; i + 1 < ${#bare_args[@]}; i++)); do
        case ${bare_args[i]} in --bind | --ro-bind) [ -e "${bare_args[i + 1]}" ] || mkdir -p "${bare_args[i + 1]}" ;; esac
    done
    # The project the arguments name: the one-call task's, still there.
    cd "$cwd"
    for ((i = 0; i < calls; i++)); do bare_once >>"$work/bare_times"; done
    cd "$root"
done
start_us=$(cut -d' ' -f1 "$work/start" | median)
task_us=$(cut -d' ' -f1 "$work/task" | median)
start_rss=$(cut -d' ' -f2 "$work/start" | median)
task_rss=$(cut -d' ' -f2 "$work/task" | median)
per_call_us=$(((task_us - start_us) / calls))
one_us=$(cut -d' ' -f1 "$work/one_call" | median)
steady_us=$(((task_us - one_us) / (calls - 1)))

echo "passepartout ($bin), median of $runs runs, load $(cut -d' ' -f1 /proc/loadavg), project ${PEER_PROJECT:-a fresh empty folder}"
printf '  start-up (one request, no tool call): %d.%03d ms, peak RSS %d KiB\n' \
    $((start_us / 1000)) $((start_us % 1000)) "$start_rss"
printf '  %d sandboxed shell calls: %d.%03d ms, peak RSS %d KiB\n' \
    "$calls" $((task_us / 1000)) $((task_us % 1000)) "$task_rss"
printf '  per call (model round trip + sandboxed action): %d.%03d ms\n' \
    $((per_call_us / 1000)) $((per_call_us % 1000))
printf '  a steady call (calls 2-%d: the task minus a one-call task, over %d): %d.%03d ms\n' \
    "$calls" $((calls - 1)) $((steady_us / 1000)) $((steady_us % 1000))
bare_us=$(median <"$work/bare_times")
printf '  bare bwrap spawn, same flags, in an overlay mounted ahead (median of %d): %d.%03d ms\n' \
    "$(wc -l <"$work/bare_times")" $((bare_us / 1000)) $((bare_us % 1000))
over() {
    local over_us=$(($1 - bare_us)) sign=
    if [ "$over_us" -lt 0 ]; then sign=-; fi
    local abs=${over_us#-}
    printf '  %s over the bare spawn: %s%d.%03d ms (within 10 ms: %s)\n' "$2" \
        "$sign" $((abs / 1000)) $((abs % 1000)) "$([ "$over_us" -le 10000 ] && echo yes || echo no)"
}
over "$per_call_us" "per call (20-call average)"
over "$steady_us" "a steady call"
exit_us=$(median <"$work/exit")
printf '  run exit after its last model request (median of %d): %d.%03d ms (within 30 ms: %s)\n' \
    "$runs" $((exit_us / 1000)) $((exit_us % 1000)) "$([ "$exit_us" -le 30000 ] && echo yes || echo no)"

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
        }' "$(run_log)"
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
