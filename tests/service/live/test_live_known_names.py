"""service/live keeps each statistics file's metric names between its pieces (service/live/kept.py) with the run's
detector table, and only while that is valid: never for another file, nor after another process saved the run's
state, a rolled-back piece, or a run deleted and made again under the same id. Pieces parsed with the kept names
store exactly the events and state that pieces parsed afresh store, on random logs cut at random byte offsets."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from fp8_policy.db.live import LiveRepository
from fp8_policy.db.migrate import upgrade
from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
from fp8_policy.policy.parse.name_table import MAX_NAMES
from fp8_policy.policy.parse.stats_log import StatsLogParser
from fp8_policy.service.live import actions, kept
from fp8_policy.service.runs.writes import delete_run
from tests.policy.live.test_live_batch import random_log

RANK0 = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
RANK1 = "rank_1/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-1.log"
TS = "2026-01-15 23:06:40,060"


def lines(names: list[str], iteration: int) -> bytes:
    return "".join(f"{TS} - INFO - {n} \t iteration={iteration} \t value=0.1000\n" for n in names).encode()


A = [f"model.layers.{i}.mlp.fc1_gradient_underflows%" for i in range(3)]
B = [f"model.layers.{i}.mlp.fc2_weight_scale_inv_max" for i in range(2)]


class Service:
    def __init__(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path}/db.sqlite"
        upgrade(url)
        self.data_dir = tmp_path
        self.factory = create_session_factory(create_db_engine(url))
        self.sent: dict[tuple[int, str], int] = {}
        self.known: list[list[str] | None] = []  # per parse: the names it started from (None: afresh)

    def new_run(self, name: str = "names") -> int:
        with session_scope(self.factory) as session:
            return int(actions.create_live_run(session, {"name": name, "project": "p"}, "token").id)

    def append(self, run_id: int, path: str, data: bytes, *, fail: bool = False) -> list[Any]:
        offset = self.sent.get((run_id, path), 0)
        try:
            with session_scope(self.factory) as session:
                result = actions.append(session, self.data_dir, run_id, path, offset, data)
                if fail:
                    raise RuntimeError("the commit fails")
        except RuntimeError:
            return []
        self.sent[(run_id, path)] = result.size
        return result.events


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Service:
    served = Service(tmp_path)

    class Spy(StatsLogParser):
        def __init__(self, *args: Any, known: Any = None, **kwargs: Any) -> None:
            served.known.append(None if known is None else list(known.table.names))
            super().__init__(*args, known=known, **kwargs)

    monkeypatch.setattr(actions, "StatsLogParser", Spy)
    return served


def test_a_files_next_piece_starts_from_its_names_and_another_file_does_not(service: Service) -> None:
    run = service.new_run()
    service.append(run, RANK0, lines(A, 1))
    service.append(run, RANK0, lines(A, 2))
    service.append(run, RANK1, lines(B, 1))  # another file: its own names
    service.append(run, RANK0, lines(A, 3))
    service.append(run, RANK1, lines(B, 2))
    assert service.known == [None, A, None, A, B]


def test_names_are_dropped_when_another_process_saved_the_state(service: Service) -> None:
    run = service.new_run()
    service.append(run, RANK0, lines(A, 1))
    with session_scope(service.factory) as session:  # another process: its save changes the stamp
        repo = LiveRepository(session)
        repo.save_state(run, repo.state_for_update(run))
    service.append(run, RANK0, lines(A, 2))
    service.append(run, RANK0, lines(A, 3))
    assert service.known == [None, None, A]


def test_names_are_dropped_with_a_rolled_back_piece(service: Service) -> None:
    run = service.new_run()
    service.append(run, RANK0, lines(A, 1))
    service.append(run, RANK0, lines(A[:1] + B, 2), fail=True)  # parsed and kept, then rolled back
    service.append(run, RANK0, lines(A, 2))
    assert service.known == [None, A, None]


def test_a_run_made_again_under_the_same_id_starts_afresh(service: Service) -> None:
    """Run ids are never reused by the databases (tests/db/test_ids_never_reused.py); a restored or reset database
    may still hand out an id this process kept names for."""
    run = service.new_run()
    service.append(run, RANK0, lines(A, 1))
    with session_scope(service.factory) as session:
        delete_run(session, service.data_dir, run)
    again = service.new_run("again")
    with session_scope(service.factory) as session:
        session.execute(text("UPDATE runs SET id = :old WHERE id = :new"), {"old": run, "new": again})
    service.sent.clear()
    service.append(run, RANK0, lines(B, 1))
    assert service.known == [None, None]


def _events(service: Service, run: int) -> list[tuple]:
    with session_scope(service.factory) as session:
        stored = LiveRepository(session).events(run, 0)
        return [
            (e.event.kind, e.event.severity, e.event.layer, e.event.tensor, e.event.stat, e.event.rank,
             e.event.iteration, "nan" if e.event.value is not None and math.isnan(e.event.value) else e.event.value,
             e.event.message, repr(sorted(e.event.detail.items())))
            for e in stored
        ]  # fmt: skip


def _state(service: Service, run: int) -> dict:
    with session_scope(service.factory) as session:
        return LiveRepository(session).state_for_update(run)


@pytest.mark.parametrize("seed", range(6))
def test_kept_names_store_the_same_events_and_state_as_fresh_parses(
    service: Service, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    logs = {RANK0: random_log(rng, 0, 2), RANK1: random_log(rng, 1, 2)}
    cuts = {path: sorted({len(log), *rng.integers(1, len(log), size=8).tolist()}) for path, log in logs.items()}
    order = [path for path, at in cuts.items() for _ in at]
    rng.shuffle(order)
    runs, parses = [], 0
    for fresh in (False, True):
        if fresh:
            monkeypatch.setattr(kept, "known_names", lambda *_args: None)
        run = service.new_run(f"fresh {fresh}")
        sent = dict.fromkeys(logs, 0)
        for path in order:
            end = next(at for at in cuts[path] if at > sent[path])
            service.append(run, path, logs[path][sent[path] : end])
            sent[path] = end
        runs.append(run)
        parses = parses or len(service.known)
    kept_run, fresh_run = runs
    assert sum(names is not None for names in service.known[:parses]) >= parses - 2  # but each file's first parse
    assert _events(service, kept_run) == _events(service, fresh_run) != []
    assert _state(service, kept_run) == _state(service, fresh_run)


def test_a_table_the_earlier_pieces_filled_is_parsed_afresh(service: Service) -> None:
    """A file whose names outgrow one table over its pieces (each piece parses alone within it) is not refused."""
    run = service.new_run()
    service.append(run, RANK0, lines(A, 1))
    names = kept._tables[run][3][RANK0]
    names.table.names += [f"model.filler{k}_activation_mse" for k in range(MAX_NAMES - len(names.table.names))]
    names.table.counter[0] = MAX_NAMES  # as if earlier pieces had registered every id: B's names find no room
    events = service.append(run, RANK0, lines(B, 2) + lines(A, 2))
    assert service.known[-2:] == [names.table.names, None]  # tried with the kept names, then afresh
    assert service.sent[(run, RANK0)] == len(lines(A, 1) + lines(B, 2) + lines(A, 2))
    assert events == []
