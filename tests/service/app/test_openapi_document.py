"""The OpenAPI document says everything: every API route is in it with a response schema for each success and a
`{"error", "detail"}` schema for each error it documents, every query parameter is described, and the parameters
that routes validate by hand are documented exactly as accepted.

Routes are enumerated from `app.routes`, so a route added later is checked too. Each failure says how to fix it.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from fastapi.routing import APIRoute

from fp8_policy.policy.thresholds import Thresholds
from fp8_policy.service.analysis import routes as analysis_routes
from fp8_policy.service.app import create_app
from fp8_policy.service.ingest.upload import RAW_TYPES
from fp8_policy.service.settings import Settings
from fp8_policy.service.visual.params import HEATMAP_KEYS

ERROR_SCHEMAS = {"#/components/schemas/ErrorBody", "#/components/schemas/HTTPValidationError"}
HOW_TO_SCHEMA = (
    "declare `response_model=` (or a return annotation) for JSON, or `responses={status: {'content': "
    "{media_type: {'schema': ...}}}}` for other media types (see service/visual/routes.py)"
)


@pytest.fixture(scope="module")
def app():
    return create_app(Settings(_env_file=None))


@pytest.fixture(scope="module")
def document(app) -> dict:
    return app.openapi()


def operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in ("get", "put", "post", "delete", "patch"):
                yield f"{method.upper()} {path}", path, operation


def test_every_api_route_is_in_the_document(app, document) -> None:
    missing = []
    for route in app.routes:
        if isinstance(route, APIRoute) and (route.path.startswith("/api/") or route.path == "/healthz"):
            for method in route.methods - {"HEAD", "OPTIONS"}:
                operation = document["paths"].get(route.path, {}).get(method.lower())
                if operation is None:
                    missing.append(f"{method} {route.path}")
    assert not missing, f"API routes hidden from the OpenAPI document: {missing}; drop include_in_schema=False"


def test_every_success_has_a_response_schema(document) -> None:
    problems = []
    for name, _path, operation in operations(document):
        successes = {code: r for code, r in operation["responses"].items() if code.startswith("2")}
        if not successes:
            problems.append(f"{name}: no 2xx response documented")
        for code, response in successes.items():
            if code == "204":
                continue
            content = response.get("content") or {}
            empty = [media for media, body in content.items() if not body.get("schema")]
            if not content or empty:
                problems.append(f"{name}: {code} {'has no content' if not content else f'has no schema for {empty}'}")
    assert not problems, "responses without a schema:\n" + "\n".join(problems) + f"\nFix: {HOW_TO_SCHEMA}."


def test_every_error_response_is_the_error_body(document) -> None:
    problems = []
    for name, path, operation in operations(document):
        for code, response in operation["responses"].items():
            if code[0] in "45":
                refs = {body.get("schema", {}).get("$ref") for body in (response.get("content") or {}).values()}
                allowed = ERROR_SCHEMAS | ({"#/components/schemas/HealthRead"} if path == "/healthz" else set())
                if not refs or not refs <= allowed:
                    problems.append(f"{name}: {code} is not documented as ErrorBody ({refs})")
        if "{run_id}" in path and "404" not in operation["responses"]:
            problems.append(f"{name}: takes a run id but documents no 404")
    assert not problems, (
        "\n".join(problems) + "\nFix: add `responses=error_responses(400, 404, ...)` "
        "(fp8_policy.service.openapi) with every status the route can answer."
    )


def test_every_query_parameter_is_described_and_typed(document) -> None:
    problems = []
    for name, _path, operation in operations(document):
        for parameter in operation.get("parameters", []):
            if parameter["in"] != "query":
                continue
            schema = parameter.get("schema", {})
            if not parameter.get("description") and not schema.get("description"):
                problems.append(f"{name}: ?{parameter['name']} has no description")
            if not (schema.get("type") or schema.get("anyOf") or schema.get("enum") or schema.get("$ref")):
                problems.append(f"{name}: ?{parameter['name']} has no type")
        names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            problems.append(f"{name}: query parameters documented twice: {duplicated}")
    assert not problems, (
        "\n".join(problems) + "\nFix: `Annotated[T, Query(description=...)]`, or for a parameter "
        "read by hand `openapi_extra={'parameters': [query_param(...)]}` (service/openapi.py)."
    )


def _query_names(document: dict, path: str, method: str = "get") -> set[str]:
    return {p["name"] for p in document["paths"][path][method].get("parameters", []) if p["in"] == "query"}


def test_hand_validated_parameters_are_documented_exactly(document) -> None:
    thresholds = {f.name for f in fields(Thresholds)}
    for image in ("png", "svg"):
        assert _query_names(document, f"/api/v1/runs/{{run_id}}/heatmap.{image}") == set(HEATMAP_KEYS)
    assert _query_names(document, "/api/v1/runs/{run_id}/heatmap.json") == set(HEATMAP_KEYS) | {"cells"}
    for image in ("png", "svg"):
        assert _query_names(document, f"/api/v1/compare.{image}") == set(HEATMAP_KEYS) | {"base", "head"}
    assert _query_names(document, "/api/v1/compare") == {"base", "head", "warning", "critical", "severe"}
    assert _query_names(document, "/api/v1/runs/{run_id}/analysis") == thresholds
    assert _query_names(document, "/api/v1/runs/{run_id}/recommendation") == thresholds | {
        "format",
        "pp_stage",
        "phase",
        *analysis_routes._GET_OPTION_KEYS,
    }
    assert _query_names(document, "/api/v1/runs/{run_id}/recommendation", "post") == {"format", "phase", "pp_stage"}
    formats = next(
        p
        for p in document["paths"]["/api/v1/runs/{run_id}/recommendation"]["get"]["parameters"]
        if p["name"] == "format"
    )["schema"]["enum"]
    assert formats == ["json", "te-yaml", "megatron", "hydra", "torchao", "te-recipe", "torchtitan", "te-monitor"]


def test_upload_documents_the_multipart_form_and_every_raw_type(document) -> None:
    body = document["paths"]["/api/v1/runs"]["post"]["requestBody"]["content"]
    form = body["multipart/form-data"]["schema"]
    assert form["required"] == ["file"] and set(form["properties"]) == {"file", "name", "project", "tags", "metadata"}
    assert set(body) == {"multipart/form-data", *RAW_TYPES}
    assert {"name", "project", "tags", "metadata"} <= _query_names(document, "/api/v1/runs", "post")
