"""Which layers go to BF16 and which GEMMs get overridden: the smallest change that leaves every FP8 layer < critical.

Rules:
* Only observed FP8 layers with a tensor at or above `critical` change (under the levels of the recipe that will
  run: what-if levels after a recipe switch when they were logged, each judged with the band of the recipe it
  measures: `critical_of`; an NVFP4 run switched to an FP8 recipe judges its FP8 what-ifs with FP8's 2 %, not
  NVFP4's 13 %). Healthy layers are never touched.
* Exactly one failing tensor, all three logged → a GEMM override of that tensor's GEMMs (activation → fprop+wgrad,
  gradient → dgrad+wgrad, weight → fprop+dgrad); the GEMM left in FP8 uses only the two passing tensors, so the
  layer ends below critical. Two or more failing tensors (their GEMMs cover all three) → skip the whole layer.
* Whole blocks for Megatron: in a block of the contiguous first/last run of blocks whose FP8 layers are all
  skipped or overridden, with at least one whole-layer skip, the overrides are promoted to skips, so
  `--first-last-layers-bf16` expresses the block. Blocks fixed by overrides alone keep their overrides.
* `deferred`: with a `uniform` finding and a recipe change without what-if evidence, nothing is skipped: the new
  recipe must be measured first (a huge skip list is not the fix).
* Layers that already ran in BF16 (`kept_bf16`) are not part of the smallest set; they are listed in
  `skip_layers` only with `keep_existing_bf16`. Megatron flags, cost and the delayed-scaling rule still count
  them: with no FP8 evidence for them, they are assumed to stay in BF16.
* Rising-trend layers below critical are only watched, unless `skip_projected` asks to treat them as failing.
* `lifted`: layers failing NVFP4 under an NVFP4 recipe that the precision ladder lifts to an FP8 rung
  (recommend/ladder.py, the lift rule) are not skipped: they run at that rung, which every output renders.
* `sensitive` (recommend/sensitive_plan.py): with loss-sensitivity statistics, an underflow-only failure whose
  sensitivity is negligible is kept, and a layer below the band whose sensitivity is high gets its sensitive GEMMs
  (or the whole layer) in BF16, and a one-tensor underflow override is widened to the GEMMs whose sensitivity is
  high; each said in `sensitivity_notes`.
* A tensor the analysis could not assess (its `unassessed` verdict: scale_inv stuck at 1.0, no point after warm-up)
  whose raw underflows% is at or above critical fails too; with no level to re-measure under another recipe, its
  layer is skipped whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.layout import LayerLevels, LayerStatus, Layout
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.recommend.sensitive_plan import SensitivePlan
from fp8_policy.policy.records import GEMMS, QUANTIZED_TENSORS, TENSOR_GEMMS, GemmOverride
from fp8_policy.policy.thresholds import Severity

LevelFn = Callable[[LayerLevels, str], float]


@dataclass(frozen=True, slots=True)
class Bands:
    """How a plan judges levels other than the analysis' own (a recipe switch): the critical band of each
    (layer, tensor) level, the band of the recommended recipe (`critical`), and one line saying so."""

    critical_of: LevelFn
    critical: float
    text: str


@dataclass(frozen=True, slots=True)
class SkipPlan:
    skip_layers: tuple[str, ...]  # failing skips (+ kept BF16 layers with keep_existing_bf16), in run order
    failing_skips: tuple[str, ...]  # skipped because failing now
    kept_bf16: tuple[str, ...]  # already BF16 in the run (assumed to stay BF16)
    overrides: tuple[GemmOverride, ...]
    watch: tuple[str, ...]  # rising trends left in FP8
    deferred: tuple[str, ...] = ()  # failing layers left to a recipe change
    lifted: tuple[str, ...] = ()  # failing NVFP4 layers the ladder lifts to an FP8 rung instead of BF16
    critical: float | None = None  # the band the levels were judged with when not the analysis' (a recipe switch)
    band: str = ""  # which levels and band, when not the analysis' own (said in the rationale and evidence)
    failing_levels: tuple[tuple[str, str], ...] = ()  # (skipped layer, its failing tensors and levels as judged)
    sensitivity_notes: tuple[tuple[str, str], ...] = ()  # (layer, what loss sensitivity changed for it)

    @property
    def bf16_layers(self) -> tuple[str, ...]:
        """Every layer fully in BF16 under the plan: skips plus layers already in BF16."""
        return tuple(dict.fromkeys((*self.skip_layers, *self.kept_bf16)))


def current_level(lv: LayerLevels, tensor: str) -> float:
    return lv.tensors[tensor].level


def plan_skips(
    analysis: Analysis,
    *,
    levels: LevelFn = current_level,
    defer: bool = False,
    keep_existing_bf16: bool = False,
    skip_projected: bool = False,
    no_promote: frozenset[str] = frozenset(),
    lifted: frozenset[str] = frozenset(),
    bands: Bands | None = None,
    sensitive: SensitivePlan | None = None,
) -> SkipPlan:
    """The plan (module docstring); blocks holding a `no_promote` layer never become whole BF16 blocks (a problem
    that followed a moved BF16 boundary: see recommend/history.py); `lifted` layers are left to their FP8 rung;
    `bands` judges `levels` with the recommended recipe's band (default: the analysis' own critical band)."""
    layout = analysis.layout
    run_bands = analysis.thresholds  # a mixed-format run's layer of the other format has its own (layout.py)
    critical_of: LevelFn = bands.critical_of if bands is not None else (lambda lv, t: lv.bands(run_bands).critical)
    trending = _trending(analysis)
    boundary = {name for f in analysis.by_pattern(Pattern.BOUNDARY) for name in f.layers}
    skips: list[str] = []
    overrides: list[GemmOverride] = []
    deferred: list[str] = []
    unassessed = _unassessed_failing(analysis)
    detail: dict[str, str] = {}
    notes: list[tuple[str, str]] = []

    def out_of_low_precision(layer: str, gemms: tuple[str, ...], reason: str, why: str | None = None) -> None:
        """Sensitivity's verdict placed: a GEMM override for some GEMMs, the skip list for all three."""
        if len(gemms) < len(GEMMS):
            overrides.append(GemmOverride(layer, gemms, reason))
        else:
            skips.append(layer)
            detail[layer] = why or reason

    for lv in layout.fp8():
        if lv.name in lifted:
            continue
        failing = [
            t
            for t in lv.tensors
            if levels(lv, t) >= critical_of(lv, t) or (skip_projected and (lv.name, t) in trending)
        ]
        raw = [t for t in unassessed.get(lv.name, ()) if t not in failing]
        adjustment = sensitive.adjust(lv.name, failing, raw) if sensitive is not None and not defer else None
        if adjustment is not None:
            notes.append((lv.name, adjustment.note))
            if adjustment.kind == "sensitive":
                out_of_low_precision(lv.name, adjustment.gemms, adjustment.note)
            continue
        if not failing and not raw:
            continue
        if defer:
            deferred.append(lv.name)
        elif not raw and len(failing) == 1 and len(lv.tensors) == len(QUANTIZED_TENSORS):
            override = _override(lv, failing[0], levels, lv.name in boundary, bands)
            widened = sensitive.widen(lv.name, override.gemms) if sensitive is not None else None
            if widened is None:
                overrides.append(override)
            else:
                notes.append((lv.name, widened.note))
                why = f"{failing[0]} {levels(lv, failing[0]):.2f}%; {widened.note}"
                out_of_low_precision(lv.name, widened.gemms, f"{override.reason}. {widened.note}", why)
        else:
            skips.append(lv.name)
            parts = [f"{t} {levels(lv, t):.2f}%" for t in failing] + [f"{t} unassessed" for t in raw]
            detail[lv.name] = ", ".join(parts)
    skips, overrides = _whole_edge_blocks(layout, skips, overrides, no_promote)
    kept = [lv.name for lv in layout.levels.values() if lv.status is LayerStatus.BF16]
    order = {name: i for i, name in enumerate(layout.levels)}
    skip_layers = sorted({*skips, *(kept if keep_existing_bf16 else ())}, key=order.__getitem__)
    watch = sorted(
        {name for name, _ in trending} - set(skips) - {o.layer for o in overrides},
        key=lambda name: order.get(name, len(order)),
    )
    return SkipPlan(
        tuple(skip_layers),
        tuple(skips),
        tuple(kept),
        tuple(overrides),
        tuple(watch),
        tuple(deferred),
        tuple(name for name in layout.levels if name in lifted),
        bands.critical if bands is not None else None,
        bands.text if bands is not None else "",
        tuple((name, detail[name]) for name in skips if name in detail) if bands is not None else (),
        tuple(notes),
    )


