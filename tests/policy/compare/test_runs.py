"""policy/compare/runs.py: 2-8 runs side by side from their analysis and recommendation JSON — where the verdict
and recommendation rows differ, each layer's recommended precision (skip list, GEMM overrides, BF16 as logged,
ladder rungs as applied), the overlay's first focus, and the sentences."""

from __future__ import annotations

import pytest

from fp8_policy.policy.compare.runs import GEMMS, RecommendedPolicy, RunVerdict, compare_verdicts

QKV, PROJ, FC1, HEAD = (
    "model.layers.1.self_attention.layernorm_qkv",
    "model.layers.1.self_attention.proj",
    "model.layers.1.layernorm_mlp.fc1",
    "model.lm_head",
)


def layer(name: str, status: str = "fp8", severity: str = "ok") -> dict:
    group = "head" if name == HEAD else "body"
    return {
        "name": name,
        "group": group,
        "index": None if name == HEAD else 1,
        "sublayer": name.rsplit(".", 1)[-1],
        "status": status,
        "severity": severity,
        "verdict": "n/a" if status == "bf16" else severity,
    }


def analysis(*layers: dict, findings=(), focus=None) -> dict:
    return {"findings": list(findings), "layers": list(layers), "focus": focus, "training_recipe": {"recipe": None}}


def finding(pattern: str, severity: str, *layers: str) -> dict:
    return {"pattern": pattern, "label": pattern.title(), "severity": severity, "layers": list(layers), "summary": "s"}


def recommendation(recipe="delayed", skips=(), overrides=None, ladder=None, share=0.0, confidence=0.8) -> dict:
    return {
        "fp8_skip_layers": list(skips),
        "gemm_overrides": [{"layer": k, "gemms": list(v), "reason": ""} for k, v in (overrides or {}).items()],
        "precision_ladder": {"layers": {k: {"precision": v} for k, v in (ladder or {}).items()}},
        "recipe": {"name": recipe},
        "expected_cost": {
            "bf16_gemm_share": share,
            "gemm_slowdown_vs_all_fp8_pct": 0.0,
            "gemm_speedup_vs_all_bf16": 1.7,
        },
        "confidence": confidence,
    }


def verdict(run_id: int, layers: list[dict], rec: dict | None, **kw) -> RunVerdict:
    return RunVerdict.from_json(run_id, f"run-{run_id}", analysis(*layers, **kw), rec)


def rows(body: dict) -> dict:
    return {row["key"]: row for row in body["table"]}


def test_rows_differ_only_where_a_run_differs_and_sets_compare_as_sets() -> None:
    base = verdict(
        1,
        [layer(QKV), layer(PROJ), layer(HEAD, severity="severe")],
        recommendation(skips=[HEAD, QKV], share=0.1),
        findings=[finding("head_only", "severe", HEAD)],
    )
    same = verdict(
        2,
        [layer(QKV), layer(PROJ), layer(HEAD, severity="severe")],
        recommendation(skips=[QKV, HEAD], share=0.1004),
        findings=[finding("head_only", "severe", HEAD)],
    )
    body = compare_verdicts([base, same])
    table = rows(body)
    assert not table["to_bf16"]["differs"]  # the same two layers in another order
    assert not table["bf16_gemm_share"]["differs"]  # 0.1 and 0.1004 read the same at 3 digits
    assert not any(row["differs"] for row in body["table"]), [r["key"] for r in body["table"] if r["differs"]]
    assert not any(row["differs"] for row in body["layers"])
    assert "every layer the runs share gets the same precision in each run's recommendation" in body["summary"]

    other = verdict(3, [layer(QKV), layer(PROJ), layer(HEAD, severity="ok")], recommendation(recipe="mxfp8", share=0.0))
    body = compare_verdicts([base, same, other])
    table = rows(body)
    for key in ("severity", "findings", "recipe", "to_bf16", "bf16_gemm_share", "ladder"):
        assert table[key]["differs"] and table[key]["matches_first"] == [True, True, False], key
    assert not table["confidence"]["differs"] and not table["ran_bf16"]["differs"]
    assert table["recipe"]["values"][2] == {"name": "mxfp8", "label": "MXFP8 block scaling (MXFP8BlockScaling)"}
    assert "verdicts differ: severe (#1, #2); ok (#3)" in body["summary"]
    assert any(s.startswith("recommended recipes differ: Delayed scaling") for s in body["summary"])


