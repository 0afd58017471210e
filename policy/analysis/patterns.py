"""Layer-pattern detectors on per-layer underflow levels: uniform, boundary, positional, single_tensor, healthy.

Rules (a layer fails when one of its tensors' level is at or above `critical`):
* `uniform`: more than `uniform_fraction` of the observed FP8 layers fail (at least `uniform_min_layers`
  observed), and so do more than `uniform_fraction` of those in the middle blocks (outside the first and last
  `edge` blocks; skipped when there is no middle), and the layers fail together: in more than half of the body's
  sublayer kinds (qkv, proj, fc1, ...; when it has two or more) more than `uniform_fraction` of that kind's layers
  fail. Failures concentrated at the ends stay positional (a wide U-shape is a layer problem), failures confined to
  one or two kinds (every fc1's gradient under NVFP4) are a problem of those layers, answered per layer (skips,
  overrides, the ladder's lift), not by a recipe change for the whole model. It replaces the positional and
  single_tensor findings: it is a recipe problem.
* `boundary`: an FP8 layer whose block neighbours a BF16 block (or, for the last block, a BF16 head) has a tensor
  at or above `warning`, exceeding its peers' median (same tensor and sublayer, away from any boundary) by
  `warning` and by the factor `boundary_ratio`, and degrading: rising by `trend_min_rise` from the first to the
  last third of the run, or already critical. Boundary layers are left out of the positional patterns. A
  mixed-format run's layer is judged with its own format's bands against peers of its own format.
* Positional groups are anchored at the ends: the start group is every failing block in the first `edge` blocks
  plus failing blocks contiguous with them (and failing embeddings); the end group likewise from the last block.
  Start and end (or heads) → `u_shape`; start only → `early_layers`; end (with or without heads) → `late_layers`;
  heads only → `head_only`.
* MoE and module kinds (module_kinds.py), before the positional groups: a routed expert standing out from its
  sibling experts is an `expert_outlier`; one module kind failing in (nearly) every block while the others stay
  healthy is `module_kind` ("shared experts fail in every block"), not a depth pattern.
* The rest are isolated failures. Those a late-onset `rising_trend` explains are left alone; the others with
  exactly one failing tensor (all three logged) are `single_tensor`; any remaining multi-tensor failures are
  reported by halves of the body as `early_layers` / `late_layers`.
* `healthy` is built by `analyze()` only when no detector found anything.
"""

from __future__ import annotations

from fp8_policy.policy.analysis.findings import Evidence, Finding, Pattern
from fp8_policy.policy.analysis.layout import LayerLevels, Layout
from fp8_policy.policy.analysis.module_kinds import detect_expert_outliers, detect_module_kind
from fp8_policy.policy.analysis.signals import SeriesSummary, onset
from fp8_policy.policy.records import LayerGroup
from fp8_policy.policy.thresholds import Severity, Thresholds, worst


