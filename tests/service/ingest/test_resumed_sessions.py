"""A resumed run whose debug API counts from 0 again: two timestamped sessions of one rank, the second restarting
at iteration 0. Merged by iteration number ("last value wins"), a problem only the second session shows used to
disappear under the first session's later values; the second session is now a later segment (offset), and the
analysis both finds the problem and says how the sessions were placed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient

from fp8_policy.policy.synthetic import SCENARIOS, Rule, Scenario, heads, level, write_run
from tests.conftest import wait_for_run
from tests.support.archives import meta_relpath, stats_relpath, tar_bytes

RUNS = "/api/v1/runs"


def test_a_problem_only_the_resumed_session_shows_is_found(client: TestClient, project: str, tmp_path: Path) -> None:
    first = replace(SCENARIOS["healthy"].run, iterations=400)
    second = replace(
        first, iterations=200, profile=Scenario((Rule(heads(), level((10.0, 12.0)), "gradient", "underflows%"),))
    )
    for name, run in (("s1", first), ("s2", second)):
        write_run(run, tmp_path / name)
    members = {
        stats_relpath(0, "20260101_080000"): (tmp_path / "s1" / stats_relpath(0)).read_bytes(),
        stats_relpath(0, "20260102_080000"): (tmp_path / "s2" / stats_relpath(0)).read_bytes(),
        meta_relpath(0): (tmp_path / "s1" / meta_relpath(0)).read_bytes(),
    }
    response = client.post(RUNS, files={"file": ("resumed.tar", tar_bytes(members))}, data={"project": project})
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run
    assert run["lines_duplicated"] == 0
    offsets = {f["path"]: f.get("iteration_offset") for f in run["ingest_report"]["files"] if f["kind"] == "stats"}
    assert offsets == {stats_relpath(0, "20260101_080000"): 0, stats_relpath(0, "20260102_080000"): 401}

    analysis = client.get(f"{RUNS}/{run['id']}/analysis").json()
    assert analysis["findings"][0]["severity"] == "severe" and "healthy" not in {
        f["pattern"] for f in analysis["findings"]
    }
    head = [f for f in analysis["findings"] if any("head" in layer for layer in f["layers"])]
    assert head, analysis["findings"]
    assert any("restarted its iteration counter" in note and "offset by 401" in note for note in analysis["notes"])
