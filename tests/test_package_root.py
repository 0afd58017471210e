"""`fp8_policy`'s public names: resolved lazily from the client, and visible to type checkers the same way."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fp8_policy

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", fp8_policy.__all__)
def test_each_public_name_is_the_object_of_its_module(name: str) -> None:
    module = importlib.import_module(fp8_policy._EXPORTS[name])

    assert getattr(fp8_policy, name) is getattr(module, name)
    assert name in dir(fp8_policy)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        fp8_policy.NoSuchThing  # noqa: B018


def test_importing_the_package_loads_no_subpackage() -> None:
    script = "import json, sys, fp8_policy\nprint(json.dumps([m for m in sys.modules if m.startswith('fp8_policy.')]))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)

    # the version string's module and the lazy-name helper, both standard library only; nothing else
    assert sorted(json.loads(done.stdout)) == ["fp8_policy._lazy", "fp8_policy._version"]


def type_checking_imports(path: Path) -> set[tuple[str | None, str, str | None]]:
    """(module, name, as-name) of every import in the module's top-level `if TYPE_CHECKING:` block."""
    tree = ast.parse(path.read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {
        (node.module, alias.name, alias.asname)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_type_checking_block_re_exports_exactly_the_public_names() -> None:
    imported = type_checking_imports(ROOT / "fp8_policy" / "__init__.py")

    assert imported == {(module, name, name) for name, module in fp8_policy._EXPORTS.items()}


def test_the_collect_facade_lists_exactly_the_collect_packages_names() -> None:
    """fp8_policy/collect.py repeats client/collect's `__all__` (importing that package would load torch); read
    the package's list from its source, so the test runs on the base install too."""
    import fp8_policy.collect as facade

    package = ast.parse((ROOT / "client" / "collect" / "__init__.py").read_text())
    names = next(
        ast.literal_eval(node.value)
        for node in package.body
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
    )
    imported = type_checking_imports(ROOT / "fp8_policy" / "collect.py")

    assert facade.__all__ == names
    assert imported == {(facade._IMPL, name, None) for name in names}
