"""Experiments judge the recommendation: arms trained from the same state for the same steps, data order and seed
(BF16, all-low-precision, the recommended policy, rule baselines, frontier points), their held-out losses measured.

Each arm is placed on the frontier's axes (`place_arms`): its precisions (or, without them, the point its kind
names) give its GEMM speedup and predicted risk from the recommendation's frontier (recommend/frontier.py).
`verify`:
* unverified: no finite BF16 arm (no reference) or no recommended arm;
* the held-out gap of an arm is its held-out loss minus the BF16 arm's (nats); an arm whose loss is NaN/inf diverged;
* predicted gap of the recommended arm: the all-low arm's measured gap (at least 0) scaled by the ratio of their
  predicted risks (the measured calibration of the risk axis); 0 without a finite all-low arm;
* confirmed: the recommended arm did not diverge, its gap is at most the predicted gap plus `tolerance` (default
  `GAP_TOLERANCE` nats, run-to-run noise) and at most the best rule arm's gap plus `tolerance`;
* contradicted otherwise, with the next step: lift the recommended arm's most sensitive layers (by predicted risk
  at their precision, until half of its risk is covered, at most `MAX_LIFT`) to BF16, and re-run that arm and BF16.

Replicates: arms may carry `heldout_losses`, one per replicate, replicate r of every arm trained under the same
seed and data order (every arm the same count R >= 2; the service checks it). Gaps are then taken per replicate
(arm_r - bf16_r) and judged paired (recommend/replicates.py): an arm's gap is the mean over replicates; the
predicted gap as above from the all-low arm's mean gap; contradicted against the prediction only when
mean gap - (predicted + tolerance) exceeds the one-sided 95 % Student-t bound t(0.95, R-1) * SE of the recommended
arm's per-replicate gaps, and against the best rule arm (lowest mean gap) only when the mean of the paired
differences rec_r - rule_r minus `tolerance` exceeds the same bound on those differences. A replicate where an arm
diverged makes that arm diverged (the recommended arm: contradicted). A BF16 arm that diverged in any replicate
leaves that replicate without a reference: the verdict is unverified (dropping the replicate from every arm would
judge on fewer, hand-picked replicates; re-run it instead). With one replicate the bound is 0 and the verdict is
the single-run one above. The verdict carries `replicates`, `noise_bound` (the bound against the prediction),
`best_rule_noise_bound` and `recommended_gap_se` (None with one replicate).
Pure: plain dicts in, a dict out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from fp8_policy.policy.recommend.frontier import Frontier
from fp8_policy.policy.recommend.replicates import Paired, paired

GAP_TOLERANCE = 0.02
MAX_LIFT = 8
KINDS = ("bf16", "all_low", "rule", "recommended", "frontier")


def arm_assignment(arm: Mapping[str, Any], frontier: Frontier, recommended: Mapping[str, str]) -> dict[str, str] | None:
    """The per-layer precisions an arm ran (its `precisions` over `default_precision`), else what its kind names."""
    precisions = arm.get("precisions")
    if precisions:
        default = arm.get("default_precision")
        return {n: precisions.get(n, default or frontier.start.get(n, "bf16")) for n in frontier.start}
    kind = arm["kind"]
    if kind == "bf16":
        return dict.fromkeys(frontier.start, "bf16")
    if kind == "recommended":
        return dict(recommended)
    baseline = next((b for b in frontier.baselines if b.name == (arm.get("rule") or kind)), None)
    if baseline is not None:
        return {n: "bf16" if n in baseline.bf16_layers else frontier.low_precision for n in frontier.start}
    if (
        kind == "frontier"
        and isinstance(arm.get("frontier_point"), int)
        and 0 <= arm["frontier_point"] < len(frontier.points)
    ):
        return frontier.assignment(arm["frontier_point"])
    return None


def place_arms(
    arms: Sequence[Mapping[str, Any]],
    frontier: Frontier,
    recommended: Mapping[str, str],
    recommended_bf16_gemms: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Each arm with `gemm_speedup` and `predicted_risk` (None when its precisions cannot be placed) and the
    `assignment` it ran; an arm's `bf16_gemms` (the recommended arm without precisions: the recommendation's GEMM
    overrides) count those GEMMs in BF16."""
    out = []
    for arm in arms:
        assignment = arm_assignment(arm, frontier, recommended)
        implied = arm["kind"] == "recommended" and not arm.get("precisions")
        overrides = recommended_bf16_gemms if implied else arm.get("bf16_gemms")
        placed = frontier.evaluate(assignment, overrides) if assignment is not None else (None, None)
        out.append({**arm, "gemm_speedup": placed[0], "predicted_risk": placed[1], "assignment": assignment or {}})
    return out


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _losses(arm: Mapping[str, Any], replicates: int) -> list[Any]:
    """The arm's held-out loss per replicate: `heldout_losses` with replicates, else its one `heldout_loss`."""
    if replicates < 2:
        return [arm.get("heldout_loss")]
    losses = arm.get("heldout_losses")
    if not isinstance(losses, Sequence) or len(losses) != replicates:
        raise ValueError(f"arm {arm.get('name')!r}: every arm needs heldout_losses of {replicates} replicates")
    return list(losses)


