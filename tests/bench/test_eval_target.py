"""The target re-solve benchmark (bench/eval_target.py) on the small benchmark tree with sensitivity: the service's
`?target=` path from a stored run gives answers that change layers and keep the planted layers the most precise
(its speed is `make eval`'s check, never a test's)."""

from __future__ import annotations

from pathlib import Path

from bench.eval_target import SENSITIVITY, TARGETS, checks, target_timings
from bench.generate import benchmark_case
from fp8_policy.policy.synthetic import write_run


def test_target_re_solve_path_on_the_small_tree(tmp_path: Path) -> None:
    write_run(benchmark_case("small", sensitivity=SENSITIVITY).run, tmp_path / "tree")
    result = target_timings(tmp_path / "tree", repeats=2, preset="small")
    assert result["lines_read"] > 0 and result["lines_skipped"] == 0 and len(result["uncached"]["runs"]) == 2
    assert result["cold_seconds"] > 0 and result["base"]["predicted_risk"] is not None
    assert result["base"]["planted_most_precise"] and result["base"]["planted_at"]["mxfp8"] == 26
    assert list(result["targets"]) == list(TARGETS)
    for text, t in result["targets"].items():
        assert len(t["runs"]) == 2 and t["p50"] <= t["p95"] and t["body_bytes"] > 0, text
        assert t["met"] and t["layers_changed"] > 0 and t["planted_most_precise"], (text, t)
    speedy = result["targets"]["speedup:1.6"]
    assert speedy["speedup"] >= 1.6 and speedy["healthy_at"].get("nvfp4") == 24  # healthy layers go cheapest first
    labels = [label for label in checks(result) if "most precise" in label]
    assert len(labels) == len(TARGETS) and all(checks(result)[label] for label in labels)


def test_a_wrong_answer_fails_its_check() -> None:
    t = {"p50": 0.1, "met": True, "layers_changed": 3, "planted_most_precise": False}
    assert checks({"uncached": {"target": "risk:1", "p50": 1.5}, "targets": {"risk:1": t}}) == {
        "uncached (risk:1): p50 1.500 s <= 1 s": False,
        "risk:1: re-solve p50 0.100 s <= 1 s": True,
        "risk:1: met, 3 layer(s) changed, planted layers most precise": False,
    }
