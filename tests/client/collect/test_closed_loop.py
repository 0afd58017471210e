"""`examples/closed_loop.py --quick` end to end: train, collect, serve, recommend, apply, retrain, compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_quick(script: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`python examples/<script> --out OUT --quick` from the checkout; fails the test on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--out", str(out), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.slow
def test_quick_closed_loop_writes_both_log_trees_and_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "loop"
    result = run_quick("closed_loop.py", out)

    report = json.loads((out / "report.json").read_text())
    for tree in ("before", "after"):
        assert (
            (out / tree / "rank_0" / "nvdlfw_inspect_statistics_logs" / "nvdlfw_inspect_globalrank-0.log")
            .stat()
            .st_size
        )
    assert report["service_runs"]["lines_skipped"] == [0, 0]
    assert set(report["runs"]) == {"fp8_before", "fp8_after", "reference"}
    for run in report["runs"].values():
        assert run["curve"] and run["eval_loss"] > 0
    recommendation = report["recommendation"]
    skipped = set(recommendation["fp8_skip_layers"]) | {o["layer"] for o in recommendation["gemm_overrides"]}
    assert report["recommendation"]["expected_cost"] is not None
    assert set(report["layers_before"]) == set(report["layers_after"])
    assert all(row["precision"] == "fp8" for row in report["layers_before"].values())
    for name, row in report["layers_after"].items():
        assert (row["precision"] == "fp8") == (name not in skipped), name
    assert sorted(report["applied"]["kept_high_precision"]) == sorted(name.removeprefix("model.") for name in skipped)
    assert isinstance(report["verdict"]["helped"], bool) and report["verdict"]["why"]
    assert "verdict:" in result.stdout and "collector:" in result.stdout
