"""POST /api/v1/runs with bad input refused at once, on SQLite and PostgreSQL: a 4xx with the whole error body in the
stable {"error", "detail"} shape (bad content types, forms, metadata, tags, over-long names), no run row, and no
file left in the data directory. Bad input found during ingest: test_upload_errors.py.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from fp8_policy.service.settings import Settings
from tests.conftest import upload, wait_for_run
from tests.service.ingest.bad_uploads import GOOD, OCTET_STREAM, RUNS, MiB, assert_rejected, chunks
from tests.support.archives import (
    esm2_tar_gz,
    stats_log,
)

HELP_415 = (
    "is not accepted; send multipart/form-data with a 'file' part, or a raw body as application/gzip, "
    "application/x-tar, application/zip or text/plain"
)


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
