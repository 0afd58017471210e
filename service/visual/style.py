"""Colours and matplotlib settings shared by the heatmap renderer and its legend column."""

from __future__ import annotations

NO_DATA = "#e8eaed"  # cells without a point at that iteration (background)
BF16_FACE, BF16_EDGE = "#fafafa", "#9aa0a6"  # hatched "not in FP8" rows
BOX = "#0a6cff"  # boxes around the worst rows
SKIP = "#1b9e77"  # the recommended skip set
MARK = "#111111"  # the iteration marker
GROUP = "#202124"  # group separators, brackets and labels
TEXT_MUTED = "#5f6368"
BAND_TEXT = {"ok": "#4d6b2f", "warning": "#b8860b", "critical": "#d9480f", "severe": "#a50f15"}


def rc() -> dict[str, object]:
    """rcParams for one render: SVG text stays text, SVG ids are reproducible."""
    return {
        "svg.fonttype": "none",
        "svg.hashsalt": "fp8-policy",
        "font.family": "DejaVu Sans",
        "font.size": 8.0,
        "axes.linewidth": 0.6,
        "hatch.linewidth": 0.6,
        "hatch.color": BF16_EDGE,
        "image.resample": True,
    }
