"""Issue 9 item 7: heatmaps cannot be used to exhaust memory or starve other requests.

Before: `heatmap.png?dpi=600&width=25&height=16.6` (149 M pixels) was drawn — 15 s and +5 GB — and every render
waited on one process-wide lock, so four such requests made a normal heatmap wait for all of them. Now images
beyond `heatmap_max_pixels` are refused before drawing, large ones go to their own lane with a bounded queue
(429 beyond), and rendered images are cached. The real app under uvicorn on loopback (tests/support/uvicorn_app.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fp8_policy.policy.synthetic import write_run
from fp8_policy.service.settings import Settings
from tests.support.archives import tree_tar_gz
from tests.support.planted_pair import before_after_runs
from tests.support.uvicorn_app import Live, live_service


@dataclass(frozen=True)
class Served:
    live: Live
    run_id: int
    default_pixels: int  # of the default heatmap of that run


@pytest.fixture(scope="module")
def served(migrated_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root: Path = tmp_path_factory.mktemp("render-limits")
    settings = Settings(_env_file=None, data_dir=root / "data", database_url=migrated_url, render_queue=1)
    write_run(before_after_runs()[0], root / "run")
    with live_service(settings) as live, httpx.Client(base_url=live.url, timeout=60) as client:
        response = client.post(
            "/api/v1/runs",
            files={"file": ("run.tgz", tree_tar_gz(root / "run"))},
            data={"name": "render-limits", "project": f"render-{uuid.uuid4().hex}"},
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/api/v1/runs/{run_id}").json()["status"] != "ready":
            assert time.monotonic() < deadline, "the run was not ready in 60 s"
            time.sleep(0.1)
        image = client.get(f"/api/v1/runs/{run_id}/heatmap.json").json()["image"]
        yield Served(live, run_id, image["width_px"] * image["height_px"])


def _heatmap(served: Served, **params: object) -> httpx.Response:
    return httpx.get(f"{served.live.url}/api/v1/runs/{served.run_id}/heatmap.png", params=params, timeout=120)


def test_an_image_beyond_the_pixel_limit_is_refused_before_drawing(served: Served) -> None:
    start = time.perf_counter()
    response = _heatmap(served, dpi=600, width=25, height=16.6)  # the 149 M pixel request
    assert response.status_code == 400, response.text[:200]
    body = response.json()
    assert body["error"] == "ImageTooLarge" and set(body) == {"error", "detail"}
    assert "15,000 x 9,960" in body["detail"] and "25,000,000" in body["detail"]
    assert time.perf_counter() - start < 5.0  # answered, not drawn


def test_heavy_images_queue_in_their_own_lane_and_never_starve_a_normal_heatmap(served: Served) -> None:
    renderer = served.live.app.state.renderer
    heavy_dpi = 300  # 4x the default pixels
    renderer.heavy_pixels = served.default_pixels * 2
    heavy_params = [{"dpi": heavy_dpi, "vmax": 5 + k} for k in range(4)]  # different images: no cache hits
    done: dict[str, float] = {}

    def fetch(name: str, params: dict) -> httpx.Response:
        response = _heatmap(served, **params)
        done[name] = time.monotonic()
        return response

    with ThreadPoolExecutor(5) as pool:
        heavy = [pool.submit(fetch, f"heavy{k}", p) for k, p in enumerate(heavy_params)]
        time.sleep(0.5)  # the heavy lane is drawing one and holding one waiting
        asked = time.monotonic()
        normal = fetch("normal", {"vmax": 4.5}).status_code, time.monotonic() - asked  # (status, seconds)
        responses = [f.result(timeout=180) for f in heavy]
    statuses = sorted(r.status_code for r in responses)
    assert normal[0] == 200
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 1, statuses
    refused = [r for r in responses if r.status_code == 429]
    assert len(refused) >= 2, f"a lane admits 1 drawing + render_queue=1 waiting, got {statuses}"
    assert all(set(r.json()) == {"error", "detail"} and int(r.headers["retry-after"]) > 0 for r in refused)
    drawn = [done[f"heavy{k}"] for k, r in enumerate(responses) if r.status_code == 200]
    assert done["normal"] < max(drawn), (
        f"the normal heatmap ({normal[1]:.1f} s) waited for every heavy one (timings are not asserted: shared CPU)"
    )


def test_a_rendered_image_is_served_from_the_cache(served: Served) -> None:
    first = _heatmap(served, vmax=3.25)
    second = _heatmap(served, vmax=3.25)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.headers["x-render-cache"] == "miss" and second.headers["x-render-cache"] == "hit"
    assert first.content == second.content and first.content.startswith(b"\x89PNG")
    assert _heatmap(served, vmax=3.5).headers["x-render-cache"] == "miss"  # other parameters, other image
