"""Mixed-format runs are read per layer: an NVFP4 run whose last four blocks trained in MXFP8 through a precision
config (their LogFp8TensorStats lines carry TE's plain names and E8M0 scale bytes) never moves those blocks to NVFP4
on their own FP8 statistics, judges them with FP8's bands, and keeps their MXFP8 matchers in the Megatron config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.render.precision import precision_of
from tests.policy.render.megatron_loader import RecipeConfig
from tests.policy.render.test_megatron import run_script
from tests.policy.te_logs import LoggedLayer, e8m0_bytes, noisy, parse, write_tree

SUBS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
N = 40
METADATA = {"recipe": "NVFP4BlockScaling", "gpu": "B200", "te_version": "2.20.2"}


def _name(block: int, sub: str) -> str:
    return f"model.module.decoder.layers.{block}.{sub}"


def _nvfp4_layer(name: str, rng: np.random.Generator) -> LoggedLayer:
    series = {}
    for tensor, level in (("activation", 7.0), ("gradient", 7.2), ("weight", 10.3)):
        series[(tensor, "nvfp4_underflows%")] = noisy(level, N, rng)
        series[(tensor, "nvfp4_mse")] = noisy(1e-3, N, rng)
    return LoggedLayer(name, series)


def _mxfp8_layer(name: str, rng: np.random.Generator, underflow: float = 0.01) -> LoggedLayer:
    series = {}
    for tensor in ("activation", "gradient", "weight"):
        series[(tensor, "underflows%")] = noisy(underflow if tensor != "weight" else 0.01, N, rng)
        series[(tensor, "scale_inv_min")] = e8m0_bytes(N, rng, 112)
        series[(tensor, "scale_inv_max")] = e8m0_bytes(N, rng, 124)
        series[(tensor, "mse")] = noisy(1e-5, N, rng)
    return LoggedLayer(name, series)


def mixed_run(tmp_path: Path, failing_fp8: str | None = None):
    """8 Megatron blocks (TE layer_number 1-8): blocks 1-4 NVFP4, blocks 5-8 MXFP8 (a precision config)."""
    rng = np.random.default_rng(7)
    layers = []
    for block in range(1, 9):
        for sub in SUBS:
            name = _name(block, sub)
            if block <= 4:
                layers.append(_nvfp4_layer(name, rng))
            else:
                layers.append(_mxfp8_layer(name, rng, 3.0 if name == failing_fp8 else 0.01))
    write_tree(tmp_path, layers, np.arange(N) * 10)
    return parse(tmp_path, METADATA)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    run = mixed_run(tmp_path_factory.mktemp("mixed"))
    return run, recommend(run, options=RecommendOptions.from_metadata(run.metadata))


def test_each_layer_keeps_the_format_its_own_statistics_show(mixed) -> None:
    run, rec = mixed
    analysis = analyze(run)
    assert analysis.training.recipe == "nvfp4"
    own = analysis.training.layer_recipes
    assert set(own) == {_name(b, s) for b in range(5, 9) for s in SUBS}
    assert set(own.values()) == {"mxfp8"}
    assert any(note.startswith("Mixed-format run") and "16 layer(s) in mxfp8" in note for note in analysis.notes)
    rungs = {r.layer: r for r in rec.ladder.rungs}
    for block in range(5, 9):
        for sub in SUBS:
            rung = rungs[_name(block, sub)]
            assert rung.precision == "mxfp8", (rung.layer, rung.evidence)
            assert any("mxfp8 fits (training stats)" in e for e in rung.evidence)
            assert not any("NVFP4 fits" in e for e in rung.evidence)
    assert rungs[_name(1, SUBS[0])].precision == "nvfp4"
    assert rec.to_dict()["precision_ladder"]["counts"]["nvfp4"] == 16


def test_the_megatron_config_keeps_the_mxfp8_blocks_in_mxfp8(mixed, tmp_path: Path) -> None:
    _run, rec = mixed
    _text, args, path = run_script(rec.decision, tmp_path)
    assert args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] and path is not None
    config = RecipeConfig.from_yaml_file(path)
    for block in range(5, 9):
        for sub in SUBS:
            matched = config.match(f"decoder.layers.{block - 1}.{sub}")
            assert matched is not None and matched.precision == "mxfp8", (block, sub)
    assert config.match("decoder.layers.0.mlp.linear_fc1") is None  # runs at the outer NVFP4 recipe
    assert precision_of(rec.decision)[_name(6, "mlp.linear_fc1")] == "mxfp8"


def test_an_fp8_layer_of_an_nvfp4_run_is_judged_with_fp8_bands(tmp_path: Path) -> None:
    bad = _name(6, "mlp.linear_fc1")
    run = mixed_run(tmp_path, failing_fp8=bad)
    analysis = analyze(run)
    row = next(r for r in analysis.layers if r.name == bad)
    assert row.severity.value == "critical", row  # 3 % is critical for FP8 (2 %), healthy under NVFP4's 13 %
    assert any(bad in f.layers for f in analysis.findings if f.severity.value == "critical")
    rec = recommend(run, analysis, RecommendOptions.from_metadata(run.metadata))
    rung = next(r for r in rec.ladder.rungs if r.layer == bad)
    assert rung.precision != "nvfp4"
    assert bad in rec.decision.skip_layers or rung.precision in ("block", "current", "bf16")


def test_metadata_layer_recipes_name_the_format_when_the_stats_cannot(tmp_path: Path) -> None:
    """An FP8 layer of an NVFP4 run without scale statistics: only its bare names say FP8; the metadata says which."""
    rng = np.random.default_rng(3)
    layers = [_nvfp4_layer(_name(1, s), rng) for s in SUBS]
    plain = {(t, "underflows%"): noisy(0.02, N, rng) for t in ("activation", "gradient", "weight")}
    layers += [LoggedLayer(_name(2, s), dict(plain)) for s in SUBS]
    write_tree(tmp_path, layers, np.arange(N) * 10)
    bare = analyze(parse(tmp_path, METADATA))
    assert set(bare.training.layer_recipes.values()) == {"current"}  # assumed, and said so
    stated = analyze(parse(tmp_path, {**METADATA, "layer_recipes": {"*.layers.2.*": "blockwise"}}))
    assert set(stated.training.layer_recipes.values()) == {"block"}


def test_a_layer_without_statistics_keeps_the_recipe_the_metadata_says_it_trained_in(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    layers = [_nvfp4_layer(_name(b, s), rng) for b in (1, 2) for s in SUBS]
    layers += [LoggedLayer(_name(3, s), {}) for s in SUBS]  # quantized, no stats: MXFP8 per the precision config
    write_tree(tmp_path, layers, np.arange(N) * 10)
    run = parse(tmp_path, {**METADATA, "layer_recipes": {"*.layers.3.*": "MXFP8BlockScaling"}})
    rec = recommend(run, options=RecommendOptions.from_metadata(run.metadata))
    rungs = {r.layer: r for r in rec.ladder.rungs}
    assert rungs[_name(3, "mlp.linear_fc1")].precision == "mxfp8"
    assert precision_of(rec.decision)[_name(3, "mlp.linear_fc1")] == "mxfp8"
