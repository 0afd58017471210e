"""The training-scalars member of an uploaded archive: which member it is, and whether its lines can be drawn.

Belongs here: the member-name rule and the line-by-line check of `scalars.jsonl`, the same JSON-lines file a
live run streams (`{"step": 120, "loss": 2.31, "grad_norm": 0.84, "lr": 3e-4, ...}` per line, policy/
scalar_events.py reads it), and the verdict the ingest reports. Pure: the caller reads the bytes and stores the
file; nothing here touches a file, the database or HTTP.

The member: `scalars.jsonl` (its bytes may be gzip, or the name end in `.gz`: the archive readers undo gzip) at
the archive's root or in its one top-level folder (`my_run/scalars.jsonl`, next to `my_run/rank_0/`), where
`fp8-policy upload DIR` packs `DIR/scalars.jsonl`. A training log's own loss lines (Megatron, bionemo) are not
read: each writes its own format, and nvdlfw_inspect's `log_scalar` lines keep 4 decimals (a learning rate of
3e-4 reads `value=0.0003`), too coarse to draw.

Steps count from 0 (a training step or iteration is never negative): a record whose `step` is below 0 is skipped
wherever lines are parsed (`is_negative_step`: the ingest's check here, a live run's reads and detectors in
policy/live/scalar_events.py), so it is never drawn (the run page's curves put it at x < 0) and never fed to the
detectors. It is never dropped silently either: it is counted (`negative_steps` in the ingest report's `scalars`
entry and in a scalars read) and named (ScalarsNegativeSteps in the report's warning).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from fp8_policy.policy.parse.lr_schedule import LrDecay

SCALARS_NAME = "scalars.jsonl"
MEMBER = re.compile(r"^(?:[^/]+/)?scalars\.jsonl(?:\.gz)?$")
MAX_SCALARS_BYTES = 32 * 1024**2  # decompressed; ~250k steps of six scalars
# Lines, whatever their size: 11 M tiny lines fit in the byte bound (a 26 KB upload) and kept the ingest worker
# busy a minute; a million is four times the steps of the largest file of real records.
MAX_SCALARS_LINES = 1_000_000
MAX_LINE_BYTES = 64 * 1024  # one record; a longer line is not a record
MAX_SAMPLES = 3
_BLOCK = 1 << 20
_SHORTEST_RECORD = len(b'{"step":0}')
MAX_INT_DIGITS = 18  # a JSON integer of up to 18 digits is an int (within int64); longer ones are floats


def last_lines_start(text: bytes, lines: int) -> int:
    """Where the last `lines` lines of `text` start (0 when it has no more), found by counting newlines from the
    end a block at a time: the memory and time of bytes.count, never a list of lines."""
    end = len(text)
    if text.endswith(b"\n"):
        end -= 1  # the last line's own newline does not start another line
    seen = 0
    while end > 0:
        begin = max(0, end - _BLOCK)
        found = text.count(b"\n", begin, end)
        if seen + found < lines:
            seen += found
            end = begin
            continue
        import numpy as np  # here, not at import: service/limits.py names this module on the start-up path

        newlines = np.flatnonzero(np.frombuffer(text, dtype=np.uint8, count=end - begin, offset=begin) == 10)
        return begin + int(newlines[-(lines - seen)]) + 1
    return 0


def is_scalars_member(relpath: str) -> bool:
    """True for `scalars.jsonl[.gz]` at the root or one folder down (a safe, normalised member path)."""
    return MEMBER.match(relpath) is not None


def _number(text: str) -> int | float:
    """A JSON integer as an int when it fits in 64 bits, else as the float it is nearest (inf past 1e308): a step
    of 10**20 is then no integer step (numpy's int64 axes could not hold it), and a value of 400 digits no int
    that `float()` or `math.isfinite` would refuse with OverflowError (a 500 on every read of the scalars)."""
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else float(text)


def is_negative_step(record: dict[str, Any]) -> bool:
    """A record (from `record_of`) whose step is below 0: skipped and counted by every parse (module docstring)."""
    return int(record["step"]) < 0


def record_of(raw: bytes) -> dict[str, Any] | None:
    """The record of one line: a JSON object with an integer `step`; None for anything else (a line shorter than
    the shortest record, `{"step":0}`, without parsing it)."""
    if len(raw) < _SHORTEST_RECORD:
        return None
    try:
        record: object = json.loads(raw, parse_int=_number)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return record


@dataclass(slots=True)
class ScalarsCheck:
    """Fed the member's lines one at a time (`line`), then `verdict()`: whether to keep the file, and why not."""

    member: str
    records: int = 0
    unreadable: int = 0
    negative_steps: int = 0  # records with a step below 0: skipped, not kept
    first_negative: str | None = None  # the first of them, as "line N: step S"
    lines: int = 0
    size: int = 0
    too_large: bool = False
    too_many_lines: bool = False
    first_step: int | None = None
    last_step: int | None = None
    samples: list[str] = field(default_factory=list)  # the first unreadable lines, as "line N: ..."
    broken: str | None = None  # why the member's bytes could not be read to their end (a damaged gzip)
    lr: LrDecay = field(default_factory=LrDecay)  # where the logged `lr` starts to decay (policy/parse/lr_schedule.py)

    def line(self, raw: bytes) -> bool:
        """Count one line (with its newline); True when it is a record (the caller keeps it). Past
        MAX_SCALARS_BYTES or MAX_SCALARS_LINES `too_large` is set: the caller stops reading."""
        self.lines += 1
        self.size += len(raw)
        if self.size > MAX_SCALARS_BYTES:
            self.too_large = True
        if self.lines > MAX_SCALARS_LINES:
            self.too_large = self.too_many_lines = True
            return False
        if not raw.strip():
            return False
        record = record_of(raw) if len(raw) <= MAX_LINE_BYTES else None
        if record is None:
            self._unreadable(raw)
            return False
        if is_negative_step(record):
            self.negative_steps += 1
            self.first_negative = self.first_negative or f"line {self.lines}: step {record['step']}"
            return False
        self.records += 1
        step = int(record["step"])
        self.first_step = step if self.first_step is None else min(self.first_step, step)
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        if "lr" in record:
            self.lr.add(step, record["lr"])
        return True

    def overlong(self, head: bytes, size: int) -> None:
        """A line of `size` bytes, over MAX_LINE_BYTES, of which the caller read `head` only."""
        self.lines += 1
        self.size += size
        if self.size > MAX_SCALARS_BYTES:
            self.too_large = True
        self._unreadable(head)

    def _unreadable(self, raw: bytes) -> None:
        self.unreadable += 1
        if len(self.samples) < MAX_SAMPLES:
            text = raw[:80].decode("utf-8", "replace").rstrip()
            self.samples.append(f"line {self.lines}: {text!r}")

    def verdict(self) -> dict[str, Any]:
        """The ingest report's `scalars` entry: {member, kept, records, unreadable_lines, negative_steps, steps,
        warning, and `lr` ({points, peak, decay_start}: policy/parse/lr_schedule.py) when kept records log an lr}. Kept when it holds at least one record with a step of 0 or more and is within MAX_SCALARS_BYTES;
        `warning` names what is wrong (ScalarsTooLarge, ScalarsUnreadable, ScalarsNegativeSteps when every step
        is below 0: nothing kept; ScalarsPartlyUnreadable, ScalarsNegativeSteps: kept, those lines left out; both
        of these, '; ' between them)."""
        warning = None
        if self.broken is not None:
            warning = f"ScalarsUnreadable: {self.member} cannot be read to its end ({self.broken}); not kept"
        elif self.too_many_lines:
            warning = (
                f"ScalarsTooLarge: {self.member} holds more than {MAX_SCALARS_LINES:,} lines; "
                "not kept (thin it to every Nth step)"
            )
        elif self.too_large:
            warning = (
                f"ScalarsTooLarge: {self.member} holds more than {MAX_SCALARS_BYTES // 1024**2} MiB; "
                "not kept (thin it to every Nth step)"
            )
        elif not self.records and self.negative_steps:
            warning = (
                f"ScalarsNegativeSteps: every step of {self.member} is below 0 ({self.negative_steps} records, "
                f"first {self.first_negative}); training steps count from 0; not kept"
            )
        elif not self.records:
            warning = (
                f'ScalarsUnreadable: no line of {self.member} is a JSON object with an integer "step"'
                + (f" ({'; '.join(self.samples)})" if self.samples else " (the file is empty)")
                + "; not kept"
            )
        else:
            left_out = []
            if self.unreadable:
                left_out.append(
                    f"ScalarsPartlyUnreadable: {self.unreadable} of "
                    f"{self.records + self.unreadable + self.negative_steps} lines of {self.member} are not a JSON "
                    f'object with an integer "step" and are left out ({"; ".join(self.samples)})'
                )
            if self.negative_steps:
                left_out.append(
                    f"ScalarsNegativeSteps: {self.negative_steps} lines of {self.member} have a step below 0 and "
                    f"are left out (first {self.first_negative}); training steps count from 0"
                )
            warning = "; ".join(left_out) or None
        kept = self.broken is None and not self.too_large and self.records > 0
        return {
            "member": self.member,
            "kept": kept,
            "records": self.records if kept else 0,
            "unreadable_lines": self.unreadable,
            "negative_steps": self.negative_steps,
            "steps": [self.first_step, self.last_step] if kept else None,
            "warning": warning,
            **({"lr": self.lr.report()} if kept and self.lr.points else {}),
        }


def ambiguous(members: list[str]) -> dict[str, Any]:
    """The report entry when an archive holds more than one scalars member: none is kept."""
    return {
        "member": members[0],
        "kept": False,
        "records": 0,
        "unreadable_lines": 0,
        "negative_steps": 0,
        "steps": None,
        "warning": f"ScalarsAmbiguous: {len(members)} scalars files ({', '.join(members[:4])}); "
        "none kept: pack one scalars.jsonl at the archive's root",
    }
