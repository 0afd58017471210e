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

    assert json.loads(done.stdout) == []


def test_the_type_checking_block_re_exports_exactly_the_public_names() -> None:
    tree = ast.parse((ROOT / "fp8_policy" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        (node.module, alias.name, alias.asname)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }

    assert imported == {(module, name, name) for name, module in fp8_policy._EXPORTS.items()}
