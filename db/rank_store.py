"""All SQL of the per-rank ingest: a rank's layers and series, the finalize step's layer table and totals.

The plan job stores the ranks it parsed in one transaction, a rank job its rank in its own; either replaces whatever
an earlier attempt stored for those ranks (idempotent: a retried job never duplicates a series). Layers are shared by the ranks of a
run: each rank adds the ones it is missing (INSERT ... ON CONFLICT DO NOTHING on both backends), and the
finalize step sets their model order, precision and plans once every rank is in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from fp8_policy.db.run_models import Layer, Run, RunStatus, Series
from fp8_policy.db.runs import IngestCounts, layer_row, utcnow
from fp8_policy.db.series_rows import EncodedSeries, insert_series
from fp8_policy.db.session import Repository
from fp8_policy.policy.names import layer_structure
from fp8_policy.policy.parse.assemble import AssembledLayer
from fp8_policy.policy.records import Precision


class RankStore(Repository):
    def ensure_layers(self, run_id: int, names: Iterable[str]) -> dict[str, int]:
        """Layer rows for `names` (added when missing, placeholders until finalize); returns name -> id."""
        wanted = sorted(set(names))  # one insert order everywhere: concurrent ranks never deadlock
        rows = [_placeholder_layer(run_id, name) for name in wanted]
        if rows:
            dialect = postgresql if self.session.get_bind().dialect.name == "postgresql" else sqlite
            statement = dialect.insert(Layer).on_conflict_do_nothing(index_elements=["run_id", "name"])
            self.session.execute(statement, rows)
        query = select(Layer.name, Layer.id).where(Layer.run_id == run_id)
        return {name: id_ for name, id_ in self.session.execute(query) if name in set(wanted)}

    def store_ranks(self, run_id: int, ranks: Mapping[int, list[EncodedSeries]]) -> None:
        """The series of some ranks (encoded before the transaction: db/series_rows.py), replacing an earlier
        attempt's: the layers of all of them added at once, then their rows in a few statements."""
        layer_ids = self.ensure_layers(run_id, (e.layer for encoded in ranks.values() for e in encoded))
        self.drop_ranks(run_id, list(ranks))
        insert_series(self.session, run_id, [e for rank in sorted(ranks) for e in ranks[rank]], layer_ids)

    def drop_ranks(self, run_id: int, ranks: list[int]) -> None:
        """Remove the series of `ranks` (replicas of a stored rank, or an earlier attempt's rows)."""
        for start in range(0, len(ranks), 500):
            chunk = ranks[start : start + 500]
            self.session.execute(delete(Series).where(Series.run_id == run_id, Series.rank.in_(chunk)))

    def clear_metrics(self, run_id: int) -> None:
        """All-or-nothing: a failed (or re-planned) run keeps no series and no layers."""
        self.session.execute(delete(Series).where(Series.run_id == run_id))
        self.session.execute(delete(Layer).where(Layer.run_id == run_id))

    def layer_facts(self, run_id: int) -> list[tuple[str, str, str | None]]:
        """Distinct (layer name, stat, recipe) of the stored series: what the layer table is derived from."""
        query = (
            select(Layer.name, Series.stat, Series.recipe)
            .join(Series, Series.layer_id == Layer.id)
            .where(Series.run_id == run_id)
            .distinct()
        )
        return [(name, stat, recipe) for name, stat, recipe in self.session.execute(query)]

    def write_layer_table(self, run_id: int, layers: list[AssembledLayer]) -> None:
        """Final order, precision and plans of every layer; layers known only from plan lines are added."""
        query = select(Layer.name, Layer.id).where(Layer.run_id == run_id)
        existing: dict[str, int] = dict(self.session.execute(query).all())
        new_rows, changes = [], []
        for layer in layers:
            values = layer_row(run_id, layer)
            if layer.info.name in existing:
                changes.append({"id": existing[layer.info.name], **values})
            else:
                new_rows.append(values)
        if changes:  # ORM bulk UPDATE by primary key: one statement, executemany (one UPDATE per layer took 0.15 s)
            self.session.execute(update(Layer), changes)
        if new_rows:
            self.session.execute(insert(Layer), new_rows)

    def mark_ready(
        self, run: Run, counts: IngestCounts, *, replica_ranks: int = 0, parallel: dict[str, Any] | None = None
    ) -> None:
        """Run totals from the stored rows, then `ready` (the caller's transaction). `replica_ranks`: ranks whose
        series repeat a stored rank's (not stored again) count among the run's ranks; `parallel`: the layout."""
        query = select(
            func.count(),
            func.coalesce(func.sum(Series.count), 0),
            func.min(Series.first_iteration),
            func.max(Series.last_iteration),
            func.count(Series.rank.distinct()),
        ).where(Series.run_id == run.id)
        series_count, points, first, last, ranks = self.session.execute(query).one()
        layers = self.session.scalar(select(func.count()).select_from(Layer).where(Layer.run_id == run.id)) or 0
        run.status, run.error, run.finished_at = RunStatus.ready, None, utcnow()
        run.rank_count, run.layer_count, run.series_count = ranks + replica_ranks, layers, series_count
        run.parallel = parallel
        run.point_count, run.iteration_min, run.iteration_max = int(points), first, last
        run.lines_read, run.lines_skipped = counts.lines_read, counts.lines_skipped
        run.lines_blank, run.lines_duplicated = counts.lines_blank, counts.lines_duplicated
        run.ingest_report = counts.report
        self.session.flush()


def _placeholder_layer(run_id: int, name: str) -> dict[str, Any]:
    structure = layer_structure(name)
    return {
        "run_id": run_id,
        "name": name,
        "position": 0,
        "group": structure.group.value,
        "layer_index": structure.index,
        "sublayer": structure.sublayer,
        "precision": Precision.UNKNOWN.value,
        "has_fp8_stats": False,
        "plans": {},
    }
