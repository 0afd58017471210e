"""LiveUploader and a file the service refuses for good (413, e.g. a run's scalars past their bound): that file
is not sent again pass after pass, the other files still are, and the refusal is counted, not raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fp8_policy.client.errors import ApiError
from fp8_policy.client.live import LiveUploader

STATS = "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"


class BoundedService:
    """append_live as the service answers it: scalars refused with 413 ScalarsTooLarge, logs taken."""

    def __init__(self) -> None:
        self.appends: list[tuple[str, int, int]] = []
        self.sizes: dict[str, int] = {}

    def create_live_run(self, **_fields: Any) -> dict[str, Any]:
        return {"id": 5}

    def append_live(self, run_id: int, path: str, offset: int, data: bytes) -> dict[str, Any]:
        self.appends.append((path, offset, len(data)))
        if path == "scalars.jsonl":
            raise ApiError(413, "ScalarsTooLarge", "scalars.jsonl would grow past 33554432 bytes")
        self.sizes[path] = offset + len(data)
        return {"path": path, "size": self.sizes[path], "events": []}


def test_a_refused_file_is_not_sent_again_and_the_others_are(tmp_path: Path) -> None:
    log = tmp_path / "logs" / STATS
    log.parent.mkdir(parents=True)
    log.write_bytes(b"line 1\n")
    scalars = tmp_path / "scalars.jsonl"
    scalars.write_bytes(b'{"step": 0, "loss": 2.0}\n')
    service = BoundedService()
    uploader = LiveUploader(tmp_path / "logs", scalars=scalars, client=service)  # type: ignore[arg-type]

    uploader.sync_once()
    log.write_bytes(b"line 1\nline 2\n")
    scalars.write_bytes(b'{"step": 0, "loss": 2.0}\n{"step": 1, "loss": 1.9}\n')
    uploader.sync_once()

    assert [a for a in service.appends if a[0] == "scalars.jsonl"] == [("scalars.jsonl", 0, 25)]
    assert [a for a in service.appends if a[0] == STATS] == [(STATS, 0, 7), (STATS, 7, 7)]
    assert uploader.stats.failures == 1 and "33554432" in (uploader.stats.last_error or "")
