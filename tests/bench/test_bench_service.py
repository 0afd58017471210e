"""bench/service.py (the service the benchmarks measure) and bench/load.py's shared mixed-load pieces.

The happy path of `start_service` (a real `serve` answering /healthz, ~10 s) is left to tests/service/app/test_cli.py,
which starts the same command; here only what costs no service start."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import httpx
import pytest

from bench.load import Recorder, Upload, print_endpoints, print_uploads, run_window, upload_outcome, window_result
from bench.service import start_service, wait_run


def test_a_service_that_exits_during_start_up_is_reported(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="exited during start-up .status 3"):
        start_service(tmp_path, command=[sys.executable, "-c", "import sys; sys.exit(3)"], env=dict(os.environ))


def test_the_window_runs_every_reader_and_uploader_until_stopped() -> None:
    stop = threading.Event()
    seen: list[object] = []
    loads = [Upload("a", b"", 1, 1), Upload("b", b"", 2, 2)]

    def reader(k: int) -> None:
        seen.append(k)
        stop.wait()

    window = run_window(reader, 3, lambda k, upload: seen.append(upload.name), loads, 0.2, stop)

    assert sorted(map(str, seen)) == ["0", "1", "2", "a", "b"] and stop.is_set() and 0.2 <= window < 5


def test_an_upload_is_exact_only_when_ready_with_every_line_and_point(capsys: pytest.CaptureFixture[str]) -> None:
    upload = Upload("u", b"", 10, 10)
    ready = {"status": "ready", "lines_read": 10, "points": 10, "created_at": None, "finished_at": None}

    outcomes = [
        upload_outcome(upload, 202, ready),
        upload_outcome(upload, 202, {**ready, "points": 9}),
        {**upload_outcome(upload, 503, {}), "answered_s": 0.5},
    ]
    print_uploads(outcomes)
    print_endpoints(
        {
            "list": {
                "requests": 4,
                "p50_ms": 1,
                "p99_ms": 2,
                "max_ms": 3,
                "5xx": 0,
                "other_non_2xx": 1,
                "transport_errors": 0,
            }
        }
    )

    assert [o["exact"] for o in outcomes] == [True, False, False]
    lines = capsys.readouterr().out.splitlines()
    assert "NOT EXACT" not in lines[0] and "NOT EXACT" in lines[1] and "HTTP 503 in  0.50 s" in lines[2]
    assert lines[4].split() == ["list", "4", "1", "2", "3", "0", "1", "0"]


def test_wait_run_polls_until_ready_or_failed_and_gives_the_last_answer_at_the_deadline() -> None:
    answers = {7: iter(["queued", "ingesting", "ready"]), 8: iter(["queued"] * 1000)}
    asked: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        run_id = int(request.url.path.rsplit("/", 1)[1])
        asked.append(run_id)
        return httpx.Response(200, json={"id": run_id, "status": next(answers[run_id])})

    with httpx.Client(base_url="http://bench", transport=httpx.MockTransport(answer)) as client:
        assert wait_run(client, 7, 30, poll=0.01)["status"] == "ready" and asked == [7, 7, 7]
        assert wait_run(client, 8, 0.05, poll=0.01)["status"] == "queued" and asked.count(8) >= 2


def test_a_window_result_totals_the_5xx_and_transport_errors_of_every_endpoint() -> None:
    recorder = Recorder()
    for endpoint, status in [("list", 200), ("list", 503), ("get", 500), ("get", 200)]:
        recorder.call(endpoint, lambda status=status: httpx.Response(status))

    def refused() -> httpx.Response:
        raise httpx.ConnectError("refused")

    recorder.call("get", refused)
    result = window_result(2.5, 3, [], recorder)

    assert (result["seconds"], result["readers"], result["server_5xx"], result["transport_errors"]) == (2.5, 3, 2, 1)
    assert result["endpoints"]["get"]["requests"] == 2 and result["endpoints"]["list"]["5xx"] == 1
