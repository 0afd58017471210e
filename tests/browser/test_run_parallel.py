"""A pipeline-parallel job's run page in a real headless Chromium: the findings card shows the layout (sizes,
source, naming) and the ranks of each stage, so a global layer can be followed to the ranks that hold it.

The run is stored as the ingest stores a job whose stages named their blocks locally (tests/service/
test_pipeline_stages.py says how): global names in the logs, the resolved layout written to `runs.parallel`, the
summary computed before it dropped. Screenshot: test-artifacts/browser/parallel-layout.png."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from fp8_policy.db.run_models import Run
from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
from fp8_policy.db.summary_models import RunSummary
from fp8_policy.policy.parallel import GLOBAL, LOCAL, METADATA, ParallelInfo, ParallelLayout, rank_coord
from fp8_policy.policy.synthetic import SyntheticRun
from fp8_policy.policy.synthetic.parallel import ParallelJob, write_parallel_job
from tests.browser.conftest import LiveServer, wait_ready
from tests.support.archives import tree_tar_gz

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
LAYOUT = ParallelLayout(pp=2, dp=2, num_layers=4)


def _staged_run(live_server: LiveServer, tmp_path: Path) -> int:
    run = SyntheticRun(family="megatron", num_layers=4, first_index=0, iterations=100)
    write_parallel_job(ParallelJob(run, LAYOUT, naming=GLOBAL), tmp_path / "logs")
    with live_server.api() as client:
        response = client.post(
            "/api/v1/runs",
            data={"name": "pp2", "project": "bt-parallel"},
            files={"file": ("job.tgz", tree_tar_gz(tmp_path / "logs"))},
        )
        assert response.status_code == 202, response.text
        run_id = int(wait_ready(client, response.json()["id"])["id"])
    engine = create_db_engine(live_server.settings.database_url)
    factory = create_session_factory(engine)
    deadline = time.monotonic() + 60
    try:
        while True:  # the ingest stores the summary right after `ready`: drop it once stored
            with session_scope(factory) as session:
                if session.scalar(select(RunSummary.run_id).where(RunSummary.run_id == run_id)) is not None:
                    break
            assert time.monotonic() < deadline, "the summary was not stored"
            time.sleep(0.05)
        info = ParallelInfo(METADATA, LAYOUT, LOCAL, {r: rank_coord(LAYOUT, r).as_dict() for r in range(4)})
        info.replicas = {1: 0, 3: 2}
        with session_scope(factory) as session:
            stored = session.get(Run, run_id)
            assert stored is not None
            stored.parallel = info.to_json()
            session.execute(delete(RunSummary).where(RunSummary.run_id == run_id))
    finally:
        engine.dispose()
    return run_id


def test_the_run_page_shows_the_layout_and_each_stage_s_ranks(page, live_server: LiveServer, shot, tmp_path) -> None:
    run_id = _staged_run(live_server, tmp_path)
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    block = page.locator("#parallel-layout")
    expect(block).to_contain_text("TP1 x PP2 x DP2 · from the metadata · blocks named per stage, renamed to global")
    rows = block.locator("tbody tr")
    expect(rows).to_have_count(2)
    assert [rows.nth(i).locator("td").all_text_contents() for i in range(2)] == [["0", "0-1", "0"], ["1", "2-3", "2"]]
    shot(block, "parallel-layout")
