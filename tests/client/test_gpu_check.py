"""`make gpu-check` (examples/gpu_check.py) on a machine without CUDA or without TE: it says what is missing,
verifies nothing and exits 0. The checks themselves need a GPU with Transformer Engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from examples import gpu_check  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the kit would run for real")
def test_without_cuda_the_kit_says_so_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "gpu_check.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "gpu-check: skipped, no CUDA device: nothing was verified (needs a CUDA GPU with 'fp8-policy[te]')."
    )


def test_with_cuda_but_without_te_it_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)  # import fails
    assert gpu_check.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: skipped, Transformer Engine is not importable") and "nothing was verified" in out


def test_the_make_target_runs_the_kit() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "gpu-check: setup\n\t$(BIN)/python examples/gpu_check.py $(GPU_CHECK_ARGS)\n" in makefile


def test_parity_tensors_are_the_fixture_readme_ones() -> None:
    """The kit feeds TE the tensors of the H100 parity fixture (the collector test regenerates the same)."""
    from tests.client.collect.test_te_parity import regenerate

    model, inputs = regenerate()
    mine = gpu_check.parity_tensors()
    for name in ("fc1", "fc2"):
        assert torch.equal(mine[name][0], inputs[name][0]) and torch.equal(mine[name][2], inputs[name][1])
        assert torch.equal(mine[name][1], getattr(model, name).weight.detach())
