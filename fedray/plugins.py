"""A user's own methods, models, data sets and observers, named in a config by import path.

Where a config takes a built-in name it also takes ``package.module:Attribute``:

- ``algorithm.name: my_pkg.methods:MyStrategy``: a :class:`fedray.methods.Strategy` subclass
  with its ``Params`` and ``Client`` (``fedray.resolve.resolve``);
- an architecture in ``federation.architectures``: ``my_pkg.nets:MyNet``, a ``FedModel`` or any
  ``torch.nn.Module`` class or function that takes ``num_classes`` (and ``input_shape`` when it
  asks for it), e.g. ``torchvision.models:resnet18`` (``fedray.models.wrap``);
- ``data.dataset`` / ``aux.dataset``: ``my_pkg.data:load``, a function returning the train and test
  arrays (``fedray.data.custom``);
- ``observers: [my_pkg.watch:MyObserver]``: :class:`fedray.observers.Observer` subclasses, made with
  no arguments, called after fedray's own in the round loop;
- ``data.adversaries: my_pkg.attacks:MyAttack``: a :class:`fedray.attacks.Attack` subclass, made
  with ``data.adversary_options`` on every host, which the adversarial clients run.

Each is imported where it is used (the driver checks it, the server and client actors use it), so
the module must be importable there. Modules are looked up in the current folder first, as
``python -m`` does (also under the ``fedray`` command); on one machine the actors import whatever
the driver can (Ray gives its workers the driver's ``sys.path``), on a cluster through Ray's runtime environment
(``ray job submit --working-dir .``, or ``runtime.runtime_env``; docs/extending.md). A module that
is missing, an attribute that is not there, or an object of the wrong kind is one
:class:`ConfigError` line naming the key, before anything is created.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import os
import re
import sys
import textwrap
from typing import Any, Callable, Optional

from fedray.config import Config, ConfigError

IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_import_path(name: Optional[str]) -> bool:
    """Whether a config's name is an import path (``module:attribute``) rather than a built-in name."""
    return isinstance(name, str) and ":" in name


def plugin_paths(config: Config) -> list[tuple[str, str]]:
    """The config's import paths, as ``(key, path)`` pairs: the code of the user's that a run, a
    resume or a check of it imports and calls."""
    named = [("algorithm.name", config.algorithm.name), ("data.dataset", config.data.dataset),
             ("aux.dataset", config.aux.dataset), ("data.adversaries", config.data.adversaries),
             *(("federation.architectures", arch) for arch in config.federation.architectures),
             *(("observers", observer) for observer in config.observers)]
    return [(key, path) for key, path in named if is_import_path(path) or key == "observers"]


def uses_plugins(config: Config) -> bool:
    """Whether the config names any of the user's own code (which the driver then imports to check)."""
    return bool(plugin_paths(config))


def load(spec: str, key: str) -> Any:
    """The object ``spec`` (``package.module:Attribute``, the attribute may be dotted) names.

    Raises:
        ConfigError: one line naming ``key``: a malformed path, a module that cannot be found or
            fails to import (its error in short), or a missing attribute.
    """
    if not IMPORT_PATH.match(spec):
        raise ConfigError(f"bad config value {key} = {spec!r}: an import path is written package.module:Attribute")
    module_name, attribute = spec.split(":")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:  # the ``fedray`` script's path starts at its own folder
        sys.path.insert(0, here)
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise ConfigError(f"bad config value {key} = {spec!r}: no module named {err.name!r} "
                              f"(is its folder the current one, on PYTHONPATH, or installed?)") from None
        raise ConfigError(f"bad config value {key} = {spec!r}: importing {module_name} failed: "
                          f"{type(err).__name__}: {err}") from None
    except Exception as err:  # noqa: BLE001 - whatever the user's module raises on import: one line
        raise ConfigError(f"bad config value {key} = {spec!r}: importing {module_name} failed: "
                          f"{type(err).__name__}: {first_line(err)}") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"bad config value {key} = {spec!r}: module {module_name} "
                              f"({getattr(sys.modules.get(module_name), '__file__', '?')}) has no {attribute!r}")
        obj = getattr(obj, part)
    return obj


