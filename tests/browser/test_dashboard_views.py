"""Issue 12 in Chromium: views that agree (rank outlier, n/a layers, healthy, box legend), the runs list (sort,
search, stored summary, delete), deep links, the interactive heatmap, log scale and smoothing, dark mode, settings
that recompute, ingest warnings, labels, and one definition of the severity colours.

Screenshots of the run, runs-list and compare pages, light and dark, go to test-artifacts/browser/.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.browser.conftest import wait_ready

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
COLORS = json.loads((Path(__file__).resolve().parents[2] / "service" / "web" / "static" / "colors.json").read_text())


def rgb(hex_color: str) -> str:
    n = int(hex_color[1:], 16)
    return f"rgb({n >> 16 & 255}, {n >> 8 & 255}, {n & 255})"


def heatmap_drawn(page) -> None:
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false", timeout=30_000)
    page.wait_for_function("() => { const c = document.querySelector('#heatmap-canvas'); return c && c.width > 0; }")


@pytest.fixture(scope="session")
def story_runs(live_server, make_archive, tmp_path_factory) -> dict[str, int]:
    """A 4-rank rank-outlier run, a boundary run (BF16 blocks) and a run whose log was appended to itself."""
    ids: dict[str, int] = {}
    with live_server.api() as client:
        for scenario in ("rank_outlier", "boundary"):
            archive = make_archive(scenario)
            response = client.post(
                "/api/v1/runs",
                data={"name": f"story-{scenario}", "project": "bt-story", "tags": f"story,{scenario}"},
                files={"file": (archive.name, archive.read_bytes(), "application/gzip")},
            )
            assert response.status_code in (200, 202), response.text
            ids[scenario] = response.json()["id"]
        # The healthy run's statistics log twice over (an appended session): every point is a duplicate once.
        with tarfile.open(make_archive("healthy")) as tar:
            member = next(m for m in tar.getmembers() if "statistics" in m.name)
            text = tar.extractfile(member).read()
        doubled = io.BytesIO()
        with tarfile.open(fileobj=doubled, mode="w:gz") as out:
            info = tarfile.TarInfo(member.name)
            info.size = len(text) * 2
            out.addfile(info, io.BytesIO(text + text))
        response = client.post(
            "/api/v1/runs",
            data={"name": "story-appended", "project": "bt-story"},
            files={"file": ("appended.tar.gz", doubled.getvalue(), "application/gzip")},
        )
        assert response.status_code in (200, 202), response.text
        ids["appended"] = response.json()["id"]
        for run_id in ids.values():
            wait_ready(client, run_id)
    return ids


# ------------------------------------------------------------------------------------------------- item 3
def test_rank_outlier_run_tells_one_story(page, live_server, story_runs, shot):
    run_id = story_runs["rank_outlier"]
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator(".head-sev .badge")).to_have_text("severe", timeout=60_000)  # first analysis of the run
    expect(page.locator(".head-sev")).to_contain_text("Rank outlier")
    heatmap_drawn(page)
    expect(page.locator("#heatmap-aggregation")).to_contain_text("maximum over 4 ranks")
    # The layer table agrees with the badge: the outlier rank makes rows severe, said as "rank N only".
    finding = page.locator("#findings-list li[data-pattern='rank_outlier']")
    expect(finding).to_contain_text("Rank outlier")
    outlier_rank = re.search(r"rank (\d+) disagrees", finding.locator(".finding-summary").text_content()).group(1)
    table = page.locator("#layers-table")
    severe_rows = table.locator("tbody tr[data-severity='severe']")
    expect(severe_rows.first).to_be_visible()
    expect(severe_rows.first).to_contain_text(f"rank {outlier_rank} only")
    expect(severe_rows.first.locator(".outlier-ranks")).to_contain_text(f"r{outlier_rank} ")
    expect(table.locator("th[data-key='spread']")).to_be_visible()
    expect(severe_rows.first.locator(".rank-spread")).to_contain_text(f"r{outlier_rank}")
    expect(page.locator("#layers .card-sub")).to_contain_text("outliers shown in their own column")
    assert table.locator("tbody tr[data-severity='ok']").count() == 0  # no green ok beside a severe badge
    shot(page, "views-01-rank-outlier-run")

    # The heatmap picks a rank (and says so); the choice is in the URL.
    page.select_option("#heatmap-rank", outlier_rank)
    expect(page.locator("#heatmap-aggregation")).to_contain_text(f"rank {outlier_rank} only")
    expect(page).to_have_url(re.compile(rf"rank={outlier_rank}"))
    expect(page.locator("#heatmap-png")).to_have_attribute("href", re.compile(rf"rank={outlier_rank}"))
    heatmap_drawn(page)

    # The chart picks a rank too.
    severe_rows.first.click()
    chart = page.locator("#layer-chart svg.chart")
    expect(chart.locator("path.series")).to_have_count(12)  # 3 tensors x 4 ranks
    expect(page.locator(".chart-aggregation")).to_contain_text("one line per rank (4 ranks)")
    page.select_option("#chart-rank", outlier_rank)
    expect(chart.locator("path.series")).to_have_count(3)
    expect(chart.locator(f"path.series[data-label='gradient r{outlier_rank}']")).to_have_count(1)
    expect(page.locator(".chart-aggregation")).to_contain_text(f"rank {outlier_rank} only")
    shot(page.locator("#layers"), "views-02-rank-outlier-chart-one-rank")


# ------------------------------------------------------------------------------------------------- item 4
def test_layers_without_fp8_data_are_na_and_healthy_is_ok(page, live_server, story_runs, seeded_runs, shot):
    page.goto(f"{live_server.url}/#/runs/{story_runs['boundary']}")
    table = page.locator("#layers-table")
    bf16 = table.locator("tbody tr[data-severity='n/a']")
    expect(bf16.first).to_be_visible(timeout=60_000)
    expect(bf16.first.locator(".sev-na")).to_have_text("n/a")
    expect(bf16.first.locator(".badge.sev-ok")).to_have_count(0)
    expect(bf16.first.locator(".pct")).to_have_count(0)  # no numbers for a layer that ran in BF16

    # A healthy run with layers in the warning band: the finding stays ok and says how many layers.
    healthy = seeded_runs["healthy"]
    with live_server.api() as client:
        analysis = client.get(f"/api/v1/runs/{healthy}/analysis").json()
    assert [f["pattern"] for f in analysis["findings"]] == ["healthy"]
    for layer in analysis["layers"][:2]:
        layer["severity"] = "warning"
    page.route(
        re.compile(rf".*/api/v1/runs/{healthy}/analysis$"),
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(analysis)),
    )
    page.goto(f"{live_server.url}/#/runs/{healthy}")
    finding = page.locator("#findings-list li[data-pattern='healthy']")
    expect(finding.locator(".badge")).to_have_text("ok")
    expect(finding).to_contain_text("Healthy")
    expect(finding.locator(".warning-band")).to_have_text("2 layers in the warning band")
    expect(page.locator(".head-sev .badge")).to_have_text("ok")
    shot(page.locator("#findings"), "views-03-healthy-with-warning-band")


# ------------------------------------------------------------------------------------------------- item 5
def test_heatmap_boxes_say_how_their_level_differs_from_the_findings(page, live_server, seeded_runs):
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    heatmap_drawn(page)
    note = page.locator("#heatmap-boxes")
    # the boxes are the analysis's verdict of each row's series (the findings' level), the colours every point
    expect(note).to_contain_text("same verdict as the findings")
    expect(note).to_contain_text("trailing window after warm-up")
    with live_server.api() as client:
        svg = client.get(f"/api/v1/runs/{seeded_runs['head_only']}/heatmap.svg").text
    assert "the analysis rates critical" in svg and "trailing window" in svg  # the image's legend says the same


# ------------------------------------------------------------------------------------------------- item 9
def test_runs_list_sorts_searches_shows_summary_and_deletes(
    page, live_server, seeded_runs, story_runs, make_archive, shot
):
    page.goto(f"{live_server.url}/#/runs")
    rows = page.locator("#runs-table tbody tr")
    head = page.locator(f"tr[data-run-id='{seeded_runs['head_only']}']")
    expect(head.locator(".col-sev .badge")).to_have_text("severe", timeout=30_000)  # the stored summary
    expect(head.locator(".col-sev .pattern")).to_have_text("Head only")
    expect(head.locator(".col-bf16")).to_contain_text("1")
    expect(page.locator(f"tr[data-run-id='{seeded_runs['healthy']}'] .col-sev .badge")).to_have_text("ok")
    shot(page, "runs-list-01-light")

    page.fill("#runs-search", "llama")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", str(seeded_runs["head_only"]))
    expect(page).to_have_url(re.compile(r"q=llama"))
    page.fill("#runs-search", "bt-story")
    expect(rows).to_have_count(3)
    page.fill("#runs-search", "")

    page.locator("th[data-key='name'] button").click()
    expect(page.locator("th[data-key='name']")).to_have_attribute("aria-sort", "ascending")
    names = [t.strip() for t in page.locator("#runs-table .run-link").all_text_contents()]
    assert names == sorted(names, key=str.lower)
    page.locator("th[data-key='severity'] button").click()
    expect(page.locator("th[data-key='severity']")).to_have_attribute("aria-sort", "descending")
    expect(rows.first.locator(".col-sev .badge")).to_have_text("severe")
    expect(page).to_have_url(re.compile(r"sort=severity"))

    # Delete (the open service gives every caller the admin scope): two clicks, the row goes, the API agrees.
    archive = make_archive("healthy")
    with live_server.api() as client:
        archive_id = client.post(
            "/api/v1/runs",
            data={"name": "to-delete", "project": "bt-delete"},
            files={"file": (archive.name, archive.read_bytes(), "application/gzip")},
        ).json()["id"]
        wait_ready(client, archive_id)
    page.goto(f"{live_server.url}/#/runs?q=to-delete")
    victim = page.locator(f"tr[data-run-id='{archive_id}']")
    expect(victim).to_be_visible()
    victim.locator(".delete-run").click()
    expect(victim.locator(".delete-run")).to_have_text("Confirm delete")
    victim.locator(".delete-run").click()
    expect(victim).to_have_count(0)
    with live_server.api() as client:
        assert client.get(f"/api/v1/runs/{archive_id}").status_code == 404


def test_runs_list_hides_delete_without_the_admin_scope(page, live_server, seeded_runs):
    page.route(
        re.compile(r".*/api/v1/auth/me$"),
        lambda route: route.fulfill(
            status=200,
            content_type="application/json",
            body='{"name": "ci-reader", "scope": "read", "anonymous": false, "expires_at": null}',
        ),
    )
    page.goto(f"{live_server.url}/#/runs")
    expect(page.locator(f"tr[data-run-id='{seeded_runs['healthy']}']")).to_be_visible()
    expect(page.locator(".delete-run")).to_have_count(0)


def test_run_page_state_is_a_deep_link(page, live_server, seeded_runs, shot):
    run_id = seeded_runs["head_only"]
    page.goto(f"{live_server.url}/#/runs/{run_id}?tensor=activation&layer=model.lm_head&rec=hydra&log=1&smooth=0.5")
    expect(page.locator("#heatmap-tensor")).to_have_value("activation")
    expect(page.locator("#tab-hydra")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#rec-code")).to_contain_text("fp8_config")
    expect(page.locator("#layer-chart .chart-head")).to_contain_text("model.lm_head")
    expect(page.locator("#chart-log")).to_be_checked()
    expect(page.locator("#layer-chart svg.chart")).to_have_attribute("data-scale", "log")
    expect(page.locator("#layer-chart path.series-raw")).to_have_count(3)  # smoothed: raw lines stay faint
    page.click("#tab-te-yaml")
    expect(page).to_have_url(re.compile(r"rec=te-yaml"))
    page.locator("#layers-table tbody tr").nth(3).click()
    expect(page).to_have_url(re.compile(r"layer=model\.model\.layers"))
    shot(page, "views-04-deep-link")


def test_a_late_state_write_does_not_undo_a_navigation(page, live_server, seeded_runs):
    """A link changes location.hash at once and its hashchange comes as a task of its own; a view writing its
    state into the URL in between (here a recommendation tab chosen in the same turn) put its own hash back, and
    the router rendered the old view again: CI saw the run page stay after going to #/compare."""
    run_id, other = seeded_runs["head_only"], seeded_runs["healthy"]
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator("#tab-te-yaml")).to_be_visible()
    target = f"#/compare?base={other}&head={run_id}"
    page.evaluate("(target) => { location.hash = target; document.querySelector('#tab-te-yaml').click(); }", target)
    expect(page.locator("#compare-result")).to_be_visible()
    assert page.evaluate("location.hash").startswith("#/compare?"), page.url
    expect(page.locator("#recommendation")).to_have_count(0)  # the run page is gone, not drawn again


