"""No import cycles inside the packages that had them (issue 12 item 11): policy/analysis (findings <-> layout <->
signals, with `Analysis` now in `result.py`), policy/render (the package `__init__` and its dialects) and
service/visual (legend <-> render).

The graph is built from each module's top-level imports (ast, `if TYPE_CHECKING:` blocks included: an annotation
import that needs a guard is a cycle in disguise); `from pkg import name` counts as an edge to `pkg.name` when
that is a module of the package, else to `pkg`. Imports inside functions are reported separately: a dialect
imported inside `render()` hid the cycle before.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "policy/analysis": "fp8_policy.policy.analysis",
    "policy/render": "fp8_policy.policy.render",
    "service/visual": "fp8_policy.service.visual",
    "policy/recommend": "fp8_policy.policy.recommend",
    "policy/compare": "fp8_policy.policy.compare",
}


def _modules(folder: str, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / folder).glob("*.py")):
        out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


def _imports(tree: ast.Module, modules: dict[str, Path], *, top_level: bool) -> set[str]:
    nodes = ast.iter_child_nodes(tree) if top_level else ast.walk(tree)
    found: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if top_level and isinstance(node, ast.If):  # `if TYPE_CHECKING:` and friends
            stack.extend(node.body + node.orelse)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.add(target if target in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in modules}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_package_has_no_import_cycle(folder):
    modules = _modules(folder, PACKAGES[folder])
    graph = {
        name: _imports(ast.parse(path.read_text()), modules, top_level=True) - {name} for name, path in modules.items()
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


@pytest.mark.parametrize("folder", sorted(set(PACKAGES) - {"service/visual"}))  # visual/job.py imports the
def test_no_package_module_is_imported_inside_a_function(folder):  # renderer in its worker on purpose
    modules = _modules(folder, PACKAGES[folder])
    late = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        inner = _imports(tree, modules, top_level=False) - _imports(tree, modules, top_level=True) - {name}
        if inner:
            late[name] = sorted(inner)
    assert not late, late


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_formats_are_listed_once():
    from fp8_policy.policy import render

    assert render.FORMATS == tuple(render.DIALECTS) == ("te-yaml", "megatron", "hydra", "torchao")
    source = (ROOT / "policy/render/__init__.py").read_text()
    assert source.count('"te-yaml"') == 1
