"""Service settings from `FP8_POLICY_*` environment variables (or a .env file)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FP8_POLICY_", env_file=".env", extra="ignore")

    data_dir: Path = Field(Path("./data"), description="Uploads, work directories and the SQLite file.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default: SQLite in data_dir.")
    max_upload_bytes: int = 2 * 1024**3
    max_extracted_bytes: int = 16 * 1024**3
    max_compression_ratio: float = 250.0
    ratio_floor_bytes: int = Field(64 * 1024**2, description="The compression ratio is only checked past this size.")
    max_archive_members: int = 10_000
    max_line_bytes: int = 1024 * 1024
    ingest_workers: int = Field(1, description="Ingest jobs (one rank each) run at once per process.")
    ingest_in_process: bool = Field(True, description="The API process runs ingest jobs itself (`serve "
                                    "--no-ingest` turns it off: `fp8-policy worker` processes do them).")
    archive_url: str | None = Field(None, description="Where uploaded archives are kept: a directory or "
                                    "s3://bucket/prefix; default: the data directory.")
    s3_endpoint_url: str | None = Field(None, description="Endpoint of an S3-compatible server (MinIO, R2, ...).")
    job_lease_seconds: float = Field(30.0, gt=0, description="An ingest job whose worker sent no heartbeat "
                                     "for this long is retried by another worker.")
    job_poll_seconds: float = Field(0.5, gt=0, description="How often an idle worker looks for jobs.")
    job_max_attempts: int = Field(3, ge=1, description="Times a job is started before its run fails.")
    parse_threads: int = Field(2, description="Threads scanning one statistics log.")
    page_size_max: int = 200
    load_demo: bool = Field(False, description="Load the demo runs on start-up when the database is empty.")

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'fp8_policy.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