def test_interactive_heatmap_hover_and_click(page, live_server, seeded_runs, shot):
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    heatmap_drawn(page)
    canvas = page.locator("#heatmap-canvas")
    canvas.scroll_into_view_if_needed()
    page.mouse.wheel(0, 300)  # the last rows into the viewport
    page.wait_for_timeout(100)
    box = canvas.bounding_box()
    with live_server.api() as client:
        layout = client.get(f"/api/v1/runs/{seeded_runs['head_only']}/heatmap.json").json()
    row = [r["layer"] for r in layout["rows"]].index("model.lm_head")  # the failing layer
    top, row_height = float(canvas.get_attribute("data-top")), float(canvas.get_attribute("data-row-height"))
    y = box["y"] + top + (row + 0.5) * row_height
    page.mouse.move(box["x"] + box["width"] * 0.45, y)
    tip = page.locator(".heatmap-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("model.lm_head")
    expect(tip.locator(".tip-value")).to_contain_text("%")
    page.mouse.click(box["x"] + box["width"] * 0.45, y)
    expect(page.locator("#layer-chart .chart-head")).to_contain_text("model.lm_head")
    expect(page).to_have_url(re.compile(r"layer=model\.lm_head"))

    # Keyboard: End goes to the last row, ArrowUp to the one above, Enter plots it.
    canvas.focus()
    page.keyboard.press("End")
    expect(tip).to_contain_text(layout["rows"][-1]["layer"])
    page.keyboard.press("ArrowUp")
    above = layout["rows"][-2]["layer"]
    expect(tip.locator(".tip-head")).to_have_text(above)
    page.keyboard.press("Enter")
    expect(page.locator("#layer-chart .chart-head")).to_contain_text(above)
    shot(page, "views-05-heatmap")


def test_layer_chart_log_scale_and_smoothing(page, live_server, seeded_runs):
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['u_shape']}?layer=model.esm.encoder.layers.1.layernorm_mlp.fc2")
    chart = page.locator("#layer-chart svg.chart")
    expect(chart).to_have_attribute("data-scale", "linear")
    linear = chart.locator("path.series[data-label='gradient']").get_attribute("d")
    page.check("#chart-log")
    expect(page.locator("#layer-chart svg.chart")).to_have_attribute("data-scale", "log")
    assert page.locator("#layer-chart path.series[data-label='gradient']").get_attribute("d") != linear
    expect(page.locator("#layer-chart path.series-raw")).to_have_count(0)
    page.locator("#chart-smooth").fill("0.8")
    expect(page.locator("#layer-chart path.series-raw")).to_have_count(3)
    expect(page.locator(".chart-aggregation")).to_contain_text("smoothed (EMA 0.80)")
    expect(page).to_have_url(re.compile(r"smooth=0\.8"))