def detect_layer_patterns(
    layout: Layout,
    thresholds: Thresholds,
    explained: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Boundary, then uniform, or positional + single_tensor findings; `explained` layers (late-onset trends)
    are not reported again as isolated failures."""
    fp8 = layout.fp8()
    failing = [lv for lv in fp8 if lv.failing]
    findings = _boundary(layout, fp8, thresholds)
    uniform = _uniform(layout, fp8, failing, thresholds)
    if uniform is not None:
        return [*findings, uniform]
    done = {name for finding in findings for name in finding.layers}
    experts = detect_expert_outliers(layout, thresholds)  # module_kinds.py: MoE experts against their siblings
    done |= {name for finding in experts for name in finding.layers}
    kinds = detect_module_kind(layout, [lv for lv in failing if lv.name not in done], thresholds)
    done |= {name for finding in kinds for name in finding.layers}
    positional = _positional(layout, [lv for lv in failing if lv.name not in done], thresholds)
    done |= {name for finding in positional for name in finding.layers} | set(explained)
    isolated = [lv for lv in failing if lv.name not in done]
    single = [lv for lv in isolated if len(lv.failing) == 1 and len(lv.tensors) == 3]
    rest = [lv for lv in isolated if lv not in single]
    return [
        *findings,
        *experts,
        *kinds,
        *positional,
        *_single_tensor(single, thresholds),
        *_by_halves(layout, rest, thresholds),
    ]


def _worst(lv: LayerLevels) -> tuple[str, SeriesSummary]:
    """The worst tensor of a layer that has statistics (every failing layer has)."""
    pick = lv.worst_tensor()
    if pick is None:
        raise ValueError(f"{lv.name} has no FP8 statistics")
    return pick


def healthy_finding(layout: Layout, thresholds: Thresholds, fmt: str = "FP8") -> Finding:
    """`fmt`: the training format's name for its layers (NVFP4 under NVFP4 training, whose bands apply)."""
    fp8 = layout.fp8()
    worst_layer = max(fp8, key=lambda lv: _worst(lv)[1].level if lv.tensors else -1.0, default=None)
    if worst_layer is None or not worst_layer.tensors:
        # nothing assessed is not a healthy verdict: say so (a BF16-only run, or one that logged only what-ifs)
        return Finding(
            Pattern.UNASSESSED,
            Severity.OK,
            (),
            (),
            "Nothing was assessed: no layer logged underflow statistics of the recipe it trained with, so this run "
            "has no verdict (it is not called healthy). Log LogFp8TensorStats' underflows% (LogNvfp4TensorStats' "
            "nvfp4_underflows% under NVFP4) on the low-precision layers to get one.",
        )
    tensor, summary = _worst(worst_layer)
    warned = sum(1 for lv in fp8 if lv.severity is Severity.WARNING)
    band = (
        f"healthy, {warned} layer(s) in the warning band ({thresholds.warning:g}-{thresholds.critical:g}%)"
        if warned
        else "healthy"
    )
    text = (
        f"No pattern ({band}): all {len(fp8)} {fmt} layers stay below {thresholds.critical:g}% underflow; worst "
        f"is {tensor} {summary.level:.2f}% at {worst_layer.name}."
    )
    # `healthy` is always severity ok: the warning band shows in the text and in the per-layer table (issue 12)
    return Finding(Pattern.HEALTHY, Severity.OK, (), (summary.evidence(),), text)


def failing_evidence(
    lv: LayerLevels,
    thresholds: Thresholds,
    tensors: tuple[str, ...] | None = None,
) -> list[Evidence]:
    """Evidence of a layer's failing tensors (or `tensors`), with the onset of the warning band."""
    return [
        lv.tensors[t].evidence(onset=onset(lv.tensors[t], thresholds.warning))
        for t in (tensors if tensors is not None else lv.failing)
    ]


def block_ranges(blocks: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    runs: list[list[int]] = []
    for block in sorted(set(blocks)):
        if runs and block == runs[-1][-1] + 1:
            runs[-1].append(block)
        else:
            runs.append([block])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _uniform(
    layout: Layout,
    fp8: list[LayerLevels],
    failing: list[LayerLevels],
    thresholds: Thresholds,
) -> Finding | None:
    if len(fp8) < thresholds.uniform_min_layers or len(failing) <= thresholds.uniform_fraction * len(fp8):
        return None
    middle = [lv for lv in fp8 if lv.block in layout.positions and layout.region(lv.block) == "middle"]
    if middle and sum(1 for lv in middle if lv.failing) <= thresholds.uniform_fraction * len(middle):
        return None
    kinds = _kinds_failing(fp8, thresholds)
    if len(kinds) >= 2 and sum(kinds.values()) <= len(kinds) / 2:
        return None  # failures confined to a few sublayer kinds: a layer problem (module rules)
    share = len(failing) / len(fp8)
    top = sorted(failing, key=lambda lv: -_worst(lv)[1].level)
    tensor, summary = _worst(top[0])
    text = (
        f"{len(failing)} of {len(fp8)} FP8 layers ({share:.0%}) reach the critical band (>= "
        f"{thresholds.critical:g}%); worst {tensor} underflows% {summary.level:.2f}% at {top[0].name}: "
        "a recipe problem, not a layer problem."
    )
    evidence = [ev for lv in top[:10] for ev in failing_evidence(lv, thresholds)]
    return Finding(
        Pattern.UNIFORM, worst(lv.severity for lv in failing), tuple(lv.name for lv in failing), tuple(evidence), text
    )


def _kinds_failing(fp8: list[LayerLevels], thresholds: Thresholds) -> dict[str, bool]:
    """Body sublayer kind -> whether more than `uniform_fraction` of its FP8 layers fail."""
    by_kind: dict[str, list[bool]] = {}
    for lv in fp8:
        structure = lv.info.structure
        if structure.group is LayerGroup.BODY and structure.sublayer:
            by_kind.setdefault(structure.sublayer, []).append(bool(lv.failing))
    return {kind: sum(flags) > thresholds.uniform_fraction * len(flags) for kind, flags in by_kind.items()}


def _boundary(layout: Layout, fp8: list[LayerLevels], thresholds: Thresholds) -> list[Finding]:
    """One finding per degrading layer next to a BF16 block, with one evidence per degrading tensor."""
    findings = []
    for lv in fp8:
        neighbours = layout.bf16_neighbours(lv)
        bands = lv.bands(thresholds)  # a mixed-format run's layer: its own format's bands, its own format's peers
        evidence = [
            s.evidence(onset=onset(s, bands.warning), reference=ref)
            for t, s in (lv.tensors.items() if neighbours else ())
            if _degrading(s.level, s.start_level, s.end_level, ref := _peer_median(layout, lv, t, thresholds), bands)
        ]
        if not evidence:
            continue
        top = max(evidence, key=lambda ev: ev.level or 0.0)
        text = (
            f"{lv.name} next to BF16 {', '.join(neighbours)}: {top.tensor} underflows% went "
            f"{top.start_level:.2f}% -> {top.end_level:.2f}% (level {top.level:.2f}%, peers' median "
            f"{top.reference:.2f}%)" + (f", onset iteration {top.onset}." if top.onset is not None else ".")
        )
        severity = max(Severity.WARNING, worst(bands.band(ev.level or 0.0) for ev in evidence))
        findings.append(Finding(Pattern.BOUNDARY, severity, (lv.name,), tuple(evidence), text))
    return findings


def _degrading(level: float, start: float, end: float, reference: float, thresholds: Thresholds) -> bool:
    stands_out = (
        level >= thresholds.warning
        and level - reference >= thresholds.warning
        and level >= thresholds.boundary_ratio * reference
    )
    return stands_out and (end - start >= thresholds.trend_min_rise or level >= thresholds.critical)


def _peer_median(layout: Layout, target: LayerLevels, tensor: str, thresholds: Thresholds) -> float:
    """Median level of the same tensor in body layers away from BF16 blocks judged with the target's bands (a
    mixed-format run: layers of its own format), same sublayer when possible."""
    bands = target.bands(thresholds)
    peers = [
        lv
        for lv in layout.fp8()
        if lv is not target
        and lv.block is not None
        and tensor in lv.tensors
        and lv.bands(thresholds) == bands
        and not layout.bf16_neighbours(lv)
    ]
    same = [lv for lv in peers if lv.info.structure.sublayer == target.info.structure.sublayer]
    values = sorted(lv.tensors[tensor].level for lv in (same or peers))
    if not values:
        return 0.0
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def _single_tensor(layers: list[LayerLevels], thresholds: Thresholds) -> list[Finding]:
    groups: dict[str, list[LayerLevels]] = {}
    for lv in layers:
        groups.setdefault(lv.failing[0], []).append(lv)
    findings = []
    for tensor, members in groups.items():
        worst_lv = max(members, key=lambda lv: lv.tensors[tensor].level)
        evidence = [
            lv.tensors[tensor].evidence(
                onset=onset(lv.tensors[tensor], thresholds.warning),
                reference=max(s.level for t, s in lv.tensors.items() if t != tensor),
            )
            for lv in members
        ]
        others = max(ev.reference or 0.0 for ev in evidence)
        text = (
            f"{len(members)} layer(s) fail on {tensor} underflows% only (worst "
            f"{worst_lv.tensors[tensor].level:.2f}% at {worst_lv.name}; their other tensors <= {others:.2f}%)."
        )
        findings.append(
            Finding(
                Pattern.SINGLE_TENSOR,
                worst(lv.severity for lv in members),
                tuple(lv.name for lv in members),
                tuple(evidence),
                text,
            )
        )
    return findings


def _positional(layout: Layout, failing: list[LayerLevels], thresholds: Thresholds) -> list[Finding]:
    start, end = _edge_groups(layout, failing)
    start += [lv for lv in failing if lv.info.structure.group is LayerGroup.EMBEDDING]
    heads = [lv for lv in failing if lv.info.structure.group is LayerGroup.HEAD]
    end = [lv for lv in end if lv not in start]
    if start and (end or heads):
        found = _finding(Pattern.U_SHAPE, [*start, *end, *heads], layout, thresholds)
    elif start:
        found = _finding(Pattern.EARLY_LAYERS, start, layout, thresholds)
    elif end:
        found = _finding(Pattern.LATE_LAYERS, [*end, *heads], layout, thresholds)
    else:
        found = _finding(Pattern.HEAD_ONLY, heads, layout, thresholds)
    return [found] if found is not None else []


def _edge_groups(layout: Layout, failing: list[LayerLevels]) -> tuple[list[LayerLevels], list[LayerLevels]]:
    """Failing body layers of the start and end groups (see module docstring)."""
    position = {block: i for i, block in enumerate(layout.blocks)}
    bad = {position[lv.block] for lv in failing if lv.block in position}
    n = len(layout.blocks)
    start = {p for p in bad if p < layout.edge}
    end = {p for p in bad if p >= n - layout.edge}
    for group, step in ((start, 1), (end, -1)):
        p = (max(group) if step > 0 else min(group)) + step if group else -1
        while group and 0 <= p < n and p in bad:
            group.add(p)
            p += step

    def members(group: set[int]) -> list[LayerLevels]:
        return [lv for lv in failing if lv.block in position and position[lv.block] in group]

    return members(start), members(end)


def _by_halves(layout: Layout, layers: list[LayerLevels], thresholds: Thresholds) -> list[Finding]:
    position = {block: i for i, block in enumerate(layout.blocks)}
    names = list(layout.levels)
    early = [
        lv
        for lv in layers
        if (position[lv.block] < len(position) / 2 if lv.block in position else names.index(lv.name) < len(names) / 2)
    ]
    late = [lv for lv in layers if lv not in early]
    return [
        f
        for f in (
            _finding(Pattern.EARLY_LAYERS, early, layout, thresholds),
            _finding(Pattern.LATE_LAYERS, late, layout, thresholds),
        )
        if f is not None
    ]


def _finding(pattern: Pattern, layers: list[LayerLevels], layout: Layout, thresholds: Thresholds) -> Finding | None:
    if not layers:
        return None
    blocks = [lv.block for lv in layers if lv.block is not None]
    heads = [lv.name for lv in layers if lv.info.structure.group is LayerGroup.HEAD]
    top = max(layers, key=lambda lv: _worst(lv)[1].level)
    tensor, summary = _worst(top)
    where = f"blocks {block_ranges(blocks)}" if blocks else ""
    if heads:
        where = f"{where} and head {', '.join(heads)}" if where else f"head {', '.join(heads)}"
    text = (
        f"{pattern.value}: {len(layers)} failing layer(s) in {where} of {len(layout.blocks)} blocks; worst "
        f"{tensor} underflows% {summary.level:.2f}% at {top.name} (critical >= {thresholds.critical:g}%)."
        + _kinds_clause(layers, layout)
    )
    evidence = [ev for lv in layers for ev in failing_evidence(lv, thresholds)]
    return Finding(pattern, worst(lv.severity for lv in layers), tuple(lv.name for lv in layers), tuple(evidence), text)


def _kinds_clause(layers: list[LayerLevels], layout: Layout) -> str:
    """' Only fc1 (2 of 2), fc2 (1 of 2) of the 4 sublayer kinds fail.' when the failing body layers leave some
    sublayer kinds out (the structure of the failure: a problem of those layers), else ''."""
    total: dict[str, int] = {}
    for lv in layout.fp8():
        if lv.info.structure.group is LayerGroup.BODY and lv.info.structure.sublayer:
            total[lv.info.structure.sublayer] = total.get(lv.info.structure.sublayer, 0) + 1
    failing: dict[str, int] = {}
    for lv in layers:
        kind = lv.info.structure.sublayer
        if lv.info.structure.group is LayerGroup.BODY and kind in total:
            failing[kind] = failing.get(kind, 0) + 1
    if not failing or len(failing) == len(total):
        return ""
    listed = ", ".join(f"{kind} ({n} of {total[kind]})" for kind, n in failing.items())
    return f" Only {listed} of the {len(total)} sublayer kinds fail."
