"""Issue 20 item 5: uploads that trickle cannot hold the upload slots, and one client cannot take every slot.

The real `fp8-policy serve` on a loopback port with 2 upload slots, a minimum body rate of 2,000 bytes/s after a
1 s grace, and a per-read timeout (30 s) that a trickling client easily stays under: two clients each send an
upload's head and then one byte every 0.3 s. Both slots are theirs at first (another upload gets 503); the rate
floor cuts them off (408 `BodyTooSlow`, their `.part` files removed) and the next upload is accepted.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fp8_policy.service.errors import TooManyUploads
from fp8_policy.service.transport.uploads import UploadGate, default_share
from tests.service.hardening.test_transport_limits import Served, _parts, _status_and_body, serve_process, upload_head
from tests.support.archives import multi_rank_tree, tree_tar_gz
from tests.support.asyncrun import run_async

MIN_RATE, GRACE = 2000, 1.0


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    options = ("--body-timeout", "30", "--max-uploads", "2")
    with serve_process(
        tmp_path_factory.mktemp("pace") / "data",
        *options,
        FP8_POLICY_BODY_MIN_RATE=str(MIN_RATE),
        FP8_POLICY_BODY_RATE_GRACE=str(GRACE),
        FP8_POLICY_MAX_UPLOADS_PER_CLIENT="2",  # both tricklers come from 127.0.0.1: let them take every slot
    ) as served:
        yield served


class Trickler(threading.Thread):
    """An upload announcing 1 MB whose body then comes one byte every 0.3 s; keeps what the server answered."""

    def __init__(self, served: Served) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
        self.sock.sendall(b"".join(upload_head(1_000_000)))
        self.answer = b""
        self.stop = threading.Event()

    def run(self) -> None:
        self.sock.settimeout(0.3)
        try:
            while not self.stop.is_set():
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    self.sock.sendall(b"x")
                    continue
                if not chunk:
                    return
                self.answer += chunk
        except OSError:
            return
        finally:
            self.sock.close()


def _post(served: Served, archive: bytes) -> httpx.Response:
    return httpx.post(f"{served.url}/api/v1/runs", files={"file": ("run.tgz", archive)}, timeout=10)


def test_trickling_uploads_are_cut_off_and_free_their_slots(paced: Served, tmp_path: Path) -> None:
    archive = tree_tar_gz(multi_rank_tree(tmp_path / "run", ranks=1))
    tricklers = [Trickler(paced) for _ in range(2)]
    for trickler in tricklers:
        trickler.start()
    try:
        time.sleep(0.3)
        busy = _post(paced, archive)
        assert busy.status_code == 503 and busy.json()["error"] == "TooManyUploads", busy.text
        for trickler in tricklers:
            trickler.join(timeout=GRACE + 10)
            assert not trickler.is_alive(), "a trickling upload kept its slot"
    finally:
        for trickler in tricklers:
            trickler.stop.set()
    for trickler in tricklers:
        status, headers, body = _status_and_body(trickler.answer)
        assert status == 408 and body["error"] == "BodyTooSlow" and set(body) == {"error", "detail"}
        assert "bytes/s" in body["detail"] and headers.get("connection") == "close"
    accepted = _post(paced, archive)
    assert accepted.status_code in (200, 202), accepted.text
    deadline = time.monotonic() + 5
    while _parts(paced) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _parts(paced) == []


def test_a_steady_upload_above_the_floor_is_not_cut(paced: Served) -> None:
    """A body slower than the per-read timer would ever notice, but above the floor: 4,000 bytes/s for 2.5 s."""
    body = b"x" * 10_000

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 400):
            time.sleep(0.1)
            yield body[start : start + 400]

    response = httpx.post(
        f"{paced.url}/api/v1/runs",
        content=pieces(),
        headers={"content-type": "text/plain", "content-length": str(len(body))},
        timeout=20,
    )
    # the body arrived whole: it is judged as a log (not a statistics log), never as too slow
    assert response.status_code != 408, response.text


def test_one_client_holds_at_most_its_share_of_the_slots() -> None:
    async def scenario() -> None:
        gate = UploadGate(4, 2)
        async with gate.slot("token a"), gate.slot("token a"):
            with pytest.raises(TooManyUploads, match="per client is 2"):
                async with gate.slot("token a"):
                    pass
            async with gate.slot("token b"), gate.slot("address 10.0.0.1"):
                with pytest.raises(TooManyUploads, match="limit is 4"):
                    async with gate.slot("token c"):
                        pass
        assert gate.active == 0 and gate.by_client == {}
        async with gate.slot("token a"):
            pass

    run_async(scenario)
    assert default_share(8) == 6 and default_share(2) == 1 and default_share(1) == 1
    assert UploadGate(8).max_per_client == 6 and UploadGate(2, 5).max_per_client == 2
