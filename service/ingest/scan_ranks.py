"""The plan job's parse of every rank's statistics during its one scan of the archive (service/ingest/pipeline.py).

Belongs here: `ScanRanks`, the callback the scan hands each statistics member to. The scan decompresses every byte
anyway; parsing there spares a job per rank that would read the archive again (0.45 s a rank, most of it the
re-read). Each rank's parser is finished as soon as the archive moves on to another rank, so memory holds no open
parse but the current one. What a rank logged is digested (`content_digest`) and its parsed arrays are kept once
per distinct content (`Content`): data-parallel replicas log the same bytes, so a replica's copy is dropped at
once and memory grows with distinct series, not with ranks. Past `Settings.scan_parse_bytes` of kept arrays no
new rank is parsed: those ranks, ranks whose sessions arrive out of order or apart, and ranks whose parse fails
are left to per-rank jobs (which report a failure with the rank).
Must not be here: the layout, names, replicas over global names (service/ingest/parallel_ranks.py), storage.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8_policy.policy.parse.log_files import LogFile, classify_log_path, session_key
from fp8_policy.policy.parse.name_table import MAX_NAMES
from fp8_policy.policy.parse.stats_blocks import ByteStream
from fp8_policy.policy.parse.stats_log import ParsedStats, StatsLogError, StatsLogParser
from fp8_policy.policy.parse.stats_names import KnownNames
from fp8_policy.service.ingest.archive.stream import ChunkedReader
from fp8_policy.service.ingest.parse import stats_file_report
from fp8_policy.service.settings import Settings

# Members up to this size are read whole by the scan and parsed by the background thread (a parallel job's ranks
# are a few MB each); a larger one is parsed where the scan stands, streamed. At most BACKGROUND_BYTES wait.
INLINE_MEMBER_BYTES = 16 * 1024**2
BACKGROUND_BYTES = 64 * 1024**2

# The shared name table (see ScanRanks._known) starts afresh past this many names, far below the table's own limit
# (policy/parse/name_table.py) so that the names of many ranks never fill it for one rank's parse.
_KNOWN_NAMES_LIMIT = MAX_NAMES // 8


def content_digest(parsed: ParsedStats) -> bytes:
    """16 bytes over everything a rank's parse holds: its metric names in order and every series' points. Two
    ranks with the same digest logged the same statistics (a fresh parse and one from known names give the same
    ParsedStats, policy/parse/stats_names.py, so the two ingest paths agree)."""
    h = hashlib.sha256()
    h.update(np.fromiter(map(len, parsed.names), np.int64, len(parsed.names)).tobytes())  # where each name ends
    h.update("".join(parsed.names).encode("utf-8", "surrogatepass"))
    for array in (parsed.offsets, parsed.iterations, parsed.values):  # their buffers, not copies (6M points: 96 MB)
        h.update(np.ascontiguousarray(array).data)
    return h.digest()[:16]


def parsed_bytes(parsed: ParsedStats) -> int:
    return int(parsed.offsets.nbytes + parsed.iterations.nbytes + parsed.values.nbytes)


@dataclass(slots=True, eq=False)
class Content:
    """Statistics one or more ranks logged byte for byte; `parsed` is kept until the ranks that store it are stored."""

    digest: bytes
    parsed: ParsedStats | None
    nbytes: int
    points: int
    duplicated: int
    last_iteration: int | None
    ranks: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ScannedRank:
    """One rank parsed by the scan: its content and its files' entries of the ingest report."""

    rank: int
    content: Content
    reports: list[dict[str, Any]]
    streamed: list[str]  # its members, in the order they were fed (session order, checked by `settle`)


@dataclass(slots=True)
class _Open:
    rank: int
    parser: StatsLogParser
    reports: list[dict[str, Any]]
    streamed: list[str]
    last_key: tuple[Any, ...]


