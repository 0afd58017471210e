"""PATCH /api/v1/runs/{id}: a run's notes and tags edited after its upload, on SQLite and PostgreSQL (the shared
backend fixtures of tests/conftest.py; each test in its own `project`). Bad input is a 400 `{"error", "detail"}`
with nothing stored; a read-only token is refused (403), an upload token may (private databases, since a token
closes the service to anonymous callers)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.app import create_app
from fp8_policy.service.limits import MAX_NOTES_CHARS, MAX_TAGS
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import stats_log
from tests.support.authutil import BACKENDS, bearer, make_token, private_database

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_gradient_underflows%"


def new_run(client: TestClient, project: str, headers: dict[str, str] | None = None, tags: str = "nightly") -> int:
    marker = uuid.uuid4().int % 10_000 / 10_000  # different bytes every call: a new run, never a duplicate
    data = stats_log([(UF, it, marker + it / 100) for it in range(0, 30, 10)])
    response = client.post(
        RUNS,
        files={"file": ("run.log", data, "text/plain")},
        data={"project": project, "tags": tags},
        headers=headers or {},
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def run_of(client: TestClient, run_id: int) -> dict:
    response = client.get(f"{RUNS}/{run_id}")
    assert response.status_code == 200
    return response.json()


def test_notes_and_tags_are_stored_and_read_back(client: TestClient, project: str) -> None:
    run_id = new_run(client, project)
    assert run_of(client, run_id)["notes"] is None
    notes = "Baseline for the FP8 sweep.\n\tlr 3e-4, 2 nodes — ünïcode kept"

    response = client.patch(f"{RUNS}/{run_id}", json={"notes": notes, "tags": ["h100", " sweep ", "h100", ""]})

    assert response.status_code == 200, response.text
    assert response.json()["notes"] == notes
    assert sorted(response.json()["tags"]) == ["h100", "sweep"]  # stripped, blank dropped, duplicates once
    stored = run_of(client, run_id)
    assert stored["notes"] == notes
    assert sorted(stored["tags"]) == ["h100", "sweep"]
    listed = client.get(RUNS, params={"project": project, "tag": "sweep"}).json()["items"]
    assert [(r["id"], r["notes"]) for r in listed] == [(run_id, notes)]
    assert client.get(RUNS, params={"project": project, "tag": "nightly"}).json()["items"] == []


def test_a_field_left_out_is_kept_and_null_or_empty_clears(client: TestClient, project: str) -> None:
    run_id = new_run(client, project, tags="a,b")
    client.patch(f"{RUNS}/{run_id}", json={"notes": "first"})
    assert sorted(run_of(client, run_id)["tags"]) == ["a", "b"]  # tags untouched by a notes-only edit

    response = client.patch(f"{RUNS}/{run_id}", json={"tags": ["b", "c"]})
    assert response.json()["notes"] == "first"  # notes untouched by a tags-only edit
    assert sorted(response.json()["tags"]) == ["b", "c"]

    assert client.patch(f"{RUNS}/{run_id}", json={"notes": None, "tags": []}).status_code == 200
    assert run_of(client, run_id)["notes"] is None
    assert run_of(client, run_id)["tags"] == []
    assert client.patch(f"{RUNS}/{run_id}", json={"notes": "  \n "}).json()["notes"] is None  # blank is none


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"notes": "a\x00b", "tags": ["kept-out"]}, "control character"),
        ({"notes": "lone \ud800 surrogate", "tags": ["kept-out"]}, "not valid UTF-8"),
        ({"notes": "x" * (MAX_NOTES_CHARS + 1), "tags": ["kept-out"]}, f"longer than {MAX_NOTES_CHARS}"),
        ({"notes": "kept out", "tags": ["ok", "bad\x00tag"]}, "control character"),
        ({"notes": "kept out", "tags": ["two\nlines"]}, "control character"),
        ({"notes": "kept out", "tags": ["\udfff"]}, "not valid UTF-8"),
        ({"notes": "kept out", "tags": ["t" * 101]}, "at most"),
        ({"notes": "kept out", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}, f"at most {MAX_TAGS} tags"),
    ],
)
def test_bad_input_is_400_and_nothing_is_stored(client: TestClient, project: str, body: dict, detail: str) -> None:
    run_id = new_run(client, project, tags="orig")
    client.patch(f"{RUNS}/{run_id}", json={"notes": "before"})

    # json.dumps escapes a lone surrogate as \udXXX, as a browser's JSON.stringify sends it
    response = client.patch(
        f"{RUNS}/{run_id}", content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error", "detail"}
    assert response.json()["error"] == "BadRequest"
    assert detail in response.json()["detail"]
    stored = run_of(client, run_id)
    assert (stored["notes"], stored["tags"]) == ("before", ["orig"])


@pytest.mark.parametrize(
    "body", [b"[]", b"not json", b'{"notes": 5}', b'{"tags": "a,b"}', b'{"tags": [1]}', b'{"colour": "red"}']
)
def test_a_body_of_the_wrong_shape_is_4xx(client: TestClient, project: str, body: bytes) -> None:
    run_id = new_run(client, project)

    response = client.patch(f"{RUNS}/{run_id}", content=body, headers={"Content-Type": "application/json"})

    assert 400 <= response.status_code < 500, response.text
    assert run_of(client, run_id)["tags"] == ["nightly"]


def test_an_unknown_run_is_404(client: TestClient) -> None:
    response = client.patch(f"{RUNS}/987654321", json={"notes": "x"})

    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "detail": "run 987654321 does not exist"}


def test_a_deleted_run_is_404(client: TestClient, project: str) -> None:
    run_id = new_run(client, project)
    wait_for_run(client, run_id)
    assert client.delete(f"{RUNS}/{run_id}").status_code == 204

    assert client.patch(f"{RUNS}/{run_id}", json={"tags": ["x"]}).status_code == 404


# --- who may --------------------------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def private_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    url = private_database(request.param, request, tmp_path)
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url)
    with TestClient(create_app(settings)) as client:
        yield client, url


def test_a_read_token_is_403_and_an_upload_token_may(private_app: tuple[TestClient, str]) -> None:
    client, url = private_app
    _, uploader = make_token(url, "upload")
    _, reader = make_token(url, "read")
    run_id = new_run(client, "edits", headers=bearer(uploader))

    refused = client.patch(f"{RUNS}/{run_id}", json={"notes": "nope"}, headers=bearer(reader))
    no_token = client.patch(f"{RUNS}/{run_id}", json={"notes": "nope"})
    allowed = client.patch(f"{RUNS}/{run_id}", json={"notes": "mine"}, headers=bearer(uploader))

    assert refused.status_code == 403
    assert refused.json()["error"] == "InsufficientScope"
    assert no_token.status_code == 401
    assert allowed.status_code == 200
    assert client.get(f"{RUNS}/{run_id}", headers=bearer(reader)).json()["notes"] == "mine"


def test_only_the_uploading_token_or_an_admin_token_edits_a_run(private_app: tuple[TestClient, str]) -> None:
    """The ownership rule of live runs: another upload token's edit of a run (a live run's too) is 403
    NotRunOwner and changes nothing; the uploader and an admin token may."""
    client, url = private_app
    _, owner = make_token(url, "upload")
    _, other = make_token(url, "upload")
    _, admin = make_token(url, "admin")
    run_id = new_run(client, "owned", headers=bearer(owner), tags="a,b")
    live = client.post("/api/v1/live/runs", json={"project": "owned", "tags": ["x"]}, headers=bearer(owner))
    assert live.status_code == 201, live.text

    for target in (run_id, live.json()["id"]):
        before = client.get(f"{RUNS}/{target}", headers=bearer(owner)).json()
        refused = client.patch(f"{RUNS}/{target}", json={"notes": "mine now", "tags": []}, headers=bearer(other))
        assert refused.status_code == 403 and refused.json()["error"] == "NotRunOwner", refused.text
        after = client.get(f"{RUNS}/{target}", headers=bearer(owner)).json()
        assert (after["notes"], after["tags"]) == (before["notes"], before["tags"])
        assert client.patch(f"{RUNS}/{target}", json={"notes": "owner"}, headers=bearer(owner)).status_code == 200
        assert client.patch(f"{RUNS}/{target}", json={"tags": ["ok"]}, headers=bearer(admin)).status_code == 200
        final = client.get(f"{RUNS}/{target}", headers=bearer(other)).json()
        assert (final["notes"], final["tags"]) == ("owner", ["ok"])
