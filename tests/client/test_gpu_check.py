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


def test_the_te_recipe_step_imports_without_te() -> None:
    """Step 5 imports TE only inside its check: the kit must load (and say what is missing) where TE is absent."""
    code = "import sys; sys.modules['transformer_engine'] = None; import examples.gpu_check_recipe"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_main_runs_step_5_and_fails_on_its_failing_row(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from examples import gpu_check_loop, gpu_check_recipe, gpu_check_sensitivity

    monkeypatch.setattr(gpu_check, "missing", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "test device")
    monkeypatch.setattr(gpu_check, "check_collector", lambda work: [("collector", True, "")])
    monkeypatch.setattr(gpu_check, "check_apply_precision", lambda: [("apply", True, "")])
    monkeypatch.setattr(gpu_check_loop, "closed_loop", lambda work, steps: [("loop", True, "")])
    monkeypatch.setattr(gpu_check_sensitivity, "check_sensitivity", lambda work: [("sensitivity", True, "")])
    seen = []

    def step5(work: Path) -> list:
        seen.append(work.name)
        return [("te-recipe built model.lm_head", False, "TE ('current',)*3")]

    monkeypatch.setattr(gpu_check_recipe, "check_te_recipe", step5)
    assert gpu_check.main([]) == 1
    assert seen == ["te-recipe"] and "FAIL  te-recipe built model.lm_head" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [None, "mxfp8", "block"])
def test_step_5_expects_what_the_rendered_module_gives_te(extra, tmp_path: Path) -> None:
    """The step's decision through the real renderer, loaded with the project's stand-in of TE's CustomRecipe
    machinery, gives every (layer, GEMM) exactly the format the step then checks TE built, by the role names TE
    gives tiny_te_gpt's modules once `assign_names` named them."""
    from bench.te_recipe_loader import gemm_formats, loaded
    from examples.gpu_check_recipe import build_decision, expected, logged_names, role_name
    from fp8_policy.policy.render import render

    want = expected(extra)
    assert set(want) == set(logged_names()) and len(want) == 17
    mixes = set(want.values())
    assert ("bf16",) * 3 in mixes and ("current",) * 3 in mixes  # a BF16 layer, an FP8 current one
    assert ("current", "bf16", "bf16") in mixes and ("bf16", "current", "current") in mixes  # HybridQuantizer both ways
    assert ((extra,) * 3 in mixes) == (extra is not None)
    with loaded(render(build_decision(extra), "te-recipe").content, tmp_path) as module:
        got = {name: gemm_formats(module.qfactory, role_name(name)) for name in want}
    assert got == want


def test_role_names_are_the_module_paths_of_tiny_te_gpt() -> None:
    from examples.gpu_check_recipe import role_name

    assert role_name("model.layers.1.self_attention.layernorm_qkv") == "layers.0.self_attention.layernorm_qkv"
    assert role_name("model.layers.4.layernorm_mlp.fc2") == "layers.3.layernorm_mlp.fc2"  # LayerNormMLP `<name>.fc2`
    assert role_name("model.lm_head") == "lm_head"


def test_extra_rung_prefers_mxfp8_then_block() -> None:
    from examples.gpu_check_recipe import extra_rung

    assert extra_rung(True, True) == "mxfp8" and extra_rung(False, True) == "block" and extra_rung(False, False) is None


def test_assign_names_replaces_tes_default_layer_names(tmp_path: Path) -> None:
    """TE >= 2.12 names a module built without `name=` `Layer_<n>` in its constructor (pytorch/module/base.py
    `_validate_name`): the rendered `assign_names` must replace that default (else the plan matches nothing and
    every BF16 layer runs the outer recipe) and keep a name a framework gave."""
    from bench.te_recipe_loader import TransformerEngineBaseModule, loaded
    from examples.gpu_check_recipe import build_decision
    from fp8_policy.policy.render import render

    class FakeTE(torch.nn.Module, TransformerEngineBaseModule):
        def __init__(self, name: str | None) -> None:
            super().__init__()
            self.name = name

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([FakeTE("Layer_7"), FakeTE(None), FakeTE("model.layers.3.mine")])
    model.lm_head = FakeTE("Layer_12")
    with loaded(render(build_decision(None), "te-recipe").content, tmp_path) as module:
        module.assign_names(model)
    names = [m.name for m in (*model.layers, model.lm_head)]
    assert names == ["layers.0", "layers.1", "model.layers.3.mine", "lm_head"]
