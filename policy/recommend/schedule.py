"""Precision that changes over a run: a schedule of phases, each a whole policy from a step on.

Belongs here: when a recommendation becomes a schedule, the phase decisions, their JSON and the header lines that
name a rendered phase. Must not be here: the final plan (skiplist.py), rendering a dialect (policy/render/).

Why phases: TE's Disable* debug features have no start step (transformer_engine/debug/features/
disable_quantization_gemm.py takes only `enabled` and `gemms`), Megatron's precision config and a CustomRecipe apply
from the start: a change of precision in the middle of a run is a restart from a checkpoint with another
configuration. The recommendation's own policy (`fp8_skip_layers`, ...) stays what the analysed run needs by its last
step; the schedule says when the cheaper or the safer configuration holds:
* Late failures (a `rising_trend` series that crossed critical during the run): layers whose every failing tensor
  only crossed late run at the outer recipe until the earliest crossing of those series (phase 0), then the
  recommendation (phase 1, a restart). Not when it crossed in the first `EARLY_SHARE` of the logged span.
* Projected failures (a rising series still below critical, projected to cross it; the plan only watches it): a
  later phase from the projected crossing keeps those layers in BF16 (one rising tensor of three logged: its GEMMs
  only, as the skip list does); its triggers are what a live run watches to raise `switch_now` (live_switch.py).
* The learning-rate schedule: its decay start read from the `lr` of the run's scalars.jsonl (uploaded, or streamed
  live; policy/parse/lr_schedule.py), else `lr_decay_start` (option or run metadata), the phase's reason saying which:
  with NVFP4 layers, a phase from the decay start runs their fprop in BF16 (the NVFP4 pretraining paper, arXiv
  2509.25149, App. D: switching to higher precision shortly before the decay recovers most of the gap; torchtitan's
  NVFP4 notes prefer the forward pass). Its JSON says `lr_decay: true`: a live run given the schedule that streams
  its lr switches when its own curve shows the decay (policy/live/switch.py).
Phases accumulate their changes in step order; a step already covered by an earlier phase merges with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fp8_policy.policy.analysis.findings import Pattern
from fp8_policy.policy.analysis.result import Analysis
from fp8_policy.policy.records import GEMMS, QUANTIZED_TENSORS, TENSOR_GEMMS, GemmOverride, LayerPrecision
from fp8_policy.policy.records import PolicyDecision as Decision
from fp8_policy.policy.render import precision, render
from fp8_policy.policy.render.options import RenderedPolicy, RenderOptions

EARLY_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Trigger:
    """A live run switches when this series reaches `level` (underflows%, the layer's critical band)."""

    layer: str
    tensor: str
    level: float

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "tensor": self.tensor, "stat": "underflows%", "level": round(self.level, 4)}


@dataclass(frozen=True, slots=True)
class Phase:
    from_step: int
    decision: Decision
    reason: str
    triggers: tuple[Trigger, ...] = ()
    lr_decay: bool = False  # starts at the LR decay: a live run streaming its lr switches when the decay shows

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        rungs = precision.ladder(d)
        return {
            "from_step": self.from_step,
            "restart": self.from_step > 0,
            "reason": self.reason,
            "policy": {
                "fp8_skip_layers": list(d.skip_layers),
                "gemm_overrides": [{"layer": o.layer, "gemms": list(o.gemms)} for o in d.gemm_overrides],
                "layer_precisions": {n: r for n, r in rungs.items() if r != d.recipe.name},
            },
            "triggers": [t.to_dict() for t in self.triggers],
            "lr_decay": self.lr_decay,
        }


