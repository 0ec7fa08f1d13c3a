#!/usr/bin/env bash
# The Emacs versions the package is tested on, installed side by side.
#
# Debian stable (bookworm) packages Emacs 28.2; bookworm-backports has
# Emacs 30.1, and apt installs only one emacs-nox at a time.  So 28.2
# comes from apt as `emacs', and 30.1 is unpacked with `dpkg -x' under
# $PASSEPARTOUT_EMACS30_DIR (default /opt/passepartout-emacs30) and run
# through a wrapper that points it at its own Lisp, data and dump file.
# The unpacked tree is kept: a second run downloads nothing.  Emacs 29 is
# not tested: neither bookworm nor bookworm-backports packages it.
#
#   tests/elisp/emacs-versions.sh install   install what is missing (root,
#                                           apt), else print the command
#   tests/elisp/emacs-versions.sh list      print one Emacs binary a line
#
# `list' fails, naming what is missing, when a tested Emacs is absent:
# CI must not pass by skipping a version.
set -euo pipefail

EMACS28=${PASSEPARTOUT_EMACS28:-emacs}
EMACS30_DIR=${PASSEPARTOUT_EMACS30_DIR:-/opt/passepartout-emacs30}
EMACS30=$EMACS30_DIR/bin/emacs

emacs_version() {
    "$1" -batch -Q --eval '(princ emacs-version)' 2>/dev/null
}

have28() {
    command -v "$EMACS28" >/dev/null 2>&1 && [[ $(emacs_version "$EMACS28") == 28.* ]]
}

have30() {
    [ -x "$EMACS30" ] && [[ $(emacs_version "$EMACS30") == 30.* ]]
}

# The Debian mirror the machine already uses, for the backports source.
debian_mirror() {
    local uri
    uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
              /etc/apt/sources.list.d/*.sources 2>/dev/null \
              | grep -oE 'https?://[^ ]*/debian/?( |$)' | head -n 1 | tr -d ' ')
    echo "${uri:-http://deb.debian.org/debian}"
}

add_backports() {
    local file=/etc/apt/sources.list.d/passepartout-bookworm-backports.sources
    if grep -rqsE '(^Suites:.*|^deb .*)bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        return 0
    fi
    cat >"$file" <<EOF
Types: deb
URIs: $(debian_mirror)
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_updated=
}

apt_updated=
apt_update() {
    [ -n "$apt_updated" ] && return 0
    apt-get update -qq
    apt_updated=1
}

install30() {
    add_backports
    apt_update
    local debs
    debs=$(mktemp -d)
    chmod 755 "$debs"  # apt downloads as the _apt user
    (cd "$debs" && apt-get download -qq -t bookworm-backports \
        emacs-nox emacs-bin-common emacs-common)
    # The shared libraries Emacs 30 links to (tree-sitter, sqlite…):
    # everything emacs-nox depends on but the Emacs packages themselves.
    local libs
    libs=$(dpkg-deb -f "$debs"/emacs-nox_*.deb Depends | tr ',' '\n' \
               | sed -E 's/\(.*\)//; s/\|.*//; s/ //g' | grep -v '^emacs-' | grep -v '^$')
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $libs >/dev/null
    local tmp=$EMACS30_DIR.new
    rm -rf "$tmp"
    mkdir -p "$tmp"
    for deb in "$debs"/*.deb; do dpkg -x "$deb" "$tmp"; done
    rm -rf "$debs"
    local version dump
    version=$(basename "$(ls -d "$tmp"/usr/share/emacs/30.*)")
    dump=$(ls "$tmp"/usr/libexec/emacs/"$version"/*/*.pdmp)
    dump=${dump#"$tmp"}
    mkdir -p "$tmp/bin"
    cat >"$tmp/bin/emacs" <<EOF
#!/bin/sh
# Emacs $version unpacked from bookworm-backports (tests/elisp/emacs-versions.sh).
root=\$(dirname "\$0")/..
root=\$(cd "\$root" && pwd)
EMACSLOADPATH=\$root/usr/share/emacs/$version/lisp \\
EMACSDATA=\$root/usr/share/emacs/$version/etc \\
EMACSDOC=\$root/usr/share/emacs/$version/etc \\
EMACSPATH=\$(dirname "\$root$dump") \\
    exec "\$root/usr/bin/emacs-nox" --dump-file="\$root$dump" "\$@"
EOF
    chmod +x "$tmp/bin/emacs"
    rm -rf "$EMACS30_DIR"
    mv "$tmp" "$EMACS30_DIR"
}

install() {
    have28 && have30 && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "emacs-versions.sh: missing Emacs 28 and/or 30; as root on Debian 12 run:" >&2
        echo "    sudo $0 install" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! have28; then
        apt_update
        apt-get install -y -qq --no-install-recommends emacs-nox >/dev/null
    fi
    have30 || install30
    have28 && have30
}

list() {
    local missing=0
    if have28; then echo "$EMACS28"; else echo "emacs-versions.sh: no Emacs 28 ($EMACS28)" >&2; missing=1; fi
    if have30; then echo "$EMACS30"; else echo "emacs-versions.sh: no Emacs 30 ($EMACS30)" >&2; missing=1; fi
    if [ "$missing" -ne 0 ]; then
        echo "emacs-versions.sh: install them with: sudo $0 install" >&2
        exit 2
    fi
}

case "${1:-}" in
    install) install ;;
    list) list ;;
    *) echo "usage: $0 install|list" >&2; exit 2 ;;
esac
