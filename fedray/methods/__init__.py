"""The built-in methods: ``METHODS`` maps each ``algorithm.name`` to its Strategy class.

One file per method; ``base``, ``helpers`` and ``head_sharing`` are the pieces methods build on, no
method of their own. A config's name becomes a method in ``fedray.resolve.resolve``, and the
resolved ``Method`` (its classes and validated parameters) is what a run carries to its server and
client actors: they do not look names up again.
"""

from __future__ import annotations

from fedray.fold import Sum
from fedray.methods.base import Client, Params, ServerContext, Strategy, VirtualClient
from fedray.methods.central import Central
from fedray.methods.cfl import CFL
from fedray.methods.dgc import DGC
from fedray.methods.dsgd import DSGD
from fedray.methods.fd import CFD, FD
from fedray.methods.fedaux import FedAUX
from fedray.methods.fedavg import EachModelClient, FedAvg
from fedray.methods.fedbe import FedBE
from fedray.methods.feddf import FedDF
from fedray.methods.feddistill import FedDistill
from fedray.methods.fedensemble import FedEnsemble
from fedray.methods.fedgen import FedGen
from fedray.methods.fedmmd import FedMMD
from fedray.methods.fedopt import FedOpt
from fedray.methods.fedprox import FedProx
from fedray.methods.mrtf import MrTF
from fedray.methods.scaffold import Scaffold
from fedray.methods.signsgd import SignSGD
from fedray.methods.stc import STC
from fedray.round import Each, Round, Statistics
from fedray.weights import Weights

METHODS: dict[str, type[Strategy]] = {s.name: s for s in (FedAvg, FedProx, DSGD, Central, STC, SignSGD, DGC, CFL,
                                                          FedDF, FedBE, FD, CFD, FedAUX, FedOpt, FedMMD, FedGen, FedDistill, FedEnsemble,
                                                          Scaffold, MrTF)}

# what a method's author imports: the two halves, their parameters, the statistics' kinds and the round
__all__ = ["METHODS", "Client", "Each", "EachModelClient", "Params", "Round", "ServerContext", "Statistics",
           "Strategy", "Sum", "VirtualClient", "Weights"]
