"""`apply_policy(backend="te")` with a precision ladder (per-layer `te.autocast(recipe=...)`) and the check of an
active nvdlfw_inspect debug session, on the TE stand-in (tests/client/apply/fake_te.py) and nvdlfw_inspect's real
ConfigManager. TE itself needs CUDA: `make gpu-check` runs the real thing."""

from __future__ import annotations

import pytest
from torch import nn

from fp8_policy.client.apply import DebugConfigConflict, UnmatchedLayers, apply_policy, recipe_from_policy
from fp8_policy.client.apply.te import is_wrapped
from tests.client.apply import fake_te
from tests.client.apply.models import D_MODEL, ToyTransformer, tokens

QKV1, PROJ1, FC1_2 = "model.layers.1.self_attention.qkv", "model.layers.1.self_attention.proj", "model.layers.2.mlp.fc1"
FC2_2, HEAD = "model.layers.2.mlp.fc2", "model.lm_head"


def policy(rungs: dict[str, str], recipe: str = "mxfp8", skips: tuple[str, ...] = (HEAD,)) -> dict:
    classes = {"mxfp8": "MXFP8BlockScaling", "current": "Float8CurrentScaling", "nvfp4": "NVFP4BlockScaling"}
    return {
        "fp8_skip_layers": list(skips),
        "gemm_overrides": [],
        "recipe": {"name": recipe, "class": f"transformer_engine.common.recipe.{classes[recipe]}", "kwargs": {}},
        "precision_ladder": {"layers": {name: {"precision": rung, "confidence": 0.8} for name, rung in rungs.items()}},
    }


def te_model() -> nn.Module:
    """ToyTransformer whose GEMMs are TE-module stand-ins (they record FP8 on/off and the recipe in effect)."""
    model = ToyTransformer(n_layers=2)
    for block in model.layers:
        block.self_attention.qkv = fake_te.Linear(D_MODEL, 3 * D_MODEL)
        block.self_attention.proj = fake_te.Linear(D_MODEL, D_MODEL)
        block.mlp.fc1 = fake_te.Linear(D_MODEL, 4 * D_MODEL)
        block.mlp.fc2 = fake_te.Linear(4 * D_MODEL, D_MODEL)
    model.lm_head = fake_te.Linear(D_MODEL, 64)
    return model


def test_ladder_layers_run_under_their_own_recipe_and_the_report_says_which(fake_te_29) -> None:
    model = te_model()
    rungs = {QKV1: "nvfp4", PROJ1: "mxfp8", FC1_2: "bf16", FC2_2: "current"}
    report = apply_policy(model, policy(rungs, skips=(HEAD, FC1_2)), backend="te")
    outer = recipe_from_policy(policy(rungs))
    with fake_te_29.autocast(enabled=True, recipe=outer):
        model(tokens())
    qkv, proj = model.layers[0].self_attention.qkv, model.layers[0].self_attention.proj
    fc1, fc2 = model.layers[1].mlp.fc1, model.layers[1].mlp.fc2
    assert type(qkv.recipe_seen).__name__ == "NVFP4BlockScaling"
    assert proj.recipe_seen is outer  # same rung as the outer recipe: untouched
    assert fc1.fp8_seen is False and model.lm_head.fp8_seen is False  # the skips (fc1's bf16 rung agrees)
    assert type(fc2.recipe_seen).__name__ == "Float8CurrentScaling"
    assert model.layers[1].self_attention.qkv.recipe_seen is outer
    assert report.precision_wrapped == {"layers.0.self_attention.qkv": "nvfp4", "layers.1.mlp.fc2": "current"}
    assert set(report.wrapped) == {"lm_head", "layers.1.mlp.fc1"}
    assert "own recipe nvfp4" in report.summary() and report.to_dict()["precision_wrapped"]
    assert {(m.name, m.reason) for m in report.matched} >= {(QKV1, "ladder nvfp4"), (FC2_2, "ladder current")}
    assert not any("not applied" in w for w in report.warnings)


