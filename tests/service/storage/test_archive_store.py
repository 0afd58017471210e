"""The archive store (service/storage/archive.py): a local directory by default, S3 through s3fs against a real
S3-compatible server on loopback (moto); the service keeps uploads there and ingests by streaming from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveMissing, ArchiveStore
from tests.conftest import wait_for_run
from tests.support.archives import esm2_tar_gz, multi_rank_tree, tree_tar_gz
from tests.support.dbutil import files_under, row_counts
from tests.support.s3 import S3Bucket


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> ArchiveStore:
    if request.param == "local":
        return ArchiveStore(str(tmp_path / "archives"))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return ArchiveStore(bucket.url, s3_endpoint_url=bucket.endpoint_url)


class TestArchiveStore:
    def test_put_open_size_and_delete(self, store: ArchiveStore, tmp_path: Path) -> None:
        source = tmp_path / "upload.part"
        source.write_bytes(b"x" * 100_000 + b"end")
        store.put_file(source, "runs/7/upload.bin")

        assert not source.exists()
        assert store.exists("runs/7/upload.bin")
        assert store.size("runs/7/upload.bin") == 100_003
        with store.open("runs/7/upload.bin") as handle:
            handle.seek(100_000)
            assert handle.read() == b"end"
        store.delete_prefix("runs/7")
        assert not store.exists("runs/7/upload.bin")
        store.delete_prefix("runs/7")  # absent: nothing happens

    def test_delete_removes_one_file_and_leaves_its_neighbours(self, store: ArchiveStore, tmp_path: Path) -> None:
        for key in ("runs/8/upload.bin", "runs/8/scalars.jsonl"):
            source = tmp_path / "part"
            source.write_bytes(key.encode())
            store.put_file(source, key)

        store.delete("runs/8/scalars.jsonl")

        assert not store.exists("runs/8/scalars.jsonl") and store.exists("runs/8/upload.bin")
        store.delete("runs/8/scalars.jsonl")  # absent: nothing happens

    def test_a_missing_key_is_archive_missing(self, store: ArchiveStore) -> None:
        with pytest.raises(ArchiveMissing):
            store.open("runs/404/upload.bin")
        with pytest.raises(ArchiveMissing):
            store.size("runs/404/upload.bin")


class TestServiceOnS3:
    def test_upload_is_kept_in_the_bucket_ingested_from_it_and_deleted_with_the_run(
        self, make_client, s3_bucket: S3Bucket, app_settings: Settings, db_engine: Engine, project: str, tmp_path: Path
    ) -> None:
        client = make_client(archive_url=s3_bucket.url, s3_endpoint_url=s3_bucket.endpoint_url, job_poll_seconds=0.05)
        data = tree_tar_gz(multi_rank_tree(tmp_path / "logs", 2))
        response = client.post(
            "/api/v1/runs", params={"project": project}, content=data, headers={"Content-Type": "application/gzip"}
        )
        run = wait_for_run(client, response.json()["id"])
        key = f"{s3_bucket.name}/fp8-archives/runs/{run['id']}/upload.bin"
        fs = s3_bucket.filesystem()

        assert (run["status"], run["ranks"], run["points"]) == ("ready", 2, 20)
        assert fs.cat_file(key) == data
        assert files_under(app_settings.data_dir) == set()  # nothing kept or extracted locally

        assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 204
        assert not fs.exists(key)
        assert row_counts(db_engine, run["id"])["runs"] == 0

    def test_a_missing_archive_fails_the_run_with_upload_missing(
        self, make_client, s3_bucket: S3Bucket, project: str
    ) -> None:
        client = make_client(
            archive_url=s3_bucket.url,
            s3_endpoint_url=s3_bucket.endpoint_url,
            job_poll_seconds=0.05,
            ingest_in_process=False,
        )
        response = client.post(
            "/api/v1/runs",
            params={"project": project},
            content=esm2_tar_gz(),
            headers={"Content-Type": "application/gzip"},
        )
        run_id = response.json()["id"]
        s3_bucket.filesystem().rm(f"{s3_bucket.name}/fp8-archives/runs/{run_id}/upload.bin")
        worker = make_client(archive_url=s3_bucket.url, s3_endpoint_url=s3_bucket.endpoint_url, job_poll_seconds=0.05)

        run = wait_for_run(worker, run_id)
        assert (run["status"], run["error"]) == (
            "failed",
            f"UploadMissing: the uploaded file of run {run_id} is no longer on disk",
        )
