#!/usr/bin/env bash
# Sets fedray up if needed: a project virtual environment in .venv with pinned CPU packages, and
# Fashion-MNIST from Debian's dataset-fashion-mnist package (or FEDRAY_DATA_ROOT). Idempotent: a
# second call with nothing changed returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "fedray needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1)" >&2; exit 1; }

stamp_of() { cat pyproject.toml scripts/setup/constraints-cpu.txt | sha256sum | cut -c1-16; echo "${FEDRAY_NO_PIN:-}"; }
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    "$PYTHON" -m venv .venv
fi
if [ "$(cat .venv/.fedray-stamp 2>/dev/null)" != "$(stamp_of)" ]; then
    echo "setup: installing packages into .venv (about a minute on a fresh machine)" >&2
    pins=(-c scripts/setup/constraints-cpu.txt); [ -z "${FEDRAY_NO_PIN:-}" ] || pins=()
    if ! { .venv/bin/python -m pip install --upgrade pip && \
           .venv/bin/python -m pip install "${pins[@]}" -e '.[test]'; } > .venv/install.log 2>&1; then
        tail -n 30 .venv/install.log >&2
        echo "setup: pip install failed (whole log: .venv/install.log)" >&2
        exit 1
    fi
    stamp_of > .venv/.fedray-stamp
fi

bash scripts/setup/data.sh
