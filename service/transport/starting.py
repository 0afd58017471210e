"""What answers while `fp8-policy serve` starts: its listening sockets, bound before anything heavy is imported, and
a thread that answers on them until uvicorn takes them over with the full application.

Why: importing the application (FastAPI, SQLAlchemy, NumPy, numba, matplotlib, the routes), migrating the database
and running its lifespan take 2.5-3.5 s of CPU, many times that in wall time on a loaded machine. A probe or a
user meanwhile got "connection refused", as from a service that is down. Now the port answers within a few
tenths of a second of the process starting, and says the truth:

* `GET /healthz` -> 503 `{"status": "starting", "database": "not checked yet"}`. 503 is what a readiness probe
  (Kubernetes: any code outside 200-399 fails it) and every poller of this project (`bench/`, `tests/`,
  `wait_healthy`) read as "not ready yet"; 200 `{"status": "ok", ...}` still means the full application serves
  and its database answered (service/app.py).
* any other request -> 503 `{"error": "Starting", "detail": ...}` with `Retry-After: 1`; a browser asking for a
  page gets a small HTML page that reloads itself every second, so `make run`'s dashboard shows once ready.
  Every answer says `Connection: close`; an upload's body is then read and thrown away (a lingering close,
  `_drain`), so a client sending it whole before reading (urllib, requests) reads the 503, not a reset.

Nothing is read or written before the full application serves: no data leaves and no upload is taken, so the
checks that `serve` makes before serving (migrations, the anonymous-access refusal on a public address) still
come first. The responder stops when the application's lifespan has started; uvicorn then accepts on the same
sockets (`Server.run(sockets=...)`), so connections that arrive in between wait in the listen backlog instead
of being refused.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
import time

log = logging.getLogger("fp8_policy.starting")

BACKLOG = 2048  # uvicorn's default `backlog`
RETRY_AFTER_SECONDS = 1
HEAD_LIMIT = 16 * 1024  # bytes of a request head read at most
READ_TIMEOUT = 2.0  # seconds a connection may take to send its head, and that a drain waits for each next read
# The lingering close after the 503 (see `_drain`): how long, how much and how many.
LINGER_TIME = 30.0  # seconds a drain lasts at most in all (Apache's MAX_SECS_TO_LINGER, nginx's lingering_time)
LINGER_BYTES = 64 << 20  # bytes of a request body read and discarded at most
LINGER_MIN_RATE = 1 << 20  # bytes per second a drained body must average past READ_TIMEOUT to be drained further
LINGERERS = 16  # connections drained past READ_TIMEOUT at once; the others keep the READ_TIMEOUT bound
_lingering = threading.BoundedSemaphore(LINGERERS)

HEALTH_STARTING = {"status": "starting", "database": "not checked yet: the service is starting"}
ERROR_STARTING = {"error": "Starting", "detail": "the service is starting; retry in a second"}
_PAGE = (
    b'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="1"><title>fp8-policy</title>'
    b"<p>fp8-policy is starting&hellip; this page reloads itself.</p>"
)


def listen(host: str, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """The listening sockets for host:port, bound as asyncio's `create_server(host=, port=)` binds them (every
    address `host` resolves to, SO_REUSEADDR, IPv6 sockets IPv6-only; "" or "0.0.0.0"/"::" as given). OSError
    when an address is in use or cannot be assigned."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def url(sockets: list[socket.socket]) -> str:
    """http://host:port of the first socket (IPv6 in brackets), for the start-up line; "" without one."""
    if not sockets:
        return ""
    host, port = sockets[0].getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class StartingResponder:
    """A thread answering 503 "starting" on `sockets` until `stop()`; each connection is answered by a short-lived
    thread of its own and closed (one request per connection)."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets
        self._wake_read, self._wake_write = os.pipe()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="starting-responder", daemon=True)

    def start(self) -> StartingResponder:
        for sock in self.sockets:
            sock.setblocking(False)  # a connection another acceptor took must not block this thread
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting (idempotent); the sockets stay open and listening for whoever serves next."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        os.write(self._wake_write, b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _accept_loop(self) -> None:
        watched: list[socket.socket | int] = [*self.sockets, self._wake_read]
        while not self._stopped.is_set():
            try:
                readable, _, _ = select.select(watched, [], [])
            except (OSError, ValueError):  # a socket was closed under us: nothing left to answer on
                return
            for sock in readable:
                if self._stopped.is_set() or not isinstance(sock, socket.socket):
                    return
                try:
                    connection, _ = sock.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                except OSError as exc:  # EMFILE and the like: the connection waits in the backlog
                    log.warning("accepting a connection during start-up failed: %s", exc)
                    continue
                try:
                    threading.Thread(
                        target=answer_starting, args=(connection,), name="starting-answer", daemon=True
                    ).start()
                except RuntimeError as exc:  # no thread to be had: this one is closed, the loop goes on
                    log.warning("answering a connection during start-up failed: %s", exc)
                    connection.close()


def answer_starting(connection: socket.socket) -> None:
    """Read one request head from `connection`, answer it 503 "starting" and close the connection. READ_TIMEOUT
    bounds the whole head, not each read, and the drain after the answer unless the body keeps coming at
    LINGER_MIN_RATE: a client sending a byte a second holds no thread."""
    try:
        connection.setblocking(True)
        deadline = time.monotonic() + READ_TIMEOUT
        head = b""
        while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
            connection.settimeout(_left(deadline))
            chunk = connection.recv(4096)
            if not chunk:
                return
            head += chunk
        connection.settimeout(READ_TIMEOUT)
        connection.sendall(_response(head))
        _drain(connection)
    except OSError:
        pass
    finally:
        connection.close()


def _response(head: bytes) -> bytes:
    request_line, _, header_block = head.partition(b"\r\n")
    parts = request_line.split()
    method = parts[0].upper() if parts else b""
    target = parts[1].split(b"?", 1)[0] if len(parts) > 1 else b""
    accept = b""
    for line in header_block.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"accept":
            accept = value.lower()
    headers = [f"Retry-After: {RETRY_AFTER_SECONDS}", "Cache-Control: no-store", "Connection: close"]
    if target == b"/healthz":
        body, kind = json.dumps(HEALTH_STARTING).encode(), "application/json"
    elif method == b"GET" and b"text/html" in accept:
        body, kind = _PAGE, "text/html; charset=utf-8"
    else:
        body, kind = json.dumps(ERROR_STARTING).encode(), "application/json"
    headers += [f"Content-Type: {kind}", f"Content-Length: {len(body)}"]
    status = "HTTP/1.1 503 Service Unavailable\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    return status.encode() + (b"" if method == b"HEAD" else body)


def _left(deadline: float) -> float:
    """Seconds until `deadline`; TimeoutError (closing the connection) once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the connection took too long")
    return left


