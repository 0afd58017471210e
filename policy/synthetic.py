"""Synthetic Transformer Engine / nvdlfw_inspect debug-log trees with planted, machine-readable ground truth.

Belongs here: the module and layer naming of the model families we emulate, value profiles (`healthy`, `level`,
`ramp`, `step_at`, ...), `Scenario` (which profile each layer/tensor/stat gets), the named `SCENARIOS` with their
`PlantedTruth`, and `write_run`, which writes one metadata log and one statistics log per rank in the exact
formats of fp8-log-format.md §1.1-1.3 and §3. Used by the benchmark, the demo data, tests and the evaluation suite.
Must not be here: parsing or analysing logs, and any web or database import. The only side effect is
`write_run` writing the files it is asked to write; everything else is deterministic in `SyntheticRun.seed`.

Line order follows the real bionemo logs: per iteration, the forward tensors (activation, weight) of every layer
in module order, then the gradients of every layer in reverse order (the backward pass).
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from policy.records import QUANTIZED_TENSORS, RECIPE_PREFIXES, TENSOR_GEMMS

PATTERNS: tuple[str, ...] = (
    "healthy", "u_shape", "head_only", "early_layers", "late_layers", "boundary", "single_tensor",
    "rising_trend", "uniform", "rank_outlier", "overflow", "scale_instability",
)
DEFAULT_STATS: tuple[str, ...] = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
PLAN_WORDS: tuple[str, ...] = ("FP8 Quantize", "Quantize")  # TE <= 2.12, TE >= 2.13
# The six plan lines TE writes per GEMM layer, in TE order (debug_quantization._tensor_to_gemm_names_map).
PLAN_ORDER: tuple[tuple[str, str], ...] = tuple(
    (tensor, gemm) for tensor in ("activation", "weight", "gradient") for gemm in TENSOR_GEMMS[tensor]
)
DEFAULT_START = datetime(2026, 1, 15, 23, 6, 30, 348000)
LINE_US = 70  # microseconds between two stats lines of one flush (the bionemo logs show ~15 lines per ms)
_PERCENT_STATS = ("underflows%", "overflows%")
_NONNEGATIVE_STATS = ("scale_inv_min", "scale_inv_max", "mse", "underflows_num", "overflows_num", "total_square_error")

# ---------------------------------------------------------------------------------------------------- families
_ATTN_TE = ("core_attention", "core_attention.flash_attention", "core_attention.fused_attention",
            "core_attention.unfused_attention", "core_attention.unfused_attention.scale_mask_softmax",
            "core_attention.unfused_attention.attention_dropout")
_TE_BLOCK = ("", "self_attention", "self_attention.layernorm_qkv",
             *(f"self_attention.{m}" for m in _ATTN_TE), "self_attention.proj", "layernorm_mlp")
_TE_GEMMS = (("qkv", "self_attention.layernorm_qkv"), ("proj", "self_attention.proj"),
             ("fc1", "layernorm_mlp.fc1"), ("fc2", "layernorm_mlp.fc2"))


@dataclass(frozen=True, slots=True)
class Family:
    """How `infer_and_assign_layer_names` names one model family (fp8-log-format.md §1.4)."""

    blocks: str  # ModuleList path; block i is f"{blocks}.{i}"
    gemms: tuple[tuple[str, str], ...]  # (role, suffix inside a block) in forward order
    heads: tuple[str, ...]  # TE GEMM layers after the blocks, in forward order
    before: tuple[str, ...]  # modules assigned before the first block
    block_modules: tuple[str, ...]  # modules inside a block in named_children order ("" = the block itself)
    after: tuple[str, ...]  # modules assigned after the last block


FAMILIES: dict[str, Family] = {
    # Names as in the real bionemo ESM2 log: the heads are model.lm_head.dense / .decoder (not under model.esm).
    "esm2": Family("model.esm.encoder.layers", _TE_GEMMS, ("model.lm_head.dense", "model.lm_head.decoder"),
                   ("model", "model.esm", "model.esm.embeddings", "model.esm.embeddings.word_embeddings",
                    "model.esm.encoder"), _TE_BLOCK,
                   ("model.esm.encoder.emb_layer_norm_after", "model.esm.encoder.rotary_embeddings",
                    "model.lm_head", "model.lm_head.dense", "model.lm_head.decoder")),
    "llama": Family("model.model.layers", _TE_GEMMS, ("model.lm_head",),
                    ("model", "model.model", "model.model.embed_tokens"), _TE_BLOCK,
                    ("model.model.norm", "model.model.rotary_emb", "model.lm_head")),
    "megatron": Family(
        "model.module.decoder.layers",
        (("qkv", "self_attention.linear_qkv"), ("proj", "self_attention.linear_proj"),
         ("fc1", "mlp.linear_fc1"), ("fc2", "mlp.linear_fc2")),
        ("model.module.output_layer",),
        ("model", "model.module", "model.module.embedding", "model.module.embedding.word_embeddings",
         "model.module.embedding.embedding_dropout", "model.module.rotary_pos_emb", "model.module.decoder"),
        ("", "input_layernorm", "self_attention", *(f"self_attention.{m}" for m in _ATTN_TE),
         "self_attention.linear_proj", "self_attention.linear_qkv", "pre_cross_attn_layernorm",
         "cross_attention", "pre_mlp_layernorm", "mlp", "mlp.linear_fc1", "mlp.linear_fc2"),
        ("model.module.decoder.final_layernorm", "model.module.output_layer")),
    "gpt": Family(
        "model.transformer.h",
        (("qkv", "attn.c_attn"), ("proj", "attn.c_proj"), ("fc1", "mlp.c_fc"), ("fc2", "mlp.c_proj")),
        ("model.lm_head",),
        ("model", "model.transformer", "model.transformer.wte", "model.transformer.wpe", "model.transformer.drop"),
        ("", "ln_1", "attn", "attn.c_attn", "attn.c_proj", "attn.attn_dropout", "attn.resid_dropout", "ln_2",
         "mlp", "mlp.c_fc", "mlp.c_proj", "mlp.act", "mlp.dropout"),
        ("model.transformer.ln_f", "model.lm_head")),
}


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One TE GEMM layer of a synthetic run."""

    name: str  # exactly as in plan and stats lines
    role: str  # qkv | proj | fc1 | fc2 | head
    ordinal: int | None  # 0-based block position; None for heads
    index: int | None  # block number as logged (ordinal + first_index); None for heads


