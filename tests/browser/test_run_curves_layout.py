"""The Training curves card's charts fill their grid columns and stay crisp; a layer picked in the layers table
is read out at once; scalar lines the service skipped are said under the card (Chromium).

- At 1280 and 800 px wide, at a devicePixelRatio of 1 and 2, each chart's SVG is as wide as its grid column (not
  a fixed 420 px nor a third of the grid), drawn at the size it is shown (no CSS rescale of its text), and the
  plot frame's 1 px edges cover whole device pixels (checked on a screenshot's pixels, not on attributes).
- A click on a row of the layers table names that layer in the read-out's "selected layer" line without another
  hover (as a heatmap or findings selection does).
- Lines of scalars.jsonl left out (not a JSON object with a "step", a step below 0) are counted under the card of
  the run page and of a live run's page.

Screenshots: test-artifacts/browser/run-curves-1280.png, run-curves-800.png, run-curves-800-dpr2.png,
run-curves-layer-row.png, run-curves-skipped.png, live-run-curves-skipped.png.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from tests.browser.conftest import LiveServer
from tests.browser.test_run_curves import LAYERS, hover_loss_at, logs, scalars, stats, upload
from tests.service.live.test_live_runs import LIVE, appender
from tests.support.archives import meta_relpath, metadata_log, stats_relpath

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser

GEOMETRY = """(grid) => [...grid.querySelectorAll('.live-scalar')].map((cell) => {
  const svg = cell.querySelector('svg');
  const frame = svg.querySelector('.chart-frame');
  const style = getComputedStyle(cell);
  return {
    column: cell.getBoundingClientRect().width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
    shown: svg.getBoundingClientRect().width,
    drawn: Number(svg.getAttribute('width')),
    frame: { x: Number(frame.getAttribute('x')), y: Number(frame.getAttribute('y')),
             width: Number(frame.getAttribute('width')), height: Number(frame.getAttribute('height')) },
  };
})"""


def inked(values: list[int], background: int) -> list[int]:
    """Indices of the pixels that differ from the background (the frame's edge and any blur around it)."""
    return [i for i, v in enumerate(values) if abs(v - background) > 6]


def device_png(cdp, element, beyond: bool = False) -> bytes:
    """The element as the screen shows it, one image pixel per device pixel (Playwright's own screenshot is taken
    at its context's viewport and scale, not at the ones emulated here)."""
    element.evaluate("(e) => e.scrollIntoView({ block: 'center' })")  # not under the sticky top bar
    box = element.evaluate(
        "(e) => { const r = e.getBoundingClientRect(); return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; }"
    )
    clip = {**box, "scale": 1}
    shot = cdp.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": beyond})
    return base64.b64decode(shot["data"])


def device_pixels(cdp, svg) -> Image.Image:
    return Image.open(io.BytesIO(device_png(cdp, svg))).convert("L")


def frame_edges(image: Image.Image, svg, frame: dict, dpr: int) -> tuple[list[int], list[int]]:
    """Device-pixel rows of the plot frame's top edge (scanned down the middle of the plot) and columns of its
    left edge (scanned across, half-way between two y grid lines): one 1 px line each."""
    assert image.size[0] >= round(float(svg.get_attribute("width") or 0) * dpr) - 1, image.size
    x_mid = round((frame["x"] + frame["width"] / 2) * dpr)
    column = [image.getpixel((x_mid, y)) for y in range(0, round((frame["y"] + 5) * dpr))]
    ys = sorted(
        float(y)
        for y in svg.locator(".chart-grid line:not(.xgrid)").evaluate_all("(ls) => ls.map((l) => l.getAttribute('y1'))")
    )
    y_mid = round((ys[0] + ys[1]) / 2 * dpr)
    row = [image.getpixel((x, y_mid)) for x in range(round((frame["x"] - 5) * dpr), round((frame["x"] + 5) * dpr))]
    return inked(column, column[0]), inked(row, row[-1])


def set_display(page, cdp, width: int, dpr: int) -> None:
    cdp.send(
        "Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": dpr, "mobile": False}
    )
    assert page.evaluate("[innerWidth, devicePixelRatio]") == [width, dpr]


def test_the_charts_fill_their_columns_and_stay_crisp(page, live_server: LiveServer, _artifacts_dir: Path) -> None:
    run = upload(live_server, "curves-fit", {**logs(), "scalars.jsonl": scalars(range(0, 1000, 5))})
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    grid = page.locator("#run-curves-charts")
    expect(grid).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)

    page.evaluate("document.querySelector('.topbar').style.position = 'static'")  # off the card in the screenshots
    cdp = page.context.new_cdp_session(page)
    for width, dpr in ((1280, 1), (1280, 2), (800, 2), (800, 1)):  # the last: only the ratio changes
        set_display(page, cdp, width, dpr)
        page.wait_for_timeout(600)  # the card redraws once the width has held still
        charts = grid.evaluate(GEOMETRY)
        assert len(charts) == 3
        for chart in charts:
            label = f"{width} px, dpr {dpr}: {chart}"
            assert chart["column"] - 1 <= chart["shown"] <= chart["column"] + 0.01, f"not the column's width at {label}"
            assert abs(chart["drawn"] - chart["shown"]) < 0.01, f"rescaled by CSS at {label}"
        grid.scroll_into_view_if_needed()
        for k, name in enumerate(("loss", "grad_norm", "lr")):
            svg = grid.locator(f"[data-scalar={name}] svg")
            rows, cols = frame_edges(device_pixels(cdp, svg), svg, charts[k]["frame"], dpr)
            assert len(rows) == dpr and len(cols) == dpr, (
                f"{name} frame blurred at {width} px, dpr {dpr}: {rows} {cols}"
            )
        if dpr == 1 or width == 800:
            name = f"run-curves-{width}" + ("-dpr2" if dpr == 2 else "")
            (_artifacts_dir / f"{name}.png").write_bytes(device_png(cdp, page.locator("#run-curves"), beyond=True))


