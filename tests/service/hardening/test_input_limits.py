"""Every input is checked at the edge with the same limits on SQLite and PostgreSQL (issue 9, items 1 and 9).

Values that used to reach the database or the JSON encoder and answer 500 (or, worse, store a run that then broke
`GET /api/v1/runs` for everyone) are refused with a 4xx `{"error", "detail"}` and store nothing; a run that is
already stored always serializes, whatever its metadata holds.
"""

from __future__ import annotations

import io
import json
import tarfile

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from fp8_policy.service.limits import MAX_METADATA_DEPTH, MAX_ROW_ID
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import stats_log, stats_relpath, tar_bytes
from tests.support.dbutil import files_under, insert_run, runs_of_project

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])
BIG = 2**63


def upload(client: TestClient, project: str, data: bytes = GOOD, **fields: str) -> httpx.Response:
    return client.post(RUNS, files={"file": ("run.log", data, "text/plain")}, data={"project": project, **fields})


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def assert_refused(
    response: httpx.Response, status: int, error: str, settings: Settings, db_engine: Engine, project: str
) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"} and body["error"] == error, body
    assert runs_of_project(db_engine, project) == []
    assert files_under(settings.data_dir / "runs") == set()
    assert files_under(settings.data_dir / "uploads") == set()


class TestMetadataThatCannotRoundTripIsRefused:
    @pytest.mark.parametrize(
        "metadata",
        [
            pytest.param('{"a": "\\ud800"}', id="lone-surrogate-value"),
            pytest.param('{"\\udfff": 1}', id="lone-surrogate-key"),
            pytest.param('{"a": "x\\u0000y"}', id="nul-in-value"),
            pytest.param('{"a\\u0000": 1}', id="nul-in-key"),
            pytest.param(nested(300), id="depth-300"),
            pytest.param(nested(1000), id="depth-1000-recursion"),
            pytest.param(nested(10_000), id="depth-10000"),
            pytest.param('{"a": ' + "1" * 5000 + "}", id="int-5000-digits"),
            pytest.param('{"a": ' + str(BIG) + "}", id="int-2^63"),
            pytest.param('{"a": -' + str(BIG + 1) + "}", id="int-below-minus-2^63"),
            pytest.param('{"a": NaN}', id="nan"),
            pytest.param('{"a": -Infinity}', id="infinity"),
            pytest.param('{"a": 1e400}', id="float-overflow"),
            pytest.param("[1, 2]", id="not-an-object"),
            pytest.param('{"a": ', id="not-json"),
        ],
    )
    def test_refused_with_400_and_nothing_stored(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str, metadata: str
    ) -> None:
        response = upload(client, project, metadata=metadata)

        assert_refused(response, 400, "BadRequest", app_settings, db_engine, project)
        listing = client.get(RUNS, params={"project": project})
        assert (listing.status_code, listing.json()) == (200, {"items": [], "next_cursor": None})

    def test_metadata_as_query_parameter_is_checked_the_same_way(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        response = client.post(
            RUNS,
            params={"project": project, "metadata": '{"a": "\\ud800"}'},
            content=GOOD,
            headers={"Content-Type": "text/plain"},
        )

        assert_refused(response, 400, "BadRequest", app_settings, db_engine, project)

    def test_metadata_at_the_limits_is_stored_and_reads_back_equal(self, client: TestClient, project: str) -> None:
        metadata = {
            "deep": json.loads(nested(MAX_METADATA_DEPTH - 1)),
            "max": BIG - 1,
            "min": -BIG,
            "pi": 3.25,
            "text": "café ✓ \U0001f600",
            "none": None,
            "list": [1, "x", [True]],
        }

        response = upload(client, project, metadata=json.dumps(metadata))

        assert response.status_code == 202, response.text
        assert response.json()["metadata"] == metadata
        assert client.get(f"{RUNS}/{response.json()['id']}").json()["metadata"] == metadata
        assert [r["metadata"] for r in client.get(RUNS, params={"project": project}).json()["items"]] == [metadata]


class TestStoredRunsAlwaysSerialize:
    """Runs stored before the edge checks existed (or behind the API's back) must not break any listing."""

    @pytest.mark.parametrize(
        ("stored", "sqlite_only"),
        [
            pytest.param(nested(400), False, id="depth-400"),
            pytest.param('{"a": "x\\u0000y", "b": [' + "[" * 200 + "]" * 200 + "]}", False, id="nul-and-deep-list"),
            pytest.param('{"a": "\\ud800", "\\udc80": 1}', True, id="lone-surrogates"),
        ],
    )
    def test_list_and_read_answer_200(
        self, client: TestClient, db_engine: Engine, project: str, stored: str, sqlite_only: bool
    ) -> None:
        if sqlite_only and db_engine.dialect.name != "sqlite":
            pytest.skip("PostgreSQL's json type refuses lone surrogates itself")
        run_id = insert_run(db_engine, project, status="failed")
        with db_engine.begin() as connection:
            cast = "CAST(:m AS json)" if db_engine.dialect.name == "postgresql" else ":m"
            connection.execute(text(f"UPDATE runs SET metadata = {cast} WHERE id = :id"), {"m": stored, "id": run_id})

        listing = client.get(RUNS, params={"project": project})
        single = client.get(f"{RUNS}/{run_id}")
        home = client.get(RUNS)

        assert listing.status_code == single.status_code == home.status_code == 200
        assert [r["id"] for r in listing.json()["items"]] == [run_id]
        assert isinstance(single.json()["metadata"], dict)
        json.dumps(single.json(), allow_nan=False).encode("utf-8")  # strict JSON, valid UTF-8


class TestNamesProjectsAndTags:
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("name", "a\x00b"),
            ("project", "p\x00"),
            ("tags", "ok,t\x00g"),
            ("name", "bell\x07"),
        ],
    )
    def test_control_characters_are_400_on_both_databases(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str, field: str, value: str
    ) -> None:
        fields = {"project": project, field: value if field != "project" else project + value}

        response = client.post(RUNS, files={"file": ("run.log", GOOD, "text/plain")}, data=fields)

        assert_refused(response, 400, "BadRequest", app_settings, db_engine, project)

    @pytest.mark.parametrize("query", ["project=a%00b", "tag=x%00", "status=ready&project=%00"])
    def test_nul_in_list_filters_is_400(self, client: TestClient, query: str) -> None:
        response = client.get(f"{RUNS}?{query}")

        assert response.status_code == 400
        assert response.json()["error"] == "InvalidParameter"

    def test_nul_in_series_parameters_is_400(self, client: TestClient, project: str) -> None:
        run_id = wait_for_run(client, upload(client, project).json()["id"])["id"]

        response = client.get(f"{RUNS}/{run_id}/series?layer=a%00&tensor=activation&stat=underflows%25")

        assert response.status_code == 400
        assert response.json()["error"] == "InvalidParameter"

    def test_control_characters_in_the_file_name_are_replaced_not_stored(
        self, client: TestClient, db_engine: Engine, project: str
    ) -> None:
        body = (
            b'--B\r\nContent-Disposition: form-data; name="project"\r\n\r\n'
            + project.encode()
            + b'\r\n--B\r\nContent-Disposition: form-data; name="file"; filename="a\x00b.log"\r\n'
            b"Content-Type: text/plain\r\n\r\n" + GOOD + b"\r\n--B--\r\n"
        )  # httpx would escape the NUL
        response = client.post(RUNS, content=body, headers={"Content-Type": "multipart/form-data; boundary=B"})

        assert response.status_code == 202, response.text
        assert response.json()["upload_filename"] == "a\ufffdb.log"
        assert response.json()["name"] == "a\ufffdb"  # an unnamed upload is named after its (cleaned) file name
        assert wait_for_run(client, response.json()["id"])["status"] == "ready"


