"""Property-based tests of the edge checks (service/limits.py) and of displayable text (policy/safe_text.py).

* Any `metadata` text is either refused with BadRequest or accepted as a dict that reads back exactly from JSON
  and from both databases' JSON columns (no NUL, no lone surrogate, finite numbers, 64-bit integers, bounded
  depth) — and a stored run holding it always serializes.
* Any name / project / tag text is refused or accepted as valid UTF-8 without control characters.
* displayable() turns any str into valid UTF-8 without NUL, is idempotent, and leaves ordinary text alone;
  displayable_json() makes any JSON-like value strictly encodable.
Budget: tests/support/fuzz.py (FP8_POLICY_FUZZ_EXAMPLES for longer runs).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fp8_policy.policy.safe_text import displayable, displayable_json
from fp8_policy.service.errors import BadRequest
from fp8_policy.service.limits import (
    MAX_METADATA_DEPTH,
    MAX_METADATA_INT,
    check_text,
    clean_filename,
    parse_cursor,
    parse_metadata,
)
from tests.support.fuzz import fuzz

# Any code point, lone surrogates (what a JSON "\ud800" escape or surrogateescape produces) and C0 controls included.
any_text = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"]),
        st.characters(max_codepoint=0x1F),
    ),
    max_size=60,
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(any_text, children, max_size=4)),
    max_leaves=30,
)


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def strings_of(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


def numbers_of(value):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from numbers_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from numbers_of(item)


def assert_storable(metadata: dict) -> None:
    assert isinstance(metadata, dict)
    assert depth(metadata) <= MAX_METADATA_DEPTH
    for text in strings_of(metadata):
        assert "\x00" not in text
        text.encode("utf-8")
    for number in numbers_of(metadata):
        assert (isinstance(number, int) and -MAX_METADATA_INT <= number < MAX_METADATA_INT) or math.isfinite(number)
    encoded = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    assert json.loads(encoded) == metadata
    assert json.loads(json.dumps(metadata)) == metadata  # SQLAlchemy's JSON type: ensure_ascii=True


def accepted_or_refused(raw: str):
    try:
        return parse_metadata(raw)
    except BadRequest as exc:
        assert exc.status_code == 400 and exc.error == "BadRequest"
        assert exc.detail.startswith("metadata ")
        exc.detail.encode("utf-8")
        return None


@fuzz(300)
@given(value=json_values)
def test_any_json_value_is_refused_or_stored_exactly(value) -> None:
    try:
        raw = json.dumps(value, ensure_ascii=bool(hash(repr(value)) % 2))
    except (ValueError, RecursionError):
        return
    metadata = accepted_or_refused(raw)
    if metadata is not None:
        assert_storable(metadata)
        assert metadata == ({} if value == {} else value)


@fuzz(300)
@given(raw=st.one_of(any_text, st.text(alphabet='{}[]":,0123456789.eE-+ \\uNaIfinty\x00', max_size=80)))
def test_any_text_is_refused_or_stored_exactly(raw: str) -> None:
    metadata = accepted_or_refused(raw)
    if metadata is not None:
        assert_storable(metadata)


@fuzz(50)
@given(depth_=st.integers(1, 3000), kind=st.sampled_from(["object", "array"]))
def test_nesting_of_any_depth_is_refused_or_stored(depth_: int, kind: str) -> None:
    inner = '{"a":' * depth_ + "1" + "}" * depth_ if kind == "object" else "[" * depth_ + "]" * depth_
    metadata = accepted_or_refused('{"x": ' + inner + "}")

    assert (metadata is not None) == (depth_ + 1 <= MAX_METADATA_DEPTH)


@fuzz(300)
@given(value=any_text, max_chars=st.integers(1, 80))
def test_names_are_refused_or_clean(value: str, max_chars: int) -> None:
    try:
        accepted = check_text("name", value, max_chars)
    except BadRequest:
        return
    assert accepted == value and len(value) <= max_chars
    value.encode("utf-8")
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


@fuzz(300)
@given(value=st.one_of(st.none(), any_text))
def test_file_names_are_always_storable(value) -> None:
    cleaned = clean_filename(value)
    if cleaned is not None:
        cleaned.encode("utf-8")
        assert len(cleaned) <= 500 and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in cleaned)


@fuzz(300)
@given(cursor=st.one_of(any_text, st.integers(-5, 2**64).map(str)))
def test_cursors_are_refused_or_a_valid_run_id(cursor: str) -> None:
    try:
        after = parse_cursor(cursor)
    except BadRequest as exc:
        exc.detail.encode("utf-8")
        return
    assert after is None or 1 <= after <= 2**31 - 1


@fuzz(300)
@given(text=st.one_of(any_text, st.binary(max_size=60).map(lambda b: b.decode("utf-8", "surrogateescape"))))
def test_displayable_is_valid_utf8_without_nul_and_idempotent(text: str) -> None:
    shown = displayable(text)

    shown.encode("utf-8")
    assert "\x00" not in shown
    assert displayable(shown) == shown
    if "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert shown == text


@fuzz(300)
@given(value=json_values)
def test_displayable_json_always_encodes_strictly(value) -> None:
    json.dumps(displayable_json(value), ensure_ascii=False, allow_nan=False).encode("utf-8")


@pytest.mark.parametrize("depth_", [100, 1000, 5000])
def test_displayable_json_cuts_deep_values(depth_: int) -> None:
    value: list = []
    for _ in range(depth_):
        value = [value]
    json.dumps(displayable_json(value), allow_nan=False)