def test_a_bf16_rung_the_policy_does_not_skip_is_named_not_applied(fake_te_29) -> None:
    """The policy's BF16 set decides (it may switch the recipe and ask for a re-run before skipping)."""
    model = te_model()
    report = apply_policy(model, policy({FC1_2: "bf16"}), backend="te")
    assert report.wrapped == ["lm_head"] and report.precision_wrapped == {}
    assert any("no low-precision rung" in w and FC1_2 in w and "not applied" in w for w in report.warnings)


def test_the_policy_fp8_format_reaches_fp8_rungs_and_layer_recipes_override(fake_te_29) -> None:
    model = te_model()
    p = policy({QKV1: "mxfp8", FC2_2: "nvfp4"}, recipe="current")
    p["recipe"]["kwargs"] = {"fp8_format": "HYBRID"}
    custom = fake_te.NVFP4BlockScaling(disable_rht=True)
    apply_policy(model, p, backend="te", layer_recipes={"nvfp4": custom})
    with fake_te_29.autocast(enabled=True, recipe=recipe_from_policy(p)):
        model(tokens())
    assert model.layers[0].self_attention.qkv.recipe_seen.fp8_format is fake_te.Format.HYBRID
    assert model.layers[1].mlp.fc2.recipe_seen is custom


def test_a_delayed_rung_runs_at_an_fp8_outer_recipe_and_at_current_under_nvfp4(fake_te_29) -> None:
    report = apply_policy(te_model(), policy({PROJ1: "delayed"}, recipe="current"), backend="te")
    assert report.wrapped == ["lm_head"] and report.precision_wrapped == {}
    model = te_model()
    report = apply_policy(model, policy({PROJ1: "delayed"}, recipe="nvfp4"), backend="te")
    assert report.precision_wrapped == {"layers.0.self_attention.proj": "current"}
    model(tokens())
    assert type(model.layers[0].self_attention.proj.recipe_seen).__name__ == "Float8CurrentScaling"


def test_a_rung_inside_a_skipped_block_stays_bf16_with_a_warning(fake_te_29) -> None:
    model = te_model()
    report = apply_policy(model, policy({QKV1: "nvfp4"}, skips=("model.layers.1",)), backend="te")
    assert report.precision_wrapped == {} and report.wrapped == ["layers.0"]
    assert any("keeps in BF16" in w for w in report.warnings)
    model(tokens())
    assert model.layers[0].self_attention.qkv.fp8_seen is False


def test_an_unmatched_ladder_name_raises_before_any_change(fake_te_29) -> None:
    model = te_model()
    with pytest.raises(UnmatchedLayers, match="model.layers.1.attn.qkv"):
        apply_policy(model, policy({"model.layers.1.attn.qkv": "nvfp4"}), backend="te")
    assert not any(is_wrapped(m) for m in model.modules())


def test_a_bad_rung_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="precision_ladder"):
        apply_policy(te_model(), policy({QKV1: "fp6"}), backend="te", context_factory=lambda: None)


# ------------------------------------------------------------------------------ the active debug session
def session(monkeypatch: pytest.MonkeyPatch, nvdlfw_config, tmp_path, text: str) -> None:
    """Load `text` with nvdlfw_inspect's real ConfigManager and mark a debug session active."""
    import nvdlfw_inspect.api as debug_api

    path = tmp_path / "debug.yaml"
    path.write_text(text)
    nvdlfw_config(str(path))
    monkeypatch.setattr(debug_api, "DEBUG_MANAGER", object())


FP8_EVERYWHERE = """
watch_all:
  enabled: true
  layers:
    layer_name_regex_pattern: '.*'
  transformer_engine:
    LogFp8TensorStats:
      enabled: true
      tensors: [activation, gradient, weight]
      stats: [underflows%, scale_inv_min, scale_inv_max, mse]
      freq: 10
"""


