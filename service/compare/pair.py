"""Compare two runs: per-layer and per-group change of the underflow stats, precision changes, findings that
appeared or disappeared, summary sentences — and the two heatmaps side by side on one colour scale.

Layers match by exact name. A layer's key stats are the analysis table's underflows% of gradient, activation
and weight (level, max, mean, last; worst rank). A group's value is the mean of its layers' levels, over the
layers observed in both runs when there are any (a fair before/after), else over each run's own layers.
Relative change = (head − base) / base, only above the noise floor (policy/compare/changes.py; below it the change
is in absolute points). "moved to BF16" comes from the layers' status changing to `bf16`. Runs with no layer in
common are `comparable: false`, said first. Problems that followed a moved BF16 boundary, and the two runs'
recommendations (the head's with the base as its history), come from `policy.compare`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Run
from fp8_policy.policy.analysis import Analysis, Finding, LayerAssessment
from fp8_policy.policy.analysis.findings import NOT_ASSESSED
from fp8_policy.policy.compare import moved_problems
from fp8_policy.policy.compare.changes import change as noise_floor_change
from fp8_policy.policy.compare.recommendations import compare_recommendations
from fp8_policy.policy.recommend import POLICY_VERSION, History, RecommendOptions, recommend
from fp8_policy.policy.records import RunData
from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service import lanes
from fp8_policy.service.analysis.actions import load_and_analyze
from fp8_policy.service.runs.actions import get_ready_run
from fp8_policy.service.visual.actions import build_panel, plan_render, style_for
from fp8_policy.service.visual.job import Rendered, RenderJob, render_job
from fp8_policy.service.visual.marks import run_identity
from fp8_policy.service.visual.params import HeatmapParams
from fp8_policy.service.visual.sentences import summary_sentences

TENSORS = ("gradient", "activation", "weight")
STATS = ("level", "max", "mean", "last")
GROUPS = ("embedding", "body", "other", "head")


def compare_runs(session: Session, base_id: int, head_id: int, thresholds: Thresholds) -> dict[str, Any]:
    """Both runs analysed and recommended for now, in one turn of the analysis lane (service/lanes.py; a run
    that is missing or not ready is refused before)."""
    base_run, head_run = get_ready_run(session, base_id), get_ready_run(session, head_id)
    with lanes.ANALYSIS.turn():
        return _compare_runs(session, base_run, head_run, thresholds)


def _compare_runs(session: Session, base_run: Run, head_run: Run, thresholds: Thresholds) -> dict[str, Any]:
    base_id, head_id = base_run.id, head_run.id
    base_data, base = load_and_analyze(session, base_id, thresholds)
    head_data, head = load_and_analyze(session, head_id, thresholds)
    body = compare_analyses(base, head)
    body["base"] = {"id": base_run.id, "name": base_run.name}
    body["head"] = {"id": head_run.id, "name": head_run.name}
    body["recommendations"] = (
        _recommendations(base_data, base, head_data, head, base_run.id, thresholds) if body["comparable"] else None
    )
    body["summary"] = summary_sentences(body)
    return body


def _recommendations(
    base_data: RunData, base: Analysis, head_data: RunData, head: Analysis, base_id: int, thresholds: Thresholds
) -> dict[str, Any]:
    """Both runs' recommendations (each from its own metadata, the compare's thresholds); the head's takes the base
    run as its history."""
    rec_base = recommend(
        base_data, base, replace(RecommendOptions.from_metadata(base_data.metadata), thresholds=thresholds)
    )
    rec_head = recommend(
        head_data,
        head,
        replace(RecommendOptions.from_metadata(head_data.metadata), thresholds=thresholds),
        History(base, base_id),
    )
    out = compare_recommendations(rec_base, rec_head)
    out["head_history"] = rec_head.history.to_dict() if rec_head.history is not None else None
    return out


def compare_analyses(base: Analysis, head: Analysis) -> dict[str, Any]:
    a = {row.name: row for row in base.layers if row.status != "ignored"}
    b = {row.name: row for row in head.layers if row.status != "ignored"}
    names = list(a) + [name for name in b if name not in a]
    layers = [_layer(name, a.get(name), b.get(name)) for name in names]
    only_base, only_head = [n for n in a if n not in b], [n for n in b if n not in a]
    appeared, disappeared = _finding_changes(base.findings, head.findings)
    notes = []
    common = len(a) - len(only_base)
    if not common:
        notes.append(
            f"incomparable: the runs have no layer in common ({len(a)} layer(s) in base, {len(b)} in head; "
            "layers match by exact name), so no change below is meaningful"
        )
    elif only_base or only_head:
        notes.append(f"layers match by exact name: {len(only_base)} only in base, {len(only_head)} only in head")
    moved = moved_problems(base, head) if common else []
    return {
        "comparable": bool(common),
        "common_layers": common,
        "moved_problems": [m.to_dict() for m in moved],
        "layers": layers,
        "groups": [
            _group(group, [layer for layer in layers if layer["group"] == group])
            for group in GROUPS
            if any(layer["group"] == group for layer in layers)
        ],
        "precision_changes": [
            {"layer": layer["name"], "group": layer["group"], **layer["status"]}
            for layer in layers
            if layer["status_changed"]
        ],
        "findings_appeared": [_finding(f) for f in appeared],
        "findings_disappeared": [_finding(f) for f in disappeared],
        "unmatched": {"only_in_base": only_base, "only_in_head": only_head},
        "notes": notes,
    }


def compare_image(session: Session, base_id: int, head_id: int, params: HeatmapParams, fmt: str) -> Rendered:
    return render_job(compare_job(session, base_id, head_id, params, fmt))


def compare_job(
    session: Session, base_id: int, head_id: int, params: HeatmapParams, fmt: str, max_pixels: int | None = None
) -> RenderJob:
    runs = [get_ready_run(session, base_id), get_ready_run(session, head_id)]
    panels = [
        build_panel(session, run, params, title=f"{side} · {run.name or f'run {run.id}'}")
        for side, run in zip(("base", "head"), runs, strict=True)
    ]
    style = style_for(params, [panel.matrix for panel in panels])  # one vmax for both
    return plan_render(panels, style, params, fmt, max_pixels)


def compare_cache_key(
    session: Session, base_id: int, head_id: int, params: HeatmapParams, fmt: str
) -> tuple[object, ...]:
    runs = tuple(run_identity(session, get_ready_run(session, run_id)) for run_id in (base_id, head_id))
    return ("compare", runs, params, fmt, POLICY_VERSION)


def change(base: float | None, head: float | None) -> dict[str, float | bool | None]:
    """Before/after with the noise floor of policy/compare/changes.py (`relative` None below it)."""
    return noise_floor_change(base, head)


def _layer(name: str, a: LayerAssessment | None, b: LayerAssessment | None) -> dict[str, Any]:
    some = a or b
    assert some is not None
    stats = {
        tensor: {stat: change(_stat(a, tensor, stat), _stat(b, tensor, stat)) for stat in STATS} for tensor in TENSORS
    }
    status = {"base": a.status if a else None, "head": b.status if b else None}
    return {
        "name": name,
        "group": some.group,
        "index": some.index,
        "sublayer": some.sublayer,
        "in": "both" if a and b else "base" if a else "head",
        "precision": {"base": a.precision if a else None, "head": b.precision if b else None},
        "status": status,
        "status_changed": bool(a and b and status["base"] != status["head"]),
        "severity": {"base": _verdict(a), "head": _verdict(b)},
        "stats": stats,
    }


def _verdict(row: LayerAssessment | None) -> str | None:
    """The layer's verdict in one run; None when it is not in the run or nothing of it was assessed (n/a)."""
    return row.severity.value if row is not None and row.verdict != NOT_ASSESSED else None


