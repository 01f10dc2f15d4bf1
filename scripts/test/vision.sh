#!/usr/bin/env bash
# CI's second leg: sets up .venv-vision if needed (scripts/setup/vision.sh), then runs the tests that need
# torchvision (tests/vision, marked vision); the main leg (scripts/test.sh) skips them.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup/vision.sh
exec .venv-vision/bin/python -m pytest -q -m vision tests/vision "$@"
