"""The per-layer precision ladder (recommend/ladder.py) and the answer's one cost (recommend/cost.py `answer_cost`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fp8_policy.policy.recommend import RecommendOptions, fp8_param, recommend
from fp8_policy.policy.recommend.cost import speedup as ladder_speedup
from fp8_policy.policy.records import PRECISIONS, Precision
from fp8_policy.policy.render.precision import disagreements, precision_of
from tests.policy.frontier_runs import SUBS, frontier_run, layer_name, noisy

WHATIF = ("underflows%", "nvfp4_underflows%")
NVFP4_BAD = {layer_name(5, "mlp.linear_fc1"), layer_name(6, "mlp.linear_fc1")}  # NVFP4 what-if fails
FP8_BAD = layer_name(7, "mlp.linear_fc2")  # fails FP8 itself (two tensors)


def fp8_run_with_nvfp4_whatifs(gpu: str = "B200", **metadata: object):  # type: ignore[no-untyped-def]
    """Current-scaling FP8 run with the CPU collector's nvfp4_ what-ifs: 2 layers fail NVFP4, 1 fails FP8."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if key == "underflows%":
            return noisy(3.5 if layer == FP8_BAD and tensor != "weight" else 0.1, rng)
        if layer in NVFP4_BAD and tensor == "gradient":
            return noisy(21.0, rng)
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    return frontier_run(values, WHATIF, metadata={"recipe": "current", "gpu": gpu, **metadata})


def ladder(run):  # type: ignore[no-untyped-def]
    rec = recommend(run, None, RecommendOptions.from_metadata(run.metadata))
    return rec, json.loads(json.dumps(rec.to_dict()))


def test_an_fp8_run_learns_which_layers_can_go_nvfp4_which_stay_fp8_and_which_bf16() -> None:
    rec, data = ladder(fp8_run_with_nvfp4_whatifs())
    layers = data["precision_ladder"]["layers"]
    assert data["precision_ladder"]["counts"] == {**dict.fromkeys(PRECISIONS, 0), "nvfp4": 29, "current": 2, "bf16": 1}
    assert {name for name, rung in layers.items() if rung["precision"] == "current"} == NVFP4_BAD
    assert layers[FP8_BAD]["precision"] == "bf16" and FP8_BAD in data["fp8_skip_layers"]
    bad = layers[sorted(NVFP4_BAD)[0]]
    assert any("NVFP4 fails (nvfp4_ what-if): gradient" in e for e in bad["evidence"])
    good = layers[layer_name(0, "self_attention.linear_qkv")]
    assert good["precision"] == "nvfp4" and good["confidence"] == 1.0
    assert any("NVFP4 fits (nvfp4_ what-if)" in e for e in good["evidence"])
    assert {lp.layer: lp.precision for lp in rec.decision.layer_precisions}[FP8_BAD] == "bf16"
    assert "29 layer(s) can go NVFP4, 2 stay FP8 (2 current), 1 BF16" in "\n".join(rec.rationale)
    cost = data["precision_ladder"]["expected_cost"]
    assert cost["gemm_share"] == {"fp4": round(29 / 32, 4), "fp8": round(2 / 32, 4), "bf16": round(1 / 32, 4)}
    expected = 1.0 / (29 / 32 / 2.03 + 2 / 32 / 1.41 + 1 / 32)
    assert cost["gemm_speedup_vs_all_bf16"] == pytest.approx(expected, abs=1e-4)
    assert "speedups.html" in data["expected_cost"]["source"] and "source" not in cost  # one table, cited once
    assert cost["gemm_speedup_vs_all_bf16"] == data["expected_cost"]["gemm_speedup_vs_all_bf16"]  # one figure


def test_no_nvfp4_rung_without_nvfp4_evidence() -> None:
    run = frontier_run(lambda *a: 0.1, ("underflows%",), metadata={"recipe": "current", "gpu": "B200"})
    _, data = ladder(run)
    rungs = data["precision_ladder"]["layers"].values()
    assert {r["precision"] for r in rungs} == {"current"}
    assert all(any("NVFP4 not assessed" in e for e in r["evidence"]) for r in rungs)
    assert any("NVFP4 only with NVFP4 evidence" in a for a in data["precision_ladder"]["assumptions"])


