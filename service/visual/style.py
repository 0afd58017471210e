"""Colours and matplotlib settings shared by the heatmap renderer and its legend column.

The severity colours come from the dashboard's colors.json (service/web/static), their one definition: the
images and the dashboard name a band in the same colour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

COLORS_FILE = Path(__file__).resolve().parents[1] / "web" / "static" / "colors.json"
SEVERITY_COLORS: dict[str, dict[str, Any]] = json.loads(COLORS_FILE.read_text(encoding="utf-8"))["severity"]
NO_DATA = "#e8eaed"  # cells without a point at that iteration (background)
BF16_FACE, BF16_EDGE = "#fafafa", "#9aa0a6"  # hatched "not in FP8" rows
BOX = "#0a6cff"  # boxes around the worst rows
SKIP = "#1b9e77"  # the recommended skip set
MARK = "#111111"  # the iteration marker
GROUP = "#202124"  # group separators, brackets and labels
TEXT_MUTED = "#5f6368"
BAND_TEXT = {band: colors["text"] for band, colors in SEVERITY_COLORS.items()}  # band names in the legend


def rc() -> dict[RcKeyType, Any]:
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
