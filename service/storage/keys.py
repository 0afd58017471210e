"""The layout of a run's keys in the archive store: everything a run keeps lives under `runs/<id>/`.

Belongs here: building those keys (the uploaded or packed archive, the kept training scalars, the run's folder
that deleting the run removes). Every feature that writes or reads a run's stored bytes builds its keys here, so
the layout is spelled once. Must not be here: opening or writing the bytes (service/storage/archive.py).
"""

from __future__ import annotations

RUNS_FOLDER = "runs"
UPLOAD_NAME = "upload.bin"  # the uploaded archive, or a live run's packed tar (`runs.upload_path` holds its key)
SCALARS_NAME = "scalars.jsonl"  # training scalars (loss, grad_norm, ...) as JSON lines, sent like the logs


def run_prefix(run_id: int) -> str:
    """The run's folder: deleting it deletes everything the run kept."""
    return f"{RUNS_FOLDER}/{run_id}"


def upload_key(run_id: int) -> str:
    return f"{run_prefix(run_id)}/{UPLOAD_NAME}"


def scalars_key(run_id: int) -> str:
    return f"{run_prefix(run_id)}/{SCALARS_NAME}"
