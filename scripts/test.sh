#!/usr/bin/env bash
# Sets up if needed, then runs a leg of the test suite (CI runs both, then scripts/test/vision.sh):
#   bash scripts/test.sh [PYTEST ARGS]          the main suite: unit tests and real-Ray integration tests,
#                                               all but those that start a Ray cluster of their own
#   bash scripts/test.sh cluster [PYTEST ARGS]  those: simulated nodes (ray.cluster_utils.Cluster), a head
#                                               node with token authentication that takes `ray job submit`,
#                                               and the rehearsal of `ray up` ... `ray down` on namespace hosts
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [[ "${1:-}" == cluster ]]; then
    shift
    bash scripts/setup/cluster.sh
    exec .venv/bin/python -m pytest -q -m cluster tests/integration "$@"
fi
exec .venv/bin/python -m pytest -q -m "not cluster" "$@"