def test_settings_recompute_the_analysis_and_recommendation(page, live_server, seeded_runs, shot):
    run_id = seeded_runs["healthy"]
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator("#findings-list li[data-pattern='healthy']")).to_be_visible()
    page.click("#settings summary")
    page.fill("#set-warning", "0.05")
    page.fill("#set-critical", "0.1")
    page.fill("#set-severe", "0.2")
    page.fill("#set-gpu", "B200")
    page.fill("#set-te", "2.8")
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith(f"/runs/{run_id}/recommendation")) as req:
        page.click("#settings-apply")
    assert req.value.post_data_json == {
        "thresholds": {"warning": 0.05, "critical": 0.1, "severe": 0.2},
        "gpu": "B200",
        "te_version": "2.8",
    }
    expect(page).to_have_url(re.compile(r"critical=0\.1.*gpu=B200.*te=2\.8"))
    expect(page.locator("#findings .card-sub")).to_contain_text("warning ≥ 0.05%, critical ≥ 0.1%")
    expect(page.locator("#settings-summary")).to_contain_text("warning 0.05%")
    expect(page.locator(".head-sev .badge")).to_have_text("severe")  # every layer is now above 0.2 %
    expect(page.locator("#recommendation .card-sub")).to_contain_text("recomputed with the settings")
    expect(page.locator("#settings-summary")).to_contain_text("GPU B200")
    shot(page, "views-06-settings-recomputed")
    page.click("#settings-reset")
    expect(page.locator(".head-sev .badge")).to_have_text("ok")


