"""ARCHITECTURE.md stays true: every repository path it names exists (issue 22).

A path is any token in the file that starts with one of the tree's top-level folders and ends in `/` or a file
suffix (`service/ingest/pipeline.py`, `policy/analysis/`). Renaming or removing a module means updating the page.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("alembic", "bench", "client", "db", "examples", "fp8_policy", "policy", "service", "tests")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")


def named_paths(text: str) -> set[str]:
    return {m.group(1) for m in PATH.finditer(text) if m.group(1).endswith("/") or "." in m.group(1).rsplit("/", 1)[-1]}


def test_every_path_in_architecture_md_exists():
    paths = named_paths((ROOT / "ARCHITECTURE.md").read_text())
    assert len(paths) > 40  # the page names every step of the flow
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names paths that no longer exist: {missing}"


def test_the_path_finder_sees_files_and_folders_and_nothing_else():
    text = "upload: service/ingest/upload.py, then policy/analysis/ and fp8_policy (no path), see bench/run.py."
    assert named_paths(text) == {"service/ingest/upload.py", "policy/analysis/", "bench/run.py"}
    assert named_paths("gone: policy/no_such_module.py") == {"policy/no_such_module.py"}