def first_line(err: BaseException) -> str:
    """An error's first line, for one-line messages."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else ""


def load_strategy(spec: str) -> type:
    """A user's method: a concrete Strategy subclass whose ``Params`` and ``Client`` are the right kinds."""
    from pydantic import BaseModel

    from fedray.methods.base import Client, Strategy

    key = "algorithm.name"
    obj = load(spec, key)
    if not (isinstance(obj, type) and issubclass(obj, Strategy)):
        raise ConfigError(f"bad config value {key} = {spec!r}: {_kind(obj)} is not a fedray Strategy subclass "
                          f"(fedray.methods.Strategy)")
    if not (isinstance(obj.Params, type) and issubclass(obj.Params, BaseModel)):
        raise ConfigError(f"bad config value {key} = {spec!r}: its Params must be a pydantic model "
                          f"(a subclass of fedray.methods.Params), not {_kind(obj.Params)}")
    if not (isinstance(obj.Client, type) and issubclass(obj.Client, Client)):
        raise ConfigError(f"bad config value {key} = {spec!r}: its Client must be a subclass of "
                          f"fedray.methods.Client, not {_kind(obj.Client)}")
    problem = contract_problem(obj)
    if problem:
        raise ConfigError(f"bad config value {key} = {spec!r}: {problem} (docs/extending.md)")
    return obj


def contract_problem(strategy: type) -> Optional[str]:
    """One line for a mistake in a method's classes that would otherwise show only mid-run, or
    never: a ``Params`` or ``Client`` left to the base class's (an empty model, FedAvg's client half);
    no ``aggregate``; a client half that declares no statistics, or none of a name ``aggregate``
    reads; a hook overridden with other parameters than the hook's; a new method named like a hook
    (``agregate``). None when the method is sound. Only the user's classes are read (those outside fedray)."""
    from fedray.methods.base import Client, Strategy

    for attr, fix in (("Params", "its parameters' pydantic model (a subclass of fedray.methods.Params; "
                                 "Params = Params for none)"),
                      ("Client", "its client half (Client = fedray.methods.Client: plain local "
                                 "training, the model uploaded)")):
        if _defining(strategy, attr) is Strategy:
            return f"{strategy.__name__} sets no {attr}: set {attr} to {fix}"
    client = strategy.Client
    if _defining(strategy, "aggregate") is Strategy:
        return (f"{strategy.__name__} implements no aggregate(round), its server step: read the clients' statistics "
                f"there (round.total, round.each, round.mean) into the server state")
    if Client in (_defining(client, "collected"), _defining(client, "statistics")):
        return (f"its client half {client.__name__} declares no statistics: implement {client.__name__}.collected(params) "
                f"(name -> Sum or Each) and {client.__name__}.statistics(update, client)")
    return (_hooks_problem(strategy, Strategy) or _hooks_problem(client, Client)
            or _reads_problem(strategy, client))


def _defining(cls: type, name: str) -> type:
    return next(k for k in cls.__mro__ if name in vars(k))


READS = ("total", "each", "each_by_arch", "mean")  # the Round methods that read a statistic by name


def _reads_problem(strategy: type, client: type) -> Optional[str]:
    """A statistic a user's ``aggregate`` reads by a literal name (``round.total("d")``) that its
    client half's ``collected`` never names: a misspelt or forgotten statistic, which would fail
    only in round one. Read from the source; a name built at run time is not checked."""
    def literals(function: Any, calls: bool) -> set[str]:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError, SyntaxError):
            return set()
        if not calls:
            return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        return {n.args[0].value for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in READS
                and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}

    declared = set().union(*(literals(_function(vars(k)["collected"]), False) for k in client.__mro__
                             if "collected" in vars(k)))
    for klass in strategy.__mro__:
        if klass.__module__.split(".")[0] == "fedray" or "aggregate" not in vars(klass):
            continue
        unknown = sorted(literals(_function(vars(klass)["aggregate"]), True) - declared)
        if unknown:
            return (f"{klass.__name__}.aggregate reads the statistic {unknown[0]!r}, which {client.__name__}.collected "
                    f"never names (it names {sorted(declared)}): declare it there, or read one it names")
    return None


