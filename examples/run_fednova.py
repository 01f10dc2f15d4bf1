"""FedNova on WDBC through fedray's Python API: the run `fedray run fednova.yaml` makes.

    python run_fednova.py                          # on a local Ray, as the config says
    python run_fednova.py runtime.backend=local    # every client in this process; any key=value overrides
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import fedray

HERE = Path(__file__).resolve().parent


def main(overrides: list[str]) -> fedray.Result:
    # The config names its method, model and data set by import path: fedray finds them in the
    # current folder, so run from this one (runs/ is made here too).
    os.chdir(HERE)
    result = fedray.run("fednova.yaml", overrides)
    from wdbc_data import load  # the example's own loader, to put the accuracy beside a baseline

    test_y = load(**result_options(result))["test_y"]
    majority = np.bincount(test_y).max() / len(test_y)
    rounds = result.summary["rounds"]
    print(f"FedNova on WDBC: test accuracy {result.final['eval/accuracy']:.4f} after {rounds} rounds "
          f"(always answering the majority class: {majority:.4f}); run folder {result.run_dir}")
    return result


def result_options(result: fedray.Result) -> dict:
    """The run's ``data.options`` (the test split it was scored on), from its own config.yaml."""
    return fedray.load_config(result.run_dir / "config.yaml").data.options


if __name__ == "__main__":
    main(sys.argv[1:])
