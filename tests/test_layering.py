"""Dependency directions: policy/ is pure, db/ knows no HTTP, client/ talks HTTP only; inside policy/, the parser
(policy/parse/) and the live detectors (policy/live/) import nothing from what comes after them in the flow.

Each package's modules are imported in a fresh interpreter and the modules that got loaded are
checked, so an indirect import (policy -> something -> sqlalchemy) fails too. The flow inside policy/ is read from
the source (tests/test_import_graph.py's graph).
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


# policy/ read as its flow: parse -> analysis -> recommend -> render. What each sub-package may import from policy's
# other sub-packages ("top" is policy/'s top-level modules: records, names, thresholds, vocabulary, ...). Checked
# over every import of the source, those inside functions and under TYPE_CHECKING too.
POLICY_FLOW = {
    "parse": {"top"},
    "live": {"top", "parse", "analysis"},  # analysis: the format bands a scale_inv series is read with
}


def _policy_part(module: str, modules: dict[str, Path]) -> str | None:
    """The sub-package of policy/ `module` belongs to ("top" for policy/'s own modules), None outside policy/."""
    parts = module.split(".")
    if parts[:2] != ["fp8_policy", "policy"] or len(parts) < 3:
        return None
    return parts[2] if modules[".".join(parts[:3])].name == "__init__.py" else "top"


def policy_flow_problems(modules: dict[str, Path], flow: dict[str, set[str]]) -> list[str]:
    from tests.test_import_graph import imports_of

    problems = []
    for name, path in sorted(modules.items()):
        part = _policy_part(name, modules)
        if part not in flow:
            continue
        for target in sorted(imports_of(path.read_text(), modules)):
            into = _policy_part(target, modules)
            if into is not None and into != part and into not in flow[part]:
                problems.append(f"{name} imports {target} (policy/{part}/ may import only {sorted(flow[part])})")
    return problems


def test_policy_parse_and_live_import_only_what_comes_before_them_in_the_flow() -> None:
    from tests.test_import_graph import tree_modules

    modules = tree_modules()
    assert {_policy_part(n, modules) for n in modules} >= {"parse", "live", "top", "recommend"}
    assert policy_flow_problems(modules, POLICY_FLOW) == []


def test_the_policy_flow_check_sees_an_import_against_the_flow(tmp_path: Path) -> None:
    (tmp_path / "parse").mkdir()
    (tmp_path / "parse" / "__init__.py").write_text("")
    (tmp_path / "recommend").mkdir()
    (tmp_path / "recommend" / "__init__.py").write_text("")
    (tmp_path / "parse" / "stats.py").write_text("def f():\n    from fp8_policy.policy.recommend import skip\n")
    (tmp_path / "recommend" / "skip.py").write_text("from fp8_policy.policy.parse import stats\n")
    modules = {
        "fp8_policy.policy": tmp_path / "__init__.py",
        "fp8_policy.policy.parse": tmp_path / "parse" / "__init__.py",
        "fp8_policy.policy.parse.stats": tmp_path / "parse" / "stats.py",
        "fp8_policy.policy.recommend": tmp_path / "recommend" / "__init__.py",
        "fp8_policy.policy.recommend.skip": tmp_path / "recommend" / "skip.py",
    }
    assert policy_flow_problems(modules, {"parse": {"top"}}) == [
        "fp8_policy.policy.parse.stats imports fp8_policy.policy.recommend.skip (policy/parse/ may import only ['top'])"
    ]
