"""The dashboard in a real headless Chromium: upload, runs list, run page, recommendation tabs, layer chart, compare.

Each test saves a screenshot per step to test-artifacts/browser/ (kept as CI artifacts).
"""

from __future__ import annotations

import re

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it: a skip outside CI, a failure under CI=true
    expect = None

pytestmark = pytest.mark.browser

IMAGE_LOADED = """sel => { const img = document.querySelector(sel);
                          return !!img && img.complete && img.naturalWidth > 0; }"""


def wait_image(page, selector: str, timeout: float = 30_000) -> None:
    page.wait_for_function(IMAGE_LOADED, arg=selector, timeout=timeout)


def wait_heatmap(page, timeout: float = 30_000) -> None:
    """The run page's heatmap is drawn on a canvas from heatmap.json."""
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false", timeout=timeout)
    page.wait_for_function("() => { const c = document.querySelector('#heatmap-canvas'); return c && c.width > 0; }")


def test_upload_form_shows_progress_then_live_status(page, live_server, make_archive, shot):
    archive = make_archive("rising_trend")
    page.goto(f"{live_server.url}/#/upload")
    expect(page.locator("h1")).to_have_text("Upload a run")
    expect(page.locator("#upload-submit")).to_be_disabled()
    shot(page, "upload-01-empty-form")

    page.set_input_files("#upload-file", str(archive))
    expect(page.locator("#upload-file-info")).to_contain_text("rising_trend.tar.gz")
    page.fill("#upload-name", "browser-upload")
    page.fill("#upload-project", "bt-upload")
    page.fill("#upload-tags", "browser, ui")
    page.fill("#upload-metadata", '{"gpu": "h100", "hidden_size": 1024}')
    shot(page, "upload-02-file-chosen")

    # Throttle the upload so the progress bar is seen between 0 and 100 %.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 20, "downloadThroughput": -1, "uploadThroughput": archive.stat().st_size // 2},
    )
    page.click("#upload-submit")
    page.wait_for_function(
        """() => { const bar = document.querySelector('#upload-bar');
                                     return bar && bar.value > 0 && bar.value < 100; }""",
        timeout=15_000,
    )
    expect(page.locator("#upload-cancel")).to_be_visible()
    shot(page, "upload-03-in-progress")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )

    status = page.locator("#upload-status")
    expect(status).to_have_attribute("data-status", "ready", timeout=30_000)
    expect(page.locator("#upload-bar")).to_have_js_property("value", 100)
    expect(page.locator("#upload-pct")).to_have_text("100%")
    expect(status).to_contain_text("is ready")
    expect(page.locator(".steps .step.done")).to_have_count(4)
    shot(page, "upload-04-ready")

    page.click("#upload-open")
    expect(page).to_have_url(re.compile(r"#/runs/\d+$"))
    expect(page.locator("h1")).to_contain_text("browser-upload")
    expect(page.locator(".run-meta")).to_contain_text("ready")
    wait_heatmap(page)
    expect(page.locator("#findings-list li[data-pattern='rising_trend']")).to_be_visible()
    shot(page, "upload-05-run-page")


def test_upload_of_a_broken_archive_reports_the_ingest_error(page, live_server, tmp_path, shot):
    junk = tmp_path / "broken.tar.gz"
    junk.write_bytes(b"\x1f\x8b this is not a gzip stream" * 10)
    page.goto(f"{live_server.url}/#/upload")
    page.set_input_files("#upload-file", str(junk))
    page.fill("#upload-project", "bt-broken")
    page.click("#upload-submit")
    status = page.locator("#upload-status")
    expect(status).to_have_attribute("data-status", "failed", timeout=30_000)
    expect(page.locator("#upload-result .alert-error")).to_contain_text("Ingest failed")
    expect(page.locator(".steps .step.failed")).to_have_count(1)
    shot(page, "upload-06-failed")

    page.fill("#upload-metadata", "[1, 2]")  # not an object: refused before anything is sent
    page.set_input_files("#upload-file", str(junk))
    page.click("#upload-submit")
    expect(page.locator("#upload-error")).to_contain_text("metadata must be a JSON object")
    shot(page, "upload-07-invalid-metadata")