class TestRunIdsCursorsAndRanks:
    @pytest.mark.parametrize("run_id", [BIG, 2**31, MAX_ROW_ID + 1, 10**30])
    @pytest.mark.parametrize(
        "endpoint",
        [
            "",
            "/layers",
            "/series?layer=a&tensor=b&stat=c",
            "/metrics.csv",
            "/analysis",
            "/recommendation",
            "/heatmap.json",
        ],
    )
    def test_run_id_beyond_the_id_column_is_404(self, client: TestClient, run_id: int, endpoint: str) -> None:
        response = client.get(f"{RUNS}/{run_id}{endpoint}")

        assert response.status_code == 404, response.text
        assert response.json() == {"error": "NotFound", "detail": f"run {run_id} does not exist"}

    def test_delete_of_a_huge_run_id_is_404(self, client: TestClient) -> None:
        assert client.delete(f"{RUNS}/{BIG}").status_code == 404

    @pytest.mark.parametrize("which", ["base", "head"])
    def test_compare_with_a_huge_run_id_is_404(self, client: TestClient, which: str) -> None:
        params = {"base": MAX_ROW_ID, "head": MAX_ROW_ID, which: BIG}

        assert client.get("/api/v1/compare", params=params).status_code == 404

    @pytest.mark.parametrize("cursor", ["²", "١٢", str(BIG), str(MAX_ROW_ID + 1), "1" * 5000, "-1", " 1"])
    def test_bad_cursor_is_400(self, client: TestClient, cursor: str) -> None:
        response = client.get(RUNS, params={"cursor": cursor})

        assert response.status_code == 400, response.text
        assert response.json()["error"] == "BadRequest"

    def test_cursor_at_the_limit_is_accepted(self, client: TestClient, project: str) -> None:
        run_id = upload(client, project).json()["id"]

        page = client.get(RUNS, params={"cursor": str(MAX_ROW_ID), "project": project})

        assert page.status_code == 200
        assert [r["id"] for r in page.json()["items"]] == [run_id]

    @pytest.mark.parametrize("rank", [BIG, 2**31, -1])
    @pytest.mark.parametrize(
        "endpoint",
        [
            "layers",
            "series?layer=model.layers.1.fc1&tensor=activation&stat=underflows%25",
            "metrics.csv",
            "heatmap.json",
        ],
    )
    def test_rank_out_of_range_is_400_before_anything_is_sent(
        self, client: TestClient, project: str, rank: int, endpoint: str
    ) -> None:
        run_id = wait_for_run(client, upload(client, project).json()["id"])["id"]
        sep = "&" if "?" in endpoint else "?"

        response = client.get(f"{RUNS}/{run_id}/{endpoint}{sep}rank={rank}")

        assert response.status_code == 400, response.text[:200]
        assert response.json()["error"] in ("InvalidParameter", "BadRequest")
        assert "rank" in response.json()["detail"]


