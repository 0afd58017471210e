"""One ingest job: claim a queued run, extract its upload, parse, store in one transaction.

Any failure leaves the run `failed` with a precise `error` and no metrics (the store is a single
transaction); the work directory is always removed.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy.db.repositories import RunRepository
from fp8_policy.db.session import session_scope
from fp8_policy.policy.stats_log import StatsLogError
from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, extract_upload
from fp8_policy.service.ingest.parse import IngestError, parse_files
from fp8_policy.service.settings import Settings

log = logging.getLogger("fp8_policy.ingest")


def extract_limits(settings: Settings) -> ExtractLimits:
    return ExtractLimits(
        max_total_bytes=settings.max_extracted_bytes,
        max_ratio=settings.max_compression_ratio,
        ratio_floor_bytes=settings.ratio_floor_bytes,
        max_members=settings.max_archive_members,
    )


def process_run(factory: sessionmaker[Session], settings: Settings, run_id: int) -> None:
    with session_scope(factory) as session:
        run = RunRepository(session).claim(run_id)
        if run is None:
            return
        upload = settings.data_dir / run.upload_path
        hint = run.upload_filename
    work = settings.data_dir / "work" / str(run_id)
    try:
        _ingest(factory, settings, run_id, upload, work, hint)
    except (ArchiveError, IngestError) as exc:
        _fail(factory, run_id, f"{exc.code}: {exc.detail}")
    except StatsLogError as exc:
        _fail(factory, run_id, f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        log.exception("ingest of run %s failed unexpectedly", run_id)
        _fail(factory, run_id, f"InternalError: {type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ingest(factory, settings: Settings, run_id: int, upload: Path, work: Path, hint: str | None) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if not upload.exists():
        raise IngestError("UploadMissing", f"the uploaded file of run {run_id} is no longer on disk")
    extracted = extract_upload(upload, work, extract_limits(settings), filename_hint=hint)
    assembled, counts = parse_files(
        extracted.files, max_line_bytes=settings.max_line_bytes, threads=settings.parse_threads
    )
    if not assembled.series:
        raise IngestError("NoStatsLines", "no statistics line could be attributed to a layer, tensor and stat")
    counts.report["archive"] = {
        "format": extracted.format,
        "skipped_members": extracted.skipped_members,
        "skipped_samples": list(extracted.skipped_samples),
    }
    with session_scope(factory) as session:
        repo = RunRepository(session)
        run = repo.get(run_id)
        if run is None or run.status != "processing":
            return  # deleted (or reset) while we worked
        repo.store_ingest(run, assembled, counts)
    log.info("run %s ready: %s series, %s points", run_id, len(assembled.series), assembled.points)


def _fail(factory, run_id: int, error: str) -> None:
    log.warning("run %s failed: %s", run_id, error)
    with session_scope(factory) as session:
        RunRepository(session).mark_failed(run_id, error)
