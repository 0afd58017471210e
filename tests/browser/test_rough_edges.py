"""Rough edges of the dashboard a first-time user met, in a real headless Chromium: no page overflows an 800 px
window, the recipe's class and the layer names are shown whole (never clipped or cut in the middle), and the
heatmap's green marks are explained next to it. Screenshots: test-artifacts/browser/edges-*.png."""

from __future__ import annotations

import pytest

from tests.browser.conftest import LiveServer

try:
    from playwright.sync_api import expect
except ImportError:  # the chromium_executable fixture reports it
    expect = None

pytestmark = pytest.mark.browser

NARROW = {"width": 800, "height": 900}
CLIPPED = """(selector) => [...document.querySelectorAll(selector)]
    .filter((el) => el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > window.innerWidth)
    .map((el) => el.outerHTML.slice(0, 160))"""


def open_run(page, live_server: LiveServer, run_id: int) -> None:
    page.goto(f"{live_server.url}/#/runs/{run_id}")
    expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false", timeout=30_000)
    expect(page.locator("#layers-table tbody tr").first).to_be_visible()


def overflow(page) -> int:
    """How many pixels the document is wider than the window (0: no horizontal scrolling)."""
    return page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


def test_no_page_overflows_an_800_px_window(page, live_server: LiveServer, seeded_runs: dict[str, int], shot) -> None:
    page.set_viewport_size(NARROW)
    pages = {  # each page with what shows it has loaded its widest parts
        "runs": ("#/runs", "a.run-link"),
        "run": (f"#/runs/{seeded_runs['head_only']}", "#layers-table tbody tr, #recommendation .rec-figures"),
        "upload": ("#/upload", "#upload-name"),
        "compare": (
            f"#/compare?base={seeded_runs['healthy']}&head={seeded_runs['u_shape']}",
            "#compare-layers tbody tr, #compare-summary",
        ),
    }
    wide = {}
    for name, (fragment, loaded) in pages.items():
        page.goto(f"{live_server.url}/{fragment}")
        for selector in loaded.split(", "):
            expect(page.locator(selector).first).to_be_visible(timeout=60_000)
        if name == "run":
            expect(page.locator(".heatmap-live")).to_have_attribute("aria-busy", "false", timeout=60_000)
        shot(page, f"edges-800px-{name}")
        if overflow(page) > 0:
            wide[name] = (overflow(page), page.evaluate(CLIPPED, "#view *")[:3])

    assert wide == {}


def test_the_recipe_class_is_shown_whole_with_its_full_path_on_hover(
    page, live_server: LiveServer, seeded_runs: dict[str, int], shot
) -> None:
    open_run(page, live_server, seeded_runs["u_shape"])
    recipe = page.locator("#recommendation .recipe-class")

    expect(recipe).to_have_text("DelayedScaling")
    expect(recipe).to_have_attribute("title", "transformer_engine.common.recipe.DelayedScaling")
    assert page.evaluate(CLIPPED, "#recommendation .recipe-class, #recommendation .figure-hint") == []
    shot(page.locator("#recommendation .rec-figures"), "edges-recipe-class")


def test_layer_names_are_whole_and_wrap_after_dots(
    page, live_server: LiveServer, seeded_runs: dict[str, int], shot
) -> None:
    page.set_viewport_size(NARROW)
    open_run(page, live_server, seeded_runs["u_shape"])
    names = page.locator("#layers-table .layer-name")

    shown = names.evaluate_all("(els) => els.map((el) => [el.textContent, el.title])")
    assert shown and all(text == title for text, title in shown)  # the whole name, nothing cut out
    assert page.evaluate(CLIPPED, "#layers-table .layer-name") == []
    assert "…" not in page.locator("#layers-table").inner_text()
    shot(page.locator("#layers-table"), "edges-layer-names-800px")


def test_the_heatmaps_green_marks_are_explained(
    page, live_server: LiveServer, seeded_runs: dict[str, int], shot
) -> None:
    open_run(page, live_server, seeded_runs["head_only"])  # its recommendation keeps lm_head in BF16
    note = page.locator("#heatmap-marks")

    expect(note).to_be_visible()
    expect(note).to_contain_text("keeps that layer in BF16")
    expect(note).to_contain_text("GEMM override")
    shot(page.locator("#heatmap"), "edges-heatmap-marks")
