"""A figure ready to draw and the drawn image: what crosses into the render workers (service/visual/pool.py).

Belongs here: `RenderJob`, `Rendered`, `render_job` only, importing no more than the drawing itself needs, so
that a render worker process starts without the database and analysis code.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def render_job(job: RenderJob) -> Rendered:
    """Draw the figure with matplotlib in this process."""
    from fp8_policy.service.visual.render import MEDIA_TYPES, render

    content = render(list(job.panels), job.style, job.geometry, job.fmt)
    return Rendered(content, MEDIA_TYPES[job.fmt], job.headers)
