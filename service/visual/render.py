"""Draw heatmap panels with matplotlib (Agg, object API, no pyplot state) into PNG or SVG bytes.

One panel per run: cells by `imshow` of the whole matrix (NaN = background), hatched "not in FP8" spans for
BF16 layers, group separators and side labels, boxes around the worst rows, the recommended skip set in a strip
on the right, an optional iteration marker. The legend column (colour bar with severity bands, marker legend,
summary) is drawn by `service.visual.legend`. SVG keeps text as `<text>` and tags marks with ids
(`critical-box-N`, `bf16-rows-N`, `skip-marker-N`, `override-marker-N`) so clients can find them.
"""

from __future__ import annotations

import io
import threading

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib import colormaps, transforms  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import Colormap, Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from fp8_policy.policy.heatmap import HeatmapGeometry, HeatmapMatrix, HeatSummary  # noqa: E402
from fp8_policy.service.visual import legend  # noqa: E402
from fp8_policy.service.visual.panel import MEDIA_TYPES, Panel, Style, fit_columns  # noqa: E402
from fp8_policy.service.visual.style import BF16_EDGE, BF16_FACE, BOX, GROUP, MARK, NO_DATA, SKIP, TEXT_MUTED, rc  # noqa: E402

__all__ = ["MEDIA_TYPES", "Panel", "Style", "colormap", "render"]

_LOCK = threading.Lock()  # rc_context is process-global; renders are serialized (each takes well under 1 s)


def colormap() -> Colormap:
    return colormaps["YlOrRd"].with_extremes(bad=NO_DATA)


