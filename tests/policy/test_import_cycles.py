"""No package module imported inside a function (issue 12 item 11): a dialect imported inside `render()` once hid
an import cycle of policy/render. The cycles themselves (policy/analysis findings <-> layout <-> signals,
policy/render's `__init__` and its dialects, service/visual legend <-> render) are checked over the whole tree
by tests/test_import_graph.py.

Top-level imports are read with ast, `if TYPE_CHECKING:` blocks included; `from pkg import name` counts as an
edge to `pkg.name` when that is a module of the package, else to `pkg`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_graph import tree_modules

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(f"fp8_policy.policy.{name}" for name in ("analysis", "render", "recommend", "compare"))


def _modules(package: str) -> dict[str, Path]:
    """The package's own modules (not its subpackages'), by import name."""
    return {name: path for name, path in tree_modules().items() if package in (name, name.rpartition(".")[0])}


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


@pytest.mark.parametrize("package", PACKAGES)  # not service/visual: its job.py imports the renderer in its worker
def test_no_package_module_is_imported_inside_a_function(package):  # on purpose
    modules = _modules(package)
    late = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        inner = _imports(tree, modules, top_level=False) - _imports(tree, modules, top_level=True) - {name}
        if inner:
            late[name] = sorted(inner)
    assert not late, late


def test_formats_are_listed_once():
    from fp8_policy.policy import render

    assert (
        render.FORMATS
        == tuple(render.DIALECTS)
        == ("te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan")
    )
    for fmt in render.OUTPUT_FORMATS:  # spelled once, in policy/vocabulary.py; the renderers' tables are keyed by it
        assert (ROOT / "policy/vocabulary.py").read_text().count(f'"{fmt}"') >= 1
        assert (ROOT / "policy/render/__init__.py").read_text().count(f'"{fmt}"') == 0