# ---------------------------------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class ProfileContext:
    """What a profile may look at to decide the values of one series (one rank, layer, tensor, stat)."""

    layer: str
    role: str
    position: int | str  # block number as logged, or "head"
    ordinal: int | None  # 0-based block position; None for heads
    num_blocks: int
    tensor: str
    stat: str  # as logged after the tensor, e.g. "underflows%" or "mxfp8_underflows%"
    rank: int
    iterations: np.ndarray  # int64, the logged iterations
    seed: int

    @property
    def recipe(self) -> str | None:
        return split_stat(self.stat)[0]

    @property
    def base_stat(self) -> str:
        """The stat without recipe prefix and `_columnwise` suffix."""
        return split_stat(self.stat)[1]

    def rng(self, salt: str = "") -> np.random.Generator:
        """A generator that depends only on the run seed, layer, tensor, rank and `salt` (not on call order)."""
        key = zlib.crc32(f"{self.layer}|{self.tensor}|{self.rank}|{salt}".encode())
        return np.random.default_rng([self.seed, key])


def split_stat(stat: str) -> tuple[str | None, str]:
    """"mxfp8_underflows%_columnwise" -> ("mxfp8", "underflows%")."""
    stat = stat.removesuffix("_columnwise")
    recipe = next((r for r in RECIPE_PREFIXES if stat.startswith(r + "_")), None)
    return recipe, stat.removeprefix(f"{recipe}_") if recipe else stat


Profile = Callable[[ProfileContext], np.ndarray]
Where = Callable[[ProfileContext], bool]
Value = float | Profile

_AMAX = {"activation": (0.15, 0.6, 448.0), "weight": (0.08, 0.2, 448.0), "gradient": (1e-4, 1e-3, 57344.0)}
_RECIPE_UNDERFLOW = {"mxfp8": 0.3, "fp8_block_scaling": 0.5}  # finer scaling loses fewer values
_WARMUP_UNDERFLOW = {"activation": 4.5, "weight": 3.4, "gradient": 21.5}  # iteration 0 of the bionemo logs


