"""One story on every view of a run (Chromium): the headline cards, the layer table's Recommended column, the
heatmap's row marks and the runs list's precision mix all show the recommendation's `headline`, which the ladder
and every format agree with (tests/client/apply/test_one_ladder.py).

The run: the demo's NVFP4 run on a B200 (service/demo.py: `nvfp4_late_layers`, whose last blocks' gradients fail
NVFP4 and are lifted to MXFP8). Its cards used to say "0 layers to BF16 · MXFP8 · 1.42x · No layer needs to leave
FP8" while the ladder kept layers at NVFP4; the rung appeared only in the raw JSON.

Screenshots: test-artifacts/browser/one-story-run.png, one-story-runs-list.png.
"""

from __future__ import annotations

import json
import re

import pytest

from fp8_policy.policy.synthetic import FRONTIER_SCENARIOS, write_run
from fp8_policy.service.demo import NVFP4_DEMO
from tests.browser.conftest import logs_tar_gz, upload_ready

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
WORDS = {"nvfp4": "NVFP4", "mxfp8": "MXFP8", "bf16": "BF16", "current": "FP8 current", "delayed": "FP8 delayed"}


@pytest.fixture(scope="module")
def nvfp4_run(live_server, tmp_path_factory) -> int:
    """The demo's NVFP4 run on a B200, uploaded with the demo's metadata."""
    scenario, metadata = NVFP4_DEMO
    root = tmp_path_factory.mktemp("nvfp4-demo")
    write_run(FRONTIER_SCENARIOS[scenario].run, root / "tree")
    archive = logs_tar_gz(root / "tree", root / "nvfp4.tar.gz")
    with live_server.api() as client:
        run = upload_ready(
            client, archive, name="demo-nvfp4-b200", project="bt-frontier", metadata=json.dumps(metadata)
        )
        return run["id"]


def test_the_cards_the_layer_table_and_the_heatmap_tell_the_headline(page, live_server, nvfp4_run, shot) -> None:
    with live_server.api() as client:
        rec = client.get(f"/api/v1/runs/{nvfp4_run}/recommendation").json()
        heat = client.get(f"/api/v1/runs/{nvfp4_run}/heatmap.json", params={"stat": "nvfp4_underflows%"}).json()
    head = rec["headline"]
    assert rec["recipe"]["name"] == "nvfp4" and head["precision_mix"].get("mxfp8", 0) > 0  # some layers lifted
    by_layer = head["precision_by_layer"]
    assert {row["layer"]: row["recommended"] for row in heat["rows"] if row["recommended"]} == by_layer
    assert heat["recommended_recipe"] == "nvfp4"

    page.goto(f"{live_server.url}/#/runs/{nvfp4_run}")
    expect(page.locator("#rec-headline")).to_have_text(head["text"], timeout=30_000)
    mix = page.locator("#rec-mix .prec-text")
    for precision, count in head["precision_mix"].items():
        expect(mix).to_contain_text(f"{count} {WORDS[precision]}")
    expect(page.locator("#rec-rungs")).to_contain_text("MXFP8")
    table = page.locator("#layers-table")
    expect(table.locator("tbody tr").first).to_be_visible(timeout=30_000)
    expect(table.locator("[data-precision]").first).to_be_visible(timeout=30_000)
    shown = table.evaluate(
        "t => Object.fromEntries([...t.querySelectorAll('tbody tr')].map((tr) => "
        "[tr.dataset.layer, (tr.querySelector('[data-precision]') || {}).dataset?.precision || null]))"
    )
    assert {layer: p for layer, p in shown.items() if p} == by_layer
    expect(page.locator("#heatmap-marks")).to_be_visible(timeout=30_000)
    expect(page.locator("#heatmap-marks")).to_contain_text("another precision than the recipe")
    shot(page, "one-story-run")

    page.get_by_role("tab", name="TE monitor").click()
    expect(page.locator("#rec-code")).to_contain_text("LogNvfp4TensorStats", timeout=30_000)
    expect(page.locator("#rec-code")).not_to_contain_text("DisableFP8Layer")


