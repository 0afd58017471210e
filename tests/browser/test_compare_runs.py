"""The compare view for 2-8 runs in Chromium (issue 21 item 4): runs picked in the runs list (2-8, a clear refusal
of a 9th) or by URL (`/compare?runs=a,b,c`, and the old `#/compare?base=&head=`), the overlay of a layer's stat
and of the loss with one line and one colour per run, the verdict / recommendation table and the per-layer
precisions side by side with the differences marked, at 1280 and 800 px wide without horizontal overflow.

Eight ESM-2 runs (same layer names): the seeded healthy and u_shape runs, single_tensor, uniform, rank_outlier
(4 ranks, 8 blocks: blocks 9-12 are only in the others), a second healthy seed, and a healthy and a u_shape run
whose uploads carry a loss curve (scalars.jsonl). The seeded Llama head_only run is the 9th, refused.
Screenshots: test-artifacts/browser/compare/compare-runs-*.png (a folder of their own: a browser session that
starts clears only the top folder's screenshots).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from fp8_policy.policy.synthetic import SCENARIOS, write_run
from tests.browser.conftest import ARTIFACTS, wait_ready
from tests.browser.test_dashboard import wait_image
from tests.browser.test_rough_edges import overflow
from tests.support.archives import tree_tar_gz

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser

WIDE = {"width": 1280, "height": 900}
NARROW = {"width": 800, "height": 900}
STEPS = range(0, 200, 5)


def loss(step: int, bump: float) -> float:
    return 2.0 + 8.0 * math.exp(-step / 60) + bump * math.exp(-(((step - 120) / 15) ** 2))


@pytest.fixture(scope="session")
def esm2_runs(live_server, seeded_runs, tmp_path_factory) -> list[int]:
    """Eight ready ESM-2 runs, oldest first (the seeded two, then the ones uploaded here)."""
    tmp = tmp_path_factory.mktemp("compare-runs")
    uploads = {  # name -> (scenario, seed, loss bump or None)
        "cmp-single_tensor": ("single_tensor", None, None),
        "cmp-uniform": ("uniform", None, None),
        "cmp-rank_outlier": ("rank_outlier", None, None),
        "cmp-healthy-seed7": ("healthy", 7, None),
        "cmp-loss-healthy": ("healthy", 11, 0.0),
        "cmp-loss-u_shape": ("u_shape", 12, 1.5),
    }
    ids = [seeded_runs["healthy"], seeded_runs["u_shape"]]
    with live_server.api() as client:
        for name, (scenario, seed, bump) in uploads.items():
            run = dataclasses.replace(SCENARIOS[scenario].run, iterations=200)
            if seed is not None:
                run = dataclasses.replace(run, seed=seed)
            tree = tmp / name
            write_run(run, tree)
            if bump is not None:
                records = [{"step": s, "loss": loss(s, bump), "lr": 1e-4} for s in STEPS]
                (tree / "scalars.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            response = client.post(
                "/api/v1/runs",
                files={"file": (f"{name}.tgz", tree_tar_gz(tree))},
                data={"project": "bt-compare", "name": name},
            )
            assert response.status_code in (200, 202), response.text
            ids.append(response.json()["id"])
        for run_id in ids:
            wait_ready(client, run_id, timeout=120)
    return ids


@pytest.fixture
def shot(shot):
    """The conftest's `shot`, into test-artifacts/browser/compare/."""
    (ARTIFACTS / "compare").mkdir(parents=True, exist_ok=True)
    return lambda target, name: shot(target, f"compare/{name}")


def open_compare(page, url: str) -> None:
    page.goto(url)
    wait_compare(page)


def wait_compare(page) -> None:
    expect(page.locator("#compare-verdict-table tbody tr").first).to_be_visible(timeout=60_000)
    expect(page.locator("#overlay-chart")).to_have_attribute("aria-busy", "false", timeout=60_000)
    expect(page.locator("#loss-chart")).to_have_attribute("aria-busy", "false", timeout=60_000)


def colours(page, selector: str) -> dict[str, str]:
    """run id -> the stroke of its key (legend, table header) or line (chart)."""
    return page.evaluate(
        """(selector) => Object.fromEntries([...document.querySelectorAll(selector)].map((el) => [
            el.closest('[data-run]') ? el.closest('[data-run]').dataset.run : el.dataset.label.split(' ')[0].slice(1),
            (el.querySelector('line') || el).getAttribute('stroke')]))""",
        selector,
    )


def both_widths(page, shot, name: str) -> None:
    """Screenshots at 1280 and 800 px; at 800 px the page does not scroll sideways."""
    page.set_viewport_size(WIDE)
    shot(page, f"{name}-1280")
    page.set_viewport_size(NARROW)
    page.reload()
    wait_compare(page)
    assert overflow(page) == 0, page.evaluate("() => document.documentElement.scrollWidth")
    shot(page, f"{name}-800")
    page.set_viewport_size(WIDE)


