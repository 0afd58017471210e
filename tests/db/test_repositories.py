"""RunRepository on the migrated SQLite and PostgreSQL databases: a real assembled run (the bionemo ESM2 log,
plus NaN/±inf/-0.0 points) stored and read back, run state transitions, and all-or-nothing stores.

The database is shared by the whole test session: every test works in its own project and only counts rows
of its own runs.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.codec import decode_iterations, decode_values
from fp8_policy.db.run_models import Run
from fp8_policy.db.runs import IngestCounts, NewRun, RunRepository
from fp8_policy.db.session import create_session_factory, session_scope
from fp8_policy.policy.parse.assemble import AssembledRun, SeriesRecord, assemble_run
from fp8_policy.policy.parse.metadata_log import merge_metadata, parse_metadata_lines
from fp8_policy.policy.parse.stats_log import StatsLogParser
from tests.support.archives import ESM2, ESM2_STATS, META_DIR, stats_log
from tests.support.dbutil import assembled_layer_fields, layer_fields, row_counts

QKV1 = "model.esm.encoder.layers.1.self_attention.layernorm_qkv"
NONFINITE_NAME = f"{QKV1}_activation_underflows%"
EXTRA = [
    (NONFINITE_NAME, 250, math.nan),
    (NONFINITE_NAME, 260, math.inf),
    (NONFINITE_NAME, 270, -0.0),
    (NONFINITE_NAME, 280, -math.inf),
]


def esm2_assembled() -> AssembledRun:
    """The real ESM2 run, with a second session appending NaN, +inf, -0.0 and -inf to one series."""
    parser = StatsLogParser()
    with open(ESM2_STATS, "rb") as handle:
        parser.feed(handle, "esm2.log")
    parser.feed(io.BytesIO(stats_log(EXTRA)), "extra.log")
    metadata = parse_metadata_lines(
        (ESM2 / "rank_0" / META_DIR / "nvdlfw_inspect_globalrank-0.log").read_text().splitlines()
    )
    return assemble_run({0: parser.finish()}, merge_metadata([metadata]))


COUNTS = IngestCounts(
    lines_read=1804, lines_skipped=0, lines_blank=0, lines_duplicated=0, report={"files": [{"path": "esm2.log"}]}
)


@pytest.fixture(scope="module")
def assembled() -> AssembledRun:
    return esm2_assembled()


@pytest.fixture
def factory(db_engine: Engine) -> Iterator[sessionmaker[Session]]:
    yield create_session_factory(db_engine)


def new_run(factory: sessionmaker[Session], project: str, sha: str = "a" * 64) -> int:
    with session_scope(factory) as session:
        return (
            RunRepository(session)
            .add(
                NewRun(
                    "esm2", project, ("x", "y", "x"), {"gpu": "H100"}, sha, "esm2.tar.gz", 10_073, "runs/1/upload.bin"
                )
            )
            .id
        )


def store(factory: sessionmaker[Session], run_id: int, assembled: AssembledRun) -> None:
    with session_scope(factory) as session:
        repo = RunRepository(session)
        repo.store_ingest(repo.get(run_id), assembled, COUNTS)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal within 1e-4 where finite; NaN, +inf and -inf at exactly the same places."""
    return (
        a.shape == b.shape
        and np.array_equal(np.isnan(a), np.isnan(b))
        and np.array_equal(np.isposinf(a), np.isposinf(b))
        and np.array_equal(np.isneginf(a), np.isneginf(b))
        and bool(np.all(np.abs(a[np.isfinite(a)] - b[np.isfinite(b)]) <= 1e-4))
    )


