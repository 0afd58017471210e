"""Child-process steps of `make bench` (each prints one JSON line): `baseline TREE`, `parse-store TREE URL`,
`csv-python URL RUN_ID`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def baseline(tree: Path) -> dict:
    from bench.baseline import baseline_parse, find_stats_log

    start = time.perf_counter()
    frame, _pivot = baseline_parse(find_stats_log(tree))
    return {"seconds": time.perf_counter() - start, "rows": len(frame)}


def parse_store(tree: Path, url: str) -> dict:
    from sqlalchemy import func, select

    from fp8_policy.db.migrate import upgrade
    from fp8_policy.db.run_models import Series
    from fp8_policy.db.runs import NewRun, RunRepository
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope
    from fp8_policy.policy.parse.log_files import classify_log_path
    from fp8_policy.service.ingest.parse import parse_files
    from fp8_policy.service.ingest.worker import warm_parser

    upgrade(url)
    factory = create_session_factory(create_db_engine(url))
    with session_scope(factory) as session:
        run_id = RunRepository(session).add(NewRun("bench", "bench", (), {}, "0" * 64, None, 0, "")).id
    warm_parser()  # the service does this at start-up
    files = [
        (log, path) for path in sorted(tree.rglob("*.log")) if (log := classify_log_path(str(path.relative_to(tree))))
    ]
    start = time.perf_counter()
    assembled, counts = parse_files(files, max_line_bytes=1 << 20, threads=2)
    parsed = time.perf_counter()
    with session_scope(factory) as session:
        repo = RunRepository(session)
        repo.store_ingest(repo.get(run_id), assembled, counts)
    done = time.perf_counter()
    with session_scope(factory) as session:
        stored = session.execute(
            select(func.sum(func.length(Series.iterations) + func.length(Series.values)), func.sum(Series.count))
        ).one()
    return {
        "seconds": done - start,
        "parse_seconds": parsed - start,
        "store_seconds": done - parsed,
        "points": assembled.points,
        "lines_read": counts.lines_read,
        "bytes_per_point": stored[0] / stored[1],
        "analysis_seconds": _analysis_seconds(factory, run_id),
        "heatmap_seconds": _heatmap_seconds(factory, run_id),
    }


def _analysis_seconds(factory, run_id: int) -> float:
    """Load from the database + analyze (service/analysis), as GET /analysis does."""
    from fp8_policy.db.session import session_scope
    from fp8_policy.service.analysis.actions import load_and_analyze

    start = time.perf_counter()
    with session_scope(factory) as session:
        load_and_analyze(session, run_id)
    return time.perf_counter() - start


def _heatmap_seconds(factory, run_id: int) -> float:
    """Default heatmap PNG of the stored run (gradient underflows%, 150 dpi, recommended skips marked)."""
    from fp8_policy.db.session import session_scope
    from fp8_policy.service.visual import render  # noqa: F401  (matplotlib: the service's render workers preload it)
    from fp8_policy.service.visual.actions import render_heatmap_for

    start = time.perf_counter()
    with session_scope(factory) as session:
        render_heatmap_for(session, run_id)
    return time.perf_counter() - start


def csv_python(url: str, run_id: int) -> dict:
    """The metrics export as it was before the compiled writer: Python's csv module formats every value (long
    layout, in process, no HTTP) — the baseline for figure (g)."""
    import csv
    import io

    from fp8_policy.db.runs import RunRepository
    from fp8_policy.db.session import create_db_engine, create_session_factory, session_scope

    factory = create_session_factory(create_db_engine(url))
    start = time.perf_counter()
    rows = size = 0
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    with session_scope(factory) as session:
        for r, layer, tensor, recipe, stat_key, its, vals in RunRepository(session).iter_points(run_id, None):
            buffer.seek(0)
            buffer.truncate()
            texts = [f"{v:.4f}" for v in vals.tolist()]
            fixed = [r, layer, tensor, recipe or "", stat_key]
            writer.writerows([*fixed, i, t] for i, t in zip(its.tolist(), texts, strict=True))
            size += len(buffer.getvalue().encode())
            rows += len(texts)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": rows, "mb": size / 1e6, "rows_per_second": rows / seconds}


def main(argv: list[str]) -> int:
    step, *args = argv
    if step == "baseline":
        result = baseline(Path(args[0]))
    elif step == "parse-store":
        result = parse_store(Path(args[0]), args[1])
    elif step == "csv-python":
        result = csv_python(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown step {step!r}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
