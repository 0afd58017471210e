"""Training curves on a finished run's page, and the notes card on a live run's page (Chromium).

- An upload whose archive carries `scalars.jsonl` shows loss, grad_norm and lr on the iteration axis of its FP8
  statistics; hovering the loss moves the cursor on every chart and the read-out names the scalars and the worst
  layer of the heatmap column at that iteration.
- A run without scalars says so in a sentence, with no chart; one whose scalars file was refused says why.
- A live run's page has the notes card: notes and a tag are edited and saved while it trains.

- The read-out follows the heatmap's series (and a layer picked there), on the run page and on a live run's page.
- A live run's page has the same card, growing as the scalars and the statistics arrive.

Screenshots: test-artifacts/browser/run-curves.png, run-curves-hover.png, run-curves-follow.png,
run-curves-none.png, run-curves-refused.png, live-run-curves.png, live-run-notes.png.
"""

from __future__ import annotations

import io
import json
import math
import re
import tarfile

import pytest

from tests.browser.conftest import LiveServer, box_of, wait_ready
from tests.service.live.test_live_runs import LIVE, appender
from tests.support.archives import meta_relpath, metadata_log, stats_log, stats_relpath

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser
LAYERS = [f"model.layers.{k}.mlp.fc1" for k in range(1, 5)]


def scalars(steps: range) -> bytes:
    lines = []
    for s in steps:
        loss = 2.0 + 8.0 * math.exp(-s / 120) + (1.5 if 400 <= s < 420 else 0.0)  # a bump where fc1 underflows
        lr = 3e-4 * min(1.0, s / 100) * (0.5 + 0.5 * math.cos(math.pi * s / 1000))
        grad = 1.0 + 0.3 * math.exp(-s / 200) + (2.0 if 400 <= s < 420 else 0.0)
        lines.append(json.dumps({"step": s, "loss": loss, "grad_norm": grad, "lr": lr}))
    return ("\n".join(lines) + "\n").encode()


def stats(iterations: range = range(0, 1000, 20), activation: bool = False) -> bytes:
    """Every 20 iterations; layer 3's gradient underflows jump to 6 % at iterations 400-420. With `activation`,
    activation underflows% too, whose jump there (3 %) is layer 1's."""
    points = [
        (f"{layer}_gradient_underflows%", it, 6.0 if (k == 2 and 400 <= it <= 420) else 0.05 + 0.01 * k)
        for it in iterations
        for k, layer in enumerate(LAYERS)
    ]
    if activation:
        points += [
            (f"{layer}_activation_underflows%", it, 3.0 if (k == 0 and 400 <= it <= 420) else 0.02 + 0.01 * k)
            for it in iterations
            for k, layer in enumerate(LAYERS)
        ]
    return stats_log(points)


def upload(live_server: LiveServer, name: str, members: dict[str, bytes]) -> dict:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with live_server.api() as client:
        response = client.post(
            "/api/v1/runs",
            data={"name": name, "project": "bt-curves"},
            files={"file": (f"{name}.tar.gz", buffer.getvalue(), "application/gzip")},
        )
        assert response.status_code == 202, response.text
        return wait_ready(client, response.json()["id"])


def logs(activation: bool = False) -> dict[str, bytes]:
    return {
        stats_relpath(0): stats(activation=activation),
        meta_relpath(0): metadata_log(dict.fromkeys(LAYERS, "fp8")),
    }


def hover_loss_at(page, card, iteration: int, last: int = 995) -> None:
    """The pointer over the loss chart at `iteration` of an axis 0..`last`."""
    box = box_of(card.locator("[data-scalar=loss] rect.overlay"))
    page.mouse.move(box["x"] + box["width"] * iteration / last, box["y"] + box["height"] / 2)


