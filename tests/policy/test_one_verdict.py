"""One verdict everywhere: findings, the layer table, heatmap boxes, focus, gate and the recommendation agree.

A property over generated runs: every planted scenario (all patterns), 1-4 ranks, the training recipe given or
not, what-if / overflow stats, and the two series kinds the assessment cannot use as such (a scale_inv stuck at
exactly 1.0 under a climbing underflow, a NaN/inf burst). Bounded (`fuzz`) so that it runs in well under a minute.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fp8_policy.client.gate import FAIL_ON, evaluate, render_markdown, severity_rank
from fp8_policy.policy.analysis import Analysis, Severity, analyze
from fp8_policy.policy.heatmap import build_matrix, summarize, verdict_severities
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.records import QUANTIZED_TENSORS, RunData, Series
from fp8_policy.policy.synthetic import SCENARIOS
from tests.policy.analysis.synthetic_data import run_data
from tests.support.fuzz import fuzz

RECIPES = (None, "delayed", "current", "mxfp8", "block")
EXTRA_STATS = ((), ("mxfp8_underflows%",), ("overflows%",))


@st.composite
def generated_runs(draw: st.DrawFn) -> RunData:
    case = SCENARIOS[draw(st.sampled_from(sorted(SCENARIOS)))]
    ranks = case.run.ranks if case.truth.outlier_ranks else draw(st.integers(1, 3))
    run = replace(case.run, ranks=ranks, seed=draw(st.integers(0, 50)), extra_stats=draw(st.sampled_from(EXTRA_STATS)))
    recipe = draw(st.sampled_from(RECIPES))
    data = run_data(run, {"recipe": recipe} if recipe else {})
    quantized = [k for k, s in enumerate(data.series) if s.metric.tensor in QUANTIZED_TENSORS]
    if draw(st.booleans()):  # a scale stuck at exactly 1.0 under a climbing underflow (a whole layer/tensor)
        pick = data.series[draw(st.sampled_from(quantized))].metric
        data = _stuck_scale(data, pick.layer, pick.tensor, draw(st.floats(0.1, 15.0)))
    if draw(st.booleans()):  # one layer's tensor on a plateau, often in the warning band
        pick = data.series[draw(st.sampled_from(quantized))].metric
        data = _plateau(data, pick.layer, pick.tensor, draw(st.sampled_from([0.7, 1.5, 2.5, 5.0])))
    if draw(st.booleans()):  # a NaN/inf burst in one series
        k = draw(st.sampled_from(quantized))
        start, length = draw(st.integers(0, 30)), draw(st.integers(1, 20))
        data = _burst(data, k, start, length, draw(st.sampled_from([np.nan, np.inf])))
    return data


def _stuck_scale(data: RunData, layer: str, tensor: str, top: float) -> RunData:
    series = []
    for s in data.series:
        m = s.metric
        if (m.layer, m.tensor, m.recipe, m.columnwise) == (layer, tensor, None, False):
            if m.stat in ("scale_inv_min", "scale_inv_max"):
                s = Series(s.rank, m, s.iterations, np.ones_like(s.values))
            elif m.stat == "underflows%":
                s = Series(s.rank, m, s.iterations, np.round(np.linspace(0.05, top, s.values.size), 4))
        series.append(s)
    return RunData(layers=data.layers, series=series, metadata=data.metadata)


def _plateau(data: RunData, layer: str, tensor: str, level: float) -> RunData:
    series = [
        Series(s.rank, s.metric, s.iterations, np.full_like(s.values, level))
        if (s.metric.layer, s.metric.tensor, s.metric.stat, s.metric.recipe) == (layer, tensor, "underflows%", None)
        else s
        for s in data.series
    ]
    return RunData(layers=data.layers, series=series, metadata=data.metadata)


def _burst(data: RunData, k: int, start: int, length: int, value: float) -> RunData:
    series = list(data.series)
    s = series[k]
    values = s.values.copy()
    values[start : start + length] = value
    series[k] = Series(s.rank, s.metric, s.iterations, values)
    return RunData(layers=data.layers, series=series, metadata=data.metadata)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_planted_scenario_tells_one_story(scenario: str) -> None:
    """Each planted pattern as generated (rank outliers included: the heatmap is the max over ranks, its boxes
    are the analysis's verdicts), so every pattern is checked on every run of the suite."""
    assert_one_verdict(run_data(SCENARIOS[scenario].run))


@fuzz(25)
@given(data=generated_runs())
def test_every_view_derives_from_one_assessment(data: RunData) -> None:
    assert_one_verdict(data)


def assert_one_verdict(data: RunData) -> None:
    analysis = analyze(data)
    body = analysis.to_dict()

    _findings_cover_the_table(analysis)
    _gate_agrees(body)
    _not_assessed_is_never_ok(analysis)
    _heatmap_boxes_are_the_verdicts(data, analysis, body)
    _focus_is_the_worst_finding(data, analysis, body)
    _recommendation_keeps_critical_layers_out_of_fp8(data, analysis)


def _findings_cover_the_table(analysis: Analysis) -> None:
    covered: dict[str, Severity] = {}
    for finding in analysis.findings:
        for name in finding.layers:
            covered[name] = max(covered.get(name, Severity.OK), finding.severity)
    for row in analysis.layers:
        assert row.severity <= covered.get(row.name, Severity.OK), (row.name, row.severity, covered.get(row.name))
        assert row.severity == max((v.severity for v in row.series), default=Severity.OK)
    if analysis.patterns() == {"healthy"}:
        assert all(row.severity is Severity.OK for row in analysis.layers)


def _gate_agrees(body: dict) -> None:
    worst_finding = max((severity_rank(f["severity"]) for f in body["findings"]), default=0)
    worst_row = max((severity_rank(r["verdict"]) for r in body["layers"]), default=0)
    assert worst_row <= worst_finding
    for bar in FAIL_ON:
        result = evaluate({"id": 1, "name": "x"}, body, {}, bar)
        failing = [f for f in body["findings"] if severity_rank(f["severity"]) >= severity_rank(bar)]
        assert result.passed is (not failing) is (worst_finding < severity_rank(bar))
        markdown = render_markdown(result)
        assert f"): {len(failing)} finding(s) at or above **{bar}**" in markdown
        assert markdown.startswith("## FP8 policy gate: " + ("PASS" if result.passed else "FAIL"))


def _not_assessed_is_never_ok(analysis: Analysis) -> None:
    for row in analysis.layers:
        if row.status != "fp8":
            assert row.verdict == "n/a" and row.severity is Severity.OK
        if row.verdict == "n/a":
            assert not any(v.assessed for v in row.series)


def _heatmap_boxes_are_the_verdicts(data: RunData, analysis: Analysis, body: dict) -> None:
    layers = list(data.layers.values())
    prefix = body["stats"].get("stat_prefix")
    for tensor in QUANTIZED_TENSORS:
        stat_key = f"{prefix}_underflows%" if prefix else "underflows%"
        series = [s for s in data.series if s.metric.tensor == tensor and s.metric.stat_key == stat_key]
        if not series:
            continue
        matrix = build_matrix(layers, series)
        severities = verdict_severities(body["layers"], tensor, stat_key, prefix)
        summary = summarize(matrix, analysis.thresholds, percent=True, boxes=len(matrix.rows), severities=severities)
        boxed = {matrix.rows[k].layer for k in summary.boxed}
        expected = {
            row.name
            for row in analysis.layers
            if any(
                v.tensor == tensor and v.stat == "underflows%" and v.severity >= Severity.CRITICAL for v in row.series
            )
        }
        assert boxed == expected, (tensor, sorted(boxed ^ expected))
        assert summary.critical == len(expected)


def _focus_is_the_worst_finding(data: RunData, analysis: Analysis, body: dict) -> None:
    focus = body["focus"]
    if focus is None:
        assert not any(ev.tensor in QUANTIZED_TENSORS for f in analysis.findings for ev in f.evidence)
        return
    first = next(f for f in analysis.findings if any(ev.tensor in QUANTIZED_TENSORS for ev in f.evidence))
    assert (focus["severity"], focus["pattern"]) == (first.severity.value, first.pattern.value)
    assert first.severity == analysis.findings[0].severity or first is analysis.findings[0] or focus["severity"]
    assert any(
        (s.metric.layer, s.metric.tensor, s.metric.stat_key) == (focus["layer"], focus["tensor"], focus["stat"])
        for s in data.series
    ), focus


def _recommendation_keeps_critical_layers_out_of_fp8(data: RunData, analysis: Analysis) -> None:
    rec = recommend(data, analysis, RecommendOptions.from_metadata(data.metadata, {})).to_dict()
    if rec["recipe"]["changed_from"] is not None or rec["recipe"]["evidence"].startswith("logged stats: uniform"):
        return  # levels under the new recipe decide (what-if), or the new recipe is to be measured first
    kept_out = {*rec["fp8_skip_layers"], *(o["layer"] for o in rec["gemm_overrides"])}
    for row in analysis.layers:
        failing = [
            v
            for v in row.series
            if v.stat == "underflows%" and v.severity >= Severity.CRITICAL and v.reason != "non-finite"
        ]
        if failing and row.status == "fp8":
            assert row.name in kept_out, (row.name, failing)
