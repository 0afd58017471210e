"""A 503 with Retry-After (the service starting, service/transport/starting.py, or busy) is retryable: `upload
--wait` sends the upload again after the pause asked for, and `wait` polls again, both within `--timeout`; a plain
`upload`, or a 503 without Retry-After, still fails at once."""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from fp8_policy.client import ApiError, PolicyClient
from fp8_policy.client._http import retry_after
from fp8_policy.client.cli import cli
from fp8_policy.service.transport import starting
from fp8_policy.service.transport.starting import StartingResponder, answer_starting, listen, url
from tests.client.fakes import FakeService, run_body

STARTING = {"error": "Starting", "detail": "the service is starting; retry in a second"}


def starting_first(handler, times: int, headers: dict[str, str] | None = None):
    """`handler`, behind `times` answers 503 "starting" (with Retry-After: 1 unless `headers` says otherwise)."""
    left = [times]
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        request.read()
        if left[0] > 0:
            left[0] -= 1
            return httpx.Response(503, json=STARTING, headers={"Retry-After": "1"} if headers is None else headers)
        return handler(request)

    answer.sent = sent  # type: ignore[attr-defined]
    return answer


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("1") == 1.0 and retry_after(" 120 ") == 120.0
    in_a_minute = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    assert 55 <= (retry_after(in_a_minute) or 0) <= 60
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date passed: now
    assert retry_after(None) is None and retry_after("soon") is None and retry_after("-1") is None


def test_the_starting_responder_s_503_is_a_retryable_api_error() -> None:
    sockets = listen("127.0.0.1", 0)
    responder = StartingResponder(sockets).start()
    try:
        with PolicyClient(url(sockets)) as client, pytest.raises(ApiError) as caught:
            client.run(7)
    finally:
        responder.stop()
        for sock in sockets:
            sock.close()
    assert (caught.value.status, caught.value.error, caught.value.retry_after) == (503, "Starting", 1.0)
    assert caught.value.retryable


def test_upload_with_retry_for_sends_again_after_retry_after(mock_client, clock, tmp_path: Path) -> None:
    archive = tmp_path / "run.tgz"
    archive.write_bytes(b"archive bytes")
    handler = starting_first(lambda request: httpx.Response(202, json=run_body(7, "queued")), times=2)

    run = mock_client(handler).upload(archive, retry_for=10.0)

    assert run["id"] == 7 and clock.sleeps == [1.0, 1.0]
    assert len(handler.sent) == 3 and all(b"archive bytes" in request.content for request in handler.sent)


def test_upload_without_retry_for_or_without_retry_after_fails_at_once(mock_client, clock, tmp_path: Path) -> None:
    archive = tmp_path / "run.tgz"
    archive.write_bytes(b"x")
    queued = lambda request: httpx.Response(202, json=run_body(7, "queued"))  # noqa: E731
    for handler, retry_for in ((starting_first(queued, 1), 0.0), (starting_first(queued, 1, headers={}), 10.0)):
        with pytest.raises(ApiError) as caught:
            mock_client(handler).upload(archive, retry_for=retry_for)
        assert caught.value.status == 503 and len(handler.sent) == 1
    assert clock.sleeps == []


def test_upload_retries_end_at_retry_for(mock_client, clock, tmp_path: Path) -> None:
    archive = tmp_path / "run.tgz"
    archive.write_bytes(b"x")
    handler = starting_first(lambda request: httpx.Response(202, json=run_body(7)), times=100)

    with pytest.raises(ApiError) as caught:
        mock_client(handler).upload(archive, retry_for=2.5)

    assert caught.value.error == "Starting" and clock.sleeps == [1.0, 1.0, 0.5]


def test_wait_polls_again_after_a_503_with_retry_after(mock_client, clock) -> None:
    handler = starting_first(lambda request: httpx.Response(200, json=run_body(7, "ready")), times=1)

    assert mock_client(handler).wait(7)["status"] == "ready"
    assert clock.sleeps == [1.0]


def test_upload_wait_goes_through_a_service_still_starting(mock_client, clock, tmp_path: Path) -> None:
    service = FakeService()
    service.runs[7] = [run_body(7, "ready")]
    client = mock_client(starting_first(service, times=3))
    (tmp_path / "run.tgz").write_bytes(b"x")

    result = CliRunner().invoke(cli, ["upload", str(tmp_path / "run.tgz"), "--wait", "--json"], obj=client)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "ready" and clock.sleeps == [1.0, 1.0, 1.0]
    plain = CliRunner().invoke(cli, ["upload", str(tmp_path / "run.tgz")], obj=mock_client(starting_first(service, 1)))
    assert plain.exit_code == 2 and plain.stderr.startswith("error: Starting: ")


def test_a_20_mib_upload_during_start_up_is_sent_again_once_the_service_serves(tmp_path: Path, monkeypatch) -> None:
    """Over real sockets: the starting responder answers the upload 503 (draining its body), then stops, and
    whoever serves next on the same socket gets the upload again, whole."""
    archive = tmp_path / "run.tgz"
    archive.write_bytes(b"\0" * (20 << 20))
    sockets = listen("127.0.0.1", 0)
    answered = threading.Event()

    def answer_and_tell(connection: socket.socket) -> None:
        answer_starting(connection)
        answered.set()

    monkeypatch.setattr(starting, "answer_starting", answer_and_tell)
    responder = StartingResponder(sockets).start()
    received: list[int] = []

    def serve_after_start_up() -> None:
        assert answered.wait(30)  # the first upload met the responder
        responder.stop()
        sockets[0].setblocking(True)
        connection, _ = sockets[0].accept()
        with connection, connection.makefile("rb") as stream:
            length = 0
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                length = int(value) if name.lower() == "content-length" else length
            received.append(len(stream.read(length)))
            body = json.dumps(run_body(7, "queued")).encode()
            connection.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nConnection: close\r\n")
            connection.sendall(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    server = threading.Thread(target=serve_after_start_up)
    server.start()
    try:
        with PolicyClient(url(sockets), timeout=30) as client:
            run = client.upload(archive, retry_for=30.0)
    finally:
        server.join(30)
        responder.stop()
        for sock in sockets:
            sock.close()
    assert run["id"] == 7 and received and received[0] > 20 << 20  # the multipart body around the archive
