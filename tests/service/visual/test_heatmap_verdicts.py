"""The heatmap's boxes are the analysis's verdicts, and the analysis says which series to open it on (`focus`).

The planted boundary run: its severe finding is on the activation of the last FP8 block's fc2. Opened on the
gradient (the old default) its map was pale with "Boxed: the worst 0 of 0 rows"; the analysis's `focus` now names
the activation, and that heatmap boxes the severe row because the analysis rates it severe.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.synthetic import SCENARIOS, write_run
from tests.conftest import wait_for_run
from tests.support.archives import tree_tar_gz


@pytest.fixture(scope="module")
def boundary_run(visual_client: TestClient, tmp_path_factory: pytest.TempPathFactory) -> int:
    root: Path = tmp_path_factory.mktemp("boundary")
    write_run(SCENARIOS["boundary"].run, root)
    response = visual_client.post(
        "/api/v1/runs",
        files={"file": ("boundary.tgz", tree_tar_gz(root))},
        data={"name": "boundary", "project": f"verdicts-{uuid.uuid4().hex}"},
    )
    assert response.status_code == 202, response.text
    body = wait_for_run(visual_client, response.json()["id"])
    assert body["status"] == "ready", body
    return int(body["id"])


def test_the_boundary_run_opens_on_its_worst_series_and_boxes_the_severe_row(visual_client, boundary_run):
    analysis = visual_client.get(f"/api/v1/runs/{boundary_run}/analysis").json()
    focus = analysis["focus"]
    assert (focus["pattern"], focus["severity"], focus["tensor"]) == ("boundary", "severe", "activation")

    heatmap = visual_client.get(
        f"/api/v1/runs/{boundary_run}/heatmap.json", params={"tensor": focus["tensor"], "stat": focus["stat"]}
    ).json()
    rows = heatmap["rows"]
    boxed = [rows[k]["layer"] for k in heatmap["summary"]["boxed"]]
    assert heatmap["summary"]["boxed_by"] == "analysis verdict"
    assert focus["layer"] in boxed and heatmap["summary"]["critical"] >= 1
    layer_rows = {row["name"]: row for row in analysis["layers"]}
    for row in rows:  # each row's severity is the analysis's verdict of that layer's activation underflows%
        verdicts = [v for v in layer_rows[row["layer"]]["series"] if v["tensor"] == "activation"]
        expected = next((v["severity"] for v in verdicts if v["stat"] == "underflows%"), None)
        assert row["severity"] == (expected if row["kind"] == "fp8" else None), row["layer"]
        assert row["boxed"] == (row["severity"] in ("critical", "severe")), row["layer"]


def test_a_single_rank_heatmap_keeps_the_row_levels(visual_client, boundary_run):
    heatmap = visual_client.get(f"/api/v1/runs/{boundary_run}/heatmap.json", params={"rank": 0}).json()
    assert heatmap["summary"]["boxed_by"] == "row level"
    assert {row["severity"] for row in heatmap["rows"]} == {None}


def test_a_first_render_with_the_skip_marks_analyses_the_run_once(visual_client, boundary_run, monkeypatch):
    # The boxes reuse the verdicts of the analysis the recommended skip set was computed from (same thresholds).
    from fp8_policy.service.analysis import actions as analysis_actions
    from fp8_policy.service.analysis import summary as analysis_summary

    calls = []
    real = analysis_actions.analyze

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis_actions, "analyze", counting)
    monkeypatch.setattr(analysis_summary, "analyze", counting)
    params = {"tensor": "activation", "critical": "2.5", "show_skip": "true"}  # not the stored default analysis
    body = visual_client.get(f"/api/v1/runs/{boundary_run}/heatmap.json", params=params).json()

    assert body["summary"]["boxed_by"] == "analysis verdict" and body["summary"]["boxed"]
    assert len(calls) == 1
