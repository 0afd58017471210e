"""A figure ready to draw and the drawn image: what crosses into the render workers (service/visual/pool.py).

Belongs here: `RenderJob`, `ChartJob`, `Rendered`, `render_job` only, importing no more than the drawing itself
needs, so that a render worker process starts without the database and analysis code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fp8_policy.policy.heatmap import HeatmapGeometry
from fp8_policy.service.visual.panel import Panel, Style


@dataclass(frozen=True, slots=True)
class Rendered:
    content: bytes
    media_type: str
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class RenderJob:
    """A figure ready to draw (picklable) and the headers of its response."""

    panels: tuple[Panel, ...]
    style: Style
    geometry: HeatmapGeometry
    fmt: str
    headers: dict[str, str]

    @property
    def pixels(self) -> int:
        width, height = self.geometry.pixels
        return width * height


@dataclass(frozen=True, slots=True)
class ChartJob:
    """A small chart (the speed/risk frontier, service/visual/frontier/chart.py) from plain data (picklable)."""

    data: dict[str, Any]
    fmt: str
    headers: dict[str, str]
    pixels: int


Job = RenderJob | ChartJob


def render_job(job: Job) -> Rendered:
    """Draw the figure with matplotlib in this process."""
    if isinstance(job, ChartJob):
        from fp8_policy.service.visual.frontier.chart import draw

        return Rendered(draw(job.data, job.fmt), "image/png" if job.fmt == "png" else "image/svg+xml", job.headers)
    from fp8_policy.service.visual.render import MEDIA_TYPES, render

    content = render(list(job.panels), job.style, job.geometry, job.fmt)
    return Rendered(content, MEDIA_TYPES[job.fmt], job.headers)
