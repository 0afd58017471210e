"""POST /api/v1/runs with bad input, on SQLite and PostgreSQL.

Every bad upload gets a clear error in the stable {"error", "detail"} shape, either at once (4xx:
test_upload_refused.py) or, here, as a `failed` run whose `error` starts with a stable code (and whose data
endpoints answer 409 NotReady with it). Either way nothing is half-stored (no layers/series rows, checked directly
in the database) and nothing is written outside the data directory; data_dir/uploads and data_dir/work are left
empty.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.service.ingest.junk import never_held_a_log
from fp8_policy.service.settings import Settings
from tests.conftest import upload, wait_for_run
from tests.service.ingest.bad_uploads import GOOD, OCTET_STREAM, RUNS, UF, MiB
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
from tests.support.dbutil import files_under, row_counts

STATS_1 = stats_relpath(1)


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
