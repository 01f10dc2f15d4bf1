#!/usr/bin/env bash
# Sets up fedray's vision extra if needed: a second virtual environment, .venv-vision, with torchvision
# (pinned in scripts/setup/constraints-vision.txt: a CUDA build of torch that runs on the CPU, about 5.5 GB),
# and Fashion-MNIST as scripts/setup.sh installs it. The main .venv stays torchvision-free. Idempotent: a
# second call with nothing changed returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
VENV=.venv-vision
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "fedray needs Python >= 3.10; $PYTHON is $("$PYTHON" --version 2>&1)" >&2; exit 1; }

stamp_of() { cat pyproject.toml scripts/setup/constraints-vision.txt | sha256sum | cut -c1-16; }
if [ ! -x $VENV/bin/python ]; then
    echo "setup_vision: creating $VENV" >&2
    "$PYTHON" -m venv $VENV
fi
if [ "$(cat $VENV/.fedray-stamp 2>/dev/null)" != "$(stamp_of)" ]; then
    echo "setup_vision: installing packages with torchvision into $VENV (about 5.5 GB, a few minutes)" >&2
    if ! { $VENV/bin/python -m pip install --upgrade pip && \
           $VENV/bin/python -m pip install -c scripts/setup/constraints-vision.txt -e '.[test,vision]' && \
           $VENV/bin/python -c 'import torchvision.ops, torchvision.transforms.v2'; } > $VENV/install.log 2>&1; then
        tail -n 30 $VENV/install.log >&2
        echo "setup_vision: installing torchvision failed (whole log: $VENV/install.log)" >&2
        exit 1
    fi
    stamp_of > $VENV/.fedray-stamp
fi

bash scripts/setup/data.sh