class TestStoreAndReadBack:
    def test_run_figures(self, factory, project: str, assembled: AssembledRun) -> None:
        run_id = new_run(factory, project)

        store(factory, run_id, assembled)

        with session_scope(factory) as session:
            run = RunRepository(session).get(run_id)
            figures = (
                run.status,
                run.error,
                run.rank_count,
                run.layer_count,
                run.series_count,
                run.point_count,
                run.iteration_min,
                run.iteration_max,
                run.lines_read,
                run.ingest_report,
                sorted(t.tag for t in run.tags),
                run.run_metadata,
            )
            assert run.finished_at is not None and run.finished_at.utcoffset().total_seconds() == 0
        assert figures == (
            "ready",
            None,
            1,
            26,
            72,
            1804,
            0,
            280,
            1804,
            {"files": [{"path": "esm2.log"}]},
            ["x", "y"],
            {"gpu": "H100"},
        )

    def test_layers_in_model_order(self, factory, project: str, assembled: AssembledRun) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)

        with session_scope(factory) as session:
            layers = [layer_fields(x) for x in RunRepository(session).layers(run_id)]

        assert layers == [assembled_layer_fields(x) for x in assembled.layers]
        assert layers[0][0] == QKV1 and layers[-1][5] == "high"

    def test_decoded_arrays_equal_the_parsed_ones(self, factory, project: str, assembled: AssembledRun) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)
        expected = {(s.rank, s.metric.layer, s.metric.tensor, s.metric.stat_key): s for s in assembled.series}

        with session_scope(factory) as session:
            stored = {
                (row.rank, layer, row.tensor, row.stat_key): (
                    decode_iterations(row.iterations),
                    decode_values(row.values),
                )
                for row, layer in RunRepository(session).point_arrays(run_id)
            }

        assert stored.keys() == expected.keys()
        for key, (iterations, values) in stored.items():
            assert np.array_equal(iterations, expected[key].iterations), key
            assert same_values(values, expected[key].values), key
        iterations, values = stored[(0, QKV1, "activation", "underflows%")]
        assert iterations[-4:].tolist() == [250, 260, 270, 280]
        assert np.isnan(values[-4]) and values[-3] == math.inf and values[-1] == -math.inf
        assert values[-2] == 0.0 and math.copysign(1.0, values[-2]) == -1.0

    def test_summaries_equal_the_assembled_ones(self, factory, project: str, assembled: AssembledRun) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)
        expected = {(s.metric.layer, s.metric.tensor, s.metric.stat_key): s.summary for s in assembled.series}

        with session_scope(factory) as session:
            rows = {
                (layer, row.tensor, row.stat_key): row for row, layer in RunRepository(session).point_arrays(run_id)
            }

        for key, row in rows.items():
            want = expected[key]
            assert (
                row.count,
                row.nan_count,
                row.posinf_count,
                row.neginf_count,
                row.first_iteration,
                row.last_iteration,
                row.last_nonfinite,
            ) == (
                want.count,
                want.nan_count,
                want.posinf_count,
                want.neginf_count,
                want.first_iteration,
                want.last_iteration,
                want.last_nonfinite,
            ), key
            for column in ("min", "max", "mean", "p95", "last"):
                got, wanted = getattr(row, column), getattr(want, column)
                assert (got is None and wanted is None) or got == pytest.approx(wanted, rel=1e-12, abs=1e-15), (
                    key,
                    column,
                )
        nonfinite = rows[(QKV1, "activation", "underflows%")]
        assert (
            nonfinite.count,
            nonfinite.nan_count,
            nonfinite.posinf_count,
            nonfinite.neginf_count,
            nonfinite.last,
            nonfinite.last_nonfinite,
        ) == (29, 1, 1, 1, None, "-Infinity")
        assert rows[(QKV1, "gradient", "underflows%")].max == 21.4681

    def test_layer_summaries_in_sql(self, factory, project: str, assembled: AssembledRun) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)

        with session_scope(factory) as session:
            repo = RunRepository(session)
            qkv1 = next(x.id for x in repo.layers(run_id) if x.name == QKV1)
            summaries = {
                (row.tensor, row.stat_key): row for row in repo.layer_summaries(run_id, None) if row.layer_id == qkv1
            }
            other_rank = repo.layer_summaries(run_id, 1)

        assert len(summaries) == 12
        row = summaries[("activation", "underflows%")]
        assert (
            row.stat,
            row.recipe,
            row.columnwise,
            row.min,
            row.last,
            row.count,
            row.nan_count,
            row.inf_count,
            row.ranks,
        ) == ("underflows%", None, False, 0.0, None, 29, 1, 2, 1)
        assert row.max == 4.7781
        assert summaries[("gradient", "underflows%")].max == 21.4681
        assert other_rank == []

    def test_iter_points_streams_every_point_in_model_order(
        self, factory, project: str, assembled: AssembledRun
    ) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)

        with session_scope(factory) as session:
            rows = list(RunRepository(session).iter_points(run_id, None, batch=7))

        assert sum(len(its) for *_, its, _vals in rows) == 1804
        layer_order = [x.info.name for x in assembled.layers]
        positions = [layer_order.index(layer) for _rank, layer, *_ in rows]
        assert positions == sorted(positions)
        assert len(rows) == 72