def _drain(connection: socket.socket) -> None:
    """Close politely (a lingering close): half-close, then read and discard what the client still sends (an
    upload's body) until it closes its side or a bound is reached, and only then close. Closing a socket with
    unread data sends a reset, and a client still sending its body (http.client, urllib, requests) then fails
    with "connection reset" or "broken pipe" instead of reading the 503 it was sent. This is what Apache httpd
    does (ap_lingering_close in server/connection.c, https://github.com/apache/httpd: SECONDS_TO_LINGER per read,
    MAX_SECS_TO_LINGER in all) and nginx (https://nginx.org/en/docs/http/ngx_http_core_module.html#lingering_close, lingering_time and
    lingering_timeout).

    Bounds: READ_TIMEOUT of silence ends it, and so does LINGER_BYTES read. Past READ_TIMEOUT the drain goes on
    only for one of LINGERERS connections at once whose body averages LINGER_MIN_RATE (as mod_reqtimeout's
    MinRate, https://httpd.apache.org/docs/2.4/mod/mod_reqtimeout.html), up to LINGER_TIME: a trickling client is
    cut off after READ_TIMEOUT, as before, and a flood of uploads holds no more threads than before for longer."""
    connection.shutdown(socket.SHUT_WR)
    start = time.monotonic()
    lingering = _lingering.acquire(blocking=False)
    end = start + (LINGER_TIME if lingering else READ_TIMEOUT)
    received = 0
    try:
        while received < LINGER_BYTES:
            rate_floor = start + max(READ_TIMEOUT, received / LINGER_MIN_RATE)
            connection.settimeout(_left(min(end, rate_floor, time.monotonic() + READ_TIMEOUT)))
            chunk = connection.recv(65536)
            if not chunk:
                return
            received += len(chunk)
    finally:
        if lingering:
            _lingering.release()
