"""Inputs of a recommendation besides the data: thresholds, GPU, model dims, TE version, current recipe.

`RecommendOptions.from_metadata(run.metadata, overrides)` merges what the uploader sent with per-request overrides
(overrides win) and raises ValueError with a clear message on bad input (the API turns it into a 400).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from fp8_policy.policy.analysis.recipes import normalize_recipe
from fp8_policy.policy.model_bounds import checked_dimension
from fp8_policy.policy.recommend.gpu import GPU_KEYS, GpuSpec, gpu_from
from fp8_policy.policy.thresholds import Thresholds

# Accepted spellings of each model dimension (Megatron / HF config names).
_DIM_KEYS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "d_model", "n_embd"),
    "ffn_hidden_size": ("ffn_hidden_size", "intermediate_size", "d_ff"),
    "num_layers": ("num_layers", "num_hidden_layers", "n_layer"),
    "seq_len": ("seq_len", "seq_length", "max_seq_length"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_query_groups": ("num_query_groups", "num_key_value_heads"),
}
_GATED_KEYS = ("gated_mlp", "swiglu", "gated_linear_unit")
_DIM_SPELLINGS = frozenset({"model_dims", "dims", *(k for keys in _DIM_KEYS.values() for k in keys)})
_OVERRIDE_KEYS = frozenset(
    {
        "thresholds",
        *GPU_KEYS,
        "model_dims",
        "dims",
        "te_version",
        "current_recipe",
        "recipe",
        "fp8_recipe",
        "keep_existing_bf16",
        "skip_projected",
        "lr_decay_start",
        *_GATED_KEYS,
        *(k for keys in _DIM_KEYS.values() for k in keys),
    }
)


@dataclass(frozen=True, slots=True)
class ModelDims:
    """Model dimensions for FLOP shares; any may be unknown (None)."""

    hidden_size: int | None = None
    ffn_hidden_size: int | None = None
    num_layers: int | None = None
    seq_len: int | None = None
    vocab_size: int | None = None
    num_attention_heads: int | None = None
    num_query_groups: int | None = None  # GQA key/value heads
    gated_mlp: bool = False  # SwiGLU/GeGLU: fc1 produces 2 * ffn_hidden_size

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base: ModelDims | None = None) -> ModelDims:
        base = base or cls()
        changes: dict[str, Any] = {}
        for name, keys in _DIM_KEYS.items():
            for key in keys:
                if key in data and data[key] is not None:
                    changes[name] = checked_dimension(name, data[key], key=key)  # within its bound, or 400
        for key in _GATED_KEYS:
            if key in data and data[key] is not None:
                if not isinstance(data[key], bool):
                    raise ValueError(f"{key!r} must be true or false, got {data[key]!r}")
                changes["gated_mlp"] = data[key]
        return replace(base, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class RecommendOptions:
    """Everything a recommendation depends on besides the run's statistics."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    gpu_arch: str | None = None  # "hopper", "sm90", "H100", "B200", "9.0", "RTX 4090", ... (see gpu.py)
    gpu: GpuSpec | None = None  # the same, parsed, with the key it came from (None: no GPU given)
    dims: ModelDims = field(default_factory=ModelDims)
    te_version: str | None = None
    current_recipe: str | None = None  # normalised: delayed | current | block | mxfp8 | nvfp4
    keep_existing_bf16: bool = False  # also list layers that already ran in BF16 in fp8_skip_layers
    skip_projected: bool = False  # also skip layers whose rising trend is projected to turn critical
    ignored: tuple[str, ...] = ()  # notes on run-metadata model dimensions left out (unusable or past their bound)
    # the step where the learning rate starts to decay (the user's LR schedule): an NVFP4 policy gets a later
    # phase with higher-precision GEMM inputs from there (recommend/schedule.py)
    lr_decay_start: int | None = None

    @classmethod
    def from_metadata(
        cls, metadata: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> RecommendOptions:
        """Run metadata first, then overrides on top.

        Metadata is advisory: entries that do not validate are skipped (a model dimension with a note in
        `ignored`, which the recommendation's rationale repeats). Overrides are strict: an unknown key or a bad
        value (a dimension past its bound, policy/model_bounds.py) raises ValueError.
        """
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - _OVERRIDE_KEYS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))}; expected some of: "
                f"{', '.join(sorted(_OVERRIDE_KEYS))}"
            )
        options = cls()
        metadata = dict(metadata or {})
        gpu_keys = {key: metadata.pop(key) for key in GPU_KEYS if key in metadata}
        ignored: list[str] = []
        for item in (*({key: value} for key, value in metadata.items()), gpu_keys):  # GPU keys together: priority
            try:
                options = _apply(options, item)
            except ValueError as exc:
                if not _DIM_SPELLINGS.isdisjoint(item):
                    ignored.append(f"Run metadata ignored: {exc}.")
                continue
        return replace(_apply(options, overrides, strict=True), ignored=tuple(ignored))


