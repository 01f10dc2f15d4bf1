"""The built-in methods: ``ALGORITHMS`` maps each ``algorithm.name`` to its Strategy class.

One file per method; ``base``, ``helpers`` and ``head_sharing`` are the pieces methods build on, no
method of their own. A config's name becomes a method in ``fedray.method.resolve``, and the
resolved ``Method`` (its classes and validated parameters) is what a run carries to its server and
client actors: they do not look names up again.
"""

from __future__ import annotations

from fedray.algorithms.base import ClientAlgorithm, Params, ServerContext, Strategy, VirtualClient
from fedray.fold import Sum
from fedray.round import Each, Round, Statistics
from fedray.weights import Weights
from fedray.algorithms.central import Central
from fedray.algorithms.cfl import CFL
from fedray.algorithms.dgc import DGC
from fedray.algorithms.dsgd import DSGD
from fedray.algorithms.fd import CFD, FD
from fedray.algorithms.fedaux import FedAUX
from fedray.algorithms.fedavg import EachModelClient, FedAvg
from fedray.algorithms.fedbe import FedBE
from fedray.algorithms.fedopt import FedOpt
from fedray.algorithms.feddf import FedDF
from fedray.algorithms.feddistill import FedDistill
from fedray.algorithms.fedensemble import FedEnsemble
from fedray.algorithms.fedgen import FedGen
from fedray.algorithms.fedmmd import FedMMD
from fedray.algorithms.fedprox import FedProx
from fedray.algorithms.mrtf import MrTF
from fedray.algorithms.scaffold import Scaffold
from fedray.algorithms.signsgd import SignSGD
from fedray.algorithms.stc import STC

ALGORITHMS: dict[str, type[Strategy]] = {s.name: s for s in (FedAvg, FedProx, DSGD, Central, STC, SignSGD, DGC, CFL,
                                                          FedDF, FedBE, FD, CFD, FedAUX, FedOpt, FedMMD, FedGen, FedDistill, FedEnsemble,
                                                          Scaffold, MrTF)}

# what a method's author imports: the two halves, their parameters, the statistics' kinds and the round
__all__ = ["ALGORITHMS", "ClientAlgorithm", "Each", "EachModelClient", "Params", "Round", "ServerContext", "Statistics",
           "Strategy", "Sum", "VirtualClient", "Weights"]
