"""The training scalars of every run (loss, grad_norm, ...): kept with the run, read back, parsed once per version.

Belongs here: keeping the scalars a live job streamed (`scalars.jsonl`) with the run when it is finalized, and
reading them back for a live or a finished run. While the run is live the scalars are read from the received file
(`<data_dir>/live/<run_id>/`); finalize copies that file into the archive store next to the run's upload
(service/storage/keys.py `scalars_key`), so any API process serves it afterwards and deleting the run deletes it.
An uploaded archive's `scalars.jsonl` member is kept under the same key by its ingest (service/ingest/scalars.py),
so `scalar_series` serves an uploaded run's scalars the same way; the compare page reads them through it too
(service/compare/). Must not be here: detecting spikes and plateaus while a run is live (service/live/actions.py,
policy/live/scalar_events.py), a live run's event timeline (service/live/reads.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fp8_policy._lazy import lazy_module
from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.policy.parse import scalars_file
from fp8_policy.service import lanes
from fp8_policy.service.single_flight import SingleFlightCache
from fp8_policy.service.storage.archive import ArchiveMissing, ArchiveStore
from fp8_policy.service.storage.disk import PART_SUFFIX, hold_part
from fp8_policy.service.storage.keys import SCALARS_NAME, scalars_key

if TYPE_CHECKING:
    from fp8_policy.policy.live import scalar_series as scalar_columns
    from fp8_policy.policy.live.scalar_series import ScalarColumns
else:  # imported on first use (it imports numpy): start-up path, tests/service/app/test_start_up_imports.py
    scalar_columns = lazy_module("fp8_policy.policy.live.scalar_series")


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
    with (  # a held `.part`: swept at the next start-up if this process dies meanwhile (service/storage/disk.py)
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
    """The file's whole lines within its last MAX_SCALARS_BYTES (policy/parse/scalars_file.py, the bound an upload's
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


class _ParsedScalars:
    """Parsed scalars (policy/live/scalar_series.py columns) by file version, most recently read first, at most
    MAX_POINTS points in all (20 bytes each: 160 MB; the largest file, MAX_SCALARS_LINES records of six scalars,
    is 6 M points, so it fits).

    A version is what identifies the bytes a read gets (`_version`): a ready run's scalars never change (its id,
    creation time and upload hash: a deleted run's entry never answers for a later run given its id); a live run's
    file only grows (its size); a finalized run's stored copy is written once (its size too). So a file is parsed
    once per version however many requests, `limit`s or compare pages read it."""

    MAX_POINTS = 8_000_000

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[Any, ...], ScalarColumns] = OrderedDict()
        self._points = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> ScalarColumns | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple[Any, ...], value: ScalarColumns) -> None:
        points = value.points
        if points > self.MAX_POINTS:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = value
            self._points += points
            while self._points > self.MAX_POINTS:
                _, dropped = self._entries.popitem(last=False)
                self._points -= dropped.points


_parsed = _ParsedScalars()
_parsing: SingleFlightCache[ScalarColumns] = SingleFlightCache(max_entries=0)  # parses running, one per version


def scalar_series(store: ArchiveStore, data_dir: Path, run: Run, limit: int) -> dict[str, Any]:
    """The run's training scalars as {name: {steps, values}} (the last `limit` steps), live or finished: each
    version of its file is parsed once per process (`_ParsedScalars`), in the scalars lane (service/lanes.py:
    429 ComputeQueueFull when it is full), and concurrent first reads of one version wait for one parse."""
    version = _version(store, data_dir, run)
    if version is None:
        return scalar_columns.NO_SCALARS.last(limit)
    columns = _parsed.get(version)
    if columns is None:
        columns = _parsing.get(version, lambda: _parse(store, data_dir, run, version), admit=lanes.SCALARS.admission)
    return columns.last(limit)


def _version(store: ArchiveStore, data_dir: Path, run: Run) -> tuple[Any, ...] | None:
    """What identifies the bytes `_scalars_bytes` reads for the run now (`_ParsedScalars`); None: it has none."""
    identity = (run.id, run.created_at, run.sha256)
    if run.status == RunStatus.ready:
        return identity
    if run.status != RunStatus.live:
        try:
            return (*identity, "stored", store.size(scalars_key(run.id)))
        except ArchiveMissing:
            pass  # finalized before the scalars were kept with the run: the received file was left in place then
    try:
        return (*identity, "received", received_scalars(data_dir, run.id).stat().st_size)
    except FileNotFoundError:
        return None


def _parse(store: ArchiveStore, data_dir: Path, run: Run, version: tuple[Any, ...]) -> ScalarColumns:
    with lanes.SCALARS.turn():
        text = _scalars_bytes(store, data_dir, run)
        columns = scalar_columns.parse_scalars(text) if text is not None else scalar_columns.NO_SCALARS
    _parsed.put(version, columns)
    return columns
