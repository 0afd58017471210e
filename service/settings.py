"""Service settings from `FP8_POLICY_*` environment variables (or a .env file)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from fp8_policy.service.limits import MAX_BODY_BYTES


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
    ingest_in_process: bool = Field(
        True,
        description="The API process runs ingest jobs itself (`serve "
        "--no-ingest` turns it off: `fp8-policy worker` processes do them).",
    )
    archive_url: str | None = Field(
        None,
        description="Where uploaded archives are kept: a directory or s3://bucket/prefix; default: the data directory.",
    )
    s3_endpoint_url: str | None = Field(None, description="Endpoint of an S3-compatible server (MinIO, R2, ...).")
    job_lease_seconds: float = Field(
        30.0,
        gt=0,
        description="An ingest job whose worker sent no heartbeat for this long is retried by another worker.",
    )
    job_poll_seconds: float = Field(0.5, gt=0, description="How often an idle worker looks for jobs.")
    job_max_attempts: int = Field(3, ge=1, description="Times a job is started before its run fails.")
    parse_threads: int = Field(2, description="Threads scanning one statistics log.")
    scan_parse_bytes: int = Field(
        128 * 1024**2,
        ge=0,
        description="Parsed statistics (distinct ranks' arrays, 16 bytes a point) the plan job keeps while it scans "
        "an upload: it parses every rank it can on the way and stores them at once; ranks past this budget are "
        "parsed by one job each (0: every rank by its own job).",
    )
    page_size_max: int = 200
    load_demo: bool = Field(False, description="Load the demo runs on start-up when the database is empty.")
    alert_poll_seconds: float = Field(
        1.0,
        gt=0,
        description="How often each API process looks for alerts to send "
        "(new ones are sent at once; this paces retries and other processes' alerts).",
    )
    webhook_allow_private: bool = Field(
        False,
        description="Alert webhooks may target loopback and private addresses (an internal chat proxy); "
        "link-local and cloud-metadata addresses stay refused (service/alerts/targets.py).",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Other origins (scheme://host:port) whose pages may POST/PUT/PATCH/DELETE; by default only "
        "this service's own pages and clients that send no Origin header (service/security.py).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="While no access token exists, requests are answered only when their Host is localhost, a "
        "loopback or other IP address, or a name listed here ('*': any); DNS rebinding (service/auth/hosts.py).",
    )
    secret_key: SecretStr | None = Field(
        None, description="Key of the access tokens' HMAC; default: a key generated once and stored in the database."
    )
    allow_anonymous: bool = Field(
        True,
        description="Serve requests without a token while no access token exists "
        "(`fp8-policy serve` sets it: loopback or --allow-anonymous).",
    )

    # Database connection pool (SQLAlchemy QueuePool). None: a per-backend default, see `pool_options`.
    db_pool_size: int | None = Field(None, ge=1, description="Connections kept open (SQLite 40, PostgreSQL 10).")
    db_max_overflow: int | None = Field(None, ge=0, description="Extra connections under load (10 on both).")
    db_pool_timeout: float = Field(30.0, gt=0, description="Seconds a request waits for a pooled connection.")
    request_threads: int | None = Field(
        None,
        ge=1,
        description="Threads running sync routes and dependencies at once (anyio's default thread limiter); "
        "more requests wait their turn in order. Default: 4 per CPU core, between 8 and 40.",
    )

    # Connection and request limits (service/transport). None: derived from the descriptor limit at start-up.
    header_timeout: float = Field(15.0, gt=0, description="Seconds a connection may take to send a request head.")
    body_timeout: float = Field(30.0, gt=0, description="Seconds a request body may stall between two reads.")
    max_body_bytes: int = Field(
        MAX_BODY_BYTES,
        ge=1024,
        description="Largest request body of any route but the uploads' (413 BodyTooLarge beyond, before parsing).",
    )
    max_concurrent_uploads: int = Field(8, ge=1, description="Uploads received at once; 503 beyond.")
    max_uploads_per_client: int | None = Field(
        None,
        ge=1,
        description="Uploads one token (anonymous: one client address) may have in flight; 503 beyond. "
        "Default: three quarters of max_concurrent_uploads (at least 1), so one client never holds every slot.",
    )
    body_min_rate: float = Field(
        4096.0,
        ge=0,
        description="Bytes per second a request body must average once body_rate_grace seconds have passed "
        "(0: no floor); a slower one is answered 408 BodyTooSlow and dropped, freeing its upload slot.",
    )
    body_rate_grace: float = Field(20.0, ge=0, description="Seconds a request body is exempt from body_min_rate.")
    max_concurrent_pieces: int = Field(16, ge=1, description="Live pieces received at once; 503 beyond.")
    piece_workers: int = Field(2, ge=1, description="Threads writing and parsing live pieces (bounds their memory).")
    limit_concurrency: int | None = Field(None, ge=1, description="Open connections at most (uvicorn's option).")

    # Compute lanes (service/lanes.py): recomputes with new settings, first parses of a run's training scalars.
    compute_running: int | None = Field(
        None, ge=1, description="Computations of each lane at once (default: half the CPU cores, 1 to 4)."
    )
    compute_waiting: int = Field(
        2, ge=0, description="Requests of each lane waiting for a turn besides those running; 429 beyond."
    )

    # Heatmap rendering (service/visual/pool.py).
    heatmap_max_pixels: int = Field(25_000_000, ge=1, description="Largest image (width x height px) rendered.")
    heavy_render_pixels: int = Field(4_000_000, ge=1, description="Images larger than this use the heavy lane.")
    render_queue: int = Field(8, ge=1, description="Renders waiting per lane; 429 beyond.")
    render_cache_bytes: int = Field(64 * 1024**2, ge=0, description="Memory for rendered images kept (LRU).")
    render_processes: bool = Field(True, description="Render in worker processes (false: in-process threads).")

    def pool_options(self) -> dict[str, float]:
        """QueuePool options for `create_db_engine`: SQLite connections are cheap (a file handle, readers
        never block each other in WAL mode), PostgreSQL ones cost a server process each."""
        sqlite = self.resolved_database_url.startswith("sqlite")
        return {
            "pool_size": self.db_pool_size or (40 if sqlite else 10),
            "max_overflow": self.db_max_overflow if self.db_max_overflow is not None else 10,
            "pool_timeout": self.db_pool_timeout,
        }

    def request_thread_count(self) -> int:
        """`request_threads`, else 4 per core within 8..40 (40 is anyio's own default). Under bench/load.py's mixed
        load on 2 cores, 30 readers each in its own thread kept the event loop waiting for the GIL at every step
        of an upload's body: 8 threads served the readers as fast and an upload's answer came 2-4x sooner."""
        if self.request_threads is not None:
            return self.request_threads
        return max(8, min(40, 4 * (os.cpu_count() or 1)))

    def compute_running_count(self) -> int:
        """`compute_running`, else half the cores within 1..4: the other half serves every other request."""
        if self.compute_running is not None:
            return self.compute_running
        return max(1, min(4, (os.cpu_count() or 1) // 2))

    def background_pool_options(self) -> dict[str, float]:
        """QueuePool options for the background engine (ingest loops and heartbeat, summaries, alerts): a
        connection per ingest thread plus the other background threads; they wait as long as requests do."""
        return {"pool_size": self.ingest_workers + 4, "max_overflow": 2, "pool_timeout": self.db_pool_timeout}

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'fp8_policy.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
