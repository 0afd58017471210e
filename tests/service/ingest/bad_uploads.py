"""Shared by the bad-upload tests (test_upload_errors.py, test_upload_refused.py): a log that ingests, a chunked body,
and the check of an upload refused at once."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
from sqlalchemy import Engine

from fp8_policy.service.settings import Settings
from tests.support.archives import (
    stats_log,
)
from tests.support.dbutil import files_under, runs_of_project

RUNS = "/api/v1/runs"
OCTET_STREAM = "application/octet-stream"  # the multipart content type the error cases below send
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])
MiB = 1024**2


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """A generator body: httpx sends it chunked, without Content-Length."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def assert_rejected(
    response: httpx.Response, status: int, body: dict, settings: Settings, db_engine: Engine, project: str
) -> None:
    """Refused at once: the whole error body, no run row, no file left in the data directory."""
    assert response.status_code == status
    assert response.json() == body
    assert runs_of_project(db_engine, project) == []
    assert files_under(settings.data_dir) == set()
