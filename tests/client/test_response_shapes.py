"""A 2xx answer the client cannot use (not the JSON shape the endpoint documents) is an ApiError, not a crash later."""

from __future__ import annotations

import httpx
import pytest

from fp8_policy.client import ApiError


def test_an_html_page_where_a_run_was_expected_is_an_unexpected_response(mock_client) -> None:
    client = mock_client(lambda request: httpx.Response(200, text="<html>proxy login</html>"))

    with pytest.raises(ApiError) as caught:
        client.run(7)

    assert (caught.value.status, caught.value.error) == (200, "UnexpectedResponse")
    assert caught.value.detail == "GET /api/v1/runs/7 answered no JSON, expected an object"


def test_a_list_where_an_object_was_expected_names_what_came(mock_client) -> None:
    client = mock_client(lambda request: httpx.Response(200, json=[1, 2]))

    with pytest.raises(ApiError, match="answered a JSON list, expected an object"):
        client.analysis(7)


def test_layers_must_be_an_array_of_objects(mock_client) -> None:
    client = mock_client(lambda request: httpx.Response(200, json={"items": []}))

    with pytest.raises(ApiError, match=r"/api/v1/runs/7/layers answered a JSON dict, expected an array of objects"):
        client.layers(7)
    ok = mock_client(lambda request: httpx.Response(200, json=[{"name": "model.lm_head"}]))
    assert ok.layers(7) == [{"name": "model.lm_head"}]


def test_the_json_recommendation_is_checked_and_other_formats_are_text(mock_client) -> None:
    client = mock_client(lambda request: httpx.Response(200, text="fp8_policy:\n  enabled: true\n"))

    assert client.recommendation(7, format="te-yaml") == "fp8_policy:\n  enabled: true\n"
    with pytest.raises(ApiError, match="answered no JSON, expected an object"):
        client.recommendation(7)
