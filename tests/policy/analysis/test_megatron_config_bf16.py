"""A Megatron precision config's BF16 and custom-factory configs, and `evaluation_recipe`, read the way Megatron-LM
reads them (megatron/core/extensions/transformer_engine.py `TEQuantizationParams.parse_from_config`,
`_get_fp8_autocast_for_quant_params`): a BF16 config trains its modules in BF16 (marked so where their logs show no
quantization: policy/analysis/config_bf16.py), a custom factory leaves the recipe to the logs (said), and
`evaluation_recipe` is checked but never the training precision."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.analysis.config_bf16 import with_config_bf16
from fp8_policy.policy.analysis.megatron_config import parse_precision_config
from fp8_policy.policy.recommend import recommend
from fp8_policy.policy.records import Precision
from fp8_policy.policy.render.precision import kept_bf16
from tests.policy.te_logs import LoggedLayer, noisy, parse, write_tree

SUBS = ("self_attention.linear_qkv", "mlp.linear_fc1")
N = 30
TYPE = {"transformer_engine_config_type": "TEQuantizationParams"}


def name(block: int, sub: str) -> str:
    return f"model.module.decoder.layers.{block}.{sub}"


def config(payload: dict, pattern: str = "*") -> dict:
    return {
        "configs": {"x": {**TYPE, **payload}},
        "matchers": {"m": {"type": "glob", "pattern": pattern, "config": "x", "enabled": True}},
    }


@pytest.mark.parametrize(
    "payload, detail",
    [
        ({}, "must have a training_recipe"),
        ({"training_recipe": {}, "extra": 1}, "key(s) extra not valid"),
        ({"training_recipe": {"fp8_quantization_recipe": "custom"}}, "requires custom_recipe_factory"),
        ({"training_recipe": {"fp8_quantization_recipe": "mxfp8", "fp8_format": "e5m2"}}, "is not e4m3 or hybrid"),
        ({"training_recipe": {}, "evaluation_recipe": {"fp8_quantization_recipe": "delayed"}}, "delayed scaling"),
    ],
)
def test_what_megatron_refuses_in_a_payload_is_refused(payload: dict, detail: str) -> None:
    with pytest.raises(ValueError, match=detail.replace("(", r"\(").replace(")", r"\)")):
        parse_precision_config(config(payload))


@pytest.mark.parametrize(
    "payload, recipe",
    [
        ({"training_recipe": {}}, "bf16"),
        ({"training_recipe": None}, "bf16"),
        ({"training_recipe": {"fp4_quantization_recipe": "nvfp4"}, "evaluation_recipe": {}}, "nvfp4"),  # eval only
        ({"training_recipe": {}, "evaluation_recipe": {"fp8_quantization_recipe": "mxfp8"}}, "bf16"),
        ({"training_recipe": {"fp8_quantization_recipe": "custom", "custom_recipe_factory": "pkg.f"}}, None),
        ({"training_recipe": {"fp8_quantization_recipe": "mxfp8", "override_quantized_autocast": False}}, None),
        ({"training_recipe": {"override_quantized_autocast": False}}, None),  # BF16 that never overrides
    ],
)
def test_each_payload_reads_as_its_training_recipe(payload: dict, recipe: str | None) -> None:
    assert parse_precision_config(config(payload)) == [("*", recipe)]


def run_with_bf16_tail(tmp_path: Path):
    """An MXFP8 Megatron run, blocks 1-6 quantized (plan lines and stats); blocks 7-8 logged without plan lines and
    without quantization statistics (LogTensorStats only: their modules ran BF16 under the config)."""
    rng = np.random.default_rng(2)
    layers = []
    for block in range(1, 9):
        for sub in SUBS:
            series = {(t, "underflows%"): noisy(0.05, N, rng) for t in ("activation", "gradient", "weight")}
            layers.append(LoggedLayer(name(block, sub), series))
    write_tree(tmp_path, layers, np.arange(N) * 10)
    run = parse(tmp_path, {"recipe": "MXFP8BlockScaling", "te_version": "2.20.2"})
    tail = {name(b, s) for b in (7, 8) for s in SUBS}
    infos = {
        n: replace(info, precision=Precision.UNKNOWN, has_fp8_stats=False) if n in tail else info
        for n, info in run.layers.items()
    }
    return replace(run, layers=infos), sorted(tail)


BF16_TAIL = config({"training_recipe": {}}, "decoder.layers.[67].*")


def test_a_bf16_config_marks_its_modules_as_trained_in_bf16(tmp_path: Path) -> None:
    run, tail = run_with_bf16_tail(tmp_path)
    plain = recommend(run)
    assert not set(tail) & set(kept_bf16(plain.decision))  # nothing says they ran in BF16
    stated = replace(run, metadata={**run.metadata, "megatron_precision_config": BF16_TAIL})
    rec = recommend(stated)
    assert set(tail) <= set(kept_bf16(rec.decision))
    analysis = analyze(stated)
    assert {lv.status.value for n, lv in analysis.layout.levels.items() if n in tail} == {"bf16"}
    (note,) = [n for n in analysis.notes if "trained in BF16 per the Megatron precision config" in n]
    assert "'decoder.layers.[67].*'" in note and "4 layer(s)" in note
    assert analyze(with_config_bf16(stated)).notes == analysis.notes  # marked once or twice: the same reading


def test_the_logs_win_over_a_bf16_config_and_a_custom_factory_is_said(tmp_path: Path) -> None:
    run, tail = run_with_bf16_tail(tmp_path)
    quantized = [n for n in run.layers if n not in tail]
    everything = replace(run, metadata={**run.metadata, "megatron_precision_config": config({"training_recipe": {}})})
    kept = set(kept_bf16(recommend(everything).decision))
    assert set(tail) <= kept and not kept & set(quantized)  # plan lines and stats say quantized: not marked
    custom = config({"training_recipe": {"fp8_quantization_recipe": "custom", "custom_recipe_factory": "pkg.f"}})
    factory = replace(run, metadata={**run.metadata, "megatron_precision_config": custom})
    analysis = analyze(factory)
    (note,) = [n for n in analysis.notes if "names no recipe for them" in n]
    assert f"{len(run.layers)} layer(s)" in note and "custom recipe factory" in note
    assert {analysis.training.layer_recipes.get(n) for n in quantized} <= {"mxfp8", None}