def test_the_runs_list_shows_each_runs_precision_mix(page, live_server, nvfp4_run, shot) -> None:
    with live_server.api() as client:
        head = client.get(f"/api/v1/runs/{nvfp4_run}/recommendation").json()["headline"]
        listed = next(
            r for r in client.get("/api/v1/runs", params={"limit": 200}).json()["items"] if r["id"] == nvfp4_run
        )
    assert listed["summary"]["precision_mix"] == head["precision_mix"]
    assert listed["summary"]["gemm_speedup"] == head["gemm_speedup_vs_all_bf16"]
    page.goto(f"{live_server.url}/#/runs?project=bt-frontier")
    cell = page.locator(f'tr[data-run-id="{nvfp4_run}"] .col-precision')
    expect(cell).to_contain_text(re.compile(r"\d+ NVFP4 · \d+ MXFP8"), timeout=30_000)
    expect(cell).to_contain_text(f"{head['gemm_speedup_vs_all_bf16']:.2f}× vs BF16")
    shot(page, "one-story-runs-list")


def test_the_runs_list_shows_filters_and_groups_by_the_runs_metadata(page, live_server, make_archive, shot) -> None:
    """GPU, recipe, TE version and git commit from each run's metadata: columns, found by the search, and groups."""
    with live_server.api() as client:
        ids = {}
        for scenario, gpu in (("healthy", "H100"), ("head_only", "B200")):
            archive = make_archive(scenario)
            metadata = {"gpu": gpu, "recipe": "delayed", "te_version": "2.20", "git_commit": f"abc{gpu}0123456789"}
            run = upload_ready(client, archive, name=f"meta-{gpu}", project="bt-meta", metadata=json.dumps(metadata))
            ids[gpu] = run["id"]
    page.goto(f"{live_server.url}/#/runs?project=bt-meta")
    row = page.locator(f'tr[data-run-id="{ids["B200"]}"]')
    expect(row.locator(".col-gpu")).to_have_text("B200", timeout=30_000)
    expect(row.locator(".col-recipe")).to_have_text("delayed")
    expect(row.locator(".col-te")).to_have_text("2.20")
    expect(row.locator(".col-commit")).to_have_text("abcB200012")
    page.fill("#runs-search", "B200")
    expect(page.locator("#runs-table tbody tr[data-run-id]")).to_have_count(1)
    page.fill("#runs-search", "")
    page.select_option("#runs-group", "gpu")
    groups = page.locator("#runs-table tbody tr.group-row")
    expect(groups).to_have_count(2)
    expect(groups.first).to_contain_text("GPU:")
    assert "group=gpu" in page.url
    shot(page, "one-story-runs-grouped")
    # the GPU filter runs on the server (GET /runs?gpu=B200), any spelling of the product matching
    page.select_option("#filter-gpu", "B200")
    expect(page).to_have_url(re.compile(r"gpu=B200"))
    expect(page.locator("#runs-table tbody tr[data-run-id]")).to_have_count(1)
    expect(page.locator(f'tr[data-run-id="{ids["B200"]}"]')).to_be_visible()
    shot(page, "one-story-runs-gpu-filter")
    # the link to the run's experiment-tracker run (PATCH training_run; `upload --mlflow-run-id` sets it)
    link = {"kind": "mlflow", "ref": "0123456789abcdef0123", "url": "http://127.0.0.1:5000/#/experiments/1/runs/0123"}
    with live_server.api() as client:
        assert client.patch(f"/api/v1/runs/{ids['B200']}", json={"training_run": link}).status_code == 200
    page.goto(f"{live_server.url}/#/runs?project=bt-meta")
    cell = page.locator(f'tr[data-run-id="{ids["B200"]}"] .col-training a')
    expect(cell).to_have_attribute("href", link["url"], timeout=30_000)
    expect(cell).to_have_text("MLflow 0123456789ab…")
    page.goto(f"{live_server.url}/#/runs/{ids['B200']}")
    expect(page.locator('#params-run tr[data-key="training-run"] a')).to_have_attribute("href", link["url"])
