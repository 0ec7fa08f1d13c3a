#!/usr/bin/env bash
# Install the official Python ACP SDK (tests/sdk/requirements.txt) into
# target/sdk-venv, once; tests/suite/sdk_python.rs runs its client there.
# Needs python3 (3.10+) with the venv module (Debian: python3-venv) and
# PyPI. A second run with the venv in place does nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/sdk-venv
stamp=$venv/.installed
if [ -f "$stamp" ] && cmp -s tests/sdk/requirements.txt "$stamp"; then
    exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/sdk/requirements.txt
cp tests/sdk/requirements.txt "$stamp"
echo "tests/sdk/setup.sh: the Python ACP SDK is in $venv"
