"""Use cases behind the heatmap endpoints: load only the series drawn, build the matrix, render, describe.

Only the selected (tensor, stat[, rank]) series are read (a SQL filter on the indexed columns), decoded and
placed with numpy; the recommendation's marks (`show_skip`) come from service/visual/marks.py, cached per run and
thresholds, so a repeated render costs the query, the matrix and the drawing only.
`render_heatmap_for(session, run_id, params)` is the hook `bench` times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.run_models import Layer, Run
from fp8_policy.db.runs import RunRepository
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.policy.analysis.format_bands import SeriesBands, recipe_bands, stat_key_prefix
from fp8_policy.policy.analysis.recipes import PREFIX_RECIPE
from fp8_policy.policy.analysis.shards import drawn_series
from fp8_policy.policy.heatmap import (
    HeatmapGeometry,
    HeatmapMatrix,
    HeatSummary,
    build_matrix,
    default_vmax,
    is_percent_stat,
    plan_geometry,
    sublayers_of,
    summarize,
    verdict_severities,
)
from fp8_policy.policy.names import metric_of
from fp8_policy.policy.parallel.info import ParallelInfo
from fp8_policy.policy.recommend import POLICY_VERSION
from fp8_policy.policy.records import LayerGroup, LayerInfo, LayerStructure, Precision, Series
from fp8_policy.policy.thresholds import Severity
from fp8_policy.service.analysis.summary import view_analysis
from fp8_policy.service.errors import ImageTooLarge, InvalidParameter, NoData, UnknownFormat
from fp8_policy.service.runs.actions import get_ready_run, known_ranks, stored_rank
from fp8_policy.service.visual.job import Rendered, RenderJob, render_job
from fp8_policy.service.visual.marks import Recommended, recommended, run_identity
from fp8_policy.service.visual.panel import MEDIA_TYPES, Panel, Style, fit_columns
from fp8_policy.service.visual.params import HeatmapParams, parse_heatmap_params


def render_heatmap_for(
    session: Session, run_id: int, params: HeatmapParams | Mapping[str, str] | None = None, fmt: str = "png"
) -> bytes:
    """The heatmap image of a stored run (the measurement hook for bench: `heatmap_seconds`)."""
    if not isinstance(params, HeatmapParams):
        params = parse_heatmap_params(params or {})
    return heatmap_image(session, run_id, params, fmt).content


def heatmap_image(session: Session, run_id: int, params: HeatmapParams, fmt: str) -> Rendered:
    return render_job(heatmap_job(session, run_id, params, fmt))


def heatmap_job(
    session: Session, run_id: int, params: HeatmapParams, fmt: str, max_pixels: int | None = None
) -> RenderJob:
    """Everything but the drawing: the data read, the matrix built, the size checked against `max_pixels`."""
    run = get_ready_run(session, run_id)
    panel = build_panel(session, run, params)
    style = style_for(params, [panel.matrix])
    return plan_render([panel], style, params, fmt, max_pixels)


def heatmap_cache_key(session: Session, run_id: int, params: HeatmapParams, fmt: str) -> tuple[object, ...]:
    """What a rendered heatmap depends on: the stored run (404 / 409 raised here), the parameters, the format
    and the policy version (the skip set drawn comes from the recommendation)."""
    return ("heatmap", run_identity(session, get_ready_run(session, run_id)), params, fmt, POLICY_VERSION)


def heatmap_layout(session: Session, run_id: int, params: HeatmapParams, *, cell_columns: int = 0) -> dict[str, Any]:
    """The rows, columns, summary and pixel geometry of the heatmap, without drawing it (JSON); with
    `cell_columns` > 0 also its values, reduced to at most that many columns as the image reduces them."""
    run = get_ready_run(session, run_id)
    panel = build_panel(session, run, params)
    return layout_body(
        run.id,
        params,
        panel.matrix,
        panel.summary,
        skip_layers=panel.skip_layers,
        gemm_overrides=panel.gemm_overrides,
        cell_columns=cell_columns,
        precisions=panel.precisions,
        recipe=panel.recipe,
    )


def layout_body(
    run_id: int,
    params: HeatmapParams,
    matrix: HeatmapMatrix,
    summary: HeatSummary,
    *,
    skip_layers: frozenset[str] | None = None,
    gemm_overrides: Mapping[str, tuple[str, ...]] | None = None,
    cell_columns: int = 0,
    precisions: Mapping[str, str] | None = None,
    recipe: str | None = None,
) -> dict[str, Any]:
    """heatmap.json of a stored or a live run; `skip_layers` None: no recommendation to mark (a live run);
    `precisions`: each layer's recommended precision (the recommendation's headline), marked right of its row."""
    recommended = precisions or {}
    geometry = geometry_for([matrix], params)
    skip = skip_layers or frozenset()
    overrides = gemm_overrides or {}
    boxed = set(summary.boxed)
    rows = [
        {
            "label": row.label,
            "layer": row.layer,
            "group": row.group,
            "kind": row.kind,
            "precision": row.precision,
            "level": _num(summary.levels[k]),
            "severity": sev.value if (sev := summary.severity(k)) is not None else None,
            "boxed": k in boxed,
            "skip": row.layer in skip,
            "gemm_override": list(overrides.get(row.layer, ())) or None,
            "recommended": recommended.get(row.layer),
        }
        for k, row in enumerate(matrix.rows)
    ]
    its = matrix.iterations
    return {
        "run_id": run_id,
        "tensor": params.tensor,
        "stat": params.stat,
        "rank": params.rank,
        "sublayer": params.sublayer,
        "vmax": style_for(params, [matrix]).vmax,
        "rows": rows,
        "iterations": {"first": int(its[0]), "last": int(its[-1]), "count": int(its.shape[0])},
        "summary": summary.to_dict(),
        "skip_layers": sorted(skip) if skip_layers is not None else None,
        "recommended_recipe": recipe,
        "image": {
            "width_px": geometry.pixels[0],
            "height_px": geometry.pixels[1],
            "extent_px": list(geometry.extent_px(0)),
        },
        "cells": cell_values(matrix, cell_columns) if cell_columns else None,
        "colormap": list(colormap_stops()),
    }


def check_selection(
    run_label: str, params: HeatmapParams, ranks: Callable[[], Collection[int]], infos: list[LayerInfo]
) -> None:
    """400 `InvalidParameter` when `params` asks for a rank or a sublayer that the run (`run_label`: "run 7",
    "live run 7 (received so far)") does not have; `ranks` is only asked when a rank is."""
    if params.rank is not None and params.rank not in (known := ranks()):
        raise InvalidParameter(f"{run_label} has no rank {params.rank}; ranks: {', '.join(map(str, sorted(known)))}")
    if params.sublayer is not None and params.sublayer not in (sublayers := sublayers_of(infos)):
        raise InvalidParameter(f"{run_label} has no sublayer {params.sublayer!r}; sublayers: {', '.join(sublayers)}")


def matrix_for(run_label: str, infos: list[LayerInfo], series: list[Series], params: HeatmapParams) -> HeatmapMatrix:
    """The heatmap matrix of the selected series; 400 `NoData` when the sublayer leaves nothing to draw."""
    matrix = build_matrix(infos, series, sublayer=params.sublayer)
    if not matrix.rows or not matrix.iterations.shape[0]:
        raise NoData(f"nothing to draw for sublayer {params.sublayer!r} of {run_label}")
    return matrix


def summary_for(
    matrix: HeatmapMatrix,
    params: HeatmapParams,
    severities: Mapping[str, Severity] | None = None,
    metadata: Mapping[str, object] | None = None,
) -> HeatSummary:
    """The row levels and boxed rows under the requested thresholds, each row in the bands of the format its drawn
    series measures (the run's `metadata` states a mixed-format run's layer recipes; policy/analysis/format_bands.py);
    `severities` (the analysis's verdicts of the drawn series) decide the boxes when given."""
    bands = SeriesBands.from_metadata(params.thresholds, metadata, [row.layer for row in matrix.rows])
    return summarize(
        matrix,
        params.thresholds,
        percent=is_percent_stat(params.stat),
        boxes=params.boxes,
        severities=severities,
        row_bands={row.layer: bands.for_key(row.layer, params.stat) for row in matrix.rows},
    )


def run_severities(
    session: Session, run: Run, params: HeatmapParams, marks: Recommended | None = None
) -> dict[str, Severity] | None:
    """layer -> the verdict of the drawn (tensor, stat) from the run's analysis (same thresholds); None when
    the analysis gives none for that stat. A single rank is drawn: verdicts are over ranks, so none then.
    The analysis is the stored one (default thresholds), else the one the recommended marks were computed from
    (same thresholds), else computed: a first render analyses the run once, not twice."""
    if params.rank is not None:
        return None
    if marks is not None and marks.verdict_rows is not None and marks.thresholds == params.thresholds:
        if not params.threshold_overrides and (stored := SummaryRepository(session).analysis(run.id, POLICY_VERSION)):
            analysis = stored
        else:
            analysis = {"layers": list(marks.verdict_rows), "stats": {"stat_prefix": marks.stat_prefix}}
    else:
        analysis = view_analysis(session, run.id, dict(params.threshold_overrides) or None)
    stats = analysis.get("stats") or {}
    return verdict_severities(analysis.get("layers") or [], params.tensor, params.stat, stats.get("stat_prefix"))


def cell_values(matrix: HeatmapMatrix, columns: int) -> dict[str, Any]:
    """The matrix averaged (NaN-aware) into at most `columns` iteration columns, as `render.fit_columns` does for
    the image; each column names the first and last iteration it covers. NaN (not logged) is null."""
    values, _span = fit_columns(matrix.values, float(columns))
    its = matrix.iterations
    k = max(1, -(-its.shape[0] // columns))  # the columns each reduced column averages (as fit_columns)
    starts = [int(its[j * k]) for j in range(values.shape[1])]
    ends = [int(its[min((j + 1) * k, its.shape[0]) - 1]) for j in range(values.shape[1])]
    rounded = np.round(values, 4)
    rows = [[None if v != v else float(v) for v in row] for row in rounded.tolist()]
    return {"first": starts, "last": ends, "values": rows}


@functools.cache
def colormap_stops(count: int = 33) -> tuple[str, ...]:
    """The image's colour map (`render.colormap`) sampled at `count` evenly spaced points, as #rrggbb.

    Imports matplotlib on the first call (a heatmap view), not when the service starts (service/visual/panel.py)."""
    from matplotlib.colors import to_hex

    from fp8_policy.service.visual.render import colormap

    return tuple(to_hex(c) for c in colormap()(np.linspace(0.0, 1.0, count)))


def build_panel(session: Session, run: Run, params: HeatmapParams, *, title: str | None = None) -> Panel:
    matrix = load_matrix(session, run, params)
    _check_mark(matrix, params)
    marks = recommended(session, run, params.threshold_overrides) if params.show_skip else None
    summary = summary_for(matrix, params, run_severities(session, run, params, marks), run.run_metadata)
    return Panel(
        matrix,
        summary,
        title or run_title(run, params),
        _subtitle(run, matrix, params),
        marks.skip_layers if marks else None,
        marks.gemm_overrides if marks else {},
        marks.precisions if marks else {},
        marks.recipe if marks else None,
    )


def load_matrix(session: Session, run: Run, params: HeatmapParams) -> HeatmapMatrix:
    repo = RunRepository(session)
    infos = [layer_info(layer) for layer in repo.layers(run.id)]
    check_selection(f"run {run.id}", params, lambda: known_ranks(run, repo.ranks(run.id)), infos)
    rows = repo.metric_arrays(run.id, tensor=params.tensor, stat_key=params.stat, rank=stored_rank(run, params.rank))
    if not rows:
        keys = repo.metric_keys(run.id)
        raise NoData(
            f"run {run.id} logged no {params.tensor} {params.stat!r}; it has: {', '.join(f'{t}/{s}' for t, s in keys)}"
        )
    series = [
        Series(rank, metric_of(layer, params.tensor, params.stat), decode_iterations(its), decode_values(vals))
        for layer, rank, its, vals in rows
    ]
    if params.rank is None and run.parallel:  # every rank: shards combined, as the analysis reads them
        series = drawn_series(ParallelInfo.from_json(run.parallel), series)
    return matrix_for(f"run {run.id}", infos, series, params)


def layer_info(layer: Layer) -> LayerInfo:
    """A stored `Layer` row as the policy code's `LayerInfo`."""
    return LayerInfo(
        name=layer.name,
        structure=LayerStructure(LayerGroup(layer.group), layer.layer_index, layer.sublayer),
        precision=Precision(layer.precision),
        has_fp8_stats=layer.has_fp8_stats,
    )


def style_for(params: HeatmapParams, matrices: list[HeatmapMatrix]) -> Style:
    """One colour scale for every panel: the requested cap, else 6 % (percent stats) or the largest value."""
    percent = is_percent_stat(params.stat)
    vmax = params.vmax or max(default_vmax(m.values, percent) for m in matrices)
    prefix = stat_key_prefix(params.stat)  # an nvfp4_ stat is drawn against NVFP4's bands, as its rows are judged
    return Style(
        vmax=vmax,
        thresholds=recipe_bands(PREFIX_RECIPE[prefix], params.thresholds) if prefix else params.thresholds,
        percent=percent,
        value_label=f"{params.tensor} {params.stat}",
        mark_iteration=params.mark_iteration,
        boxes=params.boxes,
    )


def geometry_for(matrices: list[HeatmapMatrix], params: HeatmapParams) -> HeatmapGeometry:
    rows = max(m.shape[0] for m in matrices)
    chars = max((len(row.label) for m in matrices for row in m.rows), default=8)
    try:
        shared = len(matrices) > 1 and all(
            [r.layer for r in m.rows] == [r.layer for r in matrices[0].rows] for m in matrices[1:]
        )
        return plan_geometry(
            rows,
            chars,
            panels=len(matrices),
            dpi=params.dpi,
            width=params.width,
            height=params.height,
            shared_rows=shared,
        )
    except ValueError as exc:
        raise InvalidParameter(str(exc)) from exc


def run_title(run: Run, params: HeatmapParams) -> str:
    name = run.name or f"run {run.id}"
    return f"{name} — {params.tensor} {params.stat}"


def render_panels(panels: list[Panel], style: Style, params: HeatmapParams, fmt: str) -> Rendered:
    return render_job(plan_render(panels, style, params, fmt))


def plan_render(
    panels: list[Panel], style: Style, params: HeatmapParams, fmt: str, max_pixels: int | None = None
) -> RenderJob:
    """The geometry and headers of the figure; 400 `ImageTooLarge` beyond `max_pixels` (a 600 dpi poster costs
    gigabytes of memory and many seconds to draw)."""
    if fmt not in MEDIA_TYPES:
        raise UnknownFormat(f"unknown image format {fmt!r}; expected png or svg")
    geometry = geometry_for([p.matrix for p in panels], params)
    width, height = geometry.pixels
    if max_pixels is not None and width * height > max_pixels:
        raise ImageTooLarge(
            f"the image would be {width:,} x {height:,} = {width * height:,} pixels "
            f"({geometry.width_in:g} x {geometry.height_in:g} in at {geometry.dpi} dpi); the limit is "
            f"{max_pixels:,} pixels: lower dpi, width or height"
        )
    headers = {
        "X-Heatmap-Size": f"{width},{height}",
        "X-Heatmap-Extent": ";".join(",".join(f"{v:g}" for v in geometry.extent_px(k)) for k in range(len(panels))),
        "X-Heatmap-Shape": ";".join(f"{p.matrix.shape[0]},{p.matrix.shape[1]}" for p in panels),
        "X-Heatmap-Vmax": f"{style.vmax:g}",
        "Cache-Control": "no-cache",
    }
    return RenderJob(tuple(panels), style, geometry, fmt, headers)


def _subtitle(run: Run, matrix: HeatmapMatrix, params: HeatmapParams) -> str:
    rows, columns = matrix.shape
    its = matrix.iterations
    ranks = (
        f"rank {params.rank}"
        if params.rank is not None
        else ("rank 0" if run.rank_count == 1 else f"max over {run.rank_count} ranks")
    )
    unit = "blocks" if params.sublayer else "rows"
    what = f"{rows} {unit}" + (f" ({params.sublayer})" if params.sublayer else "")
    return (
        f"run {run.id} · {ranks} · {what} × {columns:,} logged iterations ({int(its[0]):,}–{int(its[-1]):,})"
        f" · row level = p95"
    )


def _check_mark(matrix: HeatmapMatrix, params: HeatmapParams) -> None:
    mark = params.mark_iteration
    if mark is None:
        return
    first, last = int(matrix.iterations[0]), int(matrix.iterations[-1])
    if not first <= mark <= last:
        raise InvalidParameter(f"mark_iteration {mark} is outside the run's iterations {first}-{last}")


def _num(value: float) -> float | None:
    return None if value != value else round(float(value), 4)
