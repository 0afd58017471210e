"""Fixtures of the ingest tests: `dest`, the folder an archive is extracted into."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    # Two levels deep so that `../evil.log` and `../../evil.log` would both land inside tmp_path.
    return tmp_path / "out" / "work"