def _noise(paired_: Paired, replicates: int, within: bool) -> str:
    if replicates < 2:
        return ""
    side = "within" if within else "beyond"
    return f" over {replicates} replicates, {side} the one-sided 95 % noise bound ±{paired_.bound:.4f}"


def verify(
    arms: Sequence[Mapping[str, Any]],
    risk_of: Mapping[str, Mapping[str, float]] | None = None,
    tolerance: float = GAP_TOLERANCE,
) -> dict[str, Any]:
    """The verdict on placed arms (module docstring). `risk_of[layer][precision]`: predicted risk (nats per step)
    for the next step's ranking."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for arm in arms:
        by_kind.setdefault(arm["kind"], []).append(arm)
    first_bf16 = next(iter(by_kind.get("bf16", ())), None)
    losses_of = first_bf16.get("heldout_losses") if first_bf16 is not None else None
    replicates = len(losses_of) if isinstance(losses_of, Sequence) and len(losses_of) >= 2 else 1
    reference = next((a for a in by_kind.get("bf16", ()) if all(_finite(v) for v in _losses(a, replicates))), None)
    recommended = next(iter(by_kind.get("recommended", ())), None)
    if reference is None or recommended is None:
        missing = "a BF16 arm with a finite held-out loss" if reference is None else "a recommended arm"
        if reference is None and replicates > 1:
            missing += f" in every one of its {replicates} replicates (a diverged BF16 replicate leaves no reference)"
        return {"status": "unverified", "detail": f"no verdict without {missing}", "next_step": None,
                "replicates": replicates}  # fmt: skip
    base = [float(v) for v in _losses(reference, replicates)]

    def gaps(arm: Mapping[str, Any]) -> list[float] | None:
        """Per-replicate gaps to BF16; None when the arm diverged in any replicate."""
        losses = _losses(arm, replicates)
        if not all(_finite(v) for v in losses):
            return None
        return [float(v) - b for v, b in zip(losses, base, strict=True)]

    def gap(arm: Mapping[str, Any]) -> float | None:
        found = gaps(arm)
        return paired(found).mean if found is not None else None

    rec_gaps = gaps(recommended)
    rec = paired(rec_gaps) if rec_gaps is not None else None
    rec_gap = rec.mean if rec is not None else None
    low = next((a for a in by_kind.get("all_low", ()) if gap(a) is not None), None)
    predicted = 0.0
    calibrated = low is not None and _finite(low.get("predicted_risk")) and low["predicted_risk"] > 0
    if calibrated and low is not None and _finite(recommended.get("predicted_risk")):
        predicted = max(0.0, gap(low) or 0.0) * recommended["predicted_risk"] / low["predicted_risk"]
    rules = [
        (g, found) for a in by_kind.get("rule", ()) if (found := gaps(a)) is not None and (g := gap(a)) is not None
    ]
    best = min(rules, key=lambda item: item[0]) if rules else None
    best_rule = best[0] if best is not None else None
    versus_rule = (
        paired([r - q for r, q in zip(rec_gaps, best[1], strict=True)])
        if best is not None and rec_gaps is not None
        else None
    )
    rule_bound = versus_rule.bound if versus_rule is not None else None
    if rec is None or rec_gap is None:
        confirmed = False
        why = "the recommended arm diverged (held-out loss not finite)"
        if replicates > 1:
            why = f"the recommended arm diverged in at least one of {replicates} replicates (held-out loss not finite)"
    elif rec_gap > predicted + tolerance + rec.bound:
        confirmed = False
        why = f"its held-out gap {rec_gap:+.4f} nats exceeds the predicted {predicted:.4f} + {tolerance:g} tolerance"
        why += _noise(rec, replicates, within=False)
    elif best_rule is not None and versus_rule is not None and rec_gap > best_rule + tolerance + versus_rule.bound:
        confirmed = False
        why = f"its held-out gap {rec_gap:+.4f} nats is worse than the best rule arm's {best_rule:+.4f} + {tolerance:g}"
        why += _noise(versus_rule, replicates, within=False) + " of the paired differences" * (replicates > 1)
    elif replicates < 2:
        confirmed = True
        why = f"its held-out gap {rec_gap:+.4f} nats is within the predicted {predicted:.4f} + {tolerance:g}" + (
            f" and the best rule arm's {best_rule:+.4f}" if best_rule is not None else ""
        )
    else:
        confirmed = True
        side = "above" if rec_gap > predicted + tolerance else "within"
        why = f"its mean held-out gap {rec_gap:+.4f} nats ({side} the predicted {predicted:.4f} + {tolerance:g})"
        why += _noise(rec, replicates, within=True)
        if best_rule is not None and versus_rule is not None:
            why += f"; against the best rule arm's {best_rule:+.4f} + {tolerance:g}, within its paired bound"
            why += f" ±{versus_rule.bound:.4f}"
    out: dict[str, Any] = {
        "status": "confirmed" if confirmed else "contradicted",
        "detail": f"Recommended arm: {why}.",
        "recommended_gap": rec_gap,
        "predicted_gap": predicted,
        "best_rule_gap": best_rule,
        "tolerance": tolerance,
        "replicates": replicates,
        "noise_bound": rec.bound if rec is not None else None,
        "best_rule_noise_bound": rule_bound,
        "recommended_gap_se": rec.se if rec is not None else None,
        "next_step": None,
    }
    if not confirmed:
        out["next_step"] = next_step(recommended, risk_of or {})
    return out


def next_step(recommended: Mapping[str, Any], risk_of: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Lift the recommended arm's most sensitive low-precision layers to BF16 (module docstring)."""
    precisions: Mapping[str, str] = recommended.get("assignment") or {}
    ranked = sorted(
        ((risk_of.get(n, {}).get(p, 0.0), n, p) for n, p in precisions.items() if p != "bf16"),
        reverse=True,
    )
    total = sum(r for r, _, _ in ranked)
    lift: list[dict[str, Any]] = []
    covered = 0.0
    for risk, name, precision in ranked[:MAX_LIFT]:
        if lift and total > 0 and covered >= 0.5 * total:
            break
        lift.append({"layer": name, "from": precision, "to": "bf16", "predicted_risk": risk})
        covered += risk
    names = ", ".join(str(item["layer"]) for item in lift) or "the layers it runs in low precision"
    share = f" ({covered / total:.0%} of its predicted risk)" if total > 0 else ""
    return {
        "lift": lift,
        "rerun": ["recommended", "bf16"],
        "text": f"Lift the next most sensitive layers to BF16: {names}{share}; re-run the recommended arm with them "
        "lifted, and the BF16 arm, for the same steps, seed and data order, and post the experiment again.",
    }
