"""`write_run`: one metadata log and one statistics log per rank in the exact nvdlfw_inspect formats.

Belongs here: `write_run`, `WrittenRun` / `RankFiles`, `stats_line` (the reference line format), the metadata
messages (plan, feature and `Assigned layer name:` lines) and the timestamps; formats of nvdlfw_inspect's
log tree. The only side effect of the package is `write_run` writing the files it is asked to write.
Must not be here: deciding values (that is `run` and `profiles`), parsing or analysing logs, web or database imports.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from fp8_policy.policy.records import TENSOR_GEMMS
from fp8_policy.policy.synthetic.run import SyntheticRun, sensitivity_matrix, stats_matrix
from fp8_policy.policy.synthetic.sensitivity import FEATURE, sensitivity_name

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
    sensitivity_names: tuple[str, ...] = ()  # the sensitivity lines of one step that logs them, in line order
    sensitivity_steps: int = 0  # how many logged iterations carry them

    @property
    def stats_lines_per_rank(self) -> dict[int, int]:
        return {f.rank: f.stats_lines for f in self.files}

    @property
    def expected_series(self) -> int:
        """Distinct (rank, metric name) series over all ranks."""
        return (len(self.metric_names) + len(self.sensitivity_names)) * len(self.files)

    @property
    def expected_points(self) -> int:
        per_rank = len(self.metric_names) * self.num_iterations + len(self.sensitivity_names) * self.sensitivity_steps
        return per_rank * len(self.files)

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
    if run.sensitivity:  # announced once per layer, as the collector's SensitivityTap.flush does
        out += [(t + i, _feature(spec.name, "output", FEATURE)) for i, spec in enumerate(run.stats_layers())]
        t += len(run.stats_layers())
    return out, t


def _feature(layer: str, tensor: str, feature: str = "LogFp8TensorStats") -> str:
    return f"LAYER={layer}: Feature={feature}, API=inspect_tensor: {tensor}"


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


class _Cycle:
    """The lines of one cycle of names at one iteration, by one `%`-format call over a template holding every name
    ("%.4f" == "{:.4f}"); line k of the cycle is written (first_line + k) * LINE_US microseconds after the flush."""

    def __init__(self, names: list[str], first_line: int = 0) -> None:
        self.size = len(names)
        self.template = "".join(
            f"%s - INFO - {nm.replace('%', '%%')} \t\t\t\t iteration=%s \t\t\t\t value=%.4f\n" for nm in names
        )
        lines = np.arange(first_line, first_line + self.size)
        uniq, inverse = np.unique((lines * LINE_US) // 1000, return_inverse=True)
        self.offsets: list[int] = uniq.tolist()
        self.pick: Callable[[list[str]], tuple[str, ...]] = (
            operator.itemgetter(*inverse.tolist()) if self.size > 1 else (lambda s: (s[0],))
        )
        self.args: list[object] = [None] * (3 * self.size)

    def text(self, clock: _Clock, flush_ms: int, iteration: int, row: np.ndarray) -> str:
        args = self.args
        args[0::3] = self.pick([clock.stamp(flush_ms + off) for off in self.offsets])
        args[1::3] = (f"{iteration:06d}",) * self.size
        args[2::3] = row.tolist()
        return self.template % tuple(args)


def _write_stats(
    path: Path,
    names: list[str],
    iterations: np.ndarray,
    values: np.ndarray,
    clock: _Clock,
    start_ms: int,
    step_ms: int,
    extra: tuple[list[str], np.ndarray, np.ndarray] | None = None,
) -> int:
    """Every iteration's lines of the cycle `names`; `extra` (names, a mask of `iterations`, values per masked
    iteration): lines written after the cycle's at the masked iterations (the sensitivity statistics)."""
    cycle, rows = _Cycle(names), np.ascontiguousarray(values.T)
    more_names, mask, more_values = (
        extra if extra is not None else ([], np.zeros(len(iterations), bool), np.empty((0, 0)))
    )
    more, more_rows = _Cycle(more_names, len(names)), iter(np.ascontiguousarray(more_values.T))
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for j, it in enumerate(iterations.tolist() if cycle.size or more.size else []):
            flush_ms = start_ms + it * step_ms
            if cycle.size:
                fh.write(cycle.text(clock, flush_ms, it, rows[j]))
                written += cycle.size
            if more.size and mask[j]:
                fh.write(more.text(clock, flush_ms, it, next(more_rows)))
                written += more.size
    return written


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
        extra = None
        if run.sensitivity:
            sens_cycle, sens_values = sensitivity_matrix(run, rank)
            extra = ([sensitivity_name(*line) for line in sens_cycle], run.sensitivity_mask(), sens_values)
        lines = _write_stats(stats_path, names, iterations, values, clock, end + 150 + 3 * rank, step_ms, extra)
        files.append(RankFiles(rank, meta_path, stats_path, meta_lines, lines, stats_path.stat().st_size))
    metric_names = tuple(f"{layer}_{tensor}_{stat}" for layer, tensor, stat in run.metric_cycle())
    return WrittenRun(
        dest,
        tuple(files),
        tuple(s.name for s in run.layers()),
        tuple(s.name for s in run.stats_layers()),
        metric_names,
        len(iterations),
        tuple(sensitivity_name(*line) for line in run.sensitivity_cycle()),
        int(run.sensitivity_mask().sum()),
    )
