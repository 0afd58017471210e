"""A live piece too large for the interpreted parser waits for the compiled one (kernel_warmup.kernels_for) before
its append takes the run's lock: a first large piece on a fresh install waits 30-100 s for numba, and holding the
run's lock and the file's row meanwhile kept a delete, a finalize and the run's other appends waiting as long."""

from __future__ import annotations

from pathlib import Path

from fp8_policy.db.migrate import upgrade
from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
from fp8_policy.service.live import actions

PATH = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
LINE = b"2026-01-15 23:06:40,060 - INFO - model.layers.1.mlp.fc1_gradient_underflows% \t iteration=1 \t value=0.1\n"


def test_the_wait_for_the_compiled_parser_comes_before_the_run_lock(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path}/db.sqlite"
    upgrade(url)
    factory = create_session_factory(create_db_engine(url))
    with session_scope(factory) as session:
        run_id = actions.create_live_run(session, {"name": "wait", "project": "p"}, "token").id
    steps: list[str] = []
    monkeypatch.setattr(actions, "kernels_for", lambda size: steps.append(f"kernels_for({size})"))
    live_run = actions._live_run
    monkeypatch.setattr(actions, "_live_run", lambda *a, **k: steps.append("lock") or live_run(*a, **k))

    data = LINE * 3
    with session_scope(factory) as session:
        actions.append(session, tmp_path, run_id, PATH, 0, data)

    assert steps[:2] == [f"kernels_for({len(data)})", "lock"], steps
