"""Every named error in service/errors.py answers {"error": "<ClassName>", "detail": ...} with its base's status
(the wire codes clients and tests match on did not change when the free-form `error="…"` strings became classes),
and service/errors.py is their one home: no `AppError` subclass is defined anywhere else under service/."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

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
        and not issubclass(cls, errors.OffsetMismatch)  # needs the expected offset: test_offset_mismatch_...
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


def test_offset_mismatch_says_the_offset_the_next_piece_must_start_at(client: TestClient) -> None:
    app = FastAPI()
    errors.install_error_handlers(app)

    @app.get("/{name}")
    def _mismatch(name: str) -> None:
        raise getattr(errors, name)("not at the end", expected=7)

    for name in ("OffsetMismatch", "OffsetGap", "OffsetConflict"):
        response = TestClient(app).get(f"/{name}")
        assert response.status_code == 409 and response.headers["Upload-Offset"] == "7"
        assert response.json() == {"error": name, "detail": "not at the end"}


def test_retry_later_errors_keep_their_retry_after_and_connection_close() -> None:
    headers = {
        cls.__name__: (cls.status_code, cls("x").headers)
        for cls in (
            errors.ComputeQueueFull,
            errors.RenderQueueFull,
            errors.RendererUnavailable,
            errors.TooManyPieces,
            errors.TooManyUploads,
        )
    }
    assert headers == {
        "ComputeQueueFull": (429, {"Retry-After": "5"}),
        "RenderQueueFull": (429, {"Retry-After": "2"}),
        "RendererUnavailable": (503, {"Retry-After": "2"}),
        "TooManyPieces": (503, {"Retry-After": "2", "Connection": "close"}),
        "TooManyUploads": (503, {"Retry-After": "5", "Connection": "close"}),
    }


# --- one home for errors ------------------------------------------------------------------------------------------
SERVICE = Path(__file__).resolve().parents[3] / "service"
HOME = SERVICE / "errors.py"


def app_errors_defined_outside(root: Path, home: Path) -> list[str]:
    """`path: ClassName` of every class under `root` that derives from an `AppError` class (by name, through bases
    defined anywhere in the tree or in `home`) and is not defined in `home`."""
    classes: dict[str, tuple[Path, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                classes.setdefault(node.name, (path, bases))
    known = {"AppError"}
    grew = True
    while grew:
        found = {name for name, (_, bases) in classes.items() if any(b in known for b in bases)}
        grew = not found <= known
        known |= found
    return sorted(
        f"{path.relative_to(root)}: {name}"
        for name, (path, bases) in classes.items()
        if name in known and name != "AppError" and path != home
    )


def test_every_app_error_is_defined_in_service_errors_py() -> None:
    assert app_errors_defined_outside(SERVICE, HOME) == []
    assert len([cls for cls in NAMED if cls.__module__ == errors.__name__]) > 50  # the walk sees the real classes


def test_the_one_home_rule_catches_an_error_declared_in_a_feature(tmp_path: Path) -> None:
    (tmp_path / "errors.py").write_text("class AppError(Exception): ...\nclass Conflict(AppError): ...\n")
    (tmp_path / "feature").mkdir()
    (tmp_path / "feature" / "actions.py").write_text(
        "from x import errors\nclass Clash(errors.Conflict): ...\nclass Fine(Exception): ...\n"
    )
    assert app_errors_defined_outside(tmp_path, tmp_path / "errors.py") == ["feature/actions.py: Clash"]
