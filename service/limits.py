"""Input limits, in one place: every value a request carries is checked here before it reaches the database.

The limits are the same on SQLite and PostgreSQL, set by the narrower of the two: `INTEGER` columns (run ids,
ranks) are 32-bit on PostgreSQL, its text columns refuse NUL, and its `json` type refuses lone surrogates —
so nothing that one database would store and the other refuse gets through, and nothing that cannot be read
back (a lone surrogate, a 5,000-digit integer, JSON nested 1,000 deep) is ever stored.

Belongs here: the limits and the checks that raise a 4xx `{"error", "detail"}` for them (run ids, ranks,
cursors, names / projects / tags, run notes, upload file names, run metadata, the size of a live run's scalars).
Must not be here: the routes themselves, display of values already stored (policy/safe_text.py).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any

from starlette.requests import Request

from fp8_policy.policy.parse.scalars_file import MAX_SCALARS_BYTES
from fp8_policy.policy.safe_text import displayable
from fp8_policy.service.errors import BadRequest, InvalidParameter, NotFound, ScalarsTooLarge

MAX_ROW_ID = 2**31 - 1  # runs.id is INTEGER: int4 on PostgreSQL
MAX_RANK = 2**31 - 1  # series.rank is INTEGER
MAX_NAME_CHARS = 200  # runs.name, runs.project: String(200)
MAX_TAGS = 50
MAX_TAG_CHARS = 100  # run_tags.tag: String(100)
MAX_FILENAME_CHARS = 500  # runs.upload_filename: String(500)
MAX_NOTES_CHARS = 20_000  # runs.notes: Text; a description, not a log
MAX_METADATA_DEPTH = 32  # objects and arrays nested in the metadata object, itself included
MAX_METADATA_INT = 2**63  # |int| < 2^63: what every JSON reader in the pipeline keeps exactly (not JS, see docs)
MAX_CURSOR_DIGITS = len(str(MAX_ROW_ID))
MAX_ITERATION = 2**63 - 1  # series.iteration is BIGINT
# Request bodies but uploads' (service/transport/body_cap.py): an edit's 20,000 characters of notes, each escaped
# as \uXXXX, are 120 kB; recommendation options, alert rules and tokens are far smaller.
MAX_BODY_BYTES = 1024**2
MAX_PP_STAGE = 2**16  # pipeline stages of one job (policy/parallel/layout.py MAX_PARALLEL_SIZE): `pp_stage=` bound
# A live run's streamed scalars.jsonl: reads keep its last MAX_SCALARS_BYTES and an upload's is kept within them,
# so bytes past that bound would be stored (and copied into the store at finalize) without ever being shown.
MAX_LIVE_SCALARS_BYTES = MAX_SCALARS_BYTES

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Explicit embeddings, overrides and isolates (Unicode Bidirectional Algorithm, UAX #9 §2.1-2.2): "\u202eevil" is
# shown as "live" and reorders what is laid out next to it (a run's status badge); the marks LRM, RLM and ALM,
# which only steer neutral characters, stay allowed.
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
MAX_COMBINING_MARKS = 8  # in a row (Hebrew points and cantillation stack 3-4 on a letter; "Zalgo" text dozens)
_ASCII_DIGITS = re.compile(r"[0-9]+")


# --- every request ---------------------------------------------------------------------------------------------


async def check_request(request: Request) -> None:
    """App-wide dependency (service/app.py): the checks every route needs, before any route code runs.

    `async` because it is a few string checks: run on the event loop, not handed to the threadpool (a sync
    dependency is a thread hop per request; under the mixed load of bench/load.py, 30 readers busy the
    threadpool and each hop waited for the GIL, issue 20).

    A `{run_id}` path parameter beyond the id column is 404 (no row can have it), a `rank` query parameter
    outside 0..MAX_RANK is 400, and NUL in any query value is 400 (PostgreSQL text cannot hold it). Values that
    are not integers at all are left to FastAPI's own validation (422).
    """
    run_id = request.path_params.get("run_id")
    if isinstance(run_id, str) and _ASCII_DIGITS.fullmatch(run_id):
        check_run_id(int(run_id) if len(run_id) <= MAX_CURSOR_DIGITS else MAX_ROW_ID + 1, shown=run_id)
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise InvalidParameter(f"query parameter {displayable(key[:40])!r} contains NUL")
    rank = request.query_params.get("rank")
    if rank is not None and re.fullmatch(r"-?[0-9]+", rank.strip()):
        check_rank(int(rank) if len(rank) <= MAX_CURSOR_DIGITS + 1 else MAX_RANK + 1, shown=rank.strip())


# --- ids, ranks, cursors ----------------------------------------------------------------------------------------


def check_run_id(run_id: int, *, shown: str | None = None) -> int:
    """A run id that no row can have is simply not found (never an overflow in the driver)."""
    if not 1 <= run_id <= MAX_ROW_ID:
        raise NotFound(f"run {shown or run_id} does not exist")
    return run_id


def check_rank(rank: int | None, *, shown: str | None = None) -> int | None:
    if rank is not None and not 0 <= rank <= MAX_RANK:
        raise InvalidParameter(f"rank must be between 0 and {MAX_RANK}, got {shown or rank}")
    return rank


def run_id_of(value: object) -> int | None:
    """A run id given as a JSON number or a string of ASCII digits (`previous_run`), within 1..MAX_ROW_ID; None
    for anything else. ASCII only: `str.isdigit()` also takes "²" and "٣", which `int()` refuses or reads."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    text = str(value).strip()
    if len(text) > MAX_CURSOR_DIGITS or not _ASCII_DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_ROW_ID:
        return None
    return int(text)


