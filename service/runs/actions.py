"""Use cases behind the run routes that read runs: one run, a page of them, layers, series, the CSV export; and the
edit of a run's notes and tags. Storing an upload and deleting a run (bytes and files) are service/runs/writes.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy._lazy import lazy_module
from fp8_policy.db import run_edits
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import RunRepository, tags_of
from fp8_policy.db.session import session_scope
from fp8_policy.db.summaries import SummaryRepository
from fp8_policy.policy.policy_version import POLICY_VERSION
from fp8_policy.policy.records import nonfinite_text
from fp8_policy.policy.safe_text import displayable, displayable_json
from fp8_policy.policy.vocabulary import Pattern
from fp8_policy.service import limits
from fp8_policy.service.auth.actions import Principal
from fp8_policy.service.errors import NotFound, NotReady, NotRunOwner
from fp8_policy.service.ingest import junk
from fp8_policy.service.runs.ownership import may_write
from fp8_policy.service.runs.schemas import (
    LayerRead,
    RunEdit,
    RunList,
    RunRead,
    RunSummaryRead,
    SeriesPoints,
    SeriesRead,
    StatSummary,
)
from fp8_policy.service.runs.training_link import check_training_run

if TYPE_CHECKING:
    import numpy as np

    from fp8_policy.db import codec
    from fp8_policy.policy import csv_export
else:  # imported on first use (a run's series, its CSV): start-up path, tests/service/app/test_start_up_imports.py
    np = lazy_module("numpy")
    codec = lazy_module("fp8_policy.db.codec")
    csv_export = lazy_module("fp8_policy.policy.csv_export")

MAX_TAGS = limits.MAX_TAGS


# Failures of uploads that never held a log (service/ingest/junk.py): such a run stays readable by id (the
# uploader's `--wait` reads why it failed) but is not listed among the runs, and keeps no bytes.
NEVER_HELD_A_LOG = junk.NEVER_HELD_A_LOG


def run_read(run: Run, *, with_report: bool = False) -> RunRead:
    # Stored text and JSON go out through displayable(): a run that exists always serializes (issue 9 item 1),
    # even one stored before the edge checks in service/limits.py existed.
    shown = _shown_text
    report = displayable_json(run.ingest_report) if with_report and run.ingest_report is not None else None
    return RunRead(
        id=run.id,
        name=shown(run.name),
        project=shown(run.project),
        tags=[shown(t) for t in tags_of(run)],
        status=run.status,
        error=shown(run.error),
        sha256=run.sha256,
        upload_filename=shown(run.upload_filename),
        upload_bytes=run.upload_bytes,
        metadata=_shown_metadata(run.run_metadata),
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        ranks=run.rank_count,
        ranks_stored=ranks_stored(run),
        layer_count=run.layer_count,
        series_count=run.series_count,
        points=run.point_count,
        iteration_min=run.iteration_min,
        iteration_max=run.iteration_max,
        lines_read=run.lines_read,
        lines_skipped=run.lines_skipped,
        lines_blank=run.lines_blank,
        lines_duplicated=run.lines_duplicated,
        ingest_report=report,
        uploaded_by=run.uploaded_by,
        notes=shown(run.notes),
        training_run=run.training_run,
    )


def ranks_stored(run: Run) -> int:
    """Distinct ranks stored, from the ingest report (runs ingested before replicas were stored once: all)."""
    report = run.ingest_report
    parallel = report.get("parallel") if isinstance(report, dict) else None
    stored = parallel.get("ranks_stored") if isinstance(parallel, dict) else None
    return stored if isinstance(stored, int) and not isinstance(stored, bool) else run.rank_count


def stored_rank(run: Run, rank: int | None) -> int | None:
    """The rank whose stored series `rank` repeats (ParallelInfo.representative: a data-parallel replica is
    stored once); `rank` itself when it was stored, or None (every rank)."""
    if rank is None:
        return None
    replicas = (run.parallel or {}).get("replicas")
    found = replicas.get(str(rank)) if isinstance(replicas, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else rank


def known_ranks(run: Run, stored: list[int]) -> list[int]:
    """Every rank a reader may ask for: the stored ones and their replicas."""
    replicas = (run.parallel or {}).get("replicas")
    extra = [int(r) for r in replicas if str(r).isdigit()] if isinstance(replicas, dict) else []
    return sorted(set(stored) | set(extra))


def _shown_text(text: str | None) -> str | None:
    return None if text is None else displayable(text)


def _shown_metadata(metadata: object) -> dict[str, Any]:
    shown = displayable_json(metadata) if metadata else {}
    return shown if isinstance(shown, dict) else {"value": shown}


def get_run(session: Session, run_id: int) -> Run:
    limits.check_run_id(run_id)
    run = RunRepository(session).get(run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def get_ready_run(session: Session, run_id: int) -> Run:
    run = get_run(session, run_id)
    if run.status != RunStatus.ready:
        detail = f"run {run_id} is {run.status}"
        raise NotReady(f"{detail}: {run.error}" if run.error else f"{detail}; try again when it is ready")
    return run


def list_runs(
    session: Session,
    *,
    project: str | None,
    status: RunStatus | None,
    tag: str | None,
    cursor: str | None,
    limit: int,
    facets: dict[str, str] | None = None,
) -> tuple[RunList, list[int]]:
    """A page of runs with their stored summaries, and the ready runs on it whose summary is still to compute.
    `facets`: metadata filters already checked and keyed (service/runs/facets.py `facet_filters`)."""
    limits.check_filters(project=project, tag=tag)
    project, tag = limits.nfc(project), limits.nfc(tag)  # as labels are stored (limits.check_label)
    after = limits.parse_cursor(cursor)
    runs = RunRepository(session).list(
        project=project,
        status=status,
        tag=tag,
        after_id=after,
        limit=limit + 1,
        unlisted_errors=NEVER_HELD_A_LOG,
        facets=facets,
    )
    page, more = runs[:limit], len(runs) > limit
    items = [run_read(r) for r in page]
    summaries = SummaryRepository(session).fresh([r.id for r in page if r.status == RunStatus.ready], POLICY_VERSION)
    for item in items:
        stored = summaries.get(item.id)
        if stored is not None:  # the stored record's fields by name (Schema reads attributes), and the label
            item.summary = RunSummaryRead.model_validate(stored).model_copy(
                update={"label": pattern_label(stored.pattern)}
            )
    missing = [item.id for item in items if item.status == RunStatus.ready and item.summary is None]
    return RunList(items=items, next_cursor=str(page[-1].id) if more and page else None), missing


def edit_run(session: Session, run_id: int, edit: RunEdit, caller: Principal) -> RunRead:
    """Replace a run's notes, tags and/or training-run link (those `edit` sets): all checked before anything is written, one
    transaction, the run's row locked first as every writer does (a run deleted meanwhile is 404). Only the token
    that uploaded the run, or an admin token, edits it (403 `NotRunOwner`: service/runs/ownership.py), a live
    run's as any other."""
    limits.check_run_id(run_id)
    notes = limits.check_notes(edit.notes) if "notes" in edit.model_fields_set else None
    tags = limits.check_tags(edit.tags) if edit.tags is not None else None
    link = check_training_run(edit.training_run) if "training_run" in edit.model_fields_set else None
    run = RunRepository(session).lock(run_id, "write")
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    if not may_write(run, caller, admin_too=True):
        raise NotRunOwner(f"run {run_id} was uploaded by another token: only that token or an admin token edits it")
    if "notes" in edit.model_fields_set:
        run_edits.set_notes(session, run, notes)
    if tags is not None:
        run_edits.replace_tags(session, run, tags)
    if "training_run" in edit.model_fields_set:
        run_edits.set_training_run(session, run, link)
    return run_read(run, with_report=True)