def test_a_finished_run_draws_its_curves_on_the_statistics_axis(page, live_server: LiveServer, shot) -> None:
    run = upload(live_server, "curves", {**logs(), "scalars.jsonl": scalars(range(0, 1000, 5))})
    page.goto(f"{live_server.url}/#/runs/{run['id']}")

    card = page.locator("#run-curves")
    expect(card.locator("#run-curves-charts")).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)
    for name in ("loss", "grad_norm", "lr"):
        expect(card.locator(f"[data-scalar={name}] svg")).to_be_visible()
    expect(card).to_have_attribute("data-records", "200")
    # the FP8 statistics' iterations are ticked under each plot (the heatmap's 50 columns)
    expect(card.locator("[data-scalar=loss] .chart-marks line")).to_have_count(50)
    expect(card.locator("#run-curves-note")).to_contain_text("200 records from the upload's scalars.jsonl")
    card.scroll_into_view_if_needed()
    page.wait_for_timeout(200)
    shot(card, "run-curves")

    hover_loss_at(page, card, 410)

    readout = page.locator("#run-curves-readout")
    expect(readout).to_have_attribute("data-iteration", re.compile(r"^4[01]\d$"))
    iteration = int(readout.get_attribute("data-iteration") or "-1")
    assert 400 <= iteration <= 420
    expect(readout).to_have_attribute("data-worst-layer", LAYERS[2])  # the layer whose underflows jumped there
    expect(readout).to_contain_text("FP8 gradient underflows%")
    expect(readout.locator("[data-scalar=grad_norm]")).to_contain_text("grad_norm")
    # the other charts follow the cursor
    expect(card.locator("[data-scalar=lr] .cursor")).to_have_attribute("visibility", "visible")
    expect(card.locator("[data-scalar=grad_norm] .cursor")).to_have_attribute("visibility", "visible")
    shot(card, "run-curves-hover")

    page.select_option("#run-curves-smooth", "0.9")  # smoothing is kept in the URL
    expect(page).to_have_url(re.compile(r"smooth=0\.9"))
    expect(card.locator("[data-scalar=loss] .series-raw")).to_have_count(1)


def test_the_read_out_follows_the_heatmaps_selection(page, live_server: LiveServer, shot) -> None:
    """Another tensor in the heatmap: the ticks and the read-out (without another hover) are of that series; a
    layer picked in the heatmap (a click on its row) is read out too."""
    run = upload(live_server, "curves-follow", {**logs(activation=True), "scalars.jsonl": scalars(range(0, 1000, 5))})
    page.goto(f"{live_server.url}/#/runs/{run['id']}?tensor=gradient&stat=underflows%25")
    card = page.locator("#run-curves")
    expect(card.locator("#run-curves-charts")).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)
    canvas = page.locator("#heatmap-canvas")
    expect(canvas).to_have_attribute("data-tensor", "gradient", timeout=30_000)
    card.scroll_into_view_if_needed()
    hover_loss_at(page, card, 410)
    readout = page.locator("#run-curves-readout")
    expect(readout).to_have_attribute("data-worst-layer", LAYERS[2])
    expect(readout).to_contain_text("FP8 gradient underflows%")

    page.select_option("#heatmap-tensor", "activation")
    expect(canvas).to_have_attribute("data-tensor", "activation")
    expect(readout).to_contain_text("FP8 activation underflows%")  # the pointer has not moved
    expect(readout).to_have_attribute("data-worst-layer", LAYERS[0])  # activation's jump is layer 1's
    expect(card.locator("#run-curves-note")).to_contain_text("heatmap columns of activation underflows%")
    iteration = int(readout.get_attribute("data-iteration") or "-1")
    assert 400 <= iteration <= 420

    top, row_h = (float(canvas.get_attribute(k) or "nan") for k in ("data-top", "data-row-height"))
    width = float(canvas.evaluate("(c) => c.clientWidth"))
    canvas.click(position={"x": width / 2, "y": top + 1.5 * row_h})  # the second row: LAYERS[1]
    expect(readout).to_have_attribute("data-layer", LAYERS[1])
    expect(readout.locator(".run-curves-layer")).to_contain_text(LAYERS[1])
    expect(readout.locator(".run-curves-layer")).to_contain_text("0.03")
    card.scroll_into_view_if_needed()
    shot(card, "run-curves-follow")


def test_a_run_without_scalars_says_so_and_draws_no_chart(page, live_server: LiveServer, shot) -> None:
    run = upload(live_server, "no-curves", logs(activation=True))
    heatmaps: list[str] = []
    page.on("request", lambda request: heatmaps.append(request.url) if "/heatmap.json" in request.url else None)
    page.goto(f"{live_server.url}/#/runs/{run['id']}")

    empty = page.locator("#run-curves-empty")
    expect(empty).to_contain_text("This run has no training scalars", timeout=60_000)
    expect(empty).to_contain_text("fp8-policy upload DIR")
    expect(page.locator("#run-curves svg")).to_have_count(0)
    expect(page.locator("#run-curves-smooth")).to_have_count(0)
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false")
    page.select_option("#heatmap-tensor", "activation")  # the heatmap shows another series: still no curve to mark
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false")
    # the heatmap card's own two; the curves card has no curve to put the statistics' columns on, so asks none
    assert len(heatmaps) == 2, heatmaps
    shot(page.locator("#run-curves"), "run-curves-none")


