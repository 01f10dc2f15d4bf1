"""A config's method, resolved: the method's classes and its validated parameters (:class:`Method`).

``fedray.config`` only checks the config's shape. :func:`resolve` is the one place where
``algorithm.name`` becomes a method and the ``algorithm:`` keys become its validated ``Params``, and
where the names of data sets and models are checked against their registries; every problem is one
:class:`ConfigError` line. The CLI resolves before anything starts, the run resolves once, and the
resolved :class:`Method` travels to the server and client actors, which never look names up again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from pydantic import ValidationError

from fedray.attacks import build_attack
from fedray.config import Config, ConfigError, RuntimeConfig, check_values, format_error
from fedray.data import dataset_names
from fedray.fold import Sum
from fedray.methods import METHODS
from fedray.methods.base import Client, Params, ServerContext, Strategy, Trained
from fedray.methods.head_sharing import HeadSharingParams
from fedray.models import model_names
from fedray.models.registry import model_options
from fedray.plugins import is_import_path, load_attack, load_dataset_loader, load_model, load_observers, load_strategy
from fedray.round import Each, collection
from fedray.weights import Weights


@dataclass(frozen=True)
class Method:
    """A method ready to run: its server half, its client half and its validated parameters."""

    strategy: type[Strategy]
    params: Params

    @property
    def name(self) -> str:
        """``algorithm.name``: a built-in name, or a user's method's ``name`` (else its import path)."""
        return getattr(self.strategy, "name", "") or f"{self.strategy.__module__}:{self.strategy.__qualname__}"

    @property
    def client(self) -> type[Client]:
        return self.strategy.Client

    @property
    def stateful(self) -> bool:
        """Whether the clients keep state between rounds with these parameters (they stay at home)."""
        return self.client.keeps_state(self.params)

    def keeps_state(self, config: Config) -> bool:
        """Whether the clients keep state between rounds in a run of ``config``: with these parameters,
        or because each keeps its optimiser (``training.optimizer_state: keep``)."""
        return self.stateful or config.training.optimizer_state == "keep"

    @property
    def cohort_refusal(self) -> Optional[str]:
        """Why the clients cannot train as one cohort (``fedray.cohort``), or None when they can."""
        return self.client.cohort_refusal()

    def vectorizes(self, runtime: RuntimeConfig) -> bool:
        """Whether the clients train as cohorts: ``runtime.vectorize`` asks for them (for all or
        some architectures) and the method does not refuse (:attr:`cohort_refusal`)."""
        return bool(runtime.vectorize) and self.cohort_refusal is None

    def collection(self, runtime: RuntimeConfig) -> str:
        """Whether the hosts sum the clients' statistics (``fold``) or gather them (``fedray.round.collection``)."""
        return collection(self.client.collected(self.params), runtime.fold)

    def make_strategy(self, ctx: ServerContext) -> Strategy:
        """The server half for a federation."""
        return self.strategy(self.params, ctx)

    def make_client(self, config: Config, build_model: Callable[[str], torch.nn.Module], device: torch.device,
                    aux_x: Optional[torch.Tensor] = None,
                    initial_models: Optional[dict[str, Weights]] = None) -> Client:
        """The client half for one host."""
        return self.client(self.params, config, build_model, device, aux_x, initial_models)


def resolve(config: Config) -> Method:
    """The config's method with its parameters; raises ConfigError (one line) for an unknown method,
    bad method parameters, a config the method cannot run with (``Strategy.config_problem``, e.g. no
    auxiliary data for distillation), or unknown data sets/models. The parameters are checked as the
    config is (``fedray.config.check_values``): no boolean for a number, integers within their caps
    (a ``Params`` field's own ``fedray.config.capped`` type, else ``MAX_INT``), floats that float32 holds."""
    name = config.algorithm.name
    if is_import_path(name):
        strategy = load_strategy(name)
    elif name not in METHODS:
        raise ConfigError(f"bad config value algorithm.name = {name!r}: valid methods are {', '.join(sorted(METHODS))} "
                          f"(or a method of your own as package.module:Class)")
    else:
        strategy = METHODS[name]
    values = config.algorithm.model_dump(exclude={"name"})
    if "share" in values and not issubclass(strategy.Params, HeadSharingParams):  # a method takes share: head by its Params
        sharing = sorted(n for n, s in METHODS.items() if issubclass(s.Params, HeadSharingParams))
        raise ConfigError(f"bad config value algorithm.share: {name} needs whole models; share: head is for {', '.join(sharing)}")
    unknown = sorted(key for key in values if key not in strategy.Params.model_fields)
    if unknown:  # e.g. a file's parameters for another method, kept by an override of algorithm.name alone
        raise ConfigError(f"unknown config key 'algorithm.{unknown[0]}': {name} has no parameter {unknown[0]!r} "
                          f"(`fedray methods` lists its parameters); to switch a config's method by an override, "
                          f"replace the whole section, algorithm={{name: {name}}}: algorithm.name={name} keeps the "
                          f"file's other algorithm keys")
    check_values(strategy.Params, values, "algorithm.")  # booleans as numbers, integer caps, float32 range
    try:
        params = strategy.Params(**values)
    except ValidationError as err:
        raise ConfigError(format_error(err, prefix="algorithm.")) from None
    problem = strategy.config_problem(config, params)
    if config.training.optimizer_state == "keep" and strategy.Client.update_kind is not Trained:
        problem = (f"bad config value training.optimizer_state = keep: {name}'s clients send a gradient and do "
                   f"not train locally, so there is no optimiser to keep; remove it")
    if problem:
        raise ConfigError(problem)
    kinds = strategy.Client.collected(params)
    odd = sorted(n for n, kind in kinds.items() if kind not in (Sum, Each)) if isinstance(kinds, dict) else None
    if odd is None or odd:
        raise ConfigError(f"{strategy.Client.__name__}.collected(params) must map each statistic's name to "
                          f"fedray.methods.Sum or Each, not {odd if odd else type(kinds).__name__}")
    _check_names(config)
    return Method(strategy, params)


def _check_names(config: Config) -> None:
    for key, name in (("data.dataset", config.data.dataset), ("aux.dataset", config.aux.dataset)):
        if is_import_path(name):
            load_dataset_loader(name, key)
        elif name is not None and name not in dataset_names():
            raise ConfigError(f"bad config value {key} = {name!r}: valid data sets are {', '.join(dataset_names())} "
                              f"(or a loader of your own as package.module:function)")
    for arch in config.federation.architectures:
        if is_import_path(arch):
            load_model(arch)
        elif arch not in model_names():
            raise ConfigError(f"bad config value federation.architectures: unknown model {arch!r}; "
                              f"valid models are {', '.join(model_names())} (or a model of your own as "
                              f"package.module:Class)")
    load_observers(config)
    d = config.data
    if is_import_path(d.adversaries):
        build_attack(load_attack(d.adversaries), d.adversary_options, d.adversaries)  # its options are checked
    elif d.adversary_options:
        raise ConfigError(f"bad config value data.adversary_options: they are for an attack of your own "
                          f"(package.module:Class); {d.adversaries} takes none")
    for arch, options in config.federation.model_options.items():
        if arch not in config.federation.architectures:
            raise ConfigError(f"bad config value federation.model_options.{arch}: "
                              f"{arch!r} is not one of the run's architectures")
        valid = model_options(arch)
        unknown = sorted(set(options) - set(valid)) if valid is not None else []
        if unknown:
            raise ConfigError(f"bad config value federation.model_options.{arch}: unknown option(s) "
                              f"{', '.join(unknown)}; {arch} takes {', '.join(valid) or 'none'}")