def _hooks_problem(cls: type, base: type) -> Optional[str]:
    """A hook of ``base`` that a user's class in ``cls``'s MRO overrides with other positional
    parameters (or as a classmethod where the hook is not, or the reverse), or a new public method
    whose name is one letter or two from a hook's."""
    hooks = {name: value for name, value in vars(base).items() if not name.startswith("_") and _function(value)}
    fedray_names = {name for k in cls.__mro__ if k.__module__.split(".")[0] == "fedray" for name in vars(k)}
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "fedray" or klass is object:
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or not _function(value):
                continue
            if name in hooks:
                theirs, ours = inspect.signature(_function(value)), inspect.signature(_function(hooks[name]))
                same_kind = isinstance(value, classmethod) == isinstance(hooks[name], classmethod)
                if not same_kind or not _fits(theirs, ours):
                    kind = "a classmethod " if isinstance(hooks[name], classmethod) else ""
                    return (f"{klass.__name__}.{name}{_names(theirs)} does not match the hook "
                            f"{base.__name__}.{name}{_names(ours)}: give it {kind}the hook's parameters")
            elif name not in fedray_names:
                near = difflib.get_close_matches(name, hooks, n=1, cutoff=0.85)
                if near:
                    return (f"{klass.__name__}.{name} is not a hook of {base.__name__}; did you mean {near[0]}? "
                            f"(a helper of your own: give it a name further from the hooks')")
    return None


def _function(value: Any) -> Optional[Callable[..., Any]]:
    """The plain function of a method, classmethod or staticmethod in a class's namespace."""
    value = getattr(value, "__func__", value)
    return value if inspect.isfunction(value) else None


def _names(signature: inspect.Signature) -> str:
    """``(self, round, updates)``: a signature's parameters without annotations or defaults."""
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return f"({', '.join(stars.get(p.kind, '') + p.name for p in signature.parameters.values())})"


def _fits(theirs: inspect.Signature, ours: inspect.Signature) -> bool:
    """Whether an override takes the hook's positional parameters: as many, or fewer with ``*args``."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    count = [sum(p.kind in positional for p in s.parameters.values()) for s in (theirs, ours)]
    star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in theirs.parameters.values())
    return count[0] == count[1] or (star and count[0] <= count[1])


def load_model(spec: str, key: str = "federation.architectures") -> Callable[..., Any]:
    """A user's model: a class or function (called to build one model per client and server)."""
    obj = load(spec, key)
    if isinstance(obj, type):
        from torch import nn

        if not issubclass(obj, nn.Module):
            raise ConfigError(f"bad config value {key}: {spec!r} is {_kind(obj)}, not a torch.nn.Module class")
    elif not callable(obj):
        raise ConfigError(f"bad config value {key}: {spec!r} is {_kind(obj)}, not a model class or function")
    return obj


def load_dataset_loader(spec: str, key: str = "data.dataset") -> Callable[..., Any]:
    """A user's data set: a function returning arrays, or a torch Dataset class (torchvision's)."""
    obj = load(spec, key)
    if isinstance(obj, type):
        from torch.utils.data import Dataset

        if not issubclass(obj, Dataset):
            raise ConfigError(f"bad config value {key} = {spec!r}: {_kind(obj)} is neither a function that loads "
                              f"a data set nor a torch Dataset class")
    elif not callable(obj):
        raise ConfigError(f"bad config value {key} = {spec!r}: {_kind(obj)} is not a function that loads a data set")
    return obj


def load_attack(spec: str, key: str = "data.adversaries") -> type:
    """A user's attack: a subclass of :class:`fedray.attacks.Attack`."""
    from fedray.attacks import Attack

    obj = load(spec, key)
    if not (isinstance(obj, type) and issubclass(obj, Attack)):
        raise ConfigError(f"bad config value {key} = {spec!r}: {_kind(obj)} is not a subclass of fedray.attacks.Attack")
    return obj


def load_observers(config: Config) -> list:
    """The config's ``observers``, each made with no arguments."""
    from fedray.observers import Observer

    made = []
    for i, spec in enumerate(config.observers):
        key = f"observers[{i}]"
        obj = load(spec, key)
        if not (isinstance(obj, type) and issubclass(obj, Observer)):
            raise ConfigError(f"bad config value {key} = {spec!r}: {_kind(obj)} is not a subclass of "
                              f"fedray.observers.Observer")
        try:
            made.append(obj())
        except Exception as err:  # noqa: BLE001 - its constructor's error, in one line
            raise ConfigError(f"bad config value {key} = {spec!r}: {obj.__name__}() failed: "
                              f"{type(err).__name__}: {first_line(err)}") from None
    return made


def _kind(obj: Any) -> str:
    """``obj`` in a few words for an error line."""
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    if callable(obj):
        return f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!s}"
    return f"a {type(obj).__name__}"
