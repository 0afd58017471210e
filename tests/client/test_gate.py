"""The gate rule (fail at or above `--fail-on`) and its markdown summary."""

from __future__ import annotations

import pytest

from fp8_policy.client.gate import evaluate, render_markdown, severity_rank, worst_layers
from tests.client.fakes import ANALYSIS, HEAD, RECOMMENDATION, RUN, finding, layer


def test_severities_order_by_badness() -> None:
    assert [severity_rank(s) for s in ("ok", "warning", "critical", "severe", "weird")] == [0, 1, 2, 3, 0]


@pytest.mark.parametrize(
    ("findings", "fail_on", "passed"),
    [
        ([finding("healthy", "ok")], "warning", True),
        ([finding("rising_trend", "warning")], "critical", True),
        ([finding("rising_trend", "warning")], "warning", False),
        ([finding("u_shape", "critical")], "critical", False),
        ([finding("u_shape", "critical")], "severe", True),
        ([finding("head_only", "severe")], "severe", False),
    ],
)
def test_a_run_fails_when_a_finding_reaches_the_bar(findings: list[dict], fail_on: str, passed: bool) -> None:
    result = evaluate(RUN, {"findings": findings, "layers": []}, {}, fail_on)

    assert result.passed is passed
    assert len(result.failing) == (0 if passed else 1)


def test_unknown_bar_is_rejected() -> None:
    with pytest.raises(ValueError, match="fail_on must be one of warning, critical, severe"):
        evaluate(RUN, ANALYSIS, RECOMMENDATION, "ok")


def test_worst_layers_are_the_flagged_ones_worst_first() -> None:
    assert [row["name"] for row in worst_layers(ANALYSIS["layers"])] == [HEAD, "model.x.3.fc1"]


@pytest.mark.parametrize(
    ("slowdown", "shown"), [(-0.0, "±0%"), (0.0, "±0%"), (-0.25, "-0.25%"), (1.41, "+1.41%"), (None, "n/a")]
)
def test_the_gemm_time_change_has_one_sign(slowdown: float | None, shown: str) -> None:
    recommendation = {**RECOMMENDATION, "expected_cost": {**RECOMMENDATION["expected_cost"]}}
    recommendation["expected_cost"]["gemm_slowdown_vs_all_fp8_pct"] = slowdown

    markdown = render_markdown(evaluate(RUN, ANALYSIS, recommendation, "critical"))

    assert f"GEMM time {shown} vs every layer at" in markdown
    assert "+-" not in markdown


def test_markdown_shows_verdict_findings_worst_layers_and_the_change() -> None:
    markdown = render_markdown(evaluate(RUN, ANALYSIS, RECOMMENDATION, "critical"))

    assert markdown.startswith(
        "## FP8 policy gate: FAIL\n\nrun 7 `esm2-650m` (project `esm2`): 1 finding(s) at or above **critical** "
        "(1 layer(s)).\n"
    )
    assert "| severe | head_only | `model.lm_head` | head_only \\| summary |" in markdown
    assert "| `model.lm_head` | severe | gradient underflows% | 9.25 | head_only |" in markdown
    assert "- Keep in BF16 (`fp8_skip_layers`, 1): `model.lm_head`" in markdown
    assert "- GEMM override `model.x.3.fc1`: wgrad in BF16 (gradient only)" in markdown
    assert "- Recipe: **delayed** (`transformer_engine.common.recipe.DelayedScaling`): keep delayed" in markdown
    assert (
        "- Expected cost: GEMM FLOPs 2.04% BF16: 1.67x faster than all-BF16 GEMMs, GEMM time +1.41% vs every layer at"
        in markdown
    )
    assert "- Confidence: 0.8" in markdown
    assert markdown.endswith(
        "Get it as a config: `fp8-policy recommend 7 --format te-yaml|megatron|hydra|torchao -o FILE`\n"
    )


def test_markdown_of_a_passing_run_without_flagged_layers() -> None:
    analysis = {"findings": [finding("healthy", "ok")], "layers": [layer("model.x.1.fc1", "ok", 0.2)]}

    markdown = render_markdown(evaluate(RUN, analysis, {"fp8_skip_layers": []}, "critical"))

    assert markdown.startswith("## FP8 policy gate: PASS\n")
    assert "No layer above `ok`." in markdown
    assert "- Keep in BF16 (`fp8_skip_layers`, 0): none" in markdown


def test_long_layer_lists_are_shortened() -> None:
    names = [f"model.x.{i}.fc1" for i in range(10)]
    markdown = render_markdown(evaluate(RUN, {"findings": [finding("uniform", "critical", names)]}, {}, "critical"))

    assert "`model.x.5.fc1` (+4 more) |" in markdown


def test_warning_band_layers_fail_a_warning_bar_through_their_finding_and_the_count_says_so() -> None:
    # The analysis names warning-band layers in a `warning_band` finding; the gate decides on findings alone, so
    # "0 finding(s) at or above warning" never comes with a FAIL (it did on the real bionemo Llama 3 logs).
    analysis = {
        "findings": [finding("warning_band", "warning", ["model.x.3.fc1"])],
        "layers": [layer("model.x.3.fc1", "warning", 1.2)],
    }
    result = evaluate(RUN, analysis, {}, "warning")
    assert (result.passed, len(result.failing), result.failing_layers) == (False, 1, ["model.x.3.fc1"])
    assert "1 finding(s) at or above **warning** (1 layer(s))." in render_markdown(result)
    assert evaluate(RUN, analysis, {}, "critical").passed is True


@pytest.mark.parametrize("fail_on", ["warning", "critical", "severe"])
def test_the_verdict_is_the_count_of_findings_it_prints(fail_on: str) -> None:
    analysis = {"findings": [finding("healthy", "ok")], "layers": [layer("model.x.3.fc1", "warning", 1.2)]}
    result = evaluate(RUN, analysis, {}, fail_on)
    markdown = render_markdown(result)

    assert result.passed is (len(result.failing) == 0)
    assert markdown.startswith("## FP8 policy gate: PASS") is result.passed
    assert f"{len(result.failing)} finding(s) at or above **{fail_on}**" in markdown


def test_rows_that_were_not_assessed_are_never_worst_layers() -> None:
    rows = [{**layer("model.x.1.fc1", "ok", None), "verdict": "n/a"}, layer("model.x.2.fc1", "warning", 1.0)]
    assert [row["name"] for row in worst_layers(rows)] == ["model.x.2.fc1"]
