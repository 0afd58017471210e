"""The arrays of one rank's metric-name table and their sizes, without the kernels that read and fill them.

Belongs here: the table's shape (`NameTable`, `MAX_NAMES`, ...), which the parser needs at import time. The
kernels that hash, look up and insert names are policy/parse/_name_kernel.py's and are loaded only when a log is
parsed: importing numba costs about 0.3 s of CPU, which `fp8-policy serve` would otherwise pay before it can
answer its first request (bench/first_touch.py measures that start).
"""

from __future__ import annotations

import numpy as np

TABLE_BITS = 16
TABLE_SIZE = 1 << TABLE_BITS  # open-addressing slots; at most half may be used
MAX_NAMES = TABLE_SIZE // 2
ARENA_BYTES = 8 * 1024 * 1024  # name bytes kept for predictions; a name that does not fit is never predicted


class NameTable:
    """The arrays of one rank's table (counter[0]: ids handed out, counter[1]: arena bytes used); filled by
    `_name_kernel.id_for` and the scan kernel (policy/parse/kernels.py `name_id`)."""

    def __init__(self) -> None:
        self.keys = np.zeros(TABLE_SIZE, dtype=np.uint64)
        self.lengths = np.zeros(TABLE_SIZE, dtype=np.int64)
        self.ids = np.full(TABLE_SIZE, -1, dtype=np.int64)
        self.counter = np.zeros(2, dtype=np.int64)
        self.arena = np.empty(ARENA_BYTES, dtype=np.uint8)
        self.arena_off = np.full(MAX_NAMES, -1, dtype=np.int64)
        self.sid_len = np.zeros(MAX_NAMES, dtype=np.int64)

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.keys, self.lengths, self.ids, self.counter, self.arena, self.arena_off, self.sid_len
