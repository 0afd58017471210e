"""Compare 2-8 runs side by side: each run's verdict and recommendation in one table, where the runs differ, and
the precision each run's recommendation gives every layer.

Belongs here: the pure comparison of runs already analysed and recommended for (`RunVerdict`, built from the
analysis and recommendation JSON the service stores with each run), and its sentences. Must not be here: loading
runs, HTTP, series (policy/compare/overlay.py aligns those).

Rules:
* A table row "differs" when its value is not the same in every run (sets compare as sets: the same layers to BF16
  in another order do not differ; numbers compare rounded as shown).
* A layer's recommended precision (the ladder per layer, as policy/render/precision.py applies it): `bf16` for the
  skip list and for layers that already ran in high precision; `bf16 gemms` for a layer with GEMM overrides (those
  GEMMs in BF16, the rest at the recipe); else its ladder rung under the recommended recipe (`delayed` under
  another recipe runs at that recipe; a ladder `bf16` rung outside the BF16 set is not applied); else the
  recommended recipe.
* Layers match by exact name. A layer row differs when a run lacks the layer, or the runs that have it log or are
  recommended different precisions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.analysis.recipes import RECIPE_LABELS
from fp8_policy.policy.render.precision import effective_rung
from fp8_policy.policy.thresholds import Severity

MIN_RUNS = 2
MAX_RUNS = 8
BF16 = "bf16"
GEMMS = "bf16 gemms"  # the layer's overridden GEMMs in BF16, the others at the recipe
COST_KEYS = ("bf16_gemm_share", "gemm_slowdown_vs_all_fp8_pct", "gemm_speedup_vs_all_bf16")
_SEVERITY_ORDER = [s.value for s in Severity]


@dataclass(frozen=True, slots=True)
class FindingRef:
    pattern: str
    label: str
    severity: str
    layers: int
    summary: str


@dataclass(frozen=True, slots=True)
class LayerVerdict:
    """One layer of one run as its analysis saw it."""

    name: str
    group: str
    index: int | None
    sublayer: str | None
    status: str  # as logged: fp8, fp8_unobserved, bf16
    severity: str | None  # None: not assessed (BF16, no FP8 stats)


@dataclass(frozen=True, slots=True)
class RecommendedPolicy:
    """The parts of a run's recommendation the comparison shows."""

    recipe: str
    skip_layers: tuple[str, ...]
    gemm_overrides: Mapping[str, tuple[str, ...]]
    ladder: Mapping[str, str]  # layer -> rung (policy/recommend/ladder.py)
    cost: Mapping[str, float | None]  # COST_KEYS
    confidence: float | None

    @property
    def recipe_label(self) -> str:
        return RECIPE_LABELS.get(self.recipe, self.recipe)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RecommendedPolicy:
        """From GET /recommendation's JSON answer (the one stored with the run's summary)."""
        ladder = (body.get("precision_ladder") or {}).get("layers") or {}
        cost = body.get("expected_cost") or {}
        return cls(
            recipe=str((body.get("recipe") or {}).get("name") or "delayed"),
            skip_layers=tuple(dict.fromkeys(body.get("fp8_skip_layers") or ())),
            gemm_overrides={o["layer"]: tuple(o.get("gemms") or ()) for o in body.get("gemm_overrides") or ()},
            ladder={name: str(rung["precision"]) for name, rung in ladder.items() if rung.get("precision")},
            cost={key: _float(cost.get(key)) for key in COST_KEYS},
            confidence=_float(body.get("confidence")),
        )


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """A run's analysis and default recommendation, as far as the comparison needs them."""

    run_id: int
    name: str | None
    findings: tuple[FindingRef, ...]
    layers: tuple[LayerVerdict, ...]
    trained_recipe: str | None = None
    policy: RecommendedPolicy | None = None
    policy_note: str | None = None  # why there is no recommendation
    focus: Mapping[str, Any] | None = None  # the analysis's worst (layer, tensor, stat)
    by_name: dict[str, LayerVerdict] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {layer.name: layer for layer in self.layers})

    @classmethod
    def from_json(
        cls,
        run_id: int,
        name: str | None,
        analysis: Mapping[str, Any],
        recommendation: Mapping[str, Any] | None,
        policy_note: str | None = None,
    ) -> RunVerdict:
        """From GET /analysis's JSON (`Analysis.to_dict()`) and GET /recommendation's (None: `policy_note` says
        why there is none). Ignored layers (no FP8 GEMM) are left out, as in the two-run compare."""
        findings = tuple(
            FindingRef(
                str(f["pattern"]),
                str(f.get("label") or f["pattern"]),
                str(f["severity"]),
                len(f.get("layers") or ()),
                str(f.get("summary") or ""),
            )
            for f in analysis.get("findings") or ()
        )
        layers = tuple(
            LayerVerdict(
                str(row["name"]),
                str(row["group"]),
                row.get("index"),
                row.get("sublayer"),
                str(row["status"]),
                None if row.get("verdict") == "n/a" else row.get("severity"),
            )
            for row in analysis.get("layers") or ()
            if row.get("status") != "ignored"
        )
        return cls(
            run_id=run_id,
            name=name,
            findings=findings,
            layers=layers,
            trained_recipe=(analysis.get("training_recipe") or {}).get("recipe"),
            policy=RecommendedPolicy.from_json(recommendation) if recommendation is not None else None,
            policy_note=policy_note,
            focus=analysis.get("focus"),
        )

    @property
    def severity(self) -> str:
        worst = max(
            (_SEVERITY_ORDER.index(f.severity) for f in self.findings if f.severity in _SEVERITY_ORDER), default=0
        )
        return _SEVERITY_ORDER[worst]

    @property
    def label(self) -> str:
        return f"#{self.run_id}" + (f" {self.name}" if self.name else "")

    def problems(self) -> list[FindingRef]:
        return [f for f in self.findings if f.pattern != "healthy"]

    def ran_bf16(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.status == BF16]

    def precision(self, layer: LayerVerdict) -> tuple[str | None, tuple[str, ...] | None]:
        """(recommended precision, overridden GEMMs) of one of this run's layers (module rules)."""
        policy = self.policy
        if policy is None:
            return None, None
        if layer.name in policy.skip_layers or layer.status == BF16:
            return BF16, None
        if layer.name in policy.gemm_overrides:
            return GEMMS, policy.gemm_overrides[layer.name]
        rung = policy.ladder.get(layer.name)
        if rung is None or rung == BF16:
            return policy.recipe, None
        return effective_rung(rung, policy.recipe), None


