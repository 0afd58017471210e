"""Attack replay, the start-up window (service/transport/starting.py): what once went wrong when the 503 "starting"
responder was attacked on loopback, replayed against it.

* A client trickling its request head a byte at a time held its connection and a thread for as long as it kept
  trickling (READ_TIMEOUT bounded each read, not the head: 16 KiB at one byte a second is four and a half hours),
  long after uvicorn had taken the sockets over. Now READ_TIMEOUT bounds the whole head, and the drain after the
  503 unless the body keeps a rate floor (for at most LINGERERS connections at once, up to LINGER_TIME and
  LINGER_BYTES): a body trickled after the 503 is cut off as a trickled head is.
* A connection for which no thread could be started (RuntimeError "can't start new thread", a flood of
  connections) ended the accept loop: every later connection of the start-up window waited unanswered. Now that
  connection is closed and the loop goes on.

What held up and is checked here too: garbage bytes and a pipelined pair get one 503 and a close, an upload's
body is read after the 503 so the client sees the 503, not a reset (tests/service/transport/test_starting.py), and a
connection still trickling does not hold up `stop()` (the hand-over to uvicorn).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fp8_policy.service.transport import starting
from fp8_policy.service.transport.starting import StartingResponder, listen

WAIT = 10.0  # seconds any one step waits at most


@pytest.fixture
def responder(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[StartingResponder, int]]:
    monkeypatch.setattr(starting, "READ_TIMEOUT", 0.5)
    sockets = listen("127.0.0.1", 0)
    started = StartingResponder(sockets).start()
    try:
        yield started, sockets[0].getsockname()[1]
    finally:
        started.stop()
        for sock in sockets:
            sock.close()


def connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return connection


def read_all(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(4096):
        data += chunk
    return data


def test_a_head_trickled_byte_by_byte_is_cut_off_after_the_read_timeout(responder) -> None:
    _, port = responder
    connection = connect(port)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
    sent = 0
    closed = False
    for byte in head:  # one byte every 0.1 s: each read gets a byte well within the (0.5 s) read timeout
        try:
            connection.sendall(bytes([byte]))
        except OSError:  # the responder closed the connection
            closed = True
            break
        sent += 1
        connection.settimeout(0.1)
        try:
            if connection.recv(1) == b"":
                closed = True
                break
        except TimeoutError:
            continue
        except OSError:
            closed = True
            break
    connection.close()
    assert closed and sent < len(head), f"the responder still read after {sent} bytes"


def trickle_body(port: int) -> tuple[bytes, int]:
    """Send an upload's head, read the 503 (the responder then half-closes), then send the body 100 bytes every
    0.05 s until the responder closes the connection (or WAIT passes); the answer and the body bytes sent."""
    connection = connect(port)
    connection.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
    answer = read_all(connection)
    sent, give_up = 0, time.monotonic() + WAIT
    while time.monotonic() < give_up:
        try:
            connection.sendall(b"x" * 100)
        except OSError:  # the responder closed for good: our next bytes were answered with a reset
            break
        sent += 100
        time.sleep(0.05)
    connection.close()
    return answer, sent


def test_a_body_trickled_after_the_503_is_cut_off_by_the_rate_floor_not_the_linger_time(responder, monkeypatch) -> None:
    _, port = responder
    monkeypatch.setattr(starting, "LINGER_TIME", 3600.0)  # only READ_TIMEOUT (0.5 s) with the rate floor can end it
    answer, sent = trickle_body(port)
    assert answer.startswith(b"HTTP/1.1 503 ")
    # 2000 bytes a second: cut off after READ_TIMEOUT (0.5 s) it sends about 1000; uncut, 2000 * WAIT
    assert sent < 10_000, f"the responder still drained after {sent} bytes"


def test_past_the_lingerer_slots_a_steady_body_keeps_the_read_timeout_bound(responder, monkeypatch) -> None:
    _, port = responder
    monkeypatch.setattr(starting, "LINGER_TIME", 3600.0)
    monkeypatch.setattr(starting, "LINGER_MIN_RATE", 1)  # the trickle keeps the rate: only a slot decides
    monkeypatch.setattr(starting, "_lingering", threading.BoundedSemaphore(0))  # every slot taken
    answer, sent = trickle_body(port)
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert sent < 10_000, f"the responder still drained after {sent} bytes"


def test_the_drain_stops_at_its_byte_bound(responder, monkeypatch) -> None:
    _, port = responder
    monkeypatch.setattr(starting, "LINGER_BYTES", 1 << 20)
    connection = connect(port)
    connection.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n")
    with pytest.raises(OSError):  # reset once 1 MiB was drained: the rest is not read
        connection.sendall(b"x" * (64 << 20))
    connection.close()


def test_a_connection_without_a_thread_does_not_end_the_accept_loop(responder, monkeypatch) -> None:
    _, port = responder
    real = threading.Thread
    refused = threading.Event()

    class NoThread(real):  # type: ignore[misc, valid-type]
        def start(self) -> None:
            if self.name == "starting-answer" and not refused.is_set():
                refused.set()
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(starting.threading, "Thread", NoThread)
    first = connect(port)
    first.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    with contextlib.suppress(ConnectionResetError):  # closed with the request unread
        assert read_all(first) == b""  # closed unanswered: no thread for it
    assert refused.is_set()

    second = connect(port)
    second.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_all(second).startswith(b"HTTP/1.1 503 ")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",  # a TLS hello to the plain port
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /api/v1/runs HTTP/1.1\r\nHost: x\r\n\r\n",  # pipelined
        b"\r\n\r\n",
    ],
    ids=["tls-hello", "pipelined", "empty-head"],
)
def test_odd_bytes_get_one_503_and_a_close(responder, request_bytes: bytes) -> None:
    _, port = responder
    connection = connect(port)
    connection.sendall(request_bytes)
    answer = read_all(connection)
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.count(b"HTTP/1.1") == 1
    assert b"Connection: close" in answer


def test_connections_still_trickling_do_not_hold_up_the_hand_over(responder) -> None:
    started, port = responder
    trickling = [connect(port) for _ in range(50)]
    for connection in trickling:
        connection.sendall(b"GET /heal")
    time.sleep(0.1)
    stopping = threading.Thread(target=started.stop)
    stopping.start()
    stopping.join(WAIT)
    assert not stopping.is_alive()
    for connection in trickling:  # each is closed by its own bound, answered or not
        connection.settimeout(WAIT)
        assert read_all(connection) == b""
        connection.close()
