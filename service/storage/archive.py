"""The archive store: where uploaded archives live, addressed by URL, shared by API processes and workers.

`FP8_POLICY_ARCHIVE_URL` is a local directory (default: the data directory, so a single machine needs
nothing) or any fsspec URL such as `s3://bucket/prefix`. S3 goes through s3fs
(https://s3fs.readthedocs.io/en/latest/#s3-compatible-storage): credentials from the usual `AWS_*`
variables, `FP8_POLICY_S3_ENDPOINT_URL` for S3-compatible servers (MinIO, R2, moto). Keys are relative
paths such as `runs/7/upload.bin` (what `runs.upload_path` holds). Workers read archives as streams.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from fp8_policy.service.settings import Settings

READ_BLOCK_BYTES = 8 * 1024 * 1024  # S3 range requests of this size, read ahead sequentially


class ArchiveMissing(Exception):
    """The key is not in the store."""


class ArchiveStore:
    """Put, stream and delete archives under one root URL."""

    def __init__(self, url: str, *, s3_endpoint_url: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.local = "://" not in url or url.startswith("file://")
        if self.local:
            self.root = Path(url.removeprefix("file://")).resolve()
            # an fsspec AbstractFileSystem for a remote store (fsspec publishes no type information)
            self.fs: Any = None
        else:
            options: dict[str, Any] = {}
            if url.startswith(("s3://", "s3a://")):
                options = {"default_block_size": READ_BLOCK_BYTES, "default_cache_type": "readahead"}
                if s3_endpoint_url:
                    options["client_kwargs"] = {"endpoint_url": s3_endpoint_url}
            import fsspec  # only for a remote store: a local one never loads it (service start-up, issue 21)

            self.fs, self.root_path = fsspec.core.url_to_fs(self.url, **options)

    def describe(self, key: str) -> str:
        return str(self.root / key) if self.local else f"{self.url}/{key}"

    def put_file(self, local_path: Path, key: str) -> None:
        """Move (local store) or upload (remote store) a received file to `key`; `local_path` is consumed."""
        if self.local:
            target = self.root / key
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(local_path, target)
            return
        self.fs.put_file(str(local_path), self._path(key))
        local_path.unlink(missing_ok=True)

    def open(self, key: str) -> BinaryIO:
        """A seekable binary stream of the archive (ArchiveMissing when it is not there)."""
        try:
            if self.local:
                return open(self.root / key, "rb")  # noqa: SIM115 - the caller closes it
            remote: BinaryIO = self.fs.open(self._path(key), "rb")
            return remote
        except FileNotFoundError as exc:
            raise ArchiveMissing(key) from exc

    def size(self, key: str) -> int:
        try:
            if self.local:
                return (self.root / key).stat().st_size
            return int(self.fs.size(self._path(key)))
        except FileNotFoundError as exc:
            raise ArchiveMissing(key) from exc

    def exists(self, key: str) -> bool:
        return (self.root / key).exists() if self.local else bool(self.fs.exists(self._path(key)))

    def delete(self, key: str) -> None:
        """One stored file; nothing happens when it is absent."""
        if self.local:
            (self.root / key).unlink(missing_ok=True)
            return
        path = self._path(key)
        if self.fs.exists(path):
            self.fs.rm_file(path)

    def delete_prefix(self, prefix: str) -> None:
        """Everything under `prefix` (a run's folder); nothing happens when it is absent."""
        if self.local:
            shutil.rmtree(self.root / prefix, ignore_errors=True)
            return
        path = self._path(prefix)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def _path(self, key: str) -> str:
        return f"{self.root_path.rstrip('/')}/{key.lstrip('/')}"


def store_for(settings: Settings) -> ArchiveStore:
    """The store `settings` name: FP8_POLICY_ARCHIVE_URL, else the data directory."""
    url = settings.archive_url or str(settings.data_dir)
    return ArchiveStore(url, s3_endpoint_url=settings.s3_endpoint_url)
