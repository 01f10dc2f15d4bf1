#!/usr/bin/env bash
# Fashion-MNIST for fedray's tests and quick-start: Debian's dataset-fashion-mnist package (as root, or
# through sudo), unless FEDRAY_DATA_ROOT points at a folder that holds fashion-mnist/*.gz already.
# Called by scripts/setup.sh and scripts/setup/vision.sh; does nothing when the files are there.
set -euo pipefail

root=${FEDRAY_DATA_ROOT:-/usr/share/datasets}
if [ ! -f "$root/fashion-mnist/train-images-idx3-ubyte.gz" ] && [ ! -f "$root/fashion-mnist/train-images-idx3-ubyte" ]; then
    if [ -n "${FEDRAY_DATA_ROOT:-}" ]; then
        echo "setup: Fashion-MNIST not found in $root/fashion-mnist (FEDRAY_DATA_ROOT): put the four idx files there" >&2
        exit 1
    fi
    echo "setup: installing Debian's dataset-fashion-mnist package" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    if ! $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; then
        $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null || {
            echo "setup: could not install dataset-fashion-mnist; install it, or set FEDRAY_DATA_ROOT to a folder holding fashion-mnist/*.gz" >&2
            exit 1; }
    fi
fi
