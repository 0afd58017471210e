"""Synthetic loss-sensitivity statistics: `<layer>_<output|dgrad|wgrad>_<prefix>_sensitivity` in micro-nats.

Belongs here: the names, order and values of the sensitivity lines of a `SyntheticRun` that asks for them
(`SyntheticRun.sensitivity`, `sensitivity_freq`), in the format of the CPU collector (`fp8_policy.collect` with
`sensitivity=[...]`) and the `LogQuantizationSensitivity` TE feature; policy/sensitivity/ reads them.
Must not be here: writing files (`writer`), and any web or database import.

Value model (synthetic, for exercising the frontier and target solve; no measured figures): a layer's value for
GEMM g at format f on a logged step is

    BASE[f] * GEMM_SHARE[g] * ROLE_SCALE[role] * layer draw * (1 + u / UNDERFLOW_UNIT + o / OVERFLOW_UNIT) * noise

where u and o are the run's own underflows% / overflows% (the values its profile gives the bare stats) averaged
over the two quantized tensors that feed g (records.TENSOR_GEMMS: fprop <- activation, weight; dgrad <- weight,
gradient; wgrad <- activation, gradient) at that step, the layer draw lognormal (sigma 0.15) per layer and series.
A healthy GEMM (u ~0.05-0.3 %) stays within 1.1-1.6x of its base; a planted underflow of 3-10 % in one tensor makes
the two GEMMs it feeds 4-11x their base.
BASE follows the formats' precision: NVFP4 (E2M1 elements) an order of magnitude above the FP8 formats, finer
scaling (MXFP8, block) below per-tensor scaling, delayed (a stale amax) above current.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fp8_policy.policy.analysis.recipes import STAT_PREFIX
from fp8_policy.policy.records import GEMM_OUTPUTS, GEMMS, SENSITIVITY_STAT, TENSOR_GEMMS
from fp8_policy.policy.synthetic.families import LayerSpec
from fp8_policy.policy.synthetic.profiles import Profile, ProfileContext, _values

FEATURE = "LogQuantizationSensitivity"  # the TE debug feature (and the collector's announcement) writing them
SENSITIVITY_FORMATS: tuple[str, ...] = ("nvfp4", "mxfp8", "current", "delayed", "block")  # the collector's names
BASE: dict[str, float] = {"nvfp4": 100.0, "mxfp8": 6.0, "block": 7.0, "current": 9.0, "delayed": 10.0}
GEMM_SHARE: dict[str, float] = {"fprop": 1.0, "dgrad": 0.6, "wgrad": 0.4}
ROLE_SCALE: dict[str, float] = {"head": 2.0}  # other roles: 1.0
UNDERFLOW_UNIT = 0.5  # percent of values flushed to zero that adds one base value
OVERFLOW_UNIT = 0.05  # saturated values cost more than flushed ones
FEEDS: dict[str, tuple[str, ...]] = {g: tuple(t for t, gs in TENSOR_GEMMS.items() if g in gs) for g in GEMMS}


def check_formats(formats: tuple[str, ...]) -> None:
    unknown = [f for f in formats if f not in SENSITIVITY_FORMATS]
    if unknown or len(set(formats)) != len(formats):
        raise ValueError(f"sensitivity formats must be distinct, among {SENSITIVITY_FORMATS}, got {formats}")


def sensitivity_name(layer: str, gemm: str, fmt: str) -> str:
    """`<layer>_<output|dgrad|wgrad>_<TE recipe prefix>_sensitivity`, as the collector names it."""
    return f"{layer}_{GEMM_OUTPUTS[gemm]}_{STAT_PREFIX[fmt]}_{SENSITIVITY_STAT}"


def sensitivity_cycle(layers: tuple[LayerSpec, ...], formats: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    """(layer, gemm, format) of every sensitivity line of one logged step, in the collector's order: per layer in
    forward order, per format, the three GEMMs."""
    return tuple((s.name, g, f) for s in layers for f in formats for g in GEMMS)


def _problem_level(ctx_of: dict[str, ProfileContext], profile: Profile, gemm: str) -> np.ndarray:
    """1 + u / UNDERFLOW_UNIT + o / OVERFLOW_UNIT over the logged iterations (module docstring)."""
    total = np.zeros(len(next(iter(ctx_of.values())).iterations))
    for tensor in FEEDS[gemm]:
        ctx = ctx_of[tensor]
        under = _values(profile, replace(ctx, stat="underflows%"))
        over = _values(profile, replace(ctx, stat="overflows%"))
        total += np.clip(under, 0.0, 100.0) / UNDERFLOW_UNIT + np.clip(over, 0.0, 100.0) / OVERFLOW_UNIT
    level: np.ndarray = 1.0 + np.nan_to_num(total / len(FEEDS[gemm]), nan=0.0, posinf=1e6)
    return level


def sensitivity_values(
    specs: tuple[LayerSpec, ...],
    formats: tuple[str, ...],
    contexts: dict[tuple[str, str], ProfileContext],
    profile: Profile,
    keep: np.ndarray,
) -> np.ndarray:
    """Values (sensitivity_cycle order x logged sensitivity steps) for one rank: `contexts[(layer, tensor)]` the
    series' context over all logged iterations, `keep` the boolean mask of the steps that log sensitivity."""
    rows = []
    steps = int(np.count_nonzero(keep))
    for spec in specs:
        ctx_of = {t: contexts[(spec.name, t)] for t in TENSOR_GEMMS}
        draw = ctx_of["activation"].rng("sensitivity|layer").lognormal(0.0, 0.15)
        levels = {g: _problem_level(ctx_of, profile, g)[keep] for g in GEMMS}
        for fmt in formats:
            rng = ctx_of["activation"].rng(f"sensitivity|{fmt}")
            scale = BASE[fmt] * ROLE_SCALE.get(spec.role, 1.0) * draw * rng.lognormal(0.0, 0.1)
            for gemm in GEMMS:
                rows.append(scale * GEMM_SHARE[gemm] * levels[gemm] * rng.lognormal(0.0, 0.1, steps))
    return np.array(rows) if rows else np.empty((0, steps))
