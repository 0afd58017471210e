"""CLI that writes the ESM2-650M-shaped benchmark log tree with a U-shape and a head problem planted.

Usage: python -m bench.generate OUT_DIR [--lines-target 6M|small] [--seed N] [--sensitivity FMT,... [--sensitivity-freq N]]
Prints one JSON object: lines, bytes, seconds and the planted truth. `--sensitivity` adds loss-sensitivity statistics
(policy/synthetic/sensitivity.py: the planted layers are the sensitive ones) for those formats every
`--sensitivity-freq` iterations (default 100): `--lines-target 6m --sensitivity nvfp4,mxfp8,current,delayed,block`
adds 74 steps x 134 layers x 3 GEMMs x 5 formats = 148,740 lines to the 5,886,888 (6,035,628 in all).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fp8_policy.policy.synthetic import (
    Rule,
    ScenarioCase,
    SyntheticRun,
    any_of,
    first_blocks,
    heads,
    last_blocks,
    level,
    make_case,
    write_run,
)

# "6m": 33 blocks x 4 GEMMs + 2 heads, 3 tensors x 4 stats, iterations 0-7320 every 2 -> 5,886,888 lines.
PRESETS: dict[str, dict[str, int]] = {
    "6m": {"num_layers": 33, "iterations": 7320, "freq": 2},
    "small": {"num_layers": 12, "iterations": 1000, "freq": 10},
}


SENSITIVITY_FREQ = 100


def benchmark_case(
    target: str = "6m", seed: int = 650, sensitivity: tuple[str, ...] = (), sensitivity_freq: int = SENSITIVITY_FREQ
) -> ScenarioCase:
    """The benchmark run: gradient underflow 3-6 % in the first/last 3 blocks and 6-10 % in both heads; with
    `sensitivity` (formats), their loss sensitivity every `sensitivity_freq` iterations."""
    with_sensitivity = {"sensitivity": sensitivity, "sensitivity_freq": sensitivity_freq} if sensitivity else {}
    run = SyntheticRun(family="esm2", seed=seed, **PRESETS[target], **with_sensitivity)
    rules = [
        Rule(any_of(first_blocks(3), last_blocks(3)), level((3.0, 6.0)), "gradient", "underflows%"),
        Rule(heads(), level((6.0, 10.0)), "gradient", "underflows%"),
    ]
    # The heads fail with the first and last blocks: bionemo's U-shape ("layers 1-5 and 29-33 plus head").
    return make_case(f"bench_esm2_{target}", "ESM2-650M-like: U-shape including both heads", run, rules, {"u_shape"})


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--lines-target",
        type=str.lower,
        choices=sorted(PRESETS),
        default="6m",
        help="6M (the benchmark, ~5.9 M lines / ~800 MB) or small (~60 k lines)",
    )
    parser.add_argument("--seed", type=int, default=650)
    parser.add_argument(
        "--sensitivity",
        type=lambda text: tuple(f for f in text.split(",") if f),
        default=(),
        metavar="FMT,...",
        help="also write loss-sensitivity statistics for these formats (nvfp4, mxfp8, current, delayed, block)",
    )
    parser.add_argument(
        "--sensitivity-freq",
        type=int,
        default=SENSITIVITY_FREQ,
        help=f"iterations between logged sensitivity steps (a multiple of the preset's freq; default {SENSITIVITY_FREQ})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    case = benchmark_case(args.lines_target, args.seed, args.sensitivity, args.sensitivity_freq)
    start = time.perf_counter()
    written = write_run(case.run, args.out_dir)
    seconds = time.perf_counter() - start
    summary = {
        "out_dir": str(args.out_dir),
        "stats_files": [str(f.stats_path) for f in written.files],
        "lines": sum(written.stats_lines_per_rank.values()),
        "bytes": written.total_bytes,
        "series": written.expected_series,
        "seconds": round(seconds, 2),
        "truth": {"patterns": sorted(case.truth.patterns), "skip_layers": sorted(case.truth.skip_layers)},
    }
    json.dump(summary, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