def test_a_layers_table_row_is_read_out_at_once(page, live_server: LiveServer, shot) -> None:
    run = upload(live_server, "curves-row", {**logs(), "scalars.jsonl": scalars(range(0, 1000, 5))})
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    card = page.locator("#run-curves")
    expect(card.locator("#run-curves-charts")).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)
    expect(page.locator("#layers-table")).to_be_visible(timeout=30_000)
    card.scroll_into_view_if_needed()
    hover_loss_at(page, card, 410)
    readout = page.locator("#run-curves-readout")
    expect(readout).to_have_attribute("data-worst-layer", LAYERS[2])
    expect(readout.locator(".run-curves-layer")).to_have_count(0)

    page.locator(f'#layers-table tr[data-layer="{LAYERS[1]}"]').click()  # the pointer is off the curves now
    expect(readout).to_have_attribute("data-layer", LAYERS[1])
    expect(readout.locator(".run-curves-layer")).to_contain_text(LAYERS[1])
    expect(readout.locator(".run-curves-layer")).to_contain_text("0.06")
    page.locator(f'#layers-table tr[data-layer="{LAYERS[3]}"]').click()
    expect(readout.locator(".run-curves-layer")).to_contain_text(LAYERS[3])
    card.scroll_into_view_if_needed()
    shot(card, "run-curves-layer-row")

    page.locator("#layer-chart button", has_text="Close").click()  # no layer picked: no such line
    expect(readout.locator(".run-curves-layer")).to_have_count(0)


def negative(steps: range) -> bytes:
    return "".join(json.dumps({"step": s, "loss": 9.0, "grad_norm": 1.0, "lr": 0.0}) + "\n" for s in steps).encode()


def test_an_uploads_skipped_scalar_lines_are_counted_under_the_card(page, live_server: LiveServer, shot) -> None:
    text = negative(range(-3, 0)) + scalars(range(0, 1000, 5)) + b"step,loss\n{not json\n"
    run = upload(live_server, "curves-skipped", {**logs(), "scalars.jsonl": text})
    assert run["ingest_report"]["scalars"]["negative_steps"] == 3
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    card = page.locator("#run-curves")
    expect(card.locator("#run-curves-charts")).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)

    skipped = card.locator("#run-curves-skipped")
    expect(skipped).to_contain_text("5 scalar lines skipped")
    expect(skipped).to_contain_text('2 not a JSON object with an integer "step"')
    expect(skipped).to_contain_text("3 with a step below 0")
    expect(skipped).to_contain_text("ScalarsNegativeSteps")  # the ingest report's warning, with its samples
    expect(skipped).to_have_attribute("data-unreadable", "2")
    expect(skipped).to_have_attribute("data-negative", "3")
    card.scroll_into_view_if_needed()
    shot(card, "run-curves-skipped")


def test_a_clean_scalars_file_has_no_skipped_note(page, live_server: LiveServer) -> None:
    run = upload(live_server, "curves-clean", {**logs(), "scalars.jsonl": scalars(range(0, 1000, 5))})
    page.goto(f"{live_server.url}/#/runs/{run['id']}")
    card = page.locator("#run-curves")
    expect(card.locator("#run-curves-charts")).to_have_attribute("data-scalars", "loss grad_norm lr", timeout=60_000)
    expect(card.locator("#run-curves-skipped")).to_have_count(0)


def test_a_live_runs_skipped_scalar_lines_are_counted_as_they_arrive(page, live_server: LiveServer, shot) -> None:
    with live_server.api() as client:
        run = client.post(LIVE, json={"name": "live-skipped", "project": "bt-curves"}).json()
        send = appender(client, run["id"])
        send(meta_relpath(0), metadata_log(dict.fromkeys(LAYERS, "fp8")))
        send(stats_relpath(0), stats(range(0, 500, 20)))
        send("scalars.jsonl", negative(range(-2, 0)))  # nothing drawable yet: the empty card says why too

        page.goto(f"{live_server.url}/#/runs/{run['id']}")
        card = page.locator("#run-curves")
        skipped = card.locator("#run-curves-skipped")
        expect(skipped).to_contain_text("2 scalar lines skipped", timeout=30_000)
        expect(skipped).to_contain_text("2 with a step below 0")
        expect(card.locator("#run-curves-empty")).to_be_visible()

        send("scalars.jsonl", scalars(range(0, 500, 5)) + b"oops\n")
        expect(card.locator("#run-curves-charts")).to_have_attribute(
            "data-scalars", "loss grad_norm lr", timeout=30_000
        )
        expect(skipped).to_contain_text("3 scalar lines skipped")
        expect(skipped).to_contain_text('1 not a JSON object with an integer "step"')
        expect(skipped).to_have_attribute("data-negative", "2")
        card.scroll_into_view_if_needed()
        shot(card, "live-run-curves-skipped")
