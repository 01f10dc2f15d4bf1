#!/usr/bin/env bash
# Sets up if needed, then runs the whole test suite (unit tests and real-Ray integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
