"""The SQL of runs (db/run_models.py): add, find, list, lock, claim, delete a run, store a single-rank ingest and read
its layers, series and points. Repositories flush, they never commit (db/session.py owns the unit of work).

The rest of a run's SQL sits beside the tables it writes, each db/<things>.py with its db/<things>_models.py: a
parallel ingest's ranks in db/rank_store.py (series rows in db/series_rows.py), edits in db/run_edits.py, kept
configs in db/run_configs.py, summaries in db/summaries.py, live runs in db/live.py, jobs in db/jobs.py, alerts in
db/alerts.py, experiments in db/experiments.py, tokens in db/tokens.py."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import ColumnElement, CursorResult, Select, and_, delete, func, insert, or_, select, update

from fp8_policy._lazy import lazy_module
from fp8_policy.db.run_models import Layer, Run, RunStatus, RunTag, Series
from fp8_policy.db.run_rows import IngestCounts as IngestCounts  # re-exported: callers import it from here
from fp8_policy.db.run_rows import LayerStatSummary, SeriesPoints
from fp8_policy.db.run_rows import NewRun as NewRun  # re-exported: callers import it from here
from fp8_policy.db.series_rows import encode_series, insert_series
from fp8_policy.db.session import Repository
from fp8_policy.policy.run_facets import run_facets
from fp8_policy.policy.safe_text import displayable

# annotations only: the parser they belong to is not on the start-up path (tests/service/app/test_start_up_imports.py)
if TYPE_CHECKING:
    from fp8_policy.db import codec
    from fp8_policy.policy.parse.assemble import AssembledLayer, AssembledRun
else:  # imported on first use (numpy, isal): start-up path, tests/service/app/test_start_up_imports.py
    codec = lazy_module("fp8_policy.db.codec")


def utcnow() -> datetime:
    return datetime.now(UTC)


def storable_id(row_id: int) -> bool:
    """Whether `row_id` fits a 64-bit signed integer, the widest key any of our tables has: one outside names no
    row, and sqlite3 raises OverflowError for it as a parameter instead of finding nothing (a request for run
    -628928413900093652992 answered 500)."""
    return -(2**63) <= row_id < 2**63


def _rowcount(result: object) -> int:
    """Rows an UPDATE/DELETE matched. Session.execute is typed as returning Result, but a DML statement's
    result is always a CursorResult (the only kind with rowcount)."""
    return cast(CursorResult[Any], result).rowcount


class RunRepository(Repository):
    # `list` below is a method name, so annotations inside the class spell the type `builtins.list`.
    # --- runs -------------------------------------------------------------------------------
    def add(self, new: NewRun) -> Run:
        facets = run_facets(new.metadata)
        run = Run(
            name=new.name,
            project=new.project,
            status=RunStatus.queued,
            sha256=new.sha256,
            upload_filename=new.upload_filename,
            upload_bytes=new.upload_bytes,
            upload_path=new.upload_path,
            uploaded_by=new.uploaded_by,
            run_metadata=new.metadata,
            meta_gpu=facets["gpu"],
            meta_recipe=facets["recipe"],
            meta_te_version=facets["te_version"],
            meta_git_commit=facets["git_commit"],
            created_at=utcnow(),
            rank_count=0,
            layer_count=0,
            series_count=0,
            point_count=0,
            lines_read=0,
            lines_skipped=0,
            lines_blank=0,
            lines_duplicated=0,
        )
        run.tags = [RunTag(tag=t) for t in dict.fromkeys(new.tags)]
        self.session.add(run)
        self.session.flush()
        return run

    def get(self, run_id: int) -> Run | None:
        if not storable_id(run_id):
            return None
        return self.session.get(Run, run_id)

    def existing_ids(self, run_ids: Sequence[int]) -> set[int]:
        """Which of `run_ids` have a row (committed, or added by this session)."""
        found: set[int] = set()
        run_ids = [run_id for run_id in run_ids if storable_id(run_id)]
        for start in range(0, len(run_ids), 500):  # bound the IN list (SQLite's variable limit)
            found.update(self.session.scalars(select(Run.id).where(Run.id.in_(run_ids[start : start + 500]))))
        return found

    def find_by_hash(self, project: str, sha256: str) -> Run | None:
        return self.session.scalars(select(Run).where(Run.project == project, Run.sha256 == sha256)).first()

    def list(
        self,
        *,
        project: str | None,
        status: RunStatus | None,
        tag: str | None,
        after_id: int | None,
        limit: int,
        unlisted_errors: tuple[str, ...] = (),
        facets: dict[str, str] | None = None,
    ) -> builtins.list[Run]:
        """Newest first; `after_id` is the cursor (ids below it). Failed runs whose error ('<Code>: <detail>')
        has one of the codes in `unlisted_errors` are left out. `facets`: facet -> key (policy/run_facets.py
        `facet_key`), all of which a run's metadata must match (`facet_filter`)."""
        query: Select[Run] = select(Run).order_by(Run.id.desc()).limit(limit)
        for facet, key in (facets or {}).items():
            query = query.where(facet_filter(facet, key))
        if unlisted_errors:
            query = query.where(
                or_(
                    Run.status != RunStatus.failed,
                    Run.error.is_(None),
                    and_(*(Run.error.notlike(f"{code}:%") for code in unlisted_errors)),
                )
            )
        if project is not None:
            query = query.where(Run.project == project)
        if status is not None:
            query = query.where(Run.status == status)
        if tag is not None:
            query = query.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
        if after_id is not None:
            query = query.where(Run.id < after_id)
        return list(self.session.scalars(query))

    def lock(self, run_id: int, mode: str = "write") -> Run | None:
        """The run's row, locked for this transaction; None when it is gone. The first statement of every
        transaction that changes a run's rows (ingest jobs, live appends and finalize, delete): one lock order
        everywhere — the run's row before any of its jobs, live rows, layers or series — so none of them can
        deadlock another (deleting a run during its ingest once did: series -> layers -> runs against the rank
        store's inserts, which lock the run's row for their foreign keys), and a transaction that waited here sees
        whether the run was deleted meanwhile.

        `mode` (PostgreSQL row locks, https://www.postgresql.org/docs/current/explicit-locking.html#LOCKING-ROWS):
        `delete` (FOR UPDATE: also waits for foreign-key checks of inserts into its child tables), `write` (FOR NO KEY
        UPDATE: one writer of the run at a time), `share` (FOR SHARE: live appends, which may run side by side but
        not next to a writer or a delete). SQLite has no row locks: a no-op UPDATE takes the database's write lock
        at once, so the transaction's reads that follow are the latest commit's (pysqlite begins a transaction only
        at the first write)."""
        if mode not in ("delete", "write", "share"):
            raise ValueError(f"unknown lock mode {mode!r}")
        if not storable_id(run_id):
            return None
        if self.session.get_bind().dialect.name == "sqlite":
            self.session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(status=Run.status)
                .execution_options(synchronize_session=False)
            )
        query = (
            select(Run)
            .where(Run.id == run_id)
            .with_for_update(read=mode == "share", key_share=mode == "write")
            .execution_options(populate_existing=True)
        )
        return self.session.scalars(query).first()

    def delete(self, run: Run) -> None:
        """The run and every row of it, in the lock order of `lock` (the caller locked the run with `delete`)."""
        # Explicit deletes keep SQLite (no ON DELETE CASCADE without the pragma) and Postgres alike.
        for model in (Series, Layer, RunTag):
            self.session.execute(delete(model).where(model.run_id == run.id))
        self.session.execute(delete(Run).where(Run.id == run.id))
        self.session.expunge(run)

    def claim(self, run_id: int) -> Run | None:
        """queued -> processing; None when the run is gone or another worker took it."""
        result = self.session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status == RunStatus.queued)
            .values(status=RunStatus.processing, started_at=utcnow(), error=None)
        )
        return self.get(run_id) if _rowcount(result) == 1 else None

    def mark_failed(self, run_id: int, error: str) -> None:
        """Failing a run must never fail: the message (which may quote member names that are not UTF-8, or
        NUL) is stored as displayable text, which both SQLite and PostgreSQL accept."""
        self.session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status=RunStatus.failed, error=displayable(error), finished_at=utcnow())
        )

    def requeue_failed(self, run_id: int, *, upload_path: str) -> bool:
        """failed (or queued without its upload) -> queued again with `upload_path`; False when it is not.

        A failed run stores no layers or series (the ingest is all-or-nothing), so only its status, error and
        times are reset."""
        result = self.session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status.in_((RunStatus.failed, RunStatus.queued)))
            .values(status=RunStatus.queued, error=None, started_at=None, finished_at=None, upload_path=upload_path)
        )
        return _rowcount(result) == 1

    def requeue_interrupted(self) -> builtins.list[int]:
        """Runs left in `processing` by a stopped service go back to `queued`; returns all queued ids."""
        self.session.execute(update(Run).where(Run.status == RunStatus.processing).values(status=RunStatus.queued))
        return list(self.session.scalars(select(Run.id).where(Run.status == RunStatus.queued).order_by(Run.id)))

    # --- ingest -----------------------------------------------------------------------------
    def store_ingest(self, run: Run, assembled: AssembledRun, counts: IngestCounts) -> None:
        """Insert every layer and series of a run and mark it ready (the caller's transaction)."""
        layer_ids = self._insert_layers(run.id, assembled)
        insert_series(self.session, run.id, encode_series(assembled.series), layer_ids)
        firsts = [s.summary.first_iteration for s in assembled.series if s.summary.first_iteration is not None]
        lasts = [s.summary.last_iteration for s in assembled.series if s.summary.last_iteration is not None]
        run.status, run.error, run.finished_at = RunStatus.ready, None, utcnow()
        run.rank_count = len(assembled.ranks)
        run.layer_count = len(assembled.layers)
        run.series_count = len(assembled.series)
        run.point_count = assembled.points
        run.iteration_min = min(firsts) if firsts else None
        run.iteration_max = max(lasts) if lasts else None
        run.lines_read, run.lines_skipped = counts.lines_read, counts.lines_skipped
        run.lines_blank, run.lines_duplicated = counts.lines_blank, counts.lines_duplicated
        run.ingest_report = counts.report
        self.session.flush()

    def _insert_layers(self, run_id: int, assembled: AssembledRun) -> dict[str, int]:
        rows = [layer_row(run_id, layer) for layer in assembled.layers]
        if rows:
            self.session.execute(insert(Layer), rows)
        return dict(self.session.execute(select(Layer.name, Layer.id).where(Layer.run_id == run_id)).all())

    # --- reads ------------------------------------------------------------------------------
    def layers(self, run_id: int) -> builtins.list[Layer]:
        return list(self.session.scalars(select(Layer).where(Layer.run_id == run_id).order_by(Layer.position)))

    def layer_summaries(self, run_id: int, rank: int | None) -> builtins.list[LayerStatSummary]:
        """Per (layer, tensor, stat_key) summary over ranks, computed in SQL.

        Across ranks: min of minima, max of maxima, count-weighted mean, max of p95 and of last
        (the worst rank decides what a user must look at).
        """
        weighted = func.sum(Series.mean * Series.count) / func.nullif(func.sum(Series.count), 0)
        query = (
            select(
                Series.layer_id,
                Series.tensor,
                Series.stat_key,
                Series.stat,
                Series.recipe,
                Series.columnwise,
                func.min(Series.min).label("min"),
                func.max(Series.max).label("max"),
                weighted.label("mean"),
                func.max(Series.last).label("last"),
                func.max(Series.p95).label("p95"),
                func.sum(Series.count).label("count"),
                func.sum(Series.nan_count).label("nan_count"),
                func.sum(Series.posinf_count + Series.neginf_count).label("inf_count"),
                func.count().label("ranks"),
            )
            .where(Series.run_id == run_id)
            .group_by(Series.layer_id, Series.tensor, Series.stat_key, Series.stat, Series.recipe, Series.columnwise)
            .order_by(Series.layer_id, Series.tensor, Series.stat_key)
        )
        if rank is not None:
            query = query.where(Series.rank == rank)
        return [LayerStatSummary(**row._asdict()) for row in self.session.execute(query)]

    def ranks(self, run_id: int) -> builtins.list[int]:
        return list(self.session.scalars(select(Series.rank).where(Series.run_id == run_id).distinct()))

    def series(
        self, run_id: int, *, layer: str, tensor: str, stat_key: str, rank: int | None
    ) -> builtins.list[tuple[Series, Layer]]:
        query = (
            select(Series, Layer)
            .join(Layer, Layer.id == Series.layer_id)
            .where(Series.run_id == run_id, Layer.name == layer, Series.tensor == tensor, Series.stat_key == stat_key)
            .order_by(Series.rank)
        )
        if rank is not None:
            query = query.where(Series.rank == rank)
        return builtins.list(self.session.execute(query))

    def iter_points(self, run_id: int, rank: int | None, batch: int = 64) -> Iterator[SeriesPoints]:
        """(rank, layer name, tensor, recipe, stat_key, iterations, values) per series, model order."""
        query = (
            select(
                Series.rank, Layer.name, Series.tensor, Series.recipe, Series.stat_key, Series.iterations, Series.values
            )
            .join(Layer, Layer.id == Series.layer_id)
            .where(Series.run_id == run_id)
            .order_by(Series.rank, Layer.position, Series.tensor, Series.stat_key)
            .execution_options(yield_per=batch)
        )
        if rank is not None:
            query = query.where(Series.rank == rank)
        for r, layer, tensor, recipe, stat_key, iterations, values in self.session.execute(query):
            yield SeriesPoints(
                r, layer, tensor, recipe, stat_key, codec.decode_iterations(iterations), codec.decode_values(values)
            )

    def point_arrays(self, run_id: int) -> Iterator[tuple[Series, str]]:
        """Every series of a run with its layer name (for analysis); arrays still encoded."""
        query = select(Series, Layer.name).join(Layer, Layer.id == Series.layer_id).where(Series.run_id == run_id)
        for row in self.session.execute(query):
            yield row[0], row[1]

    def metric_arrays(
        self, run_id: int, *, tensor: str, stat_key: str, rank: int | None
    ) -> builtins.list[tuple[str, int, bytes, bytes]]:
        """(layer name, rank, iterations, values) of one (tensor, stat_key) — e.g. only the gradient
        underflows% of a run — in model order; arrays still encoded."""
        query = (
            select(Layer.name, Series.rank, Series.iterations, Series.values)
            .join(Layer, Layer.id == Series.layer_id)
            .where(Series.run_id == run_id, Series.tensor == tensor, Series.stat_key == stat_key)
            .order_by(Layer.position, Series.rank)
        )
        if rank is not None:
            query = query.where(Series.rank == rank)
        return builtins.list(self.session.execute(query))

    def metric_keys(self, run_id: int) -> builtins.list[tuple[str, str]]:
        """Distinct (tensor, stat_key) pairs a run logged, sorted."""
        query = (
            select(Series.tensor, Series.stat_key)
            .where(Series.run_id == run_id)
            .distinct()
            .order_by(Series.tensor, Series.stat_key)
        )
        return builtins.list(self.session.execute(query))