def pattern_label(pattern: str | None) -> str | None:
    """The human name of a stored pattern string ("u_shape" -> "U-shape"); the string itself if unknown."""
    if pattern is None:
        return None
    try:
        return Pattern(pattern).label
    except ValueError:
        return pattern


def layers_of(session: Session, run_id: int, rank: int | None) -> list[LayerRead]:
    run = get_ready_run(session, run_id)
    limits.check_rank(rank)
    repo = RunRepository(session)
    stats: dict[int, list[StatSummary]] = {}
    for row in repo.layer_summaries(run_id, stored_rank(run, rank)):
        # the row's fields by name, but for the stat's two names: `stat` is the logged key, `base_stat` the stat
        fields = {**asdict(row), "stat": row.stat_key, "base_stat": row.stat}
        stats.setdefault(row.layer_id, []).append(StatSummary.model_validate(fields))
    return [
        LayerRead(
            name=layer.name,
            group=layer.group,
            index=layer.layer_index,
            sublayer=layer.sublayer,
            precision=layer.precision,
            fp8={"fp8": True, "high": False}.get(layer.precision),
            has_fp8_stats=layer.has_fp8_stats,
            plans=layer.plans,
            stats=stats.get(layer.id, []),
        )
        for layer in repo.layers(run_id)
    ]


