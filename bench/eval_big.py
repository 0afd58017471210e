"""The eval's 6M-line timing: the stored run ingested into SQLite, then load + analysis + recommendation timed."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.eval_ingest import MAX_LINE_BYTES, log_files
from bench.eval_scoring import pattern_names
from fp8_policy.service.ingest.parse import parse_files

ROOT = Path(__file__).resolve().parent.parent
BIG_TREE = ROOT / "bench" / "out" / "esm2_6m"
BIG_ANALYSIS_TARGET_S = 2.0


@contextmanager
def stored_run(
    tree: Path, url: str, metadata: dict[str, Any] | None = None
) -> Iterator[tuple[Any, int, dict[str, float]]]:
    """Ingest `tree` into the database at `url` the way bench/steps.py parse_store does, the run's metadata
    `metadata` (none by default); yields (factory, id, times)."""
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.db.runs import NewRun, RunRepository
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
    from fp8_policy.service.ingest.worker import warm_parser

    upgrade(url)
    engine = create_db_engine(url)
    factory = create_session_factory(engine)
    try:
        with session_scope(factory) as session:
            run_id = (
                RunRepository(session)
                .add(NewRun("eval-6m", "eval", (), dict(metadata or {}), "0" * 64, None, 0, ""))
                .id
            )
        warm_parser()
        start = time.perf_counter()
        assembled, counts = parse_files(log_files(tree), max_line_bytes=MAX_LINE_BYTES, threads=2)
        parsed = time.perf_counter()
        with session_scope(factory) as session:
            repo = RunRepository(session)
            repo.store_ingest(repo.get(run_id), assembled, counts)
        times = {
            "parse_seconds": parsed - start,
            "store_seconds": time.perf_counter() - parsed,
            "points": float(assembled.points),
            "lines_read": float(counts.lines_read),
            "lines_skipped": float(counts.lines_skipped),
        }
        del assembled
        yield factory, run_id, times
    finally:
        engine.dispose()


def ensure_big_tree(tree: Path = BIG_TREE) -> Path:
    """The 6M-line tree of `make bench`; generated (as bench/run.py does) when missing."""
    if not (tree / ".complete").exists():
        print(f"generating the 6M-line log tree in {tree} (python -m bench.generate) ...", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "bench.generate", str(tree), "--lines-target", "6m"],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (tree / ".complete").touch()
    return tree


def big_timings(tree: Path, repeats: int = 3, truth: Any = None) -> dict[str, Any]:
    """Times service.analysis.actions.load_and_analyze and recommendation_for on a stored run (the 6M-line one);
    `truth` (a PlantedTruth, default: what bench/generate.py planted in the 6M tree) is compared with the result."""
    from bench.steps import _analysis_seconds
    from fp8_policy.db.session import session_scope
    from fp8_policy.service.analysis.actions import load_and_analyze, recommendation_for

    out: dict[str, Any] = {"tree": str(tree)}
    with (
        tempfile.TemporaryDirectory(prefix="fp8-eval-big-") as tmp,
        stored_run(tree, f"sqlite:///{Path(tmp) / 'eval.db'}") as (factory, run_id, times),
    ):
        out.update(times)
        analysis_runs, recommend_runs = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            with session_scope(factory) as session:
                data, analysis = load_and_analyze(session, run_id)
            analysis_runs.append(time.perf_counter() - start)
            start = time.perf_counter()
            with session_scope(factory) as session:
                rec = recommendation_for(session, run_id, None)
            recommend_runs.append(time.perf_counter() - start)
        out["steps_analysis_seconds"] = _analysis_seconds(factory, run_id)  # what `make bench` reports
    if truth is None:
        from bench.generate import benchmark_case

        truth = benchmark_case("6m").truth
    covered = set(rec.decision.skip_layers) | {o.layer for o in rec.decision.gemm_overrides}
    out.update(
        {
            "planted": sorted(truth.patterns),
            "missed": sorted(truth.patterns - pattern_names(analysis.patterns())),
            "skip_truth": len(truth.skip_layers),
            "skip_covered": len(truth.skip_layers & covered),
            "skip_extra": sorted(covered - truth.skip_layers),
            "load_and_analyze_seconds": analysis_runs[0],
            "load_and_analyze_runs": analysis_runs,
            "recommendation_for_seconds": recommend_runs[0],
            "recommendation_for_runs": recommend_runs,
            "series": len(data.series),
            "layers": len(data.layers),
            "patterns": sorted(analysis.patterns()),
            "skip_layers": len(rec.decision.skip_layers),
            "gemm_overrides": len(rec.decision.gemm_overrides),
            "recipe": rec.decision.recipe.name,
        }
    )
    return out
