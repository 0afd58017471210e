"""The speed/risk frontier (recommend/frontier.py) and targets re-solved on it (recommend/target.py)."""

from __future__ import annotations

import json
import math

import pytest

from fp8_policy.policy.analysis.layout import Layout
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.recommend.cost import answer_cost
from fp8_policy.policy.recommend.frontier import rule_bf16_layers
from fp8_policy.policy.recommend.target import NoFrontier, TargetError, parse_target, retarget
from fp8_policy.policy.render.precision import disagreements
from tests.policy.frontier_runs import SUBS, frontier_run, layer_name, noisy
from tests.policy.recommend.test_sensitivity_ladder import SENSITIVE, nvfp4_run


def rec_of(run):  # type: ignore[no-untyped-def]
    return recommend(run, None, RecommendOptions.from_metadata(run.metadata))


def test_points_run_from_all_bf16_to_all_cheapest_with_speed_and_risk_rising() -> None:
    rec = rec_of(nvfp4_run())
    frontier = rec.frontier
    assert frontier is not None and rec.context is not None
    points = frontier.points
    assert (points[0].speedup, points[0].risk) == (1.0, 0.0) and set(frontier.assignment(0).values()) == {"bf16"}
    assert set(frontier.assignment(len(points) - 1).values()) == {"nvfp4"}  # NVFP4 is the cheapest rung on a B200
    assert all(
        a.speedup <= b.speedup + 1e-12 and a.risk <= b.risk + 1e-12 for a, b in zip(points, points[1:], strict=False)
    )
    assert all(len(p.moves) == 1 for p in points[1:])
    # one cost model: every point's speedup is the answer's cost figure for that assignment
    layout = rec.context.layout
    for index in (1, len(points) // 2, len(points) - 1):
        cost = answer_cost(layout, frontier.assignment(index), (), "nvfp4", "nvfp4", rec.context.dims, 10.0)
        assert cost["gemm_speedup_vs_all_bf16"] == pytest.approx(points[index].speedup, abs=1e-4)


def test_the_json_frontier_has_the_recommendation_and_the_rules_on_the_same_axes() -> None:
    rec = rec_of(nvfp4_run())
    data = json.loads(json.dumps(rec.to_dict()))
    frontier = data["frontier"]
    assert frontier["available"] and frontier["risk_unit"] == "nats per step"
    assert "Sum over every layer and GEMM" in frontier["predicted_risk_definition"]
    chosen = frontier["chosen"]
    assert chosen["source"] == "recommendation"
    assert chosen["speedup"] == data["precision_ladder"]["expected_cost"]["gemm_speedup_vs_all_bf16"]
    baselines = {b["name"]: b for b in frontier["baselines"]}
    assert list(baselines) == ["last_15pct", "last_n_nvidia", "first_last", "all_low"]
    block = lambda n: {layer_name(n, sub) for sub in SUBS}  # noqa: E731
    assert set(baselines["last_15pct"]["bf16_layers"]) == block(6) | block(7)  # ceil(0.15 * 8) = 2 blocks
    assert set(baselines["last_n_nvidia"]["bf16_layers"]) == block(7)  # 4 of 32 -> 1 of 8
    assert set(baselines["first_last"]["bf16_layers"]) == block(0) | block(7)
    assert baselines["all_low"]["bf16_layers"] == [] and baselines["all_low"]["speedup"] == 2.03
    # here the planted sensitive layer sits in block 2: no rule protects it, the recommendation does
    for rule in baselines.values():
        assert rule["predicted_risk"] > chosen["predicted_risk"]
    assert all(rule["speedup"] < chosen["speedup"] for rule in baselines.values() if rule["name"] != "all_low")


def test_rules_scale_with_depth_and_keep_heads() -> None:
    run = frontier_run(lambda *a: 0.1, ("underflows%",), n_blocks=32)
    rec = rec_of(run)
    assert rec.context is not None
    layout: Layout = rec.context.layout
    layers = list(layout.levels.values())
    count = lambda rule: len(rule_bf16_layers(rule, layout, layers)) // len(SUBS)  # noqa: E731
    assert (count("last_15pct"), count("last_n_nvidia"), count("first_last"), count("all_low")) == (5, 4, 2, 0)


@pytest.mark.parametrize("text", ["speedup:1.6", "speedup:2", "risk:0.01", "risk:0"])
def test_a_target_re_solves_on_the_frontier_and_every_view_follows(text: str) -> None:
    rec = rec_of(nvfp4_run())
    assert rec.context is not None and rec.frontier is not None
    target = parse_target(text)
    solved = retarget(rec, rec.context, target)
    data = json.loads(json.dumps(solved.to_dict()))
    info = data["target"]
    assert info["spec"] == text and info["met"] is True
    if target.kind == "speedup":
        assert info["speedup"] >= target.value
        least = info["point_predicted_risk"] * (1 - 1e-5)  # rounded to 6 digits in the JSON
        assert all(p.risk >= least for p in rec.frontier.points if p.speedup >= target.value)
    else:
        assert info["predicted_risk"] <= target.value
    assert data["frontier"]["chosen"]["source"] == "target"
    assert data["frontier"]["chosen"]["frontier_point"] == info["frontier_point"]
    ladder = data["precision_ladder"]["layers"]
    for change in info["layers_changed"]:
        assert ladder[change["layer"]]["precision"] == change["to"]
        assert any(f"by target {text}" in e for e in ladder[change["layer"]]["evidence"])
    bf16 = {name for name, row in ladder.items() if row["precision"] == "bf16"}
    assert set(data["fp8_skip_layers"]) == bf16  # one decision: the skip list is the point's BF16 layers
    assert disagreements(solved.decision) == {}
    assert data["precision_ladder"]["expected_cost"]["gemm_speedup_vs_all_bf16"] == info["speedup"]
    if text == "risk:0":
        assert bf16 == set(ladder) and info["speedup"] == 1.0


def test_an_unreachable_speedup_gives_the_fastest_point_and_says_so() -> None:
    rec = rec_of(nvfp4_run())
    assert rec.context is not None
    solved = retarget(rec, rec.context, parse_target("speedup:5"))
    assert solved.target is not None and solved.target["met"] is False
    assert solved.target["speedup"] == 2.03 and "not reachable" in solved.rationale[-1]
    assert any(c["layer"] == SENSITIVE and c["to"] == "nvfp4" for c in solved.target["layers_changed"])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "speedup",
        "speedup:",
        "speed:1.5",
        "speedup:abc",
        "speedup:nan",
        "speedup:inf",
        "speedup:-1",
        "risk:-0.1",
        "speedup:0.5",
        "speedup:11",
        "risk:1e7",
        "speedup:1.5;drop",
        "speedup: 1.5",
        "x" * 100,
        "risk:1e400",
    ],
)
def test_junk_targets_are_refused(text: str) -> None:
    with pytest.raises(TargetError):
        parse_target(text)


