"""Use cases behind the run routes: create from an upload, read, list, delete, export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.models import Run
from fp8_policy.db.repositories import NewRun, RunRepository, tags_of
from fp8_policy.db.session import session_scope
from fp8_policy.policy import csv_export
from fp8_policy.policy.records import nonfinite_text
from fp8_policy.service.errors import BadRequest, NotFound, NotReady
from fp8_policy.service.ingest.store import ArchiveStore
from fp8_policy.service.ingest.upload import ReceivedUpload
from fp8_policy.service.runs.schemas import LayerRead, RunList, RunRead, SeriesPoints, SeriesRead, StatSummary

MAX_TAGS = 50


def parse_upload_fields(fields: dict[str, str]) -> tuple[str | None, str, tuple[str, ...], dict]:
    """Validate name / project / tags / metadata from form fields or query parameters."""
    name = (fields.get("name") or "").strip() or None
    project = (fields.get("project") or "").strip() or "default"
    tags = tuple(t.strip() for t in (fields.get("tags") or "").split(",") if t.strip())
    if name and len(name) > 200:
        raise BadRequest("name is longer than 200 characters")
    if len(project) > 200:
        raise BadRequest("project is longer than 200 characters")
    if len(tags) > MAX_TAGS or any(len(t) > 100 for t in tags):
        raise BadRequest(f"at most {MAX_TAGS} tags of at most 100 characters each")
    raw = fields.get("metadata")
    metadata: dict = {}
    if raw and raw.strip():
        try:
            metadata = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"metadata is not valid JSON: {exc}") from exc
        if not isinstance(metadata, dict):
            raise BadRequest("metadata must be a JSON object")
    return name, project, tags, metadata


def create_run(session: Session, data_dir: Path, upload: ReceivedUpload, fields: dict[str, str],
               store: ArchiveStore | None = None) -> tuple[Run, bool]:
    """Store a new queued run for the upload, or return the existing run with the same bytes.

    Returns (run, created). The upload file is moved under data_dir/runs/<id>/ or deleted.
    """
    name, project, tags, metadata = parse_upload_fields(fields)
    repo = RunRepository(session)
    existing = repo.find_by_hash(project, upload.sha256)
    if existing is not None:
        upload.path.unlink(missing_ok=True)
        return existing, False
    try:
        with session.begin_nested():
            filename = upload.filename[-500:] if upload.filename else None  # the column's limit; keep the extension
            run = repo.add(NewRun(name, project, tags, metadata, upload.sha256, filename, upload.size, ""))
    except IntegrityError:  # the same bytes arrived concurrently
        upload.path.unlink(missing_ok=True)
        winner = repo.find_by_hash(project, upload.sha256)
        if winner is None:
            raise
        return winner, False
    relative = Path("runs") / str(run.id) / "upload.bin"
    (data_dir / relative).parent.mkdir(parents=True, exist_ok=True)
    (store or ArchiveStore(str(data_dir))).put_file(upload.path, relative.as_posix())  # the archive store (S3, ...)
    run.upload_path = str(relative)
    session.flush()
    return run, True


def run_read(run: Run, *, with_report: bool = False) -> RunRead:
    return RunRead(
        id=run.id, name=run.name, project=run.project, tags=list(tags_of(run)), status=run.status,
        error=run.error, sha256=run.sha256, upload_filename=run.upload_filename, upload_bytes=run.upload_bytes,
        metadata=run.run_metadata or {}, created_at=run.created_at, started_at=run.started_at,
        finished_at=run.finished_at, ranks=run.rank_count, layer_count=run.layer_count,
        series_count=run.series_count, points=run.point_count, iteration_min=run.iteration_min,
        iteration_max=run.iteration_max, lines_read=run.lines_read, lines_skipped=run.lines_skipped,
        lines_blank=run.lines_blank, lines_duplicated=run.lines_duplicated,
        ingest_report=run.ingest_report if with_report else None,
    )


def get_run(session: Session, run_id: int) -> Run:
    run = RunRepository(session).get(run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def get_ready_run(session: Session, run_id: int) -> Run:
    run = get_run(session, run_id)
    if run.status != "ready":
        detail = f"run {run_id} is {run.status}"
        raise NotReady(f"{detail}: {run.error}" if run.error else f"{detail}; try again when it is ready")
    return run


def list_runs(session: Session, *, project, status, tag, cursor: str | None, limit: int) -> RunList:
    after = None
    if cursor:
        if not cursor.isdigit():
            raise BadRequest(f"invalid cursor {cursor!r}")
        after = int(cursor)
    runs = RunRepository(session).list(project=project, status=status, tag=tag, after_id=after, limit=limit + 1)
    page, more = runs[:limit], len(runs) > limit
    return RunList(items=[run_read(r) for r in page], next_cursor=str(page[-1].id) if more and page else None)


def delete_run(session: Session, data_dir: Path, run_id: int, store: ArchiveStore | None = None) -> None:
    repo = RunRepository(session)
    run = get_run(session, run_id)
    repo.delete(run)
    (store or ArchiveStore(str(data_dir))).delete_prefix(f"runs/{run_id}")


def layers_of(session: Session, run_id: int, rank: int | None) -> list[LayerRead]:
    get_ready_run(session, run_id)
    repo = RunRepository(session)
    stats: dict[int, list[StatSummary]] = {}
    for row in repo.layer_summaries(run_id, rank):
        layer_id, tensor, stat_key, stat, recipe, columnwise, mn, mx, mean, last, p95, count, nans, infs, n = row
        stats.setdefault(layer_id, []).append(StatSummary(
            tensor=tensor, stat=stat_key, base_stat=stat, recipe=recipe, columnwise=columnwise, min=mn, max=mx,
            mean=mean, last=last, p95=p95, count=count, nan_count=nans, inf_count=infs, ranks=n,
        ))
    return [
        LayerRead(
            name=layer.name, group=layer.group, index=layer.layer_index, sublayer=layer.sublayer,
            precision=layer.precision, fp8={"fp8": True, "high": False}.get(layer.precision),
            has_fp8_stats=layer.has_fp8_stats, plans=layer.plans, stats=stats.get(layer.id, []),
        )
        for layer in repo.layers(run_id)
    ]


def series_of(session: Session, run_id: int, *, layer: str, tensor: str, stat: str, rank: int | None) -> SeriesRead:
    get_ready_run(session, run_id)
    rows = RunRepository(session).series(run_id, layer=layer, tensor=tensor, stat_key=stat, rank=rank)
    if not rows:
        where = f" on rank {rank}" if rank is not None else ""
        raise NotFound(f"run {run_id} has no series {layer!r} / {tensor!r} / {stat!r}{where}")
    points = [
        SeriesPoints(rank=s.rank, iterations=decode_iterations(s.iterations).tolist(),
                     values=json_values(decode_values(s.values)))
        for s, _layer in rows
    ]
    return SeriesRead(layer=layer, tensor=tensor, stat=stat, series=points)


def json_values(values: np.ndarray) -> list:
    out = values.tolist()
    if not np.isfinite(values).all():
        for k in np.flatnonzero(~np.isfinite(values)).tolist():
            out[k] = nonfinite_text(float(values[k]))
    return out


def csv_rows(factory: sessionmaker[Session], run_id: int, layout: str, rank: int | None) -> Iterator[bytes]:
    """The metrics CSV, generated series by series with its own session (the response streams it) in pieces of
    about a megabyte: the rows are written by policy.csv_export's compiled writer."""
    yield csv_export.header(layout)
    pending: list[bytes] = []
    size = 0
    with session_scope(factory) as session:
        for r, layer, tensor, recipe, stat_key, its, vals in RunRepository(session).iter_points(run_id, rank):
            prefix = csv_export.row_prefix(layout, r, layer, tensor, recipe, stat_key)
            for piece in csv_export.series_rows(prefix, its, vals):
                pending.append(piece)
                size += len(piece)
                if size >= csv_export.CHUNK_BYTES:
                    yield b"".join(pending)
                    pending, size = [], 0
    if pending:
        yield b"".join(pending)
