"""policy/live/scalar_series.py: a scalars file parsed once into columns answers every `limit` as the line-by-line
reading did (step order, a repeated step by its last record, finite values only), within MAX_SCALARS_LINES."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from fp8_policy.policy.live import scalar_series
from fp8_policy.policy.live.scalar_events import SCALAR_KEYS, parse_lines
from fp8_policy.policy.live.scalar_series import NO_SCALARS, parse_scalars
from fp8_policy.policy.parse.scalars_file import last_lines_start


def reference(text: bytes, limit: int) -> dict[str, Any]:
    """The reading this module replaced (service/scalars/actions.py before it): every record, then the last `limit`."""
    records, unreadable, negative = parse_lines(text)
    by_step = {int(record["step"]): record for record in records}
    kept = [by_step[step] for step in sorted(by_step)][-limit:]
    series: dict[str, dict[str, list[Any]]] = {}
    for record in kept:
        for key in SCALAR_KEYS:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                entry = series.setdefault(key, {"steps": [], "values": []})
                entry["steps"].append(int(record["step"]))
                entry["values"].append(float(value))
    return {"records": len(kept), "unreadable_lines": unreadable, "negative_steps": negative, "series": series}


def random_file(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randrange(0, 120)):
        kind = rng.random()
        if kind < 0.05:
            lines.append(b"not json")
        elif kind < 0.08:
            lines.append(b"")
        else:
            record: dict[str, Any] = {"step": rng.randrange(-3, 60)}
            for key in rng.sample(SCALAR_KEYS, rng.randrange(0, len(SCALAR_KEYS) + 1)):
                record[key] = rng.choice([rng.uniform(-5, 5), float("nan"), float("inf"), 3, True, "x"])
            lines.append(json.dumps(record).encode())
    return b"\n".join(lines) + (b"\n" if rng.random() < 0.8 else b"")


@pytest.mark.parametrize("seed", range(40))
def test_columns_answer_every_limit_as_the_line_by_line_reading(seed: int) -> None:
    rng = random.Random(seed)
    text = random_file(rng)
    columns = parse_scalars(text)
    for limit in (1, 2, 7, 30, 100_000):
        assert columns.last(limit) == reference(text, limit)


def test_no_file_and_an_empty_file() -> None:
    assert NO_SCALARS.last(10) == {"records": 0, "series": {}}
    assert parse_scalars(b"").last(10) == {"records": 0, "unreadable_lines": 0, "negative_steps": 0, "series": {}}


def test_only_the_last_max_lines_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scalar_series, "MAX_SCALARS_LINES", 3)
    text = b"".join(b'{"step": %d, "loss": 1.0}\n' % step for step in range(10))
    assert parse_scalars(text).last(100)["series"]["loss"]["steps"] == [7, 8, 9]


@pytest.mark.parametrize(
    ("text", "lines", "tail"),
    [
        (b"", 2, b""),
        (b"a", 1, b"a"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\nc\n", 5, b"a\nb\nc\n"),
        (b"\n" * 5, 2, b"\n\n"),
    ],
)
def test_last_lines_start(text: bytes, lines: int, tail: bytes) -> None:
    assert text[last_lines_start(text, lines) :] == tail


def test_last_lines_start_across_blocks() -> None:
    text = b"".join(b"%07d\n" % k for k in range(400_000))  # 3.2 MB: several of its 1 MiB blocks
    assert text[last_lines_start(text, 250_000) :].startswith(b"0150000\n")
