"""`make eval-outcomes QUICK=1 OUT=...` end to end (slow: two tiny closed loops on CPU, about a minute on a quiet
2-core machine), and the eval's Spearman and per-case judgement on hand-made numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.eval_outcomes import judge, main, resolved_pairs, summarize
from bench.outcome_stats import Reliability, mean_and_se, paired, replicates_for, spearman, split_half

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"bf16", "all_low", "rule", "recommended"}


def test_spearman_uses_average_ranks_and_needs_variation() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)  # ties share their average rank
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_the_judgement_compares_each_recommended_arm_with_the_best_rule() -> None:
    arm = lambda name, kind, gap, cost, risk: {  # noqa: E731
        "name": name, "kind": kind, "heldout_gap": gap, "gemm_cost": cost, "predicted_risk": risk
    }  # fmt: skip
    case = {
        "arms": [
            arm("bf16", "bf16", 0.0, 1.0, 0.0),
            arm("all", "all_low", 0.10, 0.5, 0.3),
            arm("last_15pct", "rule", 0.05, 0.6, 0.2),
            arm("first_last", "rule", 0.03, 0.7, 0.1),
            arm("recommended", "recommended", 0.02, 0.55, 0.05),
            arm("recommended@first_last", "recommended", 0.04, 0.7, 0.08),
        ]
    }
    j = judge(case)
    assert j["best_rule"] == "first_last"
    assert j["recommended"] == {
        "as_good_in_loss": True,
        "no_more_cost": True,
        "strictly_better": True,
        "gap_difference": pytest.approx(-0.01),
        "noise_bound": 0.0,  # one replicate: no noise allowance
        "lower_mean_gap": True,
    }
    assert j["recommended@first_last"]["as_good_in_loss"] is False
    assert j["spearman"] == pytest.approx(
        spearman([0.0, 0.3, 0.2, 0.1, 0.05, 0.08], [0.0, 0.1, 0.05, 0.03, 0.02, 0.04])
    )


def test_replicated_arms_are_compared_paired_and_within_their_noise() -> None:
    arm = lambda name, kind, gaps, cost: {  # noqa: E731
        "name": name, "kind": kind, "heldout_gap": mean_and_se(gaps)[0], "heldout_gaps": gaps, "gemm_cost": cost,
        "predicted_risk": None,
    }  # fmt: skip
    rule = arm("last_15pct", "rule", [0.10, -0.05, 0.02], 0.6)
    case = {
        "arms": [
            rule,
            # worse on the mean by 0.01, but the paired differences (+0.04, -0.02, +0.01) are within their noise
            arm("recommended", "recommended", [0.14, -0.07, 0.03], 0.55),
            # worse in every replicate by about 0.05: beyond the noise
            arm("recommended@last_15pct", "recommended", [0.15, 0.0, 0.07], 0.6),
        ]
    }
    j = judge(case)
    assert j["recommended"]["as_good_in_loss"] and not j["recommended"]["lower_mean_gap"]
    assert j["recommended"]["strictly_better"]  # as good in loss, and cheaper
    assert j["recommended@last_15pct"]["as_good_in_loss"] is False
    assert j["recommended@last_15pct"]["gap_difference"] == pytest.approx(0.05, abs=1e-9)


def test_resolved_pairs_count_only_arms_the_replicates_tell_apart() -> None:
    arm = lambda name, gaps, risk: {"name": name, "heldout_gaps": gaps, "heldout_gap": None, "predicted_risk": risk}  # noqa: E731
    bf16 = arm("bf16", [0.0, 0.0, 0.0], 0.0)
    low = arm("all_low", [0.10, 0.12, 0.11], 0.9)  # clearly worse than BF16 and than the tie below
    tie = arm("rule", [0.01, -0.01, 0.005], 0.2)  # within the noise of BF16
    wrong = arm("misranked", [0.30, 0.31, 0.32], 0.1)  # clearly the worst, predicted nearly the best
    assert resolved_pairs([bf16, low, tie]) == (2, 2)  # low vs bf16, low vs tie; bf16 vs tie is not told apart
    assert resolved_pairs([bf16, low, wrong]) == (3, 2)  # wrong vs low is ordered the other way
    assert resolved_pairs([bf16, arm("unknown", [1.0, 1.0, 1.1], None)]) == (0, 0)  # no prediction: not counted


def test_paired_differences_use_the_one_sided_t_bound() -> None:
    one = paired([0.01], [0.0])
    assert one.bound == 0.0 and not one.not_worse and not one.better  # one replicate: no noise allowance
    diff = paired([0.02, 0.0, 0.04], [0.0, 0.0, 0.0])
    assert diff.mean == pytest.approx(0.02) and diff.se == pytest.approx(0.02 / 3**0.5)
    assert diff.bound == pytest.approx(2.919986 * 0.02 / 3**0.5, rel=1e-5)  # t(0.95, 2 degrees of freedom)
    assert diff.not_worse and not diff.better
    diverged = paired([float("inf"), 0.0], [0.0, 0.0])
    assert not diverged.not_worse
    with pytest.raises(ValueError):
        paired([0.0], [0.0, 1.0])


def test_split_half_measures_how_reproducible_the_measured_order_is() -> None:
    # every replicate orders the arms the same way: the halves agree, a perfect predictor could reach 1
    steady = [[0.0, 0.0, 0.0, 0.0], [0.1, 0.11, 0.1, 0.12], [0.2, 0.21, 0.22, 0.2], [0.3, 0.3, 0.31, 0.33]]
    found = split_half(steady)
    assert found is not None and found.halves == pytest.approx(1.0) and found.ceiling == pytest.approx(1.0)
    # the even replicates order the arms one way and the odd ones the reverse: the order is noise
    flipping = [[0.1, 0.3, 0.1, 0.3], [0.2, 0.2, 0.2, 0.2], [0.3, 0.1, 0.3, 0.1]]
    found = split_half(flipping)
    assert found is not None and found.halves == pytest.approx(-1.0) and found.full == -1.0 and found.ceiling == 0.0
    # half agreement, stepped up to the whole: 2 r / (1 + r)
    half = [[0.0, 0.0], [1.0, 2.0], [2.0, 1.0], [3.0, 4.0], [4.0, 3.0]]
    found = split_half(half)
    assert found is not None and found.halves == pytest.approx(0.8)
    assert found.full == pytest.approx(1.6 / 1.8) and found.ceiling == pytest.approx((1.6 / 1.8) ** 0.5)
    assert split_half([[0.1], [0.2], [0.3]]) is None  # one replicate: nothing to compare
    diverged = split_half([[float("inf"), 0.05], [0.1, 0.1], [0.2, 0.2]])  # a diverged replicate ranks its half last
    assert diverged is not None and diverged.halves == pytest.approx(-0.5)


def test_the_prophecy_says_how_many_replicates_a_reproducible_order_needs() -> None:
    half_reliable = Reliability(halves=1 / 3, full=0.5, ceiling=0.5**0.5, arms=10)
    # reliability 0.81 from 0.5: k = 0.81 * 0.5 / (0.5 * 0.19) = 4.26 times the 4 replicates run
    assert replicates_for(half_reliable, 4, 0.9) == 18
    assert replicates_for(Reliability(0.9, 0.95, 0.97, 10), 6, 0.9) == 6  # already there
    assert replicates_for(Reliability(-0.2, -0.5, 0.0, 10), 6, 0.9) is None  # noise only: no count helps


def test_the_summary_reports_the_measurements_own_reproducibility_beside_the_spearman() -> None:
    arm = lambda name, kind, gaps, risk: {  # noqa: E731
        "name": name, "kind": kind, "heldout_gap": mean_and_se(gaps)[0], "heldout_gaps": gaps, "gemm_cost": 1.0,
        "predicted_risk": risk,
    }  # fmt: skip
    arms = [
        arm("bf16", "bf16", [0.0, 0.0, 0.0, 0.0], 0.0),
        arm("all", "all_low", [0.3, 0.32, 0.31, 0.3], 0.9),
        arm("r", "rule", [0.1, 0.12, 0.1, 0.11], 0.5),
        arm("no-risk", "rule", [0.9, -0.9, 0.9, -0.9], None),  # not counted: no prediction
    ]
    case = {"arms": arms}
    case["judgement"] = judge(case)
    assert case["judgement"]["reliability"]["ceiling"] == pytest.approx(1.0)
    summary = summarize([case])
    assert summary["reliability"] == case["judgement"]["reliability"] and summary["reliability"]["arms"] == 3
    assert summary["reliability"]["replicates_for_ceiling"] == {"0.9": 4}
    assert summary["spearman_corrected"] == pytest.approx(summary["spearman"] / summary["reliability"]["ceiling"])


@pytest.mark.parametrize("value", ["0", "-2", "x"])
def test_replicates_below_one_or_not_a_number_are_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--replicates", value])
    assert exit_.value.code == 2 and "--replicates" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_eval_outcomes_writes_the_documented_json(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.eval_outcomes", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Spearman (predicted risk vs measured gap" in done.stdout
    result = json.loads(out.read_text())
    assert result["quick"] is True and len(result["cases"]) == 2 and result["replicates"] == 2
    assert result["spearman"] is None or -1.0 <= result["spearman"] <= 1.0
    assert "the measured order's reproducibility" in done.stdout
    found = result["reliability"]
    assert found is None or (0.0 <= found["ceiling"] <= 1.0 and found["arms"] == result["pairs"])
    for case in result["cases"]:
        assert case["lines_skipped"] == 0 and case["name"]
        arms = case["arms"]
        assert {a["kind"] for a in arms} <= KINDS and {"bf16", "all_low", "rule", "recommended"} <= {
            a["kind"] for a in arms
        }
        for arm in arms:
            assert {"name", "kind", "heldout_gap", "gemm_cost", "predicted_risk"} <= set(arm)
            assert len(arm["heldout_gaps"]) == 2  # one gap per replicate; heldout_gap is their mean
            if None not in arm["heldout_gaps"]:
                assert arm["heldout_gap"] == pytest.approx(sum(arm["heldout_gaps"]) / 2)
        bf16 = next(a for a in arms if a["kind"] == "bf16")
        assert bf16["heldout_gap"] == 0.0 and bf16["predicted_risk"] == 0.0 and bf16["gemm_cost"] == 1.0
        low = next(a for a in arms if a["kind"] == "all_low")
        assert all(a["predicted_risk"] <= low["predicted_risk"] for a in arms if a["kind"] == "rule")
        assert all(a["gemm_cost"] >= low["gemm_cost"] for a in arms if a["kind"] in ("rule", "bf16"))
        assert case["verification"]["status"] in ("confirmed", "contradicted")
        assert case["verification"]["replicates"] == 2  # one experiment holding both replicates, judged paired
        assert all(len(a["heldout_gaps"]) == 2 for a in arms)
