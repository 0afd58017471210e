"""The torchao backend, for real on CPU (Float8LinearConfig(emulate=True))."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchao.float8 import Float8LinearConfig
from torchao.float8.float8_linear import Float8Linear

from fp8_policy.client.apply import UnmatchedLayers, apply_policy
from tests.client.apply.models import POLICY, VOCAB, ToyTransformer, Wrapper, tokens

EMULATE = Float8LinearConfig(emulate=True)


def linear_types(model: nn.Module) -> dict[str, type]:
    return {fqn: type(m) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)}


def test_skipped_layers_stay_linear_and_the_rest_become_float8() -> None:
    model = ToyTransformer()
    report = apply_policy(model, POLICY, backend="torchao", config=EMULATE)
    types = linear_types(model)
    assert types.pop("layers.0.self_attention.qkv") is nn.Linear  # logged layer 1 = index 0
    assert types.pop("lm_head") is nn.Linear
    assert len(types) == 15 and set(types.values()) == {Float8Linear}
    assert report.ok and report.kept == ["layers.0.self_attention.qkv", "lm_head"]
    assert sorted(report.converted) == sorted(types)
    assert [m.fqn for m in report.matched] == ["layers.0.self_attention.qkv", "lm_head"]


def test_converted_model_trains_three_steps_on_cpu() -> None:
    torch.manual_seed(0)
    model = ToyTransformer()
    apply_policy(model, POLICY, backend="torchao", config=EMULATE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = tokens(seq=17)  # 16 inputs + the next-token targets
    losses = []
    for _ in range(3):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    assert isinstance(model.layers[1].self_attention.qkv, Float8Linear)


def test_head_named_output_in_policy_raises_with_suggestion_and_changes_nothing() -> None:
    model = ToyTransformer()
    policy = {**POLICY, "fp8_skip_layers": ["model.output"]}
    with pytest.raises(UnmatchedLayers, match=r"`model.output` not found; did you mean `model.lm_head`\?"):
        apply_policy(model, policy, backend="torchao", config=EMULATE)
    assert set(linear_types(model).values()) == {nn.Linear}


def test_allow_unmatched_reports_instead_of_raising() -> None:
    model = ToyTransformer()
    policy = {**POLICY, "fp8_skip_layers": ["model.output", "model.lm_head"]}
    report = apply_policy(model, policy, backend="torchao", config=EMULATE, allow_unmatched=True)
    assert not report.ok and [u.name for u in report.unmatched] == ["model.output"]
    assert report.unmatched[0].suggestions[0] == "model.lm_head"
    assert report.kept == ["lm_head"]
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["unmatched"] == [{"name": "model.output", "suggestions": ["model.lm_head"]}]
    assert "UNMATCHED `model.output` not found" in report.summary()


def test_ddp_prefixed_names_resolve_on_an_unwrapped_model() -> None:
    model = ToyTransformer()
    policy = {**POLICY, "fp8_skip_layers": ["model.module.layers.4.mlp.fc2", "model.module.lm_head"]}
    report = apply_policy(model, policy, backend="torchao", config=EMULATE)
    assert report.kept == ["layers.3.mlp.fc2", "lm_head"]
    assert {m.how for m in report.matched} == {"wrapper levels"}


def test_wrapped_model_fqns_keep_the_wrapper_level() -> None:
    model = Wrapper(ToyTransformer())
    report = apply_policy(model, POLICY, backend="torchao", config=EMULATE)
    assert report.kept == ["module.layers.0.self_attention.qkv", "module.lm_head"]
    assert type(model.module.lm_head) is nn.Linear


def test_skipping_a_whole_block_keeps_every_linear_under_it() -> None:
    model = ToyTransformer()
    report = apply_policy(model, {"fp8_skip_layers": ["model.layers.2"]}, backend="torchao", config=EMULATE)
    assert report.kept == [
        "layers.1.self_attention.qkv",
        "layers.1.self_attention.proj",
        "layers.1.mlp.fc1",
        "layers.1.mlp.fc2",
    ]
    assert len(report.converted) == 13


def test_dims_not_multiple_of_16_are_left_alone_and_reported() -> None:
    model = ToyTransformer()
    model.extra = nn.Linear(32, 10)
    report = apply_policy(model, {"fp8_skip_layers": []}, backend="torchao", config=EMULATE)
    assert report.not_convertible == ["extra"] and type(model.extra) is nn.Linear
    assert "the policy skips nothing: every layer stays in FP8" in report.warnings


def test_gemm_override_keeps_the_whole_module_and_warns() -> None:
    model = ToyTransformer()
    policy = {
        "fp8_skip_layers": [],
        "gemm_overrides": [{"layer": "model.layers.3.mlp.fc1", "gemms": ["wgrad"], "reason": "gradient underflow"}],
    }
    report = apply_policy(model, policy, backend="torchao", config=EMULATE)
    assert report.kept == ["layers.2.mlp.fc1"] and report.matched[0].reason == "gemm override"
    assert any("whole modules" in w for w in report.warnings)


def test_gemm_overrides_ignore_converts_the_module() -> None:
    model = ToyTransformer()
    policy = {
        "fp8_skip_layers": [],
        "gemm_overrides": [{"layer": "model.layers.3.mlp.fc1", "gemms": ["wgrad"], "reason": "x"}],
    }
    report = apply_policy(model, policy, backend="torchao", config=EMULATE, gemm_overrides="ignore")
    assert report.kept == [] and isinstance(model.layers[2].mlp.fc1, Float8Linear)
    assert any("NOT applied" in w for w in report.warnings)


def test_user_filter_is_anded_and_applying_twice_is_harmless() -> None:
    model = ToyTransformer()
    apply_policy(
        model, POLICY, backend="torchao", config=EMULATE, module_filter_fn=lambda mod, fqn: not fqn.endswith("proj")
    )
    assert type(model.layers[0].self_attention.proj) is nn.Linear
    report = apply_policy(model, POLICY, backend="torchao", config=EMULATE)
    assert isinstance(model.layers[0].self_attention.proj, Float8Linear)
    assert type(model.lm_head) is nn.Linear and len(report.converted) == 15


def test_default_config_follows_the_policy_recipe() -> None:
    model = ToyTransformer()
    report = apply_policy(model, {**POLICY, "recipe": {"name": "block"}}, backend="torchao")
    assert any("'rowwise'" in w for w in report.warnings)
    assert isinstance(model.layers[0].mlp.fc1, Float8Linear)


def test_precision_ladder_bf16_rungs_stay_linear_mxfp8_rungs_use_torchao_mx_and_nvfp4_is_float8() -> None:
    from torchao.prototype.moe_training.tensor import MXFP8TrainingWeightWrapperTensor

    model = ToyTransformer()
    rungs = {
        "model.layers.1.mlp.fc1": "bf16",
        "model.layers.2.self_attention.qkv": "mxfp8",
        "model.layers.3.mlp.fc2": "nvfp4",
        "model.layers.4.mlp.fc1": "current",
    }
    policy = {
        "fp8_skip_layers": ["model.lm_head", "model.layers.1.mlp.fc1"],
        "recipe": {"name": "current"},
        "precision_ladder": {"layers": {name: {"precision": rung} for name, rung in rungs.items()}},
    }
    report = apply_policy(model, policy, backend="torchao", config=EMULATE)
    assert type(model.layers[0].mlp.fc1) is nn.Linear and "layers.0.mlp.fc1" in report.kept
    qkv = model.layers[1].self_attention.qkv
    assert isinstance(qkv.weight, MXFP8TrainingWeightWrapperTensor) and not isinstance(qkv, Float8Linear)
    assert report.precision_wrapped == {"layers.1.self_attention.qkv": "mxfp8"}
    assert isinstance(model.layers[2].mlp.fc2, Float8Linear)  # nvfp4: the safe side, stated
    assert any("layers.2.mlp.fc2 (nvfp4)" in w and "safe side" in w for w in report.warnings)
    assert "own recipe mxfp8" in report.summary()
    model(tokens()).float().sum().backward()


def test_a_bf16_rung_outside_the_skip_list_is_named_not_applied() -> None:
    model = ToyTransformer()
    policy = {
        "fp8_skip_layers": [],
        "recipe": {"name": "current"},
        "precision_ladder": {"layers": {"model.lm_head": "bf16"}},
    }
    report = apply_policy(model, policy, backend="torchao", config=EMULATE)
    assert isinstance(model.lm_head, Float8Linear) and report.kept == []
    assert any("not applied" in w and "lm_head" in w for w in report.warnings)
