"""Test helpers that go behind the API's back: insert runs and count rows directly with SQLAlchemy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Layer, Run, RunTag, Series
from fp8_policy.db.runs import NewRun, RunRepository


def insert_run(
    engine: Engine,
    project: str,
    *,
    status: str = "queued",
    upload_path: str = "",
    sha256: str | None = None,
    upload_filename: str | None = "upload.tar.gz",
) -> int:
    """A run row as the API would create it, then forced into `status` (no ingest is submitted)."""
    with Session(engine) as session, session.begin():
        run = RunRepository(session).add(
            NewRun(
                None,
                project,
                (),
                {},
                sha256 or f"{project}-{status}".ljust(64, "0")[:64],
                upload_filename,
                123,
                upload_path,
            )
        )
        session.execute(update(Run).where(Run.id == run.id).values(status=status))
        return run.id


def row_counts(engine: Engine, run_id: int) -> dict[str, int]:
    """Rows that belong to one run, per table."""
    with Session(engine) as session:
        return {
            "runs": session.scalar(select(func.count()).select_from(Run).where(Run.id == run_id)),
            "run_tags": session.scalar(select(func.count()).select_from(RunTag).where(RunTag.run_id == run_id)),
            "layers": session.scalar(select(func.count()).select_from(Layer).where(Layer.run_id == run_id)),
            "series": session.scalar(select(func.count()).select_from(Series).where(Series.run_id == run_id)),
        }


def runs_of_project(engine: Engine, project: str) -> list[int]:
    with Session(engine) as session:
        return list(session.scalars(select(Run.id).where(Run.project == project).order_by(Run.id)))


def files_under(root: Path) -> set[str]:
    """Every regular file (and symlink) under root, as POSIX paths relative to root."""
    if not root.exists():
        return set()
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def layer_fields(layer: Any) -> tuple:
    """A stored layer (ORM row or repository record): name, position, group, index, sublayer, precision,
    has_fp8_stats, plans."""
    fields = ("name", "position", "group", "layer_index", "sublayer", "precision", "has_fp8_stats", "plans")
    return tuple(getattr(layer, name) for name in fields)


def assembled_layer_fields(layer: Any) -> tuple:
    """What `layer_fields` reads back once an ingest's assembled layer is stored."""
    info, structure = layer.info, layer.info.structure
    group, precision = structure.group.value, info.precision.value
    return (
        info.name,
        layer.position,
        group,
        structure.index,
        structure.sublayer,
        precision,
        info.has_fp8_stats,
        layer.plans,
    )
