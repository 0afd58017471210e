"""Stream a training job's FP8 statistics while it runs: `LiveUploader` (a context manager) and `fp8-policy watch`.

Belongs here: tailing a log directory (every rank's nvdlfw_inspect files, ranks appearing as they start, plus an
optional training-scalars JSONL), sending the new bytes of each file at its byte offset every `interval` seconds,
surviving a service that is down (pieces are re-sent from the last acknowledged offset; re-sent bytes are harmless
on the server), and finalizing the run. It runs on a background thread and never raises into the training loop:
problems are logged and counted. HTTP only (PolicyClient); nothing here imports the server.

    from fp8_policy import LiveUploader
    with LiveUploader("fp8_logs", name="esm2-650m", project="esm2", url="http://fp8-policy:8000"):
        train()          # the run is finalized (ingested whole) when the block ends

A file that shrinks (truncated or rotated under the same name) is not re-sent from its start: its new content is
appended after what was already sent, as nvdlfw_inspect appends a new session to an existing log; the service's
ingest keeps the last value of a repeated iteration.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp8_policy.client.client import PolicyClient
from fp8_policy.client.errors import ApiError, ConnectionFailed, PolicyError
from fp8_policy.client.packing import find_log_files

log = logging.getLogger("fp8_policy.live")
SCALARS_NAME = "scalars.jsonl"  # the name the service stores training scalars under
MAX_PIECE_BYTES = 8 * 1024**2
HEAD_BYTES = 1024  # compared on every pass to notice a file rewritten under the same name
DEFAULT_URL_ENV = "FP8_POLICY_URL"


@dataclass
class _Tracked:
    """One local file: how much of it the service has, and where the local file stands in that stream."""

    local: Path | None  # None until found on disk (a file known only from a resumed run)
    remote: str
    acked: int = 0  # bytes the service has acknowledged for `remote`
    base: int = 0  # server offset of this local file's byte 0 (grows when the local file was truncated)
    inode: int | None = None
    head: bytes = b""  # the file's first bytes as sent: different ones mean the file was rewritten
    refused: str | None = None  # why the service takes no more of it (413: a bound reached); not sent again


@dataclass
class UploaderStats:
    pieces: int = 0
    bytes_sent: int = 0
    failures: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    last_error: str | None = None


class LiveUploader:
    """Tail `log_dir` and stream it to a live run; `finish()` (or leaving the `with` block) finalizes it."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        name: str | None = None,
        project: str = "default",
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        url: str | None = None,
        token: str | None = None,
        interval: float = 2.0,
        scalars: str | os.PathLike[str] | None = None,
        run_id: int | None = None,
        client: PolicyClient | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.interval = interval
        self.scalars = Path(scalars) if scalars is not None else None
        self.fields: dict[str, Any] = {
            "name": name,
            "project": project,
            "tags": list(tags),
            "metadata": dict(metadata or {}),
        }
        base_url = url or os.environ.get(DEFAULT_URL_ENV, "http://127.0.0.1:8000")
        self.client = client or PolicyClient(base_url, token=token)
        self._own_client = client is None
        self.run_id = run_id
        self.on_event = on_event
        self.stats = UploaderStats()
        self._files: dict[str, _Tracked] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._resume = run_id is not None

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> LiveUploader:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.finish()

    def start(self) -> None:
        """Start the background thread (it creates the live run, retrying while the service is down)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fp8-policy-live", daemon=True)
            self._thread.start()

    def finish(self, *, finalize: bool = True, timeout: float = 120.0) -> dict[str, Any] | None:
        """Stop tailing, send what is left and finalize the run; returns the finalized run (None if it failed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        deadline = time.monotonic() + timeout
        result = None
        while time.monotonic() < deadline:
            try:
                self.sync_once()
                result = self.client.finalize_live_run(self._require_run()) if finalize else None
                break
            except ApiError as exc:
                self._note(exc)
                if exc.status < 500 and exc.status not in (408, 429):
                    break  # the service refused (e.g. nothing to finalize): retrying will not help
            except PolicyError as exc:
                self._note(exc)
            time.sleep(min(self.interval, 2.0))
        if self._own_client:
            self.client.close()
        return result

    # --- one pass -------------------------------------------------------------------------------
    def sync_once(self) -> int:
        """Send every file's new bytes once; returns the bytes sent (raises PolicyError when the service fails)."""
        with self._lock:
            run_id = self._require_run()
            if self._resume:
                self._load_offsets(run_id)
                self._resume = False
            sent = 0
            for tracked in self._discover():
                sent += self._send_new_bytes(run_id, tracked)
            return sent

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except PolicyError as exc:  # service down or refusing: keep the offsets, try again next tick
                self._note(exc)
            except OSError as exc:  # a file vanished between listing and reading
                self._note(exc)
            except Exception as exc:  # never into the training loop
                log.exception("live upload pass failed")
                self._note(exc)
            self._stop.wait(self.interval)

    def _require_run(self) -> int:
        if self.run_id is None:
            run = self.client.create_live_run(**self.fields)
            self.run_id = int(run["id"])
            log.info("live run %s created", self.run_id)
        return self.run_id

    def _load_offsets(self, run_id: int) -> None:
        """Resuming an existing live run: start each file where the service's copy ends."""
        for item in self.client.live_run(run_id)["files"]:
            self._files[item["path"]] = _Tracked(None, item["path"], acked=int(item["size"]))

    def _discover(self) -> list[_Tracked]:
        found = [(path, name) for path, name in find_log_files(self.log_dir) if not name.endswith(".gz")]
        if self.scalars is not None and self.scalars.is_file():
            found.append((self.scalars, SCALARS_NAME))
        tracked = []
        for path, remote in found:
            item = self._files.get(remote)
            if item is None:
                item = self._files[remote] = _Tracked(path, remote)
            elif item.local is None:  # known from a resumed run: the local file is the one the service has
                item.local = path
            tracked.append(item)
        return tracked

    def _send_new_bytes(self, run_id: int, item: _Tracked) -> int:
        assert item.local is not None  # _discover pairs every tracked file with a local one
        if item.refused is not None:
            return 0
        stat = item.local.stat()
        local_sent = item.acked - item.base
        sent = 0
        with open(item.local, "rb") as handle:
            head = handle.read(min(HEAD_BYTES, local_sent)) if local_sent else b""
            rewritten = (
                stat.st_size < local_sent
                or (item.inode is not None and stat.st_ino != item.inode)
                or (bool(item.head) and head != item.head[: len(head)])
            )
            if rewritten:
                log.warning(
                    "%s was truncated or replaced: its new content is appended after the %s bytes sent",
                    item.local,
                    item.acked,
                )
                item.base, local_sent, item.head = item.acked, 0, b""
            item.inode = stat.st_ino
            while local_sent < stat.st_size:
                handle.seek(local_sent)
                piece = handle.read(min(MAX_PIECE_BYTES, stat.st_size - local_sent))
                if not piece:
                    break
                try:
                    answer = self.client.append_live(run_id, item.remote, item.acked, piece)
                except ApiError as exc:
                    if exc.status == 413:  # the file reached a bound (a run's scalars): retrying cannot help
                        item.refused = str(exc)
                        self.stats.failures += 1
                        self.stats.last_error = str(exc)
                        log.warning("%s is not sent any more (the other files are): %s", item.local, exc)
                        break
                    if exc.status != 409:
                        raise
                    self._resync(run_id, item)  # the service has more or fewer bytes than we thought
                    local_sent = item.acked - item.base
                    continue
                if len(item.head) < HEAD_BYTES and local_sent < HEAD_BYTES:
                    item.head = (item.head + piece)[:HEAD_BYTES] if local_sent == len(item.head) else item.head
                item.acked = int(answer["size"])
                local_sent = item.acked - item.base
                sent += len(piece)
                self.stats.pieces += 1
                self.stats.bytes_sent += len(piece)
                for event in answer.get("events", []):
                    self.stats.events.append(event)
                    if self.on_event is not None:
                        self.on_event(event)
        return sent

    def _resync(self, run_id: int, item: _Tracked) -> None:
        sizes = {f["path"]: int(f["size"]) for f in self.client.live_run(run_id)["files"]}
        server = sizes.get(item.remote, 0)
        if server < item.base:  # should not happen: the service lost bytes; start this local file over there
            item.base = server
        item.acked = server

    def _note(self, exc: BaseException) -> None:
        self.stats.failures += 1
        self.stats.last_error = str(exc)
        if isinstance(exc, ConnectionFailed):
            log.info("live upload: %s (will retry)", exc)
        else:
            log.warning("live upload: %s", exc)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(
    uploader: LiveUploader,
    *,
    pid: int | None = None,
    idle_finish: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any] | None:
    """`fp8-policy watch`: stream until `pid` exits or nothing grew for `idle_finish` seconds, then finalize."""
    last_growth = clock()
    seen = -1
    while True:
        try:
            uploader.sync_once()
        except PolicyError as exc:
            uploader._note(exc)
        total = sum(t.acked for t in uploader._files.values())
        if total != seen:
            seen, last_growth = total, clock()
        if pid is not None and not process_alive(pid):
            break
        if idle_finish is not None and clock() - last_growth >= idle_finish:
            break
        sleep(uploader.interval)
    return uploader.finish()