def compare_verdicts(runs: Sequence[RunVerdict]) -> dict[str, Any]:
    """The side-by-side table, the per-layer precisions and the sentences of 2-8 runs, in the order given."""
    if not MIN_RUNS <= len(runs) <= MAX_RUNS:
        raise ValueError(f"compare takes {MIN_RUNS}-{MAX_RUNS} runs, got {len(runs)}")
    layers = _layer_rows(runs)
    common = sum(1 for row in layers if all(cell is not None for cell in row["cells"]))
    shared = sum(1 for row in layers if sum(cell is not None for cell in row["cells"]) >= 2)
    table = _table(runs)
    return {
        "table": table,
        "layers": layers,
        "common_layers": common,
        "shared_layers": shared,
        "comparable": shared > 0,
        "focus": _focus(runs, layers),
        "summary": _sentences(runs, table, layers, common),
    }


# ------------------------------------------------------------------------------------------------ the table
def _table(runs: Sequence[RunVerdict]) -> list[dict[str, Any]]:
    def row(key: str, label: str, values: list[Any], same: Callable[[Any], Any] = lambda v: v) -> dict[str, Any]:
        keys = [_hashable(same(v)) for v in values]
        return {
            "key": key,
            "label": label,
            "values": values,
            "differs": len(set(keys)) > 1,
            "matches_first": [k == keys[0] for k in keys],
        }

    policies = [run.policy for run in runs]
    rows = [
        row("severity", "Verdict", [run.severity for run in runs]),
        row(
            "findings",
            "Findings",
            [
                [{"pattern": f.pattern, "label": f.label, "severity": f.severity} for f in run.problems()]
                for run in runs
            ],
            lambda v: frozenset((f["pattern"], f["severity"]) for f in v),
        ),
        row("trained_recipe", "Recipe as trained", [run.trained_recipe for run in runs]),
        row("ran_bf16", "Layers that ran in BF16", [run.ran_bf16() for run in runs], frozenset),
        row(
            "recipe",
            "Recommended recipe",
            [{"name": p.recipe, "label": p.recipe_label} if p else None for p in policies],
            lambda v: v and v["name"],
        ),
        row("to_bf16", "Layers to BF16", [list(p.skip_layers) if p else None for p in policies], _set),
        row(
            "gemm_overrides",
            "GEMM overrides",
            [[{"layer": k, "gemms": list(v)} for k, v in p.gemm_overrides.items()] if p else None for p in policies],
            lambda v: None if v is None else frozenset((o["layer"], tuple(o["gemms"])) for o in v),
        ),
        row(
            "ladder",
            "Precision ladder",
            [_ladder_counts(run) for run in runs],
            lambda v: v and tuple(sorted(v.items())),
        ),
    ]
    for key, label, digits in (
        ("bf16_gemm_share", "BF16 share of GEMM FLOPs", 3),
        ("gemm_slowdown_vs_all_fp8_pct", "GEMM time above all-FP8 (%)", 1),
        ("gemm_speedup_vs_all_bf16", "GEMM speed-up over all-BF16", 2),
    ):
        rows.append(row(key, label, [p.cost.get(key) if p else None for p in policies], _rounded(digits)))
    rows.append(row("confidence", "Confidence", [p.confidence if p else None for p in policies], _rounded(2)))
    return rows