def series_of(session: Session, run_id: int, *, layer: str, tensor: str, stat: str, rank: int | None) -> SeriesRead:
    run = get_ready_run(session, run_id)
    limits.check_rank(rank)
    limits.check_filters(layer=layer, tensor=tensor, stat=stat)
    rows = RunRepository(session).series(run_id, layer=layer, tensor=tensor, stat_key=stat, rank=stored_rank(run, rank))
    if not rows:
        where = f" on rank {rank}" if rank is not None else ""
        raise NotFound(f"run {run_id} has no series {layer!r} / {tensor!r} / {stat!r}{where}")
    points = [
        SeriesPoints(
            rank=s.rank if rank is None else rank,  # a replica's series are its stored twin's
            iterations=codec.decode_iterations(s.iterations).tolist(),
            values=json_values(codec.decode_values(s.values)),
        )
        for s, _layer in rows
    ]
    return SeriesRead(layer=layer, tensor=tensor, stat=stat, series=points)


def json_values(values: np.ndarray) -> list[Any]:
    out: list[Any] = values.tolist()
    if not np.isfinite(values).all():
        for k in np.flatnonzero(~np.isfinite(values)).tolist():
            out[k] = nonfinite_text(float(values[k]))
    return out


def _coordinates(parallel: Any) -> dict[int, dict[str, int]] | None:
    """Rank -> its coordinates, for a run stored with a parallel layout that places several ranks (None otherwise:
    a one-rank run's CSV keeps the columns it always had)."""
    if not isinstance(parallel, dict) or len(parallel.get("ranks") or ()) < 2 or parallel.get("source") == "unknown":
        return None
    return {int(rank): dict(coord) for rank, coord in parallel["ranks"].items() if isinstance(coord, dict)}


def csv_rows(factory: sessionmaker[Session], run_id: int, layout: str, rank: int | None) -> Iterator[bytes]:
    """The metrics CSV, generated series by series with its own session (the response streams it) in pieces of
    about a megabyte: the rows are written by policy.csv_export's compiled writer."""
    with session_scope(factory) as session:
        stored = RunRepository(session).get(run_id)
        coords = _coordinates(stored.parallel if stored is not None else None)
    yield csv_export.header(layout, coordinates=coords is not None)
    pending: list[bytes] = []
    size = 0
    with session_scope(factory) as session:
        repo = RunRepository(session)
        run = repo.get(run_id)
        wanted = stored_rank(run, rank) if run is not None else rank
        for r, layer, tensor, recipe, stat_key, its, vals in repo.iter_points(run_id, wanted):
            shown = r if rank is None else rank  # a replica's series are its stored twin's
            coordinate = coords.get(shown, {}) if coords is not None else None
            prefix = csv_export.row_prefix(layout, shown, layer, tensor, recipe, stat_key, coordinate)
            for piece in csv_export.series_rows(prefix, its, vals):
                pending.append(piece)
                size += len(piece)
                if size >= csv_export.CHUNK_BYTES:
                    yield b"".join(pending)
                    pending, size = [], 0
    if pending:
        yield b"".join(pending)
