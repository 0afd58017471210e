"""`SyntheticRun`: everything that decides a synthetic log tree, its layers, line order and per-rank values.

Belongs here: `SyntheticRun` (validation, layers, assigned modules, metric cycle, profile contexts),
`matching_layers`, `stats_matrix` (the clipped values of one rank) and `sensitivity_matrix` (its loss-sensitivity
values, `sensitivity` module). Deterministic in `SyntheticRun.seed`.
Must not be here: writing files or formatting lines, named scenarios, and any web or database import.

Line order follows the real bionemo logs: per iteration, the forward tensors (activation, weight) of every layer
in module order, then the gradients of every layer in reverse order (the backward pass); then, at the iterations
that log them, the sensitivity lines of every layer in forward order (the collector writes them after the step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fp8_policy.policy.records import QUANTIZED_TENSORS
from fp8_policy.policy.synthetic.families import FAMILIES, LayerSpec
from fp8_policy.policy.synthetic.profiles import Profile, ProfileContext, Where, _values, healthy, split_stat
from fp8_policy.policy.synthetic.sensitivity import check_formats, sensitivity_cycle, sensitivity_values

DEFAULT_STATS: tuple[str, ...] = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
PLAN_WORDS: tuple[str, ...] = ("FP8 Quantize", "Quantize")  # TE <= 2.12, TE >= 2.13
_PERCENT_STATS = ("underflows%", "overflows%")
_NONNEGATIVE_STATS = ("scale_inv_min", "scale_inv_max", "mse", "underflows_num", "overflows_num", "total_square_error")


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
    # loss-sensitivity statistics (`sensitivity` module): the formats, among nvfp4, mxfp8, current, delayed, block
    # (none: no sensitivity lines), logged at iterations divisible by `sensitivity_freq` (a multiple of `freq`;
    # None: every logged iteration), after that iteration's other statistics
    sensitivity: tuple[str, ...] | str = ()
    sensitivity_freq: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.extra_stats, str):
            object.__setattr__(self, "extra_stats", (self.extra_stats,))
        object.__setattr__(self, "bf16_layers", frozenset(self.bf16_layers))
        object.__setattr__(self, "sensitivity", self.sensitivity_formats)
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
        check_formats(self.sensitivity_formats)
        every = self.sensitivity_freq
        if every is not None and (every < 1 or every % self.freq):
            raise ValueError(f"sensitivity_freq must be a positive multiple of freq ({self.freq}), got {every}")
        unknown = self.bf16_layers - {spec.name for spec in self.layers()}
        if unknown:
            raise ValueError(f"bf16_layers not in this run: {sorted(unknown)}")

    @property
    def all_stats(self) -> tuple[str, ...]:
        return (*self.stats, *self.extra_stats)

    def layers(self) -> tuple[LayerSpec, ...]:
        """Every TE GEMM layer in forward order."""
        fam = FAMILIES[self.family]
        specs = [
            LayerSpec(f"{fam.blocks}.{o + self.first_index}.{suffix}", role, o, o + self.first_index)
            for o in range(self.num_layers)
            for role, suffix in fam.gemms
        ]
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
        inner = [
            f"{fam.blocks}.{o + self.first_index}" + (f".{m}" if m else "")
            for o in range(self.num_layers)
            for m in fam.block_modules
        ]
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

    @property
    def sensitivity_formats(self) -> tuple[str, ...]:
        return (self.sensitivity,) if isinstance(self.sensitivity, str) else self.sensitivity

    def sensitivity_cycle(self) -> tuple[tuple[str, str, str], ...]:
        """(layer, gemm, format) of every sensitivity line of one step that logs them, in line order."""
        return sensitivity_cycle(self.stats_layers(), self.sensitivity_formats)

    def sensitivity_mask(self) -> np.ndarray:
        """Which of `iteration_array()` log sensitivity (all False without `sensitivity`)."""
        iterations = self.iteration_array()
        if not self.sensitivity:
            return np.zeros(len(iterations), dtype=bool)
        mask: np.ndarray = iterations % (self.sensitivity_freq or self.freq) == 0
        return mask

    def context(
        self, spec: LayerSpec, tensor: str, stat: str, rank: int, iterations: np.ndarray | None = None
    ) -> ProfileContext:
        """The ProfileContext of one series; pass `iterations` to share one (read-only) array between series."""
        if iterations is None:
            iterations = self.iteration_array()
            iterations.setflags(write=False)
        position: int | str = spec.index if spec.index is not None else "head"
        return ProfileContext(
            spec.name, spec.role, position, spec.ordinal, self.num_layers, tensor, stat, rank, iterations, self.seed
        )


def matching_layers(run: SyntheticRun, where: Where) -> tuple[str, ...]:
    """Names of the stats-bearing layers of `run` that `where` selects (tensor/stat-independent predicates)."""
    return tuple(s.name for s in run.stats_layers() if where(run.context(s, "gradient", "underflows%", 0)))


def _clip(stat: str, values: np.ndarray) -> np.ndarray:
    """Valid ranges, except what-if scale_inv: TE's block-scaling what-if can log its padded buffer (negative
    values included, one H100 run with TE 2.20.2 logged -95602196480.0), so planted garbage stays."""
    recipe, base = split_stat(stat)
    if base in _PERCENT_STATS:
        values = np.clip(values, 0.0, 100.0)
    elif base in _NONNEGATIVE_STATS and not (recipe is not None and base.startswith("scale_inv")):
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


def sensitivity_matrix(run: SyntheticRun, rank: int) -> tuple[tuple[tuple[str, str, str], ...], np.ndarray]:
    """The sensitivity cycle and its values (lines x steps that log sensitivity) for one rank."""
    iterations = run.iteration_array()
    iterations.setflags(write=False)
    specs = run.stats_layers()
    contexts = {
        (s.name, t): run.context(s, t, "underflows%", rank, iterations) for s in specs for t in QUANTIZED_TENSORS
    }
    values = sensitivity_values(specs, run.sensitivity_formats, contexts, run.profile, run.sensitivity_mask())
    return run.sensitivity_cycle(), values
