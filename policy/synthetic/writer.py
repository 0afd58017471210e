"""`write_run`: one metadata log and one statistics log per rank in the exact nvdlfw_inspect formats.

Belongs here: `write_run`, `WrittenRun` / `RankFiles`, `stats_line` (the reference line format), the metadata
messages (plan, feature and `Assigned layer name:` lines) and the timestamps; formats of nvdlfw_inspect's
log tree. The only side effect of the package is `write_run` writing the files it is asked to write.
Must not be here: deciding values (that is `run` and `profiles`), parsing or analysing logs, web or database imports.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from fp8_policy.policy.records import TENSOR_GEMMS
from fp8_policy.policy.synthetic.run import SyntheticRun, stats_matrix

# The six plan lines TE writes per GEMM layer, in TE order (debug_quantization._tensor_to_gemm_names_map).
PLAN_ORDER: tuple[tuple[str, str], ...] = tuple(
    (tensor, gemm) for tensor in ("activation", "weight", "gradient") for gemm in TENSOR_GEMMS[tensor]
)
DEFAULT_START = datetime(2026, 1, 15, 23, 6, 30, 348000)
LINE_US = 70  # microseconds between two stats lines of one flush (the bionemo logs show ~15 lines per ms)


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
    return f"{asctime} - INFO - " + f"{name} \t\t\t\t iteration={iteration:06d} \t\t\t\t value={value:.4f}"


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
    sections = (
        ["fp8_disabled_layers", "fp8_stats_remaining_layers"]
        if run.bf16_layers and run.disabled_via_feature
        else ["fp8_stats_collection"]
    )
    head = [
        (0, f"Default logging to file enabled at {log_dir}"),
        (694, "Reading config from ./fp8_stats.yaml."),
        (694, f"Loaded configs for {sections}."),
    ]
    assigned = [(853 + (i > 0), f"Assigned layer name: {m}") for i, m in enumerate(run.assigned_modules())]
    plans, end = _plan_messages(run, 3500)
    return head + assigned + plans, end


def _write_metadata(path: Path, messages: list[tuple[int, str]], clock: _Clock, offset: int) -> int:
    text = "".join(f"{clock.stamp(offset + ms)} - INFO - {msg}\n" for ms, msg in messages)
    path.write_text(text, encoding="utf-8")
    return len(messages)


def _write_stats(
    path: Path, names: list[str], iterations: np.ndarray, values: np.ndarray, clock: _Clock, start_ms: int, step_ms: int
) -> int:
    """One `%`-format call per iteration over a template holding every name of the cycle ("%.4f" == "{:.4f}")."""
    n = len(names)
    template = "".join(
        f"%s - INFO - {nm.replace('%', '%%')} \t\t\t\t iteration=%s \t\t\t\t value=%.4f\n" for nm in names
    )
    uniq, inverse = np.unique((np.arange(n) * LINE_US) // 1000, return_inverse=True)
    offsets = uniq.tolist()
    pick = operator.itemgetter(*inverse.tolist()) if n > 1 else (lambda s: (s[0],))
    rows = np.ascontiguousarray(values.T)
    args: list[object] = [None] * (3 * n)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for j, it in enumerate(iterations.tolist() if n else []):
            base = start_ms + it * step_ms
            args[0::3] = pick([clock.stamp(base + off) for off in offsets])
            args[1::3] = (f"{it:06d}",) * n
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


def write_run(
    run: SyntheticRun,
    dest: Path,
    *,
    with_rank_dirs: bool = True,
    start_time: datetime = DEFAULT_START,
    step_ms: int = 400,
) -> WrittenRun:
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
    metric_names = tuple(f"{layer}_{tensor}_{stat}" for layer, tensor, stat in run.metric_cycle())
    return WrittenRun(
        dest,
        tuple(files),
        tuple(s.name for s in run.layers()),
        tuple(s.name for s in run.stats_layers()),
        metric_names,
        len(iterations),
    )