def test_the_runs_list_picks_two_to_eight_runs_and_refuses_a_ninth(page, live_server, seeded_runs, esm2_runs, shot):
    page.set_viewport_size(WIDE)
    page.goto(f"{live_server.url}/#/runs")
    button = page.locator("#compare-selected")
    page.check(f"tr[data-run-id='{esm2_runs[0]}'] input.pick")
    expect(button).to_be_disabled()
    expect(page.locator("#compare-note")).to_contain_text("at least one more")
    for run_id in esm2_runs[1:]:
        page.check(f"tr[data-run-id='{run_id}'] input.pick")
    expect(button).to_be_enabled()
    expect(button).to_have_text("Compare selected (8)")

    ninth = page.locator(f"tr[data-run-id='{seeded_runs['head_only']}'] input.pick")
    ninth.click()
    expect(ninth).not_to_be_checked()
    expect(page.locator("#compare-note")).to_have_text("At most 8 runs can be compared: untick one first.")
    expect(button).to_have_text("Compare selected (8)")
    shot(page, "compare-runs-01-list-ninth-refused")

    button.click()
    expect(page).to_have_url(re.compile(r"#/compare\?runs=" + ",".join(map(str, sorted(esm2_runs))) + r"(&|$)"))
    wait_compare(page)
    expect(page.locator("#compare-chosen li")).to_have_count(8)
    expect(page.locator("#compare-add")).to_be_disabled()
    expect(page.locator("#compare-limit")).to_contain_text("at most 8 runs")
    expect(page.locator("#compare-verdict-table thead th[data-run]")).to_have_count(8)
    expect(page.locator("#overlay-chart path.series")).to_have_count(8)
    # one colour per run, the same in the picker, the legend, the table and the chart
    chips, legend = colours(page, "#compare-chosen .run-swatch"), colours(page, "#overlay-legend .run-swatch")
    header, lines = (
        colours(page, "#compare-verdict-table thead .run-swatch"),
        colours(page, "#overlay-chart path.series"),
    )
    assert chips == legend == header == lines and len(set(lines.values())) == 8
    # rank_outlier logged 8 of the 12 blocks: its missing layers say so
    expect(page.locator("#compare-multi-sentences")).to_contain_text("in every run")
    page.select_option("#precision-filter", "all")
    outlier = str(esm2_runs[4])
    expect(page.locator("#compare-precision-table td[data-missing]").first).to_have_text("not in run")
    expect(page.locator(f"#compare-precision-table thead th[data-run='{outlier}']")).to_contain_text("cmp-rank_outlier")
    both_widths(page, shot, "compare-runs-8")


def test_three_runs_by_url_overlay_a_stat_and_the_loss(page, live_server, esm2_runs, shot):
    healthy, loss_healthy, loss_u_shape = esm2_runs[0], esm2_runs[6], esm2_runs[7]
    ids = [healthy, loss_healthy, loss_u_shape]
    page.set_viewport_size(WIDE)
    open_compare(page, f"{live_server.url}/compare?runs={','.join(map(str, ids))}")  # the link without '#'
    expect(page).to_have_url(re.compile(r"/#/compare\?runs=" + ",".join(map(str, ids))))

    legend = page.locator("#overlay-legend li")
    expect(legend).to_have_count(3)
    for item, name in zip(legend.all(), ("seed-healthy", "cmp-loss-healthy", "cmp-loss-u_shape"), strict=True):
        expect(item).to_contain_text(name)
    expect(page.locator("#overlay-chart path.series")).to_have_count(3)

    # another layer and tensor: the chart and the address follow
    layer = "model.esm.encoder.layers.11.self_attention.layernorm_qkv"
    page.select_option("#overlay-layer", layer)
    page.select_option("#overlay-tensor", "activation")
    expect(page.locator("#overlay-chart svg title")).to_have_text(
        re.compile(f"activation underflows% of {re.escape(layer)}")
    )
    expect(page).to_have_url(re.compile("tensor=activation"))
    assert page.evaluate("() => location.hash").count(layer) == 1

    # the loss: two runs uploaded a curve, the third says it has none
    loss_lines = page.locator("#loss-chart path.series")
    expect(loss_lines).to_have_count(2)
    expect(page.locator(f"#loss-legend li[data-run='{healthy}']")).to_contain_text("no training scalars recorded")
    expect(page.locator(f"#loss-legend li[data-run='{loss_u_shape}']")).to_contain_text("40 points")
    assert colours(page, "#loss-chart path.series") == {
        k: v for k, v in colours(page, "#overlay-chart path.series").items() if k != str(healthy)
    }

    # the verdicts side by side: u_shape's GEMM overrides differ from the reference, and say so
    row = page.locator("#compare-verdict-table tr[data-row='gemm_overrides']")
    expect(row).to_have_class(re.compile("row-differs"))
    expect(row.locator(".differs-tag")).to_have_text("differs")
    expect(row.locator(f"td[data-run='{loss_u_shape}']")).to_have_class(re.compile("cell-differs"))
    expect(row.locator(f"td[data-run='{loss_healthy}']")).not_to_have_class(re.compile("cell-differs"))
    page.check("#verdicts-differ")
    expect(page.locator("#compare-verdict-table tr[data-row='project']")).to_have_count(0)
    page.uncheck("#verdicts-differ")
    expect(page.locator("#compare-precision-table tbody tr.row-differs").first).to_be_visible()
    expect(page.locator("#compare-detail-links a")).to_have_count(2)
    expect(page.locator("#compare-pair")).to_have_count(0)
    page.reload()  # the overlay's choice comes back from the address
    wait_compare(page)
    expect(page.locator("#overlay-tensor")).to_have_value("activation")
    both_widths(page, shot, "compare-runs-3")


