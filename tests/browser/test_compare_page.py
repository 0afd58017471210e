"""The compare page shows what GET /api/v1/compare returns (issue 12 items 7 and 8): runs without a layer in common
are said to be incomparable up front, a problem that followed a moved BF16 boundary is one statement, the two
recommendations stand side by side, and changes on a base below the noise floor are in points only.

The boundary pair is the synthetic OG2-7B study (policy/synthetic/studies.py): the last FP8 block degrades with
2 BF16 blocks at each end (block 30) and again with 4 (block 28).
"""

from __future__ import annotations

import json
import re

import pytest

from fp8_policy.policy.synthetic import write_run
from fp8_policy.policy.synthetic.studies import og2_boundary_study
from tests.browser.conftest import wait_ready
from tests.browser.test_dashboard import wait_image
from tests.support.archives import tree_tar_gz

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser


@pytest.fixture(scope="session")
def og2_runs(live_server, tmp_path_factory) -> tuple[int, int]:
    """(FL2, FL4): the study's two runs, uploaded through the API and ingested."""
    study = og2_boundary_study()
    tmp = tmp_path_factory.mktemp("og2")
    ids = []
    with live_server.api() as client:
        for name, run in (("og2-fl2", study.before), ("og2-fl4", study.after)):
            write_run(run, tmp / name)
            response = client.post(
                "/api/v1/runs",
                files={"file": ("run.tgz", tree_tar_gz(tmp / name))},
                data={"project": "bt-og2", "name": name, "metadata": json.dumps(study.metadata)},
            )
            assert response.status_code in (200, 202), response.text
            ids.append(response.json()["id"])
        for run_id in ids:
            wait_ready(client, run_id, timeout=120)
    return ids[0], ids[1]


def test_moved_boundary_and_recommendations_side_by_side(page, live_server, og2_runs, shot):
    fl2, fl4 = og2_runs
    with live_server.api() as client:
        body = client.get("/api/v1/compare", params={"base": fl2, "head": fl4}).json()
    (moved,) = body["moved_problems"]
    recs = body["recommendations"]

    page.goto(f"{live_server.url}/#/compare?base={fl2}&head={fl4}")
    card = page.locator("#compare-moved")
    expect(card).to_contain_text("The problem followed the boundary")
    item = card.locator("li[data-pattern='boundary'][data-side='end']")
    expect(item).to_contain_text("Boundary effect")  # the pattern's label, not its code
    expect(item).to_contain_text("block 30 → block 28")
    expect(item).to_contain_text("BF16 end blocks 2 → 4")
    expect(item).to_contain_text(moved["summary"])
    expect(page.locator("#compare-incomparable")).to_have_count(0)

    # The two recommendations: the override followed the degrading block; same recipe; the cost of the wider tail.
    base_side, head_side = (
        page.locator("#compare-recs .rec-side[data-side='base']"),
        page.locator("#compare-recs .rec-side[data-side='head']"),
    )
    for side, key, change in ((base_side, "base", "removed"), (head_side, "head", "added")):
        (override,) = recs["gemm_overrides"][key]
        entry = side.locator("[data-list='overrides'] li")
        expect(entry).to_have_count(1)
        expect(entry).to_contain_text(override["layer"])
        expect(entry.locator(f"[data-change='{change}']")).to_be_visible()
        expect(side.locator("[data-field='recipe']")).to_have_text(recs["recipe"][f"{key}_label"])
        share = recs["expected_cost"]["bf16_gemm_share"][key]
        expect(side.locator("[data-cost='bf16_gemm_share']")).to_have_text(f"{share * 100:.1f}%")
    assert recs["expected_cost"]["bf16_gemm_share"]["base"] != recs["expected_cost"]["bf16_gemm_share"]["head"]
    expect(page.locator("#compare-recs-summary")).to_contain_text("GEMM overrides 1 → 1")
    expect(page.locator("#compare-recs-history")).to_contain_text("followed the boundary")

    # Findings carry their labels in both lists.
    expect(page.locator("#compare-findings .appeared li[data-pattern='boundary']")).to_contain_text("Boundary effect")
    expect(page.locator("#compare-findings .disappeared li[data-pattern='boundary']")).to_contain_text(
        "Boundary effect"
    )
    wait_image(page, "#compare-img")
    shot(page, "compare-moved-boundary")

    # A change on a base below the noise floor is shown in points, without a percentage.
    stat_names = ("level", "max", "mean", "last")
    layer, tensor, stat = next(
        (row["name"], tensor, stat)
        for row in body["layers"]
        for tensor, stats in row["stats"].items()
        for stat in stat_names
        if stats[stat]["below_noise_floor"] and stats[stat]["change"] is not None
    )
    page.select_option("#compare-stat", stat)
    page.fill("#compare-filter", layer)
    row = page.locator(f"#compare-layers tr[data-layer='{layer}']")
    expect(row).to_have_count(1)
    cell = row.locator(f"td:nth-child({_delta_column(page, tensor)}) .delta")
    expect(cell).to_have_attribute("data-noise-floor", "true")
    expect(cell).to_have_text(re.compile(r"^[+−-]?\d+\.\d\d pp$"))
    expect(cell).to_have_attribute("title", re.compile("below the noise floor"))
    assert "%" not in (cell.text_content() or "")


def _delta_column(page, tensor: str) -> int:
    """1-based index of the 'Δ pp' column right after the tensor's base → head column."""
    headers = [text.strip() for text in page.locator("#compare-layers thead th").all_text_contents()]
    start = next(i for i, text in enumerate(headers) if text.lower().startswith(tensor))
    return start + 2


def test_runs_without_a_common_layer_are_incomparable_up_front(page, live_server, seeded_runs, shot):
    esm2, llama = seeded_runs["healthy"], seeded_runs["head_only"]
    page.goto(f"{live_server.url}/#/compare?base={esm2}&head={llama}")
    banner = page.locator("#compare-incomparable")
    expect(banner).to_contain_text("cannot be compared layer by layer")
    expect(banner).to_contain_text("no layer in common")
    # It comes before everything else that compares, and nothing layer-wise is drawn; the view of the runs side by
    # side says it first too.
    order = page.evaluate("""() => [...document.querySelectorAll('#compare-pair > *')].map(
        (el) => el.id || el.className)""")
    assert order[:2] == ["sides", "compare-incomparable"], order
    first = page.locator("#compare-result > *").first
    expect(first.locator("#compare-multi-incomparable")).to_contain_text("share a layer")
    expect(page.locator("#compare-layers")).to_have_count(0)
    expect(page.locator("#compare-img")).to_have_count(0)
    expect(page.locator("#compare-recs")).to_have_count(0)
    expect(page.locator("#compare-moved")).to_have_count(0)
    shot(page, "compare-incomparable")
