"""The floor plan holds: the core (``fedray/``) never reaches up, the Ray backend (``actors/``) uses
the core's public seams only, no module of either imports itself in a circle, and one module draws.

Every import of every module is read from its syntax tree, so an import inside a function counts
as much as one at the top (``if TYPE_CHECKING:`` imports, which never run, count for the layers
but not for circles).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# what the Ray backend may use of the core: the seams a backend is built on
SEAMS = {"fedray.assembly", "fedray.backends", "fedray.clients", "fedray.config", "fedray.executor", "fedray.fold",
         "fedray.federation", "fedray.messages", "fedray.observers", "fedray.parameter_tree", "fedray.resolve",
         "fedray.round", "fedray.runner", "fedray.weights"}
HARNESS = ("fedray.repro",)  # the reproduction scripts' harness sits on top of the core


def modules() -> dict[str, Path]:
    found = {}
    for package in ("fedray", "actors"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path], source: str | None = None) -> list[tuple[str, int, bool]]:
    """``(module, line, runs)`` for every import in the file (or ``source``); ``runs`` is False
    under TYPE_CHECKING."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    guarded = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and "TYPE_CHECKING" in ast.unparse(block.test) for stmt in block.body for node in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            # ``from fedray.data import partition``: the submodule when it is one, else the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found += [(target, node.lineno, id(node) not in guarded) for target in dict.fromkeys(targets)]
    return found


def test_the_core_imports_neither_ray_nor_the_backend_nor_the_harness():
    known = modules()
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for name, path in known.items() if name.startswith("fedray") and not name.startswith(HARNESS)
             for target, line, _ in imports(name, path, known)
             if target.split(".")[0] in ("ray", "actors", "scripts", "tests") or target.startswith(HARNESS)]
    assert not wrong, "\n".join(wrong)


def test_figures_are_drawn_in_one_module():
    known = modules()
    drawing = sorted(f"{path.relative_to(ROOT)}:{line}" for name, path in known.items()
                     for target, line, _ in imports(name, path, known) if target.split(".")[0] == "matplotlib"
                     and name != "fedray.figures")
    assert not drawing, f"matplotlib is imported outside fedray/figures.py: {drawing}"


def test_the_ray_backend_uses_the_core_seams_only():
    known = modules()
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for name, path in known.items() if name.startswith("actors")
             for target, line, _ in imports(name, path, known)
             if target.startswith("fedray") and target not in SEAMS]
    assert not wrong, "\n".join(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> modules it imports): its strongly connected
    components of more than one module (Tarjan)."""
    found: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    known = modules()
    graph = {name: {t for t, _, runs in imports(name, path, known) if runs and t in known and t != name}
             for name, path in known.items()}
    assert not circles(graph), circles(graph)


def test_the_checks_see_what_they_must():
    """The walker finds an import inside a function, resolves relative and submodule imports, and
    the circle check finds a circle: each check would fail on a violation."""
    known = modules()
    found = {t for t, _, _ in imports("fedray.api", ROOT / "fedray" / "api.py", known)}
    assert {"fedray.resolve", "fedray.tracking", "fedray.rundir"} <= found  # imported inside functions
    server = {t: runs for t, _, runs in imports("actors.server", ROOT / "actors" / "server.py", known)}
    assert server["fedray.federation"] and "actors.executor" in server  # a runtime import beside a typing one
    probe = ROOT / "fedray" / "methods" / "probe.py"  # read from text, not written
    source = "def f():\n    from . import base\n    from .helpers import x\nimport ray.util\n"
    assert [(t, runs) for t, _, runs in imports("fedray.methods.probe", probe, known, source)] == \
        [("ray.util", True), ("fedray.methods.base", True), ("fedray.methods.helpers", True)]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