def facet_filter(facet: str, key: str) -> ColumnElement[bool]:
    """Runs whose stored facet matches `key`: the same GPU or recipe; a TE version equal to it or under it
    ("2.8" finds 2.8, 2.8.0 and 2.8.0+cu128, not 2.80); a commit starting with it (an abbreviated SHA)."""
    if facet == "gpu":
        return Run.meta_gpu == key
    if facet == "recipe":
        return Run.meta_recipe == key
    if facet == "te_version":
        column = Run.meta_te_version
        under = (column.startswith(key + mark, autoescape=True) for mark in (".", "+"))
        return or_(column == key, *under)
    if facet == "git_commit":
        return Run.meta_git_commit.startswith(key, autoescape=True)
    raise ValueError(f"unknown facet {facet!r}")


def layer_row(run_id: int, layer: AssembledLayer) -> dict[str, Any]:
    """The `layers` row of one assembled layer (RunRepository and the rank store insert the same)."""
    return {
        "run_id": run_id,
        "name": layer.info.name,
        "position": layer.position,
        "group": layer.info.structure.group.value,
        "layer_index": layer.info.structure.index,
        "sublayer": layer.info.structure.sublayer,
        "precision": layer.info.precision.value,
        "has_fp8_stats": layer.info.has_fp8_stats,
        "plans": layer.plans,
    }


def tags_of(run: Run) -> Sequence[str]:
    return [t.tag for t in run.tags]
