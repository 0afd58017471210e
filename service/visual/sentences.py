"""Summary sentences of a run comparison, with numbers: "body gradient underflow −34% (mean 1.20% → 0.79%)
after head moved to BF16". Changes smaller than 5 % relative or 0.01 percentage points are not mentioned; a base
below the noise floor (policy/compare/changes.py) is compared in absolute points, not percent. Incomparable runs
(no layer in common) are said first and alone; a finding that followed a moved BF16 boundary is one sentence,
not a "gone" and a "new" line; the two recommendations' differences close the list."""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.compare.changes import describe

MIN_RELATIVE, MIN_ABSOLUTE = 0.05, 0.01
_MAX_NAMES = 3


def summary_sentences(body: dict[str, Any]) -> list[str]:
    if not body.get("comparable", True):
        return list(body["notes"])
    groups = body["groups"]
    cause = _cause(groups)
    out = [*_precision_sentences(groups)]
    moved = body.get("moved_problems", [])
    out += [m["summary"] for m in moved]
    moved_base = {frozenset(m["base_layers"]) for m in moved}
    moved_head = {frozenset(m["head_layers"]) for m in moved}
    changes = _change_sentences(groups, cause)
    out += changes or ["no group's underflow level changed by 5% or more"]
    out += [
        f"new finding: {f.get('label', f['pattern'])} ({f['severity']}, {_where(f['layers'])})"
        for f in body["findings_appeared"]
        if frozenset(f["layers"]) not in moved_head
    ]
    out += [
        f"finding gone: {f.get('label', f['pattern'])} (was {f['severity']}, {_where(f['layers'])})"
        for f in body["findings_disappeared"]
        if frozenset(f["layers"]) not in moved_base
    ]
    recommendations = body.get("recommendations")
    if recommendations:
        out += recommendations["summary"]
    out += body["notes"]
    return out


def _cause(groups: list[dict[str, Any]]) -> str | None:
    """What changed in precision, as a phrase: "head moved to BF16", "3 body layers moved to BF16"."""
    phrases = []
    for group in groups:
        for key, target in (("moved_to_bf16", "BF16"), ("moved_to_fp8", "FP8")):
            moved = group[key]
            if not moved:
                continue
            whole = len(moved) == group["layers"]
            phrases.append(
                f"{group['group']} moved to {target}"
                if whole
                else f"{len(moved)} {group['group']} layer{'s' if len(moved) != 1 else ''} moved to {target}"
            )
    return " and ".join(phrases) or None


def _precision_sentences(groups: list[dict[str, Any]]) -> list[str]:
    out = []
    for group in groups:
        for key, target in (("moved_to_bf16", "BF16"), ("moved_to_fp8", "FP8")):
            names = group[key]
            if names:
                shown = ", ".join(names[:_MAX_NAMES]) + (
                    f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else ""
                )
                out.append(f"{group['group']}: {_count(names)} moved to {target} ({shown})")
    return out


def _change_sentences(groups: list[dict[str, Any]], cause: str | None) -> list[str]:
    after = f" after {cause}" if cause else ""
    found: list[tuple[float, str]] = []
    for group in groups:
        for tensor, stats in group["stats"].items():
            base, head, relative = stats["base"], stats["head"], stats["relative"]
            if base is not None and head is None and tensor == "gradient" and group["moved_to_bf16"]:
                found.append(
                    (
                        1.0,
                        f"{group['group']} {tensor} underflow no longer measured: its layers run in "
                        f"BF16 (was mean {base:.2f}%)",
                    )
                )
            elif (
                base is not None
                and head is not None
                and abs(head - base) >= MIN_ABSOLUTE
                and (relative is None or abs(relative) >= MIN_RELATIVE)
            ):
                weight = abs(relative) if relative is not None else abs(head - base)
                found.append((weight, f"{group['group']} {tensor} underflow {describe(base, head, relative)}{after}"))
    found.sort(key=lambda item: -item[0])
    return [sentence for _, sentence in found]


def _where(layers: list[str]) -> str:
    """ "1 layer: model.layers.30.fc2" / "3 layers"."""
    return f"1 layer: {layers[0]}" if len(layers) == 1 else _count(layers)


def _count(layers: list[str]) -> str:
    return f"{len(layers)} layer{'s' if len(layers) != 1 else ''}"
