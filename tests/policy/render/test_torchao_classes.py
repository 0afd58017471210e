"""The torchao snippet resolves torchao's MXFP8 / NVFP4 training config classes across torchao versions: the real
torchao 0.18 here, and the module layouts of older and newer torchao (read from pytorch/ao's history) as stand-ins."""

from __future__ import annotations

import sys
import types
from enum import Enum

import pytest
from torch import nn

from fp8_policy.policy.render import render
from tests.policy.render import factory as f


def snippet(recipe: str = "mxfp8") -> dict[str, object]:
    decision = f.decision(
        f.family_layers("hf", 2), ["model.model.layers.1.mlp.down_proj"], recipe_choice=f.recipe(recipe)
    )
    namespace: dict[str, object] = {}
    exec(compile(render(decision, "torchao").content, "torchao_filter.py", "exec"), namespace)  # noqa: S102
    return namespace


def test_torchao_0_18_resolves_mxfp8_training_op_config_from_its_recipe() -> None:
    config = snippet()["mxfp8_training_config"]()  # type: ignore[operator]
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig

    assert isinstance(config, MXFP8TrainingOpConfig) and config.wgrad_with_hp is False


def test_torchao_0_18_resolves_nvfp4_training_config() -> None:
    config = snippet("nvfp4")["nvfp4_training_config"]()  # type: ignore[operator]
    from torchao.prototype.moe_training.nvfp4_training.nvfp4_training import NVFP4TrainingConfig

    assert isinstance(config, NVFP4TrainingConfig)


def test_the_resolved_config_converts_exactly_the_filtered_linears() -> None:
    from torchao.quantization import quantize_

    namespace = snippet()

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up_proj = nn.Linear(64, 128)
            self.down_proj = nn.Linear(128, 64)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = Mlp()

    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Layer(), Layer()])

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()

    model = Root()
    before = {name: type(m.weight) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    quantize_(model, namespace["mxfp8_training_config"](), filter_fn=namespace["module_filter_fn"])  # type: ignore[operator]
    changed = {
        name for name, m in model.named_modules() if isinstance(m, nn.Linear) and type(m.weight) is not before[name]
    }
    assert "model.layers.1.mlp.down_proj" not in changed  # skipped: stays high precision
    assert "model.layers.0.mlp.down_proj" in changed


def _fake(monkeypatch, modules: dict[str, dict[str, object]]) -> None:
    """Hide the real torchao prototype modules the resolver tries and put stand-ins in their place."""
    names = [m for m, _c, _b in snippet()["MXFP8_CANDIDATES"]] + [m for m, _c, _b in snippet()["NVFP4_CANDIDATES"]]  # type: ignore[attr-defined]
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)


class _Built:
    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs


def test_torchao_0_16_uses_moe_training_config_with_the_mxfp8_scaling_type(monkeypatch) -> None:
    class MoEScalingType(Enum):
        FP8_ROWWISE = "fp8_rowwise"
        MXFP8 = "mxfp8"

    class MoETrainingConfig(_Built):
        pass

    namespace = snippet()
    _fake(
        monkeypatch,
        {
            "torchao.prototype.moe_training.conversion_utils": {
                "MoETrainingConfig": MoETrainingConfig,
                "MoEScalingType": MoEScalingType,
            }
        },
    )
    config = namespace["mxfp8_training_config"]()  # type: ignore[operator]
    assert isinstance(config, MoETrainingConfig) and config.kwargs == {"scaling_type": MoEScalingType.MXFP8}
    assert namespace["nvfp4_training_config"]() is None  # type: ignore[operator]


@pytest.mark.parametrize(
    ("module", "class_name"),
    [
        ("torchao.prototype.moe_training.config", "MXFP8GroupedMMConfig"),  # main 2026-02..03 (#3862)
        ("torchao.prototype.moe_training.config", "MXFP8TrainingConfig"),  # announced rename
        ("torchao.prototype.mx_formats.grouped_mm.config", "MXFP8GroupedMMConfig"),  # announced move
    ],
)
def test_other_layouts_of_torchao_resolve_too(monkeypatch, module: str, class_name: str) -> None:
    namespace = snippet()
    cls = type(class_name, (_Built,), {})
    _fake(monkeypatch, {module: {class_name: cls}})
    assert isinstance(namespace["mxfp8_training_config"](), cls)  # type: ignore[operator]
