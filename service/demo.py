"""Demo data for `make run`: planted-pattern runs from policy/synthetic/ (one of them with training curves, a
`scalars.jsonl` of a decaying loss), an NVFP4 run on a B200 (the precision ladder lifts its failing layers to
MXFP8), plus the real bionemo fixture logs when ../shared is next to the checkout. Loaded through the normal upload path
(archive on disk -> queued run -> background ingest) only when the database has no runs yet, in a thread of
its own that the service's start-up does not wait for (generating and packing them takes ~1.5 s of CPU).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI

from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.synthetic import FRONTIER_SCENARIOS, PATTERNS, SCENARIOS, write_run
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
        for name, tree, tags, metadata in _demo_trees(Path(tmp)):
            run_ids.append(_queue(app, tree, name, tags, metadata))
    log.info("queued %d demo runs", len(run_ids))
    return run_ids


CURVES_SCENARIO = "u_shape"  # the demo run that carries training curves
# an NVFP4 run on a Blackwell GPU: the metadata TE / Megatron users upload with it
NVFP4_DEMO: tuple[str, dict[str, object]] = (
    "nvfp4_late_layers",
    {"gpu": "B200", "recipe": "NVFP4BlockScaling", "te_version": "2.20"},
)
Demo = tuple[str, Path, tuple[str, ...], dict[str, object]]


def _demo_trees(tmp: Path) -> Iterator[Demo]:
    for name in DEMO_SCENARIOS:
        case = SCENARIOS[name]
        tree = tmp / name
        write_run(case.run, tree)
        if name == CURVES_SCENARIO:
            write_scalars(tree / "scalars.jsonl", case.run.iteration_array().tolist())
        yield f"demo-{name}", tree, ("synthetic", case.run.family, *sorted(case.truth.patterns)), {}
    frontier, metadata = NVFP4_DEMO
    case = FRONTIER_SCENARIOS[frontier]
    write_run(case.run, tmp / frontier)
    yield "demo-nvfp4-b200", tmp / frontier, ("synthetic", "nvfp4", "blackwell", *sorted(case.truth.patterns)), metadata
    for fixture in ("dummy_logs_esm2", "dummy_logs_llama3"):
        if (FIXTURES / fixture).is_dir():
            name = f"bionemo-{fixture.removeprefix('dummy_logs_')}"
            yield name, FIXTURES / fixture, ("bionemo", "real-te-log"), {}


def write_scalars(path: Path, steps: list[int]) -> None:
    """A training loop's scalars.jsonl (README "Training curves"): a loss decaying from 10.5 towards 2.3 with a
    little deterministic wobble, the grad norm, a cosine learning rate with warm-up, on the statistics' steps."""
    last = max(steps[-1], 1)
    lines = []
    for k, step in enumerate(steps):
        progress = step / last
        loss = 2.3 + 8.2 * math.exp(-4.0 * progress) + 0.05 * math.sin(k * 1.7)
        lr = 3e-4 * min(1.0, step / (0.05 * last + 1)) * 0.5 * (1 + math.cos(math.pi * progress))
        grad_norm = 0.6 + 2.0 * math.exp(-6.0 * progress) + 0.04 * math.cos(k * 2.3)
        lines.append(json.dumps({"step": step, "loss": round(loss, 4), "grad_norm": round(grad_norm, 4), "lr": lr}))
    path.write_text("\n".join(lines) + "\n")


def _queue(app: FastAPI, tree: Path, name: str, tags: tuple[str, ...], metadata: dict[str, object]) -> int:
    settings = app.state.settings
    archive = new_upload_path(settings.data_dir / "uploads")
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted([*tree.rglob("*.log"), *tree.glob("scalars.jsonl")]):
            tar.add(path, arcname=str(path.relative_to(tree)))
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    upload = ReceivedUpload(archive, digest, archive.stat().st_size, f"{name}.tar.gz")
    fields = {"name": name, "project": DEMO_PROJECT, "tags": ",".join(tags)}
    if metadata:
        fields["metadata"] = json.dumps(metadata)
    with app.state.unit_of_work() as session:
        stored = writes.store_upload(session, settings.data_dir, upload, fields, store=app.state.ingest.store)
        run_id = stored.run.id
    if stored.queued:
        app.state.ingest.submit(run_id)
    return run_id
