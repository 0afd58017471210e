"""Demo data for `make run`: planted-pattern runs from policy/synthetic/, plus the real bionemo
fixture logs when ../shared is next to the checkout. Loaded through the normal upload path
(archive on disk -> queued run -> background ingest) only when the database has no runs yet, in a thread of
its own that the service's start-up does not wait for (generating and packing them takes ~1.5 s of CPU).
"""

from __future__ import annotations

import hashlib
import logging
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI

from fp8_policy.db.repositories import RunRepository
from fp8_policy.policy.synthetic import PATTERNS, SCENARIOS, write_run
from fp8_policy.service.ingest.upload import ReceivedUpload, new_upload_path
from fp8_policy.service.runs import writes

log = logging.getLogger("fp8_policy.demo")
DEMO_PROJECT = "demo"
# every planted pattern but early_layers and late_layers
DEMO_SCENARIOS = tuple(name for name in PATTERNS if name not in ("early_layers", "late_layers"))
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "bionemo"


def load_demo_runs_in_background(app: FastAPI) -> threading.Thread:
    """`load_demo_runs` in a daemon thread, kept as `app.state.demo_loader` (join it to wait for the queueing)."""

    def load() -> None:
        try:
            load_demo_runs(app)
        except Exception:  # a stopped service's engine, a full disk: the demo is optional
            log.exception("loading the demo runs failed")

    thread = threading.Thread(target=load, name="demo-runs", daemon=True)
    app.state.demo_loader = thread
    thread.start()
    return thread


def load_demo_runs(app: FastAPI) -> list[int]:
    """Queue the demo runs if the database is empty; returns the new run ids."""
    state = app.state
    with state.unit_of_work() as session:
        if RunRepository(session).list(project=None, status=None, tag=None, after_id=None, limit=1):
            return []
    run_ids = []
    with tempfile.TemporaryDirectory(prefix="fp8-demo-") as tmp:
        for name, tree, tags in _demo_trees(Path(tmp)):
            run_ids.append(_queue(app, tree, name, tags))
    log.info("queued %d demo runs", len(run_ids))
    return run_ids


def _demo_trees(tmp: Path) -> Iterator[tuple[str, Path, tuple[str, ...]]]:
    for name in DEMO_SCENARIOS:
        case = SCENARIOS[name]
        tree = tmp / name
        write_run(case.run, tree)
        yield f"demo-{name}", tree, ("synthetic", case.run.family, *sorted(case.truth.patterns))
    for fixture in ("dummy_logs_esm2", "dummy_logs_llama3"):
        if (FIXTURES / fixture).is_dir():
            yield f"bionemo-{fixture.removeprefix('dummy_logs_')}", FIXTURES / fixture, ("bionemo", "real-te-log")


def _queue(app: FastAPI, tree: Path, name: str, tags: tuple[str, ...]) -> int:
    settings = app.state.settings
    archive = new_upload_path(settings.data_dir / "uploads")
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(tree.rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(tree)))
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    upload = ReceivedUpload(archive, digest, archive.stat().st_size, f"{name}.tar.gz")
    fields = {"name": name, "project": DEMO_PROJECT, "tags": ",".join(tags)}
    with app.state.unit_of_work() as session:
        stored = writes.store_upload(session, settings.data_dir, upload, fields, store=app.state.ingest.store)
        run_id = stored.run.id
    if stored.queued:
        app.state.ingest.submit(run_id)
    return run_id
