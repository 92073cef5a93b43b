#!/usr/bin/env bash
# `make test` and CI: the dashboard's tests drive headless Chromium (Debian's `chromium`). Where it is missing, install
# it if this machine lets us (apt-get, as root or through sudo without a password), else say in one line what to
# install and fail. Usage: scripts/ensure_chromium.sh PYTHON (the venv's python, which finds the browser as the tests
# do: benchmarks.headless.chromium_path).
set -uo pipefail
python="$1"

found() {
    "$python" -c 'import sys; from benchmarks.headless import INSTALL_HINT, chromium_path
sys.exit(None if chromium_path() else "make test: the dashboard tests drive a real browser; " + INSTALL_HINT)'
}

found 2>/dev/null && exit 0
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        as_root=(env)
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root=(sudo -n env)
    fi
fi
if [ -n "${as_root+set}" ]; then
    echo "make test: installing Debian's chromium (apt-get) for the dashboard's browser tests"
    "${as_root[@]}" apt-get update -qq && "${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
found