def build_schedule(
    analysis: Analysis, decision: Decision, lr_decay_start: int | None = None, lr_from_scalars: int | None = None
) -> tuple[Phase, ...]:
    """The phases (module docstring); empty when the recommendation holds for the whole run. `lr_from_scalars`:
    the decay start the run's scalars.jsonl lr curve shows (uploaded, or streamed by a live run and read at its
    ingest; policy/parse/lr_schedule.py), used before `lr_decay_start` (the option / run metadata)."""
    lr_step, lr_source = lr_decay(lr_from_scalars, lr_decay_start)
    trends = [ev for f in analysis.by_pattern(Pattern.RISING_TREND) for ev in f.evidence]
    levels = analysis.layout.levels
    critical = {n: lv.bands(analysis.thresholds).critical for n, lv in levels.items()}
    span = analysis.signals.last_iteration - analysis.signals.first_iteration
    early = analysis.signals.first_iteration + EARLY_SHARE * span
    changes: list[tuple[int, str, Any]] = []  # (step, kind, payload)
    late = _late_layers(decision, trends, critical, early)
    if late:
        changes.append((min(late.values()), "late", set(late)))
    watched = [ev for ev in trends if (ev.level or 0.0) < critical.get(ev.layer, 0.0) and ev.crossing_iteration]
    watched = [ev for ev in watched if ev.crossing_iteration > analysis.signals.last_iteration]  # type: ignore[operator]
    if watched:
        changes.append((min(int(ev.crossing_iteration or 0) for ev in watched), "projected", watched))
    fp4 = [n for n, r in precision.layer_recipes(decision).items() if r == "nvfp4"]
    if decision.recipe.name == "nvfp4":
        fp4 = [n for n, r in precision.precision_of(decision).items() if r == "nvfp4"]
    if lr_step is not None and fp4:
        changes.append((lr_step, "lr", fp4))
    if not changes:
        return ()
    start = _without(decision, set(late)) if late else decision
    phases = [Phase(0, start, "the first configuration")]
    current = start
    for step, kind, payload in sorted(changes, key=lambda c: c[0]):
        if kind == "late":
            current, reason = (
                _with_late(current, decision, payload),
                (f"{len(payload)} layer(s) fine early fail late (rising_trend): BF16 from where they crossed critical"),
            )
            triggers: tuple[Trigger, ...] = ()
        elif kind == "projected":
            current = _with_projected(current, payload, levels)
            reason = f"{len(payload)} rising series projected to cross critical here: those layers go BF16"
            triggers = tuple(Trigger(ev.layer, ev.tensor, critical.get(ev.layer, 0.0)) for ev in payload)
        else:
            current = _with_fprop_bf16(current, payload)
            reason = f"LR decay starts ({lr_source}): fprop of {len(payload)} NVFP4 layer(s) in BF16"
            triggers = ()
        at_lr = kind == "lr"
        if phases[-1].from_step >= step:
            last = phases[-1]
            phases[-1] = Phase(last.from_step, current, f"{last.reason}; {reason}", triggers, last.lr_decay or at_lr)
        else:
            phases.append(Phase(step, current, reason, triggers, at_lr))
    return tuple(phases)


def lr_decay(from_scalars: int | None, given: int | None) -> tuple[int | None, str]:
    """(decay start, which source gave it): the run's scalars.jsonl lr curve (uploaded or streamed live) first,
    else `lr_decay_start`."""
    if from_scalars is not None:
        unused = f"; lr_decay_start {given} given, not used" if given is not None and given != from_scalars else ""
        return from_scalars, f"detected in the run's scalars.jsonl lr curve{unused}"
    if given is not None:
        return given, "lr_decay_start option / run metadata; no lr decay in the run's scalars"
    return None, ""


def _late_layers(decision: Decision, trends: list[Any], critical: dict[str, float], early: float) -> dict[str, int]:
    """Layers in the BF16 set whose failing series all crossed critical late: layer -> its switch step."""
    crossed: dict[str, int] = {}
    for ev in trends:
        if (ev.level or 0.0) >= critical.get(ev.layer, float("inf")):
            step = ev.crossing_iteration
            if step is not None and step > early:
                crossed[ev.layer] = min(crossed.get(ev.layer, step), int(step))
    bf16 = {*decision.skip_layers, *(o.layer for o in decision.gemm_overrides)}
    return {name: step for name, step in crossed.items() if name in bf16}


def _without(decision: Decision, layers: set[str]) -> Decision:
    outer = decision.recipe.name
    note = f"Phase 0: runs at {outer} until its switch step (its underflow rose late)."
    return replace(
        decision,
        skip_layers=tuple(n for n in decision.skip_layers if n not in layers),
        gemm_overrides=tuple(o for o in decision.gemm_overrides if o.layer not in layers),
        layer_precisions=tuple(
            LayerPrecision(lp.layer, outer, (note, *lp.evidence), lp.confidence) if lp.layer in layers else lp
            for lp in decision.layer_precisions
        ),
    )


