"""POST /api/v1/runs with bad input, on SQLite and PostgreSQL.

Every bad upload gets a clear error in the stable {"error", "detail"} shape, either at once (4xx) or as a
`failed` run whose `error` starts with a stable code (and whose data endpoints answer 409 NotReady with it).
Either way nothing is half-stored (no layers/series rows, checked directly in the database) and nothing is
written outside the data directory; data_dir/uploads and data_dir/work are left empty.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.service.ingest.junk import never_held_a_log
from fp8_policy.service.settings import Settings
from tests.conftest import upload, wait_for_run
from tests.support.archives import (
    TS,
    esm2_tar_gz,
    gz_bytes,
    meta_relpath,
    metadata_log,
    special_member,
    stats_log,
    stats_relpath,
    tar_bytes,
    zeros_tar_gz,
    zip_bytes,
)
from tests.support.dbutil import files_under, row_counts, runs_of_project

RUNS = "/api/v1/runs"
OCTET_STREAM = "application/octet-stream"  # the multipart content type the error cases below send
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])
STATS_1 = stats_relpath(1)
MiB = 1024**2
HELP_415 = (
    "is not accepted; send multipart/form-data with a 'file' part, or a raw body as application/gzip, "
    "application/x-tar, application/zip or text/plain"
)


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """A generator body: httpx sends it chunked, without Content-Length."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.fixture
def snapshot(tmp_path: Path) -> set[str]:
    """Files under tmp_path before the upload (the test's own scratch files)."""
    return files_under(tmp_path)


def assert_failed_cleanly(
    client: TestClient, db_engine: Engine, tmp_path: Path, before: set[str], response: httpx.Response, error: str
) -> dict:
    """The upload was accepted, its ingest failed with `error` (a regex), and it left nothing behind."""
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    run_id = run["id"]
    assert run["status"] == "failed"
    assert re.fullmatch(error, run["error"]), run["error"]
    assert (run["points"], run["layer_count"], run["series_count"], run["ranks"]) == (0, 0, 0, 0)
    for endpoint in ("layers", "metrics.csv"):
        refused = client.get(f"{RUNS}/{run_id}/{endpoint}")
        assert refused.status_code == 409
        assert refused.json() == {"error": "NotReady", "detail": f"run {run_id} is failed: {run['error']}"}
    assert row_counts(db_engine, run_id) == {"runs": 1, "run_tags": 0, "layers": 0, "series": 0}
    # only the kept upload is new: nothing extracted, nothing in uploads/ or work/, nothing outside data/; an upload
    # that never held a log keeps not even its bytes (service/ingest/junk.py)
    kept = set() if never_held_a_log(run["error"]) else {f"data/runs/{run_id}/upload.bin"}
    assert files_under(tmp_path) - before == kept
    return run


def assert_rejected(
    response: httpx.Response, status: int, body: dict, settings: Settings, db_engine: Engine, project: str
) -> None:
    """Refused at once: the whole error body, no run row, no file left in the data directory."""
    assert response.status_code == status
    assert response.json() == body
    assert runs_of_project(db_engine, project) == []
    assert files_under(settings.data_dir) == set()


# --- refused during ingest: the run fails ----------------------------------------------------------------------


@dataclass(frozen=True)
class FailingUpload:
    """An upload that is accepted (202) and whose ingest fails with `error` (a regex) under these settings."""

    data: bytes
    error: str
    filename: str = "logs.tar.gz"
    content_type: str = "application/octet-stream"
    settings: dict[str, float] = field(default_factory=dict)


def _ratio_bomb() -> FailingUpload:
    data = zeros_tar_gz("rank_0/core.dump", 8 * MiB)
    return FailingUpload(
        data,
        rf"CompressionRatioExceeded: \d+ bytes from a {len(data)}-byte upload \(ratio above 10\)",
        settings={"max_compression_ratio": 10.0, "ratio_floor_bytes": 1 * MiB},
    )


