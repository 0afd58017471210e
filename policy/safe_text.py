"""Text and JSON values that can always be stored and shown, whatever bytes they came from.

Belongs here: turning a str that may hold lone surrogates (a non-UTF-8 archive member name decoded with
`surrogateescape`, a JSON `"\\ud800"` escape) or NUL into printable, valid UTF-8 without losing what it said,
and the same for JSON-like values read back from storage (depth, integer size, non-finite floats).
Used wherever a name or message is stored or sent: failure messages, per-file reports, run metadata.
Must not be here: validation that refuses input (service/limits.py does that at the edge), any I/O.
"""

from __future__ import annotations

import math
from typing import Any

# Deeper JSON is cut off when shown: pydantic and json.dumps recurse, and a stored value must always serialize.
MAX_SHOWN_DEPTH = 64
# Integers beyond 64 bits are shown as text: Python refuses to print ints over 4,300 digits, and JavaScript
# clients could not read them exactly anyway.
MAX_SHOWN_INT = 2**63


def displayable(text: str) -> str:
    """`text` as valid UTF-8 without NUL: undecodable bytes become `\\xNN`, other lone surrogates `\\udNNN`,
    NUL becomes `\\x00` (so the result can go into PostgreSQL text, SQLite and a JSON response)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:  # bytes that `surrogateescape` smuggled in: show them as the bytes they were
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # surrogates from elsewhere (a JSON escape): show the code point
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def displayable_json(value: Any, depth: int = 0) -> Any:
    """A copy of a JSON-like value that strict JSON encoders always accept (see MAX_SHOWN_DEPTH, MAX_SHOWN_INT)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -MAX_SHOWN_INT <= value < MAX_SHOWN_INT else _int_text(value)
    if isinstance(value, float):
        return (
            value
            if math.isfinite(value)
            else ("NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity")
        )
    if isinstance(value, str):
        return displayable(value)
    if depth >= MAX_SHOWN_DEPTH:
        return f"(nested deeper than {MAX_SHOWN_DEPTH} levels; not shown)"
    if isinstance(value, dict):
        return {displayable(str(k)): displayable_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [displayable_json(v, depth + 1) for v in value]
    return displayable(repr(value))


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # over sys.get_int_max_str_digits()
        return f"(integer of about {int(value.bit_length() * 0.30103)} digits; not shown)"
