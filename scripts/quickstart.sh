#!/usr/bin/env bash
# Sets up if needed, then trains FedAvg on Fashion-MNIST with Ray client actors (configs/quickstart.yaml).
# Extra arguments are config overrides, e.g.  bash scripts/quickstart.sh federation.rounds=5
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/fedray run configs/quickstart.yaml "$@"
