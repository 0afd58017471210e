"""The examples run (torchao, on CPU) or at least compile (TE), and `client.apply` stays light to import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def test_apply_torchao_example_trains_and_prints_the_report() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "apply_torchao.py")], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "`model.output` not found; did you mean `model.lm_head`?" in out
    assert "matched   model.lm_head -> lm_head" in out
    assert "converted to Float8Linear: 15:" in out
    assert "kept in high precision: layers.0.self_attention.qkv, lm_head" in out
    assert "loss per step:" in out


def test_apply_te_example_compiles() -> None:
    source = (EXAMPLES / "apply_te.py").read_text()
    compile(source, "apply_te.py", "exec")
    calls = {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert {"autocast", "TransformerLayer", "initialize", "infer_and_assign_layer_names"} <= calls


def test_importing_client_apply_needs_no_torch_te_or_server_code() -> None:
    code = (
        "import sys, fp8_policy.client.apply; heavy = {'torch', 'torchao', 'transformer_engine', "
        "'fp8_policy.service', 'fp8_policy.db', 'fp8_policy.policy'}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or '.'.join(m.split('.')[:2]) in heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_client_apply_never_imports_server_packages() -> None:
    for path in (ROOT / "client" / "apply").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(
                ".".join(n.split(".")[:2]) in {"fp8_policy.service", "fp8_policy.db", "fp8_policy.policy"}
                for n in names
            ), path
