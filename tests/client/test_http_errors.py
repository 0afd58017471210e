"""Error mapping and headers of `PolicyClient` (over `httpx.MockTransport`)."""

from __future__ import annotations

import httpx
import pytest

from fp8_policy.client import ApiError, ConnectionFailed, NotFound, PolicyClient, PolicyError
from tests.client.fakes import run_body


def test_not_found_keeps_the_servers_error_and_detail(mock_client) -> None:
    client = mock_client(
        lambda request: httpx.Response(404, json={"error": "NotFound", "detail": "run 7 does not exist"})
    )

    with pytest.raises(NotFound) as caught:
        client.run(7)

    assert (caught.value.status, caught.value.error, caught.value.detail) == (404, "NotFound", "run 7 does not exist")
    assert str(caught.value) == "NotFound: run 7 does not exist"
    assert isinstance(caught.value, ApiError) and isinstance(caught.value, PolicyError)


def test_conflict_is_an_api_error_with_the_server_code(mock_client) -> None:
    client = mock_client(
        lambda request: httpx.Response(409, json={"error": "NotReady", "detail": "run 7 is processing"})
    )

    with pytest.raises(ApiError) as caught:
        client.analysis(7)

    assert not isinstance(caught.value, NotFound)
    assert (caught.value.status, caught.value.error, caught.value.detail) == (409, "NotReady", "run 7 is processing")


def test_fastapi_validation_errors_become_one_sentence(mock_client) -> None:
    body = {"detail": [{"loc": ["query", "limit"], "msg": "Input should be less than or equal to 200"}]}
    client = mock_client(lambda request: httpx.Response(422, json=body))

    with pytest.raises(ApiError) as caught:
        client.runs(limit=500)

    assert caught.value.error == "ValidationError"
    assert caught.value.detail == "query.limit: Input should be less than or equal to 200"


def test_a_non_json_error_body_still_gives_a_typed_error(mock_client) -> None:
    client = mock_client(lambda request: httpx.Response(502, text="<html>Bad Gateway</html>"))

    with pytest.raises(ApiError) as caught:
        client.run(1)

    assert (caught.value.status, caught.value.error) == (502, "HTTP502")
    assert caught.value.detail == (  # another server's page is not printed: the URL is named instead
        "http://fp8.test/api/v1/runs/1 answered HTTP 502 with text/plain, not the fp8-policy API's JSON: is the URL "
        "an fp8-policy service (its root, e.g. http://host:8000, with no /api/v1), and not a proxy's or another "
        "server's page?"
    )


def test_a_url_ending_in_the_api_prefix_is_read_as_the_service_root(mock_client) -> None:
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, json={"id": 1})

    client = PolicyClient("http://fp8.test/api/v1/", transport=httpx.MockTransport(answer))
    client.run(1)
    client.close()

    assert seen == ["/api/v1/runs/1"]


def test_unreachable_service_raises_connection_failed_naming_the_url(mock_client) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    client = mock_client(refuse)

    with pytest.raises(ConnectionFailed) as caught:
        client.run(1)

    assert caught.value.error == "ConnectionFailed"
    assert caught.value.detail == (
        "cannot reach the fp8-policy service at http://fp8.test: ConnectError: [Errno 111] Connection refused"
    )


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:port"])
def test_a_malformed_url_raises_connection_failed_naming_it(url: str) -> None:
    with pytest.raises(ConnectionFailed) as caught:
        PolicyClient(url)

    assert url in str(caught.value) and "InvalidURL" in str(caught.value)


def test_a_token_that_is_not_ascii_is_refused_without_repeating_it() -> None:
    with pytest.raises(PolicyError) as caught:
        PolicyClient("http://127.0.0.1:1", token="sécret")

    assert caught.value.error == "InvalidToken" and "sécret" not in str(caught.value)


def test_download_errors_leave_no_file(mock_client, tmp_path) -> None:
    client = mock_client(
        lambda request: httpx.Response(404, json={"error": "NotFound", "detail": "run 3 does not exist"})
    )

    with pytest.raises(NotFound):
        client.heatmap(3, tmp_path / "heat.png")

    assert list(tmp_path.iterdir()) == []


def test_token_is_sent_as_a_bearer_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=run_body())

    with PolicyClient("http://fp8.test/", token="s3cret", transport=httpx.MockTransport(handler)) as client:
        client.run(7)
    with PolicyClient("http://fp8.test", transport=httpx.MockTransport(handler)) as client:
        client.run(7)

    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in seen[1].headers
    assert str(seen[0].url) == "http://fp8.test/api/v1/runs/7"
    assert seen[0].headers["User-Agent"].startswith("fp8-policy-client/")


@pytest.mark.parametrize(
    ("call", "method", "url"),
    [
        (lambda c: c.runs(project="esm2", status="ready"), "GET", "/api/v1/runs?project=esm2&status=ready"),
        (lambda c: c.layers(3, rank=1), "GET", "/api/v1/runs/3/layers?rank=1"),
        (
            lambda c: c.series(3, "model.lm_head", "gradient", "underflows%"),
            "GET",
            "/api/v1/runs/3/series?layer=model.lm_head&tensor=gradient&stat=underflows%25",
        ),
        (lambda c: c.analysis(3, critical=3.0), "GET", "/api/v1/runs/3/analysis?critical=3.0"),
        (lambda c: c.recommendation(3, format="te-yaml"), "GET", "/api/v1/runs/3/recommendation?format=te-yaml"),
        (
            lambda c: c.recommendation(3, overrides={"gpu_arch": "hopper"}),
            "POST",
            "/api/v1/runs/3/recommendation?format=json",
        ),
        (lambda c: c.compare(1, 2), "GET", "/api/v1/compare?base=1&head=2"),
        (lambda c: c.delete(3), "DELETE", "/api/v1/runs/3"),
    ],
)
def test_each_method_calls_its_endpoint(mock_client, call, method: str, url: str) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "DELETE":
            return httpx.Response(204)
        if "format=te-yaml" in str(request.url):
            return httpx.Response(200, text="# yaml\n")
        if request.url.path.endswith("/layers"):  # the client checks each answer's documented shape
            return httpx.Response(200, json=[])
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    call(mock_client(handler))

    assert (seen[0].method, str(seen[0].url).removeprefix("http://fp8.test")) == (method, url)


def test_iter_runs_follows_next_cursor(mock_client) -> None:
    pages = {None: ([run_body(3), run_body(2)], "c2"), "c2": ([run_body(1)], None)}

    def handler(request: httpx.Request) -> httpx.Response:
        items, cursor = pages[request.url.params.get("cursor")]
        return httpx.Response(200, json={"items": items, "next_cursor": cursor})

    assert [run["id"] for run in mock_client(handler).iter_runs(project="esm2")] == [3, 2, 1]
