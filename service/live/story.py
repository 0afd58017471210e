"""What a live run leaves behind once finalized: its training scalars and its early-warning timeline.

Belongs here: keeping the scalars a job streamed (`scalars.jsonl`) with the run when it is finalized, reading
them back for a live or a finished run, and paging through a run's events. While the run is live the scalars
are read from the received file (`<data_dir>/live/<run_id>/`); finalize copies that file into the archive store
next to the run's upload (`runs/<run_id>/scalars.jsonl`), so any API process serves it afterwards and deleting
the run deletes it. An uploaded archive's `scalars.jsonl` member is kept under the same key by its ingest
(service/ingest/scalars.py), so `scalar_series` serves an uploaded run's scalars the same way. The events stay in
`live_events` (db/live.py) for the run's lifetime.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy.orm import Session

from fp8_policy.db.live import LiveRepository, StoredEvent
from fp8_policy.db.models import Run, RunStatus
from fp8_policy.policy import scalar_events, scalars_file
from fp8_policy.service.ingest.store import ArchiveMissing, ArchiveStore
from fp8_policy.service.storage import PART_SUFFIX, hold_part

SCALARS_NAME = "scalars.jsonl"  # training scalars (loss, grad_norm, ...) as JSON lines, sent like the logs
MAX_EVENTS_PAGE = 500


def scalars_key(run_id: int) -> str:
    return f"runs/{run_id}/{SCALARS_NAME}"


def received_scalars(data_dir: Path, run_id: int) -> Path:
    return data_dir / "live" / str(run_id) / SCALARS_NAME


def keep_scalars(store: ArchiveStore, data_dir: Path, run_id: int) -> bool:
    """Copy the received scalars into the store with the run (finalize); False when the job sent none.
    A copy: the received file stays until the finalize has committed (a rolled-back finalize keeps it)."""
    source = received_scalars(data_dir, run_id)
    if not source.is_file():
        return False
    uploads = data_dir / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    with (  # a held `.part`: swept at the next start-up if this process dies meanwhile (service/storage.py)
        tempfile.NamedTemporaryFile(dir=uploads, prefix=f"scalars-{run_id}-", suffix=PART_SUFFIX, delete=False) as copy,
        open(source, "rb") as handle,
    ):
        try:
            hold_part(copy)
            shutil.copyfileobj(handle, copy)
            copy.flush()
            store.put_file(Path(copy.name), scalars_key(run_id))
        finally:
            Path(copy.name).unlink(missing_ok=True)
    return True


def _tail(handle: BinaryIO) -> bytes:
    """The file's whole lines within its last MAX_SCALARS_BYTES (policy/scalars_file.py, the bound an upload's
    scalars are kept under): a live run's streamed file is refused past that bound (service/limits.py), but one
    received before the bound existed may be larger, and a read must not hold it all."""
    size = handle.seek(0, os.SEEK_END)
    bound = scalars_file.MAX_SCALARS_BYTES
    handle.seek(max(0, size - bound))
    data = handle.read(bound)
    if size > bound:
        data = data[data.find(b"\n") + 1 :]  # the line cut by the bound is left out (none: nothing is)
    return data


def _scalars_bytes(store: ArchiveStore, data_dir: Path, run: Run) -> bytes | None:
    received = received_scalars(data_dir, run.id)
    if run.status != RunStatus.live:
        try:
            with store.open(scalars_key(run.id)) as handle:
                return _tail(handle)
        except ArchiveMissing:
            pass  # finalized before the scalars were kept with the run: the received file was left in place then
    if not received.is_file():
        return None
    with open(received, "rb") as handle:
        return _tail(handle)


class _FinishedScalars:
    """The parsed scalars of `ready` runs, most recently read first, at most MAX_POINTS points in all.

    A ready run's scalars no longer change (kept by its ingest or its finalize), and parsing a file at the 32 MiB
    bound costs ~2 s of CPU: the run page and /compare/scalars (up to 8 runs a request) read them again and again.
    Keyed by the run's id, creation time and upload hash, so a deleted run's entry never answers for a later run
    that gets its id (SQLite gave a deleted highest id out again before the migration ids_never_reused)."""

    MAX_POINTS = 2_000_000

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[Any, ...], tuple[dict[str, Any], int]] = OrderedDict()
        self._points = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: tuple[Any, ...], value: dict[str, Any]) -> None:
        points = sum(len(entry["steps"]) for entry in value["series"].values())
        if points > self.MAX_POINTS:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (value, points)
            self._points += points
            while self._points > self.MAX_POINTS:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._points -= dropped


_finished = _FinishedScalars()


def scalar_series(store: ArchiveStore, data_dir: Path, run: Run, limit: int) -> dict[str, Any]:
    """The run's training scalars as {name: {steps, values}} (the last `limit` steps), live or finished; a ready
    run's are parsed once per process (`_FinishedScalars`). Callers must not change the returned dict."""
    if run.status != RunStatus.ready:
        return _parsed_series(store, data_dir, run, limit)
    key = (run.id, run.created_at, run.sha256, limit)
    cached = _finished.get(key)
    if cached is None:
        cached = _parsed_series(store, data_dir, run, limit)
        _finished.put(key, cached)
    return cached


def _parsed_series(store: ArchiveStore, data_dir: Path, run: Run, limit: int) -> dict[str, Any]:
    text = _scalars_bytes(store, data_dir, run)
    if text is None:
        return {"records": 0, "series": {}}
    records, unreadable, negative_steps = scalar_events.parse_lines(text)
    # in step order, a step logged again (a job resumed from an earlier checkpoint) by its last record, as the
    # compare overlay does: charts draw the steps as given, and out of order they drew lines back and forth
    by_step = {int(record["step"]): record for record in records}
    records = [by_step[step] for step in sorted(by_step)][-limit:]
    series: dict[str, dict[str, list[Any]]] = {}
    for record in records:
        for key in scalar_events.SCALAR_KEYS:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                entry = series.setdefault(key, {"steps": [], "values": []})
                entry["steps"].append(int(record["step"]))
                entry["values"].append(float(value))
    return {"records": len(records), "unreadable_lines": unreadable, "negative_steps": negative_steps, "series": series}


def events_page(session: Session, run_id: int, before: int | None, limit: int) -> tuple[int, list[StoredEvent], bool]:
    """(all events of the run, up to `limit` events below id `before` newest first, whether older ones exist)."""
    repo = LiveRepository(session)
    limit = min(limit, MAX_EVENTS_PAGE)
    page = repo.events_before(run_id, before, limit + 1)
    return repo.count_events(run_id), page[:limit], len(page) > limit