def test_a_refused_scalars_file_says_why(page, live_server: LiveServer, shot) -> None:
    run = upload(live_server, "bad-curves", {**logs(), "scalars.jsonl": b"step,loss\n0,2.5\n"})
    assert run["ingest_report"]["scalars"]["warning"].startswith("ScalarsUnreadable")
    page.goto(f"{live_server.url}/#/runs/{run['id']}")

    empty = page.locator("#run-curves-empty")
    expect(empty).to_contain_text("were not kept", timeout=60_000)
    expect(empty).to_contain_text("ScalarsUnreadable")
    expect(page.locator("#run-curves svg")).to_have_count(0)
    shot(page.locator("#run-curves"), "run-curves-refused")


def test_the_live_page_draws_the_curves_card_as_pieces_arrive(page, live_server: LiveServer, shot) -> None:
    """The live page has the finished run's Training curves card (no other scalar charts): it grows with the
    scalars and the statistics received, and its read-out follows the live heatmap's series."""
    with live_server.api() as client:
        run = client.post(LIVE, json={"name": "live-curves", "project": "bt-curves"}).json()
        send = appender(client, run["id"])
        send(meta_relpath(0), metadata_log(dict.fromkeys(LAYERS, "fp8")))
        send(stats_relpath(0), stats(range(0, 500, 20), activation=True))
        send("scalars.jsonl", scalars(range(0, 500, 5)))

        page.goto(f"{live_server.url}/#/runs/{run['id']}")
        card = page.locator("#run-curves")
        expect(card.locator("#run-curves-charts")).to_have_attribute(
            "data-scalars", "loss grad_norm lr", timeout=30_000
        )
        expect(card).to_have_attribute("data-records", "100")
        expect(card.locator("[data-scalar=loss] .chart-marks line")).to_have_count(25)  # iterations 0-480
        expect(page.locator("#live-scalars-card")).to_have_count(0)  # the card replaces the simple charts
        card.scroll_into_view_if_needed()
        hover_loss_at(page, card, 410, last=495)
        readout = page.locator("#run-curves-readout")
        expect(readout).to_have_attribute("data-worst-layer", LAYERS[2])
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        send(stats_relpath(0), stats(range(500, 1000, 20), activation=True))
        send("scalars.jsonl", scalars(range(500, 1000, 5)))
        expect(card).to_have_attribute("data-records", "200", timeout=30_000)
        expect(card.locator("[data-scalar=loss] .chart-marks line")).to_have_count(50, timeout=30_000)
        expect(card.locator("#run-curves-note")).to_contain_text("200 records")
        expect(readout).to_have_attribute("data-worst-layer", LAYERS[2])  # the read-out stays where it was

        page.select_option("#live-heatmap-tensor", "activation")
        expect(readout).to_contain_text("FP8 activation underflows%")
        expect(readout).to_have_attribute("data-worst-layer", LAYERS[0])
        assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
        card.scroll_into_view_if_needed()
        shot(card, "live-run-curves")


def test_the_live_page_has_the_notes_card(page, live_server: LiveServer, shot) -> None:
    with live_server.api() as client:
        run = client.post("/api/v1/live/runs", json={"name": "live-notes", "project": "bt-curves"}).json()
        response = client.put(
            f"/api/v1/live/runs/{run['id']}/files/{stats_relpath(0)}",
            params={"offset": 0},
            content=stats(),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert response.status_code == 200, response.text
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    expect(page.locator("#live-figures")).to_contain_text("Ranks", timeout=30_000)
    expect(page.locator("#run-notes-text")).to_have_text("No notes yet.")

    page.locator("#run-notes-edit").click()
    page.fill("#run-notes-input", "Sweep 3: lr 3e-4, watching fc1 gradients")
    page.fill("#run-tags-input", "sweep-3")
    page.locator("#run-notes-save").click()

    expect(page.locator("#run-notes-text")).to_have_text("Sweep 3: lr 3e-4, watching fc1 gradients")
    expect(page.locator("#run-head-tags .chip")).to_have_text(["sweep-3"])
    page.wait_for_timeout(2500)  # a poll of the live page later, the card and its text are still there
    expect(page.locator("#run-notes-text")).to_have_text("Sweep 3: lr 3e-4, watching fc1 gradients")
    with live_server.api() as client:
        stored = client.get(f"/api/v1/runs/{run['id']}").json()
    assert stored["status"] == "live" and stored["tags"] == ["sweep-3"]
    assert stored["notes"] == "Sweep 3: lr 3e-4, watching fc1 gradients"
    shot(page, "live-run-notes")