def healthy(underflow: tuple[float, float] = (0.05, 0.3), *, warmup: bool = False) -> Profile:
    """Values of a layer that is fine in FP8.

    underflows%: a per-series level drawn in `underflow`, with multiplicative noise, capped at 1.5x its upper end
    (lower for mxfp8 / block what-if stats); scale_inv_*: amax / FP8 max (E4M3 for activation/weight, E5M2 for
    gradient), identical min and max for per-tensor recipes; overflows%, mse and anything else: 0.0.
    `warmup=True` reproduces iteration 0 of a DelayedScaling run (scale_inv 1.0, underflows of several %).
    """
    lo, hi = underflow

    def profile(ctx: ProfileContext) -> np.ndarray:
        if ctx.base_stat == "underflows%":
            values = _healthy_underflow(ctx, lo, hi)
        elif ctx.base_stat in ("scale_inv_min", "scale_inv_max"):
            values = _healthy_scale_inv(ctx)
        else:
            values = np.zeros(len(ctx.iterations))
        return _warmup(ctx, values) if warmup else values

    return profile


def _healthy_underflow(ctx: ProfileContext, lo: float, hi: float) -> np.ndarray:
    rng = ctx.rng(f"{ctx.stat}|healthy")
    factor = _RECIPE_UNDERFLOW.get(ctx.recipe or "", 1.0)
    center = rng.uniform(lo, hi) * factor
    values = center * rng.lognormal(0.0, 0.2, len(ctx.iterations))
    return np.minimum(values, 1.5 * hi * factor)


def _healthy_scale_inv(ctx: ProfileContext) -> np.ndarray:
    if ctx.tensor not in _AMAX:
        return np.zeros(len(ctx.iterations))
    rng = ctx.rng("scale_inv|healthy")  # same draws for min and max
    amax_lo, amax_hi, fp8_max = _AMAX[ctx.tensor]
    scale = rng.uniform(amax_lo, amax_hi) / fp8_max * rng.lognormal(0.0, 0.05, len(ctx.iterations))
    if ctx.recipe in ("mxfp8", "fp8_block_scaling"):  # per-block scales spread around the tensor scale
        scale = scale * (2.0**-6 if ctx.base_stat == "scale_inv_min" else 2.0**2)
        if ctx.recipe == "mxfp8":  # E8M0 scales are powers of two
            scale = np.exp2(np.round(np.log2(scale)))
    return scale


def _warmup(ctx: ProfileContext, values: np.ndarray) -> np.ndarray:
    first = ctx.iterations == 0
    if ctx.base_stat in ("scale_inv_min", "scale_inv_max"):
        return np.where(first, 1.0, values)
    if ctx.base_stat == "underflows%":
        return np.where(first, _WARMUP_UNDERFLOW.get(ctx.tensor, 0.0), values)
    return values


def level(pct: float | tuple[float, float], *, noise: float = 0.1) -> Profile:
    """A constant level with multiplicative noise; a (lo, hi) pair draws the level per series."""

    def profile(ctx: ProfileContext) -> np.ndarray:
        rng = ctx.rng(f"{ctx.stat}|level")
        center = rng.uniform(*pct) if isinstance(pct, tuple) else float(pct)
        return center * rng.lognormal(0.0, noise, len(ctx.iterations))

    return profile


def ramp(start_pct: float, end_pct: float, *, noise: float = 0.05) -> Profile:
    """Linear growth from `start_pct` at the first logged iteration to `end_pct` at the last."""

    def profile(ctx: ProfileContext) -> np.ndarray:
        its = ctx.iterations.astype(float)
        span = its[-1] - its[0] if len(its) > 1 else 1.0
        frac = (its - its[0]) / span if span else np.ones_like(its)
        noisy = ctx.rng(f"{ctx.stat}|ramp").lognormal(0.0, noise, len(its))
        return (start_pct + (end_pct - start_pct) * frac) * noisy

    return profile


def _values(value: Value, ctx: ProfileContext) -> np.ndarray:
    if callable(value):
        return np.broadcast_to(np.asarray(value(ctx), dtype=float), ctx.iterations.shape)
    return np.full(len(ctx.iterations), float(value))


def step_at(iteration: int, before: Value, after: Value) -> Profile:
    """`before` for iterations < `iteration`, `after` from it on; numbers are constants, callables profiles."""

    def profile(ctx: ProfileContext) -> np.ndarray:
        return np.where(ctx.iterations < iteration, _values(before, ctx), _values(after, ctx))

    return profile


