"""`verify` (policy/recommend/verification.py): the single-run verdict unchanged, and the paired verdict over
replicates (recommend/replicates.py) judged against the measured noise."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy import stats  # type: ignore[import-untyped]

from fp8_policy.policy.recommend.replicates import paired
from fp8_policy.policy.recommend.verification import verify


def arm(name: str, kind: str, losses: list[float], risk: float | None = None, **extra: Any) -> dict[str, Any]:
    """A placed arm; more than one loss: replicates (`heldout_losses`, `heldout_loss` their mean)."""
    out: dict[str, Any] = {"name": name, "kind": kind, "predicted_risk": risk, "assignment": {"fc": "nvfp4"}, **extra}
    if len(losses) == 1:
        out["heldout_loss"] = losses[0]
    else:
        finite = all(math.isfinite(v) for v in losses)
        out["heldout_losses"] = [v if math.isfinite(v) else None for v in losses]
        out["heldout_loss"] = sum(losses) / len(losses) if finite else None
    return out


def single(recommended: float) -> list[dict[str, Any]]:
    return [
        arm("bf16", "bf16", [2.770]),
        arm("all", "all_low", [2.870], risk=1.0),
        arm("rule", "rule", [2.80]),
        arm("rec", "recommended", [recommended], risk=0.1),
    ]


def test_one_replicate_is_the_single_run_verdict() -> None:
    confirmed = verify(single(2.775))
    assert confirmed["status"] == "confirmed" and confirmed["next_step"] is None
    assert confirmed["detail"] == (
        "Recommended arm: its held-out gap +0.0050 nats is within the predicted 0.0100 + 0.02 "
        "and the best rule arm's +0.0300."
    )
    assert (
        confirmed["replicates"] == 1 and confirmed["noise_bound"] == 0.0 and confirmed["best_rule_noise_bound"] == 0.0
    )
    assert confirmed["recommended_gap_se"] is None
    contradicted = verify(single(2.95))
    assert contradicted["status"] == "contradicted" and contradicted["next_step"]["rerun"] == ["recommended", "bf16"]
    assert contradicted["detail"] == (
        "Recommended arm: its held-out gap +0.1800 nats exceeds the predicted 0.0100 + 0.02 tolerance."
    )
    worse_than_rule = verify([*single(2.775)[:2], arm("rule", "rule", [2.70]), single(2.775)[3]])
    assert (
        worse_than_rule["status"] == "contradicted"
        and "worse than the best rule arm's -0.0700" in worse_than_rule["detail"]
    )
    assert "replicates" not in worse_than_rule["detail"]


def test_worse_in_every_replicate_beyond_tiny_noise_is_contradicted() -> None:
    base = [2.70, 2.78, 2.74]
    rec = [b + 0.03 + d for b, d in zip(base, (0.0005, -0.0005, 0.0), strict=True)]
    verdict = verify([arm("bf16", "bf16", base), arm("rec", "recommended", rec)])
    assert verdict["status"] == "contradicted" and verdict["replicates"] == 3
    assert verdict["recommended_gap"] == pytest.approx(0.03)
    expected = paired([0.0305, 0.0295, 0.03])
    assert verdict["noise_bound"] == pytest.approx(expected.bound) and 0 < verdict["noise_bound"] < 0.002
    assert verdict["recommended_gap_se"] == pytest.approx(0.0005 / math.sqrt(3))
    assert "over 3 replicates, beyond the one-sided 95 % noise bound ±0.0008" in verdict["detail"], verdict["detail"]
    assert verdict["next_step"] is not None


def test_the_same_mean_difference_with_noise_flipping_its_sign_is_confirmed_with_the_bound() -> None:
    base = [2.70, 2.78, 2.74]
    rec = [b + g for b, g in zip(base, (0.09, -0.03, 0.03), strict=True)]
    verdict = verify([arm("bf16", "bf16", base), arm("rec", "recommended", rec)])
    assert verdict["status"] == "confirmed" and verdict["recommended_gap"] == pytest.approx(0.03)
    bound = stats.t.ppf(0.95, 2) * 0.06 / math.sqrt(3)
    assert verdict["noise_bound"] == pytest.approx(bound)
    assert f"within the one-sided 95 % noise bound ±{bound:.4f}" in verdict["detail"], verdict["detail"]
    assert "above the predicted 0.0000 + 0.02" in verdict["detail"]


def test_the_rule_comparison_is_paired_over_replicates() -> None:
    base = [2.70, 2.90, 2.80]  # replicate-to-replicate noise far above the effect, shared by every arm
    verdict = verify(
        [
            arm("bf16", "bf16", base),
            arm("all", "all_low", [b + 0.5 for b in base], risk=1.0),
            arm("rule", "rule", [b + s for b, s in zip(base, (0.05, -0.05, 0.0), strict=True)]),
            arm("rec", "recommended", [b + s + 0.05 for b, s in zip(base, (0.051, -0.049, 0.0), strict=True)], 0.5),
        ]
    )
    assert verdict["predicted_gap"] == pytest.approx(0.25)
    assert verdict["status"] == "contradicted" and "worse than the best rule arm's" in verdict["detail"]
    assert "of the paired differences" in verdict["detail"]
    assert 0 < verdict["best_rule_noise_bound"] < 0.01


def test_a_bf16_replicate_that_diverged_leaves_no_verdict() -> None:
    verdict = verify([arm("bf16", "bf16", [2.7, math.nan, 2.8]), arm("rec", "recommended", [2.7, 2.7, 2.8])])
    assert verdict["status"] == "unverified" and verdict["replicates"] == 3
    assert "every one of its 3 replicates" in verdict["detail"]


def test_a_recommended_replicate_that_diverged_contradicts() -> None:
    verdict = verify([arm("bf16", "bf16", [2.7, 2.7]), arm("rec", "recommended", [2.7, math.inf])])
    assert verdict["status"] == "contradicted" and "diverged in at least one of 2 replicates" in verdict["detail"]


def test_arms_with_unequal_replicates_are_refused() -> None:
    with pytest.raises(ValueError, match="heldout_losses of 3 replicates"):
        verify([arm("bf16", "bf16", [2.7, 2.7, 2.7]), arm("rec", "recommended", [2.7, 2.7])])
