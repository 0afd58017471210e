"""Value profiles and layer selectors: what values a series gets and which series a rule applies to.

Belongs here: `ProfileContext`, `split_stat`, the profiles (`healthy`, `level`, `ramp`, `step_at`, `scale_jumps`,
`with_values`, `e8m0`), the `Where` predicates (`first_blocks`, `heads`, `all_of`, ...), `Rule` and `Scenario`.
Must not be here: model naming, run layout, file writing, and any web or database import.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from fp8_policy.policy.records import RECIPE_PREFIXES


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
    """ "mxfp8_underflows%_columnwise" -> ("mxfp8", "underflows%")."""
    stat = stat.removesuffix("_columnwise")
    recipe = next((r for r in RECIPE_PREFIXES if stat.startswith(r + "_")), None)
    return recipe, stat.removeprefix(f"{recipe}_") if recipe else stat


Profile = Callable[[ProfileContext], np.ndarray]
Where = Callable[[ProfileContext], bool]
Value = float | Profile

_AMAX = {"activation": (0.15, 0.6, 448.0), "weight": (0.08, 0.2, 448.0), "gradient": (1e-4, 1e-3, 57344.0)}
_RECIPE_UNDERFLOW = {"mxfp8": 0.3, "fp8_block_scaling": 0.5}  # finer scaling loses fewer values
_WARMUP_UNDERFLOW = {"activation": 4.5, "weight": 3.4, "gradient": 21.5}  # iteration 0 of the bionemo logs
# Healthy nvfp4_underflows% (percent of all elements): the NumPy NVFP4 emulation (policy/nvfp4_emulation.py) gives
# 6.8 % on Gaussian and up to 12.9 % on heavy-tailed data in 1x16 blocks, 10.2 % on Gaussian weights in 16x16 tiles.
_NVFP4_HEALTHY = {"activation": (5.5, 7.5), "gradient": (5.5, 7.5), "weight": (8.5, 10.5)}
E8M0_BIAS = 127


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
    if ctx.recipe == "nvfp4":  # a property of the format: several percent, stable over the run
        center = rng.uniform(*_NVFP4_HEALTHY.get(ctx.tensor, (5.5, 7.5)))
        return center * rng.lognormal(0.0, 0.03, len(ctx.iterations))
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
        scaled: np.ndarray = np.where(jumped, factor, 1.0) * _values(base, ctx)
        return scaled

    return profile


def e8m0(base: Profile | None = None) -> Profile:
    """MXFP8's scale_inv as TE logs it: the E8M0 exponent byte (127 = 1.0) of `base`'s linear scale (healthy by
    default), min / max spread over the 32-element blocks (x2^-6 / x2^2); other stats are `base`'s values."""
    base = base or healthy()

    def profile(ctx: ProfileContext) -> np.ndarray:
        values = _values(base, ctx)
        if ctx.base_stat not in ("scale_inv_min", "scale_inv_max"):
            return values
        spread = -6.0 if ctx.base_stat == "scale_inv_min" else 2.0
        exponent = np.round(np.log2(np.maximum(values, 1e-38))) + (0.0 if ctx.recipe == "mxfp8" else spread)
        out: np.ndarray = np.clip(exponent + E8M0_BIAS, 1.0, 254.0)
        return out

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
        return (
            (self.tensor is None or self.tensor == ctx.tensor)
            and (self.stat is None or self.stat == ctx.stat)
            and (self.ranks is None or ctx.rank in self.ranks)
            and self.where(ctx)
        )


@dataclass(frozen=True)
class Scenario:
    """A profile made of rules: the first matching rule decides, otherwise `default` (healthy)."""

    rules: tuple[Rule, ...] = ()
    default: Profile = field(default_factory=healthy)

    def plant(
        self,
        where: Where,
        tensor: str | None,
        stat: str | None,
        profile: Profile,
        *,
        ranks: frozenset[int] | None = None,
    ) -> Scenario:
        return replace(self, rules=(*self.rules, Rule(where, profile, tensor, stat, ranks)))

    def __call__(self, ctx: ProfileContext) -> np.ndarray:
        rule = next((r for r in self.rules if r.matches(ctx)), None)
        return (rule.profile if rule else self.default)(ctx)
