"""TE 2.20 training formats in the analysis (analysis/formats.py): NVFP4 bands, MXFP8's E8M0 scale_inv bytes,
impossible scale values, the training recipe read from metadata or from the stats, and TE's default recipe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy.analysis import Pattern, analyze
from fp8_policy.policy.analysis.formats import detect_training_recipe, format_view
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.recipe import te_default_recipe
from tests.policy.frontier_runs import frontier_run, noisy

NVFP4 = ("nvfp4_underflows%", "nvfp4_mse")
FP8 = ("underflows%", "scale_inv_min", "scale_inv_max")
LATE = (6, 7)


def nvfp4_run(late_gradient: float | None = None, **metadata: object):  # type: ignore[no-untyped-def]
    """An NVFP4 training run: healthy levels of the format (6-8 %, weights ~10 %), optionally the gradient of the
    last two blocks at `late_gradient` %."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if key == "nvfp4_mse":
            return 1e-4
        if tensor == "gradient" and late_gradient is not None and block in LATE:
            return noisy(late_gradient, rng)
        return noisy({"weight": 10.0}.get(tensor, rng.uniform(6.0, 8.0)), rng)

    return frontier_run(values, NVFP4, metadata=metadata)


def test_nvfp4_late_blocks_losing_gradient_nonzeros_are_flagged_and_nvfp4_is_kept() -> None:
    run = nvfp4_run(22.0, gpu="B200", fp8_recipe="NVFP4BlockScaling")
    analysis = analyze(run)
    assert "healthy" not in analysis.patterns() and "late_layers" in analysis.patterns()
    late = analysis.by_pattern("late_layers")[0]
    assert {int(name.split(".")[4]) for name in late.layers} == set(LATE)
    assert analysis.thresholds.critical == 13.0  # NVFP4's band, not FP8's 2 %
    rec = recommend(run, analysis)
    data = rec.to_dict()
    assert data["recipe"]["name"] == "nvfp4" and data["recipe"]["class"].endswith("NVFP4BlockScaling")
    assert "--fp4-format" in data["megatron"]["extra_args"] and "--fp8-format" not in data["megatron"]["extra_args"]
    assert "TE's default DelayedScaling" not in "\n".join(data["rationale"])
    assert "needs tensorwise" not in data["recipe"]["reason"]  # Megatron's first/last BF16 flags work with FP4


def test_a_healthy_nvfp4_run_is_healthy_with_nvfp4_bands_even_without_metadata() -> None:
    analysis = analyze(nvfp4_run())
    assert analysis.patterns() == {"healthy"}  # FP8's 2 % critical would call every layer failing (uniform)
    assert analysis.training.recipe == "nvfp4" and "LogNvfp4TensorStats" in analysis.training.source
    assert any("NVFP4 bands" in note for note in analysis.notes)
    assert any("16x16 tiles" in note for note in analysis.notes)  # weights left to the ladder, said so


