"""The legend column right of the heatmap(s): colour bar with the severity bands, marker legend, summary box(es)."""

from __future__ import annotations

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from fp8_policy.policy.heatmap import HeatmapGeometry, severity_bands
from fp8_policy.service.visual.panel import Panel, Style
from fp8_policy.service.visual.style import BAND_TEXT, BF16_EDGE, BF16_FACE, BOX, MARK, NO_DATA, SKIP

_CBAR_X_IN, _CBAR_W_IN = 0.5, 0.2


def draw_legend_column(
    fig: Figure, geometry: HeatmapGeometry, panels: list[Panel], style: Style, cmap: Colormap, norm: Normalize
) -> None:
    w, h = geometry.width_in, geometry.height_in
    column, heat = geometry.right, geometry.heat[0]
    top_in = (heat.bottom + heat.height) * h
    cbar_h = float(np.clip(heat.height * h * 0.42, 1.3, 3.6))
    x_in = column.left * w + _CBAR_X_IN
    cax = fig.add_axes((x_in / w, (top_in - 0.12 - cbar_h) / h, _CBAR_W_IN / w, cbar_h / h))
    over = any(p.summary.max is not None and p.summary.max > style.vmax for p in panels)
    bar = fig.colorbar(
        ScalarMappable(norm=norm, cmap=cmap), cax=cax, extend="max" if over else "neither", extendfrac=0.04
    )
    bar.outline.set_linewidth(0.5)
    cax.tick_params(labelsize=7, length=2.5)
    unit = "%" if style.percent else ""
    bar.set_ticks(_ticks(style))
    bar.set_ticklabels([f"{t:g}{unit}" for t in _ticks(style)])
    fig.text(
        (column.left * w + 0.08) / w,
        (top_in + 0.1) / h,
        f"{style.value_label}, capped at {style.vmax:g}{unit}",
        fontsize=7.5,
        fontweight="bold",
        ha="left",
        va="bottom",
    )
    if style.percent:
        _band_labels(fig, cax, style, x_in + _CBAR_W_IN + 0.42, w)
    legend_top = top_in - cbar_h - 0.4
    entries = _marker_legend(fig, panels, style, column.left * w + 0.08, legend_top, w, h)
    if len(panels) == 1:  # when comparing, each panel's subtitle carries its summary line instead
        _summary_box(fig, panels[0], style, column.left * w + 0.1, legend_top - 0.19 * entries - 0.3, w, h)


def _ticks(style: Style) -> list[float]:
    if not style.percent:
        return [float(t) for t in np.linspace(0.0, style.vmax, 5)]
    t = style.thresholds
    return [0.0, *[v for v in (t.warning, t.critical, t.severe) if v < style.vmax], style.vmax]


def _band_labels(fig: Figure, cax: Axes, style: Style, x_in: float, w: float) -> None:
    for band in severity_bands(style.thresholds, style.vmax):
        if band.low > 0:
            cax.axhline(band.low, color="white", linewidth=1.0)
            cax.axhline(band.low, color="#333333", linewidth=0.5, linestyle=(0, (2, 1)))
        middle = (band.low + band.high) / 2.0
        y = cax.transData.transform((0, middle))[1] / fig.bbox.height
        fig.text(
            x_in / w,
            y,
            band.name,
            fontsize=7.5,
            va="center",
            ha="left",
            color=BAND_TEXT[band.name],
            fontweight="bold" if band.name in ("critical", "severe") else "normal",
        )