def _with_late(current: Decision, final: Decision, layers: set[str]) -> Decision:
    return replace(
        current,
        skip_layers=tuple(dict.fromkeys((*current.skip_layers, *(n for n in final.skip_layers if n in layers)))),
        gemm_overrides=(*current.gemm_overrides, *(o for o in final.gemm_overrides if o.layer in layers)),
        layer_precisions=tuple(
            next((f for f in final.layer_precisions if f.layer == lp.layer), lp) if lp.layer in layers else lp
            for lp in current.layer_precisions
        ),
    )


def _with_projected(current: Decision, evidence: list[Any], levels: dict[str, Any]) -> Decision:
    rising: dict[str, set[str]] = {}
    for ev in evidence:
        rising.setdefault(ev.layer, set()).add(ev.tensor)
    skips, overrides = list(current.skip_layers), list(current.gemm_overrides)
    for layer, tensors in rising.items():
        lv = levels.get(layer)
        if len(tensors) == 1 and lv is not None and len(lv.tensors) == len(QUANTIZED_TENSORS):
            gemms = TENSOR_GEMMS[next(iter(tensors))]
            overrides.append(GemmOverride(layer, tuple(g for g in GEMMS if g in gemms), "projected to cross critical"))
        elif layer not in skips:
            skips.append(layer)
    return replace(current, skip_layers=tuple(skips), gemm_overrides=tuple(overrides))


def _with_fprop_bf16(current: Decision, layers: list[str]) -> Decision:
    kept = set(precision.kept_layers(current))
    extra = tuple(GemmOverride(n, ("fprop",), "LR decay: fprop in BF16") for n in layers if n not in kept)
    return replace(current, gemm_overrides=(*current.gemm_overrides, *extra))


def header(phases: tuple[Phase, ...], index: int) -> list[str]:
    """Comment lines naming a rendered phase and the whole schedule."""
    phase = phases[index]
    steps = ", ".join(f"phase {k} from step {p.from_step}" for k, p in enumerate(phases))
    lines = [f"# Schedule phase {index} of {len(phases) - 1}: from step {phase.from_step} ({phase.reason})."]
    if phase.from_step:
        lines.append(f"# Restart from the checkpoint at step {phase.from_step} with this configuration.")
    lines.append(f"# The schedule: {steps} (each phase a configuration of its own; ?phase=K renders phase K).")
    return lines


def with_header(rendered: RenderedPolicy, lines: list[str]) -> RenderedPolicy:
    """`rendered` with comment `lines` first (after a shebang line; every format's comments start with `#`)."""
    text = rendered.content
    head, _, rest = text.partition("\n") if text.startswith("#!") else ("", "", text)
    content = "\n".join([*([head] if head else []), *lines, rest])
    return replace(rendered, content=content)


def render_phase(
    phases: tuple[Phase, ...], index: int, fmt: str, options: RenderOptions | None = None
) -> RenderedPolicy:
    """Phase `index` rendered as `fmt` (with `options`: a pipeline stage's file), its header naming the phase and
    the restart step; IndexError if none."""
    if not 0 <= index < len(phases):
        raise IndexError(f"the recommendation has no phase {index}: its schedule has {len(phases)} phase(s)")
    rendered = render(phases[index].decision, fmt, options)
    stem, dot, suffix = rendered.filename.rpartition(".")
    named = replace(
        rendered, filename=f"{stem}.phase{index}{dot}{suffix}" if dot else f"{rendered.filename}.phase{index}"
    )
    return with_header(named, header(phases, index))


def schedule_note(phases: tuple[Phase, ...]) -> list[str]:
    """The line a rendering of the recommendation's own policy carries when it is one phase of a schedule."""
    if not phases:
        return []
    steps = ", ".join(f"phase {k} from step {p.from_step}" for k, p in enumerate(phases))
    return [
        f"# This policy is what the analysed run needs by its last step; the recommendation also has a schedule: "
        f"{steps} (each a restart with its own configuration; ?phase=K or --phase K renders phase K)."
    ]