def test_runs_list_filters_by_project_and_tag(page, live_server, seeded_runs, shot):
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(re.compile(r"#/runs$"))
    rows = page.locator("#runs-table tbody tr")
    for scenario, run_id in seeded_runs.items():
        expect(page.locator(f"#runs-table tr[data-run-id='{run_id}']")).to_contain_text(f"seed-{scenario}")
    # Overall severity comes from each ready run's stored summary (polled while it is computed).
    expect(page.locator(f"tr[data-run-id='{seeded_runs['head_only']}'] .col-sev .badge")).to_have_text("severe")
    expect(page.locator(f"tr[data-run-id='{seeded_runs['u_shape']}'] .col-sev .badge")).to_have_text("severe")
    expect(page.locator(f"tr[data-run-id='{seeded_runs['healthy']}'] .col-sev .badge")).to_have_text("ok")
    shot(page, "runs-01-all")

    page.select_option("#filter-project", "bt-esm2")
    expect(page).to_have_url(re.compile(r"project=bt-esm2"))
    expect(rows).to_have_count(2)
    for k in range(2):
        expect(rows.nth(k)).to_have_attribute("data-project", "bt-esm2")
    expect(page.locator("#runs-count")).to_contain_text("2 runs matching")
    shot(page, "runs-02-project-filter")

    page.click("text=Clear filters")
    expect(page.locator(f"#runs-table tr[data-run-id='{seeded_runs['head_only']}']")).to_be_visible()
    page.select_option("#filter-tag", "head")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", str(seeded_runs["head_only"]))
    shot(page, "runs-03-tag-filter")

    page.select_option("#filter-project", "bt-esm2")  # head_only is in bt-llama: nothing matches both
    expect(page.locator(".empty-state")).to_contain_text("No runs match")
    shot(page, "runs-04-no-match")


