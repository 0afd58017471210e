"""Loss sensitivity moves the ladder and the skip list where it should (policy/sensitivity/, recommend/ladder_sensitivity.py,
recommend/sensitive_plan.py): low underflow but high sensitivity leaves the cheap rung, high underflow but negligible
sensitivity keeps it, and every such layer says so in its evidence."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.records import RunData, Series
from fp8_policy.policy.sensitivity import SensitivityJudge, read_sensitivity
from tests.policy.frontier_runs import frontier_run, layer_name, noisy

PREFIX = {"nvfp4": "nvfp4", "mxfp8": "mxfp8", "current": "fp8_current_scaling", "block": "fp8_block_scaling"}
SENSITIVE = layer_name(2, "self_attention.linear_qkv")  # low underflow, high sensitivity
HARMLESS = layer_name(5, "mlp.linear_fc1")  # high underflow, negligible sensitivity
SensValue = Callable[[str, str, str], "float | None"]


def with_sensitivity(run: RunData, value: SensValue, precisions: tuple[str, ...]) -> RunData:
    """`run` plus `<layer>_<output|dgrad|wgrad>_<prefix>_sensitivity` series (value(layer, precision, gemm))."""
    series = list(run.series)
    iterations = np.arange(40, dtype=np.int64) * 10
    for layer in run.layers:
        for precision in precisions:
            for gemm, tensor in (("fprop", "output"), ("dgrad", "dgrad"), ("wgrad", "wgrad")):
                v = value(layer, precision, gemm)
                if v is None:
                    continue
                metric = split_metric_name(f"{layer}_{tensor}_{PREFIX[precision]}_sensitivity")
                assert metric is not None and metric.stat == "sensitivity"
                series.append(Series(0, metric, iterations, np.full(40, v)))
    return replace(run, series=series)


def answer(run: RunData):  # type: ignore[no-untyped-def]
    rec = recommend(run, None, RecommendOptions.from_metadata(run.metadata))
    return rec, json.loads(json.dumps(rec.to_dict()))


def nvfp4_run(sensitivity: bool = True) -> RunData:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if layer == HARMLESS and tensor == "gradient":
            return noisy(25.0, rng)  # fails NVFP4's 13 % critical band
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    def sens(layer: str, precision: str, gemm: str) -> float:
        base = 100.0 if precision == "nvfp4" else 8.0
        if layer == SENSITIVE and precision == "nvfp4":
            return 40 * base
        return base / 20 if layer == HARMLESS else base

    run = frontier_run(values, ("nvfp4_underflows%",), metadata={"recipe": "nvfp4", "gpu": "B200"})
    return with_sensitivity(run, sens, ("nvfp4", "mxfp8")) if sensitivity else run


def test_high_sensitivity_lifts_a_low_underflow_layer_and_negligible_keeps_a_high_underflow_one() -> None:
    _, plain = answer(nvfp4_run(sensitivity=False))
    assert plain["precision_ladder"]["layers"][SENSITIVE]["precision"] == "nvfp4"
    assert plain["precision_ladder"]["layers"][HARMLESS]["precision"] != "nvfp4"

    rec, data = answer(nvfp4_run())
    layers = data["precision_ladder"]["layers"]
    sensitive, harmless = layers[SENSITIVE], layers[HARMLESS]
    assert sensitive["precision"] == "mxfp8"  # lifted: MXFP8's own sensitivity is normal
    assert any("fails by loss sensitivity" in e and "high: >= 4x" in e for e in sensitive["evidence"])
    assert harmless["precision"] == "nvfp4"
    assert any("Kept at nvfp4 by loss sensitivity" in e and "negligible" in e for e in harmless["evidence"])
    assert harmless["confidence"] < 1.0
    # one verdict: neither is in the skip list or an override; every other layer stays NVFP4 and says its sensitivity
    assert data["fp8_skip_layers"] == [] and data["gemm_overrides"] == []
    others = [row for name, row in layers.items() if name not in (SENSITIVE, HARMLESS)]
    assert all(row["precision"] == "nvfp4" for row in others)
    assert all(any("Loss sensitivity at nvfp4" in e and "normal" in e for e in row["evidence"]) for row in others)
    assert {lp.layer: lp.precision for lp in rec.decision.layer_precisions}[SENSITIVE] == "mxfp8"


def fp8_run(harmless_nan: bool = False) -> RunData:
    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        if layer == HARMLESS and tensor == "gradient":
            v = noisy(5.0, rng)  # above FP8's 2 % critical band
            if harmless_nan:
                v[20:23] = np.nan
            return v
        return noisy(0.1, rng)

    def sens(layer: str, precision: str, gemm: str) -> float:
        if layer == SENSITIVE and gemm == "fprop":
            return 500.0
        return 0.5 if layer == HARMLESS else 10.0

    run = frontier_run(values, ("underflows%",), metadata={"recipe": "current", "gpu": "H100"})
    return with_sensitivity(run, sens, ("current",))


def test_on_fp8_a_sensitive_gemm_is_overridden_alone_and_a_harmless_underflow_stays() -> None:
    rec, data = answer(fp8_run())
    overrides = {o["layer"]: o for o in data["gemm_overrides"]}
    assert list(overrides) == [SENSITIVE] and overrides[SENSITIVE]["gemms"] == ["fprop"]
    assert "by its loss sensitivity" in overrides[SENSITIVE]["reason"]
    assert HARMLESS not in data["fp8_skip_layers"] and HARMLESS not in overrides
    harmless = data["precision_ladder"]["layers"][HARMLESS]
    assert harmless["precision"] == "current"
    assert any("Kept at current by loss sensitivity" in e for e in harmless["evidence"])


def test_negligible_sensitivity_never_keeps_a_layer_that_fails_for_more_than_underflow() -> None:
    _, data = answer(fp8_run(harmless_nan=True))
    overrides = {o["layer"]: o["gemms"] for o in data["gemm_overrides"]}
    assert overrides[HARMLESS] == ["dgrad", "wgrad"]  # the failing gradient's GEMMs leave FP8, as without sensitivity
    evidence = data["precision_ladder"]["layers"][HARMLESS]["evidence"]
    assert not any("Kept at" in e for e in evidence) and any("dgrad+wgrad kept in BF16" in e for e in evidence)


def test_the_table_averages_after_warm_up_over_ranks_and_needs_all_three_gemms() -> None:
    run = with_sensitivity(
        frontier_run(lambda *a: 0.1, ("underflows%",), n_blocks=2),
        lambda layer, precision, gemm: None if (gemm == "wgrad" and "fc2" in layer) else 2.0,
        ("mxfp8",),
    )
    fc1, fc2 = layer_name(0, "mlp.linear_fc1"), layer_name(0, "mlp.linear_fc2")
    metric = split_metric_name(f"{fc1}_output_mxfp8_sensitivity")
    assert metric is not None
    early = np.where(np.arange(40) < 10, 1000.0, 4.0)  # warm-up spike, then 4 on rank 1 (2 on rank 0)
    run = replace(run, series=[*run.series, Series(1, metric, np.arange(40, dtype=np.int64) * 10, early)])
    table = read_sensitivity(run, warmup_cut=100)
    assert table.gemm(fc1, "mxfp8", "fprop") == 3.0 and table.risk(fc1, "mxfp8") == 7.0
    assert table.risk(fc2, "mxfp8") is None and table.risk(fc2, "bf16") == 0.0 and table.risk(fc1, "nvfp4") is None
    assert read_sensitivity(run).gemm(fc1, "mxfp8", "fprop") > 100  # without a cut the spike counts
    verdict = SensitivityJudge(table).verdict(fc1, "mxfp8")
    assert verdict is not None and verdict.level == "normal" and verdict.median == 6.0


def test_too_few_peers_are_not_judged() -> None:
    run = with_sensitivity(
        frontier_run(lambda *a: 0.1, ("underflows%",), n_blocks=1),
        lambda layer, precision, gemm: 50.0 if "qkv" in layer else 1.0 if "fc1" in layer else None,
        ("current",),
    )
    verdict = SensitivityJudge(read_sensitivity(run)).verdict(layer_name(0, "self_attention.linear_qkv"), "current")
    assert verdict is not None and verdict.level == "unjudged" and "too few layers" in verdict.sentence


def test_an_underflow_override_is_widened_to_the_gemms_whose_sensitivity_is_high() -> None:
    """A head-like layer: its gradient underflows (dgrad+wgrad would leave FP8) and its forward GEMM is by far the most
    sensitive of the run; the override alone would leave that fprop in FP8."""
    head = layer_name(7, "mlp.linear_fc2")

    def values(layer, block, sub, tensor, key, rng):  # type: ignore[no-untyped-def]
        return noisy(5.0 if layer == head and tensor == "gradient" else 0.1, rng)

    def sens(fprop_of_head: float) -> SensValue:
        return lambda layer, precision, gemm: fprop_of_head if (layer == head and gemm == "fprop") else 10.0

    def run(fprop_of_head: float) -> RunData:
        plain = frontier_run(values, ("underflows%",), metadata={"recipe": "current", "gpu": "H100"})
        return with_sensitivity(plain, sens(fprop_of_head), ("current",))

    _, normal = answer(run(10.0))
    assert {o["layer"]: o["gemms"] for o in normal["gemm_overrides"]} == {head: ["dgrad", "wgrad"]}
    assert head not in normal["fp8_skip_layers"]

    _, data = answer(run(5000.0))
    assert head in data["fp8_skip_layers"] and head not in {o["layer"] for o in data["gemm_overrides"]}
    row = data["precision_ladder"]["layers"][head]
    assert row["precision"] == "bf16"
    said = [e for e in row["evidence"] if "Underflow already keeps dgrad+wgrad in BF16; fprop joins them" in e]
    assert said and "whole layer in BF16" in said[0]


def test_widen_adds_only_the_high_gemms_the_override_leaves_out() -> None:
    from fp8_policy.policy.recommend.sensitive_plan import SensitivePlan

    run = with_sensitivity(
        frontier_run(lambda *a: 0.1, ("underflows%",)),
        lambda layer, precision, gemm: 900.0 if (layer == SENSITIVE and gemm != "fprop") else 10.0,
        ("current",),
    )
    plan = SensitivePlan(SensitivityJudge(read_sensitivity(run)), "current", {})
    widened = plan.widen(SENSITIVE, ("dgrad",))
    assert widened is not None and widened.gemms == ("dgrad", "wgrad") and "wgrad joins them" in widened.note
    assert plan.widen(SENSITIVE, ("dgrad", "wgrad")) is None  # its high GEMMs are in the override already
    assert plan.widen(HARMLESS, ("dgrad", "wgrad")) is None  # not high
