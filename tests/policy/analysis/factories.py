"""Synthetic RunData for analysis and recommendation tests: naming families, planted curves, noise, ranks.

Curves are given per (layer, tensor) as a float (flat level), an array over the points, or a callable of the
run fraction t in [0, 1]. Every series gets multiplicative noise and is rounded to 4 decimals like the log.
Iteration 0 is a delayed-scaling warm-up point: scale_inv 1.0 and bionemo's 21.4681 % gradient underflow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fp8_policy.policy.records import LayerGroup, LayerInfo, LayerStructure, MetricName, Precision, RunData, Series

Curve = float | np.ndarray | Callable[[np.ndarray], np.ndarray]

FAMILIES: dict[str, dict[str, object]] = {
    "megatron": {
        "base": 0,
        "block": "model.module.decoder.layers.{i}",
        "subs": {
            "qkv": "self_attention.linear_qkv",
            "proj": "self_attention.linear_proj",
            "fc1": "mlp.linear_fc1",
            "fc2": "mlp.linear_fc2",
        },
        "heads": {"model.module.output_layer": "output_layer"},
    },
    "esm2": {
        "base": 1,
        "block": "model.esm.encoder.layers.{i}",
        "subs": {
            "qkv": "self_attention.layernorm_qkv",
            "proj": "self_attention.proj",
            "fc1": "layernorm_mlp.fc1",
            "fc2": "layernorm_mlp.fc2",
        },
        "heads": {"model.lm_head.dense": "lm_head.dense", "model.lm_head.decoder": "lm_head.decoder"},
    },
    "hf": {
        "base": 0,
        "block": "model.layers.{i}",
        "subs": {
            "q": "self_attn.q_proj",
            "k": "self_attn.k_proj",
            "v": "self_attn.v_proj",
            "proj": "self_attn.o_proj",
            "fc1": "mlp.up_proj",
            "fc2": "mlp.down_proj",
        },
        "heads": {"lm_head": "lm_head"},
    },
}
BASE_LEVELS = {"gradient": 0.08, "activation": 0.01, "weight": 0.002}
WARMUP_UNDERFLOW = {"gradient": 21.4681, "activation": 4.7781, "weight": 3.388}
SCALE_INV = {"gradient": 3e-6, "activation": 0.0004, "weight": 0.0002}  # gradient prints as 0.0000


def name(family: str, block: int, sub: str) -> str:
    spec = FAMILIES[family]
    return f"{spec['block'].format(i=block)}.{spec['subs'][sub]}"  # type: ignore[union-attr,index]


def blocks(family: str, n_blocks: int) -> list[int]:
    base = int(FAMILIES[family]["base"])  # type: ignore[arg-type]
    return list(range(base, base + n_blocks))


def heads(family: str) -> list[str]:
    return list(FAMILIES[family]["heads"])  # type: ignore[arg-type]


@dataclass
class Spec:
    """What to build; only the fields a test cares about need setting."""

    family: str = "megatron"
    n_blocks: int = 12
    ranks: int = 1
    n_points: int = 60
    step: int = 10
    seed: int = 0
    noise: float = 0.25
    with_heads: bool = True
    bf16_blocks: tuple[int, ...] = ()
    bf16_heads: bool = False
    curves: dict[tuple[str, str], Curve] = field(default_factory=dict)  # (layer, tensor) -> curve, all ranks
    rank_curves: dict[tuple[int, str, str], Curve] = field(default_factory=dict)  # (rank, layer, tensor)
    scale_curves: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (layer, tensor) -> scale_inv
    overflow: dict[str, float] | None = None  # layer -> activation overflows% level (None: no overflow stats)
    whatif: dict[str, float] = field(default_factory=dict)  # recipe prefix -> factor on the underflow curve
    whatif_curves: dict[tuple[str, str, str], Curve] = field(default_factory=dict)  # (prefix, layer, tensor)
    metadata: dict[str, object] = field(default_factory=dict)
    plans: bool = True  # False: every precision UNKNOWN (no metadata log)


def layer_infos(spec: Spec) -> dict[str, LayerInfo]:
    fam = FAMILIES[spec.family]
    infos: dict[str, LayerInfo] = {}
    for block in blocks(spec.family, spec.n_blocks):
        bf16 = block in spec.bf16_blocks
        for sub in fam["subs"]:  # type: ignore[union-attr]
            layer = name(spec.family, block, sub)
            infos[layer] = LayerInfo(
                layer, LayerStructure(LayerGroup.BODY, block, sub), _precision(spec, bf16), has_fp8_stats=not bf16
            )
    if spec.with_heads:
        for layer, sub in fam["heads"].items():  # type: ignore[union-attr]
            infos[layer] = LayerInfo(
                layer,
                LayerStructure(LayerGroup.HEAD, None, sub),
                _precision(spec, spec.bf16_heads),
                has_fp8_stats=not spec.bf16_heads,
            )
    return infos


def _precision(spec: Spec, bf16: bool) -> Precision:
    if not spec.plans:
        return Precision.UNKNOWN
    return Precision.HIGH if bf16 else Precision.FP8


def build_run(spec: Spec) -> RunData:
    rng = np.random.default_rng(spec.seed)
    infos = layer_infos(spec)
    iterations = np.arange(spec.n_points, dtype=np.int64) * spec.step
    t = np.linspace(0.0, 1.0, spec.n_points)
    series: list[Series] = []
    for rank in range(spec.ranks):
        for layer, info in infos.items():
            if info.has_fp8_stats:
                series += _layer_series(spec, rng, rank, layer, iterations, t)
    return RunData(layers=infos, series=series, metadata=dict(spec.metadata))


def _layer_series(
    spec: Spec, rng: np.random.Generator, rank: int, layer: str, iterations: np.ndarray, t: np.ndarray
) -> list[Series]:
    out = []
    for tensor, base in BASE_LEVELS.items():
        curve = spec.rank_curves.get((rank, layer, tensor), spec.curves.get((layer, tensor), base))
        under = _noisy(_evaluate(curve, t), spec.noise, rng)
        under[0] = WARMUP_UNDERFLOW[tensor]
        out.append(_series(rank, layer, tensor, "underflows%", iterations, under))
        scale = spec.scale_curves.get((layer, tensor), np.full(t.size, SCALE_INV[tensor]))
        scale = np.array(scale, dtype=np.float64)
        scale[0] = 1.0
        out.append(_series(rank, layer, tensor, "scale_inv_min", iterations, scale))
        out.append(_series(rank, layer, tensor, "scale_inv_max", iterations, scale))
        for prefix, factor in spec.whatif.items():
            what = spec.whatif_curves.get((prefix, layer, tensor))
            values = _noisy(_evaluate(what, t), spec.noise, rng) if what is not None else under * factor
            out.append(_series(rank, layer, tensor, "underflows%", iterations, values, recipe=prefix))
    if spec.overflow is not None:
        level = spec.overflow.get(layer, 0.0)
        out.append(
            _series(
                rank, layer, "activation", "overflows%", iterations, _noisy(np.full(t.size, level), spec.noise, rng)
            )
        )
    return out


def _evaluate(curve: Curve, t: np.ndarray) -> np.ndarray:
    if callable(curve):
        return np.asarray(curve(t), dtype=np.float64)
    if isinstance(curve, np.ndarray):
        return curve.astype(np.float64)
    return np.full(t.size, float(curve))


def _noisy(values: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    return np.maximum(values * (1.0 + noise * rng.standard_normal(values.size)), 0.0)


def _series(
    rank: int, layer: str, tensor: str, stat: str, iterations: np.ndarray, values: np.ndarray, recipe: str | None = None
) -> Series:
    return Series(rank, MetricName(layer, tensor, stat, recipe), iterations, np.round(values, 4))


def ramp(start: float, end: float, begin: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    """Flat at `start` until run fraction `begin`, then linear to `end`."""
    return lambda t: start + (end - start) * np.clip((t - begin) / (1.0 - begin), 0.0, 1.0)


def big_run(n_blocks: int = 33, n_points: int = 3660, seed: int = 1) -> RunData:
    """≈1,600 series × `n_points`: esm2 names, 4 sublayers + 2 heads, 3 tensors × 4 stats (incl. mse)."""
    rng = np.random.default_rng(seed)
    infos = layer_infos(Spec(family="esm2", n_blocks=n_blocks))
    iterations = np.arange(n_points, dtype=np.int64) * 2
    stats = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")
    noise = rng.random((len(infos) * 3 * len(stats), n_points))
    series, row = [], 0
    for layer in infos:
        for tensor, base in BASE_LEVELS.items():
            for stat in stats:
                values = {
                    "underflows%": base * (0.5 + noise[row]),
                    "mse": noise[row] * 1e-5,
                }.get(stat, np.full(n_points, SCALE_INV[tensor]) * (1 + 0.01 * noise[row]))
                values[0] = WARMUP_UNDERFLOW[tensor] if stat == "underflows%" else values[0]
                series.append(Series(0, MetricName(layer, tensor, stat), iterations, np.round(values, 4)))
                row += 1
    return RunData(layers=infos, series=series)


def plant(spec: Spec, layers: list[str], tensor: str, curve: Curve) -> Spec:
    """Set the same curve on `tensor` of several layers; returns the spec for chaining."""
    for layer in layers:
        spec.curves[(layer, tensor)] = curve
    return spec
