"""Attack replay, bounds (SQLite and PostgreSQL): one small request could kill or starve the service; now each is a
4xx naming its bound, and nothing is allocated in proportion to a number a client sent.

* `{"model_dims": {"num_layers": 10**18}}` to POST .../recommendation grew the process to 23 GB until the kernel
  killed it (`set(range(num_layers))`); now 400 naming MAX_NUM_LAYERS. The same number in an upload's metadata made
  a `ready` run whose analysis, recommendation, compare and the runs list's summary all allocated until they failed;
  now the metadata is ignored and the analysis and the recommendation say so.
* JSON bodies had no cap (128 MiB to /recommendation: 81 MB -> 1.94 GB); now 413 BodyTooLarge past 1 MiB, from the
  Content-Length or while a chunked body is read, on every route but the uploads.
* `previous_run=²` was a 500 (`str.isdigit()` takes it, `int()` refuses it); on PostgreSQL `events?before=` /
  `?after=` between 2^31 and 2^62 was a 500 (int4 ids); now 400 / 422 naming the bound.
* A DNS-rebinding page (a foreign Host and its matching Origin) read runs, created a webhook, edited a run and
  minted an admin token of an open service; now 403 HostNotAllowed unless the name is configured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from fp8_policy.policy.model_bounds import MAX_NUM_LAYERS
from fp8_policy.service.app import create_app
from fp8_policy.service.limits import MAX_BODY_BYTES, MAX_ROW_ID
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.service.scalars.test_uploaded_scalars import logs
from tests.support.archives import tar_bytes
from tests.support.authutil import BACKENDS, bearer, make_token, private_database
from tests.support.dbutil import insert_run

RUNS = "/api/v1/runs"
HUGE = 10**18
TOO_BIG = b"{" + b" " * (MAX_BODY_BYTES + 10) + b"}"


def ready_run(client: TestClient, project: str, metadata: dict | None = None, marker: int = 0) -> dict:
    members = {**logs(), "notes.txt": str(marker).encode()}
    data = {"project": project, **({"metadata": json.dumps(metadata)} if metadata else {})}
    response = client.post(RUNS, data=data, files={"file": ("logs.tar.gz", tar_bytes(members))})
    assert response.status_code == 202, response.text
    body = wait_for_run(client, response.json()["id"])
    assert body["status"] == "ready", body
    return body


class TestModelDimensions:
    def test_a_request_past_the_bound_is_400_naming_it(self, client: TestClient, project: str) -> None:
        run = ready_run(client, project)
        for dims in ({"num_layers": HUGE}, {"n_layer": MAX_NUM_LAYERS + 1}, {"hidden_size": 2**62}):
            answer = client.post(f"{RUNS}/{run['id']}/recommendation", json={"model_dims": dims})
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == "InvalidOverrides" and "must be at most" in answer.json()["detail"]
        assert "10,000" in client.post(f"{RUNS}/{run['id']}/recommendation", json={"num_layers": HUGE}).text

    def test_metadata_past_the_bound_is_ignored_with_a_note_everywhere(self, client: TestClient, project: str) -> None:
        run = ready_run(client, project, {"num_layers": HUGE, "hidden_size": 1280})
        other = ready_run(client, project, marker=1)
        note = "'num_layers' must be at most 10,000"

        analysis = client.get(f"{RUNS}/{run['id']}/analysis")
        recommendation = client.get(f"{RUNS}/{run['id']}/recommendation")
        recomputed = client.post(f"{RUNS}/{run['id']}/recommendation", json={"thresholds": {"critical": 3.0}})
        compared = client.get("/api/v1/compare", params={"base": other["id"], "head": run["id"]})
        listed = client.get(RUNS, params={"project": project})

        assert analysis.status_code == 200 and any(note in n for n in analysis.json()["notes"]), analysis.text
        for answer in (recommendation, recomputed):
            assert answer.status_code == 200 and any(note in line for line in answer.json()["rationale"])
        assert compared.status_code == 200, compared.text
        assert listed.status_code == 200 and {r["id"] for r in listed.json()["items"]} == {run["id"], other["id"]}


class TestBodies:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/api/v1/runs/1/recommendation"),
            ("PATCH", "/api/v1/runs/1"),
            ("POST", "/api/v1/alerts/rules"),
            ("POST", "/api/v1/tokens"),
            ("POST", "/api/v1/live/runs"),
        ],
    )
    def test_a_body_over_the_cap_is_413_before_it_is_parsed(self, client: TestClient, method: str, path: str) -> None:
        declared = client.request(method, path, content=TOO_BIG, headers={"Content-Type": "application/json"})
        chunked = client.request(
            method,
            path,
            content=iter([TOO_BIG[: len(TOO_BIG) // 2], TOO_BIG[len(TOO_BIG) // 2 :]]),
            headers={"Content-Type": "application/json"},
        )
        for answer in (declared, chunked):
            assert answer.status_code == 413, answer.text
            assert answer.json()["error"] == "BodyTooLarge" and str(MAX_BODY_BYTES) in answer.json()["detail"]
            assert answer.headers["connection"] == "close"

    def test_uploads_keep_their_own_larger_limit(self, client: TestClient, project: str) -> None:
        members = {**logs(), "padding.bin": bytes(range(256)) * (MAX_BODY_BYTES // 128)}  # 2 MiB, incompressible
        response = client.post(RUNS, data={"project": project}, files={"file": ("logs.tar", tar_bytes(members))})
        assert response.status_code == 202, response.text
        assert wait_for_run(client, response.json()["id"])["status"] == "ready"


class TestIds:
    def test_previous_run_must_be_ascii_digits_within_the_id_column(self, client: TestClient, project: str) -> None:
        run_id = ready_run(client, project)["id"]
        for value in ("²", "٣", "12a", str(MAX_ROW_ID + 1), "99999999999999999999"):
            by_get = client.get(f"{RUNS}/{run_id}/recommendation", params={"previous_run": value})
            by_post = client.post(f"{RUNS}/{run_id}/recommendation", json={"previous_run": value})
            for answer in (by_get, by_post):
                assert answer.status_code == 400, (value, answer.text)
                assert answer.json()["error"] == "InvalidOverrides" and str(MAX_ROW_ID) in answer.json()["detail"]

    def test_event_cursors_past_the_id_column_are_4xx_not_500(self, client: TestClient, project: str) -> None:
        live = client.post("/api/v1/live/runs", json={"project": project}).json()["id"]
        for value in (2**31, 2**40, 2**62):
            for path, key in ((f"/api/v1/live/runs/{live}/events", "before"), (f"/api/v1/live/runs/{live}", "after")):
                answer = client.get(path, params={key: value})
                assert answer.status_code == 422 and "2147483647" in answer.text, (path, key, value, answer.text)
        assert client.get(f"/api/v1/live/runs/{live}/events", params={"before": MAX_ROW_ID}).status_code == 200
        assert client.get(f"/api/v1/live/runs/{live}", params={"after": MAX_ROW_ID}).status_code == 200

    def test_a_mark_iteration_past_bigint_is_400(self, client: TestClient, db_engine: Engine, project: str) -> None:
        run_id = insert_run(db_engine, project, status="ready")
        answer = client.get(f"{RUNS}/{run_id}/heatmap.json", params={"mark_iteration": str(10**30)})
        assert answer.status_code == 400 and answer.json()["error"] == "InvalidParameter", answer.text


REBINDING = {"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}


class TestDnsRebinding:
    def test_a_foreign_host_is_refused_on_every_kind_of_route(
        self, client: TestClient, db_engine: Engine, project: str
    ) -> None:
        run_id = ready_run(client, project)["id"]
        attempts = [
            client.get(RUNS, headers=REBINDING),
            client.get(f"{RUNS}/{run_id}/analysis", headers=REBINDING),
            client.patch(f"{RUNS}/{run_id}", json={"notes": "owned"}, headers=REBINDING),
            client.post(
                "/api/v1/alerts/rules",
                json={"project": project, "webhook": "https://hooks.example/x"},
                headers=REBINDING,
            ),
            client.post("/api/v1/tokens", json={"name": f"t-{project[-8:]}", "scope": "admin"}, headers=REBINDING),
            client.delete(f"{RUNS}/{run_id}", headers=REBINDING),
        ]
        for answer in attempts:
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"] == "HostNotAllowed" and "FP8_POLICY_ALLOWED_HOSTS" in answer.json()["detail"]
        with db_engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM api_tokens")).scalar() == 0
            assert connection.execute(text("SELECT notes FROM runs WHERE id = :id"), {"id": run_id}).scalar() is None

    @pytest.mark.parametrize(
        "host",
        ["localhost", "localhost:8000", "app.localhost", "127.0.0.1:8000", "[::1]:8000", "10.1.2.3", "LOCALHOST."],
    )
    def test_this_machines_names_and_addresses_are_answered(self, client: TestClient, host: str) -> None:
        assert client.get(RUNS, headers={"Host": host}).status_code == 200

    def test_the_operator_names_more_hosts(self, make_client) -> None:
        named = make_client(allowed_hosts=["fp8.internal"])
        assert named.get(RUNS, headers={"Host": "fp8.internal:8000"}).status_code == 200
        assert named.get(RUNS, headers={"Host": "evil.example"}).status_code == 403
        anything = make_client(allowed_hosts=["*"])
        assert anything.get(RUNS, headers={"Host": "evil.example"}).status_code == 200


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_a_token_the_host_is_not_what_guards_the_service(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A rebinding page has no token: once tokens exist, a request with one is answered whatever its Host, and one
    without is 401 as before (not 403 HostNotAllowed)."""
    url = private_database(backend, request, tmp_path)
    _, token = make_token(url, "read")
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url)
    with TestClient(create_app(settings)) as client:
        assert client.get(RUNS, headers={**REBINDING, **bearer(token)}).status_code == 200
        assert client.get(RUNS, headers=REBINDING).status_code == 401
