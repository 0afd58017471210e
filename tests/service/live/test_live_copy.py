"""service/live/actions._copy_in: a received piece reaches the live file by the kernel's copy_file_range, or through
Python where the file system refuses it, with the same bytes either way."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fp8_policy.service.live import actions
from fp8_policy.service.live.pieces import Piece


def _copy(tmp_path: Path, piece: Piece, start: int) -> tuple[int, int, bytes]:
    live = tmp_path / "live.log"
    live.write_bytes(b"received\n")
    with open(os.open(live, os.O_RDWR), "r+b") as handle:
        handle.seek(9)
        copied = actions._copy_in(piece, start, handle)
        position = handle.tell()
    return copied, position, live.read_bytes()


@pytest.mark.parametrize("refused", [None, errno.EXDEV, errno.EINVAL])
def test_a_received_piece_is_appended_from_its_offset(tmp_path: Path, monkeypatch, refused: int | None) -> None:
    body = bytes(range(256)) * 9000  # 2.3 MB: more than one copy step where the kernel copies in parts
    part = tmp_path / "piece.part"
    part.write_bytes(body)
    used: list[int] = []
    copy_file_range = os.copy_file_range

    def spy(*args: int) -> int:
        used.append(args[2])
        if refused is not None:
            raise OSError(refused, os.strerror(refused))
        return copy_file_range(*args)

    monkeypatch.setattr(os, "copy_file_range", spy)
    copied, position, data = _copy(tmp_path, Piece(path=part, size=len(body)), 1000)

    assert (copied, position) == (len(body) - 1000, 9 + len(body) - 1000)
    assert data == b"received\n" + body[1000:]
    assert used  # the kernel copy was tried first


def test_a_piece_in_memory_and_a_short_file(tmp_path: Path) -> None:
    assert _copy(tmp_path, Piece(b"0123456789"), 4)[2] == b"received\n456789"
    part = tmp_path / "short.part"
    part.write_bytes(b"abc")
    with pytest.raises(OSError, match="shorter than"):
        _copy(tmp_path, Piece(path=part, size=10), 0)
