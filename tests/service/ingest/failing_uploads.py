"""Uploads shared by the failure-path tests (test_failure_paths.py, test_server_side_failures.py): a statistics log
that ingests, an archive whose member names are Latin-1, and POST /api/v1/runs of bytes into a project."""

from __future__ import annotations

import io
import tarfile

import httpx
from fastapi.testclient import TestClient

from tests.support.archives import stats_log

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])


def latin1_tar(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """A tar.gz whose member names are written in latin-1 (not UTF-8), as an old `tar` on a latin-1 system does."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for item in members:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
                continue
            info = tarfile.TarInfo(item[0])
            info.size = len(item[1])
            tar.addfile(info, io.BytesIO(item[1]))
    return buffer.getvalue()


def upload(client: TestClient, project: str, data: bytes, filename: str = "logs.tar.gz") -> httpx.Response:
    return client.post(RUNS, files={"file": (filename, data, "application/octet-stream")}, data={"project": project})