class TestRunState:
    def test_claim_moves_queued_to_processing_once(self, factory, project: str) -> None:
        run_id = new_run(factory, project)

        with session_scope(factory) as session:
            first = RunRepository(session).claim(run_id)
            assert first is not None and first.status == "processing" and first.started_at is not None
        with session_scope(factory) as session:
            second = RunRepository(session).claim(run_id)

        assert second is None

    def test_mark_failed_keeps_the_error(self, factory, project: str) -> None:
        run_id = new_run(factory, project)

        with session_scope(factory) as session:
            RunRepository(session).mark_failed(run_id, "NoStatsFile: nothing")

        with session_scope(factory) as session:
            run = RunRepository(session).get(run_id)
            assert (run.status, run.error) == ("failed", "NoStatsFile: nothing")

    def test_same_bytes_twice_in_one_project_violate_the_unique_constraint(self, factory, project: str) -> None:
        new_run(factory, project, sha="b" * 64)

        with pytest.raises(IntegrityError):
            new_run(factory, project, sha="b" * 64)

        with session_scope(factory) as session:
            assert RunRepository(session).find_by_hash(project, "b" * 64) is not None
            assert (
                len(RunRepository(session).list(project=project, status=None, tag=None, after_id=None, limit=10)) == 1
            )

    def test_delete_removes_every_row_of_the_run(
        self, factory, db_engine: Engine, project: str, assembled: AssembledRun
    ) -> None:
        run_id = new_run(factory, project)
        store(factory, run_id, assembled)
        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 2, "layers": 26, "series": 72}

        with session_scope(factory) as session:
            repo = RunRepository(session)
            repo.delete(repo.get(run_id))

        assert row_counts(db_engine, run_id) == {"runs": 0, "run_tags": 0, "layers": 0, "series": 0}


class TestAllOrNothing:
    def test_error_after_a_complete_store_rolls_everything_back(
        self, factory, db_engine: Engine, project: str, assembled: AssembledRun
    ) -> None:
        run_id = new_run(factory, project)

        with pytest.raises(RuntimeError, match="crash after the flush"), session_scope(factory) as session:
            repo = RunRepository(session)
            repo.store_ingest(repo.get(run_id), assembled, COUNTS)
            assert row_counts_in(session, run_id) == (26, 72)  # flushed, visible inside the transaction
            raise RuntimeError("crash after the flush")

        assert_as_new(factory, db_engine, run_id)

    def test_failing_insert_inside_store_leaves_no_layers_or_series(
        self, factory, db_engine: Engine, project: str, assembled: AssembledRun
    ) -> None:
        run_id = new_run(factory, project)
        broken = AssembledRun(assembled.layers, [*assembled.series, duplicate(assembled.series[-1])], assembled.ranks)

        with pytest.raises(IntegrityError):
            store(factory, run_id, broken)

        assert_as_new(factory, db_engine, run_id)

    def test_store_after_a_rolled_back_one_succeeds(
        self, factory, db_engine: Engine, project: str, assembled: AssembledRun
    ) -> None:
        run_id = new_run(factory, project)
        with pytest.raises(IntegrityError):
            store(
                factory,
                run_id,
                AssembledRun(assembled.layers, [*assembled.series, duplicate(assembled.series[0])], assembled.ranks),
            )

        store(factory, run_id, assembled)

        assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 2, "layers": 26, "series": 72}


def assert_as_new(factory: sessionmaker[Session], db_engine: Engine, run_id: int) -> None:
    """The run is as `new_run` left it: its row and two tags, no layers or series, queued with no counts."""
    assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 2, "layers": 0, "series": 0}
    assert status_of(factory, run_id) == ("queued", 0, 0)


def duplicate(record: SeriesRecord) -> SeriesRecord:
    return SeriesRecord(record.rank, record.metric, record.iterations, record.values, record.summary)


def row_counts_in(session: Session, run_id: int) -> tuple[int, int]:
    from sqlalchemy import func

    from fp8_policy.db.run_models import Layer, Series

    return (
        session.scalar(select(func.count()).select_from(Layer).where(Layer.run_id == run_id)),
        session.scalar(select(func.count()).select_from(Series).where(Series.run_id == run_id)),
    )


def status_of(factory: sessionmaker[Session], run_id: int) -> tuple[str, int, int]:
    with session_scope(factory) as session:
        run = session.get(Run, run_id)
        return run.status, run.layer_count, run.point_count
