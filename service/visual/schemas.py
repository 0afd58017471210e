"""Response models of `GET /api/v1/runs/{run_id}/heatmap.json` (the comparison's are service/compare/schemas.py).

They mirror `service.visual.actions.heatmap_layout()` key by key.
FastAPI filters every response through its model, so a key added to those dicts reaches clients only once it is
declared here too: extend these models together with the code that builds the dict.
tests/service/app/test_response_models.py fails, naming the key, when a real response loses one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fp8_policy.policy.records import GEMMS, LayerGroup, Precision
from fp8_policy.policy.thresholds import Severity
from fp8_policy.policy.vocabulary import ROW_BF16, ROW_DATA
from fp8_policy.service.schema_base import ApiModel

Gemm = Literal[GEMMS]  # type: ignore[valid-type]


# ----------------------------------------------------------------------------------------------- heatmap.json
class HeatmapRowRead(ApiModel):
    label: str = Field(description="The row's label as drawn.")
    layer: str = Field(description="Exact layer name as logged.")
    group: LayerGroup
    kind: Literal[ROW_DATA, ROW_BF16] = Field(  # type: ignore[valid-type]
        description=f"'{ROW_DATA}': the row has points; '{ROW_BF16}': the layer ran in high precision (hatched)."
    )
    precision: Precision
    level: float | None = Field(description="p95 of the row's finite points; null without data.")
    severity: Severity | None = Field(
        None,
        description="The analysis's verdict of this row's series (the one findings, the layer table and gate use); "
        "null when the analysis has none for the drawn stat or rank.",
    )
    boxed: bool = Field(description="Boxed as one of the worst rows at or above the critical band.")
    skip: bool = Field(description="In the recommended skip set.")
    gemm_override: list[Gemm] | None = Field(description="GEMMs the recommendation keeps in high precision.")
    recommended: str | None = Field(
        None,
        description="The precision the recommendation runs this layer at (its headline.precision_by_layer: the "
        "ladder's rung, bf16 for the BF16 set); null without a recommendation or for a non-GEMM row.",
    )


class HeatmapIterations(ApiModel):
    first: int
    last: int
    count: int


class HeatmapSummaryRead(ApiModel):
    """The numbers of the heatmap's summary box."""

    components: int = Field(description="Rows with data.")
    bf16_rows: int
    max: float | None
    mean: float | None
    critical: int | None = Field(
        description="Rows whose verdict (`boxed_by`) is at or above the critical band; null for stats that are "
        "not percentages and have no verdict."
    )
    critical_threshold: float | None
    boxed: list[int] = Field(description="Indices into `rows`, worst first.")
    boxed_by: Literal["analysis verdict", "row level"] = Field(
        "row level",
        description="'analysis verdict': rows' `severity` decided (the run's analysis); 'row level': the p95 of all "
        "points (a live run, a single rank, or a stat the analysis does not band).",
    )


class HeatmapImageRead(ApiModel):
    """Pixel geometry of the image the same parameters would render (heatmap.png / .svg)."""

    width_px: int
    height_px: int
    extent_px: list[float] = Field(description="x0, y0, x1, y1 of the cells in image pixels, origin top-left.")


class HeatmapCellsRead(ApiModel):
    """The cell values (`?cells=N`): rows as in `rows`, at most N columns each averaging consecutive iterations."""

    first: list[int] = Field(description="First iteration of each column.")
    last: list[int] = Field(description="Last iteration of each column.")
    values: list[list[float | None]] = Field(description="Per row, per column; null: not logged there.")


class HeatmapLayoutRead(ApiModel):
    """`GET /api/v1/runs/{run_id}/heatmap.json`."""

    run_id: int
    tensor: str
    stat: str
    rank: int | None = Field(
        description="null: every rank, the maximum over ranks per iteration (a parallel job's tensor-parallel shards "
        "first combined with their statistic's rule, as the analysis reads them)."
    )
    sublayer: str | None
    vmax: float = Field(description="Top of the colour scale.")
    rows: list[HeatmapRowRead] = Field(description="Top to bottom, in model order.")
    iterations: HeatmapIterations
    summary: HeatmapSummaryRead
    skip_layers: list[str] | None = Field(description="The recommended skip set; null with show_skip=false.")
    recommended_recipe: str | None = Field(
        None, description="The recommended recipe; rows whose `recommended` precision differs are marked."
    )
    image: HeatmapImageRead
    cells: HeatmapCellsRead | None = Field(None, description="The values, with `?cells=N`; null otherwise.")
    colormap: list[str] = Field(description="The image's colour map from 0 to `vmax`, as evenly spaced #rrggbb.")