def test_the_block16_dynamic_range_proxy_needs_all_three_tensors_within_e2m1_reach() -> None:
    key = "max_blockwise_dynamic_range_block_size_16_dims_1"

    def values(narrow: bool):  # type: ignore[no-untyped-def]
        return lambda layer, block, sub, tensor, k, rng: 0.1 if k == "underflows%" else (4.0 if narrow else 9.0)

    meta = {"recipe": "current", "gpu": "B200"}
    _, narrow = ladder(frontier_run(values(True), ("underflows%", key), metadata=meta))
    _, wide = ladder(frontier_run(values(False), ("underflows%", key), metadata=meta))
    rung = narrow["precision_ladder"]["layers"][layer_name(0, "mlp.linear_fc1")]
    assert rung["precision"] == "nvfp4" and rung["confidence"] <= 0.5 and "by proxy" in rung["evidence"][0]
    assert {r["precision"] for r in wide["precision_ladder"]["layers"].values()} == {"current"}


def test_an_nvfp4_run_learns_which_layers_to_lift() -> None:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if tensor == "gradient" and block == 7:
            return noisy(25.0, rng)
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    run = frontier_run(values, ("nvfp4_underflows%",), metadata={"fp8_recipe": "NVFP4BlockScaling"})
    rec, data = ladder(run)
    counts = data["precision_ladder"]["counts"]
    assert counts["nvfp4"] == 28 and counts["mxfp8"] == 4  # the GPU is inferred: NVFP4 trains on cc >= 10 only
    lifted = data["precision_ladder"]["layers"][layer_name(7, "mlp.linear_fc2")]
    assert lifted["precision"] == "mxfp8" and lifted["confidence"] < 1.0
    assert any("lifted to MXFP8" in e for e in lifted["evidence"])
    assert data["recipe"]["name"] == "nvfp4"
    assert "Precision ladder (NVFP4 run): 28 layer(s) stay NVFP4; lift 4 to MXFP8." in "\n".join(rec.rationale)
    # one verdict: the lifted layers leave the skip list, so every output runs them at MXFP8 too
    block7 = [layer_name(7, sub) for sub in SUBS]
    assert data["fp8_skip_layers"] == [] and rec.ladder is not None and list(rec.ladder.lifted) == block7
    assert lifted["confidence"] == 0.6 and any("Confirm with an mxfp8_ what-if" in e for e in lifted["evidence"])
    assert disagreements(rec.decision) == {} and {precision_of(rec.decision)[n] for n in block7} == {"mxfp8"}
    formats = data["formats"]
    assert all(not applied["bf16_layers"] for fmt, applied in formats.items() if fmt != "hydra")
    # bionemo's fp8_layers holds one recipe per block: block 7's MXFP8 rungs take it out (BF16, the safe side), said
    assert set(formats["hydra"]["bf16_layers"]) == set(block7) and "(mxfp8)" in formats["hydra"]["approximation"]
    text = "\n".join(rec.rationale)
    assert "Lift 4 layer(s) at or above 13% NVFP4 underflow to an FP8 rung instead of BF16" in text
    assert "nothing to skip or override" not in text


