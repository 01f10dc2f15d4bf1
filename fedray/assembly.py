"""An experiment assembled from its config: data, clients, models, method and executor.

:func:`assemble` is the one place that turns a validated :class:`fedray.config.Config` into the
parts a round loop (``fedray.federation.Federation``) runs: the data set (with its auxiliary data
set apart and cut to its limits), the clients' split, the model builder, the initial models
(pre-trained when the config says so), the method's server half and the executor that reaches
the clients. The steps keep the order of a run, so that every seeded choice comes out the same.
Scripts and tests assemble through it too; :func:`load_data`, :func:`make_clients`,
:func:`check_models` and :func:`initial_models` are its steps, for a script that needs only one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from fedray.config import Config, ConfigError
from fedray.data import DatasetBundle, label_counts, load_dataset, partition
from fedray.data.auxiliary import aux_source, carve_aux, foreign_aux, split_negatives
from fedray.data.shifts import adversary_ids, client_groups
from fedray.executor import Executor, ExecutorFactory, LocalExecutor
from fedray.messages import ClientSpec, one_line
from fedray.methods import ServerContext, Strategy
from fedray.methods.helpers import initial_model
from fedray.models import model_builder
from fedray.pretrain import pretrained_weights
from fedray.resolve import Method, resolve
from fedray.training import cap_gpu_memory, resolve_device, set_torch_threads
from fedray.weights import Weights


@dataclass
class Experiment:
    """The parts of a run, assembled (:func:`assemble`); the round loop runs them."""

    config: Config
    method: Method
    data: DatasetBundle  # the server's: after assembly it keeps what it evaluates and distils on
    clients: list[ClientSpec]
    counts: np.ndarray  # clients x classes label counts (diagnostics; a real server does not know them)
    build: Callable[[str], torch.nn.Module]
    device: torch.device  # the server's
    initial: dict[str, Weights]  # theta^0 of each architecture
    pretrained: dict[str, dict[str, Any]]  # what pre-training did for each architecture (none: empty)
    strategy: Strategy
    executor: Executor


def assemble(config: Config, executor: ExecutorFactory = LocalExecutor, *, method: Optional[Method] = None,
             tree_factory: Optional[Callable[..., Any]] = None) -> Experiment:
    """Build an experiment from ``config``.

    Args:
        config: the validated config.
        executor: builds the executor that reaches the clients (in-process by default; the Ray
            backend hands in ``actors.executor.RayExecutor`` on its started client actors).
        method: the resolved method (default: ``resolve(config)``).
        tree_factory: builds clustered FL's parameter tree (the ``ParameterTreeActor`` under Ray).

    Raises:
        ConfigError: a method, model option or data set the config cannot run with (one line).
    """
    method = method or resolve(config)
    set_torch_threads(config.runtime.torch_threads or os.cpu_count() or 1)
    device = resolve_device(config.runtime.device, config.runtime.server_gpus)
    cap_gpu_memory(device, config.runtime.server_gpus)
    data = load_data(config)
    clients = make_clients(config, data, method.strategy.pools_data)
    build = model_builder(config.federation.model_options, data.input_shape, data.num_classes)
    counts = label_counts(data.train_y, [c.indices for c in clients], data.num_classes)
    archs = list(dict.fromkeys(c.arch for c in clients))
    check_models(config, build, archs, data.input_shape)
    initial, pretrained = initial_models(config, archs, build, data, device)
    context = ServerContext(config, clients, build, tree_factory, aux_x=data.aux_x, test_x=data.test_x,
                            test_y=data.test_y, device=device, initial_models=initial, negatives_x=data.negatives_x,
                            label_counts=counts, class_names=data.classes)
    strategy = method.make_strategy(context)
    hosts = executor(config, method, clients, data, initial)
    # the clients' hosts (or Ray's object store) hold the training set now; the server keeps only
    # what it evaluates and distils on
    data.train_x = data.train_y = None
    return Experiment(config, method, data, clients, counts, build, device, initial, pretrained, strategy, hosts)


def load_data(config: Config) -> DatasetBundle:
    """The configured data set, cut to ``train_limit``/``test_limit`` samples (seeded subsets).

    Auxiliary data (``aux:``) is set apart first: carved out of the training set, so that clients
    never hold it, or taken from another data set; only its inputs are kept (``bundle.aux_x``), and
    with ``aux.negatives`` a fraction of them goes to FedAUX's negative set (``bundle.negatives_x``).
    """
    d, a = config.data, config.aux
    bundle = load_dataset(d.dataset, d.root, **d.options)
    if a.size and a.dataset is None:
        bundle.aux_x = carve_aux(bundle, a.size, a.seed)
    elif a.size:
        source = aux_source(load_dataset, a.dataset, a.root, **a.options)
        bundle.aux_x = foreign_aux(source, a.size, a.seed, bundle.input_shape)
    if a.size and a.negatives:
        bundle.aux_x, bundle.negatives_x = split_negatives(bundle.aux_x, a.negatives, a.seed)
    rng = np.random.default_rng([d.seed, 0xDA7A])
    if d.train_limit is not None and d.train_limit < len(bundle.train_y):
        if bundle.client_split is not None:
            raise ValueError("data.train_limit cannot cut a data set with a natural client split")
        keep = np.sort(rng.permutation(len(bundle.train_y))[: d.train_limit])
        bundle.train_x, bundle.train_y = bundle.train_x[keep], bundle.train_y[keep]
    if d.test_limit is not None and d.test_limit < len(bundle.test_y):
        keep = np.sort(rng.permutation(len(bundle.test_y))[: d.test_limit])
        bundle.test_x, bundle.test_y = bundle.test_x[keep], bundle.test_y[keep]
    return bundle


def initial_models(config: Config, architectures: list[str], build: Callable[[str], torch.nn.Module],
                   data: DatasetBundle, device: torch.device) -> tuple[dict[str, Weights], dict[str, dict[str, Any]]]:
    """theta^0 of every architecture, and what pre-training did for each.

    The seeded initialisation; with ``pretrain.epochs`` its feature extractor is pre-trained with
    SimCLR on all the auxiliary data (D_distill and D^-; FedAUX Alg. 1's P1), here in the server
    (actor) before round one, or read from the cache a previous run with the same settings wrote.
    """
    if not config.pretrain.epochs:
        return {arch: initial_model(build, arch, config.model_seed) for arch in architectures}, {}
    aux = data.aux_x if data.negatives_x is None else np.concatenate([data.aux_x, data.negatives_x])
    models, info = {}, {}
    for arch in architectures:
        key = {"input_shape": list(data.input_shape), "num_classes": data.num_classes,
               "options": config.federation.model_options.get(arch, {})}
        models[arch], info[arch] = pretrained_weights(build, arch, aux, config.pretrain, config.model_seed, device, key)
    return models, info


def check_models(config: Config, build: Callable[[str], torch.nn.Module], archs: list[str],
                 input_shape: tuple[int, ...]) -> None:
    """Build each architecture once: an option value a model cannot take (``hidden: -5``, a width
    that does not fit the input) is a ConfigError naming it, before the run folder is made."""
    for arch in archs:
        try:
            build(arch)
        except Exception as err:  # noqa: BLE001 - whatever the model's constructor raises: one line
            options = config.federation.model_options.get(arch, {})
            raise ConfigError(f"bad config value federation.model_options.{arch} = {options}: model {arch!r} cannot "
                              f"be built for inputs of shape {tuple(input_shape)}: {one_line(err)}") from None


def make_clients(config: Config, bundle: DatasetBundle, pools_data: bool) -> list[ClientSpec]:
    """Split the training data and give clients their architectures (in config order, in blocks)."""
    fed, d = config.federation, config.data
    if d.partition == "natural":
        if bundle.client_split is None:
            raise ValueError(f"data.partition 'natural' needs a federated data set; {d.dataset} has no client split")
        if len(bundle.client_split) != fed.num_clients:
            raise ValueError(f"{d.dataset} has {len(bundle.client_split)} natural clients, "
                             f"but federation.num_clients = {fed.num_clients}")
        splits = [np.asarray(s, dtype=np.int64) for s in bundle.client_split]
    else:
        splits = partition(bundle.train_y, fed.num_clients, d.partition, d.seed, alpha=d.alpha,
                           classes_per_client=d.classes_per_client, balancedness=d.balancedness)
    archs = fed.client_archs()
    if pools_data:
        if d.groups > 1 or d.adversaries != "none":
            raise ValueError("a pooled-data baseline cannot have client groups or adversaries")
        pooled = np.sort(np.concatenate(splits))
        return [ClientSpec(i, arch, pooled) for i, arch in enumerate(fed.architectures)]
    groups = client_groups(fed.num_clients, d.groups)
    bad = set(adversary_ids(fed.num_clients, d.adversary_fraction, d.seed)) if d.adversaries != "none" else set()
    return [ClientSpec(i, arch, split, int(groups[i]), d.adversaries if i in bad else "benign")
            for i, (arch, split) in enumerate(zip(archs, splits))]
