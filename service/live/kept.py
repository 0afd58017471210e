"""What this process keeps of a live run between its pieces: the detector table it saved last and each statistics
file's metric names, valid only while the stored state document is the one it saved.

The table (policy/live/table.SeriesTable) is kept with the stamp of the state document it was saved as: the run's
next piece finds the same stamp stored (one small locked read) and skips reading and decoding the document (~5 ms
of an 8 MiB piece's ~60). Another process's save, or a rolled-back one, changes the stamp; a deleted run's state
goes with it, so a run made again finds no stamp. Each statistics file's names (policy/parse/stats_names.KnownNames, by
path) ride with the table and are dropped with it: the file's next piece is parsed with them registered and
predicted (~2.5 ms of the ~17 ms parse of an 8 MiB piece).

Belongs here: the cache and its rules. Must not be here: reading or saving the state (db/live.py) and the
detectors (service/live/actions.py, policy/live/batch.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from fp8_policy.policy.live.table import SeriesTable
from fp8_policy.policy.parse.stats_names import KnownNames

# (stamp of the saved document, its keys besides the table, the table, the names of each statistics file)
KeptTable = tuple[datetime, dict[str, Any], SeriesTable, dict[str, KnownNames]]
MAX_KEPT_TABLES = 32
_tables: OrderedDict[int, KeptTable] = OrderedDict()
_tables_lock = threading.Lock()


def known_names(run_id: int, stamp: datetime | None, path: str) -> KnownNames | None:
    """The names the file's last piece left, taken out of the cache (`keep_table` puts them back once this piece is
    saved), while the run's kept table is the stored one (`stamp`: the stored document's, None for none)."""
    with _tables_lock:
        kept = _tables.get(run_id)
        if kept is None or stamp is None or kept[0] != stamp:
            return None
        names = kept[3].pop(path, None)
    return names if names is not None and names.complete() else None


def take_table(run_id: int) -> KeptTable | None:
    """The run's table as this process last saved it, taken out of the cache (a piece that fails after changing
    it must not leave it there; the stamp check catches one whose transaction was rolled back after saving)."""
    with _tables_lock:
        return _tables.pop(run_id, None)


def keep_table(run_id: int, kept: KeptTable) -> None:
    with _tables_lock:
        _tables[run_id] = kept
        while len(_tables) > MAX_KEPT_TABLES:
            _tables.popitem(last=False)
