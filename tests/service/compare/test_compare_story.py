"""Issue 12 items 7 and 8 through the API: compare says when a problem followed a moved BF16 boundary, compares
the two recommendations, is honest about incomparable runs and tiny bases; POST .../recommendation takes
`previous_run` as history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.policy.synthetic import SCENARIOS, SyntheticRun, write_run
from fp8_policy.policy.synthetic.studies import og2_boundary_study
from fp8_policy.service.visual.sentences import summary_sentences
from tests.conftest import wait_for_run
from tests.support.archives import tree_tar_gz


def upload(client: TestClient, tmp_path: Path, project: str, name: str, run: SyntheticRun, metadata: dict) -> int:
    write_run(run, tmp_path / name)
    response = client.post(
        "/api/v1/runs",
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / name))},
        data={"project": project, "name": name, "metadata": json.dumps(metadata)},
    )
    assert response.status_code == 202, response.text
    body = wait_for_run(client, response.json()["id"])
    assert body["status"] == "ready", body["error"]
    return body["id"]


@pytest.fixture
def og2(client: TestClient, tmp_path: Path, project: str) -> tuple[int, int]:
    study = og2_boundary_study()
    return (
        upload(client, tmp_path, project, "og2-fl2", study.before, study.metadata),
        upload(client, tmp_path, project, "og2-fl4", study.after, study.metadata),
    )


def test_compare_says_the_problem_followed_the_boundary(client: TestClient, og2: tuple[int, int]) -> None:
    fl2, fl4 = og2
    body = client.get("/api/v1/compare", params={"base": fl2, "head": fl4}).json()
    assert body["comparable"] is True
    (moved,) = body["moved_problems"]
    assert (moved["base_blocks"], moved["head_blocks"], moved["side"]) == ([30], [28], "end")
    summary = "\n".join(body["summary"])
    assert "the problem followed the boundary" in summary
    assert "finding gone: Boundary effect" not in summary and "new finding: Boundary effect" not in summary
    recs = body["recommendations"]
    assert recs["head_history"]["previous_run"] == fl2 and len(recs["head_history"]["moved_problems"]) == 1
    assert [o["layer"] for o in recs["gemm_overrides"]["added"]] == [moved["head_layers"][0]]
    assert any(line.startswith("GEMM overrides") for line in body["summary"])


def test_recommendation_takes_previous_run_as_history(client: TestClient, og2: tuple[int, int]) -> None:
    fl2, fl4 = og2
    plain = client.get(f"/api/v1/runs/{fl4}/recommendation").json()
    assert plain["history"] is None
    posted = client.post(f"/api/v1/runs/{fl4}/recommendation", json={"previous_run": fl2}).json()
    assert posted["history"]["previous_run"] == fl2 and posted["history"]["added_bf16_blocks"]["end"] == [29, 30]
    assert any("do not widen the BF16 edge again" in line for line in posted["rationale"])
    got = client.get(f"/api/v1/runs/{fl4}/recommendation", params={"previous_run": fl2}).json()
    assert got["history"]["moved_problems"] == posted["history"]["moved_problems"]
    for bad in ("x", fl4, 0):
        response = client.post(f"/api/v1/runs/{fl4}/recommendation", json={"previous_run": bad})
        assert response.status_code == 400 and response.json()["error"] == "InvalidOverrides", bad
    assert client.post(f"/api/v1/runs/{fl4}/recommendation", json={"previous_run": 999999}).status_code == 404


def test_runs_without_a_common_layer_are_incomparable_up_front(
    client: TestClient, tmp_path: Path, project: str
) -> None:
    esm2 = upload(client, tmp_path, project, "esm2", SCENARIOS["healthy"].run, {})
    llama = upload(client, tmp_path, project, "llama", SCENARIOS["head_only"].run, {})
    body = client.get("/api/v1/compare", params={"base": esm2, "head": llama}).json()
    assert body["comparable"] is False and body["common_layers"] == 0
    assert body["summary"][0].startswith("incomparable: the runs have no layer in common")
    assert len(body["summary"]) == 1 and body["recommendations"] is None


def test_tiny_bases_are_compared_in_points_not_percent() -> None:
    group = {
        "group": "body",
        "layers": 4,
        "moved_to_bf16": [],
        "moved_to_fp8": [],
        "stats": {
            "gradient": {"base": 0.0, "head": 0.24, "relative": None},
            "activation": {"base": 1.2, "head": 0.79, "relative": (0.79 - 1.2) / 1.2},
            "weight": {"base": 0.1, "head": 0.1, "relative": 0.0},
        },
    }
    body = {
        "groups": [group],
        "findings_appeared": [],
        "findings_disappeared": [],
        "notes": [],
        "moved_problems": [],
        "comparable": True,
    }
    text = summary_sentences(body)
    assert "body gradient underflow +0.24 points (0.00% → 0.24%)" in text
    assert "body activation underflow −34% (mean 1.20% → 0.79%)" in text
    assert not any("25512" in line or "inf" in line for line in text)