def _group(group: str, layers: list[dict[str, Any]]) -> dict[str, Any]:
    stats = {}
    for tensor in TENSORS:
        levels = [
            (layer["stats"][tensor]["level"]["base"], layer["stats"][tensor]["level"]["head"]) for layer in layers
        ]
        both = [(x, y) for x, y in levels if x is not None and y is not None]
        if both:
            base, head, basis = _mean([x for x, _ in both]), _mean([y for _, y in both]), "both"
        else:
            base, head, basis = (
                _mean([x for x, _ in levels if x is not None]),
                _mean([y for _, y in levels if y is not None]),
                "each",
            )
        stats[tensor] = {**change(base, head), "layers": len(both) if both else None, "basis": basis}
    moved = [layer["name"] for layer in layers if layer["status_changed"] and layer["status"]["head"] == "bf16"]
    back = [layer["name"] for layer in layers if layer["status_changed"] and layer["status"]["base"] == "bf16"]
    return {
        "group": group,
        "layers": len(layers),
        "moved_to_bf16": moved,
        "moved_to_fp8": back,
        "bf16": {
            "base": sum(layer["status"]["base"] == "bf16" for layer in layers),
            "head": sum(layer["status"]["head"] == "bf16" for layer in layers),
        },
        "stats": stats,
    }


def _finding_changes(base: list[Finding], head: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    def key(finding: Finding) -> tuple[str, frozenset[str]]:
        return finding.pattern.value, frozenset(finding.layers)

    base_keys, head_keys = {key(f) for f in base}, {key(f) for f in head}
    return [f for f in head if key(f) not in base_keys], [f for f in base if key(f) not in head_keys]


def _finding(finding: Finding) -> dict[str, Any]:
    return finding.brief()


def _stat(row: LayerAssessment | None, tensor: str, stat: str) -> float | None:
    summary = row.underflows.get(tensor) if row else None
    return getattr(summary, stat) if summary else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