def scale_jumps(factor: float = 16.0, *, every: int | None = None, base: Profile | None = None) -> Profile:
    """`base` (healthy by default) multiplied by `factor` on every other window of `every` logged points."""
    base = base or healthy()

    def profile(ctx: ProfileContext) -> np.ndarray:
        n = len(ctx.iterations)
        window = every or max(1, n // 8)
        jumped = (np.arange(n) // window) % 2 == 1
        return np.where(jumped, factor, 1.0) * _values(base, ctx)

    return profile


def with_values(profile: Profile, at: dict[int, float]) -> Profile:
    """`profile` with the values at some iterations replaced (e.g. nan / inf to exercise parsers)."""

    def patched(ctx: ProfileContext) -> np.ndarray:
        values = np.array(_values(profile, ctx))
        for iteration, value in at.items():
            values[ctx.iterations == iteration] = value
        return values

    return patched


# ---------------------------------------------------------------------------------------------------- predicates
def everywhere() -> Where:
    return lambda ctx: True


def first_blocks(n: int) -> Where:
    return lambda ctx: ctx.ordinal is not None and ctx.ordinal < n


def last_blocks(n: int) -> Where:
    return lambda ctx: ctx.ordinal is not None and ctx.ordinal >= ctx.num_blocks - n


def blocks(*ordinals: int) -> Where:
    """Blocks by 0-based position (independent of `first_index`)."""
    return lambda ctx: ctx.ordinal in ordinals


def heads() -> Where:
    return lambda ctx: ctx.ordinal is None


def roles(*names: str) -> Where:
    return lambda ctx: ctx.role in names


def named(*layers: str) -> Where:
    return lambda ctx: ctx.layer in layers


def all_of(*wheres: Where) -> Where:
    return lambda ctx: all(w(ctx) for w in wheres)


def any_of(*wheres: Where) -> Where:
    return lambda ctx: any(w(ctx) for w in wheres)


@dataclass(frozen=True)
class Rule:
    """Give `profile` to the series of layers matching `where`; None tensor/stat/ranks match any."""

    where: Where
    profile: Profile
    tensor: str | None = None
    stat: str | None = None
    ranks: frozenset[int] | None = None

    def matches(self, ctx: ProfileContext) -> bool:
        return ((self.tensor is None or self.tensor == ctx.tensor) and (self.stat is None or self.stat == ctx.stat)
                and (self.ranks is None or ctx.rank in self.ranks) and self.where(ctx))


@dataclass(frozen=True)
class Scenario:
    """A profile made of rules: the first matching rule decides, otherwise `default` (healthy)."""

    rules: tuple[Rule, ...] = ()
    default: Profile = field(default_factory=healthy)

    def plant(self, where: Where, tensor: str | None, stat: str | None, profile: Profile, *,
              ranks: frozenset[int] | None = None) -> Scenario:
        return replace(self, rules=(*self.rules, Rule(where, profile, tensor, stat, ranks)))

    def __call__(self, ctx: ProfileContext) -> np.ndarray:
        rule = next((r for r in self.rules if r.matches(ctx)), None)
        return (rule.profile if rule else self.default)(ctx)


# ---------------------------------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class SyntheticRun:
    """Everything that decides the bytes of a synthetic log tree."""

    family: str = "esm2"
    num_layers: int = 6
    first_index: int = 1  # 1 for TE layer_number-style names, 0 for plain ModuleList indices
    ranks: int = 1
    iterations: int = 240  # last iteration, inclusive
    freq: int = 10
    tensors: tuple[str, ...] = ("activation", "gradient", "weight")
    stats: tuple[str, ...] = DEFAULT_STATS
    extra_stats: tuple[str, ...] | str = ()  # e.g. ("mxfp8_underflows%",) or "overflows%"
    bf16_layers: frozenset[str] = frozenset()  # High Precision plan lines and no stats lines
    te_plan_word: str = "Quantize"  # "FP8 Quantize" for TE <= 2.12
    seed: int = 0
    profile: Profile = field(default_factory=healthy)
    line_order: str = "te"  # "te": forward tensors in module order, then gradients reversed; "layer": layer-major
    disabled_via_feature: bool = False  # also log "LAYER=<L>: Quantization Disabled" / "FP8 Disabled"

    def __post_init__(self) -> None:
        if isinstance(self.extra_stats, str):
            object.__setattr__(self, "extra_stats", (self.extra_stats,))
        object.__setattr__(self, "bf16_layers", frozenset(self.bf16_layers))
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "stats", tuple(self.stats))
        self._validate()

    def _validate(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}; expected one of {sorted(FAMILIES)}")
        if self.num_layers < 1 or self.ranks < 1 or self.freq < 1 or self.iterations < 0:
            raise ValueError("num_layers, ranks and freq must be >= 1 and iterations >= 0")
        if not set(self.tensors) <= set(QUANTIZED_TENSORS):
            raise ValueError(f"tensors must be among {QUANTIZED_TENSORS}, got {self.tensors}")
        if self.te_plan_word not in PLAN_WORDS or self.line_order not in ("te", "layer"):
            raise ValueError(f"te_plan_word must be one of {PLAN_WORDS}; line_order 'te' or 'layer'")
        unknown = self.bf16_layers - {spec.name for spec in self.layers()}
        if unknown:
            raise ValueError(f"bf16_layers not in this run: {sorted(unknown)}")

    @property
    def all_stats(self) -> tuple[str, ...]:
        return (*self.stats, *self.extra_stats)

    def layers(self) -> tuple[LayerSpec, ...]:
        """Every TE GEMM layer in forward order."""
        fam = FAMILIES[self.family]
        specs = [LayerSpec(f"{fam.blocks}.{o + self.first_index}.{suffix}", role, o, o + self.first_index)
                 for o in range(self.num_layers) for role, suffix in fam.gemms]
        return (*specs, *(LayerSpec(h, "head", None, None) for h in fam.heads))

    def stats_layers(self) -> tuple[LayerSpec, ...]:
        """The layers that get stats lines (all but the high-precision ones)."""
        return tuple(s for s in self.layers() if s.name not in self.bf16_layers)

    def block(self, ordinal: int) -> tuple[str, ...]:
        """The GEMM layer names of the block at 0-based position `ordinal`."""
        return tuple(s.name for s in self.layers() if s.ordinal == ordinal)

    def iteration_array(self) -> np.ndarray:
        return np.arange(0, self.iterations + 1, self.freq, dtype=np.int64)

    def assigned_modules(self) -> tuple[str, ...]:
        """The `Assigned layer name:` list, as infer_and_assign_layer_names visits the modules."""
        fam = FAMILIES[self.family]
        inner = [f"{fam.blocks}.{o + self.first_index}" + (f".{m}" if m else "")
                 for o in range(self.num_layers) for m in fam.block_modules]
        return (*fam.before, *inner, *fam.after)

    def metric_cycle(self) -> tuple[tuple[str, str, str], ...]:
        """(layer, tensor, stat) of every stats line of one iteration, in line order."""
        layers = self.stats_layers()
        if self.line_order == "layer":
            return tuple((s.name, t, st) for s in layers for t in self.tensors for st in self.all_stats)
        forward = [t for t in self.tensors if t != "gradient"]
        backward = [t for t in self.tensors if t == "gradient"]
        fwd = [(s.name, t, st) for s in layers for t in forward for st in self.all_stats]
        bwd = [(s.name, t, st) for s in reversed(layers) for t in backward for st in self.all_stats]
        return (*fwd, *bwd)

    def context(self, spec: LayerSpec, tensor: str, stat: str, rank: int,
                iterations: np.ndarray | None = None) -> ProfileContext:
        """The ProfileContext of one series; pass `iterations` to share one (read-only) array between series."""
        if iterations is None:
            iterations = self.iteration_array()
            iterations.setflags(write=False)
        position: int | str = spec.index if spec.index is not None else "head"
        return ProfileContext(spec.name, spec.role, position, spec.ordinal, self.num_layers, tensor, stat, rank,
                              iterations, self.seed)


def matching_layers(run: SyntheticRun, where: Where) -> tuple[str, ...]:
    """Names of the stats-bearing layers of `run` that `where` selects (tensor/stat-independent predicates)."""
    return tuple(s.name for s in run.stats_layers() if where(run.context(s, "gradient", "underflows%", 0)))


def _clip(stat: str, values: np.ndarray) -> np.ndarray:
    base = split_stat(stat)[1]
    if base in _PERCENT_STATS:
        values = np.clip(values, 0.0, 100.0)
    elif base in _NONNEGATIVE_STATS:
        values = np.maximum(values, 0.0)  # NaN stays NaN
    return values + 0.0  # -0.0 -> 0.0


def stats_matrix(run: SyntheticRun, rank: int) -> tuple[tuple[tuple[str, str, str], ...], np.ndarray]:
    """The metric cycle and its values (series x iterations, clipped to valid ranges) for one rank."""
    cycle = run.metric_cycle()
    specs = {s.name: s for s in run.layers()}
    iterations = run.iteration_array()
    iterations.setflags(write=False)
    out = np.empty((len(cycle), len(iterations)))
    for k, (layer, tensor, stat) in enumerate(cycle):
        ctx = run.context(specs[layer], tensor, stat, rank, iterations)
        out[k] = _clip(stat, _values(run.profile, ctx))
    return cycle, out


# ---------------------------------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class RankFiles:
    rank: int
    metadata_path: Path
    stats_path: Path
    metadata_lines: int
    stats_lines: int
    stats_bytes: int


@dataclass(frozen=True)
class WrittenRun:
    """What write_run put on disk, with the counts a parser should find."""

    root: Path
    files: tuple[RankFiles, ...]
    layers: tuple[str, ...]  # every GEMM layer, forward order
    stats_layers: tuple[str, ...]  # the layers with stats lines
    metric_names: tuple[str, ...]  # the logged names of one iteration, in line order
    num_iterations: int

    @property
    def stats_lines_per_rank(self) -> dict[int, int]:
        return {f.rank: f.stats_lines for f in self.files}

    @property
    def expected_series(self) -> int:
        """Distinct (rank, metric name) series over all ranks."""
        return len(self.metric_names) * len(self.files)

    @property
    def expected_points(self) -> int:
        return self.expected_series * self.num_iterations

    @property
    def total_bytes(self) -> int:
        return sum(f.stats_bytes for f in self.files)


class _Clock:
    """asctime strings (`YYYY-MM-DD HH:MM:SS,mmm`) for millisecond offsets from a start time."""

    def __init__(self, start: datetime) -> None:
        self._base = start.replace(microsecond=0)
        self._ms0 = start.microsecond // 1000
        self._seconds: dict[int, str] = {}

    def stamp(self, ms: int) -> str:
        sec, milli = divmod(self._ms0 + ms, 1000)
        text = self._seconds.get(sec)
        if text is None:
            text = self._seconds[sec] = (self._base + timedelta(seconds=sec)).strftime("%Y-%m-%d %H:%M:%S")
        return f"{text},{milli:03d}"


def stats_line(asctime: str, name: str, iteration: int, value: float) -> str:
    """One statistics line exactly as nvdlfw_inspect's FileLogger writes it (reference for the fast path)."""
    return f"{asctime} - INFO - " + "{} \t\t\t\t iteration={:06d} \t\t\t\t value={:.4f}".format(name, iteration, value)


def _plan_messages(run: SyntheticRun, t0: int) -> tuple[list[tuple[int, str]], int]:
    disabled = "FP8 Disabled" if run.te_plan_word == "FP8 Quantize" else "Quantization Disabled"
    forward = [t for t in run.tensors if t != "gradient"] if run.all_stats else []
    out: list[tuple[int, str]] = []
    t = t0
    for spec in run.layers():
        high = spec.name in run.bf16_layers
        if high and run.disabled_via_feature:
            out.append((t, f"LAYER={spec.name}: {disabled}"))
        word = "High Precision" if high else run.te_plan_word
        out += [(t, f"LAYER={spec.name}: Tensor: {tensor}, gemm {gemm} - {word}") for tensor, gemm in PLAN_ORDER]
        if not high:
            out += [(t + 2, _feature(spec.name, tensor)) for tensor in forward]
        t += 40
    t += 300
    if "gradient" in run.tensors and run.all_stats:
        for i, spec in enumerate(reversed(run.stats_layers())):
            out.append((t + 3 * i, _feature(spec.name, "gradient")))
        t += 3 * len(run.stats_layers())
    return out, t


def _feature(layer: str, tensor: str) -> str:
    return f"LAYER={layer}: Feature=LogFp8TensorStats, API=inspect_tensor: {tensor}"


def _metadata_messages(run: SyntheticRun, rank: int, with_rank_dirs: bool) -> tuple[list[tuple[int, str]], int]:
    log_dir = f"./logs/fp8_stats_logs_{run.family}_synthetic" + (f"/rank_{rank}" if with_rank_dirs else "")
    sections = (["fp8_disabled_layers", "fp8_stats_remaining_layers"]
                if run.bf16_layers and run.disabled_via_feature else ["fp8_stats_collection"])
    head = [(0, f"Default logging to file enabled at {log_dir}"), (694, "Reading config from ./fp8_stats.yaml."),
            (694, f"Loaded configs for {sections}.")]
    assigned = [(853 + (i > 0), f"Assigned layer name: {m}") for i, m in enumerate(run.assigned_modules())]
    plans, end = _plan_messages(run, 3500)
    return head + assigned + plans, end


def _write_metadata(path: Path, messages: list[tuple[int, str]], clock: _Clock, offset: int) -> int:
    text = "".join(f"{clock.stamp(offset + ms)} - INFO - {msg}\n" for ms, msg in messages)
    path.write_text(text, encoding="utf-8")
    return len(messages)


def _write_stats(path: Path, names: list[str], iterations: np.ndarray, values: np.ndarray, clock: _Clock,
                 start_ms: int, step_ms: int) -> int:
    """One `%`-format call per iteration over a template holding every name of the cycle ("%.4f" == "{:.4f}")."""
    n = len(names)
    template = "".join(f"%s - INFO - {nm.replace('%', '%%')} \t\t\t\t iteration=%s \t\t\t\t value=%.4f\n"
                       for nm in names)
    uniq, inverse = np.unique((np.arange(n) * LINE_US) // 1000, return_inverse=True)
    offsets = uniq.tolist()
    pick = operator.itemgetter(*inverse.tolist()) if n > 1 else (lambda s: (s[0],))
    rows = np.ascontiguousarray(values.T)
    args: list[object] = [None] * (3 * n)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for j, it in enumerate(iterations.tolist() if n else []):
            base = start_ms + it * step_ms
            args[0::3] = pick([clock.stamp(base + off) for off in offsets])
            args[1::3] = ("%06d" % it,) * n
            args[2::3] = rows[j].tolist()
            fh.write(template % tuple(args))
    return n * len(iterations)


def _rank_paths(dest: Path, rank: int, with_rank_dirs: bool) -> tuple[Path, Path]:
    root = dest / f"rank_{rank}" if with_rank_dirs else dest
    file = f"nvdlfw_inspect_globalrank-{rank}.log"
    meta, stats = root / "nvdlfw_inspect_logs" / file, root / "nvdlfw_inspect_statistics_logs" / file
    meta.parent.mkdir(parents=True, exist_ok=True)
    stats.parent.mkdir(parents=True, exist_ok=True)
    return meta, stats


def write_run(run: SyntheticRun, dest: Path, *, with_rank_dirs: bool = True, start_time: datetime = DEFAULT_START,
              step_ms: int = 400) -> WrittenRun:
    """Write per rank `[rank_{r}/]nvdlfw_inspect_logs/…` and `[rank_{r}/]nvdlfw_inspect_statistics_logs/…`.

    Timestamps derive from `start_time` only (iteration i flushes at start + i * step_ms, rank r is r*3 ms late),
    so equal runs give equal bytes. Existing files are overwritten, like nvdlfw's default.
    """
    dest = Path(dest)
    clock, iterations = _Clock(start_time), run.iteration_array()
    files = []
    for rank in range(run.ranks):
        meta_path, stats_path = _rank_paths(dest, rank, with_rank_dirs)
        messages, end = _metadata_messages(run, rank, with_rank_dirs)
        meta_lines = _write_metadata(meta_path, messages, clock, 3 * rank)
        cycle, values = stats_matrix(run, rank)
        names = [f"{layer}_{tensor}_{stat}" for layer, tensor, stat in cycle]
        lines = _write_stats(stats_path, names, iterations, values, clock, end + 150 + 3 * rank, step_ms)
        files.append(RankFiles(rank, meta_path, stats_path, meta_lines, lines, stats_path.stat().st_size))
    names = tuple(f"{layer}_{tensor}_{stat}" for layer, tensor, stat in run.metric_cycle())
    return WrittenRun(dest, tuple(files), tuple(s.name for s in run.layers()),
                      tuple(s.name for s in run.stats_layers()), names, len(iterations))


# ---------------------------------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class PlantedTruth:
    """What a scenario planted, for the evaluation suite."""

    patterns: frozenset[str]  # from PATTERNS
    skip_layers: frozenset[str]  # layers a good recommendation keeps in BF16 (exact logged names)
    signals: frozenset[tuple[str, str, str]] = frozenset()  # (layer, tensor, stat) series carrying the signal
    outlier_ranks: frozenset[int] = frozenset()  # ranks whose values alone carry the signal
    recipe_change: bool = False  # the right fix is a different recipe, not skipping layers


@dataclass(frozen=True)
class ScenarioCase:
    name: str
    description: str
    run: SyntheticRun
    truth: PlantedTruth


def make_case(name: str, description: str, run: SyntheticRun, rules: list[Rule], patterns: set[str], *,
              skip: bool = True, recipe_change: bool = False) -> ScenarioCase:
    """A case whose run profile is `Scenario(rules)` and whose truth is derived from the same rules."""
    run = replace(run, profile=Scenario(tuple(rules)))
    signals = {(layer, tensor, stat) for rule in rules for layer in matching_layers(run, rule.where)
               for tensor in ((rule.tensor,) if rule.tensor else run.tensors)
               for stat in ((rule.stat,) if rule.stat else run.all_stats)}
    outliers = frozenset().union(*(r.ranks for r in rules if r.ranks is not None))
    skip_layers = frozenset(layer for layer, _, _ in signals) if skip else frozenset()
    truth = PlantedTruth(frozenset(patterns), skip_layers, frozenset(signals), outliers, recipe_change)
    return ScenarioCase(name, description, run, truth)


def _small(family: str = "esm2", **kwargs: object) -> SyntheticRun:
    base: dict[str, object] = {"family": family, "num_layers": 12, "iterations": 400, "freq": 10}
    return SyntheticRun(**{**base, **kwargs})  # type: ignore[arg-type]


def _scenarios() -> dict[str, ScenarioCase]:
    grad, act, uf = "gradient", "activation", "underflows%"
    tail = frozenset(n for o in (9, 10, 11) for n in _small("megatron").block(o)) | {"model.module.output_layer"}
    cases = [
        make_case("healthy", "every layer healthy", _small(seed=1), [], {"healthy"}),
        make_case("u_shape", "gradient underflow 3-6 % in the first 3 and last 3 blocks", _small(seed=2),
                  [Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), grad, uf)], {"u_shape"}),
        make_case("head_only", "lm_head gradient 6-10 % and activation 2.5-4 % underflow", _small("llama", seed=3),
                  [Rule(heads(), level((6.0, 10.0)), grad, uf), Rule(heads(), level((2.5, 4.0)), act, uf)],
                  {"head_only"}),
        make_case("early_layers", "gradient underflow 3-5 % in the first 3 blocks", _small("megatron", seed=4),
                  [Rule(first_blocks(3), level((3.0, 5.0)), grad, uf)], {"early_layers"}),
        make_case("late_layers", "gradient underflow 3-5 % in the last 3 blocks (0-based names)",
                  _small("gpt", first_index=0, seed=5), [Rule(last_blocks(3), level((3.0, 5.0)), grad, uf)],
                  {"late_layers"}),
        make_case("boundary", "fc2 activation underflow 8 -> 18 % in the last FP8 block before a BF16 tail",
                  _small("megatron", bf16_layers=tail, seed=6),
                  [Rule(all_of(blocks(8), roles("fc2")), ramp(8.0, 18.0), act, uf)], {"boundary"}),
        make_case("single_tensor", "one tensor of one layer: proj gradient underflow ~5 %", _small(seed=7),
                  [Rule(all_of(blocks(5), roles("proj")), level(5.0), grad, uf)], {"single_tensor"}),
        make_case("rising_trend", "fc1 gradient underflow of two blocks grows 0.2 -> 8 %", _small("llama", seed=8),
                  [Rule(all_of(blocks(4, 7), roles("fc1")), ramp(0.2, 8.0), grad, uf)], {"rising_trend"}),
        make_case("uniform", "every layer 2.5-3.5 % gradient underflow; mxfp8 what-if stays healthy",
                  _small(seed=9, extra_stats=("mxfp8_underflows%",)),
                  [Rule(everywhere(), level((2.5, 3.5)), grad, uf)], {"uniform"}, skip=False, recipe_change=True),
        make_case("rank_outlier", "rank 2 of 4: gradient underflow 4-7 % on every layer",
                  _small(num_layers=8, ranks=4, seed=10),
                  [Rule(everywhere(), level((4.0, 7.0)), grad, uf, frozenset({2}))], {"rank_outlier"}, skip=False),
        make_case("overflow", "DelayedScaling: fc1 activation overflows 0.5-2 % in blocks 2 and 3",
                  _small("megatron", extra_stats="overflows%", te_plan_word="FP8 Quantize", seed=11),
                  [Rule(all_of(blocks(2, 3), roles("fc1")), level((0.5, 2.0)), act, "overflows%")], {"overflow"}),
        make_case("scale_instability", "activation scale_inv of block 6 qkv/proj jumps by x16",
                  _small("llama", seed=12),
                  [Rule(all_of(blocks(6), roles("qkv", "proj")), scale_jumps(16.0), act, stat)
                   for stat in ("scale_inv_min", "scale_inv_max")], {"scale_instability"}),
    ]
    return {case.name: case for case in cases}


SCENARIOS: dict[str, ScenarioCase] = _scenarios()
