"""Run the quick-start (``configs/quickstart.yaml``, Ray client actors) and record what a first run
gives in ``docs/records/quickstart.json``: each round's test accuracy, the wall time, the machine and the
run's provenance. ``scripts/docs/generate.py`` writes the README's "A first run" numbers from it.

    python scripts/docs/record_quickstart.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import fedray  # noqa: E402
from fedray.repro import cpu_model  # noqa: E402


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = fedray.run(ROOT / "configs" / "quickstart.yaml", run_dir=Path(tmp) / "run", progress=False)
        wall = time.perf_counter() - start
        rounds = [{"round": step, "accuracy": value} for step, value in result.metrics("eval/accuracy")]
    out = ROOT / "docs" / "records" / "quickstart.json"
    out.write_text(json.dumps({"config": "configs/quickstart.yaml", "wall_s": wall, "cpu": cpu_model(),
                               "provenance": result.summary["provenance"], "rounds": rounds}, indent=1))
    print(f"wrote {out.relative_to(ROOT)}: {len(rounds)} rounds, final {rounds[-1]['accuracy']:.4f}, {wall:.0f} s")


if __name__ == "__main__":
    main()
