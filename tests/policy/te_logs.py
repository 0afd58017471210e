"""Write small nvdlfw_inspect log trees with any stats per layer, in TE's exact line formats, and parse them back.

For cases the synthetic generator's one-stat-set-per-run model cannot write: a mixed-format run (NVFP4 layers log
`nvfp4_*`, its MXFP8 blocks plain names with E8M0 scales), MoE experts logged as `<module>.gemm_<i>`, shared experts,
MLA projections. Lines follow nvdlfw_inspect's loggers (policy/synthetic/writer.py `stats_line`): a metadata log with
`Assigned layer name:`, six plan lines per GEMM layer and the feature lines, and a statistics log. `parse` reads the
tree with the upload path's own parser (bench/eval_ingest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bench.eval_ingest import parse_tree
from fp8_policy.policy.records import RunData
from fp8_policy.policy.synthetic import PLAN_ORDER, stats_line

STAMP = "2026-09-01 10:00:00,000"


@dataclass
class LoggedLayer:
    """One TE GEMM layer: its name as nvdlfw assigns it, whether it ran quantized, and its series by
    (tensor, stat key as logged, e.g. `nvfp4_underflows%`, `underflows%`, `scale_inv_max`)."""

    name: str
    series: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    quantized: bool = True


def write_tree(root: Path, layers: Iterable[LoggedLayer], iterations: np.ndarray, rank: int = 0) -> Path:
    """`root/rank_<rank>/nvdlfw_inspect_{logs,statistics_logs}/nvdlfw_inspect_globalrank-<rank>.log`."""
    layers = list(layers)
    base = root / f"rank_{rank}"
    meta = base / "nvdlfw_inspect_logs" / f"nvdlfw_inspect_globalrank-{rank}.log"
    stats = base / "nvdlfw_inspect_statistics_logs" / f"nvdlfw_inspect_globalrank-{rank}.log"
    meta.parent.mkdir(parents=True, exist_ok=True)
    stats.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{STAMP} - INFO - Default logging to file enabled at {base}", f"{STAMP} - INFO - Loaded configs for x."]
    lines += [f"{STAMP} - INFO - Assigned layer name: {layer.name}" for layer in layers]
    for layer in layers:
        word = "Quantize" if layer.quantized else "High Precision"
        lines += [f"{STAMP} - INFO - LAYER={layer.name}: Tensor: {t}, gemm {g} - {word}" for t, g in PLAN_ORDER]
        for tensor in dict.fromkeys(t for t, _ in layer.series):
            feature = (
                "LogNvfp4TensorStats"
                if any(k.startswith("nvfp4_") for t, k in layer.series if t == tensor)
                else ("LogFp8TensorStats")
            )
            lines.append(f"{STAMP} - INFO - LAYER={layer.name}: Feature={feature}, API=inspect_tensor: {tensor}")
    meta.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = []
    for j, iteration in enumerate(iterations.tolist()):
        for layer in layers:
            for (tensor, key), values in layer.series.items():
                out.append(stats_line(STAMP, f"{layer.name}_{tensor}_{key}", int(iteration), float(values[j])))
    stats.write_text("\n".join(out) + "\n", encoding="utf-8")
    return root


def parse(root: Path, metadata: dict[str, object] | None = None) -> RunData:
    run = parse_tree(root)
    return replace(run, metadata=dict(metadata or {}))


Values = Callable[[str, str, np.random.Generator], np.ndarray]


def noisy(level: float, n: int, rng: np.random.Generator, sigma: float = 0.03) -> np.ndarray:
    return np.round(level * rng.lognormal(0.0, sigma, n), 4)


def e8m0_bytes(n: int, rng: np.random.Generator, centre: int = 120) -> np.ndarray:
    """MXFP8 scale_inv as TE logs it: the E8M0 exponent byte (127 = 1.0), moving by one binade at most."""
    return (centre + rng.integers(-1, 2, n)).astype(np.float64)
