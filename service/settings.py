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
    ingest_workers: int = Field(1, description="Runs ingested at once.")
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
