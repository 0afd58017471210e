"""The metric names a parse of one file hands to the next parse of the same file, and the series order that keeps.

A live run's statistics log arrives piece by piece (service/live/actions.py) and each piece is parsed on its own
(policy/parse/stats_log.StatsLogParser). A fresh parser registers every name of the rank again (hashed, copied into the
table's arena, decoded) and scans its first lines without name predictions. `KnownNames` carries the table (with
the decoded names) and the predictions (scan_block's `successor`) to the next piece's parser instead.

A fresh parser lists series in the order it registered their names; a parser that starts from known names finds
them numbered by earlier pieces. `PieceOrder` gives back the fresh order, so both parses yield the same ParsedStats:
the block a feed scans first (insert=True) registers the names of the lines the kernel takes, in line order, then
those the reference regex takes (the slow path), in line order; a later block only looks names up in the kernel,
so its new names are all the regex's, in line order. Where a block had no slow-path line and no over-long line,
both rules are "in order of first appearance", and the walk stops once every name of the block was met.

Belongs here: what is carried between parses and that order. Parsing is policy/parse/stats_log.py's; which file's names
may be carried to which parse is the caller's (service/live/actions.py keeps them per run and file).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fp8_policy.policy.parse.name_table import MAX_NAMES, NameTable

_OK, _SLOW = 0, 2  # the kernel's line statuses (policy/parse/_stats_kernel.py STATUS_OK, STATUS_SLOW)
_WALK_LINES = 4096  # lines looked at per step of PieceOrder.add (a log names every series once per iteration)


class NamedTable(NameTable):
    """A name table with its names decoded, in id order (names[k] is the name of id k)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []


@dataclass(slots=True)
class KnownNames:
    """A finished parse's names and name predictions, for the next parse of the same file."""

    table: NamedTable
    successor: np.ndarray | None

    def complete(self) -> bool:
        """Whether every id handed out has its decoded name (a parse that failed midway may leave one without)."""
        return len(self.table.names) == int(self.table.counter[0])


class PieceOrder:
    """The ids of a parse's series in the order a fresh parser would have registered them (module docstring)."""

    def __init__(self) -> None:
        self.seen = np.zeros(MAX_NAMES, dtype=bool)
        self._parts: list[np.ndarray] = []

    def block(
        self, sids: np.ndarray, status: np.ndarray, before: np.ndarray | None, inserted: bool, grouped: np.ndarray
    ) -> None:
        """One absorbed block: `status` as absorbed, `before` the kernel's statuses when the long-line drop or the slow
        path changed them (None: unchanged), `inserted` whether the kernel registered names in it, `grouped` the
        block's series offsets by id (kernel.group_block)."""
        if before is None:
            present = np.flatnonzero(np.diff(grouped))
            self.add(sids, status == _OK, int(np.count_nonzero(~self.seen[present])))
        elif inserted:
            self.add(sids, before == _OK)
            self.add(sids, (before == _SLOW) & (status == _OK))
        else:
            self.add(sids, status == _OK)

    def add(self, sids: np.ndarray, lines: np.ndarray, expected: int = -1) -> None:
        """The ids of the `lines` (a mask over `sids`) not met yet, in line order of their first line; the walk
        stops once `expected` new ones were met (-1: it walks every line)."""
        for at in range(0, lines.shape[0], _WALK_LINES):
            if expected == 0:
                return
            chunk = sids[at : at + _WALK_LINES][lines[at : at + _WALK_LINES]]
            new = chunk[~self.seen[chunk]]
            if new.size:
                distinct, first = np.unique(new, return_index=True)
                ordered = distinct[np.argsort(first, kind="stable")].astype(np.int64)
                self.seen[ordered] = True
                self._parts.append(ordered)
                expected -= ordered.shape[0]

    def ids(self, counts: np.ndarray) -> np.ndarray:
        """Every id met, in the fresh order (ids met on dropped lines only have no points: the parse drops them, as
        a fresh one does); an id with points the walk did not meet, were there one, would go last."""
        order = np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=np.int64)
        missed = np.flatnonzero((counts > 0) & ~self.seen[: counts.shape[0]])
        return np.concatenate((order, missed)) if missed.size else order
