"""fedray: federated learning on Ray and PyTorch.

The Python API (``fedray.api``): :func:`load_config`, :func:`check`, :func:`run`, :func:`resume`
and the :class:`Result` of a run; :func:`sweep` (``fedray.sweeps``) runs a grid over seeds on Ray Tune. ``import fedray`` stays cheap (no torch, no Ray): the API is
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedray.api import Result, check, load_config, resume, run
    from fedray.sweeps import sweep

__all__ = ["Result", "check", "load_config", "resume", "run", "sweep"]


def __getattr__(name: str) -> Any:
    if name == "sweep":
        from fedray.sweeps import sweep

        return sweep
    if name in __all__:
        from fedray import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedray' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
