"""Packing a log directory (only nvdlfw_inspect logs, relative paths, .log.gz as is) and the upload body."""

from __future__ import annotations

import gzip
import io
import tarfile
from email.parser import BytesParser
from pathlib import Path

import httpx
import pytest

from fp8_policy.client import NoLogFiles
from fp8_policy.client.packing import ProgressReader, StderrBar, find_log_files, is_log_path, pack_directory
from tests.client.fakes import run_body

LOGS = {
    "rank_0/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log": b"plan lines\n",
    "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log": b"stats 0\n",
    "rank_1/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_20260115_230630_globalrank-1.log.gz": gzip.compress(
        b"stats 1\n", mtime=0
    ),
    "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-2.log": b"stats 2\n",
}
JUNK = {
    "checkpoint.pt": b"\0" * 64,
    "notes.txt": b"not a log\n",
    "rank_0/nvdlfw_inspect_logs/._nvdlfw_inspect_globalrank-0.log": b"macOS resource fork",
    "rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log.bak": b"backup",
    "tensorboard/events.out.tfevents": b"tb",
}


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _members(archive) -> dict[str, bytes]:
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log", True),
        ("run/rank_3/nvdlfw_inspect_logs/nvdlfw_inspect_20260101_000000_globalrank-3.log", True),
        ("nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log.gz", True),
        ("nvdlfw_inspect_globalrank-0.log", False),
        ("nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log.1", False),
        ("other_logs/nvdlfw_inspect_globalrank-0.log", False),
    ],
)
def test_is_log_path(path: str, expected: bool) -> None:
    assert is_log_path(path) is expected


def test_only_log_files_are_packed_with_their_relative_paths(tmp_path: Path) -> None:
    root = _write(tmp_path / "fp8_log_dir", {**LOGS, **JUNK})

    with pack_directory(root) as archive:
        members = _members(archive)

    assert members == LOGS  # .log.gz bytes are kept as they are, junk is left out


def test_packing_the_same_directory_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    root = _write(tmp_path / "logs", LOGS)

    with pack_directory(root) as first, pack_directory(root) as second:
        assert first.read() == second.read()


def test_a_log_folder_given_directly_keeps_its_own_name(tmp_path: Path) -> None:
    root = _write(tmp_path, LOGS) / "rank_0" / "nvdlfw_inspect_statistics_logs"

    assert [arc for _path, arc in find_log_files(root)] == [
        "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
    ]


def test_a_directory_without_logs_fails_before_any_request(tmp_path: Path, mock_client) -> None:
    requests: list[httpx.Request] = []
    client = mock_client(lambda request: requests.append(request) or httpx.Response(500))
    root = _write(tmp_path / "empty", JUNK)

    with pytest.raises(NoLogFiles, match="holds no nvdlfw_inspect log files"):
        client.upload(root)

    assert requests == []


def _form(request: httpx.Request) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart request body."""
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser().parsebytes(head + request.read())
    return {
        part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
        for part in message.get_payload()
    }


def test_upload_of_a_directory_sends_a_tar_gz_and_the_fields(tmp_path: Path, mock_client) -> None:
    forms: list[dict] = []
    client = mock_client(
        lambda request: forms.append(_form(request)) or httpx.Response(202, json=run_body(7, "queued"))
    )
    root = _write(tmp_path / "esm2_run", {**LOGS, **JUNK})

    run = client.upload(
        root, name="esm2-650m", project="esm2", tags=["nightly", "h100"], metadata={"hidden_size": 1280}, progress=False
    )

    assert run["status"] == "queued"
    form = forms[0]
    assert form["file"][0] == "esm2_run.tar.gz"
    assert _members(io.BytesIO(form["file"][1])) == LOGS
    assert {k: v[1] for k, v in form.items() if k != "file"} == {
        "name": b"esm2-650m",
        "project": b"esm2",
        "tags": b"nightly,h100",
        "metadata": b'{"hidden_size": 1280}',
    }


def test_upload_of_a_file_sends_it_as_is(tmp_path: Path, mock_client) -> None:
    forms: list[dict] = []
    client = mock_client(
        lambda request: forms.append(_form(request)) or httpx.Response(202, json=run_body(7, "queued"))
    )
    log = tmp_path / "run.tgz"
    log.write_bytes(b"\x1f\x8b archive bytes")

    client.upload(log, progress=False)

    assert forms[0] == {"file": ("run.tgz", b"\x1f\x8b archive bytes")}


def test_progress_bar_on_stderr_only_when_asked(tmp_path: Path, mock_client, capsys) -> None:
    client = mock_client(lambda request: request.read() and httpx.Response(202, json=run_body(7, "queued")))
    root = _write(tmp_path / "logs", LOGS)

    client.upload(root, progress=True)
    shown = capsys.readouterr().err
    client.upload(root)  # auto: stderr is not a terminal under pytest

    assert shown.startswith("\rupload logs.tar.gz [") and shown.endswith("100%  0.0/0.0 MiB\n")
    assert capsys.readouterr().err == ""


def test_progress_reader_counts_bytes_read_and_restarts_on_seek(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 10)
    with open(path, "rb") as raw:
        reader = ProgressReader(raw, lambda sent, total: seen.append((sent, total)))
        reader.read(4)
        reader.seek(0)
        reader.read()

    assert seen == [(4, 10), (10, 10)]


def test_stderr_bar_redraws_only_on_a_new_percentage() -> None:
    out = io.StringIO()
    bar = StderrBar("upload x", stream=out)
    for sent in (0, 1, 2, 50, 100):
        bar(sent, 100)
    bar.close()

    assert out.getvalue().count("\r") == 5
    assert out.getvalue().endswith("[" + "#" * 30 + "] 100%  0.0/0.0 MiB\n")
