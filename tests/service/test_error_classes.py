"""Every named error in service/errors.py answers {"error": "<ClassName>", "detail": ...} with its base's status
(the wire codes clients and tests match on did not change when the free-form `error="…"` strings became classes)."""

from __future__ import annotations

import inspect

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from fp8_policy.service import errors

NAMED = sorted(
    (
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.AppError)
        and cls.__module__ == errors.__name__
        and cls is not errors.AppError
        and cls is not errors.Forbidden
    ),
    key=lambda cls: cls.__name__,
)


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    errors.install_error_handlers(app)

    @app.get("/raise/{name}")
    def _raise(name: str) -> None:
        raise getattr(errors, name)(f"detail of {name}")

    return TestClient(app)


@pytest.mark.parametrize("cls", NAMED, ids=lambda cls: cls.__name__)
def test_code_is_the_class_name_and_status_the_bases(client: TestClient, cls: type[errors.AppError]) -> None:
    response = client.get(f"/raise/{cls.__name__}")
    assert response.status_code == cls.status_code
    assert response.json() == {"error": cls.__name__, "detail": f"detail of {cls.__name__}"}
    if issubclass(cls, errors.Unauthorized):
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="fp8-policy"'


def test_the_named_codes_keep_their_statuses() -> None:
    statuses = {cls.__name__: cls.status_code for cls in NAMED}
    assert {
        name: statuses[name]
        for name in (
            "InvalidParameter",
            "InvalidThresholds",
            "InvalidLivePath",
            "TokenRequired",
            "TokenNotFound",
            "TokenNameTaken",
            "NotRetryable",
            "UploadMissing",
        )
    } == {
        "InvalidParameter": 400,
        "InvalidThresholds": 400,
        "InvalidLivePath": 400,
        "TokenRequired": 401,
        "TokenNotFound": 404,
        "TokenNameTaken": 409,
        "NotRetryable": 409,
        "UploadMissing": 409,
    }


def test_forbidden_names_the_missing_scope(client: TestClient) -> None:
    app = FastAPI()
    errors.install_error_handlers(app)

    @app.get("/")
    def _forbidden() -> None:
        raise errors.Forbidden("needs admin", needed_scope="admin")

    response = TestClient(app).get("/")
    assert response.status_code == 403 and response.json() == {"error": "InsufficientScope", "detail": "needs admin"}
    assert 'scope="admin"' in response.headers["WWW-Authenticate"]