ZIP_BOMB = FailingUpload(
    zip_bytes({stats_relpath(0): GOOD + b" " * (16 * MiB)}),
    re.escape("ArchiveTooLarge: more than 1048576 bytes uncompressed"),
    "bomb.zip",
    settings={"max_extracted_bytes": 1 * MiB},
)
NOT_AN_ARCHIVE = re.escape(
    "NotAnArchive: the upload is not a tar.gz, tar, zip, gzip or 'YYYY-MM-DD HH:MM:SS,mmm - LEVEL - ' log"
)
GARBAGE_LINES = f"{TS} - INFO - Reading config from ./fp8_stats.yaml.\nnot a line\n\x00\xff\n".encode("latin-1")
TRUNCATED_GZIP = re.escape(
    "CorruptArchive: EOFError: Compressed file ended before the end-of-stream marker was reached"
)
FAILING_UPLOADS = [
    *(
        pytest.param(
            FailingUpload(
                zip_bytes({stats_relpath(0): GOOD, member: GOOD}),
                re.escape(f"UnsafePath: {member!r}: {reason}"),
                "logs.zip",
            ),
            id=f"zip-member-{name}",
        )
        for name, member, reason in [
            ("dot-dot", "../../../" + STATS_1, "'..' component"),
            ("absolute", "/" + STATS_1, "absolute path"),
            ("backslash", "rank_1\\..\\..\\" + STATS_1, "backslash or NUL in member name"),
        ]
    ),
    *(
        pytest.param(
            FailingUpload(
                tar_bytes([(stats_relpath(0), GOOD), member]), re.escape(f"UnsupportedMember: {STATS_1}: {detail}")
            ),
            id=name,
        )
        for name, member, detail in [
            ("symlink-absolute", special_member(STATS_1, tarfile.SYMTYPE, "/etc/passwd"), "symlink to '/etc/passwd'"),
            (
                "symlink-relative",
                special_member(STATS_1, tarfile.SYMTYPE, "../../../../outside.log"),
                "symlink to '../../../../outside.log'",
            ),
            (
                "hard-link",
                special_member(STATS_1, tarfile.LNKTYPE, stats_relpath(0)),
                f"hard link to {stats_relpath(0)!r}",
            ),
            ("char-device", special_member(STATS_1, tarfile.CHRTYPE), "not a regular file or directory"),
            ("block-device", special_member(STATS_1, tarfile.BLKTYPE), "not a regular file or directory"),
            ("fifo", special_member(STATS_1, tarfile.FIFOTYPE), "not a regular file or directory"),
        ]
    ),
    pytest.param(ZIP_BOMB, id="zip-bomb-over-max-extracted-bytes"),
    pytest.param(
        FailingUpload(
            gz_bytes(GOOD + b"\n" * (8 * MiB)),
            re.escape("ArchiveTooLarge: more than 1048576 bytes uncompressed"),
            "x.log.gz",
            settings={"max_extracted_bytes": 1 * MiB},
        ),
        id="gzipped-log-bomb-over-max-extracted-bytes",
    ),
    pytest.param(_ratio_bomb(), id="tar-gz-bomb-over-max-compression-ratio"),
    pytest.param(
        FailingUpload(esm2_tar_gz()[: len(esm2_tar_gz()) // 2], TRUNCATED_GZIP, "esm2.tar.gz"), id="truncated-tar.gz"
    ),
    pytest.param(FailingUpload(gz_bytes(GOOD * 2000)[:-20], TRUNCATED_GZIP, "stats.log.gz"), id="truncated-log.gz"),
    pytest.param(
        FailingUpload(zip_bytes({stats_relpath(0): GOOD * 50})[:-30], r"CorruptArchive: BadZipFile: .+", "logs.zip"),
        id="truncated-zip",
    ),
    pytest.param(FailingUpload(b"hello world\n" * 10, NOT_AN_ARCHIVE), id="not-an-archive-text"),
    pytest.param(FailingUpload(b"\x00\x01binary\xff" * 100, NOT_AN_ARCHIVE), id="not-an-archive-binary"),
    pytest.param(FailingUpload(b"PK\x01\x02 not a zip", NOT_AN_ARCHIVE), id="not-an-archive-zip-signature"),
    pytest.param(
        FailingUpload(
            tar_bytes({meta_relpath(0): metadata_log({"model.layers.1.fc1": "FP8 Quantize"}), "README.md": b"hi"}),
            re.escape(
                "NoStatsFile: no nvdlfw_inspect_statistics_logs/nvdlfw_inspect[_stamp]_"
                "globalrank-N.log in the upload (1 metadata log(s) only); "
                "skipped e.g. README.md"
            ),
        ),
        id="archive-without-stats-file",
    ),
    pytest.param(FailingUpload(zip_bytes({}), re.escape("NoStatsFile: the zip archive is empty")), id="empty-zip"),
    pytest.param(
        FailingUpload(
            tar_bytes({stats_relpath(0): GARBAGE_LINES}),
            re.escape(f"NoStatsLines: {stats_relpath(0)}: no statistics line in 3 lines"),
        ),
        id="stats-file-of-garbage-lines",
    ),
    pytest.param(
        FailingUpload(
            f"{TS} - INFO - hello\n{TS} - INFO - world\n\n".encode(),
            re.escape("NoStatsLines: train.log: no statistics line in 3 lines"),
            "train.log",
            "text/plain",
        ),
        id="single-log-of-garbage-lines",
    ),
    pytest.param(
        FailingUpload(
            stats_log([("loss", it, 2.5) for it in range(3)]),
            re.escape("NoStatsLines: no statistics line could be attributed to a layer, tensor and stat"),
            "x.log",
            "text/plain",
        ),
        id="stats-lines-without-layer-tensor-and-stat",
    ),
]


class TestCreateRunIngestFailures:
    @pytest.mark.parametrize(
        "escape",
        [
            *(
                pytest.param(
                    lambda tmp, d=depth: ("../" * d + STATS_1, "'..' component", tmp.parent / STATS_1),
                    id=f"dot-dot-{depth}",
                )
                for depth in (1, 3, 4)
            ),
            pytest.param(
                lambda tmp: (str(tmp / "outside" / STATS_1), "absolute path", tmp / "outside" / STATS_1), id="absolute"
            ),
        ],
    )
    def test_tar_member_escaping_the_work_directory_is_unsafe_path(
        self,
        client: TestClient,
        db_engine: Engine,
        project: str,
        tmp_path: Path,
        snapshot: set[str],
        escape: Callable[[Path], tuple[str, str, Path]],
    ) -> None:
        """`escape(tmp_path)`: the member name, the reason given and the file that must not be written."""
        member, reason, outside = escape(tmp_path)
        data = tar_bytes([(stats_relpath(0), GOOD), (member, GOOD)])

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, content_type=OCTET_STREAM),
            re.escape(f"UnsafePath: {member!r}: {reason}"),
        )

        assert not outside.exists()

    @pytest.mark.parametrize("case", FAILING_UPLOADS)
    def test_the_run_fails_with_a_stable_code_and_nothing_is_stored(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str], case: FailingUpload
    ) -> None:
        client = make_client(**case.settings)

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, case.data, project, case.filename, case.content_type),
            case.error,
        )

    def test_junk_uploaded_again_answers_the_failed_run_and_stores_nothing(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        """Junk keeps no bytes once failed (up to 2 GiB stayed on disk, unlisted); the same bytes again are that
        failed run, not a new copy and not a new ingest."""
        junk = b"not a log at all\n" * 1000
        run = assert_failed_cleanly(
            client, db_engine, tmp_path, snapshot, upload(client, junk, project), NOT_AN_ARCHIVE
        )

        again = upload(client, junk, project)

        assert again.status_code == 200 and again.json()["id"] == run["id"] and again.json()["status"] == "failed"
        assert files_under(tmp_path) == snapshot

    def test_the_zip_bomb_is_a_small_upload(self) -> None:
        assert len(ZIP_BOMB.data) < 64 * 1024


# --- accepted, with the bad lines counted ------------------------------------------------------------------------


class TestCreateRunBadLines:
    def test_10_mb_line_inside_a_valid_log_is_skipped_and_counted(
        self, client: TestClient, db_engine: Engine, project: str, app_settings: Settings
    ) -> None:
        data = GOOD + f"{TS} - INFO - ".encode() + b"x" * (10 * MiB) + b"\n" + stats_log([(UF, 50, 0.5)])

        response = upload(client, data, project, "stats.log", "text/plain")

        run = wait_for_run(client, response.json()["id"])
        assert (run["status"], run["lines_read"], run["lines_skipped"], run["points"]) == ("ready", 7, 1, 6)
        assert row_counts(db_engine, run["id"])["series"] == 1
        assert files_under(app_settings.data_dir) == {f"runs/{run['id']}/upload.bin"}

    def test_10_mb_line_sample_mentions_its_length(self, client: TestClient, project: str) -> None:
        data = GOOD + f"{TS} - INFO - ".encode() + b"x" * (10 * MiB) + b"\n" + stats_log([(UF, 50, 0.5)])

        run = wait_for_run(client, upload(client, data, project, "stats.log", "text/plain").json()["id"])

        assert run["ingest_report"]["files"][0]["skipped_samples"] == ["line 6: longer than 1048576 bytes, dropped"]

    def test_binary_garbage_lines_are_skipped_and_counted(
        self, client: TestClient, db_engine: Engine, project: str, app_settings: Settings
    ) -> None:
        lines = GOOD.splitlines(keepends=True)
        data = b"".join(
            [
                lines[0],
                b"\x00\xff\xfe\x80\n",
                lines[1],
                b"\x1f\x8b\x08\x00\x00\n",
                b"\n",
                *lines[2:],
                b"\xc3\x28 invalid utf-8\n",
            ]
        )

        run = wait_for_run(client, upload(client, data, project, "stats.log", "text/plain").json()["id"])

        assert (run["status"], run["lines_read"], run["lines_skipped"], run["lines_blank"], run["points"]) == (
            "ready",
            9,
            3,
            1,
            5,
        )
        assert run["ingest_report"]["files"][0]["skipped_samples"] == [
            "line 2: '\\x00\ufffd\ufffd\ufffd'",
            "line 4: '\\x1f\ufffd\\x08\\x00\\x00'",
            "line 9: '\ufffd( invalid utf-8'",
        ]
        assert row_counts(db_engine, run["id"])["series"] == 1
        assert files_under(app_settings.data_dir) == {f"runs/{run['id']}/upload.bin"}


# --- refused at once -----------------------------------------------------------------------------------------------


def _raw(content: bytes, content_type: str | None) -> Callable[[TestClient, str], httpx.Response]:
    headers = {"Content-Type": content_type} if content_type else {}
    return lambda client, project: client.post(RUNS, content=content, headers=headers, params={"project": project})


def _form(**fields: str) -> Callable[[TestClient, str], httpx.Response]:
    return lambda client, project: upload(client, GOOD, project, "x.log", "text/plain", **fields)


def _files(files: object) -> Callable[[TestClient, str], httpx.Response]:
    return lambda client, project: client.post(RUNS, files=files, data={"project": project})


NOT_AN_OBJECT = "metadata must be a JSON object"
TAGS_LIMIT = "at most 50 tags of at most 100 characters each"
REFUSED_AT_ONCE = [  # (send(client, project), status, error, detail): answered at once, nothing stored
    pytest.param(_raw(b"", "application/gzip"), 400, "EmptyUpload", "the upload is empty", id="empty-raw"),
    pytest.param(
        lambda client, project: upload(client, b"", project, content_type=OCTET_STREAM),
        400,
        "EmptyUpload",
        "the upload is empty",
        id="empty-multipart",
    ),
    *(
        pytest.param(
            _raw(GOOD, content_type),
            415,
            "UnsupportedMediaType",
            f"content type {shown} {HELP_415}",
            id="415-" + shown.strip("'"),
        )
        for content_type, shown in [
            ("application/json", "'application/json'"),
            ("text/html; charset=utf-8", "'text/html'"),
            (None, "'(none)'"),
        ]
    ),
    pytest.param(
        _files({"logs": ("x.tgz", GOOD)}),
        400,
        "InvalidUpload",
        "multipart upload has no 'file' part",
        id="no-file-part",
    ),
    pytest.param(
        _files([("file", ("a.log", GOOD)), ("file", ("b.log", GOOD))]),
        400,
        "InvalidUpload",
        "send exactly one 'file' part",
        id="two-file-parts",
    ),
    pytest.param(
        _raw(GOOD, "multipart/form-data"),
        400,
        "InvalidUpload",
        "multipart/form-data without a boundary",
        id="multipart-without-boundary",
    ),
    pytest.param(
        _form(metadata="{not json"),
        400,
        "BadRequest",
        "metadata is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        id="metadata-not-json",
    ),
    pytest.param(
        _form(metadata='{"megatron_precision_config": "configs: [unclosed"}'),
        400,
        "BadRequest",
        "metadata megatron_precision_config is not valid YAML: while parsing a flow sequence",
        id="precision-config-not-yaml",
    ),
    pytest.param(
        _form(
            metadata='{"megatron_precision_config": {"configs": {}, "matchers": {"all": '
            '{"type": "glob", "pattern": "*", "config": "fp4", "enabled": true}}}}'
        ),
        400,
        "BadRequest",
        "metadata megatron_precision_config matcher 'all' names config 'fp4', which 'configs' does not define",
        id="precision-config-unknown-config",
    ),
    pytest.param(_form(metadata="[1, 2]"), 400, "BadRequest", NOT_AN_OBJECT, id="metadata-list"),
    pytest.param(_form(metadata='"gpu"'), 400, "BadRequest", NOT_AN_OBJECT, id="metadata-string"),
    pytest.param(_form(name="n" * 201), 400, "BadRequest", "name is longer than 200 characters", id="long-name"),
    pytest.param(_form(tags=",".join(f"t{k}" for k in range(51))), 400, "BadRequest", TAGS_LIMIT, id="too-many-tags"),
    pytest.param(_form(tags="x" * 101), 400, "BadRequest", TAGS_LIMIT, id="long-tag"),
    pytest.param(
        _form(metadata='{"a": "' + "x" * 70_000 + '"}'),
        400,
        "InvalidUpload",
        "form field 'metadata' is longer than 65536 bytes",
        id="form-field-over-64-kib",
    ),
]


class TestCreateRunRejected:
    @pytest.mark.parametrize(("send", "status", "error", "detail"), REFUSED_AT_ONCE)
    def test_a_bad_request_is_refused_whole_and_nothing_is_stored(
        self,
        client: TestClient,
        app_settings: Settings,
        db_engine: Engine,
        project: str,
        send: Callable[[TestClient, str], httpx.Response],
        status: int,
        error: str,
        detail: str,
    ) -> None:
        response = send(client, project)

        assert_rejected(response, status, {"error": error, "detail": detail}, app_settings, db_engine, project)

    @pytest.mark.parametrize("how", ["raw", "multipart", "raw-chunked", "multipart-chunked", "raw-lying-length"])
    def test_upload_over_max_upload_bytes_is_413(
        self, make_client, app_settings: Settings, db_engine: Engine, project: str, how: str
    ) -> None:
        client = make_client(max_upload_bytes=1 * MiB)
        data = esm2_tar_gz() * (2 * MiB // len(esm2_tar_gz()) + 1)
        params = {"project": project}
        if how == "raw":
            response = client.post(RUNS, content=data, headers={"Content-Type": "application/gzip"}, params=params)
            detail = f"upload of {len(data)} bytes exceeds the limit of 1048576 bytes"
        elif how == "multipart":
            response = upload(client, data, project, content_type=OCTET_STREAM)
            detail = (
                f"upload of {int(response.request.headers['content-length'])} bytes exceeds the limit of 1048576 bytes"
            )
        elif how == "raw-chunked":
            response = client.post(
                RUNS, content=chunks(data), headers={"Content-Type": "application/gzip"}, params=params
            )
            assert "content-length" not in response.request.headers
            detail = "upload exceeds the limit of 1048576 bytes"
        elif how == "multipart-chunked":
            request = client.build_request("POST", RUNS, files={"file": ("x.tgz", data)}, data=params)
            response = client.post(
                RUNS, content=chunks(request.read()), headers={"Content-Type": request.headers["content-type"]}
            )
            assert "content-length" not in response.request.headers
            detail = "upload exceeds the limit of 1048576 bytes"
        else:
            response = client.post(
                RUNS,
                content=data,
                params=params,
                headers={"Content-Type": "application/gzip", "Content-Length": "1000"},
            )
            detail = "upload exceeds the limit of 1048576 bytes"

        assert_rejected(response, 413, {"error": "UploadTooLarge", "detail": detail}, app_settings, db_engine, project)

    def test_upload_of_exactly_max_upload_bytes_is_accepted(self, make_client, project: str) -> None:
        client = make_client(max_upload_bytes=len(GOOD))

        response = client.post(
            RUNS, content=chunks(GOOD, 7), headers={"Content-Type": "text/plain"}, params={"project": project}
        )

        assert response.status_code == 202
        assert wait_for_run(client, response.json()["id"])["status"] == "ready"


class TestOverlongNames:
    """Names longer than any real layer name are counted as unattributed, on every backend alike."""

    def test_a_600_character_layer_name_is_not_stored_and_the_run_stays_usable(
        self, client: TestClient, project: str, db_engine: Engine
    ) -> None:
        long_layer = "model." + "x" * 600
        data = GOOD + stats_log([(f"{long_layer}_gradient_underflows%", 0, 1.5)])

        run = wait_for_run(client, upload(client, data, project, "stats.log", "text/plain").json()["id"])

        assert run["status"] == "ready", run["error"]
        assert run["ingest_report"]["unsplit_points"] == 1
        assert run["ingest_report"]["unsplit_metric_names"] == [f"{long_layer}_gradient_underflows%"]
        layers = client.get(f"/api/v1/runs/{run['id']}/layers").json()
        assert all(len(layer["name"]) < 600 for layer in layers)