def parse_cursor(cursor: str | None) -> int | None:
    """`next_cursor` as given back by the list endpoint: a run id in ASCII digits."""
    if not cursor:
        return None
    if len(cursor) > MAX_CURSOR_DIGITS or not _ASCII_DIGITS.fullmatch(cursor) or not 1 <= int(cursor) <= MAX_ROW_ID:
        raise BadRequest(f"invalid cursor {displayable(cursor[:40])!r}")
    return int(cursor)


# --- text fields -----------------------------------------------------------------------------------------------


def check_live_scalars_size(path: str, size: int) -> None:
    """413 `ScalarsTooLarge` when a piece would make a live run's scalars file `size` bytes, over the bound; the
    caller checks before writing, so a refused piece leaves nothing behind."""
    if size > MAX_LIVE_SCALARS_BYTES:
        raise ScalarsTooLarge(
            f"{path} would grow to {size} bytes; a live run keeps at most {MAX_LIVE_SCALARS_BYTES} bytes "
            f"({MAX_LIVE_SCALARS_BYTES // 1024**2} MiB) of training scalars: log them every Nth step"
        )


def check_text(field: str, value: str, max_chars: int, *, error: type[BadRequest] = BadRequest) -> str:
    """A name / project / tag / filter: at most `max_chars`, no control characters (NUL included), valid UTF-8.
    `error` is the class raised (its name is the answer's code)."""
    if len(value) > max_chars:
        raise error(f"{field} is longer than {max_chars} characters")
    if _CONTROL.search(value):
        raise error(f"{field} contains a control character (NUL, newline, ...)")
    if displayable(value) != value:
        raise error(f"{field} is not valid UTF-8 text")
    _check_bidi(field, value, error)
    return value


def check_label(field: str, value: str, max_chars: int, *, error: type[BadRequest] = BadRequest) -> str:
    """A run's name, project or tag (an alert rule's project): check_text's rules on its NFC form, which is what is
    stored (so "e" + U+0301 and "é" are one project, one tag), and no combining mark at its start or more than
    MAX_COMBINING_MARKS in a row (a leading mark draws itself onto whatever is shown before the label)."""
    value = unicodedata.normalize("NFC", value)
    check_text(field, value, max_chars, error=error)
    _check_marks(field, value, error)
    return value


def nfc(value: str | None) -> str | None:
    """A filter compared with stored labels, in the form they are stored in (check_label)."""
    return unicodedata.normalize("NFC", value) if value is not None else None


def _check_bidi(field: str, value: str, error: type[BadRequest]) -> None:
    found = _BIDI_CONTROLS.search(value)
    if found:
        raise error(
            f"{field} contains the bidirectional control U+{ord(found.group()):04X}, which reorders the text shown "
            "around it; write the text without it"
        )


def _check_marks(field: str, value: str, error: type[BadRequest]) -> None:
    run = 0
    for position, char in enumerate(value):
        if not unicodedata.category(char).startswith("M"):
            run = 0
            continue
        if position == 0:
            raise error(f"{field} starts with a combining mark (U+{ord(char):04X}), which has no letter to go on")
        run += 1
        if run > MAX_COMBINING_MARKS:
            raise error(f"{field} has more than {MAX_COMBINING_MARKS} combining marks in a row")


