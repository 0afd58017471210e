"""The baseline the product is compared against, done the way the common analysis scripts do it.

Regex per stripped line (bionemo's analyze_and_create_heatmap.py pattern, fp8-log-format.md §5.3, with the value
group widened so negatives, nan and inf are not dropped) -> list of dicts -> pandas DataFrame -> pivot of the
gradient underflows (layer x iteration). Deliberately naive: it is the yardstick, not the product.

Usage: python -m bench.baseline PATH   (a statistics log, or a tree containing rank_0's statistics log)
"""

from __future__ import annotations

import re
import resource
import sys
import time
from pathlib import Path

import pandas as pd

STATS_LINE = re.compile(
    r"^\d{4}-\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2},\d{3}\s+-\s+INFO\s+-\s+(.+?)\s+iteration=(\d+)\s+"
    r"value=([-+]?(?:\d+(?:\.\d+)?|nan|inf))$"
)
GRADIENT_UNDERFLOWS = "_gradient_underflows%"


def baseline_parse(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All stats lines as a DataFrame (metric_name, iteration, value) and the gradient-underflow pivot."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            match = STATS_LINE.match(line.strip())
            if match:
                rows.append(
                    {"metric_name": match.group(1), "iteration": int(match.group(2)), "value": float(match.group(3))}
                )
    df = pd.DataFrame(rows, columns=["metric_name", "iteration", "value"])
    grad = df[df["metric_name"].str.endswith(GRADIENT_UNDERFLOWS)]
    grad = grad.assign(layer=grad["metric_name"].str.slice(stop=-len(GRADIENT_UNDERFLOWS)))
    pivot = grad.pivot_table(index="layer", columns="iteration", values="value", aggfunc="max")
    return df, pivot


def find_stats_log(path: Path) -> Path:
    """`path` itself if it is a file, else rank 0's statistics log below it."""
    if path.is_file():
        return path
    hits = sorted(path.rglob("nvdlfw_inspect_statistics_logs/*globalrank-0.log"))
    if not hits:
        raise SystemExit(f"no rank-0 statistics log under {path}")
    return hits[0]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m bench.baseline PATH")
    log = find_stats_log(Path(args[0]))
    start = time.perf_counter()
    df, pivot = baseline_parse(log)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"{log}: rows={len(df)} pivot={pivot.shape[0]}x{pivot.shape[1]} seconds={seconds:.1f} peak_rss_mb={peak_mb:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
