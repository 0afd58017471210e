"""Browser-facing protection (issue 9 item 11), on SQLite and PostgreSQL.

A web page on another site — or another port of the same host — must not be able to upload, delete or recompute
through a user's browser: such requests carry an `Origin` (or `Sec-Fetch-Site: cross-site`) and are refused with
403 before anything is read or stored. Same-origin pages and clients that send no Origin (curl, the Python
client) work as before. Every response carries `X-Content-Type-Options: nosniff`; HTML pages a CSP without inline
script and with `frame-ancestors 'none'`.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.conftest import wait_for_run
from tests.support.archives import stats_log
from tests.support.dbutil import runs_of_project

RUNS = "/api/v1/runs"
GOOD = stats_log([("model.layers.1.fc1_activation_underflows%", it, it / 100) for it in range(0, 50, 10)])
OWN = "http://localhost"  # the suite's TestClient Host (tests/conftest.py TEST_BASE_URL)


def post_upload(client: TestClient, project: str, **headers: str):
    return client.post(
        RUNS, files={"file": ("run.log", GOOD, "text/plain")}, data={"project": project}, headers=headers
    )


class TestCrossSiteStateChangesAreRefused:
    @pytest.mark.parametrize(
        "origin",
        [
            "http://evil.example",
            "https://evil.example",
            "http://localhost:8080",
            "http://localhost.evil.example",
            "null",
            "not a url",
        ],
    )
    def test_upload_from_another_origin_is_403_and_stores_nothing(
        self, client: TestClient, db_engine: Engine, project: str, origin: str
    ) -> None:
        response = post_upload(client, project, Origin=origin)

        assert response.status_code == 403
        body = response.json()
        assert body["error"] == "CrossOriginRequest" and set(body) == {"error", "detail"}
        assert response.headers["x-content-type-options"] == "nosniff"
        assert runs_of_project(db_engine, project) == []

    @pytest.mark.parametrize("site", ["cross-site", "same-site"])
    def test_upload_marked_cross_site_by_fetch_metadata_is_403(
        self, client: TestClient, db_engine: Engine, project: str, site: str
    ) -> None:
        response = post_upload(client, project, **{"Sec-Fetch-Site": site})

        assert (response.status_code, response.json()["error"]) == (403, "CrossOriginRequest")
        assert runs_of_project(db_engine, project) == []

    def test_delete_and_recompute_from_another_origin_are_403(self, client: TestClient, project: str) -> None:
        run_id = wait_for_run(client, post_upload(client, project).json()["id"])["id"]
        evil = {"Origin": "http://evil.example"}

        deleted = client.delete(f"{RUNS}/{run_id}", headers=evil)
        recomputed = client.post(f"{RUNS}/{run_id}/recommendation", json={}, headers=evil)
        retried = client.post(f"{RUNS}/{run_id}/retry", headers=evil)

        assert [r.status_code for r in (deleted, recomputed, retried)] == [403, 403, 403]
        assert client.get(f"{RUNS}/{run_id}").json()["status"] == "ready"

    def test_reads_from_another_origin_still_answer(self, client: TestClient) -> None:
        response = client.get(RUNS, headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})

        assert response.status_code == 200
        assert "access-control-allow-origin" not in response.headers  # and the page cannot read it


class TestLegitimateWritesStillWork:
    @pytest.mark.parametrize(
        "headers",
        [
            {},  # curl, the Python client, CI
            {"Origin": OWN, "Sec-Fetch-Site": "same-origin"},  # the dashboard
            {"Origin": "HTTP://LOCALHOST:80"},
            {"Origin": "https://localhost"},  # behind a TLS-terminating proxy the service sees http
            {"Sec-Fetch-Site": "none"},  # typed by the user
        ],
        ids=["no-origin", "same-origin", "same-origin-explicit-port", "tls-proxy", "user-initiated"],
    )
    def test_upload_is_accepted(self, client: TestClient, project: str, headers: dict[str, str]) -> None:
        assert post_upload(client, project, **headers).status_code == 202

    def test_an_allowed_origin_may_upload(self, make_client, project: str) -> None:
        client = make_client(allowed_origins=["https://ci.example:8443"])

        assert post_upload(client, project, Origin="https://ci.example:8443").status_code == 202
        assert post_upload(client, project + "x", Origin="https://ci.example").status_code == 403


class TestSecurityHeaders:
    @pytest.mark.parametrize("path", [RUNS, f"{RUNS}/2147483647", "/healthz", "/openapi.json"])
    def test_api_responses_are_nosniff(self, client: TestClient, path: str) -> None:
        assert client.get(path).headers["x-content-type-options"] == "nosniff"

    @pytest.mark.parametrize("path", ["/", "/docs"])
    def test_html_pages_carry_a_csp_without_inline_script_and_no_framing(self, client: TestClient, path: str) -> None:
        response = client.get(path)

        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        policy = dict(part.strip().split(" ", 1) for part in response.headers["content-security-policy"].split(";"))
        assert policy["script-src"] == "'self'"
        assert "unsafe-inline" not in response.headers["content-security-policy"]
        assert policy["frame-ancestors"] == "'none'"
        assert policy["object-src"] == "'none'"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "<script>" not in response.text and " style=" not in response.text  # nothing inline to allow

    def test_json_responses_carry_no_csp(self, client: TestClient) -> None:
        assert "content-security-policy" not in client.get(RUNS).headers
