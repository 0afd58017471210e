"""Recognise nvdlfw_inspect log files by their path and order them per rank.

Belongs here: the file-name grammar of an `fp8_log_dir` tree (nvdlfw_inspect log dir layout, https://github.com/NVIDIA/nvidia-dlfw-inspect),
extended to any leading folders and to `.log.gz`, and the order in which a rank's files are read.
Input contract: relative POSIX paths as strings (archive member names); whether a path is *safe* to write
is not decided here. Must not be here: any I/O, archive handling, web or database imports.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["stats", "metadata"]

# nvdlfw_inspect's two directories (logging.py: GENERIC_LOG_DIR / STATISTICS_LOG_DIR).
KIND_DIRS: dict[str, Kind] = {
    "nvdlfw_inspect_statistics_logs": "stats",
    "nvdlfw_inspect_logs": "metadata",
}

# The basename nvdlfw_inspect writes: nvdlfw_inspect[_YYYYmmdd_HHMMSS]_globalrank-R.log (optionally gzipped later).
_BASENAME = r"nvdlfw_inspect(?:_(?P<stamp>\d{8}_\d{6}))?_globalrank-(?P<rank>\d+)\.log(?:\.gz)?"

# nvdlfw_inspect's log path (rank_N/nvdlfw_inspect_{logs,statistics_logs}/...log), with `.gz` allowed; `search` accepts any leading folders.
PATH = re.compile(
    r"(?:^|/)(?:rank_(?P<dirrank>\d+)/)?(?P<kind>nvdlfw_inspect_logs|nvdlfw_inspect_statistics_logs)/"
    + _BASENAME
    + r"$"
)
BASENAME = re.compile(rf"^{_BASENAME}$")

# Name given to a single uploaded file whose name carries no rank (see single_file_log).
SINGLE_UPLOAD_NAME = "upload.log"


@dataclass(frozen=True, slots=True)
class LogFile:
    """One recognised log file.

    rank: the `globalrank-R` of the file name. nvdlfw_inspect writes the global rank itself, while the
    `rank_N/` folder is added by the caller (bionemo), so when both exist and differ the file name wins.
    stamp: `YYYYmmdd_HHMMSS` when NVDLFW_INSPECT_ENABLE_LOG_TIMESTAMP was on, else None.
    relpath: the path as given (archive member name), `.gz` included when present.
    """

    kind: Kind
    rank: int
    stamp: str | None
    relpath: str

    @property
    def gzipped(self) -> bool:
        return self.relpath.endswith(".gz")


def classify_log_path(relpath: str) -> LogFile | None:
    """Return the LogFile for an nvdlfw_inspect stats or metadata path, or None for any other path.

    Accepted: `[any/folders/][rank_N/]nvdlfw_inspect_{statistics_,}logs/nvdlfw_inspect[_stamp]_globalrank-R.log[.gz]`.
    Separators must be `/`; a leading `./` is fine. macOS `._` resource forks and other names return None.
    """
    match = PATH.search(relpath)
    if match is None:
        return None
    return LogFile(
        kind=KIND_DIRS[match["kind"]],
        rank=int(match["rank"]),
        stamp=match["stamp"],
        relpath=relpath,
    )


def single_file_log(filename: str | None) -> LogFile:
    """The LogFile for a single uploaded stats file (not an archive).

    A single upload is always the statistics log. Its rank and stamp come from the basename when it is an
    nvdlfw_inspect name (`nvdlfw_inspect_globalrank-3.log` -> rank 3); any other name (`run.log`, None) is rank 0.
    relpath is the basename only (never a path the client chose), or SINGLE_UPLOAD_NAME when empty.
    """
    basename = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    match = BASENAME.match(basename)
    if match is None:
        return LogFile(kind="stats", rank=0, stamp=None, relpath=basename or SINGLE_UPLOAD_NAME)
    return LogFile(kind="stats", rank=int(match["rank"]), stamp=match["stamp"], relpath=basename)


def session_key(log: LogFile) -> tuple[int, str, bool, str, str]:
    """Sort key of log files: rank, kind, then sessions oldest first.

    Timestamped sessions first, by stamp (YYYYmmdd_HHMMSS sorts as text); the untimestamped file last: with the
    default NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=1 it is rewritten by every untimestamped run, so it holds the
    most recent session that did not opt into timestamps. relpath breaks ties."""
    return (log.rank, log.kind, log.stamp is None, log.stamp or "", log.relpath)


def order_log_files(files: Iterable[LogFile], kind: Kind = "stats") -> dict[int, list[LogFile]]:
    """Group the files of one kind by rank, each list ordered oldest session first.

    Call once per kind (stats, metadata); files of the other kind are ignored. Ranks are in ascending order.
    A reader that lets later lines win on (name, iteration) then keeps the most recent session's values.
    """
    by_rank: dict[int, list[LogFile]] = defaultdict(list)
    for log in files:
        if log.kind == kind:
            by_rank[log.rank].append(log)
    return {rank: sorted(by_rank[rank], key=session_key) for rank in sorted(by_rank)}
