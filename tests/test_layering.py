"""Dependency directions: policy/ is pure, db/ knows no HTTP, client/ talks HTTP only.

Each package's modules are imported in a fresh interpreter and the modules that got loaded are
checked, so an indirect import (policy -> something -> sqlalchemy) fails too.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_DB, _SERVICE, _CLIENT, _POLICY = "fp8_policy.db", "fp8_policy.service", "fp8_policy.client", "fp8_policy.policy"
FORBIDDEN = {
    "policy": ("fastapi", "starlette", "sqlalchemy", "alembic", "httpx", "uvicorn", _DB, _SERVICE, _CLIENT),
    "db": ("fastapi", "starlette", "uvicorn", "httpx", _SERVICE, _CLIENT),
    "client": ("fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", _DB, _SERVICE, _POLICY),
}


def _modules(package: str) -> list[str]:
    names = [f"fp8_policy.{package}"]
    for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"fp8_policy.{package}."):
        names.append(info.name)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_from_the_layers_it_must_not_know(package: str) -> None:
    modules = _modules(package)
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    bad = sorted({m for m in loaded for f in FORBIDDEN[package] if m == f or m.startswith(f + ".")})
    assert bad == [], f"{package}/ pulled in {bad}"
    assert len(modules) > 3  # the walk really found the package's modules
