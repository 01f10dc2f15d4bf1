"""Typed experiment configuration: YAML plus dotted overrides, checked before anything starts.

A config is a tree of pydantic models that forbid unknown keys. `load_config` reads a YAML file,
applies ``key=value`` overrides (values parsed as YAML, so ``federation.rounds=5`` is an int and
``federation.architectures={cnn: 10}`` a mapping) and validates the whole tree. Every problem is
reported as one :class:`ConfigError` line naming the bad key, the bad value (cut to
``SHOWN_CHARS`` characters) and what is valid.

Inputs are bounded before anything costly is done with them: a config file holds at most
``MAX_CONFIG_BYTES`` and is refused unread above it; a file or an override value expands to at most
``MAX_VALUES`` values, YAML aliases counted as the trees they repeat, counted while PyYAML composes
the document (a "billion laughs" file stops at the first anchor past the bound); ``name`` is at most
``MAX_NAME_CHARS`` characters, and every path setting fits the file system's limits on names and
holds no character a path cannot hold (NUL). A mapping that gives one key twice is refused, naming
the key and its lines, not read with the last value winning.

Values are checked before the schema is (:func:`check_values`, for the config as for each method's
``Params``): a boolean is no number (pydantic would take ``true`` as 1), every integer setting has
an upper bound that a real run could use (:class:`Cap`: its own, else ``MAX_INT``), and every float
setting is one that float32, which torch computes in, can hold.

This module is the schema only: it imports no registry. The algorithm section is open here;
``fedray.resolve.resolve`` turns ``algorithm.name`` into a method and validates the remaining keys
against that method's own ``Params`` (and checks data-set and model names), so a new method adds its
hyperparameters without touching this file.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import reprlib
import struct
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo


# the shipped configs hold at most 1.8 kB and 85 values. A config file or override value of up to
# MAX_CONFIG_BYTES and MAX_VALUES (scalars, lists and mappings, aliases expanded) is read or refused
# in under a second by PyYAML on a 2-core machine (0.7 s at worst; 100,000 values would take 3.7 s)
MAX_CONFIG_BYTES = 1 << 20
MAX_VALUES = 10_000
MAX_NAME_CHARS = 100  # the run folder NAME-YYYYmmdd-HHMMSS must fit a file name
NAME_MAX = 255  # bytes in a file or folder name: ext4, XFS, Btrfs, tmpfs, APFS, NTFS (in UTF-16 units)
NAME_SUFFIX = 24  # what the run folder's name adds to NAME: -YYYYmmdd-HHMMSS, and -N when that is taken
MAX_PATH_BYTES = 1024  # a path setting; under Linux's 4096 with room for the run folder and its files
SHOWN_CHARS = 80  # a value quoted in an error message is cut to this many characters
MAX_MESSAGE_CHARS = 2000  # and a whole message (names of models, data sets, paths) to this many

# Upper bounds of the integer settings: far above any run a machine or a cluster can make, far below
# the values that make fedray allocate or loop without end (2**62 fold groups, a 10**12-wide layer).
# An integer setting without a bound of its own has MAX_INT: a billion of anything a run counts
# (clients, samples, restarts, a method's counts) is more than a cluster holds or finishes, while
# the largest simulations have about 10**6 clients; check_partition bounds clients by samples besides.
MAX_INT = 10**9
# rounds, and settings counted in rounds: a million rounds is 11.6 days at one second a round, and
# federated runs stop at 10**2 to 10**5 rounds
MAX_ROUNDS = 10**6
# passes over a client's data in a round, or over the auxiliary data in pre-training: runs use 1 to a
# few hundred
MAX_EPOCHS = 100_000
# local steps in a round: ten million is days of compute on any device, for one client of one round
MAX_STEPS = 10**7
# samples in a batch: 2**24 float32 Fashion-MNIST images are 53 GB, more than the memory of a GPU
# and more than any data set fedray holds (a larger batch takes the whole set)
MAX_BATCH = 2**24
# the width of a layer a setting sizes (a projection, a generator's noise and hidden layers): a
# 2**16 x 2**16 float32 layer is 17 GB; models use 10**1 to 10**4
MAX_DIM = 2**16
# processes and threads: Linux's NR_CPUS in the kernels of Debian, Ubuntu and RHEL; no machine shows
# one process more CPUs
MAX_CPUS = 8192
# fold groups: the server walks every group each round (a million is 0.1 s a round and one group
# for each of a million clients); Config also keeps them to about the number of clients
MAX_FOLD_GROUPS = 2**20
DEFAULT_FOLD_GROUPS = 64
RAY_RESOURCE_STEP = 1e-4  # Ray refuses a nonzero CPU or GPU request below this (MIN_RESOURCE_GRANULARITY)
FLOAT32_MAX = 3.4028234663852886e38  # the largest float32; torch computes in float32
FLOAT32_TINY = 1.401298464324817e-45  # the smallest positive float32 (subnormal); below it a value becomes 0


class ConfigError(ValueError):
    """A config problem, described in one line for the user."""

    def __init__(self, message: str):  # a key or value with a line break in it stays on the line, escaped
        message = message if message.isprintable() else repr(message)[1:-1]
        if len(message) > MAX_MESSAGE_CHARS:  # the start says what is wrong, the end what to do
            half = MAX_MESSAGE_CHARS // 2
            message = f"{message[:half]} ... {message[-half:]}"
        super().__init__(message)


_SHOWN = reprlib.Repr()  # formats only what it shows: at most 8 items a level, 4 levels
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 4, SHOWN_CHARS, SHOWN_CHARS, SHOWN_CHARS
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = _SHOWN.maxfrozenset = _SHOWN.maxdict = 8


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, at most ``SHOWN_CHARS`` characters (cut with ``...``)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Cap:
    """The largest value of an integer setting and why (a clause of the one-line error, naming the
    bound): :func:`check_values` reads it, before pydantic validates. A setting's type carries it
    (:func:`capped`); an integer setting without one is capped at ``MAX_INT``."""

    most: int
    why: str


def capped(most: int, why: str) -> Any:
    """``int`` at most ``most``, ``why`` saying why: in the JSON schema and pydantic's check
    (``le``) and in :func:`check_values`'s message, so a method's ``Params`` bounds its own counts alike."""
    return Annotated[int, Field(le=most), Cap(most, why)]


GENERIC_CAP = Cap(MAX_INT, f"at most {MAX_INT:,} (a billion: more than any run holds or finishes)")
Rounds = capped(MAX_ROUNDS, f"at most {MAX_ROUNDS:,} rounds (11.6 days at one second a round)")
Epochs = capped(MAX_EPOCHS, f"at most {MAX_EPOCHS:,} epochs")
Steps = capped(MAX_STEPS, f"at most {MAX_STEPS:,} steps")
BatchSize = capped(MAX_BATCH, f"at most 2**24 = {MAX_BATCH:,} samples (53 GB of 28x28 float32 images)")
Dim = capped(MAX_DIM, f"at most 2**16 = {MAX_DIM:,} (a {MAX_DIM:,}-wide float32 layer is 17 GB)")
Cpus = capped(MAX_CPUS, f"at most {MAX_CPUS:,} (the most CPUs a Linux kernel shows a process)")
FoldGroups = capped(MAX_FOLD_GROUPS, f"at most 2**20 = {MAX_FOLD_GROUPS:,} (the server walks every group each round)")


def _seed(value: int) -> int:
    if not 0 <= value < 2**64:
        raise ValueError(SEED_RANGE)
    return value


SEED_RANGE = ("a seed is an integer from 0 to 2**64 - 1 (numpy's generators refuse negative ones, torch.manual_seed "
              "larger ones)")
Seed = Annotated[int, AfterValidator(_seed), Cap(2**64 - 1, SEED_RANGE)]


def _path_chars(value: str) -> str:
    """A name or path holds no character a path cannot hold: NUL ends a C string (every file call
    refuses it), and a lone surrogate has no bytes in the file system's encoding."""
    if "\0" in value:
        raise ValueError("a path cannot hold the character NUL (\\x00); remove it")
    try:
        os.fsencode(value)
    except UnicodeEncodeError as err:
        raise ValueError(f"a path cannot hold the character {value[err.start]!r}, which has no bytes in the file "
                         f"system's encoding ({err.encoding}); remove it") from None
    return value


