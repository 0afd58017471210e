"""The run page's recommendation card shows the recommendation's `schedule` (policy/recommend/schedule.py): one line
per phase with the step it restarts from, why, what it changes, and how to render it alone (`?phase=K`)."""

from __future__ import annotations

import json

import pytest

from fp8_policy.policy.synthetic import SCENARIOS, write_run
from tests.browser.conftest import wait_ready
from tests.support.archives import tree_tar_gz

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser


def test_the_card_lists_each_phase_of_the_schedule(page, live_server, tmp_path) -> None:
    write_run(SCENARIOS["rising_trend"].run, tmp_path / "run")  # fine early, failing late: a two-phase schedule
    with live_server.api() as client:
        response = client.post(
            "/api/v1/runs",
            files={"file": ("run.tgz", tree_tar_gz(tmp_path / "run"))},
            data={"project": "bt-schedule", "name": "late", "metadata": json.dumps({"gpu": "H100"})},
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["id"]
        wait_ready(client, run_id)
        schedule = client.get(f"/api/v1/runs/{run_id}/recommendation").json()["schedule"]
    assert schedule and len(schedule) == 2

    page.goto(f"{live_server.url}/#/runs/{run_id}")
    block = page.locator("#rec-schedule")
    expect(block).to_contain_text(f"Schedule: {len(schedule)} phases.")
    later = block.locator("li[data-phase='1']")
    expect(later).to_contain_text(f"From step {schedule[1]['from_step']:,} (restart)")
    expect(later).to_contain_text(schedule[1]["reason"])
    expect(later).to_contain_text("--phase 1")
    expect(block.locator("li[data-phase='0']")).to_contain_text("From the start")
