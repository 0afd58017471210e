"""Issue 10's (a) alone: `python -m bench.single [--uploads N] [--target small]`.

The baseline (d) and the single-rank HTTP upload -> ready (b) of bench/run.py side by side in one run, the upload
N times (each to a fresh service, started once its start-up work is over), with the service's peak RSS (c);
`make bench` measures them among everything else. Target: (b) >= 20x faster than (d).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.run import ensure_archive, measure_baseline, measure_upload
from bench.trees import OUT, parse_target


def measure_single(tree: Path, work: Path, uploads: int = 1) -> dict:
    """(a) of issue 10 alone: the baseline (d) and the single-rank HTTP upload -> ready (b) of bench/run.py, side by
    side in one run (the upload `uploads` times, each to a fresh service), with the service's peak RSS (c)."""
    archive = ensure_archive(tree)
    print("(d) baseline ...", flush=True)
    baseline = measure_baseline(tree)
    runs = []
    for k in range(uploads):
        print(f"(b) HTTP upload -> ready, {k + 1} of {uploads} ...", flush=True)
        runs.append(measure_upload(archive, work / f"single-{k}"))
    for up in runs:
        print(
            f"(b) single rank upload -> ready: {up['seconds']:6.2f} s = {baseline['seconds'] / up['seconds']:5.1f}x"
            f" the baseline's {baseline['seconds']:.2f} s (target >= 20x); (c) service peak RSS"
            f" {up['service_peak_rss_mb']:.0f} MB (idle {up['idle_rss_mb']:.0f} MB)"
        )
    return {"baseline": baseline, "uploads": [{k: v for k, v in up.items() if k != "csv"} for up in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.single", description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=1)
    args, tree = parse_target(parser, argv)
    with tempfile.TemporaryDirectory(prefix="fp8-single-") as tmp:
        results = measure_single(tree, Path(tmp), args.uploads)
    (OUT / "single.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
