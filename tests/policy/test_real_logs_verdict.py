"""The real bionemo logs: recipe advice backed by evidence (ESM-2) and a gate whose count is its verdict (Llama 3)."""

from __future__ import annotations

import pytest

from bench.eval_ingest import parse_tree
from fp8_policy.client.gate import evaluate, render_markdown
from fp8_policy.policy.analysis import Analysis, analyze
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.records import RunData
from tests.support.archives import ESM2, LLAMA3


@pytest.fixture(scope="module")
def esm2() -> tuple[RunData, Analysis]:
    data = parse_tree(ESM2)
    return data, analyze(data)


@pytest.fixture(scope="module")
def llama3() -> tuple[RunData, Analysis]:
    data = parse_tree(LLAMA3)
    return data, analyze(data)


def test_esm2_gemm_override_keeps_delayed_scaling_and_says_why(esm2: tuple[RunData, Analysis]) -> None:
    # It used to switch delayed -> current (+6 % GEMM time, confidence 0.59) on a Megatron-only rule, with no
    # logged what-if stats behind it. The TE debug YAML's DisableFP8GEMM works under delayed scaling.
    data, analysis = esm2
    rec = recommend(data, analysis, RecommendOptions.from_metadata(data.metadata, {}))
    body = rec.to_dict()

    assert len(body["gemm_overrides"]) == 1 and body["fp8_skip_layers"] == []
    recipe = body["recipe"]
    assert (recipe["name"], recipe["changed_from"], recipe["evidence"]) == ("delayed", None, "none: recipe kept")
    assert "no logged stat or what-if favours another recipe" in recipe["reason"]
    assert "Megatron rejects" not in recipe["reason"]
    assert recipe["apply_paths"]["te-yaml"].startswith("works") and "DisableFP8GEMM" in recipe["apply_paths"]["te-yaml"]
    assert "tensorwise" in recipe["apply_paths"]["megatron"] and body["megatron"]["fp8_recipe"] == "tensorwise"
    assert body["expected_cost"]["fp8_recipe"] == "delayed"
    assert rec.confidence > 0.59


def test_llama3_gate_on_warning_fails_with_the_findings_it_counts(llama3: tuple[RunData, Analysis]) -> None:
    # It used to exit 1 while printing "0 finding(s) at or above warning": warning-band layers decided on their own.
    _data, analysis = llama3
    body = analysis.to_dict()
    warned = [row["name"] for row in body["layers"] if row["verdict"] == "warning"]

    result = evaluate({"id": 1, "name": "llama3"}, body, {}, "warning")

    assert warned and result.passed is False
    assert {name for f in result.failing for name in f["layers"]} >= set(warned)
    assert f"{len(result.failing)} finding(s) at or above **warning**" in render_markdown(result)
    assert len(result.failing) >= 1
    assert evaluate({"id": 1}, body, {}, "critical").passed is True


def test_real_logs_rows_without_fp8_stats_are_not_assessed(llama3: tuple[RunData, Analysis]) -> None:
    _data, analysis = llama3
    unobserved = [row for row in analysis.layers if row.status == "fp8_unobserved"]
    assert unobserved and all(row.verdict == "n/a" for row in unobserved)
