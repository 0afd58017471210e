"""GET /api/v1/compare/runs, /compare/series and /compare/scalars: 2-8 runs side by side (issue 21 item 4).

The planted before/after pair (lm_head moved to BF16, body gradient 1.2 % -> 0.8 %) plus a third run whose body
is hot (2.6 %), which uploads training scalars with its logs (scalars.jsonl at the archive root), compared in the
order asked for; bad selections are 400 `InvalidRunSelection`, unknown ids one 404, a run not ready one 409.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from fp8_policy.policy.synthetic import write_run
from tests.conftest import wait_for_run
from tests.support.archives import tree_tar_gz
from tests.support.planted_pair import HEAD, before_after_runs

BODY = "model.model.layers.1.self_attention.proj"
STEPS = list(range(0, 200, 10))


@pytest.fixture(scope="module")
def hot(visual_client, tmp_path_factory) -> int:
    """A third run of the same model: its body's gradient underflow at 2.6 % (critical), with a loss curve."""
    before, _ = before_after_runs()
    run = dataclasses.replace(_with_body_level(before, 2.6), seed=5)
    root: Path = tmp_path_factory.mktemp("hot")
    write_run(run, root)
    lines = [json.dumps({"step": s, "loss": 10.0 - s / 40, "grad_norm": 1.0}) for s in STEPS]
    (root / "scalars.jsonl").write_text("\n".join(lines) + "\n")
    response = visual_client.post(
        "/api/v1/runs",
        files={"file": ("hot.tgz", tree_tar_gz(root))},
        data={"name": "hot", "project": f"visual-{uuid.uuid4().hex}"},
    )
    assert response.status_code == 202, response.text
    body = wait_for_run(visual_client, response.json()["id"], timeout=120)
    assert body["status"] == "ready", body
    return body["id"]


def _with_body_level(run, body: float):
    from fp8_policy.policy.synthetic import Rule, Scenario, first_blocks, heads, level

    rules = (
        Rule(heads(), level((6.0, 10.0), noise=0.05), "gradient", "underflows%"),
        Rule(heads(), level((2.5, 4.0), noise=0.05), "activation", "underflows%"),
        Rule(first_blocks(run.num_layers), level(body, noise=0.02), "gradient", "underflows%"),
    )
    return dataclasses.replace(run, profile=Scenario(rules))


def rows(body: dict) -> dict:
    return {row["key"]: row for row in body["table"]}


def test_three_runs_side_by_side_in_the_order_asked(visual_client, planted, hot) -> None:
    ids = [planted.after, planted.before, hot]
    response = visual_client.get("/api/v1/compare/runs", params={"runs": ",".join(map(str, ids))})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [run["id"] for run in body["runs"]] == ids
    assert [run["name"] for run in body["runs"]] == ["after", "before", "hot"]
    assert body["comparable"] and body["common_layers"] == 25

    table = rows(body)
    # lm_head ran in BF16 in `after` only; `before` and `hot` are told to move it there
    assert table["ran_bf16"]["values"] == [[HEAD], [], []] and table["ran_bf16"]["matches_first"] == [
        True,
        False,
        False,
    ]
    assert table["to_bf16"]["values"][0] == [] and HEAD in table["to_bf16"]["values"][1]
    assert table["to_bf16"]["differs"] and table["severity"]["differs"]
    assert {run["id"]: run["severity"] for run in body["runs"]}[hot] in ("critical", "severe")
    assert not table["trained_recipe"]["differs"]

    head = next(row for row in body["layers"] if row["name"] == HEAD)
    assert [cell["logged"] for cell in head["cells"]] == ["bf16", "fp8", "fp8"]
    assert head["cells"][0]["recommended"] == "bf16" and head["differs"] and head["notable"]
    assert body["focus"] and body["focus"]["layer"] in {row["name"] for row in body["layers"]}
    assert {"tensor": "gradient", "stat": "underflows%", "runs": 3} in body["metrics"]
    assert any(s.startswith("verdicts differ:") for s in body["summary"])

    # the two-run URL form keeps working and answers the same table for the same runs
    two = visual_client.get(f"/api/v1/compare/runs?runs={planted.before}&runs={planted.after}").json()
    assert [run["id"] for run in two["runs"]] == [planted.before, planted.after]


def test_a_layer_stat_overlays_every_run_on_one_iteration_axis(visual_client, planted, hot) -> None:
    query = {
        "runs": f"{planted.before},{planted.after},{hot}",
        "layer": BODY,
        "tensor": "gradient",
        "stat": "underflows%",
    }
    body = visual_client.get("/api/v1/compare/series", params=query).json()
    assert body["iterations"] == sorted(set(body["iterations"])) and body["grouped"] == 1
    before, after, hot_run = body["runs"]
    assert all(len(run["values"]) == len(body["iterations"]) and run["missing"] is None for run in body["runs"])
    mean = lambda run: sum(v for v in run["values"] if v is not None) / run["points"]  # noqa: E731
    assert mean(after) < mean(before) < mean(hot_run)
    assert mean(before) == pytest.approx(1.2, abs=0.1) and mean(hot_run) == pytest.approx(2.6, abs=0.1)

    # lm_head in BF16 logged no gradient underflows% in `after`: no line, and why
    query["layer"] = HEAD
    body = visual_client.get("/api/v1/compare/series", params=query).json()
    assert body["runs"][1]["missing"] == "no gradient underflows% logged for this layer"
    assert body["runs"][1]["values"] == [None] * len(body["iterations"]) and body["runs"][0]["points"] > 0

    query["layer"] = "model.no_such_layer"
    response = visual_client.get("/api/v1/compare/series", params=query)
    assert response.status_code == 404 and response.json()["error"] == "NotFound"


