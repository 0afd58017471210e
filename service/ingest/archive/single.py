"""The single-log reader: a bare or gzipped log becomes one statistics file named from its rank."""

from __future__ import annotations

import io
from pathlib import Path
from typing import cast

from fp8_policy.policy.parse.log_files import LogFile, single_file_log
from fp8_policy.service.ingest.archive.detect import open_source
from fp8_policy.service.ingest.archive.limits import CHUNK_BYTES, _Budget, _Skipped
from fp8_policy.service.ingest.archive.output import _check_rank, _Output, _write


def _extract_single(
    src: Path, out: _Output, budget: _Budget, skipped: _Skipped, hint: str | None
) -> list[tuple[LogFile, Path]]:
    """A bare log is the statistics file; it is written under a name built from its rank, not the client's."""
    budget.count_members()
    log = _check_rank(single_file_log(hint))
    stamp = f"_{log.stamp}" if log.stamp else ""
    relpath = f"rank_{log.rank}/nvdlfw_inspect_statistics_logs/nvdlfw_inspect{stamp}_globalrank-{log.rank}.log"
    with open_source(src, CHUNK_BYTES) as opened:
        # _write peeks. typeshed wants a RawIOBase under a BufferedReader; any binary stream with readinto works.
        raw = opened if hasattr(opened, "peek") else io.BufferedReader(cast("io.RawIOBase", opened), CHUNK_BYTES)
        return [(log, _write(out, budget, relpath, raw, count_total=True))]