def _unassessed_failing(analysis: Analysis) -> dict[str, list[str]]:
    """layer -> tensors whose underflows% was not assessed but whose raw values are at or above critical."""
    return {
        row.name: tensors
        for row in analysis.layers
        if (
            tensors := [
                v.tensor
                for v in row.series
                if v.stat == "underflows%"
                and not v.assessed
                and v.reason != "non-finite"
                and v.severity >= Severity.CRITICAL
            ]
        )
    }


def _trending(analysis: Analysis) -> set[tuple[str, str]]:
    return {(ev.layer, ev.tensor) for f in analysis.by_pattern(Pattern.RISING_TREND) for ev in f.evidence}


def _override(
    lv: LayerLevels, tensor: str, levels: LevelFn, on_boundary: bool, bands: Bands | None = None
) -> GemmOverride:
    gemms = tuple(g for g in GEMMS if g in TENSOR_GEMMS[tensor])
    others = ", ".join(f"{t} {levels(lv, t):.2f}%" for t in lv.tensors if t != tensor)
    reason = f"only {tensor} underflows% fails ({levels(lv, tensor):.2f}%; {others})"
    if bands is not None:
        reason += f" under {bands.text}"
    if on_boundary:
        reason += "; last FP8 layer next to a BF16 block (boundary effect)"
    return GemmOverride(lv.name, gemms, reason)


def _whole_edge_blocks(
    layout: Layout, skips: list[str], overrides: list[GemmOverride], no_promote: frozenset[str] = frozenset()
) -> tuple[list[str], list[GemmOverride]]:
    """Promote overrides to skips in first/last-run blocks already partly skipped and otherwise overridden."""
    touched = set(skips) | {o.layer for o in overrides}
    held = {layout.levels[name].block for name in no_promote if name in layout.levels}
    members: dict[int, list[str]] = {}
    for lv in layout.levels.values():
        if lv.block is not None and lv.status in (LayerStatus.FP8, LayerStatus.UNOBSERVED):
            members.setdefault(lv.block, []).append(lv.name)
    skipped = set(skips)
    covered = [
        b
        for b in layout.blocks
        if layout.block_status.get(b) == "bf16"
        or (b in members and b not in held and set(members[b]) <= touched and not skipped.isdisjoint(members[b]))
    ]
    edge = set(_leading_run(layout.blocks, covered)) | set(_leading_run(layout.blocks[::-1], covered))
    promote = {name for b in edge for name in members.get(b, ())}
    kept = [o for o in overrides if o.layer not in promote]
    extra = [o.layer for o in overrides if o.layer in promote]
    return [*skips, *extra], kept


def _leading_run(ordered: list[int], covered: list[int]) -> list[int]:
    run = []
    for block in ordered:
        if block not in covered:
            break
        run.append(block)
    return run