def _path_setting(value: str) -> str:
    """A folder fedray reads or writes in must have a path the file system takes: no NUL, at most
    ``MAX_PATH_BYTES`` bytes, each folder name at most ``NAME_MAX`` (longer fail every file
    operation: "File name too long")."""
    _path_chars(value)
    if _bytes(value) > MAX_PATH_BYTES:
        raise ValueError(f"a path of {_bytes(value)} bytes; fedray takes paths of at most {MAX_PATH_BYTES} bytes")
    longest = max(value.replace(os.altsep or os.sep, os.sep).split(os.sep), key=_bytes)
    if _bytes(longest) > NAME_MAX:
        raise ValueError(f"the folder name {shown(longest)} has {_bytes(longest)} bytes; a file system takes at "
                         f"most {NAME_MAX}")
    return value


def _bytes(text: str) -> int:
    """The length of ``text`` in UTF-8, as file systems count names."""
    return len(text.encode("utf-8", "surrogatepass"))


PathSetting = Annotated[str, AfterValidator(_path_setting)]


class DataConfig(_Section):
    """Which data set, and how it is split among clients.

    The split is seeded by ``seed`` alone, so every method and every training seed sees the same
    clients (thesis section 2.4).
    """

    dataset: str = "fashion_mnist"
    root: Optional[PathSetting] = None
    options: dict[str, Any] = Field(default_factory=dict)
    partition: Literal["iid", "dirichlet", "shards", "natural"] = "iid"
    alpha: float = Field(1.0, gt=0)
    classes_per_client: int = Field(2, ge=1)
    balancedness: float = Field(1.0, gt=0, le=1)
    seed: Seed = 0
    train_limit: Optional[int] = Field(None, ge=1)
    test_limit: Optional[int] = Field(None, ge=1)
    # client groups and adversaries (fedray.data.shifts; thesis chapter 6)
    groups: int = Field(1, ge=1)
    group_shift: Literal["none", "label_swap", "label_permutation", "rotation"] = "none"
    adversaries: Union[Literal["none", "byzantine", "label_flip", "noisy"], str] = Field(
        "none", description="what a fraction of the clients do (fedray.attacks): none, byzantine, label_flip, noisy, "
                            "or an attack of your own as package.module:Class")
    adversary_fraction: float = Field(0.3, ge=0, lt=1)
    adversary_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of an attack "
                                                                                "of your own")
    noise: float = Field(10.0, ge=0)

    @field_validator("adversaries")
    @classmethod
    def _attack(cls, value: str) -> str:
        if value not in ("none", "byzantine", "label_flip", "noisy") and ":" not in value:
            raise ValueError("valid attacks are none, byzantine, label_flip, noisy (or an attack of your own as "
                             "package.module:Class)")
        return value

    @model_validator(mode="after")
    def _rotation_quarters(self) -> "DataConfig":
        if self.group_shift == "rotation" and 4 % self.groups:
            raise ValueError(f"group_shift rotation turns group k by k * 360 / groups degrees in quarter turns, "
                             f"so groups must be 1, 2 or 4, got {self.groups}")
        return self


