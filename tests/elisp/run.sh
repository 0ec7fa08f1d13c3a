#!/bin/sh
# Run the Emacs Lisp test suite against the real daemon and fake provider.
# Builds nothing: run `cargo build --bins --examples` first.
#   PASSEPARTOUT_BIN            the daemon (default target/debug/passepartout)
#   PASSEPARTOUT_FAKE_PROVIDER  the fake model server
#                               (default target/debug/examples/fake_provider)
#   EMACS                       the Emacs to use (default emacs)
# Extra arguments are passed to Emacs, e.g. to select tests:
#   tests/elisp/run.sh --eval '(setq ert-selector "plan")'
set -eu
cd "$(dirname "$0")/../.."

PASSEPARTOUT_BIN=${PASSEPARTOUT_BIN:-target/debug/passepartout}
PASSEPARTOUT_FAKE_PROVIDER=${PASSEPARTOUT_FAKE_PROVIDER:-target/debug/examples/fake_provider}
EMACS=${EMACS:-emacs}
export PASSEPARTOUT_BIN PASSEPARTOUT_FAKE_PROVIDER

missing=0
for program in "$PASSEPARTOUT_BIN" "$PASSEPARTOUT_FAKE_PROVIDER"; do
    if [ ! -x "$program" ]; then
        echo "run.sh: missing $program; build it with: cargo build --bins --examples" >&2
        missing=1
    fi
done
[ "$missing" -eq 0 ] || exit 2

"$EMACS" -batch -Q --eval '(message "run.sh: Emacs %s (%s)" emacs-version (expand-file-name invocation-name invocation-directory))'

# The package must byte-compile without a single warning (the .elc files
# go to a temporary directory: the tests run the sources).
elc_dir=$(mktemp -d)
trap 'rm -rf "$elc_dir"' EXIT
PASSEPARTOUT_ELC_DIR=$elc_dir "$EMACS" -batch -Q -L elisp \
    --eval '(setq byte-compile-error-on-warn t)' \
    --eval '(setq byte-compile-dest-file-function (lambda (f) (expand-file-name (concat (file-name-nondirectory f) "c") (getenv "PASSEPARTOUT_ELC_DIR"))))' \
    -f batch-byte-compile elisp/*.el

# Every tests/elisp/*-tests.el file is part of the suite.
load_tests=""
for f in tests/elisp/*-tests.el; do
    load_tests="$load_tests -l $f"
done

# shellcheck disable=SC2086
"$EMACS" -batch -Q -L elisp -L tests/elisp \
    -l ert $load_tests \
    --eval '(defvar ert-selector t)' "$@" \
    --eval '(ert-run-tests-batch-and-exit ert-selector)'
