"""The words the API's schemas and query documentation name, kept apart from the rules that compute them.

Belongs here: the pattern vocabulary (`Pattern`, policy/analysis/findings.py's), the per-layer statuses
(`LayerStatus`, policy/analysis/layout.py's), the heatmap's row kinds and default box count (policy/heatmap/), the
policy formats with their media types (policy/render/) and the live event kinds (policy/live/events.py). Each is
re-exported where the rules use it. Registering the routes (service/*/schemas.py, routes.py, query_docs.py) and
checking an alert rule need only these names; importing them from here keeps `fp8-policy serve`'s start-up from
importing the analysis, heatmap, render and live-event packages (and numpy), which only some requests need (issue 21,
tests/service/app/test_start_up_imports.py).
Must not be here: anything that computes, and any import beyond the standard library.
"""

from __future__ import annotations

from enum import Enum


class Pattern(str, Enum):
    """The exact pattern strings of the API."""

    HEALTHY = "healthy"
    U_SHAPE = "u_shape"
    HEAD_ONLY = "head_only"
    EARLY_LAYERS = "early_layers"
    LATE_LAYERS = "late_layers"
    BOUNDARY = "boundary"
    SINGLE_TENSOR = "single_tensor"
    MODULE_KIND = "module_kind"
    EXPERT_OUTLIER = "expert_outlier"
    RISING_TREND = "rising_trend"
    UNIFORM = "uniform"
    RANK_OUTLIER = "rank_outlier"
    REPLICA_MISMATCH = "replica_mismatch"
    OVERFLOW = "overflow"
    SCALE_INSTABILITY = "scale_instability"
    NON_FINITE = "non_finite"
    UNASSESSED = "unassessed"
    WARNING_BAND = "warning_band"

    @property
    def label(self) -> str:
        """The human name shown next to the API string, e.g. "U-shape"."""
        return PATTERN_LABELS[self]


PATTERN_LABELS: dict[Pattern, str] = {
    Pattern.HEALTHY: "Healthy",
    Pattern.U_SHAPE: "U-shape",
    Pattern.HEAD_ONLY: "Head only",
    Pattern.EARLY_LAYERS: "Early layers",
    Pattern.LATE_LAYERS: "Late layers",
    Pattern.BOUNDARY: "Boundary effect",
    Pattern.SINGLE_TENSOR: "Single tensor",
    Pattern.MODULE_KIND: "One module kind",
    Pattern.EXPERT_OUTLIER: "Expert outlier",
    Pattern.RISING_TREND: "Rising trend",
    Pattern.UNIFORM: "Uniform (recipe problem)",
    Pattern.RANK_OUTLIER: "Rank outlier",
    Pattern.REPLICA_MISMATCH: "Replica mismatch (fault)",
    Pattern.OVERFLOW: "Overflow",
    Pattern.SCALE_INSTABILITY: "Scale instability",
    Pattern.NON_FINITE: "NaN/inf burst",
    Pattern.UNASSESSED: "Unassessed",
    Pattern.WARNING_BAND: "Warning band",
}


class LayerStatus(str, Enum):
    """A layer's precision in the analysis' layer table."""

    FP8 = "fp8"
    UNOBSERVED = "fp8_unobserved"
    BF16 = "bf16"
    IGNORED = "ignored"


ROW_DATA = "fp8"  # a heatmap row that has points of the selected metric
ROW_BF16 = "bf16"  # the layer ran in high precision: no FP8 statistics exist, drawn hatched
DEFAULT_BOXES = 5  # the heatmap's boxed (worst) rows when the request names no number

# The policy formats policy/render/ writes: the dialects that apply a policy, then the monitoring-only formats, each
# with the media type of its rendering.
FORMATS: tuple[str, ...] = ("te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan")
MONITORS: tuple[str, ...] = ("te-monitor",)
OUTPUT_FORMATS: tuple[str, ...] = (*FORMATS, *MONITORS)
# The formats written per pipeline stage when a job's stages name their blocks locally (policy/render/pipeline.py):
# `pp_stage=K` asks for stage K's file.
STAGED_FORMATS: tuple[str, ...] = ("te-yaml", "te-monitor")
MEDIA_TYPES: dict[str, str] = {
    "te-yaml": "application/yaml",
    "megatron": "text/x-shellscript",
    "hydra": "text/plain",
    "torchao": "text/x-python",
    "te-recipe": "text/x-python",
    "torchtitan": "text/x-python",
    "te-monitor": "application/yaml",
}

# The kinds of event a live run raises (alert rules name them: service/alerts/): the statistics detectors'
# (policy/live/events.py), the training scalars' (policy/live/scalar_events.py) and a precision schedule's
# (policy/live/switch.py: a planned switch is due). tests/policy/live/test_event_kinds.py checks each against its detector.
STATS_EVENT_KINDS: tuple[str, ...] = (
    "band_crossing",
    "projected_crossing",
    "scale_inv_drop",
    "scale_inv_rise",
    "nonfinite",
    "rank_divergence",
)
SCALAR_EVENT_KINDS: tuple[str, ...] = ("scalar_spike", "loss_plateau")
SCHEDULE_EVENT_KINDS: tuple[str, ...] = ("switch_now",)
EVENT_KINDS: tuple[str, ...] = (*STATS_EVENT_KINDS, *SCALAR_EVENT_KINDS, *SCHEDULE_EVENT_KINDS)
