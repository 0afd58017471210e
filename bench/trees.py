"""Where the benchmarks keep their inputs and outputs: `OUT` (bench/out) and the generated log trees.

Belongs here: paths, `ensure_log_tree` and the end every benchmark shares (`print_targets`, `write_results`), shared by bench/run.py, bench/live.py and bench/scale.py (each of
those imports this module, never each other, so the benchmark modules form no import cycle).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


def ensure_log_tree(target: str) -> Path:
    """The ESM2-shaped benchmark log tree for `target` ("6m" or "small"), generated once under OUT."""
    tree = OUT / f"esm2_{target}"
    marker = tree / ".complete"
    if not marker.exists():
        print(f"generating the {target} benchmark log tree in {tree} ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "bench.generate", str(tree), "--lines-target", target],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        marker.touch()
    return tree


def parse_target(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, Path]:
    """`parser` (the caller's own options added) with `--target` (the log tree to measure: 6m or small) parsing
    `argv`; bench/out made and the target's log tree generated or reused: (the arguments, the tree)."""
    parser.add_argument("--target", choices=("6m", "small"), default="6m")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    return args, ensure_log_tree(args.target)


def print_targets(targets: Mapping[str, bool]) -> None:
    """One line a target: `[ok]` or `[MISSED]`, then its label."""
    for label, ok in targets.items():
        print(f"  [{'ok' if ok else 'MISSED'}] {label}")


def write_results(name: str, results: Mapping[str, Any], targets: Mapping[str, bool]) -> int:
    """A benchmark's end: `targets` printed, bench/out/<name>.json written (the results, the targets under
    `targets_met`) and the exit status, 0 when every target is met."""
    print_targets(targets)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({**results, "targets_met": dict(targets)}, indent=2))
    return 0 if all(targets.values()) else 1