def _marker_legend(
    fig: Figure, panels: list[Panel], style: Style, x_in: float, top_in: float, w: float, h: float
) -> int:
    t = style.thresholds
    handles: list[tuple[Artist, str]] = [
        (Patch(facecolor=BF16_FACE, edgecolor=BF16_EDGE, hatch="////", linewidth=0.6), "not in FP8 (ran in BF16)"),
        (Patch(facecolor=NO_DATA, edgecolor="#bbbbbb", linewidth=0.6), "not logged at that iteration"),
    ]
    if any(p.summary.boxed_by == "analysis verdict" for p in panels):
        handles.append(
            (
                Patch(fill=False, edgecolor=BOX, linewidth=1.6),
                f"worst {style.boxes} rows the analysis rates critical\nor worse (the findings' verdict: p95 of the"
                "\ntrailing window after warm-up, worst rank,\noutlier ranks apart)",
            )
        )
    elif style.percent:
        handles.append(
            (
                Patch(fill=False, edgecolor=BOX, linewidth=1.6),
                f"worst {style.boxes} rows with p95 of all points ≥ {t.critical:g}%\n"
                "(no analysis verdict for this view)",
            )
        )
    if any(p.skip_layers is not None for p in panels):
        handles.append((Patch(facecolor=SKIP, edgecolor="none"), "recommended: whole layer BF16"))
        handles.append((Patch(facecolor="white", edgecolor=SKIP, linewidth=1.2), "recommended: some GEMMs BF16"))
    if style.mark_iteration is not None:
        handles.append(
            (Line2D([], [], color=MARK, linestyle=(0, (4, 2)), linewidth=1.3), f"iteration {style.mark_iteration:,}")
        )
    fig.legend(
        [hd for hd, _ in handles],
        [label for _, label in handles],
        loc="upper left",
        bbox_to_anchor=(x_in / w, top_in / h),
        frameon=False,
        fontsize=7,
        handlelength=1.6,
        handleheight=1.0,
        borderaxespad=0.0,
        labelspacing=0.45,
    )
    return len(handles)


def _summary_box(fig: Figure, panel: Panel, style: Style, x_in: float, top_in: float, w: float, h: float) -> None:
    text = _summary_text("SUMMARY", panel, style)
    height = 0.25 + 0.145 * (text.count("\n") + 1)
    fig.text(
        x_in / w,
        max(top_in, height + 0.1) / h,
        text,
        fontsize=7.5,
        family="DejaVu Sans Mono",
        ha="left",
        va="top",
        color="#202124",
        linespacing=1.35,
        bbox={"boxstyle": "round,pad=0.5", "fc": "#f8f9fa", "ec": "#c7cbd1", "lw": 0.6},
    )


def summary_line(panel: Panel, style: Style) -> str:
    """The summary in one line (compare panels): "25 components · 1 not in FP8 · max 6.57% · ..."."""
    summary, skip = panel.summary, panel.skip_layers
    unit = "%" if style.percent else ""
    parts = [
        f"{summary.components} components",
        f"{summary.bf16_rows} not in FP8",
        f"max {_fmt(summary.max, unit)}",
        f"mean {_fmt(summary.mean, unit)}",
    ]
    if summary.critical is not None:
        parts.append(f"{summary.critical} ≥ critical {summary.critical_threshold:g}%")
    if skip is not None:
        parts.append(f"{len(skip)} recommended BF16, {len(panel.gemm_overrides)} GEMM overrides")
    return " · ".join(parts)


def _summary_text(heading: str, panel: Panel, style: Style) -> str:
    summary, skip = panel.summary, panel.skip_layers
    unit = "%" if style.percent else ""
    rows = [
        ("components", f"{summary.components}"),
        ("not in FP8", f"{summary.bf16_rows}"),
        ("max", _fmt(summary.max, unit)),
        ("mean", _fmt(summary.mean, unit)),
    ]
    if summary.critical is not None:
        rows.append((f"≥ critical {summary.critical_threshold:g}%", f"{summary.critical}"))
    if skip is not None:
        rows += [("recommended BF16", f"{len(skip)}"), ("GEMM overrides", f"{len(panel.gemm_overrides)}")]
    width = max(len(k) + len(v) for k, v in rows) + 2
    heading = heading if len(heading) <= width else heading[: width - 1] + "…"
    return "\n".join([heading, *[f"{k}{v.rjust(width - len(k))}" for k, v in rows]])


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}{unit}" if unit and abs(value) < 1000 else f"{value:.3g}{unit}"