def render(panels: list[Panel], style: Style, geometry: HeatmapGeometry, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes, exactly `geometry.pixels` in size for PNG."""
    with _LOCK, matplotlib.rc_context(rc()):
        fig = Figure(figsize=(geometry.width_in, geometry.height_in), dpi=geometry.dpi)
        fig.patch.set_facecolor("white")
        cmap, norm = colormap(), Normalize(0.0, style.vmax, clip=False)
        for k, panel in enumerate(panels):
            _draw_panel(fig, k, panel, style, geometry, cmap, norm)
        legend.draw_legend_column(fig, geometry, panels, style, cmap, norm)
        buffer = io.BytesIO()
        extra = (
            {"pil_kwargs": {"compress_level": 2}, "metadata": {"Software": None}}
            if fmt == "png"
            else {"metadata": {"Date": None}}
        )
        fig.savefig(buffer, format=fmt, dpi=geometry.dpi, facecolor="white", **extra)
    return buffer.getvalue()


def _draw_panel(
    fig: Figure, k: int, panel: Panel, style: Style, geometry: HeatmapGeometry, cmap: Colormap, norm: Normalize
) -> None:
    rect = geometry.heat[k]
    ax = fig.add_axes((rect.left, rect.bottom, rect.width, rect.height))
    matrix = panel.matrix
    rows, columns = matrix.shape
    values = matrix.values if columns else np.full((max(rows, 1), 1), np.nan)
    cells, span = fit_columns(values, rect.width * geometry.pixels[0])
    rgba = cmap(norm(np.ma.masked_invalid(cells)), bytes=True)  # colour the small matrix, not the upsampled image
    ax.imshow(rgba, aspect="auto", interpolation="nearest", extent=(-0.5, span - 0.5, values.shape[0] - 0.5, -0.5))
    ax.set_xlim(-0.5, values.shape[1] - 0.5)
    _draw_x_axis(ax, matrix)
    labelled = k == 0 or not geometry.shared_rows  # side by side with the same rows: labels once, on the left
    if labelled:
        _draw_row_labels(ax, panel, geometry)
    else:
        ax.set_yticks([])
    _draw_bf16(ax, matrix, geometry)
    _draw_groups(ax, matrix, geometry, k, labelled)
    _draw_boxes(ax, panel.summary, values.shape[1])
    if style.mark_iteration is not None and columns:
        _draw_mark(ax, matrix, style.mark_iteration)
    if panel.skip_layers is not None:
        _draw_skip_strip(fig, geometry, k, panel)
    top = 1.0 - 0.32 / geometry.height_in
    fig.text(rect.left, top, panel.title, fontsize=12, fontweight="bold", ha="left", va="baseline")
    subtitle = panel.subtitle
    if len(geometry.heat) > 1:
        subtitle += "\n" + legend.summary_line(panel, style)
    fig.text(
        rect.left,
        top - 0.12 / geometry.height_in,
        subtitle,
        fontsize=8,
        color=TEXT_MUTED,
        ha="left",
        va="top",
        linespacing=1.5,
    )


def _draw_x_axis(ax: Axes, matrix: HeatmapMatrix) -> None:
    its = matrix.iterations
    ax.set_xlabel("iteration", fontsize=8.5, labelpad=4)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=9, integer=True, min_n_ticks=2))
    ax.xaxis.set_major_formatter(
        FuncFormatter(
            lambda x, _pos: f"{int(its[int(np.clip(round(x), 0, its.shape[0] - 1))]):,}" if its.shape[0] else ""
        )
    )
    ax.tick_params(axis="x", labelsize=7.5, length=3)
    ax.tick_params(axis="y", length=0, pad=3)
    for spine in ax.spines.values():
        spine.set_color("#666666")
        spine.set_linewidth(0.6)


def _draw_row_labels(ax: Axes, panel: Panel, geometry: HeatmapGeometry) -> None:
    """One text per shown row (much cheaper than a tick per row), right-aligned left of the cells."""
    rows = panel.matrix.rows
    ax.set_yticks([])
    blend = transforms.blended_transform_factory(ax.transAxes, ax.transData)
    offset = transforms.offset_copy(blend, fig=ax.get_figure(root=True), x=-3.0, units="points")
    skip = panel.skip_layers or frozenset()
    for k in range(0, len(rows), geometry.label_stride):
        row = rows[k]
        color = (
            SKIP
            if row.layer in skip or row.layer in panel.gemm_overrides
            else TEXT_MUTED
            if row.kind == "bf16"
            else "#202124"
        )
        ax.text(
            0.0,
            k,
            row.label,
            transform=offset,
            ha="right",
            va="center",
            fontsize=geometry.row_font,
            family="DejaVu Sans Mono",
            color=color,
            fontweight="bold" if row.layer in skip else "normal",
        )


def _draw_bf16(ax: Axes, matrix: HeatmapMatrix, geometry: HeatmapGeometry) -> None:
    columns = max(matrix.shape[1], 1)
    pitch_pt = ax.get_position().height * geometry.height_in * 72.0 / max(matrix.shape[0], 1)
    for k, span in enumerate(matrix.bf16_spans()):
        count = span.stop - span.start
        patch = Rectangle(
            (-0.5, span.start - 0.5),
            columns,
            count,
            facecolor=BF16_FACE,
            edgecolor=BF16_EDGE,
            hatch="////",
            linewidth=0.0,
            zorder=2,
        )
        patch.set_gid(f"bf16-rows-{k}")
        ax.add_patch(patch)
        text = "not in FP8 — ran in BF16" + ("" if count == 1 else f" ({count} layers)")
        ax.text(
            (columns - 1) / 2.0,
            span.middle,
            text,
            ha="center",
            va="center",
            zorder=3,
            color="#3c4043",
            fontsize=min(8.0, max(4.5, count * pitch_pt * 0.7)),
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
        )


def _draw_groups(ax: Axes, matrix: HeatmapMatrix, geometry: HeatmapGeometry, panel: int, labelled: bool = True) -> None:
    """Group separators; with `labelled`, the brackets and group names left of the row labels too."""
    spans = matrix.group_spans()
    heat_in = geometry.heat[panel].width * geometry.width_in
    blend = transforms.blended_transform_factory(ax.transAxes, ax.transData)
    x_bracket = -(geometry.label_in + 0.06) / heat_in
    for k, span in enumerate(spans):
        if k:
            ax.axhline(span.start - 0.5, color=GROUP, linewidth=1.1, zorder=4)
        if not labelled:
            continue
        top, bottom = span.start - 0.4, span.stop - 0.6
        ax.plot(
            [x_bracket + 0.012, x_bracket, x_bracket, x_bracket + 0.012],
            [top, top, bottom, bottom],
            transform=blend,
            clip_on=False,
            color=GROUP,
            linewidth=0.9,
        )
        ax.text(
            x_bracket - 0.008,
            span.middle,
            span.name.upper(),
            transform=blend,
            ha="right",
            va="center",
            fontsize=8,
            fontweight="bold",
            color=GROUP,
        )


def _draw_boxes(ax: Axes, summary: HeatSummary, columns: int) -> None:
    for rank, row in enumerate(summary.boxed):
        box = Rectangle((-0.5, row - 0.5), columns, 1.0, fill=False, edgecolor=BOX, linewidth=1.8, zorder=5)
        box.set_gid(f"critical-box-{rank}")
        ax.add_patch(box)


def _draw_mark(ax: Axes, matrix: HeatmapMatrix, iteration: int) -> None:
    column = matrix.column_index(iteration)
    ax.axvline(column, color=MARK, linestyle=(0, (4, 2)), linewidth=1.3, zorder=6, gid="iteration-mark")
    ax.annotate(
        f"iteration {iteration:,}",
        xy=(column, 1),
        xycoords=("data", "axes fraction"),
        xytext=(0, 2),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=7,
        color=MARK,
        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": MARK, "lw": 0.6},
        zorder=7,
    )


def _draw_skip_strip(fig: Figure, geometry: HeatmapGeometry, k: int, panel: Panel) -> None:
    rect = geometry.strip[k]
    ax = fig.add_axes((rect.left, rect.bottom, rect.width, rect.height))
    rows = panel.matrix.rows
    ax.set_xlim(0, 1)
    ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_color("#bbbbbb")
        spine.set_linewidth(0.5)
    skip = panel.skip_layers or frozenset()
    for n, r in enumerate(r for r, row in enumerate(rows) if row.layer in skip):
        patch = Rectangle((0.12, r - 0.42), 0.76, 0.84, facecolor=SKIP, edgecolor="none")
        patch.set_gid(f"skip-marker-{n}")
        ax.add_patch(patch)
    for n, r in enumerate(r for r, row in enumerate(rows) if row.layer in panel.gemm_overrides):
        patch = Rectangle((0.2, r - 0.34), 0.6, 0.68, facecolor="white", edgecolor=SKIP, linewidth=1.2)
        patch.set_gid(f"override-marker-{n}")
        ax.add_patch(patch)
    ax.set_title("BF16", fontsize=6.5, color=SKIP, pad=2, fontweight="bold")