def test_each_layers_recommended_precision_follows_the_render_rules() -> None:
    rec = recommendation(
        recipe="mxfp8",
        skips=[HEAD],
        overrides={PROJ: ("dgrad", "wgrad")},
        ladder={QKV: "delayed", FC1: "bf16", PROJ: "block", HEAD: "nvfp4"},
    )
    run = verdict(1, [layer(QKV), layer(PROJ), layer(FC1), layer(HEAD)], rec)
    plain = verdict(
        2, [layer(QKV), layer(PROJ), layer(FC1, status="bf16"), layer(HEAD)], recommendation(recipe="mxfp8")
    )
    body = compare_verdicts([run, plain])
    cells = {row["name"]: row["cells"] for row in body["layers"]}
    # delayed under another recipe runs at that recipe; a ladder bf16 rung outside the BF16 set is not applied;
    # the skip list wins over a rung; GEMM overrides name their GEMMs
    assert [c["recommended"] for c in cells[QKV]] == ["mxfp8", "mxfp8"]
    assert cells[FC1][0]["recommended"] == "mxfp8" and cells[FC1][1] == {
        "logged": "bf16",
        "recommended": "bf16",
        "gemms": None,
        "severity": None,
    }
    assert cells[HEAD][0]["recommended"] == "bf16"
    assert cells[PROJ][0] == {"logged": "fp8", "recommended": GEMMS, "gemms": ["dgrad", "wgrad"], "severity": "ok"}
    flags = {row["name"]: (row["differs"], row["notable"]) for row in body["layers"]}
    assert flags == {QKV: (False, False), PROJ: (True, True), FC1: (True, True), HEAD: (True, True)}
    assert rows(body)["ladder"]["values"] == [{"mxfp8": 2, GEMMS: 1, "bf16": 1}, {"mxfp8": 3, "bf16": 1}]
    assert "3 layer(s) in every run are logged or recommended at different precisions" in body["summary"]


def test_layers_only_in_some_runs_and_runs_without_a_common_layer() -> None:
    a = verdict(1, [layer(QKV), layer(PROJ)], recommendation())
    b = verdict(2, [layer(QKV), layer(HEAD)], None)
    body = compare_verdicts([a, b])
    assert [row["name"] for row in body["layers"]] == [QKV, PROJ, HEAD]
    assert body["common_layers"] == 1 and body["comparable"]
    assert [c is None for c in body["layers"][1]["cells"]] == [False, True] and body["layers"][1]["differs"]
    assert body["layers"][0]["cells"][1]["recommended"] is None  # no recommendation for run 2
    assert rows(body)["recipe"]["values"] == [{"name": "delayed", "label": "Delayed scaling (DelayedScaling)"}, None]
    assert "layers match by exact name: 1 in every run, 2 only in some" in body["summary"]
    assert "no recommendation for #2 run-2" in body["summary"]

    apart = compare_verdicts([a, verdict(3, [layer(HEAD)], recommendation())])
    assert not apart["comparable"] and apart["summary"][0].startswith("incomparable: no two of the 2 runs have a layer")


def test_runs_sharing_layers_in_some_but_not_all_runs_are_compared_where_present() -> None:
    """Three ESM-2 runs and one Llama run: no layer is in all four, yet 3 runs share every ESM-2 layer; the page used
    to say the runs share no layer and compare nothing above a table comparing them."""
    esm = [layer(QKV), layer(PROJ), layer(FC1)]
    runs = [verdict(i, esm, recommendation()) for i in (1, 2, 3)] + [verdict(4, [layer(HEAD)], recommendation())]
    body = compare_verdicts(runs)
    assert body["common_layers"] == 0 and body["shared_layers"] == 3 and body["comparable"]
    assert not any(line.startswith("incomparable") for line in body["summary"])
    assert body["summary"][0] == (
        "layers match by exact name: no layer is in all 4 runs; 3 layer(s) are in 2 or more runs and are compared "
        "where present (most shared: 3 runs, 3 layer(s) in #1, #2, #3)"
    )
    assert body["focus"] == {"layer": QKV, "tensor": "gradient", "stat": "underflows%"}


def test_focus_is_the_worst_runs_focus_on_the_layers_most_runs_have() -> None:
    focus = {"layer": HEAD, "tensor": "activation", "stat": "underflows%", "severity": "severe"}
    ok = verdict(1, [layer(QKV), layer(HEAD)], recommendation())
    bad = verdict(
        2, [layer(QKV), layer(HEAD)], recommendation(), findings=[finding("head_only", "severe", HEAD)], focus=focus
    )
    assert compare_verdicts([ok, bad])["focus"] == {"layer": HEAD, "tensor": "activation", "stat": "underflows%"}
    assert compare_verdicts([ok, ok])["focus"] == {"layer": QKV, "tensor": "gradient", "stat": "underflows%"}


@pytest.mark.parametrize("count", [0, 1, 9])
def test_two_to_eight_runs(count: int) -> None:
    with pytest.raises(ValueError, match="2-8 runs"):
        compare_verdicts([verdict(k, [layer(QKV)], None) for k in range(count)])


def test_recommended_policy_reads_the_recommendation_json() -> None:
    policy = RecommendedPolicy.from_json(recommendation(skips=[HEAD, HEAD], overrides={PROJ: ("wgrad",)}))
    assert policy.skip_layers == (HEAD,) and policy.gemm_overrides == {PROJ: ("wgrad",)}
    assert policy.recipe_label == "Delayed scaling (DelayedScaling)" and policy.cost["gemm_speedup_vs_all_bf16"] == 1.7
