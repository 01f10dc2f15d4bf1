"""What a user can look up without reading the code: the built-in methods (``fedray methods``) and
the config's JSON Schema (``fedray schema``).

:func:`methods` reads each method of ``fedray.methods.METHODS`` from the code itself: its
``description`` and ``paper`` (class attributes of its Strategy) and its parameters from its pydantic
``Params`` model, so the listing cannot drift from what ``resolve`` accepts. A nested model
(``distill``) is listed key by key (``distill.lr``) with the method's own defaults.

:func:`config_schema` is ``Config``'s JSON Schema, with ``algorithm`` spelled out for editors: the
built-in names (or an import path, ``package.module:Class``) and, per built-in method, its
parameters. The modules that hold the methods import torch; they are imported only when called.
"""

from __future__ import annotations

import json
import textwrap
import types
import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from fedray.plugins import IMPORT_PATH

WIDTH = 110  # of the text listing's lines, where a line can be broken
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# an import path, package.module:Class: the pattern fedray loads by (valid ECMA-262 too)
IMPORT_PATH_PATTERN = IMPORT_PATH.pattern
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("multiple_of", "multiple of"),
           ("min_length", "length >="), ("max_length", "length <="))


def type_name(annotation: Any) -> str:
    """``annotation`` as one reads it in code: ``float``, ``Optional[int]``, ``Literal['a', 'b']``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        inner = ", ".join(type_name(a) for a in rest)
        if len(rest) < len(args):
            return f"Optional[{inner}]" if len(rest) == 1 else f"Optional[Union[{inner}]]"
        return f"Union[{inner}]"
    if origin is not None:  # dict[str, int], list[float], tuple[int, ...]
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    return getattr(annotation, "__name__", str(annotation))


def constraints(field: FieldInfo) -> str:
    """The field's bounds as text, e.g. ``> 0, <= 1``; "" when it has none."""
    found = []
    for item in field.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return ", ".join(found)


def _model(annotation: Any) -> Optional[type[BaseModel]]:
    """The pydantic model ``annotation`` is, or None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def params_of(model: type[BaseModel], defaults: Optional[BaseModel] = None, prefix: str = "") -> list[dict[str, Any]]:
    """The parameters of a ``Params`` model, one dict each: name, type, default (JSON-able; None
    when required, and then ``constraints`` says so), description, constraints. A nested model's
    keys are listed under ``prefix.``, with its defaults taken from the parent's default value
    (``defaults``): FD's ``distill`` defaults differ from ``DistillParams``'s own."""
    rows = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        if defaults is not None:
            default, required = getattr(defaults, name), False
        else:
            default = field.get_default(call_default_factory=True)
            required = default is PydanticUndefined
        nested = _model(field.annotation)
        if nested is not None and isinstance(default, nested):
            rows += params_of(nested, default, key + ".")
            continue
        bounds = constraints(field)
        rows.append({"name": key, "type": type_name(field.annotation),
                     "default": None if required else to_jsonable_python(default),
                     "description": field.description or "",
                     "constraints": ", ".join(filter(None, ["required" if required else "", bounds]))})
    return rows


def methods() -> list[dict[str, Any]]:
    """Every built-in method, sorted by name: name, description, paper and its parameters
    (:func:`params_of`)."""
    from fedray.methods import METHODS

    return [{"name": name, "description": strategy.description, "paper": strategy.paper,
             "params": params_of(strategy.Params)}
            for name, strategy in sorted(METHODS.items())]


def _wrap(text: str, first: str, indent: int) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=" " * indent,
                         break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def _table(params: list[dict[str, Any]]) -> list[str]:
    """Aligned rows ``name  type  default  constraints``; a long type wraps within its column."""
    cells = [(p["name"], p["type"], "-" if p["constraints"].startswith("required") else json.dumps(p["default"]),
              p["constraints"], p["description"]) for p in params]
    name_w = max(len(c[0]) for c in cells)
    type_w = min(max(len(c[1]) for c in cells), 36)
    default_w = min(max(len(c[2]) for c in cells), 24)
    lines = []
    for name, kind, default, bounds, description in cells:
        kinds = textwrap.wrap(kind, type_w, break_long_words=False, break_on_hyphens=False) or [""]
        lines.append(f"  {name:<{name_w}}  {kinds[0]:<{type_w}}  {default:<{default_w}}  {bounds}".rstrip())
        lines += [f"  {'':<{name_w}}  {more}" for more in kinds[1:]]
        if description:
            lines += _wrap(description, " " * (name_w + 6), name_w + 6)
    return lines


def format_methods(listing: Optional[list[dict[str, Any]]] = None) -> str:
    """The methods (:func:`methods`, or ``listing``) as text for a terminal: per method a line
    ``name — description``, its paper, then its parameters as aligned rows."""
    blocks = []
    for method in methods() if listing is None else listing:
        lines = _wrap(f"{method['name']} — {method['description'] or '(no description)'}", "", 4)
        lines += _wrap(method["paper"] or "(not given)", "  paper: ", 9)
        lines += _table(method["params"]) if method["params"] else ["  no parameters"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _algorithm_schema(schema: dict[str, Any]) -> None:
    """Spell out ``algorithm`` in ``schema`` (Config's, in place): ``name`` is a built-in name or an
    import path, and a built-in name (or none: the default method) brings its method's parameters
    and no other keys."""
    from fedray.methods import METHODS
    from fedray.config import AlgorithmConfig

    names, default = sorted(METHODS), AlgorithmConfig.model_fields["name"].default
    algorithm = schema["$defs"]["AlgorithmConfig"]
    algorithm["properties"]["name"] = {
        "title": "Name", "default": default, "examples": names,
        "description": "a built-in method (fedray methods lists them) or one of your own as package.module:Class",
        "anyOf": [{"enum": names}, {"type": "string", "pattern": IMPORT_PATH_PATTERN}],
    }
    rules = []
    for name in names:
        params = METHODS[name].Params.model_json_schema(ref_template="#/$defs/{model}")
        for model, definition in params.pop("$defs", {}).items():
            if schema["$defs"].setdefault(model, definition) != definition:
                raise ValueError(f"two schemas named {model}: {name}'s parameters and another")
        properties = {"name": {"const": name}, **params.get("properties", {})}
        # without a name the method is the default one (``if`` holds where ``name`` is absent)
        condition = {"properties": {"name": {"const": name}}, **({} if name == default else {"required": ["name"]})}
        rules.append({"if": condition, "then": {"properties": properties, "additionalProperties": False}})
    algorithm["allOf"] = rules


def config_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a config file, for editors: ``fedray schema``."""
    from fedray.config import Config

    schema = Config.model_json_schema()
    _algorithm_schema(schema)
    schema.pop("title", None)
    schema.pop("description", None)
    return {"$schema": SCHEMA_DIALECT, "title": "fedray config",
            "description": "A fedray experiment (docs/cli.md lists its sections; fedray methods, the methods)",
            **schema}
