"""ServerActor: the round loop (``fedray.federation.Federation``) inside a Ray actor.

It is pinned to the driver's node, so event files, checkpoints and ``result.json`` land in the run
folder the user named, also when the run is a ``ray job submit`` on a cluster.
"""

from __future__ import annotations

from typing import Any

from actors.client import RayExecutor
from fedray.config import Config
from fedray.federation import Federation
from fedray.messages import RoundResult


class ServerActor:
    def __init__(self, config: Config, run_dir: str, resume: bool = False):
        self.federation = Federation(config, run_dir, RayExecutor, resume=resume)

    def current_round(self) -> int:
        return self.federation.round

    def run_round(self) -> RoundResult:
        return self.federation.run_round()

    def client_node_ids(self) -> list[str]:
        return self.federation.executor.node_ids()

    def finish(self) -> dict[str, Any]:
        return self.federation.finish()
