"""The run page tells the analysis's story first, and a live run keeps its own story once finished (Chromium).

- The planted boundary demo (its fc2 activation underflow climbing to 18 % before a BF16 tail) opens its heatmap
  on `activation underflows%` with the severe row boxed, and lists that layer first in the layer table (severe
  first, n/a last), instead of a pale gradient map with nothing boxed and the severe layer at the bottom.
- A live run's timeline pages through every event (not the last screenful), and after finalize the run page
  still shows its training scalars (the Training curves card) and the timeline.

Screenshots: test-artifacts/browser/run-boundary-demo-focus.png, live-run-timeline-paged.png,
live-run-finished-story.png.
"""

from __future__ import annotations

import json
import re

import pytest

from fp8_policy.policy.synthetic import SCENARIOS, write_run
from tests.browser.conftest import logs_tar_gz, upload_ready
from tests.service.live.test_live_runs import LIVE, appender
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
LAYERS = [f"model.layers.{k}.mlp.fc2" for k in range(1, 13)]


@pytest.fixture(scope="module")
def boundary_demo(live_server, tmp_path_factory) -> int:
    """The boundary demo run exactly as `make run` loads it (service/demo.py: the scenario's whole run)."""
    root = tmp_path_factory.mktemp("boundary-demo")
    write_run(SCENARIOS["boundary"].run, root / "tree")
    archive = logs_tar_gz(root / "tree", root / "boundary.tar.gz")
    with live_server.api() as client:
        return upload_ready(client, archive, name="demo-boundary", project="bt-demo")["id"]


def test_the_boundary_demo_opens_on_its_severe_activation_row(page, live_server, boundary_demo, shot) -> None:
    with live_server.api() as client:
        analysis = client.get(f"/api/v1/runs/{boundary_demo}/analysis").json()
    worst = analysis["findings"][0]
    assert (worst["pattern"], worst["severity"]) == ("boundary", "severe")
    severe_layer = worst["layers"][0]

    page.goto(f"{live_server.url}/#/runs/{boundary_demo}")
    expect(page.locator("#heatmap-tensor")).to_have_value("activation", timeout=60_000)
    canvas = page.locator("#heatmap-canvas")
    expect(canvas).to_have_attribute("data-tensor", "activation", timeout=30_000)
    expect(canvas).to_have_attribute("data-stat", "underflows%")
    expect(canvas).to_have_attribute("data-boxed-layers", re.compile(rf"(^| ){re.escape(severe_layer)}( |$)"))
    expect(page.locator("#heatmap-boxes")).to_contain_text("the worst 1 of 1 row")
    expect(page.locator("#heatmap-boxes")).to_contain_text("same verdict as the findings")
    assert "tensor=" not in page.url  # what the run opens on stays out of the URL

    table = page.locator("#layers-table")
    rows = table.locator("tbody tr")
    expect(table.locator("th[data-key='severity']")).to_have_attribute("aria-sort", "descending")
    expect(rows.first).to_have_attribute("data-layer", severe_layer)
    expect(rows.first).to_have_attribute("data-severity", "severe")
    expect(rows.last).to_have_attribute("data-severity", "n/a")  # the BF16 tail, not assessed, comes last
    shot(page, "run-boundary-demo-focus")

    page.select_option("#heatmap-tensor", "gradient")  # another choice is kept in the URL and survives a reload
    expect(page).to_have_url(re.compile(r"tensor=gradient"))
    page.reload()
    expect(page.locator("#heatmap-tensor")).to_have_value("gradient", timeout=60_000)


def rising_log(steps: range) -> bytes:
    """Every 10 iterations, gradient underflows% of 12 layers rising at different rates through every band."""
    return stats_log(
        (f"{layer}_gradient_underflows%", step * 10, round(0.02 * step * (1 + k / 3), 4))
        for step in steps
        for k, layer in enumerate(LAYERS)
    )


def scalars(steps: range, spike_at: int) -> bytes:
    return "".join(
        json.dumps({"step": s, "loss": 11.7 if s == spike_at else 2.0 + 9.0 * (1 + s / 40) ** -0.8, "grad_norm": 1.0})
        + "\n"
        for s in steps
    ).encode()


def timeline_ids(page, list_id: str) -> list[int]:
    """Every event id of a paged timeline, newest first: page by page with its Older button."""
    ids: list[int] = []
    older = page.locator(f"#{list_id}-older")
    while True:
        expect(page.locator(f"#{list_id} li[data-event]").first).to_be_visible()
        ids += [
            int(x)
            for x in page.locator(f"#{list_id} li[data-event]").evaluate_all("els => els.map(e => e.dataset.event)")
        ]
        if older.is_disabled():
            return ids
        first = ids[-1]
        older.click()
        expect(page.locator(f"#{list_id} li[data-event='{first}']")).to_have_count(0)


def test_a_live_run_pages_through_every_event_and_keeps_its_story(page, live_server, shot) -> None:
    with live_server.api() as api:
        run = api.post(LIVE, json={"name": "live-story", "project": "bt-live-story"}).json()
        send = appender(api, run["id"])

        send(meta_relpath(0), metadata_log(dict.fromkeys(LAYERS, "fp8")))
        for start in range(0, 240, 20):
            send(stats_relpath(0), rising_log(range(start, start + 20)))
        send("scalars.jsonl", scalars(range(0, 600, 10), spike_at=300))
        every = api.get(f"{LIVE}/{run['id']}/events", params={"limit": 500}).json()
    all_ids = [e["id"] for e in every["events"]]
    assert every["total"] == len(all_ids) > 40 and every["events"][0]["kind"] == "scalar_spike"

    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    expect(page.locator("#live-timeline-range")).to_contain_text(f"of {every['total']}", timeout=30_000)
    expect(page.locator("#live-figures")).to_contain_text(str(every["total"]))
    shot(page.locator("#live-timeline-card"), "live-run-timeline-paged")
    assert timeline_ids(page, "live-timeline") == all_ids

    with live_server.api() as api:
        assert api.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
    expect(page.locator("#view .run-meta [data-status]")).to_have_attribute("data-status", "ready", timeout=60_000)
    story = page.locator("#live-story")
    expect(story).to_be_visible(timeout=30_000)
    expect(page.locator("#run-curves-charts [data-scalar=loss] svg")).to_be_visible()  # the curves card draws them
    expect(page.locator("#story-timeline-range")).to_contain_text(f"of {every['total']}")
    expect(page.locator("#story-timeline li[data-kind=scalar_spike]")).to_contain_text("step 300")
    page.wait_for_timeout(200)
    shot(page, "live-run-finished-story")
    assert timeline_ids(page, "story-timeline") == all_ids
