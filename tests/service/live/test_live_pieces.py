"""Issue 20 item 5: a live piece is streamed to disk (memory bounded whatever its size) and pieces at once are capped.

Memory is measured with tracemalloc (Python and numpy allocations), on the real app served by uvicorn in a thread
(real sockets: the body arrives in the chunks a network delivers), never by wall time.
"""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.parse import kernels
from fp8_policy.service.errors import TooManyPieces
from fp8_policy.service.live.pieces import COPY_BYTES, Piece, PieceGate, Region, last_newline
from fp8_policy.service.settings import Settings
from tests.service.live.test_live_runs import LIVE, create, put, training_log
from tests.support.archives import meta_relpath, stats_relpath
from tests.support.asyncrun import run_async
from tests.support.uvicorn_app import live_service

PIECE_BYTES = 40 * 1024**2
LINE = b"2025-01-01 00:00:00,000 - INFO - model.layers.1.mlp.fc2 uses FP8 for all GEMMs (metadata line padding)\n"


def _body(size: int) -> Iterator[bytes]:
    """`size` bytes of metadata lines, produced 64 KiB at a time (the client never holds the piece either)."""
    chunk = LINE * (65536 // len(LINE))
    sent = 0
    while sent < size:
        part = chunk[: size - sent]
        sent += len(part)
        yield part


def _expected_digest(size: int) -> str:
    digest = hashlib.sha256()
    for part in _body(size):
        digest.update(part)
    return digest.hexdigest()


def test_a_large_piece_is_streamed_to_disk_with_bounded_memory(app_settings: Settings, project: str) -> None:
    with live_service(app_settings) as live, httpx.Client(base_url=live.url, timeout=120) as http:
        run_id = http.post(LIVE, json={"project": project, "name": "big-piece"}).json()["id"]
        url = f"{LIVE}/{run_id}/files/{meta_relpath(0)}"
        headers = {"content-type": "application/octet-stream", "content-length": str(PIECE_BYTES)}
        # the service's background work would count too: the parser's warm-up at start-up (policy/parse/kernels.py) and
        # summaries of earlier tests' runs in the shared database
        kernels.wait_compiled(timeout=300)
        live.app.state.summaries.wait_idle(timeout=120)
        tracemalloc.start()
        try:
            first = http.put(url, params={"offset": 0}, content=_body(PIECE_BYTES), headers=headers)
            again = http.put(url, params={"offset": 0}, content=_body(PIECE_BYTES), headers=headers)  # a re-send
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert first.status_code == 200 and again.status_code == 200, (first.text, again.text)
        assert first.json()["size"] == again.json()["size"] == PIECE_BYTES
        # held whole, the piece alone was 40 MiB (and its join another 40); streamed, a few 1 MiB batches
        assert peak < 8 * COPY_BYTES, f"{peak / 2**20:.1f} MiB traced while receiving a {PIECE_BYTES >> 20} MiB piece"
        stored = app_settings.data_dir / "live" / str(run_id) / meta_relpath(0)
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == _expected_digest(PIECE_BYTES)
        assert list((app_settings.data_dir / "uploads").glob("*.part")) == []


def test_pieces_beyond_the_cap_are_503_before_their_body_is_read(client: TestClient, project: str) -> None:
    run_id = create(client, project)["id"]
    gate: PieceGate = client.app.state.live_pieces
    gate.active = gate.max_pieces  # every slot taken by pieces still arriving
    try:
        refused = put(client, run_id, stats_relpath(0), 0, training_log(0))
    finally:
        gate.active = 0
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "TooManyPieces" and int(refused.headers["retry-after"]) > 0
    accepted = put(client, run_id, stats_relpath(0), 0, training_log(0))
    assert accepted.status_code == 200 and accepted.json()["size"] == len(training_log(0))


def test_the_gate_counts_its_slots() -> None:
    async def scenario() -> None:
        gate = PieceGate(2, 1)
        async with gate.slot(), gate.slot():
            with pytest.raises(TooManyPieces):
                async with gate.slot():
                    pass
        assert gate.active == 0

    run_async(scenario)


def test_file_pieces_compare_and_copy_in_bounded_chunks(tmp_path: Path) -> None:
    data = bytes(range(256)) * (3 * COPY_BYTES // 256 + 7)
    source = tmp_path / "piece.part"
    source.write_bytes(data)
    for piece in (Piece(path=source, size=len(data)), Piece(data)):
        assert piece.size == len(data)
        assert all(len(chunk) <= COPY_BYTES for chunk in piece.chunks(0, piece.size))
        target = tmp_path / "live.log"
        with open(target, "w+b") as handle:
            assert piece.write_from(handle, 5) == len(data) - 5
            handle.seek(0)
            assert not piece.matches(handle, 10)  # the target starts 5 bytes in
        with open(target, "rb") as handle:
            handle.seek(1000)
            assert Region(handle, 300).read() == data[1005:1305]
        assert target.read_bytes() == data[5:]


def test_last_newline_is_found_backwards_across_chunks(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\n" + b"x" * (2 * COPY_BYTES + 3))
    with open(path, "rb") as handle:
        assert last_newline(handle, 0, path.stat().st_size) == 1
        assert last_newline(handle, 2, path.stat().st_size) == -1