def test_a_session_watching_kept_layers_with_fp8_stats_raises_one_error_naming_them(
    fake_te_29, monkeypatch, nvdlfw_config, tmp_path
) -> None:
    session(monkeypatch, nvdlfw_config, tmp_path, FP8_EVERYWHERE)
    model = te_model()
    with pytest.raises(DebugConfigConflict) as info:
        apply_policy(model, policy({FC1_2: "bf16", QKV1: "nvfp4"}, skips=(HEAD, FC1_2)), backend="te")
    message = str(info.value)
    assert set(info.value.conflicts) == {HEAD, FC1_2, QKV1}
    assert "te-monitor" in message and "LogTensorStats" in message and "bare stats" in message
    assert not any(is_wrapped(m) for m in model.modules())  # nothing changed
    # the same model and policy pass with the check turned off
    report = apply_policy(model, policy({FC1_2: "bf16"}), backend="te", check_debug_session=False)
    assert "lm_head" in report.wrapped


def test_the_te_monitor_shaped_config_passes(fake_te_29, monkeypatch, nvdlfw_config, tmp_path) -> None:
    kept = r"^(model\.lm_head|model\.layers\.2\.mlp\.fc1)$"
    text = f"""
kept_layers_high_precision_stats:
  enabled: true
  layers:
    layer_name_regex_pattern: '{kept}'
  transformer_engine:
    LogTensorStats:
      enabled: true
      stats: [min, max]
      tensors: [activation]
      freq: 10
nvfp4_layers_stats:
  enabled: true
  layers:
    layer_name_regex_pattern: '^(model\\.layers\\.1\\.self_attention\\.qkv)$'
  transformer_engine:
    LogNvfp4TensorStats:
      enabled: true
      tensors_struct:
      - tensor: activation
        stats: [underflows%, mse]
remaining_layers_stats:
  enabled: true
  layers:
    layer_name_regex_pattern: '^(?!(?:model\\.lm_head|model\\.layers\\.2\\.mlp\\.fc1|model\\.layers\\.1\\.self_attention\\.qkv)$).*'
  transformer_engine:
    LogFp8TensorStats:
      enabled: true
      tensors: [activation]
      stats: [underflows%]
"""
    session(monkeypatch, nvdlfw_config, tmp_path, text)
    report = apply_policy(te_model(), policy({FC1_2: "bf16", QKV1: "nvfp4"}, skips=(HEAD, FC1_2)), backend="te")
    assert set(report.wrapped) == {"lm_head", "layers.1.mlp.fc1"}


def test_prefixed_what_if_stats_on_an_nvfp4_layer_are_allowed(fake_te_29, monkeypatch, nvdlfw_config, tmp_path) -> None:
    text = FP8_EVERYWHERE.replace("'.*'", r"'^model\.layers\.1\.self_attention\.qkv$'").replace(
        "[underflows%, scale_inv_min, scale_inv_max, mse]", "[mxfp8_underflows%, fp8_block_scaling_mse]"
    )
    session(monkeypatch, nvdlfw_config, tmp_path, text)
    report = apply_policy(te_model(), policy({QKV1: "nvfp4"}, skips=()), backend="te")
    assert report.precision_wrapped == {"layers.0.self_attention.qkv": "nvfp4"}


def test_module_names_set_by_te_or_nvdlfw_are_checked_too(fake_te_29, monkeypatch, nvdlfw_config, tmp_path) -> None:
    text = FP8_EVERYWHERE.replace("'.*'", "'^custom_head_name$'")
    session(monkeypatch, nvdlfw_config, tmp_path, text)
    model = te_model()
    model.lm_head.name = "custom_head_name"  # TE's name= / infer_and_assign_layer_names set `.name`
    with pytest.raises(DebugConfigConflict, match="custom_head_name"):
        apply_policy(model, policy({}), backend="te")


def test_no_session_no_check(fake_te_29) -> None:
    import nvdlfw_inspect.api as debug_api

    assert debug_api.DEBUG_MANAGER is None
    assert apply_policy(te_model(), policy({}), backend="te").wrapped == ["lm_head"]


def test_recipe_from_policy_builds_nvfp4(fake_te_29) -> None:
    recipe = recipe_from_policy(policy({}, recipe="nvfp4"))
    assert type(recipe).__name__ == "NVFP4BlockScaling" and recipe.fp4_format is fake_te.Format.E2M1