class AuxConfig(_Section):
    """Unlabelled auxiliary (public) data for the distillation methods (thesis eq. 7.1, Alg. 3, Alg. 8).

    ``dataset: null`` (default) carves ``size`` samples out of the training set before it is split
    among clients, so clients never hold them; a data-set name takes ``size`` samples of that set's
    training part instead, converted to the run's input shape (channels and side length), e.g.
    scikit-learn ``digits`` resized to 28x28 as out-of-domain data. Only the inputs are kept: the
    labels of auxiliary samples are dropped when the set is built and can never reach training.
    ``size: 0`` means no auxiliary data. ``negatives``: the fraction set apart, with one seeded
    permutation, as FedAUX's negative set D^- (its clients' certainty scores separate their own data
    from it); the rest is the distillation set of every distillation method, so that methods compared
    in one grid distil on the same inputs (FedAUX, section 7.2: 20% / 80%).
    """

    dataset: Optional[str] = None
    size: int = Field(0, ge=0)
    root: Optional[PathSetting] = None
    options: dict[str, Any] = Field(default_factory=dict)
    seed: Seed = 0
    negatives: float = Field(0.0, ge=0, lt=1)


class PretrainConfig(_Section):
    """Self-supervised pre-training of every architecture's feature extractor h_0 on the auxiliary
    data (FedAUX's P1: SimCLR, Chen et al. 2020), in the server actor, before round one.

    ``epochs: 0`` (default) turns it off. Every method starts from h_0 with a freshly initialised
    head (the FedAUX paper's "+P" baselines); ``freeze_features: true`` then trains only the head,
    locally and in distillation ("+L", linear evaluation). The projection head (``projection_dim``)
    is thrown away after pre-training. Results are cached on disk (``cache_dir``; default
    ``$FEDRAY_CACHE`` or ``~/.cache/fedray``), keyed by architecture, auxiliary data, the run's seed
    (which draws the initial model and the augmentations) and these settings, so a grid of runs
    pre-trains each architecture once per seed.
    """

    epochs: Epochs = Field(0, ge=0)
    batch_size: BatchSize = Field(256, ge=2)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1e-6, ge=0)
    temperature: float = Field(0.5, gt=0)
    projection_dim: Dim = Field(128, ge=1)
    min_crop: float = Field(0.2, gt=0, le=1)  # smallest area fraction of a random resized crop
    flip: bool = True  # random horizontal flips (turn off for data where left and right differ)
    jitter: float = Field(0.4, ge=0)  # colour jitter strength on colour images; grey images get none
    # the augmentations' code: fedray's batched tensor ops, or the same pipeline of torchvision.transforms.v2
    # (the fedray[vision] extra; fedray.pretrain.simclr.augment_torchvision says where the two differ)
    augment: Literal["fedray", "torchvision"] = "fedray"
    cache_dir: Optional[PathSetting] = None
    freeze_features: bool = False

    @field_validator("augment")
    @classmethod
    def _torchvision_installed(cls, value: str) -> str:
        if value == "torchvision" and importlib.util.find_spec("torchvision") is None:
            raise ValueError("torchvision is not installed: install fedray's vision extra (bash scripts/setup/vision.sh, "
                             "docs/vision.md), or use pretrain.augment: fedray")
        return value