def test_without_sensitivity_the_rules_have_speed_but_no_risk_and_a_target_is_refused() -> None:
    run = frontier_run(lambda *args: noisy(7.0, args[-1]), ("nvfp4_underflows%",), metadata={"recipe": "nvfp4"})
    rec = rec_of(run)
    data = json.loads(json.dumps(rec.to_dict()))
    frontier = data["frontier"]
    assert frontier["available"] is False and frontier["points"] == [] and "no loss-sensitivity" in frontier["reason"]
    assert all(b["predicted_risk"] is None and b["speedup"] > 1 for b in frontier["baselines"])
    assert frontier["chosen"]["predicted_risk"] is None
    assert rec.context is not None
    with pytest.raises(NoFrontier):
        retarget(rec, rec.context, parse_target("speedup:1.5"))
    assert not math.isnan(frontier["chosen"]["speedup"])


def test_a_met_speedup_target_holds_as_applied_with_the_gemm_overrides_it_keeps() -> None:
    from tests.policy.recommend.test_sensitivity_ladder import fp8_run

    rec = rec_of(fp8_run())
    assert rec.context is not None and rec.frontier is not None and rec.decision.gemm_overrides
    for point in rec.frontier.points[1:-1]:  # a budget right at a point: the override it keeps must not undercut it
        value = float(f"{point.speedup:.6f}")
        solved = retarget(rec, rec.context, parse_target(f"speedup:{value}"))
        assert solved.target is not None and solved.target["met"], value
        assert solved.target["speedup"] >= round(value, 4) - 1e-4, (value, solved.target)
