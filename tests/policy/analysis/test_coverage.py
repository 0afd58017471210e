"""No silent drop: unassessed-but-high series, NaN/inf bursts, warning-band layers and the per-series verdicts."""

from __future__ import annotations

import numpy as np

from fp8_policy.policy.analysis import Pattern, Severity, analyze
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.synthetic import SCENARIOS
from tests.policy.analysis.factories import Spec, build_run, name, ramp
from tests.policy.analysis.synthetic_data import run_data

LAYER = name("hf", 3, "proj")


def test_a_climbing_gradient_with_a_stuck_scale_is_no_longer_healthy() -> None:
    # The gradient underflows% climbs to 12 % while scale_inv_min/max stay exactly 1.0: every point counts as
    # warm-up. It used to be dropped ("no point after warm-up") and the run was reported healthy.
    spec = Spec(
        family="hf",
        n_blocks=8,
        curves={(LAYER, "gradient"): ramp(0.1, 12.0)},
        scale_curves={(LAYER, "gradient"): np.ones(60)},
    )
    analysis = analyze(build_run(spec))

    assert "healthy" not in analysis.patterns()
    (finding,) = analysis.by_pattern(Pattern.UNASSESSED)
    assert finding.severity is Severity.SEVERE and finding.layers == (LAYER,)
    assert "stuck scale" in finding.summary and "scale_inv_min/max stay exactly 1.0" in finding.summary
    (ev,) = finding.evidence
    assert (ev.layer, ev.tensor, ev.stat) == (LAYER, "gradient", "underflows%") and ev.level > 4.0
    row = analysis.layer(LAYER)
    assert row.severity is Severity.SEVERE and row.verdict == "severe"
    verdict = next(v for v in row.series if (v.tensor, v.stat) == ("gradient", "underflows%"))
    assert not verdict.assessed and verdict.reason == "stuck scale" and verdict.severity is Severity.SEVERE
    assert analysis.findings[0].pattern is Pattern.UNASSESSED  # the worst finding: what every view opens on
    assert analysis.focus() == {
        "layer": LAYER,
        "tensor": "gradient",
        "stat": "underflows%",
        "severity": "severe",
        "pattern": "unassessed",
    }


def test_a_stuck_scale_with_low_values_is_not_a_finding_but_not_ok_either() -> None:
    spec = Spec(family="hf", n_blocks=8, scale_curves={(LAYER, "gradient"): np.ones(60)})
    analysis = analyze(build_run(spec))

    assert analysis.patterns() == {"healthy"}
    verdict = next(v for v in analysis.layer(LAYER).series if v.tensor == "gradient")
    assert not verdict.assessed and verdict.severity is Severity.OK


def test_a_nan_burst_is_a_finding_naming_layer_tensor_and_iterations() -> None:
    curve = np.full(60, 0.01)
    curve[30:50] = np.nan  # 20 logged iterations, 300..490
    spec = Spec(family="hf", n_blocks=8, curves={(LAYER, "activation"): curve})
    analysis = analyze(build_run(spec))

    (finding,) = analysis.by_pattern(Pattern.NON_FINITE)
    assert finding.severity is Severity.CRITICAL and finding.layers == (LAYER,)
    (ev,) = finding.evidence
    assert (ev.layer, ev.tensor, ev.stat, ev.count, ev.window) == (LAYER, "activation", "underflows%", 20, (300, 490))
    assert (
        LAYER in finding.summary
        and "activation" in finding.summary
        and "between iterations 300 and 490" in finding.summary
    )
    assert "check the loss" in finding.summary  # advice, not only a note
    assert analysis.layer(LAYER).verdict == "critical"


def test_a_single_nan_point_is_a_warning() -> None:
    curve = np.full(60, 0.01)
    curve[40] = np.inf
    analysis = analyze(build_run(Spec(family="hf", n_blocks=8, curves={(LAYER, "activation"): curve})))

    (finding,) = analysis.by_pattern(Pattern.NON_FINITE)
    assert finding.severity is Severity.WARNING and finding.evidence[0].onset == 400


def test_warning_band_layers_are_a_warning_finding_so_findings_and_table_agree() -> None:
    analysis = analyze(build_run(Spec(family="hf", n_blocks=8, noise=0.02, curves={(LAYER, "gradient"): 1.0})))

    assert analysis.layer(LAYER).severity is Severity.WARNING
    (finding,) = analysis.findings
    assert finding.pattern is Pattern.WARNING_BAND and finding.severity is Severity.WARNING
    assert finding.layers == (LAYER,)


def test_layers_without_fp8_data_are_not_assessed() -> None:
    spec = Spec(family="hf", n_blocks=8, bf16_blocks=(0,))
    analysis = analyze(build_run(spec))

    row = analysis.layer(name("hf", 0, "proj"))
    assert (row.status, row.verdict, row.series) == ("bf16", "n/a", ())
    assert analysis.layer(LAYER).verdict == "ok"
    assert row.to_dict()["verdict"] == "n/a"


def test_a_stuck_scale_layer_reaching_critical_is_kept_out_of_fp8_by_the_recommendation() -> None:
    spec = Spec(
        family="hf",
        n_blocks=8,
        curves={(LAYER, "gradient"): ramp(0.1, 12.0), (LAYER, "activation"): ramp(0.1, 12.0)},
        scale_curves={(LAYER, "gradient"): np.ones(60), (LAYER, "activation"): np.ones(60)},
    )
    run = build_run(spec)
    rec = recommend(run, analyze(run), RecommendOptions.from_metadata({}, {}))

    assert LAYER in rec.decision.skip_layers


def test_focus_is_the_worst_evidence_of_the_worst_finding() -> None:
    # head_only: the head's activation is critical (3.1 %) and its gradient severe (9.3 %); the view opens on the
    # gradient, the series that makes the finding severe (it opened on the first evidence, the activation).
    analysis = analyze(run_data(SCENARIOS["head_only"].run))

    assert analysis.findings[0].pattern is Pattern.HEAD_ONLY
    focus = analysis.focus()
    assert focus is not None and (focus["tensor"], focus["severity"]) == ("gradient", "severe")
