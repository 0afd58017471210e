"""The heatmap of a live run, from the statistics received so far: the same shape as a stored run's heatmap.json.

A live run has no layers or series in the database yet: its statistics logs lie under
`<data_dir>/live/<run_id>/` (service/live/actions.py). `LiveHeatmaps` keeps, per run, the points parsed so far
(`policy.parse.stats_log.StatsLogParser` over each file's new whole lines only, so a poll costs the new bytes) and the
layout last answered, keyed by the acknowledged file sizes and the parameters: a poll that finds no new bytes is
answered from memory. The parameter checks, matrix, summary and JSON body are the stored run's (service/visual/actions.py);
there is no recommendation while live, so nothing is marked to skip.

Memory: the points of every series parsed so far (16 bytes a point) for the few most recently polled runs.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8_policy._lazy import lazy_module
from fp8_policy.db.live import LiveFileRecord
from fp8_policy.policy.names import split_metric_name
from fp8_policy.policy.parse.log_files import classify_log_path
from fp8_policy.policy.parse.metadata_log import MetadataLog, merge_metadata, parse_metadata_lines
from fp8_policy.policy.records import MetricName, Series
from fp8_policy.service.errors import NoData
from fp8_policy.service.visual.params import HeatmapParams

if TYPE_CHECKING:
    import numpy as np

    from fp8_policy.policy.parse import assemble, stats_log
    from fp8_policy.service.visual import actions as visual
else:  # imported on first use (a live heatmap's first poll): start-up path, tests/service/app/test_start_up_imports.py
    assemble = lazy_module("fp8_policy.policy.parse.assemble")
    stats_log = lazy_module("fp8_policy.policy.parse.stats_log")
    visual = lazy_module("fp8_policy.service.visual.actions")
    np = lazy_module("numpy")

MAX_RUNS = 4  # runs whose parsed points stay in memory (the ones being watched)
MAX_LAYOUTS = 16  # answered layouts kept per run (parameter combinations polled)


@dataclass(slots=True)
class _FileProgress:
    parsed: int = 0  # bytes of whole lines parsed


@dataclass(slots=True)
class _RunPoints:
    """Everything parsed from one live run so far."""

    files: dict[str, _FileProgress] = field(default_factory=dict)
    points: dict[tuple[int, str], list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)  # (rank, name)
    metadata_sizes: dict[str, int] = field(default_factory=dict)
    metadata: MetadataLog = field(default_factory=MetadataLog)
    # (file sizes, params, cell columns) -> layout
    layouts: OrderedDict[tuple[object, ...], dict[str, Any]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LiveHeatmaps:
    """Per-process cache of live runs' parsed statistics and answered layouts (thread-safe).

    A run is known by (id, its live folder, its creation time), not by its id alone: two services in one process
    (the test suite: SQLite and PostgreSQL apps) have runs with the same ids, and a deleted run's id may be given
    again; either would otherwise be answered from another run's parsed lines."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self._runs: OrderedDict[tuple[int, str, str], _RunPoints] = OrderedDict()
        self._guard = threading.Lock()
        self._max_runs = max_runs

    def _run(self, identity: tuple[int, str, str]) -> _RunPoints:
        with self._guard:
            state = self._runs.get(identity)
            if state is None:
                state = self._runs[identity] = _RunPoints()
            self._runs.move_to_end(identity)
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)
            return state

    def forget(self, run_id: int) -> None:
        with self._guard:
            for identity in [key for key in self._runs if key[0] == run_id]:
                del self._runs[identity]

    def knows(self, run_id: int) -> bool:
        with self._guard:
            return any(key[0] == run_id for key in self._runs)

    def layout(
        self,
        run_id: int,
        created: str,
        root: Path,
        files: list[LiveFileRecord],
        params: HeatmapParams,
        cell_columns: int,
        metadata: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """heatmap.json of the live run (created at `created`) whose received files (`files`, acknowledged sizes)
        lie under `root`; `metadata`: the run's (a mixed-format run's `layer_recipes` choose rows' bands)."""
        state = self._run((run_id, str(root), created))
        sizes = tuple((f.path, f.size) for f in files if f.kind in ("stats", "metadata"))
        key = (sizes, params, cell_columns)
        with state.lock:
            cached = state.layouts.get(key)
            if cached is not None:
                state.layouts.move_to_end(key)
                return cached
            for f in files:
                if f.kind == "stats":
                    _parse_new_lines(state, root / f.path, f.path, f.size)
                elif f.kind == "metadata" and state.metadata_sizes.get(f.path) != f.size:
                    state.metadata_sizes[f.path] = f.size
                    state.metadata = _read_metadata(root, state.metadata_sizes)
            answer = _layout(run_id, state, params, cell_columns, metadata)
            state.layouts[key] = answer
            while len(state.layouts) > MAX_LAYOUTS:
                state.layouts.popitem(last=False)
            return answer


def _parse_new_lines(state: _RunPoints, disk: Path, path: str, size: int) -> None:
    """Parse the whole lines between the last parsed byte and `size` (the acknowledged bytes) of one stats file."""
    progress = state.files.setdefault(path, _FileProgress())
    if size <= progress.parsed:
        return
    with open(disk, "rb") as handle:
        handle.seek(progress.parsed)
        new = handle.read(size - progress.parsed)
    cut = new.rfind(b"\n")
    if cut < 0:
        return
    progress.parsed += cut + 1
    log = classify_log_path(path)
    rank = log.rank if log is not None else 0
    parser = stats_log.StatsLogParser(workers=1)
    try:
        parser.feed(io.BytesIO(new[: cut + 1]), path)
    except stats_log.NoStatsLines:
        return
    parsed = parser.finish()
    for k, name in enumerate(parsed.names):
        its, vals = parsed.series(k)
        state.points.setdefault((rank, name), []).append((its.copy(), vals.copy()))


def _read_metadata(root: Path, sizes: dict[str, int]) -> MetadataLog:
    logs = []
    for path, size in sorted(sizes.items()):
        with open(root / path, "rb") as handle:
            text = handle.read(size).decode("utf-8", errors="replace")
        logs.append(parse_metadata_lines(text[: text.rfind("\n") + 1]))
    return merge_metadata(logs)


def _series(chunks: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One series from its parsed pieces (merged in place): sorted by iteration, the last point of an iteration
    wins, as the ingest keeps it (policy/parse/stats_log.py)."""
    if len(chunks) > 1:
        its = np.concatenate([c[0] for c in chunks])
        vals = np.concatenate([c[1] for c in chunks])
        if its.shape[0] > 1 and not bool(np.all(its[1:] > its[:-1])):
            order = np.argsort(its, kind="stable")
            its, vals = its[order], vals[order]
            keep = np.ones(its.shape[0], dtype=bool)
            keep[:-1] = its[1:] != its[:-1]
            its, vals = its[keep], vals[keep]
        chunks[:] = [(its, vals)]
    return chunks[0]


def _layout(
    run_id: int, state: _RunPoints, params: HeatmapParams, cell_columns: int, metadata: Mapping[str, object] | None
) -> dict[str, Any]:
    label = f"live run {run_id} (received so far)"
    known = state.metadata.known_layers()
    metrics: dict[str, MetricName | None] = {}
    for _rank, name in state.points:
        if name not in metrics:
            metrics[name] = split_metric_name(name, known)
    facts = [(m.layer, m.stat, m.recipe) for m in metrics.values() if m is not None]
    infos = [layer.info for layer in assemble.layer_table(facts, state.metadata)]
    ranks = sorted({rank for rank, _ in state.points})
    if not state.points:
        raise NoData(f"live run {run_id} has no statistics lines yet")
    visual.check_selection(label, params, lambda: ranks, infos)
    series = []
    for (rank, name), chunks in state.points.items():
        metric = metrics[name]
        if metric is None or metric.tensor != params.tensor or metric.stat_key != params.stat:
            continue
        if params.rank is not None and rank != params.rank:
            continue
        its, vals = _series(chunks)
        series.append(Series(rank, metric, its, vals))
    if not series:
        logged = sorted({f"{m.tensor}/{m.stat_key}" for m in metrics.values() if m is not None})
        raise NoData(
            f"live run {run_id} logged no {params.tensor} {params.stat!r} yet; it has: "
            f"{', '.join(logged) or 'nothing attributable'}",
        )
    matrix = visual.matrix_for(label, infos, series, params)
    summary = visual.summary_for(matrix, params, metadata=metadata)
    body = visual.layout_body(run_id, params, matrix, summary, cell_columns=cell_columns)
    return {**body, "ranks": ranks}