def mxfp8_run(swing: bool):  # type: ignore[no-untyped-def]
    """MXFP8 training: bare scale_inv are E8M0 bytes; with `swing`, block 3 qkv activation min goes 118 <-> 128."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if key == "underflows%":
            return noisy(0.1, rng)
        byte = {"activation": 116.0, "weight": 114.0, "gradient": 105.0}[tensor] + (2 if key.endswith("max") else -6)
        if swing and block == 3 and "qkv" in sub and tensor == "activation" and key == "scale_inv_min":
            return np.where((np.arange(40) // 5) % 2 == 1, 128.0, 118.0)
        return np.full(40, byte)

    return frontier_run(values, FP8)


def test_mxfp8_e8m0_scale_swing_is_read_as_a_factor_of_two_to_the_tenth() -> None:
    analysis = analyze(mxfp8_run(swing=True))
    assert analysis.training.recipe == "mxfp8"
    found = analysis.by_pattern("scale_instability")
    assert found, analysis.patterns()  # read as linear bytes, 118 -> 128 is a 1.08x change and nothing is found
    evidence = found[0].evidence[0]
    assert "linear_qkv" in evidence.layer and evidence.ratio is not None and evidence.ratio >= 1000
    assert analysis.stats["censored_scale_fraction"] == 0.0  # exact powers of two, not 4-decimal prints
    assert analyze(mxfp8_run(swing=False)).patterns() == {"healthy"}


def test_impossible_scale_values_are_excluded_with_a_note_and_change_nothing() -> None:
    def values(garbage: bool):  # type: ignore[no-untyped-def]
        def inner(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
            if key == "underflows%":
                return 0.1
            if key.startswith("fp8_block_scaling_"):
                out = np.full(40, 0.0039)
                if garbage and block == 0 and "fc1" in sub and tensor == "weight" and key.endswith("min"):
                    out[0], out[5] = -95602196480.0, np.nan
                return out
            return 0.0004

        return inner

    keys = (*FP8, "fp8_block_scaling_scale_inv_min", "fp8_block_scaling_scale_inv_max")
    clean = analyze(frontier_run(values(False), keys, metadata={"recipe": "current"}))
    dirty_run = frontier_run(values(True), keys, metadata={"recipe": "current"})
    dirty = analyze(dirty_run)
    assert dirty.patterns() == clean.patterns() == {"healthy"}
    note = next(n for n in dirty.notes if "impossible scale_inv" in n)
    assert "model.module.decoder.layers.0.mlp.linear_fc1_weight_fp8_block_scaling_scale_inv_min" in note
    assert "-9.56022e+10 (negative)" in note and "non-finite what-if scale" in note
    view, training = format_view(dirty_run)
    assert len(training.excluded) == 2 and sum(s.values.size for s in view.series) == (
        sum(s.values.size for s in dirty_run.series) - 2
    )


def test_training_recipe_from_the_stats_present() -> None:
    plain = frontier_run(lambda *a: 0.1, ("underflows%",))
    assert detect_training_recipe(plain) == (None, "")
    overflow = frontier_run(lambda *a: 0.0, ("underflows%", "overflows%"))
    assert detect_training_recipe(overflow)[0] == "delayed"
    columnwise = frontier_run(lambda *a: 0.0021, ("underflows%", "scale_inv_min_columnwise", "scale_inv_max"))
    assert detect_training_recipe(columnwise)[0] == "block"
    assert detect_training_recipe(mxfp8_run(swing=False))[0] == "mxfp8"
    assert detect_training_recipe(nvfp4_run())[0] == "nvfp4"


def test_unknown_recipe_follows_te_get_default_fp8_recipe_for_the_gpu() -> None:
    assert te_default_recipe(10.0)[0] == "mxfp8"  # B200
    assert te_default_recipe(12.0)[0] == "current"  # RTX 5090: MXFP8 unsupported on 12.x
    assert te_default_recipe(9.0)[0] == "delayed"  # H100
    assert "Hopper assumed" in te_default_recipe(None)[1]
    run = frontier_run(lambda *a: 0.1, ("underflows%",), metadata={"gpu": "B200"})
    rec = recommend(run, None, RecommendOptions.from_metadata(run.metadata))
    text = "\n".join(rec.rationale)
    assert rec.decision.recipe.name == "mxfp8"
    assert "get_default_fp8_recipe" in text and "assumed TE's default for compute capability 10" in text


def test_a_request_may_name_nvfp4_as_the_current_recipe() -> None:
    options = RecommendOptions.from_metadata(None, {"current_recipe": "NVFP4BlockScaling"})
    assert options.current_recipe == "nvfp4"
    with pytest.raises(ValueError, match="mxfp8 or nvfp4"):
        RecommendOptions.from_metadata(None, {"current_recipe": "fp4_magic"})


def test_te_default_is_not_assumed_when_its_own_whatifs_are_logged() -> None:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        return noisy(3.0 if tensor == "gradient" and key == "underflows%" else 0.2, rng)

    run = frontier_run(values, ("underflows%", "mxfp8_underflows%"))  # no metadata: the GPU is inferred (>= 10)
    rec = recommend(run)
    text = "\n".join(rec.rationale)
    assert "not TE's default MXFP8 block scaling" in text and "DelayedScaling assumed" in text
    assert rec.decision.recipe.name == "mxfp8" and not rec.decision.gemm_overrides  # uniform -> the what-if recipe


def test_mxfp8_scales_that_are_not_bytes_are_read_as_linear_in_one_note() -> None:
    keys = ("underflows%", "mxfp8_scale_inv_min", "mxfp8_scale_inv_max")
    run = frontier_run(lambda *a: 0.1 if a[4] == "underflows%" else 0.0039, keys, metadata={"recipe": "current"})
    analysis = analyze(run)
    notes = [n for n in analysis.notes if "not E8M0 bytes" in n]
    assert len(notes) == 1 and "and 191 more" in notes[0]
    assert analysis.training.e8m0_series == 0


PARITY = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "te_h100_parity" / "whatif"


@pytest.mark.skipif(not PARITY.is_dir(), reason="TE H100 parity fixture not present")
def test_te_h100_block_whatif_garbage_is_left_out_and_named() -> None:
    from bench.eval_ingest import parse_tree

    analysis = analyze(parse_tree(PARITY))
    assert analysis.training.to_dict()["excluded_scale_points"] == 1
    note = next(n for n in analysis.notes if "impossible scale_inv" in n)
    assert "model.fc1_weight_fp8_block_scaling_scale_inv_min rank 0 iteration 0 = -9.56022e+10 (negative)" in note
    assert "scale_instability" not in analysis.patterns()


def _mxfp8_min_zero_run(tmp_path, te_version: str | None, nvfp4: bool = False):
    """Megatron names; MXFP8 layers whose scale_inv_min is 0 at every point, as TE before 2.17 logged it (TE #3041),
    and scale_inv_max E8M0 bytes; with `nvfp4`, an NVFP4 layer whose nvfp4_scale_inv_min is 0 as well."""
    import numpy as np

    from tests.policy.te_logs import LoggedLayer, e8m0_bytes, noisy, parse, write_tree

    rng = np.random.default_rng(11)
    n = 40
    layers = []
    for block in range(1, 5):
        series = {}
        for tensor in ("activation", "gradient", "weight"):
            series[(tensor, "underflows%")] = noisy(0.05, n, rng)
            series[(tensor, "scale_inv_min")] = np.zeros(n)
            series[(tensor, "scale_inv_max")] = e8m0_bytes(n, rng, 124)
        layers.append(LoggedLayer(f"model.module.decoder.layers.{block}.mlp.linear_fc1", series))
    if nvfp4:
        fp4 = {(t, "nvfp4_underflows%"): noisy(7.0, n, rng) for t in ("activation", "gradient")}
        fp4[("activation", "nvfp4_scale_inv_min")] = np.zeros(n)
        fp4[("activation", "nvfp4_scale_inv_max")] = noisy(0.002, n, rng)
        layers.append(LoggedLayer("model.module.decoder.layers.5.mlp.linear_fc1", fp4))
    write_tree(tmp_path, layers, np.arange(n) * 10)
    meta = {"recipe": "MXFP8BlockScaling", "gpu": "B200"}
    return parse(tmp_path, {**meta, "te_version": te_version} if te_version else meta)


@pytest.mark.parametrize("te_version", [None, "2.16.1"])
def test_scale_inv_min_zero_of_a_te_before_2_17_is_a_te_bug_not_a_signal(tmp_path, te_version) -> None:
    analysis = analyze(_mxfp8_min_zero_run(tmp_path, te_version, nvfp4=True))
    assert analysis.training.te_scale_inv_min_zeros == 4 * 3 * 40 + 40
    assert not analysis.training.excluded  # counted once, not one named point each
    note = next(n for n in analysis.notes if "TE #3041" in n)
    assert "13 MXFP8/NVFP4 series" in note and "not a signal" in note
    assert not analysis.by_pattern(Pattern.SCALE_INSTABILITY)
    assert [f.pattern for f in analysis.findings] == [Pattern.HEALTHY]


def test_with_a_fixed_te_a_zero_is_still_no_scale(tmp_path) -> None:
    analysis = analyze(_mxfp8_min_zero_run(tmp_path, "2.20.2"))
    assert analysis.training.te_scale_inv_min_zeros == 0
    assert len(analysis.training.excluded) == 4 * 3 * 40  # an E8M0 byte 0 is no scale: named, left out
    assert not any("TE #3041" in n for n in analysis.notes)
    assert not analysis.by_pattern(Pattern.SCALE_INSTABILITY)