def test_run_page_heatmap_findings_tabs_table_and_chart(page, live_server, seeded_runs, shot):
    run_id = seeded_runs["head_only"]
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator("h1")).to_contain_text("seed-head_only")
    figures = page.locator("#run-figures")
    expect(figures).to_contain_text("Ranks")
    expect(figures).to_contain_text("0–200")

    # Heatmap: drawn from heatmap.json, opened on the worst finding's series; its PNG link follows the tensor selector.
    with live_server.api() as client:
        analysis = client.get(f"/api/v1/runs/{run_id}/analysis").json()
    opened = analysis.get("focus") or analysis["findings"][0]["evidence"][0]
    other = "gradient" if opened["tensor"] != "gradient" else "activation"
    wait_heatmap(page)
    expect(page.locator("#heatmap-tensor")).to_have_value(opened["tensor"])
    expect(page.locator("#heatmap-png")).to_have_attribute("href", re.compile(rf"tensor={opened['tensor']}"))

    # Findings with their evidence numbers.
    finding = page.locator("#findings-list li[data-pattern='head_only']")
    expect(finding).to_contain_text("severe")
    expect(finding.locator("table.evidence tbody tr")).to_have_count(2)
    expect(finding.locator("table.evidence")).to_contain_text(re.compile(r"\d+\.\d+"))
    expect(page.locator(".head-sev .badge")).to_have_text("severe")
    shot(page, "run-01-loaded")

    page.select_option("#heatmap-tensor", other)
    expect(page.locator("#heatmap-png")).to_have_attribute("href", re.compile(rf"tensor={other}"))
    expect(page).to_have_url(re.compile(rf"tensor={other}"))
    wait_heatmap(page)
    shot(page.locator("#heatmap"), "run-02-heatmap-activation")

    # Recommendation tabs: each format's content, keyboard arrows, copy to the clipboard.
    code = page.locator("#rec-code")
    expect(code).to_contain_text('"fp8_skip_layers"')
    expect(code).to_contain_text("model.lm_head")
    page.click("#tab-te-yaml")
    expect(page.locator("#tab-te-yaml")).to_have_attribute("aria-selected", "true")
    expect(code).to_contain_text(re.compile("DisableFP8Layer|DisableQuantizationLayer"))
    expect(code).to_contain_text("LogFp8TensorStats")
    shot(page.locator("#recommendation"), "run-03-tab-te-yaml")
    page.click("#tab-megatron")
    expect(code).to_contain_text("--fp8-recipe")
    page.click("#tab-hydra")
    expect(code).to_contain_text("fp8_config.enabled=True")
    page.keyboard.press("ArrowRight")  # focus is on the Hydra tab: arrow moves to torchao
    expect(page.locator("#tab-torchao")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-torchao")).to_be_focused()
    expect(code).to_contain_text("module_filter_fn")
    expect(page.locator(".rec-filename")).to_contain_text(".py")
    page.click("#copy-rec")
    expect(page.locator("#copy-rec")).to_contain_text("Copied")
    clipboard = page.evaluate("navigator.clipboard.readText()")
    assert "module_filter_fn" in clipboard and clipboard == code.text_content()
    shot(page.locator("#recommendation"), "run-04-tab-torchao-copied")

    # Per-layer table: severe first (model order within a band), then sort by clicking headers.
    table = page.locator("#layers-table")
    first_row = table.locator("tbody tr").first
    expect(table.locator("th[data-key='severity']")).to_have_attribute("aria-sort", "descending")
    expect(first_row).to_have_attribute("data-layer", "model.lm_head")
    expect(table.locator("tbody tr").nth(1)).to_have_attribute("data-layer", re.compile(r"layers\.1\."))
    table.locator("th[data-key='worst_level'] button").click()
    expect(table.locator("th[data-key='worst_level']")).to_have_attribute("aria-sort", "descending")
    expect(first_row).to_have_attribute("data-layer", "model.lm_head")
    table.locator("th[data-key='worst_level'] button").click()
    expect(table.locator("th[data-key='worst_level']")).to_have_attribute("aria-sort", "ascending")
    expect(first_row).not_to_have_attribute("data-layer", "model.lm_head")
    table.locator("th[data-key='name'] button").click()
    expect(table.locator("th[data-key='name']")).to_have_attribute("aria-sort", "ascending")
    table.locator("th[data-key='severity'] button").click()
    expect(first_row).to_have_attribute("data-severity", "severe")

    # Clicking a row draws the layer's gradient / activation / weight underflow series.
    first_row.click()
    chart = page.locator("#layer-chart svg.chart")
    expect(chart).to_be_visible()
    expect(chart.locator("path.series")).to_have_count(3)
    for tensor in ("gradient", "activation", "weight"):
        expect(chart.locator(f"path.series[data-label='{tensor}']")).to_have_count(1)
    expect(page.locator("#layer-chart .chart-head")).to_contain_text("model.lm_head")
    expect(first_row).to_have_attribute("aria-selected", "true")
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.4)
    expect(page.locator(".chart-tip")).to_contain_text("iteration")
    shot(page.locator("#layers"), "run-05-layer-chart")

    # Keyboard: the next row, Enter plots it.
    first_row.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    second = table.locator("tbody tr").nth(1)
    expect(second).to_have_attribute("aria-selected", "true")
    expect(page.locator("#layer-chart .chart-head")).to_contain_text(second.get_attribute("data-layer"))
    shot(page, "run-06-full-page")