class TrainingConfig(_Section):
    """Local training on each client (the client half of every method).

    ``lr_decay`` (gamma, 1: none) decays a client's local lr with the round of its previous local
    training r': it trains at lr * gamma^(r' - 1), at lr the first time (FedGen's code:
    ``ExponentialLR(0.99)`` stepped with the round after each user's training; no paper of the seeds
    decays the local lr, so the default keeps it fixed; ``fedray.observers.LocalLrDecay``)."""

    optimizer: Literal["sgd", "adam"] = "sgd"
    # fresh: a new optimiser for each local training (SGD_E of every paper of the seeds); keep: each
    # client's optimiser state (Adam's moments and step count, SGD's momentum) carried from its last
    # training to its next, in ``client.state`` (FedAUX's code: one Adam per client for the whole run)
    optimizer_state: Literal["fresh", "keep"] = "fresh"
    lr: float = Field(0.05, gt=0)
    lr_decay: float = Field(1.0, gt=0, le=1)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: BatchSize = Field(32, ge=1)
    epochs: Epochs = Field(1, ge=1)
    steps: Optional[Steps] = Field(None, ge=1)


class FederationConfig(_Section):
    """Clients, architectures and rounds.

    ``architectures`` maps a model name to the number of clients that use it; the counts must add up
    to ``num_clients``. There is one global model per architecture.
    """

    num_clients: int = Field(100, ge=1)
    clients_per_round: int = Field(10, ge=1)
    rounds: Rounds = Field(20, ge=1)
    architectures: dict[str, int] = Field(default_factory=lambda: {"cnn": 100})
    model_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    eval_every: Rounds = Field(1, ge=1)
    eval_batch_size: BatchSize = Field(256, ge=1)

    @field_validator("architectures")
    @classmethod
    def _counts_positive(cls, value: dict[str, int]) -> dict[str, int]:
        if not value:
            raise ValueError("needs at least one architecture, e.g. {cnn: 100}")
        for name, count in value.items():
            if count < 1:
                raise ValueError(f"{shown(name)} has {count} clients; each architecture needs >= 1")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "FederationConfig":
        if self.clients_per_round > self.num_clients:
            raise ValueError(
                f"clients_per_round = {self.clients_per_round} exceeds num_clients = {self.num_clients}"
            )
        total = sum(self.architectures.values())
        if total != self.num_clients:
            raise ValueError(
                f"architectures {shown(self.architectures)} add up to {total} clients, "
                f"but num_clients = {self.num_clients}"
            )
        return self

    def client_archs(self) -> list[str]:
        """Each client's architecture, in client order: the config's order, in blocks."""
        return [arch for arch, count in self.architectures.items() for _ in range(count)]