def test_large_duplicated_share_is_shown_as_a_warning(page, live_server, story_runs, seeded_runs):
    page.goto(f"{live_server.url}/#/runs/{story_runs['appended']}")
    warning = page.locator("#ingest-warning")
    expect(warning).to_contain_text("logged twice for the same iteration", timeout=30_000)
    warning.get_by_role("button").click()
    expect(page.locator("#ingest")).to_have_attribute("open", "")
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['healthy']}")
    expect(page.locator("#run-figures")).to_be_visible()
    expect(page.locator("#ingest-warning")).to_have_count(0)


# ------------------------------------------------------------------------------------------------ item 10
def test_labels_are_human_and_cite_nothing_private(page, live_server, seeded_runs):
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    expect(page.locator("#findings-list li[data-pattern='head_only'] .finding-pattern")).to_have_text("Head only")
    expect(page.locator(".recipe-label")).to_have_text(re.compile(r"\(\w+Scaling\)"))
    page.locator(".rationale summary").click()
    text = page.locator("#view").inner_text()
    assert not re.search(r"\b\w+\.md\b|§", text), "the page cites a document users do not have"
    assert not re.search(r"\d\.\d{5,}", text), "a number escaped the formatter"


# ---------------------------------------------------------------------------------- item 11 + dark mode
def test_severity_colours_come_from_one_definition(page, live_server, seeded_runs):
    from fp8_policy.service.visual.style import BAND_TEXT

    assert {band: c["text"] for band, c in COLORS["severity"].items()} == BAND_TEXT
    css = (Path(__file__).resolve().parents[2] / "service" / "web" / "static" / "app.css").read_text()
    assert not re.search(r"--sev-[a-z-]+:\s*#", css), "app.css defines a severity colour of its own"
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    badge = page.locator(".head-sev .badge.sev-severe")
    expect(badge).to_have_css("color", rgb(COLORS["severity"]["severe"]["text"]))
    expect(badge).to_have_css("background-color", rgb(COLORS["severity"]["severe"]["bg"]))


