"""POST /api/v1/runs with bad input, on SQLite and PostgreSQL.

Every bad upload gets a clear error in the stable {"error", "detail"} shape, either at once (4xx) or as a
`failed` run whose `error` starts with a stable code (and whose data endpoints answer 409 NotReady with it).
Either way nothing is half-stored (no layers/series rows, checked directly in the database) and nothing is
written outside the data directory; data_dir/uploads and data_dir/work are left empty.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.service.settings import Settings
from tests.archives import (
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
from tests.conftest import wait_for_run
from tests.dbutil import files_under, row_counts, runs_of_project

RUNS = "/api/v1/runs"
UF = "model.layers.1.fc1_activation_underflows%"
GOOD = stats_log([(UF, it, it / 100) for it in range(0, 50, 10)])
STATS_1 = stats_relpath(1)
MiB = 1024**2
HELP_415 = (
    "is not accepted; send multipart/form-data with a 'file' part, or a raw body as application/gzip, "
    "application/x-tar, application/zip or text/plain"
)


def upload(
    client: TestClient,
    data: bytes,
    project: str,
    filename: str = "logs.tar.gz",
    content_type: str = "application/octet-stream",
    **fields: str,
) -> httpx.Response:
    return client.post(RUNS, files={"file": (filename, data, content_type)}, data={"project": project, **fields})


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
    # only the kept upload is new: nothing extracted, nothing in uploads/ or work/, nothing outside data/
    assert files_under(tmp_path) - before == {f"data/runs/{run_id}/upload.bin"}
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


class TestCreateRunIngestFailures:
    @pytest.mark.parametrize("depth", [1, 3, 4])
    def test_tar_member_with_dot_dot_is_unsafe_path(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str], depth: int
    ) -> None:
        member = "../" * depth + STATS_1
        data = tar_bytes([(stats_relpath(0), GOOD), (member, GOOD)])

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(f"UnsafePath: {member!r}: '..' component"),
        )

        assert not (tmp_path.parent / STATS_1).exists()

    def test_tar_member_with_absolute_path_is_unsafe_path(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        target = tmp_path / "outside" / STATS_1
        data = tar_bytes([(stats_relpath(0), GOOD), (str(target), GOOD)])

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(f"UnsafePath: {str(target)!r}: absolute path"),
        )

        assert not target.exists()

    @pytest.mark.parametrize(
        ("member", "reason"),
        [
            ("../../../" + STATS_1, "'..' component"),
            ("/" + STATS_1, "absolute path"),
            ("rank_1\\..\\..\\" + STATS_1, "backslash or NUL in member name"),
        ],
    )
    def test_zip_member_escaping_the_work_directory_is_unsafe_path(
        self,
        client: TestClient,
        db_engine: Engine,
        project: str,
        tmp_path: Path,
        snapshot: set[str],
        member: str,
        reason: str,
    ) -> None:
        data = zip_bytes({stats_relpath(0): GOOD, member: GOOD})

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "logs.zip"),
            re.escape(f"UnsafePath: {member!r}: {reason}"),
        )

    @pytest.mark.parametrize(
        ("member", "detail"),
        [
            (special_member(STATS_1, tarfile.SYMTYPE, "/etc/passwd"), "symlink to '/etc/passwd'"),
            (
                special_member(STATS_1, tarfile.SYMTYPE, "../../../../outside.log"),
                "symlink to '../../../../outside.log'",
            ),
            (special_member(STATS_1, tarfile.LNKTYPE, stats_relpath(0)), f"hard link to {stats_relpath(0)!r}"),
            (special_member(STATS_1, tarfile.CHRTYPE), "not a regular file or directory"),
            (special_member(STATS_1, tarfile.BLKTYPE), "not a regular file or directory"),
            (special_member(STATS_1, tarfile.FIFOTYPE), "not a regular file or directory"),
        ],
        ids=["symlink-absolute", "symlink-relative", "hard-link", "char-device", "block-device", "fifo"],
    )
    def test_link_and_device_members_are_unsupported(
        self,
        client: TestClient,
        db_engine: Engine,
        project: str,
        tmp_path: Path,
        snapshot: set[str],
        member: tarfile.TarInfo,
        detail: str,
    ) -> None:
        data = tar_bytes([(stats_relpath(0), GOOD), member])

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(f"UnsupportedMember: {STATS_1}: {detail}"),
        )

    def test_zip_bomb_over_max_extracted_bytes_is_archive_too_large(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        client = make_client(max_extracted_bytes=1 * MiB)
        data = zip_bytes({stats_relpath(0): GOOD + b" " * (16 * MiB)})
        assert len(data) < 64 * 1024

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "bomb.zip"),
            re.escape("ArchiveTooLarge: more than 1048576 bytes uncompressed"),
        )

    def test_gzipped_log_bomb_over_max_extracted_bytes_is_archive_too_large(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        client = make_client(max_extracted_bytes=1 * MiB)
        data = gz_bytes(GOOD + b"\n" * (8 * MiB))

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "x.log.gz"),
            re.escape("ArchiveTooLarge: more than 1048576 bytes uncompressed"),
        )

    def test_tar_gz_bomb_over_max_compression_ratio_is_refused(
        self, make_client, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        client = make_client(max_compression_ratio=10.0, ratio_floor_bytes=1 * MiB)
        data = zeros_tar_gz("rank_0/core.dump", 8 * MiB)

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            rf"CompressionRatioExceeded: \d+ bytes from a {len(data)}-byte upload "
            r"\(ratio above 10\)",
        )

    @pytest.mark.parametrize(
        ("data", "filename"),
        [
            (esm2_tar_gz()[: len(esm2_tar_gz()) // 2], "esm2.tar.gz"),
            (gz_bytes(GOOD * 2000)[:-20], "stats.log.gz"),
        ],
        ids=["tar.gz", "log.gz"],
    )
    def test_truncated_gzip_is_corrupt_archive(
        self,
        client: TestClient,
        db_engine: Engine,
        project: str,
        tmp_path: Path,
        snapshot: set[str],
        data: bytes,
        filename: str,
    ) -> None:
        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, filename),
            re.escape("CorruptArchive: EOFError: Compressed file ended before the end-of-stream marker was reached"),
        )

    def test_truncated_zip_is_corrupt_archive(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        data = zip_bytes({stats_relpath(0): GOOD * 50})[:-30]

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "logs.zip"),
            r"CorruptArchive: BadZipFile: .+",
        )

    @pytest.mark.parametrize("data", [b"hello world\n" * 10, b"\x00\x01binary\xff" * 100, b"PK\x01\x02 not a zip"])
    def test_bytes_that_are_no_archive_are_not_an_archive(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str], data: bytes
    ) -> None:
        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(
                "NotAnArchive: the upload is not a tar.gz, tar, zip, gzip or 'YYYY-MM-DD HH:MM:SS,mmm - LEVEL - ' log"
            ),
        )

    def test_archive_without_stats_file_is_no_stats_file(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        data = tar_bytes({meta_relpath(0): metadata_log({"model.layers.1.fc1": "FP8 Quantize"}), "README.md": b"hi"})

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(
                "NoStatsFile: no nvdlfw_inspect_statistics_logs/nvdlfw_inspect[_stamp]_"
                "globalrank-N.log in the upload (1 metadata log(s) only); "
                "skipped e.g. README.md"
            ),
        )

    def test_empty_zip_is_no_stats_file(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, zip_bytes({}), project),
            re.escape("NoStatsFile: the zip archive is empty"),
        )

    def test_stats_file_of_garbage_lines_is_no_stats_lines(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        garbage = f"{TS} - INFO - Reading config from ./fp8_stats.yaml.\nnot a line\n\x00\xff\n".encode("latin-1")
        data = tar_bytes({stats_relpath(0): garbage})

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project),
            re.escape(f"NoStatsLines: {stats_relpath(0)}: no statistics line in 3 lines"),
        )

    def test_single_log_of_garbage_lines_is_no_stats_lines(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        data = f"{TS} - INFO - hello\n{TS} - INFO - world\n\n".encode()

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "train.log", "text/plain"),
            re.escape("NoStatsLines: train.log: no statistics line in 3 lines"),
        )

    def test_stats_lines_without_layer_tensor_and_stat_are_no_stats_lines(
        self, client: TestClient, db_engine: Engine, project: str, tmp_path: Path, snapshot: set[str]
    ) -> None:
        data = stats_log([("loss", it, 2.5) for it in range(3)])

        assert_failed_cleanly(
            client,
            db_engine,
            tmp_path,
            snapshot,
            upload(client, data, project, "x.log", "text/plain"),
            re.escape("NoStatsLines: no statistics line could be attributed to a layer, tensor and stat"),
        )


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


class TestCreateRunRejected:
    @pytest.mark.parametrize("shape", ["raw", "multipart"])
    def test_empty_body_is_400_empty_upload(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str, shape: str
    ) -> None:
        if shape == "raw":
            response = client.post(
                RUNS, content=b"", headers={"Content-Type": "application/gzip"}, params={"project": project}
            )
        else:
            response = upload(client, b"", project)

        assert_rejected(
            response, 400, {"error": "EmptyUpload", "detail": "the upload is empty"}, app_settings, db_engine, project
        )

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
            response = upload(client, data, project)
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

    @pytest.mark.parametrize(
        ("content_type", "shown"),
        [
            ("application/json", "'application/json'"),
            ("text/html; charset=utf-8", "'text/html'"),
            (None, "'(none)'"),
        ],
    )
    def test_wrong_content_type_is_415(
        self,
        client: TestClient,
        app_settings: Settings,
        db_engine: Engine,
        project: str,
        content_type: str | None,
        shown: str,
    ) -> None:
        headers = {"Content-Type": content_type} if content_type else {}

        response = client.post(RUNS, content=GOOD, headers=headers, params={"project": project})

        assert_rejected(
            response,
            415,
            {"error": "UnsupportedMediaType", "detail": f"content type {shown} {HELP_415}"},
            app_settings,
            db_engine,
            project,
        )

    def test_multipart_without_file_part_is_400(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        response = client.post(RUNS, files={"logs": ("x.tgz", GOOD)}, data={"project": project})

        assert_rejected(
            response,
            400,
            {"error": "InvalidUpload", "detail": "multipart upload has no 'file' part"},
            app_settings,
            db_engine,
            project,
        )

    def test_multipart_with_two_file_parts_is_400(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        response = client.post(
            RUNS, files=[("file", ("a.log", GOOD)), ("file", ("b.log", GOOD))], data={"project": project}
        )

        assert_rejected(
            response,
            400,
            {"error": "InvalidUpload", "detail": "send exactly one 'file' part"},
            app_settings,
            db_engine,
            project,
        )

    def test_multipart_without_boundary_is_400(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        response = client.post(
            RUNS, content=GOOD, headers={"Content-Type": "multipart/form-data"}, params={"project": project}
        )

        assert_rejected(
            response,
            400,
            {"error": "InvalidUpload", "detail": "multipart/form-data without a boundary"},
            app_settings,
            db_engine,
            project,
        )

    @pytest.mark.parametrize(
        ("metadata", "detail"),
        [
            (
                "{not json",
                "metadata is not valid JSON: Expecting property name enclosed in double quotes: "
                "line 1 column 2 (char 1)",
            ),
            ("[1, 2]", "metadata must be a JSON object"),
            ('"gpu"', "metadata must be a JSON object"),
        ],
    )
    def test_metadata_that_is_no_json_object_is_400_and_nothing_is_stored(
        self,
        client: TestClient,
        app_settings: Settings,
        db_engine: Engine,
        project: str,
        metadata: str,
        detail: str,
    ) -> None:
        response = upload(client, GOOD, project, "x.log", "text/plain", metadata=metadata)

        assert_rejected(response, 400, {"error": "BadRequest", "detail": detail}, app_settings, db_engine, project)

    @pytest.mark.parametrize(
        ("fields", "detail"),
        [
            ({"name": "n" * 201}, "name is longer than 200 characters"),
            ({"tags": ",".join(f"t{k}" for k in range(51))}, "at most 50 tags of at most 100 characters each"),
            ({"tags": "x" * 101}, "at most 50 tags of at most 100 characters each"),
        ],
        ids=["long-name", "too-many-tags", "long-tag"],
    )
    def test_invalid_fields_are_400_and_nothing_is_stored(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str, fields: dict, detail: str
    ) -> None:
        response = upload(client, GOOD, project, "x.log", "text/plain", **fields)

        assert_rejected(response, 400, {"error": "BadRequest", "detail": detail}, app_settings, db_engine, project)

    def test_form_field_over_64_kib_is_400(
        self, client: TestClient, app_settings: Settings, db_engine: Engine, project: str
    ) -> None:
        response = upload(client, GOOD, project, "x.log", "text/plain", metadata='{"a": "' + "x" * 70_000 + '"}')

        assert_rejected(
            response,
            400,
            {"error": "InvalidUpload", "detail": "form field 'metadata' is longer than 65536 bytes"},
            app_settings,
            db_engine,
            project,
        )


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