class RuntimeConfig(_Section):
    """Where and how the clients and the server run; each key's meaning is its ``description``
    (``docs/runtime.md`` and ``docs/cluster.md`` tell the story)."""

    backend: Literal["ray", "local"] = Field(
        "ray", description="ray: client actors and a server actor; local: every client in this process (debugging)")
    address: Optional[str] = Field(
        None, description="None: start a local Ray of the run's own; 'auto', host:port or ray://...: join that "
                          "cluster (RAY_ADDRESS is honoured too)")
    num_cpus: Optional[Cpus] = Field(None, ge=1, description="CPUs of a local Ray (default: the machine's; at "
                                                            "most the machine's)")
    num_gpus: Optional[float] = Field(None, ge=0, description="GPUs of a local Ray (default: the machine's; at "
                                                              "most the machine's)")
    clients_per_actor: Union[Literal["auto"], int] = Field(
        "auto", description="1: one actor per client; auto: one actor per actor_cpus CPUs (and actor_gpus share)")
    actor_cpus: float = Field(1.0, gt=0, description="CPUs of each client actor")
    actor_gpus: Union[float, dict[str, float]] = Field(
        0.0, description="GPU share of each client actor, or one per architecture ({resnet8: 0.5, mlp: 0.1}: each "
                         "actor then hosts one architecture); it places the actor and caps its CUDA memory")
    server_cpus: float = Field(0.0, ge=0, description="CPUs of the server actor")
    server_gpus: float = Field(0.0, ge=0, le=1, description="GPU share of the server actor, placed and capped alike")
    torch_threads: Optional[Cpus] = Field(None, ge=1, description="torch threads per process (default: its CPUs)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA where the process has a GPU share")
    dashboard: bool = Field(False, description="start Ray's dashboard with a local Ray (about 150 MB more)")
    actor_output: bool = Field(
        False, description="copy the actors' stdout and stderr to the console (Ray's log monitor, about 50 MB); "
                           "else they stay in the session's log files under /tmp/ray")
    runtime_env: Optional[dict[str, Any]] = Field(
        None, description="Ray's runtime environment for the run's actors when fedray starts or joins Ray, e.g. "
                          "{py_modules: [my_pkg]} or {working_dir: .} so that a cluster's nodes can import the "
                          "config's own methods, models and data sets (not needed on one machine, nor under "
                          "ray job submit --working-dir)")
    server_hosts_clients: Union[Literal["auto"], bool] = Field(
        "auto", description="the server actor also hosts clients, in place of one client actor (one torch process "
                            "less); it then asks for max(server_cpus, actor_cpus) CPUs. auto: when no GPU share is "
                            "asked for and the driver's node has those CPUs")
    actor_restarts: int = Field(
        3, ge=0, description="how often a client actor that dies is restarted; it gets its clients back with "
                             "their state of the last checkpoint, and its lost tasks run again")
    round_timeout_s: Optional[float] = Field(
        None, gt=0, description="stop the run when a round's tasks have not all answered after this many seconds")
    vectorize: Union[bool, list[str]] = Field(
        False, description="train the clients of one architecture on an actor together, as one batched "
                           "computation (fedray.cohort): true for every architecture, or a list of them; methods "
                           "whose clients do not train plainly say so and train one after another")
    vectorize_chunk: Union[Literal["auto"], int] = Field(
        "auto", description="clients per batched computation; auto: as many as a fixed budget holds (1 GiB on a "
                            "CPU, half the actor's share of a GPU), never the memory free at the moment, so "
                            "results do not depend on the machine's state")

    fold: bool = Field(
        True, description="hosts sum their clients' statistics for methods whose statistics are all sums "
                          "(fedray.round); false: every client's statistics travel to the server, which adds them (for "
                          "debugging)")
    fold_groups: FoldGroups = Field(
        DEFAULT_FOLD_GROUPS, ge=1,
        description="for methods whose server step needs only sums of the clients' updates: the clients' ids cut "
                    "into this many blocks (a power of two), each block's clients of a round summed in id order and "
                    "the blocks' sums added pairwise in a fixed tree, so results do not depend on which actor ran "
                    "which client (fedray.fold); at least 8 times the client actors, so that the last blocks of a "
                    "round are small; at most the clients rounded up to a power of two, or 64")

    @field_validator("fold_groups")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"must be a power of two (the fold tree is binary), got {value}")
        return value

    @field_validator("clients_per_actor", "vectorize_chunk")
    @classmethod
    def _positive(cls, value: Union[str, int]) -> Union[str, int]:
        if value != "auto" and value < 1:
            raise ValueError(f"must be 'auto' or an integer >= 1, got {value}")
        return value

    @field_validator("actor_cpus", "actor_gpus", "server_cpus", "server_gpus")
    @classmethod
    def _ray_step(cls, value: Union[float, dict[str, float]]) -> Union[float, dict[str, float]]:
        shares = value.values() if isinstance(value, dict) else [value]
        if any(0 < s < RAY_RESOURCE_STEP for s in shares):
            raise ValueError(f"Ray counts CPUs and GPUs in steps of {RAY_RESOURCE_STEP:g} and refuses a smaller "
                             f"request; give 0 or at least {RAY_RESOURCE_STEP:g}")
        return value

    @field_validator("actor_gpus")
    @classmethod
    def _shares(cls, value: Union[float, dict[str, float]]) -> Union[float, dict[str, float]]:
        shares = value.values() if isinstance(value, dict) else [value]
        if any(not 0 <= s <= 1 for s in shares):
            raise ValueError(f"GPU shares must be between 0 and 1 (a share of one GPU), got {shown(value)}")
        return value

    def vectorizes(self, arch: str) -> bool:
        """Whether ``vectorize`` asks for cohorts of ``arch``."""
        return self.vectorize is True or (isinstance(self.vectorize, list) and arch in self.vectorize)

    def gpus_for(self, arch: str) -> float:
        """The GPU share of an actor hosting ``arch``."""
        return float(self.actor_gpus[arch] if isinstance(self.actor_gpus, dict) else self.actor_gpus)

    @model_validator(mode="after")
    def _hosting(self) -> "RuntimeConfig":
        if self.server_hosts_clients is True and isinstance(self.actor_gpus, dict):
            raise ValueError("server_hosts_clients: true needs one actor_gpus share for every architecture, "
                             "not a share per architecture (each of those actors hosts one architecture)")
        return self

    def server_hosts(self, node_cpus: float) -> bool:
        """Whether the server actor hosts clients, on a node of ``node_cpus`` CPUs."""
        if self.server_hosts_clients != "auto":
            return bool(self.server_hosts_clients)
        return not self.uses_gpus and node_cpus >= max(self.server_cpus, self.actor_cpus)

    def server_request(self, hosts: bool) -> float:
        """The server actor's CPUs: its own, or an actor's when it hosts clients and needs more."""
        return max(self.server_cpus, self.actor_cpus) if hosts else self.server_cpus

    @property
    def uses_gpus(self) -> bool:
        shares = self.actor_gpus.values() if isinstance(self.actor_gpus, dict) else [self.actor_gpus]
        return self.server_gpus > 0 or any(s > 0 for s in shares)


class AlgorithmConfig(BaseModel):
    """``name`` picks the method; the other keys are that method's ``Params``."""

    model_config = ConfigDict(extra="allow")
    name: str = "fedavg"


