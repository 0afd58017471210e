"""The run page's Parameters card in a real headless Chromium: the uploaded metadata (recipe, GPU, TE version,
model dimensions, git commit, other keys), the owner and the ingest's duration, as MLflow shows a run's
parameters. Screenshot: test-artifacts/browser/params-*.png."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.browser.conftest import LiveServer, upload_ready

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser

METADATA = {
    "te_version": "2.8",
    "gpu": "H100",
    "recipe": "DelayedScaling",
    "hidden_size": 1280,
    "num_layers": 33,
    "git_commit": "3f2a9c1",
    "optimizer": {"name": "adamw", "lr": 0.0004},
}


@pytest.fixture(scope="module")
def run_with_metadata(live_server: LiveServer, make_archive: Callable[[str], Path]) -> int:
    archive = make_archive("boundary")
    with live_server.api() as client:
        run = upload_ready(client, archive, name="with-params", project="bt-params", metadata=json.dumps(METADATA))
    return run["id"]


def test_the_parameters_card_shows_metadata_owner_and_duration(
    page, live_server: LiveServer, run_with_metadata: int, shot
) -> None:
    page.goto(f"{live_server.url}/#/runs/{run_with_metadata}")
    card = page.locator("#params")
    expect(card).to_be_visible()

    rows = page.locator("#params-metadata tr").evaluate_all(
        "(trs) => trs.map((tr) => [tr.dataset.key, tr.querySelector('th').textContent, tr.querySelector('td').textContent])"
    )
    assert rows == [
        ["recipe", "Recipe", "DelayedScaling"],
        ["gpu", "GPU", "H100"],
        ["te_version", "TE version", "2.8"],
        ["hidden_size", "Hidden size", "1280"],
        ["num_layers", "Layers", "33"],
        ["git_commit", "Git commit", "3f2a9c1"],
        ["optimizer", "optimizer", '{"name":"adamw","lr":0.0004}'],
    ]
    expect(page.locator("#params-run tr[data-key=owner] td")).to_have_text("anonymous (an open service)")
    expect(page.locator("#params-run tr[data-key=duration] td")).to_have_text(re.compile(r"^\d+(\.\d)? (ms|s|min)$"))
    shot(card, "params-01-metadata-owner-duration")


def test_a_run_without_metadata_says_how_to_send_it(page, live_server: LiveServer, seeded_runs: dict[str, int]) -> None:
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['healthy']}")

    expect(page.locator("#params-metadata")).to_contain_text("none uploaded")
    expect(page.locator("#params-metadata")).to_contain_text("--metadata")