def _apply(options: RecommendOptions, data: Mapping[str, Any], *, strict: bool = False) -> RecommendOptions:
    """`data` on top of `options`; `strict` (a request's overrides): a GPU that is not recognised is refused too
    (metadata is advisory: its unknown GPU is named in the rationale and Hopper assumed)."""
    changes: dict[str, Any] = {}
    if "thresholds" in data:
        changes["thresholds"] = Thresholds.from_overrides(data["thresholds"], base=options.thresholds)
    dims_source = {**data, **_mapping(data.get("model_dims") or data.get("dims") or {}, "model_dims")}
    changes["dims"] = ModelDims.from_mapping(dims_source, base=options.dims)
    for key in GPU_KEYS:
        if data.get(key) is not None:
            _text(key, data[key])  # a GPU must be a non-empty string or number
    gpu = gpu_from(data)
    if gpu is not None and strict and gpu.capability is None:
        raise ValueError(
            f"{gpu.key} {gpu.text!r} is not a GPU fp8-policy knows; give a product (H100, H200, B200, GB200, L40S, "
            "A100, RTX 4090, ...), an architecture (hopper, blackwell) or a compute capability (9.0, sm_100)"
        )
    if gpu is not None:
        changes["gpu"], changes["gpu_arch"] = gpu, gpu.text
    if data.get("te_version") is not None:
        changes["te_version"] = _text("te_version", data["te_version"])
    recipe_text = data.get("current_recipe") or data.get("fp8_recipe") or data.get("recipe")
    if recipe_text is not None:
        recipe = normalize_recipe(recipe_text)
        if recipe is None:
            raise ValueError(
                f"unknown FP8 recipe {recipe_text!r}; expected delayed, current (tensorwise), "
                "block (blockwise), mxfp8 or nvfp4, or a TE recipe class name"
            )
        changes["current_recipe"] = recipe
    if data.get("lr_decay_start") is not None:
        changes["lr_decay_start"] = _step("lr_decay_start", data["lr_decay_start"])
    for key in ("keep_existing_bf16", "skip_projected"):
        if key in data:
            if not isinstance(data[key], bool):
                raise ValueError(f"{key!r} must be true or false, got {data[key]!r}")
            changes[key] = data[key]
    return replace(options, **changes)


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{key!r} must be an object, got {type(value).__name__}")
    return value


def _text(key: str, value: Any) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value).strip():
        raise ValueError(f"{key!r} must be a non-empty string, got {value!r}")
    return str(value).strip()


MAX_STEP = 2**63 - 1  # a training step is stored as BIGINT (series iterations)


def _step(key: str, value: Any) -> int:
    """A training step: a positive integer within BIGINT (an integral float such as 4000.0 too, never a bool)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not value.is_integer())
        or not 1 <= value <= MAX_STEP
    ):
        raise ValueError(f"{key!r} must be a step from 1 to {MAX_STEP}, got {str(value)[:40]}")
    return int(value)