class ScanRanks:
    """Parses every statistics member the scan hands over (`feed`), within the memory budget."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.budget = settings.scan_parse_bytes
        self.kept = 0  # bytes of parsed arrays held by `contents`
        self.ranks: dict[int, ScannedRank] = {}
        self.left: dict[int, str] = {}  # rank -> why its own job parses it
        self.contents: dict[bytes, Content] = {}
        self._open: _Open | None = None
        self._known: KnownNames | None = None
        self._background = _Background(BACKGROUND_BYTES)

    # --- the scan's callbacks -------------------------------------------------------------------------------------
    def feed(self, streamed: str, stream: io.BufferedIOBase) -> None:
        """A statistics member: a small one is read here and parsed by the background thread while the scan
        decompresses the next members; a large one is parsed here, streamed, once the thread has caught up."""
        logfile = classify_log_path(streamed)
        if logfile is None:
            return
        data = stream.read(INLINE_MEMBER_BYTES + 1)
        if len(data) <= INLINE_MEMBER_BYTES:
            self._background.submit(len(data), self._feed, logfile, streamed, io.BytesIO(data))
            return
        self._background.drain()
        self._feed(logfile, streamed, _Prefixed(data, stream))

    def later(self, nbytes: int, work: Callable[..., None], *args: Any) -> None:
        """Other work of the scan (a metadata member's parse) for the background thread, in order."""
        self._background.submit(nbytes, work, *args)

    def close(self) -> None:
        """Stop the background thread (after a failed scan too); what it was doing is dropped."""
        self._background.close()

    def _feed(self, logfile: LogFile, streamed: str, stream: ByteStream) -> None:
        rank = logfile.rank
        if rank in self.left:
            return
        current = self._open
        if current is not None and current.rank == rank:
            if session_key(logfile) <= current.last_key:
                self._abandon(rank, "its sessions are not in order in the archive")
                return
        else:
            self._finish_open()
            if rank in self.ranks:
                self._leave(rank, "its statistics files are apart in the archive")
                return
            if self.kept >= self.budget:
                self.left[rank] = "past the scan's memory budget (scan_parse_bytes)"
                return
            current = self._open = _Open(rank, self._parser(), [], [], ())
        try:
            report = current.parser.feed(ChunkedReader(stream), streamed)  # type: ignore[arg-type]
        except StatsLogError:
            self._abandon(rank, "its parse failed (its own job reports why)")
            return
        current.reports.append(stats_file_report(report, rank))
        current.streamed.append(streamed)
        current.last_key = session_key(logfile)

    def settle(self, stats: dict[int, list[tuple[str, str]]]) -> None:
        """After the scan: the background work done, the last open parse finished; a rank counts as parsed only
        when it was fed exactly its listed members in session order (`stats`: ArchiveScan.stats); reports take
        the members' own names."""
        self._background.drain()
        self.close()
        self._finish_open()
        for rank in list(self.ranks):
            listed = stats.get(rank, [])
            if [s for _m, s in listed] != self.ranks[rank].streamed:
                self._leave(rank, "not every session of it was read in order")
                continue
            for report, (member, _s) in zip(self.ranks[rank].reports, listed, strict=True):
                report["path"] = member
        for rank in stats:
            if rank not in self.ranks:
                self.left.setdefault(rank, "not reached by the scan's parse")

    # --- inside ----------------------------------------------------------------------------------------------------
    def _parser(self) -> StatsLogParser:
        known = self._known
        if known is not None and (not known.complete() or len(known.table.names) > _KNOWN_NAMES_LIMIT):
            known = self._known = None
        return StatsLogParser(
            max_line_bytes=self.settings.max_line_bytes, workers=self.settings.parse_threads, known=known
        )

    def _finish_open(self) -> None:
        current, self._open = self._open, None
        if current is None:
            return
        parser = current.parser
        parsed = parser.finish()
        # The next rank's parser starts from these names: ranks of a job log (nearly) the same ones, and a parser
        # that knows them neither hashes nor decodes them again (policy/parse/stats_names.py; same result either way).
        self._known = parser.known_names()
        digest = content_digest(parsed)
        content = self.contents.get(digest)
        if content is None:
            nbytes = parsed_bytes(parsed)
            last = int(parsed.iterations.max()) if parsed.points else None
            content = Content(digest, parsed, nbytes, parsed.points, parsed.duplicated_points, last)
            self.contents[digest] = content
            self.kept += nbytes
        content.ranks.append(current.rank)
        self.ranks[current.rank] = ScannedRank(current.rank, content, current.reports, current.streamed)

    def _abandon(self, rank: int, why: str) -> None:
        """Drop the open parse of `rank` and leave the rank to its job."""
        if self._open is not None and self._open.rank == rank:
            self._open = None
            self._known = None  # a parse stopped midway may leave its table without some decoded names
        self._leave(rank, why)

    def _leave(self, rank: int, why: str) -> None:
        scanned = self.ranks.pop(rank, None)
        self.left[rank] = why
        if scanned is None:
            return
        content = scanned.content
        content.ranks.remove(rank)
        if not content.ranks:
            self.contents.pop(content.digest, None)
            self.kept -= content.nbytes
            content.parsed = None


class _Background:
    """One thread doing the scan's parsing in the order it was handed over, with at most `limit` bytes waiting:
    the scan thread decompresses and walks the archive (isal's inflate drops the GIL) while this one parses (the
    compiled kernels drop it too), so both cores work on a job of many small ranks. An error in the thread is
    raised by `drain`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pool: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None
        self._waiting = 0
        self._blocked = False
        self._cond = threading.Condition()
        self._error: BaseException | None = None

    def submit(self, nbytes: int, work: Callable[..., None], *args: Any) -> None:
        with self._cond:
            while self._waiting and self._waiting + nbytes > self._limit:
                self._blocked = True
                self._cond.wait()
            self._waiting += nbytes
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="scan-parse")

        def task() -> None:
            try:
                if self._error is None:
                    work(*args)
            except BaseException as exc:  # raised again by drain(), in the scan's thread
                self._error = exc
            finally:
                with self._cond:
                    self._waiting -= nbytes
                    if self._blocked:  # the scan waits for room (a notify per member cost 4 % of a 1,024-rank scan)
                        self._blocked = False
                        self._cond.notify_all()

        self._last = self._pool.submit(task)

    def drain(self) -> None:
        if self._last is not None:
            self._last.result()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class _Prefixed:
    """A member's stream whose first bytes were read already (to tell a small member from a large one)."""

    def __init__(self, head: bytes, rest: io.BufferedIOBase) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readinto(self, view: memoryview) -> int:
        if self._head.nbytes:
            n = min(len(view), self._head.nbytes)
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._rest.readinto(view)
