"""Schema-driven fuzzing of the whole API with Schemathesis (https://schemathesis.readthedocs.io): requests
generated from the app's own OpenAPI document, sent over loopback HTTP to the real app under uvicorn on SQLite
with a few stored runs. Every response must be no 5xx, have a documented status and content type, and match its
documented schema.

Budget: FP8_POLICY_FUZZ_EXAMPLES examples per operation (default 10: about two minutes on the 2-core dev machine, seeding included); set it higher for a
longer hunt, e.g. `FP8_POLICY_FUZZ_EXAMPLES=500 pytest tests/service/hardening/test_openapi_fuzz.py`.
Generated run ids are mostly mapped onto the stored runs, so the operations behind a run are reached and not
just their 404. DELETE is left out (it would remove the runs the other operations need); tests/service cover it.
With no API token in the database the service is open on loopback; FP8_POLICY_FUZZ_TOKEN, when set, is sent as a
bearer token instead (for a database that has tokens).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.api_runs import NONFINITE_LAYERS, live_server, sqlite_client, sqlite_settings, upload_runs

EXAMPLES = int(os.environ.get("FP8_POLICY_FUZZ_EXAMPLES", "10"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
RUN_IDS: list[int] = []  # the stored runs, filled by the `server` fixture
CONFIGS: dict[int, int] = {}  # run id -> the id of the config kept with it
NONFINITE: list[int] = []  # the run of tests.support.api_runs.nonfinite_log (its layer names are known)
STATUSES: dict[str, set[int]] = {}  # "METHOD /path" -> statuses seen
# Operations the stored runs cannot make succeed, and why.
NO_SUCCESS_EXPECTED = {
    "POST /api/v1/runs/{run_id}/retry": "only a run that failed for a server-side reason (disk full, ...) can be "
    "retried; none exists here",
    # the stored runs are finished, not live: these answer 404/409 (tests/service/live/test_live_runs.py and
    # test_live_heatmap.py cover their successes)
    "PUT /api/v1/live/runs/{run_id}/files/{path}": "needs a live run",
    "POST /api/v1/live/runs/{run_id}/finalize": "needs a live run with a statistics log",
    "GET /api/v1/live/runs/{run_id}/heatmap.json": "needs a live run",
    "POST /api/v1/alerts/rules": "needs an http(s) webhook URL, which generated strings almost never are "
    "(tests/service/alerts/test_alerts.py)",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("fuzz")
    for client in sqlite_client(root):  # store the runs first, then serve the same database over HTTP
        ids = upload_runs(client, root, "fuzz")
        RUN_IDS[:], NONFINITE[:] = sorted(ids.values()), [ids["nonfinite"]]
        for name in ("u_shape", "rank_outlier", "overflow", "rising_trend", "nonfinite"):  # a kept config each
            kept = client.post(f"/api/v1/runs/{ids[name]}/configs", json={"formats": ["hydra"]})
            assert kept.status_code == 201, kept.text
            CONFIGS[ids[name]] = kept.json()["items"][0]["id"]
    with live_server(sqlite_settings(root)) as url:
        yield url


def _schema() -> schemathesis.schemas.BaseSchema:
    from fp8_policy.service.app import create_app
    from fp8_policy.service.settings import Settings

    document = create_app(Settings(_env_file=None)).openapi()  # the same document the server serves
    # DELETE would remove the runs the other operations need; token management would lock the API for the rest
    # of the run (tests/service cover both).
    return schemathesis.openapi.from_dict(document).exclude(method="DELETE").exclude(path_regex=r"^/api/v1/tokens")


schema = _schema()


def _known_run(value: object) -> object:
    """Most generated ids (small ones, as Hypothesis likes them) become stored runs; the rest stay as drawn."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 4 * len(RUN_IDS):
        return RUN_IDS[value % len(RUN_IDS)]
    return value


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_every_operation_answers_within_its_documented_schema(case, server: str) -> None:
    if case.path_parameters and "run_id" in case.path_parameters:
        case.path_parameters["run_id"] = _known_run(case.path_parameters["run_id"])
        if "config_id" in case.path_parameters and len(str(case.path_parameters["config_id"])) % 2 == 1:
            # half of the kept-config requests name a config with its own run (the others stay as drawn)
            run_id = min(CONFIGS)
            case.path_parameters.update(run_id=run_id, config_id=CONFIGS[run_id])
    if case.path.endswith("/series") and case.query and len(str(case.query.get("layer", ""))) % 2 == 0:
        # half of the series requests ask for a series that exists (with NaN and ±inf points)
        layer = NONFINITE_LAYERS[len(str(case.query.get("tensor", ""))) % len(NONFINITE_LAYERS)]
        if case.path_parameters and "run_id" in case.path_parameters:
            case.path_parameters["run_id"] = NONFINITE[0]
        else:  # /compare/series: the run with that layer and another one
            case.query["runs"] = f"{NONFINITE[0]},{RUN_IDS[0]}"
        case.query.update(layer=layer, tensor="gradient", stat="underflows%")
    if case.query:
        for name in ("base", "head"):
            if name in case.query:
                case.query[name] = _known_run(case.query[name])
        runs = case.query.get("runs")
        if isinstance(runs, str) and len(runs) % 2 == 0 and not case.path.endswith("/series"):
            # half of the compare requests name 2-8 of the stored runs (the others stay as drawn)
            count = 2 + len(runs) % 7
            case.query["runs"] = ",".join(str(run_id) for run_id in RUN_IDS[:count])
    token = os.environ.get("FP8_POLICY_FUZZ_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    with requests.Session() as session:
        response = case.call_and_validate(base_url=server, session=session, headers=headers, checks=CHECKS, timeout=60)
    STATUSES.setdefault(f"{case.method} {case.path}", set()).add(response.status_code)


def test_the_fuzzer_reached_every_operation_with_a_success() -> None:
    """Runs after the fuzz test above: a fuzzer that only ever saw 404s and 400s would prove nothing."""
    if not STATUSES:
        pytest.skip("the fuzz test did not run in this session")
    operations = {f"{op.method.upper()} {op.path}" for op in (result.ok() for result in schema.get_all_operations())}
    never = sorted(
        op
        for op in operations - set(NO_SUCCESS_EXPECTED)
        if not any(200 <= code < 300 for code in STATUSES.get(op, ()))
    )
    assert not never, f"no generated request succeeded on {never}; statuses seen: {STATUSES}"
