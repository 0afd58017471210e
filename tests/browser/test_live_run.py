"""Issue 13 §6 in Chromium: a live run's page follows the logs while they arrive (no reload): the heatmap gains
columns and rows, the scale-factor chart and the training curves card fill in, an early warning and the webhook alert sent for it
appear in the timeline; the runs list marks the run `live`; once finalized the page turns into the run page.

Screenshot: test-artifacts/browser/live-run.png.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.service.live.test_live_runs import LIVE, appender
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath
from tests.support.webhook import webhook_receiver

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
LAYERS = [f"model.layers.{k}.mlp.fc2" for k in range(1, 7)]
LATE_LAYER = "model.layers.7.mlp.fc2"  # its statistics start with the second half of the log


def training_log(steps: range, layers: list[str]) -> bytes:
    """Gradient underflows% per layer (the last one rising through the bands) and an activation scale_inv that
    drops 100x at iteration 400 in the first layer, logged every 10 iterations."""
    points = []
    for step in steps:
        it = step * 10
        for layer in layers:
            rising = layer == LAYERS[-1]
            points.append(
                (f"{layer}_gradient_underflows%", it, round(0.1 + (0.006 * it if rising else 0.02 * (step % 5)), 4))
            )
            scale = (
                1e-4
                if layer == LAYERS[0] and it >= 400
                else 1e-2 * (1 + 0.1 * LAYERS.index(layer) if layer in LAYERS else 1)
            )
            points.append((f"{layer}_activation_scale_inv_min", it, scale))
    return stats_log(points)


def scalars(steps: range) -> bytes:
    return "".join(
        json.dumps({"step": s * 10, "loss": 3.0 / (1 + 0.05 * s), "grad_norm": 1.0 + 0.01 * s, "lr": 1e-4}) + "\n"
        for s in steps
    ).encode()


def test_the_live_page_follows_the_logs_without_reload(page, live_server, shot) -> None:
    with live_server.api() as api, webhook_receiver() as hook:
        rule = api.post(
            "/api/v1/alerts/rules",
            json={
                "project": "bt-live",
                "webhook": hook.url,
                "format": "json",
                "events": ["scale_inv_drop"],
                "min_severity": "critical",
            },
        )
        assert rule.status_code == 201, rule.text
        run = api.post(LIVE, json={"name": "live-browser", "project": "bt-live"}).json()
        send = appender(api, run["id"])

        send(meta_relpath(0), metadata_log(dict.fromkeys([*LAYERS, LATE_LAYER], "fp8")))
        send(stats_relpath(0), training_log(range(0, 30), LAYERS))
        send("scalars.jsonl", scalars(range(0, 30)))

        page.goto(f"{live_server.url}/#/runs?project=bt-live")
        row = page.locator("#view table tbody tr", has_text="live-browser")
        badge = row.locator(".status-live")
        expect(badge).to_have_text("live", timeout=20_000)
        expect(row.locator(".col-sev")).to_have_text("training")  # not "pending" / "—"
        expect(row.locator(".col-precision")).to_have_text("after it is finalized")

        page.goto(f"{live_server.url}/#/runs/{run['id']}")
        expect(page.locator("#live-updated")).to_have_text(
            re.compile(r"updated [0-2]\d:[0-5]\d:[0-5]\d$"), timeout=20_000
        )
        heatmap = page.locator("#live-heatmap")
        expect(heatmap).to_have_attribute("data-iterations", "30", timeout=30_000)
        expect(heatmap).to_have_attribute("data-rows", str(len(LAYERS)))
        expect(page.locator("#run-curves [data-scalar=loss] svg")).to_be_visible()
        expect(page.locator("#run-curves")).to_have_attribute("data-records", "30")
        expect(page.locator("#live-scale svg path.series")).to_have_count(len(LAYERS))
        expect(page.locator("#live-timeline [data-kind=scale_inv_drop]")).to_have_count(0)
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        send(stats_relpath(0), training_log(range(30, 60), [*LAYERS, LATE_LAYER]))
        send("scalars.jsonl", scalars(range(30, 60)))
        expect(heatmap).to_have_attribute("data-iterations", "60", timeout=30_000)
        expect(heatmap).to_have_attribute("data-rows", str(len(LAYERS) + 1))
        drop = page.locator("#live-timeline [data-kind=scale_inv_drop]")
        expect(drop.first).to_contain_text("iteration 400", timeout=30_000)
        expect(page.locator("#live-timeline [data-kind=band_crossing]").first).to_be_visible()
        sent = page.locator("#live-timeline .timeline-alert[data-alert=sent]")
        expect(sent).to_have_count(1, timeout=30_000)  # the webhook delivery, from the alert log
        expect(sent).to_contain_text("scale_inv_min")
        assert len(hook.calls) == 1
        expect(page.locator("#live-figures")).to_contain_text("0–590")
        expect(page.locator("#run-curves")).to_have_attribute("data-records", "60")
        assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
        page.wait_for_timeout(300)  # the charts of the same poll
        shot(page, "live-run")

        assert api.post(f"{LIVE}/{run['id']}/finalize").status_code == 202
        expect(page.locator("#live-heatmap")).to_have_count(0, timeout=30_000)
        expect(page.locator("#view .run-meta [data-status]")).to_have_attribute("data-status", "ready", timeout=60_000)
        assert page.evaluate("window.__sameDocument === true")


def test_the_live_pages_selects_are_kept_in_the_url_hash(page, live_server) -> None:
    """Like the other pages: a reload (or a shared link) shows the same selection; defaults stay out of the URL;
    an unknown value in the URL falls back to the default."""
    with live_server.api() as api:
        run = api.post(LIVE, json={"name": "live-hash", "project": "bt-live-hash"}).json()
        for path, data in (
            (meta_relpath(0), metadata_log(dict.fromkeys(LAYERS, "fp8"))),
            (stats_relpath(0), training_log(range(0, 30), LAYERS)),
        ):
            response = api.put(
                f"{LIVE}/{run['id']}/files/{path}",
                params={"offset": 0},
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            assert response.status_code == 200, response.text
    url = f"{live_server.url}/#/runs/{run['id']}"

    page.goto(url)
    expect(page.locator("#live-heatmap")).to_have_attribute("data-iterations", "30", timeout=30_000)
    page.select_option("#live-heatmap-tensor", "activation")
    page.select_option("#live-scale-stat", "scale_inv_max")
    expect(page).to_have_url(re.compile(r"tensor=activation"))
    expect(page).to_have_url(re.compile(r"scale_stat=scale_inv_max"))

    page.reload()
    expect(page.locator("#live-heatmap-tensor")).to_have_value("activation", timeout=30_000)
    expect(page.locator("#live-scale-stat")).to_have_value("scale_inv_max")
    expect(page.locator("#live-heatmap-card")).to_contain_text("Waiting for activation underflows% statistics")
    expect(page.locator("#live-scale")).to_contain_text("No activation scale_inv_max statistics yet")

    page.select_option("#live-heatmap-tensor", "gradient")  # the default: left out of the URL again
    expect(page.locator("#live-heatmap")).to_have_attribute("data-iterations", "30", timeout=30_000)
    assert "tensor=" not in page.url.replace("scale_tensor=", "") and "scale_stat=scale_inv_max" in page.url

    page.goto(f"{url}?tensor=bogus&scale_tensor=weight")
    expect(page.locator("#live-heatmap-tensor")).to_have_value("gradient", timeout=30_000)
    expect(page.locator("#live-scale-tensor")).to_have_value("weight")