def nvfp4_block7_failing(nan: bool = False, mxfp8: float | None = None):  # type: ignore[no-untyped-def]
    """NVFP4 training, block 7's gradients at 25 % nvfp4_underflows% (optionally a NaN burst in one layer, and
    mxfp8_ what-ifs on block 7 at `mxfp8` %)."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if key == "mxfp8_underflows%":
            return noisy(mxfp8, rng) if mxfp8 is not None and block == 7 else None
        if tensor == "gradient" and block == 7:
            v = noisy(25.0, rng)
            if nan and sub == "mlp.linear_fc2":
                v[20:23] = np.nan
            return v
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    keys = ("nvfp4_underflows%", "mxfp8_underflows%") if mxfp8 is not None else ("nvfp4_underflows%",)
    return frontier_run(values, keys, metadata={"recipe": "nvfp4"})


def test_a_layer_failing_nvfp4_with_nan_is_not_lifted_and_every_view_says_bf16() -> None:
    rec, data = ladder(nvfp4_block7_failing(nan=True))
    bad = layer_name(7, "mlp.linear_fc2")
    rung = data["precision_ladder"]["layers"][bad]
    assert rung["precision"] == "bf16" and "not lifted to FP8: it logged NaN/inf" in rung["evidence"][-1]
    assert data["fp8_skip_layers"] == [bad] and rec.ladder is not None and bad not in rec.ladder.lifted
    assert len(rec.ladder.lifted) == 3 and disagreements(rec.decision) == {}
    assert all(bad in applied["bf16_layers"] for applied in data["formats"].values())


def test_an_mxfp8_what_if_that_fits_lifts_on_its_own_stats() -> None:
    rec, data = ladder(nvfp4_block7_failing(mxfp8=0.2))
    rung = data["precision_ladder"]["layers"][layer_name(7, "mlp.linear_fc1")]
    assert rung["precision"] == "mxfp8" and rung["confidence"] == 1.0
    assert "mxfp8 fits (mxfp8_ what-if)" in rung["evidence"][1] and not data["fp8_skip_layers"]
    assert disagreements(rec.decision) == {}


def test_an_mxfp8_what_if_that_fails_keeps_the_layer_in_bf16() -> None:
    rec, data = ladder(nvfp4_block7_failing(mxfp8=3.0))
    block7 = {layer_name(7, sub) for sub in SUBS}
    assert set(data["fp8_skip_layers"]) == block7 and rec.ladder is not None and not rec.ladder.lifted
    for name in block7:
        rung = data["precision_ladder"]["layers"][name]
        assert rung["precision"] == "bf16" and any("mxfp8 fails (mxfp8_ what-if)" in e for e in rung["evidence"])
    assert disagreements(rec.decision) == {}


def test_a_healthy_nvfp4_run_names_its_layers_nvfp4() -> None:
    run = frontier_run(
        lambda layer, block, sub, tensor, key, rng: noisy(10.0 if tensor == "weight" else 7.0, rng),
        ("nvfp4_underflows%",),
        metadata={"recipe": "nvfp4"},
    )
    rec, data = ladder(run)
    assert "all 32 NVFP4 layers stay below 13% underflow" in data["findings"][0]["summary"]
    assert "No NVFP4 layer reaches 13% underflow: nothing to skip or override." in rec.rationale


def test_a_weight_failing_its_16x16_band_under_nvfp4_training_is_lifted() -> None:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if tensor == "weight":
            return noisy(30.0 if block == 2 and "qkv" in sub else 10.0, rng)
        return noisy(7.0, rng)

    _, data = ladder(frontier_run(values, ("nvfp4_underflows%",), metadata={"recipe": "nvfp4"}))
    rung = data["precision_ladder"]["layers"][layer_name(2, "self_attention.linear_qkv")]
    assert rung["precision"] == "mxfp8" and "weight 30" in rung["evidence"][0]


def test_hopper_ladder_leaves_out_blackwell_rungs() -> None:
    _, data = ladder(fp8_run_with_nvfp4_whatifs(gpu="H100"))
    assert data["precision_ladder"]["counts"]["nvfp4"] == 0
    assert any("left out: nvfp4, mxfp8" in a for a in data["precision_ladder"]["assumptions"])


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [({}, False), ({"fp8_param_gather": True}, True), ({"fp8_param": "true"}, True), ({"fp8_param": False}, False)],
)
def test_fp8_param_comes_from_the_run_metadata(metadata: dict[str, object], expected: bool) -> None:
    assert fp8_param(metadata) is expected


def test_fp8_param_reaches_the_decision_and_the_json() -> None:
    rec, data = ladder(fp8_run_with_nvfp4_whatifs(fp8_param_gather=True))
    assert rec.decision.fp8_param is True and data["fp8_param"] is True


def test_ladder_speedups_are_per_gpu_from_te_figures() -> None:
    assert ladder_speedup("nvfp4", 10.0) == (2.03, "B300")
    assert ladder_speedup("current", 9.0) == (1.57, "H200")
    assert ladder_speedup("block", 10.0) == (1.41, "H200")  # not on the B300 page: the H200 figure, named
    assert ladder_speedup("bf16", None)[0] == 1.0
    assert np.isclose(ladder_speedup("mxfp8", 10.0)[0], 1.44)


def test_a_layer_with_a_gemm_override_stays_at_the_recipe_with_those_gemms_in_bf16() -> None:
    one = layer_name(3, "self_attention.linear_proj")

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        return noisy(3.0 if layer == one and tensor == "gradient" else 0.1, rng)

    rec, data = ladder(frontier_run(values, ("underflows%",), metadata={"recipe": "current", "gpu": "H100"}))
    assert [o.layer for o in rec.decision.gemm_overrides] == [one]
    rung = data["precision_ladder"]["layers"][one]
    assert rung["precision"] == "current" and "dgrad+wgrad kept in BF16" in rung["evidence"][-1]


def test_a_delayed_outer_recipe_on_blackwell_says_what_per_layer_rungs_cost_it() -> None:
    _, data = ladder(fp8_run_with_nvfp4_whatifs(recipe="delayed"))
    assert any("delayed scaling's amax reduction" in a for a in data["precision_ladder"]["assumptions"])
    _, current = ladder(fp8_run_with_nvfp4_whatifs())
    assert not any("amax reduction" in a for a in current["precision_ladder"]["assumptions"])


def test_a_bf16_run_with_nvfp4_whatifs_reports_them_but_keeps_every_layer_bf16() -> None:
    """Layers that ran in BF16 stay BF16 in every output, so the ladder does not offer a rung it cannot apply; the
    CPU collector's nvfp4_ what-if verdict is in the evidence."""

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        return noisy(25.0 if block == 3 and tensor == "gradient" else 7.0, rng)

    run = frontier_run(values, ("nvfp4_underflows%",), metadata={"gpu": "B200"}, precision=Precision.HIGH)
    rec, data = ladder(run)
    layers = data["precision_ladder"]["layers"]
    assert {r["precision"] for r in layers.values()} == {"bf16"} and disagreements(rec.decision) == {}
    assert set(precision_of(rec.decision).values()) == {"bf16"}
    assert "fits below NVFP4's critical bands. Not offered" in layers[layer_name(0, "mlp.linear_fc1")]["evidence"][0]
    assert "fails on gradient" in layers[layer_name(3, "mlp.linear_fc1")]["evidence"][0]


