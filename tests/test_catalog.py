"""fedray.catalog: the methods as ``fedray methods`` lists them (read from each Strategy and its
Params) and the config's JSON Schema (``fedray schema``), checked against every config in configs/."""

import subprocess
import sys
from pathlib import Path
from typing import Literal, Optional, Union

import pytest
import yaml
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from fedray.catalog import IMPORT_PATH_PATTERN, WIDTH, config_schema, format_methods, methods, params_of, type_name
from fedray.config import Config
from fedray.distill.loop import DistillParams
from fedray.methods import METHODS
from fedray.methods.fd import FDParams

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def by_name(rows):
    return {row["name"]: row for row in rows}


def test_every_method_has_its_own_description_and_paper():
    for name, strategy in METHODS.items():
        # set on the class itself: a variant (FedProx of FedAvg, CFD of FD, ...) must not inherit its base's
        assert "description" in vars(strategy) and "paper" in vars(strategy), name
        assert strategy.description.strip() and strategy.paper.strip(), name
        assert "\n" not in strategy.description + strategy.paper, name
        assert len(f"{name} — {strategy.description}") <= WIDTH, name
    descriptions = [s.description for s in METHODS.values()]
    assert len(set(descriptions)) == len(descriptions)


def test_methods_reads_the_params():
    listing = methods()
    assert [m["name"] for m in listing] == sorted(METHODS)
    fedprox = by_name(listing)["fedprox"]
    assert fedprox["description"] == METHODS["fedprox"].description
    assert by_name(fedprox["params"])["mu"] == {"name": "mu", "type": "float", "default": 0.01, "description": "",
                                                "constraints": ">= 0"}
    assert by_name(fedprox["params"])["share"]["type"] == "Literal['all', 'head']"
    cfl = by_name(by_name(listing)["cfl"]["params"])
    assert cfl["eps1"] == {"name": "eps1", "type": "Optional[float]", "default": None, "description": "",
                           "constraints": "> 0"}
    assert cfl["eps1_fraction"]["constraints"] == "> 0, <= 1"
    assert by_name(listing)["dsgd"]["params"] == []


def test_nested_params_are_listed_key_by_key_with_the_methods_defaults():
    fd = by_name(by_name(methods())["fd"]["params"])
    assert "distill" not in fd
    assert fd["distill.lr"]["default"] == FDParams().distill.lr != DistillParams().lr  # the thesis's, not the class's
    assert fd["distill.lr"]["constraints"] == "> 0" and fd["distill.steps"]["type"] == "Optional[int]"


def leaves(model: BaseModel, prefix=""):
    """(dotted name, value) of every field of ``model``, nested models walked into."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from leaves(value, f"{prefix}{name}.")
        else:
            yield prefix + name, value


def test_every_default_is_what_params_gives():
    for method in methods():
        expected = {name: to_jsonable_python(value) for name, value in leaves(METHODS[method["name"]].Params())}
        assert {p["name"]: p["default"] for p in method["params"]} == expected, method["name"]


def test_type_names_and_required_fields():
    assert type_name(Optional[Union[int, str]]) == "Optional[Union[int, str]]"
    assert type_name(dict[str, int]) == "dict[str, int]"
    assert type_name(Union[Literal["auto"], bool]) == "Union[Literal['auto'], bool]"
    assert type_name(int | None) == "Optional[int]"

    class Mine(BaseModel):
        k: int = Field(ge=1)
        tags: list[str] = Field(default_factory=lambda: ["a"], description="labels")

    assert params_of(Mine) == [
        {"name": "k", "type": "int", "default": None, "description": "", "constraints": "required, >= 1"},
        {"name": "tags", "type": "list[str]", "default": ["a"], "description": "labels", "constraints": ""}]


def test_format_methods_lists_every_method_within_the_width():
    text = format_methods()
    for name, strategy in METHODS.items():
        assert f"{name} — {strategy.description}\n" in text
    assert "  no parameters" in text  # dsgd
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    mu = next(line for line in text.splitlines() if line.split()[:1] == ["mu"])
    assert mu.split() == ["mu", "float", "0.01", ">=", "0"]


def test_schema_validates_every_config_and_refuses_bad_ones():
    jsonschema = pytest.importorskip("jsonschema")
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["title"]
    assert CONFIGS
    for path in CONFIGS:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, f"{path.name}: {errors}"
    assert validator.is_valid({}) and validator.is_valid(Config().to_dict())
    assert validator.is_valid({"algorithm": {"name": "my_pkg.methods:MyStrategy", "anything": 1}})
    for bad in ({"federation": {"rounds": "many"}},                     # a wrong type
                {"federaton": {"rounds": 3}},                           # an unknown top-level key
                {"training": {"lrr": 0.1}},                             # an unknown key of a section
                {"algorithm": {"name": "fedavgg"}},                     # neither a method nor an import path
                {"algorithm": {"name": "fedprox", "muu": 0.1}},         # not a parameter of fedprox
                {"algorithm": {"mu": 0.1}},                             # nor of fedavg, the default method
                {"algorithm": {"name": "fedprox", "mu": -1}},           # out of its bounds
                {"algorithm": {"name": "fd", "distill": {"lr": 0}}}):   # nested, out of its bounds
        assert not validator.is_valid(bad), bad



def test_importing_the_catalog_imports_no_torch():
    code = "import sys, fedray.catalog; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
