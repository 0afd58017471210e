"""API shape of a live run's growing heatmap (`GET /api/v1/live/runs/{run_id}/heatmap.json`)."""

from __future__ import annotations

from pydantic import Field

from fp8_policy.service.visual.schemas import HeatmapLayoutRead


class LiveHeatmapRead(HeatmapLayoutRead):
    """A stored run's heatmap.json shape, from the statistics received so far (nothing is marked to skip while
    live: the recommendation comes with the finalized run)."""

    ranks: list[int] = Field(description="Ranks whose statistics have arrived.")