class TestArchiveNamesAtTheLimits:
    def test_globalrank_of_20_digits_fails_the_run_with_a_precise_code(self, client: TestClient, project: str) -> None:
        member = stats_relpath(0).replace("globalrank-0", "globalrank-" + "9" * 20)
        response = upload(client, project, tar_bytes([(stats_relpath(0), GOOD), (member, GOOD)]))

        run = wait_for_run(client, response.json()["id"])

        assert (run["status"], run["error"].split(":")[0]) == ("failed", "RankOutOfRange")

    @pytest.mark.parametrize("rank", [MAX_ROW_ID + 1, 10**12])
    def test_globalrank_beyond_the_rank_column_fails_the_same_way_on_both_databases(
        self, client: TestClient, project: str, rank: int
    ) -> None:
        name = f"nvdlfw_inspect_globalrank-{rank}.log"
        response = client.post(RUNS, files={"file": (name, GOOD, "text/plain")}, data={"project": project})

        run = wait_for_run(client, response.json()["id"])

        assert (run["status"], run["error"].split(":")[0]) == ("failed", "RankOutOfRange")

    def test_globalrank_at_the_limit_is_stored(self, client: TestClient, project: str) -> None:
        name = f"nvdlfw_inspect_globalrank-{MAX_ROW_ID}.log"
        response = client.post(RUNS, files={"file": (name, GOOD, "text/plain")}, data={"project": project})

        run = wait_for_run(client, response.json()["id"])

        assert (run["status"], run["ranks"]) == ("ready", 1)
        layers = client.get(f"{RUNS}/{run['id']}/layers", params={"rank": MAX_ROW_ID})
        assert layers.status_code == 200 and layers.json()[0]["stats"]

    @pytest.mark.parametrize("prefix", [("x" * 300) + "/", ("abcdefgh/" * 600)])
    def test_member_path_longer_than_the_os_allows_is_path_too_long(
        self, client: TestClient, project: str, prefix: str
    ) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name in (stats_relpath(0), prefix + stats_relpath(1)):
                info = tarfile.TarInfo(name)
                info.size = len(GOOD)
                tar.addfile(info, io.BytesIO(GOOD))
        response = upload(client, project, buffer.getvalue())

        run = wait_for_run(client, response.json()["id"])

        assert (run["status"], run["error"].split(":")[0]) == ("failed", "PathTooLong")


class TestRecommendationOverrides:
    @pytest.mark.parametrize(
        "body",
        [
            '{"model_dims": {"hidden_size": 1e999}}',
            '{"model_dims": {"hidden_size": -1e999}}',
            '{"model_dims": {"hidden_size": NaN}}',
            '{"thresholds": {"critical": 1e999}}',
        ],
    )
    def test_non_finite_numbers_are_400(self, client: TestClient, project: str, body: str) -> None:
        run_id = wait_for_run(client, upload(client, project).json()["id"])["id"]

        response = client.post(
            f"{RUNS}/{run_id}/recommendation", content=body, headers={"Content-Type": "application/json"}
        )

        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error", "detail"}