def test_dark_mode_follows_the_system_preference(page, live_server, seeded_runs, shot):
    page.emulate_media(color_scheme="dark")
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    heatmap_drawn(page)
    expect(page.locator("body")).to_have_css("background-color", "rgb(13, 17, 23)")
    expect(page.locator(".head-sev .badge.sev-severe")).to_have_css(
        "color", rgb(COLORS["severity"]["severe"]["dark"]["text"])
    )
    page.locator("#layers-table tbody tr[data-layer='model.lm_head']").click()
    expect(page.locator("#layer-chart svg.chart")).to_be_visible()
    shot(page, "run-page-dark")
    page.goto(f"{live_server.url}/#/runs")
    expect(page.locator(f"tr[data-run-id='{seeded_runs['head_only']}'] .col-sev .badge")).to_have_text("severe")
    shot(page, "runs-list-dark")
    page.goto(f"{live_server.url}/#/compare?base={seeded_runs['healthy']}&head={seeded_runs['u_shape']}")
    page.wait_for_function(
        "() => { const i = document.querySelector('#compare-img'); return i && i.complete && i.naturalWidth > 0; }",
        timeout=30_000,
    )
    shot(page, "compare-page-dark")
    page.emulate_media(color_scheme="light")
    expect(page.locator("body")).to_have_css("background-color", "rgb(245, 246, 248)")
    shot(page, "compare-page-light")
    page.goto(f"{live_server.url}/#/runs/{seeded_runs['head_only']}")
    heatmap_drawn(page)
    shot(page, "run-page-light")
