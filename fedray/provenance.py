"""Where a run came from: the fedray commit it ran at, its config's hash and every seed that shaped
it. ``result.json`` carries it as ``provenance``, so that a table built from runs can check that its
runs ran at one commit and on the same held-back data (``scripts/repro/claims.py``).

The commit is read from the git checkout fedray is imported from (``git rev-parse HEAD``); ``dirty``
says whether its tracked files outside ``docs/`` differ from that commit, in which case the commit
alone does not reproduce the run (``docs/`` holds no code, and is where the reproduction scripts
write their results while their runs go on). Where fedray is not a git checkout (an installed wheel, a Ray job's uploaded
working directory without ``.git``), ``commit`` is None and the package version stands in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Optional

PACKAGE = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def source() -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None, "version": fedray's version}`` of the code
    this process imported (looked up once per process)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed: Optional[str] = version("fedray")
    except PackageNotFoundError:
        installed = None
    commit, dirty = None, None
    try:
        top = subprocess.run(["git", "-C", str(PACKAGE), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=30)
        lines = top.stdout.split()
        # only a checkout whose top holds this very package: not some enclosing repository
        if top.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == PACKAGE.parent:
            commit = lines[1]
            status = subprocess.run(["git", "-C", lines[0], "status", "--porcelain", "--untracked-files=no", "--",
                                     ".", ":(exclude)docs"], capture_output=True, text=True, timeout=60)
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"commit": commit, "dirty": dirty, "version": installed}


def config_hash(config: dict[str, Any]) -> str:
    """The SHA-256 of a config's canonical JSON (keys sorted): equal for equal configs."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def provenance(config) -> dict[str, Any]:
    """A run's provenance, for ``result.json``: the source (:func:`source`), the config's hash, and
    its seeds: ``run`` (sampling and batch order), ``init`` (the initial models), ``split`` (the
    partition), ``aux`` (the auxiliary / held-back data)."""
    return {**source(), "config_sha256": config_hash(config.to_dict()),
            "seeds": {"run": config.seed, "init": config.model_seed, "split": config.data.seed,
                      "aux": config.aux.seed}}
