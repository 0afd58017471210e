"""The scalars member rule and its line check (policy/parse/scalars_file.py), and the reader that copies it line by line
through chunk boundaries (service/ingest/scalars.py)."""

from __future__ import annotations

import io
import json

import pytest

from fp8_policy.policy.parse import scalars_file
from fp8_policy.policy.parse.scalars_file import ScalarsCheck, is_scalars_member, record_of
from fp8_policy.service.ingest import scalars as reader_module
from fp8_policy.service.ingest.scalars import ScalarsReader


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("scalars.jsonl", True),
        ("scalars.jsonl.gz", True),
        ("my_run/scalars.jsonl", True),
        ("a/b/scalars.jsonl", False),
        ("rank_0/nvdlfw_inspect_logs/scalars.jsonl", False),
        ("train_scalars.jsonl", False),
        ("scalars.json", False),
        ("scalars.jsonl/x", False),
    ],
)
def test_the_member_is_scalars_jsonl_at_the_root_or_one_folder_down(path: str, expected: bool) -> None:
    assert is_scalars_member(path) is expected


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        (b'{"step": 3, "loss": 1.5}', True),
        (b'{"step": true, "loss": 1.5}', False),  # a bool is no step
        (b'{"step": 3.0}', False),
        (b'{"loss": 1.5}', False),
        (b"[1, 2]", False),
        (b"3", False),
        (b"[" * 100_000, False),  # too deep for the decoder: unreadable, not an exception
        (b"\xff\xfe", False),
    ],
)
def test_a_record_is_a_json_object_with_an_integer_step(line: bytes, ok: bool) -> None:
    assert (record_of(line) is not None) is ok


def test_the_verdict_names_what_is_wrong() -> None:
    check = ScalarsCheck("scalars.jsonl")
    for raw in (b'{"step": 5, "loss": 2}\n', b"\n", b"oops\n", b'{"step": 1, "loss": 3}\n'):
        check.line(raw)
    verdict = check.verdict()
    assert verdict["kept"] and verdict["records"] == 2 and verdict["steps"] == [1, 5]
    assert verdict["warning"] == (
        'ScalarsPartlyUnreadable: 1 of 3 lines of scalars.jsonl are not a JSON object with an integer "step" '
        "and are left out (line 3: 'oops')"
    )
    empty = ScalarsCheck("x/scalars.jsonl").verdict()
    assert not empty["kept"] and empty["warning"].startswith("ScalarsUnreadable: no line of x/scalars.jsonl")


def lines(n: int) -> bytes:
    return "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1)}) + "\n" for s in range(n)).encode()


def test_lines_split_across_chunks_and_an_overlong_line_spanning_several(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reader_module, "CHUNK_BYTES", 7)  # every line crosses chunk boundaries
    monkeypatch.setattr(scalars_file, "MAX_LINE_BYTES", 40)
    text = lines(5) + b'{"step": 99, "pad": "' + b"x" * 100 + b'"}\n' + lines(3) + b'{"step": 7, "loss": 0.5}'
    reader = ScalarsReader(tmp_path)

    reader.read("scalars.jsonl", io.BytesIO(text))  # type: ignore[arg-type]

    report = reader.report()
    assert report is not None and report["kept"] and report["records"] == 9 and report["unreadable_lines"] == 1
    assert "line 6: " in report["warning"]
    assert reader.path is not None
    kept = reader.path.read_bytes()
    assert kept == lines(5) + lines(3) + b'{"step": 7, "loss": 0.5}\n'  # only the records, each ending its line
    reader.discard()
    assert not list(tmp_path.iterdir())


def test_a_file_over_the_bound_stops_being_read_and_leaves_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(scalars_file, "MAX_SCALARS_BYTES", 100)
    reader = ScalarsReader(tmp_path)

    reader.read("scalars.jsonl", io.BytesIO(lines(50)))  # type: ignore[arg-type]

    report = reader.report()
    assert report is not None and not report["kept"] and report["warning"].startswith("ScalarsTooLarge")
    assert reader.path is None and not list(tmp_path.iterdir())
