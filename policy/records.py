"""Plain records and grammar constants shared by parsing, classification and recommendation.

Belongs here: frozen dataclasses, enums and the vocabulary of the TE / nvdlfw_inspect logs.
Must not be here: I/O, numpy-heavy logic, and any web or database import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: numpy is imported by what computes (not on serve's start-up path)
    import numpy as np

    from fp8_policy.policy.parallel.info import ParallelInfo

# Tensor names TE and nvdlfw_inspect log (TE debug API, transformer_engine/debug in https://github.com/NVIDIA/TransformerEngine): the three GEMM inputs are quantizable,
# the three GEMM outputs are high precision only.
QUANTIZED_TENSORS: tuple[str, ...] = ("activation", "gradient", "weight")
TENSORS: tuple[str, ...] = (*QUANTIZED_TENSORS, "output", "wgrad", "dgrad")

# LogFp8TensorStats recipe prefixes (TE ALL_RECIPE_NAMES) plus LogNvfp4TensorStats' internal prefix.
RECIPE_PREFIXES: tuple[str, ...] = (
    "fp8_delayed_scaling",
    "fp8_current_scaling",
    "fp8_block_scaling",
    "mxfp8",
    "nvfp4",
)

# Quantization stats (LogFp8TensorStats / LogNvfp4TensorStats), optionally with a recipe prefix.
QUANT_STATS: tuple[str, ...] = (
    "underflows%",
    "overflows%",
    "scale_inv_min",
    "scale_inv_max",
    "mse",
    "underflows_num",
    "overflows_num",
    "total_square_error",
)

# High-precision stats (TE LogTensorStats and nvdlfw's generic LogTensorStats).
TENSOR_STATS: tuple[str, ...] = (
    "min",
    "max",
    "mean",
    "std",
    "l1_norm",
    "l2_norm",
    "cur_amax",
    "dynamic_range",
)

GEMMS: tuple[str, ...] = ("fprop", "dgrad", "wgrad")

# Loss sensitivity (policy/sensitivity/): `<layer>_<output|dgrad|wgrad>_<recipe prefix>_sensitivity`, logged on TE's
# names of the three GEMM outputs (fprop -> output), in micro-nats; a recipe prefix is required.
SENSITIVITY_STAT = "sensitivity"
GEMM_OUTPUTS: dict[str, str] = {"fprop": "output", "dgrad": "dgrad", "wgrad": "wgrad"}

# Longest parts of a metric name accepted as a layer / tensor / stat (the database columns use the
# same limits). TE layer names are ~100 characters; anything longer is no layer name.
MAX_LAYER_CHARS = 500
MAX_TENSOR_CHARS = 100
MAX_STAT_CHARS = 200

# Which GEMMs each quantized tensor feeds (TE debug_quantization._tensor_to_gemm_names_map).
TENSOR_GEMMS: dict[str, tuple[str, ...]] = {
    "activation": ("fprop", "wgrad"),
    "weight": ("fprop", "dgrad"),
    "gradient": ("dgrad", "wgrad"),
}


def nonfinite_text(value: float) -> str:
    """How NaN and ±inf are spelled where JSON and SQL cannot hold them: "NaN", "Infinity", "-Infinity"
    (the JavaScript names; Python's float() reads all three back)."""
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


class LayerGroup(str, Enum):
    """Where a layer sits in the network, recognised from its logged name."""

    EMBEDDING = "embedding"
    BODY = "body"
    HEAD = "head"
    OTHER = "other"


class Precision(str, Enum):
    """How a layer's GEMMs ran according to the metadata plan lines."""

    FP8 = "fp8"  # every planned GEMM was quantized
    HIGH = "high"  # every planned GEMM ran in high precision (BF16 block, disabled layer)
    MIXED = "mixed"  # some GEMMs quantized, some not (DisableFP8GEMM)
    UNKNOWN = "unknown"  # no plan lines for this layer


@dataclass(frozen=True, slots=True)
class MetricName:
    """One logged metric name split into its parts.

    `"model.layers.1.self_attention.linear_qkv_activation_mxfp8_underflows%_columnwise"` becomes
    layer=`model.layers.1.self_attention.linear_qkv`, tensor=`activation`, recipe=`mxfp8`,
    stat=`underflows%`, columnwise=True.
    """

    layer: str
    tensor: str
    stat: str
    recipe: str | None = None
    columnwise: bool = False

    @property
    def stat_key(self) -> str:
        """The stat as logged after the tensor name (recipe prefix and `_columnwise` included)."""
        prefix = f"{self.recipe}_" if self.recipe else ""
        suffix = "_columnwise" if self.columnwise else ""
        return f"{prefix}{self.stat}{suffix}"


@dataclass(frozen=True, slots=True)
class LayerStructure:
    """A layer's place in the model, derived from its name alone."""

    group: LayerGroup
    index: int | None  # block number exactly as logged (1-based when TE's layer_number was used)
    sublayer: str | None  # qkv, proj, fc1, fc2, lm_head, ...


@dataclass(slots=True)
class Series:
    """One metric of one rank: iterations ascending and unique, values as float64 (NaN/inf kept)."""

    rank: int
    metric: MetricName
    iterations: np.ndarray  # int64
    values: np.ndarray  # float64


@dataclass(slots=True)
class LayerPlan:
    """What the metadata log says about one layer on one rank."""

    layer: str
    gemm_plans: dict[tuple[str, str], str] = field(default_factory=dict)  # (tensor, gemm) -> plan text
    disabled: bool = False  # "Quantization Disabled" / "FP8 Disabled" line seen
    features: set[str] = field(default_factory=set)  # e.g. {"LogFp8TensorStats"}

    @property
    def precision(self) -> Precision:
        if self.disabled:
            return Precision.HIGH
        plans = {plan for (tensor, _), plan in self.gemm_plans.items() if tensor in QUANTIZED_TENSORS}
        if not plans:
            return Precision.UNKNOWN
        quantized = {p for p in plans if p in ("Quantize", "FP8 Quantize")}
        if quantized == plans:
            return Precision.FP8
        if not quantized:
            return Precision.HIGH
        return Precision.MIXED


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """Everything known about one layer of a run before any classification."""

    name: str  # exactly as logged
    structure: LayerStructure
    precision: Precision  # from plan lines; UNKNOWN when the metadata log has none for it
    has_fp8_stats: bool  # at least one quantization stat (underflows%, scale_inv_*, mse, ...) was logged


@dataclass(slots=True)
class RunData:
    """The input of analysis and recommendation: a run's layers and series, nothing from the DB or HTTP."""

    layers: dict[str, LayerInfo]
    series: list[Series]
    metadata: dict[str, object] = field(default_factory=dict)  # what the uploader sent (dims, GPU arch, recipe, ...)
    # stats file -> iteration offset of a session that restarted its counter and was placed after the earlier ones
    # (policy/parse/stats_log.py, "Sessions"); the analysis notes say so
    session_offsets: dict[str, int] = field(default_factory=dict)
    # the job's parallel layout (policy/parallel): None when the run has none stored (a single-rank view of it)
    parallel: ParallelInfo | None = None
    # the step its learning rate starts to decay, read from the lr of its scalars.jsonl (uploaded, or streamed live)
    # (policy/parse/lr_schedule.py); None without an lr curve or without a decay seen in it
    lr_decay_from_scalars: int | None = None


@dataclass(frozen=True, slots=True)
class GemmOverride:
    """Keep some GEMMs of one layer in high precision."""

    layer: str
    gemms: tuple[str, ...]  # subset of GEMMS, in GEMMS order
    reason: str


@dataclass(frozen=True, slots=True)
class RecipeChoice:
    """The FP8 recipe to train with."""

    name: str  # delayed | current | block | mxfp8 | nvfp4
    class_path: str  # transformer_engine.common.recipe.<Class>
    kwargs: dict[str, object]
    reason: str


RECIPE_CLASSES: dict[str, str] = {
    "delayed": "transformer_engine.common.recipe.DelayedScaling",
    "current": "transformer_engine.common.recipe.Float8CurrentScaling",
    "block": "transformer_engine.common.recipe.Float8BlockScaling",
    "mxfp8": "transformer_engine.common.recipe.MXFP8BlockScaling",
    "nvfp4": "transformer_engine.common.recipe.NVFP4BlockScaling",
}

# The per-layer precision ladder, cheapest first (TE 2.20 recipes, transformer_engine/common/recipe/__init__.py):
# NVFP4 (E2M1, 16-element blocks), MXFP8 (32-element E8M0 blocks), FP8 block (1x128 / 128x128), FP8 per-tensor
# current and delayed scaling, then BF16 (the layer leaves low precision).
PRECISIONS: tuple[str, ...] = ("nvfp4", "mxfp8", "block", "current", "delayed", "bf16")


@dataclass(frozen=True, slots=True)
class LayerPrecision:
    """One rung of the precision ladder: the cheapest precision a layer tolerates, with the evidence for it."""

    layer: str  # exact layer name as logged
    precision: str  # one of PRECISIONS
    evidence: tuple[str, ...]  # human sentences naming the stats / what-ifs that decided it
    confidence: float  # 0..1: how much of the needed evidence the run logged


# Megatron's --fp8-recipe names for our recipe names.
MEGATRON_RECIPES: dict[str, str] = {
    "delayed": "delayed",
    "current": "tensorwise",
    "block": "blockwise",
    "mxfp8": "mxfp8",
}


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The renderable core of a recommendation: what to change, for the layers of one run.

    Renderers (TE YAML, Megatron, Hydra, torchao) take only this record.
    """

    skip_layers: tuple[str, ...]  # exact layer names as logged, to run fully in high precision
    gemm_overrides: tuple[GemmOverride, ...]
    recipe: RecipeChoice
    layers: tuple[LayerInfo, ...]  # every layer of the run, in logged order, for disjoint sections and numbering
    te_version: str | None = None  # e.g. "2.13"; None when unknown
    # Per-layer precision ladder (empty when not computed); renderers that can express a per-layer mix use it.
    layer_precisions: tuple[LayerPrecision, ...] = ()
    fp8_param: bool = False  # the run keeps FP8/FP4 parameters (no high-precision weight to take stats of)
    # the job's parallel layout (layer names above are global: policy/parallel/); None: one model on every rank
    parallel: ParallelInfo | None = None
    # the run logged quantization stats of weights; False when it logged activations/gradients but no weight at all
    # (FP8 primary weights without `fp8_param` in the metadata): the rendered monitoring asks for none either
    weights_logged: bool = True

    @property
    def weights_without_stats(self) -> bool:
        """No high-precision weight statistics can be asked for: FP8/FP4 parameters, or none were logged."""
        return self.fp8_param or not self.weights_logged