def _ladder_counts(run: RunVerdict) -> dict[str, int] | None:
    """How many of the run's layers the recommendation puts at each precision (module rules)."""
    if run.policy is None:
        return None
    counts: dict[str, int] = {}
    for layer in run.layers:
        precision, _ = run.precision(layer)
        if precision is not None:
            counts[precision] = counts.get(precision, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------------ per layer
def _layer_rows(runs: Sequence[RunVerdict]) -> list[dict[str, Any]]:
    names: dict[str, LayerVerdict] = {}
    for run in runs:  # first appearance order: model order for runs of one model
        for layer in run.layers:
            names.setdefault(layer.name, layer)
    rows = []
    for name, some in names.items():
        cells: list[dict[str, Any] | None] = []
        for run in runs:
            found = run.by_name.get(name)
            if found is None:
                cells.append(None)
                continue
            precision, gemms = run.precision(found)
            cells.append(
                {
                    "logged": found.status,
                    "recommended": precision,
                    "gemms": list(gemms) if gemms else None,
                    "severity": found.severity,
                }
            )
        present = [(run, cell) for run, cell in zip(runs, cells, strict=True) if cell is not None]
        shown = {(cell["logged"] == BF16, cell["recommended"], tuple(cell["gemms"] or ())) for _, cell in present}
        rows.append(
            {
                "name": name,
                "group": some.group,
                "index": some.index,
                "sublayer": some.sublayer,
                "cells": cells,
                "differs": len(present) < len(runs) or len(shown) > 1,
                # outside the run's plain recipe in some run: ran in BF16, or recommended another precision
                "notable": any(
                    cell["logged"] == BF16 or (run.policy is not None and cell["recommended"] != run.policy.recipe)
                    for run, cell in present
                ),
            }
        )
    return rows


def _focus(runs: Sequence[RunVerdict], layers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the overlay shows first: the worst run's focus (its worst layer, tensor and stat) among the layers the
    most runs have; else the first layer the most runs (at least two) have, gradient underflows%."""
    coverage = {row["name"]: sum(cell is not None for cell in row["cells"]) for row in layers}
    ranked = sorted(runs, key=lambda run: -_SEVERITY_ORDER.index(run.severity))
    candidates = [run.focus for run in ranked if run.focus and run.focus.get("layer") in coverage]
    if candidates:
        best = max(candidates, key=lambda focus: coverage[focus["layer"]])
        return {"layer": best["layer"], "tensor": best["tensor"], "stat": best["stat"]}
    most = max(coverage.values(), default=0)
    common = next((row["name"] for row in layers if coverage[row["name"]] == most), None) if most >= 2 else None
    return {"layer": common, "tensor": "gradient", "stat": "underflows%"} if common else None


# ------------------------------------------------------------------------------------------------ sentences
def _sentences(
    runs: Sequence[RunVerdict], table: list[dict[str, Any]], layers: list[dict[str, Any]], common: int
) -> list[str]:
    rows = {row["key"]: row for row in table}
    out = []
    coverage = [sum(cell is not None for cell in row["cells"]) for row in layers]
    shared = sum(1 for n in coverage if n >= 2)
    if not shared:
        out.append(
            f"incomparable: no two of the {len(runs)} runs have a layer in common (layers match by exact name), so "
            "the per-layer rows compare nothing"
        )
    elif not common:
        most = max(coverage)
        groups = _sharing_groups(runs, layers, most)
        out.append(
            f"layers match by exact name: no layer is in all {len(runs)} runs; {shared} layer(s) are in 2 or more "
            f"runs and are compared where present (most shared: {most} runs, {groups})"
        )
    elif any(None in row["cells"] for row in layers):
        partial = sum(1 for row in layers if None in row["cells"])
        out.append(f"layers match by exact name: {common} in every run, {partial} only in some")
    out.append(_grouped("verdict", [run.severity for run in runs], runs))
    recipes = [v["label"] if v else None for v in rows["recipe"]["values"]]
    if any(recipes):
        out.append(_grouped("recommended recipe", recipes, runs))
    differing = [row for row in layers if row["differs"] and None not in row["cells"]]
    if differing:
        out.append(f"{len(differing)} layer(s) in every run are logged or recommended at different precisions")
    elif common:
        out.append("every layer the runs share gets the same precision in each run's recommendation")
    missing = [run.label for run in runs if run.policy is None]
    if missing:
        out.append(f"no recommendation for {', '.join(missing)}")
    return out


def _sharing_groups(runs: Sequence[RunVerdict], layers: list[dict[str, Any]], most: int) -> str:
    """'26 layer(s) in #1, #2, #3': the run sets that share the most layers, largest first."""
    present = [tuple(f"#{r.run_id}" for r, c in zip(runs, row["cells"], strict=True) if c) for row in layers]
    sets = Counter(ids for ids in present if len(ids) == most)
    return "; ".join(f"{n} layer(s) in {', '.join(ids)}" for ids, n in sets.most_common())


def _grouped(what: str, values: list[str | None], runs: Sequence[RunVerdict]) -> str:
    groups: dict[str, list[str]] = {}
    for value, run in zip(values, runs, strict=True):
        groups.setdefault(value or "none", []).append(f"#{run.run_id}")
    if len(groups) == 1:
        return f"{what}: {next(iter(groups))} in " + ("both runs" if len(runs) == 2 else f"all {len(runs)} runs")
    return f"{what}s differ: " + "; ".join(f"{value} ({', '.join(ids)})" for value, ids in groups.items())


# ------------------------------------------------------------------------------------------------ helpers
def _set(value: Any) -> Any:
    return None if value is None else frozenset(value)


def _rounded(digits: int) -> Callable[[Any], Any]:
    return lambda value: None if value is None else round(float(value), digits)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
