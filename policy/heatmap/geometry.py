"""Where everything goes on a heatmap figure, in inches and figure fractions — no drawing, no matplotlib.

The figure is laid out by hand (no `tight` bounding box), so the pixel size is exactly `width × dpi` by
`height × dpi` and the heatmap axes' pixel extent is known before rendering: clients (and tests) compute cell
centres from `HeatmapGeometry.extent_px(panel)` and the matrix shape. Left to right, per panel: group labels
(EMBEDDING / BODY / HEAD) with brackets, row labels, the heatmap, a narrow strip marking the recommended skip
set; then one column on the right for the colour bar, the band legend, the marker legend and the summary box.
Side by side (compare), panels after the first that show the same rows share the first panel's group and row
labels (`shared_rows`), and the default panel width is narrower, so the figure stays about 1,800 px wide at
150 dpi and its labels are readable when a 1440 px wide page scales it to fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOP_IN = 1.1  # title, subtitle (two lines when comparing), colour-bar title, iteration marker label
BOTTOM_IN = 0.7  # iteration ticks and axis label
GROUP_IN = 0.95  # group labels and brackets
STRIP_GAP_IN, STRIP_IN = 0.05, 0.16
PANEL_GAP_IN = 0.45
RIGHT_IN = 2.75  # colour bar, band names, legends, summary
ROW_PITCH_IN = 0.11  # default height per row
MIN_AXES_IN = {1: 4.2, 2: 3.6}  # room for the legend column (one summary box, or none when comparing)
MAX_DEFAULT_HEIGHT_IN = 26.0
HEAT_WIDTH_IN = {1: 9.5, 2: 3.6}  # default heatmap width per panel
MAX_FONT_PT, MIN_FONT_PT = 8.5, 4.5
MAX_PIXELS = 150_000_000
MIN_SIZE_IN, MAX_SIZE_IN = 2.0, 60.0


@dataclass(frozen=True, slots=True)
class Rect:
    """A rectangle in figure fractions (matplotlib's `add_axes` order)."""

    left: float
    bottom: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class HeatmapGeometry:
    width_in: float
    height_in: float
    dpi: int
    heat: tuple[Rect, ...]  # the heatmap axes, one per panel
    strip: tuple[Rect, ...]  # the skip-set strip right of each heatmap
    right: Rect  # the legend column
    label_in: float  # width reserved for row labels
    row_font: float  # points
    label_stride: int  # label every n-th row when rows are too thin for a readable font
    shared_rows: bool = False  # panels after the first reuse the first panel's row and group labels

    @property
    def pixels(self) -> tuple[int, int]:
        """(width, height) of the rendered PNG: matplotlib truncates the fractional pixel."""
        return math.floor(self.width_in * self.dpi + 1e-8), math.floor(self.height_in * self.dpi + 1e-8)

    def extent_px(self, panel: int = 0) -> tuple[float, float, float, float]:
        """(x0, y0, x1, y1) of a heatmap's cells in image pixels, origin top-left."""
        w, h = self.width_in * self.dpi, self.height_in * self.dpi
        r = self.heat[panel]
        return (
            round(r.left * w, 1),
            round((1 - r.bottom - r.height) * h, 1),
            round((r.left + r.width) * w, 1),
            round((1 - r.bottom) * h, 1),
        )

    def cell_center_px(self, shape: tuple[int, int], row: int, column: int, panel: int = 0) -> tuple[float, float]:
        x0, y0, x1, y1 = self.extent_px(panel)
        rows, columns = shape
        return x0 + (column + 0.5) * (x1 - x0) / columns, y0 + (row + 0.5) * (y1 - y0) / rows


def plan_geometry(
    rows: int,
    label_chars: int,
    *,
    panels: int = 1,
    dpi: int = 150,
    width: float | None = None,
    height: float | None = None,
    shared_rows: bool = False,
) -> HeatmapGeometry:
    """Lay out `panels` heatmaps of `rows` rows; ValueError when the requested size cannot hold them.
    `shared_rows`: every panel shows the same rows, so only the first one carries row and group labels."""
    rows = max(rows, 1)
    for name, value in (("width", width), ("height", height)):
        if value is not None and not MIN_SIZE_IN <= value <= MAX_SIZE_IN:
            raise ValueError(f"{name} must be between {MIN_SIZE_IN:g} and {MAX_SIZE_IN:g} inches, got {value:g}")
    axes_default = max(rows * ROW_PITCH_IN, MIN_AXES_IN.get(panels, 3.0))
    height_in = height or min(TOP_IN + BOTTOM_IN + axes_default, MAX_DEFAULT_HEIGHT_IN)
    axes_h = height_in - TOP_IN - BOTTOM_IN
    if axes_h < 1.0:
        raise ValueError(f"height {height_in:g} in leaves no room for the heatmap (needs > {TOP_IN + BOTTOM_IN + 1:g})")
    font, stride = _row_font(axes_h * 72.0 / rows)
    label_in = 0.12 + label_chars * 0.6 * font / 72.0
    side_in = GROUP_IN + label_in + STRIP_GAP_IN + STRIP_IN  # everything of a panel but its cells
    shared = shared_rows and panels > 1
    sides = [side_in if k == 0 or not shared else STRIP_GAP_IN + STRIP_IN for k in range(panels)]
    fixed = sum(sides) + (panels - 1) * PANEL_GAP_IN + RIGHT_IN
    width_in = width or fixed + panels * HEAT_WIDTH_IN.get(panels, 7.0)
    heat_w = (width_in - fixed) / panels
    if heat_w < 1.0:
        raise ValueError(f"width {width_in:g} in leaves no room for the heatmap (needs > {fixed + panels:g})")
    if width_in * dpi * height_in * dpi > MAX_PIXELS:
        raise ValueError(
            f"{width_in:g} x {height_in:g} in at {dpi} dpi is more than {MAX_PIXELS:,} pixels; "
            "lower dpi, width or height"
        )
    heat, strip = [], []
    bottom = BOTTOM_IN / height_in
    x_start = 0.0  # left edge of panel k (labels included)
    for k in range(panels):
        x = x_start + (sides[k] - STRIP_GAP_IN - STRIP_IN)
        x_start += sides[k] + heat_w + PANEL_GAP_IN
        heat.append(Rect(x / width_in, bottom, heat_w / width_in, axes_h / height_in))
        strip.append(Rect((x + heat_w + STRIP_GAP_IN) / width_in, bottom, STRIP_IN / width_in, axes_h / height_in))
    right = Rect((width_in - RIGHT_IN) / width_in, bottom, RIGHT_IN / width_in, axes_h / height_in)
    return HeatmapGeometry(width_in, height_in, dpi, tuple(heat), tuple(strip), right, label_in, font, stride, shared)


def _row_font(pitch_pt: float) -> tuple[float, int]:
    """Font size for row labels and the label stride for a row pitch in points."""
    font = min(MAX_FONT_PT, pitch_pt * 0.82)
    if font >= MIN_FONT_PT:
        return font, 1
    return MIN_FONT_PT, math.ceil(MIN_FONT_PT / (pitch_pt * 0.82))