def check_tags(tags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Run tags (an upload's `tags` field split at commas, or an edit's list): each stripped and checked as text,
    empty ones dropped, duplicates once, at most MAX_TAGS."""
    stripped = [t.strip() for t in tags if t.strip()]
    if len(stripped) > 4 * MAX_TAGS or any(len(t) > 4 * MAX_TAG_CHARS for t in stripped):  # before NFC's work
        raise BadRequest(f"at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters each")
    cleaned = tuple(dict.fromkeys(unicodedata.normalize("NFC", t) for t in stripped))
    if len(cleaned) > MAX_TAGS or any(len(t) > MAX_TAG_CHARS for t in cleaned):
        raise BadRequest(f"at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters each")
    return tuple(check_label("a tag", tag, MAX_TAG_CHARS) for tag in cleaned)


_NOTES_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # control characters but tab and line breaks


def check_notes(notes: str | None) -> str | None:
    """A run's notes: multi-line text (tabs and line breaks kept) of at most MAX_NOTES_CHARS, no other control
    character (NUL included), valid UTF-8; stored in NFC, without bidi controls or piled-up combining marks (as
    labels, check_label); blank notes are none (None)."""
    if notes is None or not notes.strip():
        return None
    if len(notes) > MAX_NOTES_CHARS:
        raise BadRequest(f"notes are longer than {MAX_NOTES_CHARS} characters")
    if _NOTES_CONTROL.search(notes):
        raise BadRequest("notes contain a control character other than tab and line breaks (NUL, ...)")
    if displayable(notes) != notes:
        raise BadRequest("notes are not valid UTF-8 text (a lone surrogate)")
    notes = unicodedata.normalize("NFC", notes)
    if len(notes) > MAX_NOTES_CHARS:
        raise BadRequest(f"notes are longer than {MAX_NOTES_CHARS} characters")
    _check_bidi("notes", notes, BadRequest)
    _check_marks("notes", notes, BadRequest)
    return notes


def clean_filename(filename: str | None) -> str | None:
    """The client's file name is only a label (and a rank hint): control characters (bidi controls too) become
    U+FFFD, the end is kept."""
    if not filename:
        return None
    cleaned = displayable(_BIDI_CONTROLS.sub("\ufffd", _CONTROL.sub("\ufffd", filename)))
    return cleaned[-MAX_FILENAME_CHARS:]


def check_filters(**values: str | None) -> None:
    """Query filters are compared with stored text: the same rules, so PostgreSQL never sees a NUL."""
    for name, value in values.items():
        if value is not None:
            check_text(name, value, 1000, error=InvalidParameter)


# --- metadata --------------------------------------------------------------------------------------------------


def parse_metadata(raw: str | None) -> dict[str, Any]:
    """The `metadata` field: a JSON object that reads back exactly as sent from both databases, or 400."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except _MetadataRefused as exc:
        raise _invalid(str(exc)) from None
    except RecursionError:
        raise _invalid(f"is nested deeper than {MAX_METADATA_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and int() past sys.get_int_max_str_digits()
        raise _invalid(f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _invalid("must be a JSON object")
    _check_value(value, 1)
    _check_precision_config(value)
    return value


def _check_precision_config(metadata: dict[str, Any]) -> None:
    """A Megatron precision config stated as metadata (`megatron_precision_config`) must read as Megatron reads it
    (policy/analysis/megatron_config.py): the per-layer recipes of the analysis come from it."""
    if metadata.get("megatron_precision_config") is None:
        return
    from fp8_policy.policy.analysis.megatron_config import parse_precision_config  # only runs that state one

    try:
        parse_precision_config(metadata["megatron_precision_config"])
    except ValueError as exc:
        raise _invalid(f"megatron_precision_config {exc}") from None


class _MetadataRefused(ValueError):
    pass


def _invalid(reason: str) -> BadRequest:
    return BadRequest(f"metadata {reason}")  # the same code as every other refused field


def _refuse_constant(name: str) -> Any:
    raise _MetadataRefused(f"holds {name}, which is not JSON")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 20:
        raise _MetadataRefused(f"holds an integer of {len(text.lstrip('-'))} digits (at most 64-bit integers)")
    value = int(text)
    if not -MAX_METADATA_INT <= value < MAX_METADATA_INT:
        raise _MetadataRefused(f"holds the integer {value}, outside the 64-bit range")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _MetadataRefused(f"holds the number {text[:40]}, which is not a finite double")
    return value


def _check_value(value: Any, depth: int) -> None:
    if isinstance(value, str):
        _check_string(value)
    elif isinstance(value, (dict, list)):
        if depth > MAX_METADATA_DEPTH:
            raise _invalid(f"is nested deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                _check_string(key)
                _check_value(item, depth + 1)
        else:
            for item in value:
                _check_value(item, depth + 1)


def _check_string(text: str) -> None:
    if "\x00" in text:
        raise _invalid("holds a NUL character (\\u0000), which PostgreSQL cannot store")
    if displayable(text) != text:
        raise _invalid("holds a lone surrogate (\\ud800-\\udfff), which is not Unicode text")