def test_compare_page_shows_image_deltas_and_summary(page, live_server, seeded_runs, shot):
    base, head = seeded_runs["healthy"], seeded_runs["u_shape"]
    # From the runs list: tick two runs, compare them.
    page.goto(f"{live_server.url}/#/runs")
    page.check(f"tr[data-run-id='{base}'] input.pick")
    page.check(f"tr[data-run-id='{head}'] input.pick")
    expect(page.locator("#compare-selected")).to_be_enabled()
    shot(page, "compare-01-picked-in-list")
    page.click("#compare-selected")
    expect(page).to_have_url(re.compile(rf"#/compare\?runs={base},{head}(&|$)"))

    # The compare page's own picker: add the runs the other way round, then swap them.
    page.goto(f"{live_server.url}/#/compare")
    expect(page.locator(".empty-state")).to_contain_text("Pick runs to compare")
    page.select_option("#compare-add", str(head))
    expect(page.locator(".empty-state")).to_contain_text("Pick one more run")
    page.select_option("#compare-add", str(base))
    expect(page).to_have_url(re.compile(rf"runs={head},{base}(&|$)"))
    page.click(f"#compare-chosen li[data-run='{base}'] .make-ref")
    expect(page).to_have_url(re.compile(rf"runs={base},{head}"))

    wait_image(page, "#compare-img")
    expect(page.locator(".side[data-side='base']")).to_contain_text("seed-healthy")
    expect(page.locator(".side[data-side='head']")).to_contain_text("seed-u_shape")
    expect(page.locator(".side[data-side='head'] .badge")).to_have_text("severe")
    expect(page.locator("#compare-sentences")).to_contain_text("body gradient underflow +")
    expect(page.locator("#compare-findings .appeared li[data-pattern='u_shape']")).to_be_visible()
    expect(page.locator("#compare-findings .disappeared li[data-pattern='healthy']")).to_be_visible()
    expect(page.locator("#compare-groups tr[data-group='body']")).to_contain_text("pp")
    # Per-layer deltas, worst gradient change first: a u_shape layer (blocks 1-3, 10-12) that went up.
    deltas = page.locator("#compare-layers tbody tr")
    expect(deltas).to_have_count(50)
    expect(deltas.first.locator(".delta-up").first).to_be_visible()
    expect(deltas.first).to_have_attribute("data-layer", re.compile(r"layers\.(1|2|3|10|11|12)\."))
    shot(page, "compare-02-result")

    page.check("#compare-changed")  # only layers whose severity changed: the 24 u_shape layers
    expect(deltas).to_have_count(24)
    page.select_option("#compare-tensor", "activation")
    expect(page.locator("#compare-img")).to_have_attribute("src", re.compile("tensor=activation"))
    wait_image(page, "#compare-img")
    shot(page, "compare-03-changed-only-activation")


def test_errors_are_shown_inline(page, live_server, seeded_runs, shot):
    page.goto(f"{live_server.url}/#/runs/987654")
    alert = page.locator(".alert-error")
    expect(alert).to_contain_text("NotFound")
    expect(alert).to_contain_text("run 987654 does not exist")
    shot(page, "errors-01-missing-run")

    run_id = seeded_runs["head_only"]
    page.goto(f"{live_server.url}/#/compare?base={run_id}&head=987654")
    expect(page.locator("#compare-result .alert-error").first).to_contain_text("987654")
    shot(page, "errors-02-compare-missing-run")

    page.goto(f"{live_server.url}/#/nowhere")
    expect(page.locator(".alert-error")).to_contain_text("no page /nowhere")


def test_a_failing_heatmap_shows_the_api_error_and_retry_recovers(page, live_server, seeded_runs, shot):
    def refuse(route):
        route.fulfill(
            status=400,
            content_type="application/json",
            body='{"error": "NoData", "detail": "run has no gradient underflows% series"}',
        )

    page.route(re.compile(r".*/heatmap\.json.*"), refuse)
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    alert = page.locator(".heatmap-frame .alert-error")
    expect(alert).to_contain_text("Heatmap unavailable")
    expect(alert).to_contain_text("NoData")
    expect(alert).to_contain_text("run has no gradient underflows% series")
    shot(page, "errors-03-heatmap-refused")

    page.unroute(re.compile(r".*/heatmap\.json.*"), refuse)
    alert.get_by_role("button").first.click()
    frame = page.locator(".heatmap-frame")
    expect(frame).not_to_have_class(re.compile("is-error"))
    expect(page.locator(".heatmap-frame .alert-error")).to_have_count(0)
    wait_heatmap(page)
