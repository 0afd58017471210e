"""The client's list of recommendation formats (client/formats.py, kept apart so the CLI need not import the
service) is the service's: the same names, in the same order, as policy/vocabulary.py and the `format` parameter the
service documents. A test may import both sides; the client may not (tests/client/test_examples_and_layering.py)."""

from __future__ import annotations

from fp8_policy.client.formats import FORMATS as CLIENT_FORMATS
from fp8_policy.policy.render import OUTPUT_FORMATS as RENDERED
from fp8_policy.policy.vocabulary import OUTPUT_FORMATS
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings


def test_the_client_offers_exactly_the_formats_the_service_renders() -> None:
    assert ("json", *OUTPUT_FORMATS) == CLIENT_FORMATS
    assert RENDERED == OUTPUT_FORMATS  # the renderers' table (DIALECTS, MONITORS) is the vocabulary's list


def test_the_documented_format_parameter_is_the_clients_list() -> None:
    document = create_app(Settings(_env_file=None)).openapi()
    operation = document["paths"]["/api/v1/runs/{run_id}/recommendation"]["get"]
    (param,) = (p for p in operation["parameters"] if p["name"] == "format")
    assert tuple(param["schema"]["enum"]) == CLIENT_FORMATS
