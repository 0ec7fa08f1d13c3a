#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (the real binary over
# stdio, a fake provider on 127.0.0.1, real bwrap), then the Emacs ERT tests
# in batch Emacs against the same binary. Ends with one tally line.
#
# The tests need bwrap, slirp4netns (a granted network), iproute2 (the
# network-scope tests' veth pair), git and every
# tested Emacs (28.2 from apt and 30.1 unpacked from bookworm-backports, see
# tests/elisp/emacs-versions.sh), and python3 with venv (the official
# Python ACP SDK is installed from PyPI into target/sdk-venv by
# tests/sdk/setup.sh).
# When one is missing: as root on a Debian-like system they are installed
# with apt-get (non-interactive); otherwise the script prints the exact
# command to run and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

need_tools() {
    local missing=() packages=()
    command -v bwrap >/dev/null 2>&1 || { missing+=(bwrap); packages+=(bubblewrap); }
    command -v slirp4netns >/dev/null 2>&1 || { missing+=(slirp4netns); packages+=(slirp4netns); }
    command -v git >/dev/null 2>&1 || { missing+=(git); packages+=(git); }
    # The network-scope tests build a veth pair and a namespace with ip(8).
    command -v ip >/dev/null 2>&1 || { missing+=(ip); packages+=(iproute2); }
    # The Python ACP SDK test (tests/sdk) needs python3 with venv and pip.
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || { missing+=("python3 venv"); packages+=(python3 python3-venv); }
    # The install tests run the system's `python3 -m pip` (their PATH is the system's own).
    PATH=/usr/local/bin:/usr/bin:/bin python3 -c 'import pip' >/dev/null 2>&1 || { missing+=("python3 pip"); packages+=(python3-pip); }
    if [ ${#missing[@]} -eq 0 ]; then
        tests/elisp/emacs-versions.sh install
        return 0
    fi
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: installing ${packages[*]} (missing: ${missing[*]})"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${packages[@]}"
        tests/elisp/emacs-versions.sh install
        return 0
    fi
    echo "test.sh: the tests need ${missing[*]}, which are not on PATH. Install them with:" >&2
    echo "    sudo apt-get install ${packages[*]}" >&2
    echo "    sudo tests/elisp/emacs-versions.sh install   # Emacs 28.2 and 30.1" >&2
    echo "(other systems: install bubblewrap, slirp4netns, iproute2, git, python3 with venv and Emacs 28.1+ with your package manager," >&2
    echo " then run tests/elisp/run.sh with EMACS=... once per Emacs)" >&2
    exit 2
}
need_tools

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# One build of everything the tests run: the daemon, the examples (the ERT
# tests' fake provider, the MCP tests' echo server; the benches only need to
# compile) and the test binaries (the unit tests, tests/all.rs). In one cargo
# call the two cores stay busy until the last link; `cargo test` then only
# runs. Examples are not built a second time as empty test binaries.
cargo build --locked --workspace --bins --examples --tests
# The official Python ACP SDK, for tests/suite/sdk_python.rs (once; PyPI).
tests/sdk/setup.sh
# A failing step does not stop the others: every suite runs, the tally
# counts them all, and the script fails at the end if anything did.
status=0
cargo test --locked --workspace --no-fail-fast --lib --bins --tests 2>&1 | tee -a "$log" || status=1
# The Emacs suite once per tested Emacs (a missing one fails here), the
# versions side by side: each run mostly waits on its daemons, and each has
# its own temporary directories and byte-compiles into its own.
emacsen=$(tests/elisp/emacs-versions.sh list)
ert_pids=() ert_logs=()
for emacs in $emacsen; do
    ert_log=$(mktemp)
    ert_logs+=("$ert_log")
    EMACS=$emacs bash tests/elisp/run.sh >"$ert_log" 2>&1 &
    ert_pids+=($!)
done
for i in "${!ert_pids[@]}"; do
    wait "${ert_pids[$i]}" || status=1
    tee -a "$log" <"${ert_logs[$i]}"
    rm -f "${ert_logs[$i]}"
done

rust_passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed;/) s += $i } END { print s + 0 }' "$log")
rust_failed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed;/) s += $i } END { print s + 0 }' "$log")
ert_lines=$(grep -E '^Ran [0-9]+ tests?, [0-9]+ results? as expected, [0-9]+ unexpected' "$log")
ert_passed=$(sed -E 's/^Ran [0-9]+ tests?, ([0-9]+) results? as expected.*/\1/' <<<"$ert_lines" | awk '{ s += $1 } END { print s + 0 }')
ert_failed=$(sed -E 's/.* ([0-9]+) unexpected.*/\1/' <<<"$ert_lines" | awk '{ s += $1 } END { print s + 0 }')
echo "Rust: $rust_passed passed, $rust_failed failed; Emacs ERT ($(wc -w <<<"$emacsen") Emacs versions): $ert_passed passed, $ert_failed failed"
echo "$((rust_passed + ert_passed)) passed, $((rust_failed + ert_failed)) failed"
exit "$status"
