"""The run page's Speed and risk card in a real headless Chromium: the frontier drawn with the rule recipes and the
recommendation, and after an experiment is posted the measured arms beside them with the verdict (with replicates,
each arm's gap ± its standard error).
Screenshots: test-artifacts/browser/frontier-*."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.browser.conftest import LiveServer, wait_ready
from tests.service.experiments.test_experiments_api import arms, replicated
from tests.support.archives import stats_log
from tests.support.sensitivity_runs import METADATA, points

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser


def test_the_frontier_card_draws_rules_the_recommendation_and_measured_arms(
    page, live_server: LiveServer, shot
) -> None:
    with live_server.api() as client:
        response = client.post(
            "/api/v1/runs",
            data={"name": "frontier", "project": "bt-frontier", "metadata": json.dumps(METADATA)},
            files={"file": ("frontier.log.gz", gzip.compress(stats_log(points())), "application/gzip")},
        )
        assert response.status_code == 202, response.text
        run_id = wait_ready(client, response.json()["id"])["id"]
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    card = page.locator("#frontier")
    expect(card.locator("#frontier-chart")).to_be_visible(timeout=30_000)
    expect(card.locator(".rule-mark")).to_have_count(4)
    expect(card.locator("#frontier-chosen")).to_have_count(1)
    expect(card.locator(".measured-point")).to_have_count(0)
    expect(card).to_contain_text("No experiment yet")
    shot(card, "frontier-01-predicted")

    with live_server.api() as client:
        posted = client.post(f"/api/v1/runs/{run_id}/experiments", json={"arms": arms(recommended_loss=2.95)})
        assert posted.status_code == 201, posted.text
    page.reload()
    expect(card.locator(".measured-point")).to_have_count(4, timeout=30_000)
    expect(card.locator("#frontier-verdict")).to_have_text("contradicted")
    expect(card).to_contain_text("Next step: Lift the next most sensitive layers")
    shot(card, "frontier-02-measured")

    body = replicated((2.80, 2.76, 2.785))  # three replicates: the gaps get their standard error as a bar
    body[1]["heldout_losses"][0] += 0.01
    body[2]["heldout_losses"][1] -= 0.01
    with live_server.api() as client:
        posted = client.post(f"/api/v1/runs/{run_id}/experiments", json={"arms": body})
        assert posted.status_code == 201, posted.text
    page.reload()
    expect(card.locator(".measured-point")).to_have_count(4, timeout=30_000)
    expect(card.locator(".measured-se")).to_have_count(3)  # bf16 is the reference: no spread
    tip = card.locator('.measured-point[data-arm="recommended"] title').text_content() or ""
    assert "± 0.0" in tip and "(SE over replicates)" in tip, tip
    expect(card).to_contain_text("over 3 replicates")
    shot(card, "frontier-03-replicates")