def test_two_runs_keep_the_base_head_detail_and_the_old_link(page, live_server, esm2_runs, shot):
    base, head = esm2_runs[0], esm2_runs[1]
    page.set_viewport_size(WIDE)
    open_compare(page, f"{live_server.url}/#/compare?base={base}&head={head}")
    expect(page.locator("#compare-pair .side[data-side='base']")).to_contain_text("seed-healthy")
    expect(page.locator("#compare-pair .side[data-side='head']")).to_contain_text("seed-u_shape")
    expect(page.locator("#compare-sentences")).to_contain_text("body gradient underflow +")
    wait_image(page, "#compare-img")
    expect(page.locator("#compare-loss-none")).to_contain_text("No loss recorded")
    expect(page.locator("#overlay-chart path.series")).to_have_count(2)
    both_widths(page, shot, "compare-runs-2")

    # swap: the other run becomes the reference (base)
    page.click(f"#compare-chosen li[data-run='{head}'] .make-ref")
    expect(page).to_have_url(re.compile(rf"#/compare\?runs={head},{base}(&|$)"))
    expect(page.locator("#compare-pair .side[data-side='base']")).to_contain_text("seed-u_shape", timeout=60_000)
    # remove one: one run is not a comparison
    page.click(f"#compare-chosen li[data-run='{base}'] .remove-run")
    expect(page.locator(".empty-state")).to_contain_text("Pick one more run")
    page.select_option("#compare-add", str(esm2_runs[2]))
    expect(page).to_have_url(re.compile(rf"#/compare\?runs={head},{esm2_runs[2]}(&|$)"))
    expect(page.locator("#compare-verdict-table")).to_be_visible(timeout=60_000)


def test_a_comparison_that_cannot_be_made_says_why(page, live_server, seeded_runs, esm2_runs, shot):
    nine = ",".join(map(str, [*esm2_runs, seeded_runs["head_only"]]))
    page.goto(f"{live_server.url}/#/compare?runs={nine}")
    expect(page.locator("#compare-result .alert-error")).to_contain_text("InvalidRunSelection")
    expect(page.locator("#compare-result .alert-error")).to_contain_text("at most 8 runs; got 9")
    expect(page.locator("#compare-limit")).to_have_text("9 runs chosen: a comparison shows at most 8; remove 1.")
    shot(page, "compare-runs-errors-nine")
    page.goto(f"{live_server.url}/#/compare?runs={esm2_runs[0]},{esm2_runs[0]}")
    expect(page.locator("#compare-result .alert-error")).to_contain_text("given more than once")


def chart_widths(page) -> dict[str, int]:
    """The drawn width (the svg's width attribute) of the overlay and of the loss chart."""
    return page.evaluate(
        """() => Object.fromEntries(['overlay-chart', 'loss-chart'].map((id) => [id,
            Number((document.querySelector(`#${id} svg.chart`) || { getAttribute: () => NaN }).getAttribute('width'))]))"""
    )


def test_the_charts_redraw_when_the_window_is_resized(page, live_server, esm2_runs, shot):
    """Both overlays take the new width of the window, as the run page's charts do, without a reload."""
    ids = [esm2_runs[6], esm2_runs[7]]  # both uploads carry a loss curve
    page.set_viewport_size(WIDE)
    open_compare(page, f"{live_server.url}/#/compare?runs={ids[0]},{ids[1]}")
    expect(page.locator("#loss-chart path.series")).to_have_count(2)
    wide = chart_widths(page)
    assert all(w > 900 for w in wide.values()), wide
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads

    page.set_viewport_size(NARROW)
    page.wait_for_function(
        "(wide) => ['overlay-chart', 'loss-chart'].every((id) => {"
        " const svg = document.querySelector(`#${id} svg.chart`);"
        " return svg && Number(svg.getAttribute('width')) < wide[id] - 200; })",
        arg=wide,
    )
    narrow = chart_widths(page)
    assert all(w <= NARROW["width"] for w in narrow.values()), narrow
    assert overflow(page) == 0
    expect(page.locator("#overlay-chart path.series")).to_have_count(2)
    shot(page, "compare-runs-resized-800")

    page.set_viewport_size(WIDE)  # and back
    page.wait_for_function(
        "(wide) => ['overlay-chart', 'loss-chart'].every((id) =>"
        " Number(document.querySelector(`#${id} svg.chart`).getAttribute('width')) === wide[id])",
        arg=wide,
    )
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
