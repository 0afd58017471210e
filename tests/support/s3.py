"""A real S3-compatible server on loopback for the archive-store tests: moto's threaded server
(https://docs.getmoto.org/en/latest/docs/server_mode.html), one per test session, a fresh bucket per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class S3Bucket:
    endpoint_url: str
    name: str

    @property
    def url(self) -> str:
        """The archive-store URL of this bucket, with a prefix (stores need not own a whole bucket)."""
        return f"s3://{self.name}/fp8-archives"

    def env(self) -> dict[str, str]:
        """What a service or worker process needs to reach the store."""
        return {**CREDENTIALS, "FP8_POLICY_ARCHIVE_URL": self.url, "FP8_POLICY_S3_ENDPOINT_URL": self.endpoint_url}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(
            key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            client_kwargs={"endpoint_url": self.endpoint_url},
            skip_instance_cache=True,
        )


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3Bucket:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = S3Bucket(s3_endpoint, f"fp8-{uuid.uuid4().hex[:12]}")
    bucket.filesystem().mkdir(bucket.name)
    assert os.environ["AWS_ACCESS_KEY_ID"] == CREDENTIALS["AWS_ACCESS_KEY_ID"]
    return bucket
