"""`fp8-policy watch` prints one warning per problem: a loss-scale change that moves all six scaling factors of a
layer (activation / weight / gradient x scale_inv_min / max) at one iteration is one line, not six or twelve."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fp8_policy.client.client import PolicyClient
from tests.client.test_live_upload import free_port, serve, settings  # noqa: F401 - settings is a fixture
from tests.service.live.test_live_story import LAYERS, scale_jump_log
from tests.support.archives import meta_relpath, metadata_log, stats_relpath

pytestmark = pytest.mark.slow


def test_one_scale_jump_is_one_warning_line(settings, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "logs"
    for rank in (0, 1):
        for relpath, data in (
            (stats_relpath(rank), scale_jump_log(range(60))),
            (meta_relpath(rank), metadata_log(dict.fromkeys(LAYERS, "fp8"))),
        ):
            (root / relpath).parent.mkdir(parents=True, exist_ok=True)
            (root / relpath).write_bytes(data)
    with serve(settings, free_port()) as url:
        done = subprocess.run(
            [sys.executable, "-m", "fp8_policy.service.cli", "watch", str(root), "--name", "scale-jump"]
            + ["--project", "watch-warn", "--interval", "0.1", "--idle-finish", "1.0", "--url", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        warnings = [line for line in done.stderr.splitlines() if "scale inv drop" in line]
        assert len(warnings) == 2, done.stderr  # one per rank's piece, each grouping the layer's six series
        assert all(LAYERS[0] in line and "6 series" in line for line in warnings)
        with PolicyClient(url) as client:
            run = client.find_run("watch-warn", "scale-jump")
            assert client.wait(run["id"], timeout=60)["status"] == "ready"
