"""LiveUploader and `fp8-policy watch` against the real service on loopback: logs that grow while a job trains,
ranks that start late, a service that goes down and comes back, a truncated file, and a finalized run equal to
the final logs uploaded whole."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fp8_policy.client.client import PolicyClient
from fp8_policy.client.live import LiveUploader
from fp8_policy.db.migrate import upgrade
from fp8_policy.service.settings import Settings
from tests.conftest import RUN_FIGURES
from tests.service.live.test_live_runs import LAYERS, training_log
from tests.support.archives import meta_relpath, metadata_log, stats_relpath
from tests.support.uvicorn_app import plain_config, serving

pytestmark = pytest.mark.slow


@contextmanager
def serve(settings: Settings, port: int) -> Iterator[str]:
    """The app under uvicorn on 127.0.0.1:`port` in a thread (a fixed port, so it can come back after a stop)."""
    with serving(plain_config(settings), port=port):
        yield f"http://127.0.0.1:{port}"


def watch_cli(
    root: Path, url: str, *, name: str, project: str, interval: float, idle_finish: float
) -> subprocess.Popen[str]:
    """`fp8-policy watch` (the live uploader) on `root` as a subprocess, its --json output piped."""
    args = ["watch", str(root), "--name", name, "--project", project, "--interval", str(interval)]
    args += ["--idle-finish", str(idle_finish), "--url", url, "--json"]
    command = [sys.executable, "-m", "fp8_policy.service.cli", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for field in Settings.model_fields:
        monkeypatch.delenv(f"FP8_POLICY_{field.upper()}", raising=False)
    url = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(url)
    return Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url)


class Writer:
    """Appends a training log line by line batches, as nvdlfw_inspect does while the job trains."""

    def __init__(self, root: Path, rank: int) -> None:
        self.path = root / stats_relpath(rank)
        self.lines = training_log(rank).splitlines(keepends=True)
        self.at = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        meta = root / meta_relpath(rank)
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_bytes(metadata_log(dict.fromkeys(LAYERS, "fp8")))

    def write(self, count: int) -> None:
        with open(self.path, "ab") as handle:
            handle.writelines(self.lines[self.at : self.at + count])
        self.at += count

    @property
    def done(self) -> bool:
        return self.at >= len(self.lines)


def wait_ready(client: PolicyClient, run_id: int) -> dict:
    run = client.wait(run_id, timeout=60)
    assert run["status"] == "ready", run["error"]
    return run


def same_as_whole_upload(client: PolicyClient, run: dict, root: Path, project: str) -> None:
    whole = wait_ready(client, client.upload(root, project=f"{project}-whole", progress=False)["id"])
    for key in RUN_FIGURES:
        assert run[key] == whole[key], key
    live_csv, whole_csv = root.parent / "live.csv", root.parent / "whole.csv"
    client.metrics_csv(run["id"], live_csv)
    client.metrics_csv(whole["id"], whole_csv)
    assert live_csv.read_bytes() == whole_csv.read_bytes()


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def acked(uploader: LiveUploader, path: str) -> int:
    tracked = uploader._files.get(path)
    return tracked.acked if tracked is not None else -1


def test_a_growing_tree_streams_through_an_outage_and_ends_equal_to_the_whole_upload(
    settings: Settings, tmp_path: Path
) -> None:
    root, port = tmp_path / "logs", free_port()
    rank0 = Writer(root, 0)
    with serve(settings, port) as url:
        uploader = LiveUploader(root, name="growing", project="live-e2e", url=url, interval=0.05)
        uploader.start()
        rank0.write(150)
        wait_until(lambda: acked(uploader, stats_relpath(0)) == rank0.path.stat().st_size)
        rank1 = Writer(root, 1)  # a rank that starts late
        rank1.write(100)
        wait_until(lambda: acked(uploader, stats_relpath(1)) == rank1.path.stat().st_size)
    failures_before = uploader.stats.failures
    rank0.write(200)  # the service is down: these bytes wait
    rank1.write(200)
    wait_until(lambda: uploader.stats.failures > failures_before)
    assert acked(uploader, stats_relpath(0)) < rank0.path.stat().st_size
    with serve(settings, port) as url:
        while not (rank0.done and rank1.done):
            rank0.write(97)
            rank1.write(131)
            time.sleep(0.05)
        run = uploader.finish()
        assert run is not None and run["status"] == "queued"
        with PolicyClient(url) as client:
            finished = wait_ready(client, run["id"])
            same_as_whole_upload(client, finished, root, "live-e2e")
    kinds = {(e["kind"], e["layer"]) for e in uploader.stats.events}
    assert ("scale_inv_drop", LAYERS[0]) in kinds and ("band_crossing", LAYERS[-1]) in kinds


def test_a_truncated_file_is_continued_not_resent(settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    writer = Writer(root, 0)
    writer.write(200)
    with serve(settings, free_port()) as url, PolicyClient(url) as client:
        uploader = LiveUploader(root, project="live-trunc", client=client, interval=0.05)
        first = writer.path.read_bytes()
        uploader.sync_once()
        writer.path.write_bytes(b"")  # the job restarted from an earlier checkpoint and truncated its log
        writer.at = 100
        writer.write(300)
        second = writer.path.read_bytes()
        uploader.sync_once()

        received = client.live_run(uploader.run_id)["files"]
        stats = next(f for f in received if f["path"] == stats_relpath(0))
        assert stats["size"] == len(first) + len(second)
        run = wait_ready(client, uploader.finish()["id"])
        expected = tmp_path / "expected"
        (expected / stats_relpath(0)).parent.mkdir(parents=True)
        (expected / stats_relpath(0)).write_bytes(first + second)
        (expected / meta_relpath(0)).parent.mkdir(parents=True)
        (expected / meta_relpath(0)).write_bytes((root / meta_relpath(0)).read_bytes())
        same_as_whole_upload(client, run, expected, "live-trunc")
        assert run["lines_duplicated"] == 100  # iterations logged by both sessions: the last one wins


def test_watch_cli_finalizes_after_the_idle_time(settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    writer = Writer(root, 0)
    with serve(settings, free_port()) as url:
        proc = watch_cli(root, url, name="cli", project="live-cli", interval=0.1, idle_finish=1.5)
        while not writer.done:
            writer.write(120)
            time.sleep(0.1)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        import json

        run_id = json.loads(out)["id"]
        with PolicyClient(url) as client:
            run = wait_ready(client, run_id)
            assert run["name"] == "cli" and run["project"] == "live-cli"
            assert run["points"] == len(training_log(0).splitlines())