def nvfp4_fc1_and_head_failing():  # type: ignore[no-untyped-def]
    """The trial's NVFP4/B200 run: every fc1's gradient (21-22 %), one fc2 and the LM head (33 %) fail NVFP4: 4 of 9
    layers, but in two sublayer kinds and the head only."""
    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, MetricName, Series

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if tensor == "gradient" and (sub == "mlp.linear_fc1" or layer == layer_name(1, "mlp.linear_fc2")):
            return noisy(21.5 if sub == "mlp.linear_fc1" else 14.5, rng)
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    run = frontier_run(values, ("nvfp4_underflows%",), n_blocks=2, metadata={"fp8_recipe": "NVFP4BlockScaling"})
    head = "model.module.output_layer"
    iterations = run.series[0].iterations
    for tensor in ("activation", "gradient", "weight"):
        level = 33.0 if tensor == "gradient" else 7.0
        run.series.append(Series(0, MetricName(head, tensor, "underflows%", "nvfp4"), iterations, np.full(40, level)))
    run.layers[head] = LayerInfo(head, layer_structure(head), Precision.FP8, True)
    return run


def test_a_failure_of_some_layer_kinds_keeps_the_recipe_and_the_ladder_tells_the_same_story() -> None:
    """It used to be `uniform` (4 of 9 > 40 %) with a whole-model switch to MXFP8 'instead of a skip list' while the
    ladder kept 5 layers at NVFP4: now the recipe stays NVFP4 and the 4 failing layers are lifted to MXFP8."""
    rec, data = ladder(nvfp4_fc1_and_head_failing())
    assert "uniform" not in {f["pattern"] for f in data["findings"]}
    assert data["recipe"]["name"] == "nvfp4" and data["recipe"]["changed_from"] is None
    assert data["precision_ladder"]["counts"]["nvfp4"] == 5 and data["precision_ladder"]["counts"]["mxfp8"] == 4
    assert data["fp8_skip_layers"] == [] and len(data["precision_ladder"]["lifted"]) == 4
    assert "Precision ladder (NVFP4 run): 5 layer(s) stay NVFP4; lift 4 to MXFP8." in rec.rationale
