"""The TE backend's wrapping, on plain torch modules with recording contexts and on the TE stand-in.

TE cannot run here (no CUDA): these tests prove the wrapping and the autocast selection; the name matching
underneath is the same code the torchao tests run for real.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from fp8_policy.client.apply import UnmatchedLayers, apply_policy, recipe_from_policy
from fp8_policy.client.apply.te import TE_MISSING, is_wrapped, restore_forwards
from tests.client.apply import fake_te
from tests.client.apply.models import D_MODEL, POLICY, SKIPS, FusedModel, ToyTransformer, Wrapper, tokens

EVERYTHING = {"quantizable": lambda module: True}  # plain torch modules stand for TE modules here


class Recorder:
    """A context factory that records enter/exit and which module forwards ran inside it."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.depth = 0

    @contextmanager
    def __call__(self):
        self.depth += 1
        self.events.append("enter")
        try:
            yield
        finally:
            self.depth -= 1
            self.events.append("exit")

    def spy(self, model: nn.Module, monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
        """Per Linear FQN, whether its forward body ran inside the context (hooks run outside forward)."""
        seen: dict[str, bool] = {}
        names = {id(m): fqn for fqn, m in model.named_modules()}
        original = nn.Linear.forward

        def forward(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
            seen[names[id(module)]] = self.depth > 0
            return original(module, x)

        monkeypatch.setattr(nn.Linear, "forward", forward)
        return seen


def test_only_skipped_forwards_run_inside_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    model, recorder = ToyTransformer(), Recorder()
    seen = recorder.spy(model, monkeypatch)
    report = apply_policy(model, POLICY, backend="te", context_factory=recorder, **EVERYTHING)
    model(tokens())
    assert {fqn for fqn, inside in seen.items() if inside} == {"layers.0.self_attention.qkv", "lm_head"}
    assert len(seen) == 17 and recorder.events == ["enter", "exit"] * 2
    assert report.wrapped == ["layers.0.self_attention.qkv", "lm_head"]


def test_applying_twice_does_not_double_wrap_and_restore_undoes() -> None:
    model, recorder = ToyTransformer(), Recorder()
    apply_policy(model, POLICY, backend="te", context_factory=recorder, **EVERYTHING)
    apply_policy(model, POLICY, backend="te", context_factory=recorder, **EVERYTHING)
    model(tokens())
    assert recorder.events == ["enter", "exit"] * 2
    assert sorted(restore_forwards(model)) == ["layers.0.self_attention.qkv", "lm_head"]
    model(tokens())
    assert len(recorder.events) == 4 and not is_wrapped(model.lm_head)


def test_deepcopy_of_a_wrapped_model_calls_its_own_modules() -> None:
    model, recorder = ToyTransformer(), Recorder()
    apply_policy(model, POLICY, backend="te", context_factory=recorder, **EVERYTHING)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        clone.lm_head.weight.zero_()
        clone.lm_head.bias.zero_()
    assert torch.count_nonzero(clone(tokens())) == 0  # the copy's head ran, not the original's
    assert recorder.events == []  # the copy carries its own (copied) context factory
    assert clone.lm_head.__dict__["_fp8_policy_context"].events == ["enter", "exit"] * 2


def test_unmatched_raises_before_any_wrap() -> None:
    model = ToyTransformer()
    policy = {**POLICY, "fp8_skip_layers": ["model.layers.1.self_attention.qkv", "model.output"]}
    with pytest.raises(UnmatchedLayers, match="did you mean `model.lm_head`"):
        apply_policy(model, policy, backend="te", context_factory=Recorder(), **EVERYTHING)
    assert not any(is_wrapped(m) for m in model.modules())


def test_ddp_style_names_wrap_the_inner_module() -> None:
    inner, recorder = ToyTransformer(), Recorder()
    policy = {"fp8_skip_layers": ["model.layers.4.mlp.fc2"]}  # logged without DDP, applied with it
    report = apply_policy(Wrapper(inner), policy, backend="te", context_factory=recorder, **EVERYTHING)
    assert report.wrapped == ["module.layers.3.mlp.fc2"] and is_wrapped(inner.layers[3].mlp.fc2)


def test_half_skipped_layernorm_mlp_runs_whole_in_bf16_with_a_warning() -> None:
    model, recorder = FusedModel(), Recorder()
    policy = {"fp8_skip_layers": ["model.layers.2.layernorm_mlp.fc1"]}
    report = apply_policy(model, policy, backend="te", context_factory=recorder, **EVERYTHING)
    assert report.wrapped == ["layers.1.layernorm_mlp"] and report.matched[0].how == "fused"
    assert any("TE cannot split it, so fc1/fc2 all run in BF16" in w for w in report.warnings)
    model(torch.randn(2, 16, D_MODEL))
    assert recorder.events == ["enter", "exit"]


def test_both_layernorm_mlp_gemms_wrap_once_without_warning() -> None:
    model = FusedModel()
    policy = {"fp8_skip_layers": ["model.layers.1.layernorm_mlp.fc1", "model.layers.1.layernorm_mlp.fc2"]}
    report = apply_policy(model, policy, backend="te", context_factory=Recorder(), **EVERYTHING)
    assert report.wrapped == ["layers.0.layernorm_mlp"] and len(report.matched) == 2
    assert not any("cannot split" in w for w in report.warnings)


def test_one_name_for_many_blocks_wraps_all_and_warns() -> None:
    model = ToyTransformer(n_layers=2)
    for block in model.layers:
        block.layer_number = None
    report = apply_policy(
        model,
        {"fp8_skip_layers": ["model.layers.None.mlp.fc2"]},
        backend="te",
        context_factory=Recorder(),
        **EVERYTHING,
    )
    assert report.wrapped == ["layers.0.mlp.fc2", "layers.1.mlp.fc2"]
    assert any("names 2 modules" in w for w in report.warnings)


def test_non_te_modules_are_already_bf16_and_not_wrapped() -> None:
    model = ToyTransformer()  # plain nn.Linear: under TE autocast they never quantize
    report = apply_policy(model, POLICY, backend="te", context_factory=Recorder())
    assert report.wrapped == [] and [a.name for a in report.already_bf16] == SKIPS


def test_policy_kept_bf16_is_reported_and_still_wrapped() -> None:
    policy = {**POLICY, "kept_bf16": ["model.lm_head"]}
    report = apply_policy(ToyTransformer(), policy, backend="te", context_factory=Recorder(), **EVERYTHING)
    assert "lm_head" in report.wrapped
    assert [a.name for a in report.already_bf16] == ["model.lm_head"]


@pytest.mark.parametrize("recipe", [{"name": "delayed"}, {"class": "transformer_engine.common.recipe.DelayedScaling"}])
def test_delayed_scaling_with_skips_warns(recipe) -> None:
    policy = {**POLICY, "recipe": recipe}
    report = apply_policy(ToyTransformer(), policy, backend="te", context_factory=Recorder(), **EVERYTHING)
    assert any("DelayedScaling" in w and "amax reduction" in w for w in report.warnings)
    assert report.recipe == "delayed"


def _te_model() -> nn.Module:
    model = ToyTransformer(n_layers=2)
    model.layers[0].self_attention.qkv = fake_te.Linear(D_MODEL, 3 * D_MODEL)
    model.lm_head = fake_te.Linear(D_MODEL, 64)
    model.layers[1].mlp.fc1 = fake_te.Linear(D_MODEL, 4 * D_MODEL)
    return model


def test_te_29_uses_autocast_enabled_false_inside_an_fp8_region(fake_te_29) -> None:
    model = _te_model()
    report = apply_policy(model, POLICY, backend="te")  # default context and TE-module detection
    assert report.wrapped == ["layers.0.self_attention.qkv", "lm_head"]
    with fake_te_29.autocast(enabled=True):
        model(tokens())
    assert model.layers[0].self_attention.qkv.fp8_seen is False and model.lm_head.fp8_seen is False
    assert model.layers[1].mlp.fc1.fp8_seen is True  # not skipped: FP8 stays on
    assert fake_te.State.events == [
        ("enter", True),
        ("enter", False),
        ("exit", False),
        ("enter", False),
        ("exit", False),
        ("exit", True),
    ]


def test_te_28_falls_back_to_fp8_autocast(fake_te_28) -> None:
    model = _te_model()
    apply_policy(model, POLICY, backend="te")
    with fake_te_28.fp8_autocast(enabled=True):
        model(tokens())
    assert model.lm_head.fp8_seen is False and model.layers[1].mlp.fc1.fp8_seen is True
    assert ("fp8_autocast enter", False) in fake_te.State.events


@pytest.mark.parametrize("fixture", ["fake_te_29", "fake_te_28"])
def test_outer_recipe_reaches_the_disabled_contexts(fixture, request) -> None:
    request.getfixturevalue(fixture)
    model = _te_model()
    recipe = recipe_from_policy(POLICY)
    apply_policy(model, POLICY, backend="te", recipe=recipe)
    model(tokens())
    assert fake_te.State.recipes == [recipe, recipe]


class _Recursive(nn.Module):
    """A 'TE module' whose forward re-enters itself (as activation recompute or recursion would)."""

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        return self(x, depth - 1) if depth else x


_Recursive.__module__ = "transformer_engine.pytorch.module.fake"


def test_nested_calls_get_a_fresh_autocast_each(fake_te_29) -> None:
    root = nn.Module()
    root.rec = _Recursive()
    apply_policy(root, {"fp8_skip_layers": ["model.rec"]}, backend="te")
    root.rec(torch.ones(1))  # one shared instance would raise "cannot be entered more than once"
    assert [e for e, _ in fake_te.State.events] == ["enter"] * 3 + ["exit"] * 3


def test_missing_te_raises_install_hint(no_te) -> None:
    with pytest.raises(ImportError) as info:
        apply_policy(ToyTransformer(), POLICY, backend="te")
    assert str(info.value) == TE_MISSING
    assert "pip install 'fp8-policy[te]' on a CUDA machine" in TE_MISSING


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        apply_policy(ToyTransformer(), POLICY, backend="jax")