class Config(_Section):
    """A whole experiment."""

    name: str = "experiment"
    seed: Seed = 0
    init_seed: Optional[Seed] = Field(
        None, description="the seed of the initial models (theta^0, FedGen's generator); null: the run's seed. Set "
                          "it to hold the initial model while seed varies the sampling and batch order, or the other "
                          "way round")
    output_dir: PathSetting = "runs"
    checkpoint_every: Rounds = Field(5, ge=1)
    data: DataConfig = Field(default_factory=DataConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    aux: AuxConfig = Field(default_factory=AuxConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    observers: list[str] = Field(
        default_factory=list, description="the user's observers of the round loop by import path "
                                          "(package.module:Class, an Observer subclass made with no arguments)")

    @property
    def model_seed(self) -> int:
        """The seed of the initial models: ``init_seed``, else ``seed``."""
        return self.seed if self.init_seed is None else self.init_seed

    @field_validator("name")
    @classmethod
    def _folder_name(cls, value: str) -> str:
        _path_chars(value)
        if not value.strip() or any(sep and sep in value for sep in ("/", os.sep, os.altsep)):
            raise ValueError("the run folder is named NAME-TIMESTAMP: give a non-empty name without '/', "
                             "e.g. name: fmnist-fedavg")
        if len(value) > MAX_NAME_CHARS or _bytes(value) + NAME_SUFFIX > NAME_MAX:
            raise ValueError(f"the run folder is named NAME-TIMESTAMP, and a folder name has at most {NAME_MAX} "
                             f"bytes: give a name of at most {MAX_NAME_CHARS} characters (and "
                             f"{NAME_MAX - NAME_SUFFIX} bytes in UTF-8); this one has {len(value)} "
                             f"({_bytes(value)} bytes)")
        return value

    @model_validator(mode="after")
    def _groups_fit(self) -> "Config":
        if self.data.groups > self.federation.num_clients:
            raise ValueError(f"data.groups = {self.data.groups} exceeds federation.num_clients = "
                             f"{self.federation.num_clients}")
        return self

    @model_validator(mode="after")
    def _actors_and_groups_fit_the_clients(self) -> "Config":
        clients, rt = self.federation.num_clients, self.runtime
        if rt.clients_per_actor != "auto" and rt.clients_per_actor > clients:
            raise ValueError(f"runtime.clients_per_actor = {rt.clients_per_actor} exceeds federation.num_clients = "
                             f"{clients}: one actor then hosts every client; give at most {clients}")
        # a fold group is a block of client ids: past the clients, groups stay empty, and the server walks
        # every group every round
        most = max(DEFAULT_FOLD_GROUPS, 1 << (clients - 1).bit_length())
        if rt.fold_groups > most:
            raise ValueError(f"runtime.fold_groups = {rt.fold_groups} cuts {clients} clients into more groups than "
                             f"clients; give at most {most} (num_clients rounded up to a power of two, or "
                             f"{DEFAULT_FOLD_GROUPS})")
        return self

    @model_validator(mode="after")
    def _shares_name_the_architectures(self) -> "Config":
        shares = self.runtime.actor_gpus
        if isinstance(shares, dict) and set(shares) != set(self.federation.architectures):
            raise ValueError(f"runtime.actor_gpus names GPU shares for {shown(sorted(shares))}, but the run's "
                             f"architectures are {shown(sorted(self.federation.architectures))}: give one share each")
        return self

    @model_validator(mode="after")
    def _vectorize_names_architectures(self) -> "Config":
        names, archs = self.runtime.vectorize, sorted(self.federation.architectures)
        if isinstance(names, list) and not set(names) <= set(archs):
            unknown = sorted(set(names) - set(archs))
            raise ValueError(f"runtime.vectorize names {shown(unknown)}, which are not among the run's architectures "
                             f"{shown(archs)}")
        return self

    @model_validator(mode="after")
    def _kept_optimizer_trains_alone(self) -> "Config":
        if self.training.optimizer_state == "keep" and self.runtime.vectorize:
            raise ValueError("training.optimizer_state = keep carries each client's own optimiser state, which "
                             "clients training as one cohort do not have; set runtime.vectorize: false")
        return self

    @model_validator(mode="after")
    def _pretrain_needs_aux(self) -> "Config":
        if self.pretrain.epochs and self.aux.size == 0:
            raise ValueError(f"pretrain.epochs = {self.pretrain.epochs} pre-trains on the auxiliary data, "
                             f"but aux.size = 0; set aux.size (e.g. aux.size=5000)")
        if self.pretrain.freeze_features and not self.pretrain.epochs:
            raise ValueError("pretrain.freeze_features trains only the head on pre-trained features; "
                             "set pretrain.epochs too")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def format_error(err: ValidationError, prefix: str = "") -> str:
    """The first validation error as one line naming the key, the bad value and what is valid."""
    first = err.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    key = f"{prefix}{key}" if key else prefix.rstrip(".")
    key = key if len(key) <= SHOWN_CHARS else key[:SHOWN_CHARS - 3] + "..."  # an unknown key may be long
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{key}'"
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if not key:
        return f"bad config: {message}"
    value = first.get("input")
    quoted = "" if isinstance(value, dict) else f" = {shown(value)}"
    return f"bad config value {key}{quoted}: {message}"


def check_values(model: type[BaseModel], tree: Any, prefix: str = "") -> None:
    """Raise ConfigError (one line naming the key) for what pydantic would take and the run could not
    use, before pydantic validates ``tree`` against ``model`` (the config, a method's ``Params``):

    - a boolean given for a number: pydantic's lax mode reads ``true`` as 1 and ``false`` as 0;
    - an integer above its :class:`Cap` (the setting type's own, else ``MAX_INT``);
    - a float (or an integer given for one) that float32 cannot hold: infinite, NaN, above
      ``FLOAT32_MAX`` (torch fails mid-run: "cannot be converted to type float without overflow"), or
      nonzero and below ``FLOAT32_TINY`` (it would become 0).

    Nested models, mappings and lists are walked; open values (``Any``: a data set's or a model's
    options) are their consumer's to check. Keys that are not fields are left to pydantic."""
    if not isinstance(tree, Mapping):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in tree:
            annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
            _check_value(annotation, tree[key], prefix + key)


def _members(annotation: Any, cap: Optional[Cap] = None, limited: bool = False):
    """(type, its Cap, whether it has a bound of its own) for each alternative of ``annotation``,
    through ``Annotated``, ``Optional`` and ``Union``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        items = [m for item in metadata for m in ([item, *item.metadata] if isinstance(item, FieldInfo) else [item])]
        cap = next((m for m in items if isinstance(m, Cap)), cap)
        limited = limited or any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in items)
        yield from _members(inner, cap, limited)
    elif origin is Union or origin is types.UnionType:
        for arg in get_args(annotation):
            yield from _members(arg, cap, limited)
    else:
        yield annotation, cap, limited


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or (get_origin(annotation) is Literal and any(isinstance(a, bool)
                                                                            for a in get_args(annotation)))


def _check_value(annotation: Any, value: Any, key: str) -> None:
    members = list(_members(annotation))
    kinds = [m for m, _, _ in members]
    if any(m is Any or m is object for m in kinds):
        return
    key = key if len(key) <= SHOWN_CHARS else key[:SHOWN_CHARS - 3] + "..."
    numbers = [m for m in kinds if m is int or m is float]
    if isinstance(value, bool):
        if numbers and not any(_takes_bool(m) for m in kinds):
            kind = "a number" if float in numbers else "an integer"
            raise ConfigError(f"bad config value {key} = {shown(value)}: a boolean is not {kind}; give {kind} (YAML "
                              f"reads true, false, yes, no, on and off as booleans)")
        return
    if isinstance(value, str) and numbers and not any(m is str or (get_origin(m) is Literal and value in get_args(m))
                                                      for m in kinds):
        number = _number(value)  # pydantic's lax mode reads "1e39" (a string to YAML: no dot) as a number
        if number is not None:
            _check_value(annotation, number, key)
        return
    if isinstance(value, (int, float)):
        ints = [(cap, limited) for m, cap, limited in members if m is int]
        if ints and (isinstance(value, int) or float not in numbers):
            cap, limited = ints[0]
            cap = cap or (None if limited else GENERIC_CAP)
            if cap is not None and (isinstance(value, int) or math.isfinite(value)) and value > cap.most:
                raise ConfigError(f"bad config value {key} = {shown(value)}: {cap.why}")
        elif float in numbers and not (isinstance(value, int) or math.isfinite(value)):
            raise ConfigError(f"bad config value {key} = {shown(value)}: a float setting must be a finite number (an "
                              f"infinite one trains into NaN, and a saved config would write it as null)")
        elif float in numbers and not _float32(value):
            raise ConfigError(f"bad config value {key} = {shown(value)}: a float setting must fit a 32-bit float, "
                              f"which torch computes in: 0, or a finite magnitude from {FLOAT32_TINY:.1e} to "
                              f"{FLOAT32_MAX:.1e}")
        return
    if isinstance(value, Mapping):
        for m in kinds:
            if isinstance(m, type) and issubclass(m, BaseModel):
                check_values(m, value, key + ".")
                return
            if get_origin(m) in (dict, Mapping) and len(get_args(m)) == 2:
                for name, item in value.items():
                    _check_value(get_args(m)[1], item, f"{key}.{name}")
                return
        return
    if isinstance(value, list):
        for m in kinds:
            if get_origin(m) in (list, set, frozenset) and get_args(m):
                for i, item in enumerate(value):
                    _check_value(get_args(m)[0], item, f"{key}[{i}]")
                return


def _number(text: str) -> Union[int, float, None]:
    """The number a string reads as (pydantic's lax mode takes "5" and "1e39" for numbers), or None."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except (ValueError, OverflowError):
            continue
    return None


def _float32(value: float) -> bool:
    """Whether float32 holds ``value``: finite, within its range, and not a nonzero value it rounds to 0."""
    try:
        as32 = struct.unpack("<f", struct.pack("<f", float(value)))[0]
    except OverflowError:  # above float32's range, or an int beyond a float's
        return False
    return math.isfinite(as32) and (as32 != 0 or value == 0)


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that counts the values of the document as it composes it, an alias as
    all the values of the tree it repeats, and stops past ``MAX_VALUES``. PyYAML shares an aliased
    tree instead of copying it, but pydantic, deepcopy, repr and YAML dumps walk every repetition:
    ten anchors of ten aliases each are 10**10 values to them."""

    def __init__(self, stream, what: str):
        super().__init__(stream)
        self.what, self.values = what, 0
        self.sizes: dict[int, int] = {}  # id(node) -> values in its tree, aliases expanded

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            if anchor in self.anchors:
                size = self.sizes.get(id(self.anchors[anchor]))
                if size is None:  # an alias inside its own anchor: an endless tree
                    raise ConfigError(f"{self.what}: the alias *{shown(anchor)[1:-1]} repeats a tree that holds "
                                      f"it, which never ends; a config is a tree")
                self._count(size)
            return super().compose_node(parent, index)  # an unknown alias: PyYAML's ComposerError
        start = self.values
        self._count(1)
        node = super().compose_node(parent, index)
        self.sizes[id(node)] = self.values - start
        return node

    def _count(self, values: int) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            raise ConfigError(f"{self.what} expands to more than {MAX_VALUES} values (a YAML alias, *name, counts "
                              f"as the whole tree it repeats); a config has at most {MAX_VALUES}")

    def construct_mapping(self, node, deep=False):
        """PyYAML's mapping, refused when it gives one key twice (PyYAML keeps the last silently). A
        key a merge (``<<: *base``) brings in may be given again: that is what a merge is for."""
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first is not key_node:
                raise ConfigError(f"{self.what}: the key {shown(key)} is given twice in one mapping "
                                  f"({_where(first.start_mark, key_node.start_mark)}); give it once")
        return super().construct_mapping(node, deep)


def _where(first, second) -> str:
    """Two places in a YAML text: their lines, and their columns when on one line."""
    if first.line == second.line:
        return f"line {first.line + 1}, columns {first.column + 1} and {second.column + 1}"
    return f"lines {first.line + 1} and {second.line + 1}"


def _read_yaml(text: str | bytes, what: str) -> Any:
    """``yaml.safe_load(text)``, refused in one ConfigError line (``what`` names the source) above
    ``MAX_VALUES`` values; YAML errors are raised as they come."""
    loader = _BoundedLoader(text, what)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_overrides(overrides: list[str]) -> list[tuple[list[str], Any]]:
    """Parse ``a.b.c=value`` strings; values are read as YAML scalars or flow collections, within the
    bounds of a config file (``MAX_CONFIG_BYTES``, ``MAX_VALUES``)."""
    parsed = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {shown(item)} is not of the form key=value")
        what = f"override {shown(key.strip())}"
        size = _bytes(raw)
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{what}: its value has {size} bytes; a value has at most {MAX_CONFIG_BYTES} (1 MiB)")
        try:
            value = _read_yaml(raw, what) if raw else ""
        except ConfigError:
            raise
        except (yaml.YAMLError, ValueError, RecursionError):  # e.g. 2020-13-45, a date PyYAML cannot make
            value = raw
        parsed.append((key.strip().split("."), value))
    return parsed


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``tree`` with the dotted overrides set (unknown keys are caught later)."""
    tree = copy.deepcopy(tree)
    for path, value in parse_overrides(overrides):
        node = tree
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override '{'.'.join(path)}': '{part}' is not a section")
            node = child
        node[path[-1]] = value
    return tree


def build_config(tree: dict[str, Any]) -> Config:
    """Validate a config tree (a dict as read from YAML) against the schema; raise ConfigError with one line."""
    check_values(Config, tree)
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(format_error(err)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read a YAML config, apply ``key=value`` overrides and validate it."""
    path = Path(path)
    if os.path.isdir(path):
        raise ConfigError(f"config file {path} is a folder; name a YAML file")
    if not os.path.isfile(path):  # os.path: False, not OSError, for a name too long to look up
        raise ConfigError(f"config file {path} does not exist")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(MAX_CONFIG_BYTES + 1)  # not more, whatever the file holds
    except OSError as err:
        raise ConfigError(f"config file {path} cannot be read: {err.strerror or err}") from None
    if len(data) > MAX_CONFIG_BYTES:
        size = max(size, len(data))
        raise ConfigError(f"config file {path} has {size} bytes; a config file has at most {MAX_CONFIG_BYTES} "
                          f"(1 MiB)")
    try:
        tree = _read_yaml(data.decode(), f"config file {path}")
    except ConfigError:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as err:  # not UTF-8, a bad date, too deep
        raise ConfigError(f"config file {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if tree is None:  # 0 bytes or only comments: not a run of the defaults
        raise ConfigError(f"config file {path} is empty: write the experiment's settings in it "
                          f"(see configs/), or {{}} for the defaults")
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return build_config(apply_overrides(tree, overrides or []))


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