def test_the_loss_overlays_where_runs_recorded_it_and_says_so_where_not(visual_client, planted, hot) -> None:
    body = visual_client.get("/api/v1/compare/scalars", params={"runs": f"{planted.before},{hot}"}).json()
    assert body["name"] == "loss" and body["iterations"] == STEPS
    before, hot_run = body["runs"]
    assert before["missing"] == "no training scalars recorded" and before["recorded"] == []
    assert hot_run["missing"] is None and hot_run["recorded"] == ["loss", "grad_norm"]
    assert hot_run["values"] == [10.0 - s / 40 for s in STEPS]
    lr = visual_client.get("/api/v1/compare/scalars", params={"runs": f"{planted.before},{hot}", "name": "lr"}).json()
    assert lr["runs"][1]["missing"] == "no lr recorded"
    bad = visual_client.get("/api/v1/compare/scalars", params={"runs": f"{planted.before},{hot}", "name": "bogus"})
    assert bad.status_code == 400 and bad.json()["error"] == "InvalidParameter"


@pytest.mark.parametrize(
    ("runs", "detail"),
    [
        (None, "missing parameter 'runs'"),
        ("{a}", "compare takes 2-8 runs; got 1"),
        ("{a},{a}", "given more than once"),
        (",".join(str(k) for k in range(1, 10)), "at most 8 runs; got 9"),
        ("{a},x", "run ids (positive integers)"),
        ("{a},,{b}", "run ids (positive integers)"),
        ("{a},-1", "run ids (positive integers)"),
    ],
)
def test_a_bad_selection_is_a_400_that_says_what_to_change(visual_client, planted, runs, detail) -> None:
    params = {} if runs is None else {"runs": runs.format(a=planted.before, b=planted.after)}
    for path in ("/api/v1/compare/runs", "/api/v1/compare/scalars"):
        response = visual_client.get(path, params=params)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "InvalidRunSelection" and detail in response.json()["detail"]


def test_unknown_runs_are_one_404_and_runs_not_ready_one_409(visual_client, planted, project) -> None:
    response = visual_client.get("/api/v1/compare/runs", params={"runs": f"{planted.before},99999998,99999999"})
    assert response.status_code == 404 and response.json() == {
        "error": "NotFound",
        "detail": "no run 99999998, 99999999",
    }

    live = visual_client.post("/api/v1/live/runs", json={"project": project, "name": "still training"})
    assert live.status_code == 201, live.text
    live_id = live.json()["id"]
    for path in ("/api/v1/compare/runs", "/api/v1/compare/scalars"):
        response = visual_client.get(path, params={"runs": f"{planted.before},{live_id}"})
        assert response.status_code == 409, response.text
        body = response.json()
        assert body["error"] == "NotReady" and f"run {live_id} is live" in body["detail"]

    response = visual_client.get(
        "/api/v1/compare/runs", params={"runs": f"{planted.before},{planted.after}", "base": 1}
    )
    assert response.status_code == 400 and response.json()["error"] == "UnknownParameter"


def test_the_routes_document_their_parameters(visual_client) -> None:
    document = visual_client.get("/openapi.json").json()["paths"]
    names = {
        path: {p["name"] for p in document[f"/api/v1/compare/{path}"]["get"]["parameters"]}
        for path in ("runs", "series", "scalars")
    }
    assert names == {"runs": {"runs"}, "series": {"runs", "layer", "tensor", "stat"}, "scalars": {"runs", "name"}}


def test_compare_links_open_the_dashboards_compare_view(visual_client) -> None:
    response = visual_client.get("/compare?runs=3,5,9&junk=1", follow_redirects=False)
    assert response.status_code == 307 and response.headers["location"] == "/#/compare?runs=3,5,9"
    old = visual_client.get("/compare?base=3&head=5", follow_redirects=False)
    assert old.headers["location"] == "/#/compare?base=3&head=5"


def key_paths(value, path: str = "$") -> set[str]:
    """Every key path of a JSON value (lists: the union over their items)."""
    if isinstance(value, dict):
        return {f"{path}.{k}" for k in value} | {p for k, v in value.items() for p in key_paths(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {p for item in value for p in key_paths(item, f"{path}[]")}
    return set()


def test_the_response_carries_every_key_the_comparison_builds(visual_client, planted, hot) -> None:
    """FastAPI drops keys the response models do not declare: extend service/compare/schemas.py."""
    from fp8_policy.service.compare import actions

    state, ids = visual_client.app.state, [planted.after, planted.before, hot]
    with state.unit_of_work() as session:
        built = actions.compare_runs(session, state.session_factory, state.recommendations, ids)
        series = actions.compare_series(session, ids, HEAD, "gradient", "underflows%")
        scalars = actions.compare_scalars(
            session, actions.scalar_reader(state.ingest.store, state.settings.data_dir), ids, "loss"
        )
    runs = ",".join(map(str, ids))
    answers = [
        (built, visual_client.get("/api/v1/compare/runs", params={"runs": runs})),
        (
            series,
            visual_client.get(
                "/api/v1/compare/series",
                params={"runs": runs, "layer": HEAD, "tensor": "gradient", "stat": "underflows%"},
            ),
        ),
        (scalars, visual_client.get("/api/v1/compare/scalars", params={"runs": runs})),
    ]
    for expected, response in answers:
        assert response.status_code == 200, response.text
        assert key_paths(json.loads(json.dumps(expected, default=str))) == key_paths(response.json())
