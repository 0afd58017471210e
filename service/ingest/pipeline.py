"""The three ingest jobs of a run, run by any worker holding the job's lease (service/ingest/worker.py).

* `plan`: scan the archive once from the store (every safety check and limit), parsing every rank it can on the
  way (service/ingest/scan_ranks.py: within `scan_parse_bytes` of kept arrays, one file per rank or sessions in
  order); resolve the job's parallel layout and each rank's global names from all of it (plan_ranks.py); store
  the distinct parsed ranks (replicas once) and record their rank jobs done, in one transaction; queue a `rank`
  job for each rank it left; the run becomes `processing`. With none left it finalizes the run in the same
  transaction (its finalize job is recorded done): a 1,024-rank upload is one job and two transactions.
* `rank`: stream that rank's statistics files out of the archive straight into the parser (no extracted
  copy), summarise, rename with the plan's namers, and store its series in one transaction that also marks the
  job done, replacing what an earlier attempt stored: a retried job never duplicates a series.
* `finalize` (once every rank is stored): replicas a rank job stored as well removed (service/ingest/
  parallel_ranks.py `settle`), the layer table from all ranks plus the plan lines (renamed per rank before they
  were merged), the run's `parallel` layout, totals and report, and `ready`.

Any job failure fails the whole run in one transaction: the error (with the rank on multi-rank runs), the
other jobs cancelled, every stored series and layer removed (all-or-nothing). A job whose lease was lost
(retried elsewhere, run deleted) stores nothing.

What a job makes of the archive's members (a rank's parse, the ranks parsed during the plan, the metadata members)
is service/ingest/rank_parse.py, scan_ranks.py and plan_ranks.py; this module claims, locks and stores.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sqlalchemy.orm import Session

from fp8_policy.db.jobs import ClaimedJob, JobRepository, LeaseLost
from fp8_policy.db.rank_store import RankStore
from fp8_policy.db.run_models import Run
from fp8_policy.db.runs import IngestCounts, RunRepository
from fp8_policy.db.series_rows import encode_series
from fp8_policy.db.session import session_scope
from fp8_policy.policy.parallel import ParallelInfo, Resolution
from fp8_policy.policy.parse.assemble import MAX_NAME_SAMPLES, layer_table
from fp8_policy.policy.parse.stats_log import StatsLogError
from fp8_policy.policy.safe_text import displayable
from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits
from fp8_policy.service.ingest.archive.stream import read_members, scan_archive
from fp8_policy.service.ingest.job_context import JobContext as JobContext  # re-exported: tests, bench
from fp8_policy.service.ingest.junk import forget_junk_upload
from fp8_policy.service.ingest.kernel_warmup import kernels_for
from fp8_policy.service.ingest.metadata_codec import metadata_from_json
from fp8_policy.service.ingest.parallel_ranks import settle
from fp8_policy.service.ingest.parse import IngestError
from fp8_policy.service.ingest.plan_ranks import plan_ranks
from fp8_policy.service.ingest.rank_parse import MetadataReader, RankParse
from fp8_policy.service.ingest.scalars import ScalarsReader, forget_scalars
from fp8_policy.service.ingest.scan_ranks import ScanRanks
from fp8_policy.service.settings import Settings
from fp8_policy.service.storage.archive import ArchiveMissing
from fp8_policy.service.storage.disk import is_out_of_space

log = logging.getLogger("fp8_policy.ingest")


def extract_limits(settings: Settings) -> ExtractLimits:
    return ExtractLimits(
        max_total_bytes=settings.max_extracted_bytes,
        max_ratio=settings.max_compression_ratio,
        ratio_floor_bytes=settings.ratio_floor_bytes,
        max_members=settings.max_archive_members,
    )


def run_job(ctx: JobContext, job: ClaimedJob) -> None:
    """Run one claimed job; every outcome is recorded (done, or the run failed), nothing is raised."""
    handler: Callable[[JobContext, ClaimedJob], None] = _HANDLERS[job.kind]
    try:
        if job.attempts > ctx.settings.job_max_attempts:
            raise IngestError("WorkerLost", f"the worker running this job stopped {job.attempts - 1} times")
        handler(ctx, job)
    except LeaseLost as exc:
        log.info("%s", exc)
    except (ArchiveError, IngestError) as exc:
        _fail(ctx, job, f"{exc.code}: {exc.detail}")
    except StatsLogError as exc:
        _fail(ctx, job, f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        if is_out_of_space(exc):  # the server's problem: the same bytes re-queue the run (service/runs/writes.py)
            log.error("%s job of run %s: out of disk space: %s", job.kind, job.run_id, exc)
            _fail(ctx, job, f"InsufficientStorage: {exc}")
            return
        log.exception("%s job of run %s failed unexpectedly", job.kind, job.run_id)
        _fail(ctx, job, f"InternalError: {type(exc).__name__}: {exc}")


# --- plan --------------------------------------------------------------------------------------
def plan_run(ctx: JobContext, job: ClaimedJob) -> None:
    with session_scope(ctx.factory) as session:
        repo = RunRepository(session)
        repo.claim(job.run_id)  # queued -> processing (a resumed run is processing already)
        run = repo.get(job.run_id)
        if run is None:
            raise LeaseLost(f"run {job.run_id} was deleted")
        key, hint, run_metadata = run.upload_path, run.upload_filename, dict(run.run_metadata or {})
    metadata = MetadataReader()
    ranks = ScanRanks(ctx.settings)  # every rank it can, parsed on the way (service/ingest/scan_ranks.py)
    scalars = ScalarsReader(_spill_dir(ctx))  # the training scalars member, if any (service/ingest/scalars.py)

    def on_metadata(streamed: str, stream: io.BufferedIOBase) -> None:  # parsed by the scan's background thread
        data = metadata.take(streamed, stream)
        ranks.later(len(data), metadata.parse, streamed, data)

    started = time.monotonic()
    try:
        with _open_upload(ctx, job.run_id, key) as (src, size):
            kernels_for(size)  # a large upload waits for the compiled kernels; a small one is parsed at once
            scan = scan_archive(
                src, size, extract_limits(ctx.settings), hint, on_metadata, ranks.feed, on_scalars=scalars.read
            )
        scalars.read_streamed(ctx.store, job.run_id)  # a finalized live run's streamed scalars, for the report
        scalars.keep(ctx.store, job.run_id)  # the whole archive scanned without error: stored with the run
        ranks.settle(scan.stats)
    finally:
        ranks.close()
        scalars.discard()
    scanned = time.monotonic()
    planned = plan_ranks(run_metadata, scan, ranks, metadata)
    prepared = time.monotonic()
    result = {
        "format": scan.format,
        "skipped_members": scan.skipped_members,
        "skipped_samples": scan.skipped_samples,
        "stats": {str(rank): files for rank, files in scan.stats.items() if rank in planned.pending},
        "metadata_reports": metadata.reports(scan.metadata),
        "scalars": scalars.report(),
        **planned.plan_result(),
    }
    finalize_now = not planned.pending
    with session_scope(ctx.factory) as session:
        try:
            _lock_run(session, job, "write")
        except LeaseLost:  # deleted while the scan read it: the delete came before keep() stored the scalars
            forget_scalars(ctx.store, job.run_id, result)
            raise
        jobs = JobRepository(session)
        jobs.complete(job, ctx.owner, result)
        store = RankStore(session)
        store.clear_metrics(job.run_id)  # an earlier, interrupted ingest of the same run
        jobs.add_rank_jobs(job.run_id, sorted(scan.stats), done=planned.results, finalized=finalize_now)
        if planned.stored:
            store.store_ranks(job.run_id, planned.stored)
        if finalize_now:
            _finalize(session, job, result, planned.resolution)
    log.info(
        "run %s: %s rank(s), %s parsed while scanning (%s stored), %s queued; scan %.2f s, plan %.2f s, store %.2f s",
        job.run_id,
        len(scan.stats),
        len(planned.results),
        len(planned.stored),
        len(planned.pending),
        scanned - started,
        prepared - scanned,
        time.monotonic() - prepared,
    )
    if finalize_now:
        log.info("run %s ready", job.run_id)
        _after_ready(ctx, job)


# --- rank --------------------------------------------------------------------------------------
def ingest_rank(ctx: JobContext, job: ClaimedJob) -> None:
    key, hint, plan = _run_and_plan(ctx, job.run_id)
    files = plan["stats"][str(job.rank)]
    member_of = {streamed: member for member, streamed in files}
    parse = RankParse(ctx.settings, job.rank)
    with _open_upload(ctx, job.run_id, key) as (src, size):
        kernels_for(size)
        read_members(
            src,
            size,
            extract_limits(ctx.settings),
            hint,
            stats=[s for _m, s in files],
            on_stats=lambda streamed, stream: parse.feed(stream, member_of[streamed]),
            spill_dir=_spill_dir(ctx),
        )
    logged = metadata_from_json(plan.get("metadata_logged", plan["metadata_log"]))
    namer = _resolution(plan).namer(job.rank)  # the plan job's: logged names -> global ones
    assembled, result = parse.finish(logged, namer)
    encoded = encode_series(assembled.series, namer)  # before the write lock (db/series_rows.py)
    with session_scope(ctx.factory) as session:
        _lock_run(session, job, "share")  # ranks of a run store side by side; a delete waits for them
        JobRepository(session).complete(job, ctx.owner, result)
        _require_processing(session, job)
        RankStore(session).store_ranks(job.run_id, {job.rank: encoded})
    log.info(
        "run %s rank %s stored: %s series, %s points", job.run_id, job.rank, len(assembled.series), assembled.points
    )


def _resolution(plan: dict[str, Any]) -> Resolution:
    """The plan job's resolution of the run's layout and names, rebuilt from its result (a plan stored before
    parallel jobs were resolved has none: logged names are kept)."""
    stored = plan.get("parallel") or {}
    return Resolution.from_info(ParallelInfo.from_json(stored.get("info")), stored.get("experts_local"))


# --- finalize ----------------------------------------------------------------------------------
def finalize_run(ctx: JobContext, job: ClaimedJob) -> None:
    _key, _hint, plan = _run_and_plan(ctx, job.run_id)
    with session_scope(ctx.factory) as session:
        _lock_run(session, job, "write")
        JobRepository(session).complete(job, ctx.owner)
        _finalize(session, job, plan, _resolution(plan))
    log.info("run %s ready", job.run_id)
    _after_ready(ctx, job)


def _after_ready(ctx: JobContext, job: ClaimedJob) -> None:
    """Right after the run is ready (its own transactions): `ctx.after_ready`, which the app and the worker command
    wire to store its summary, default analysis and default-options recommendation, computed once here so that
    readers find them stored (service/after_ingest.py, service/analysis/summary.py). Not in
    the transaction that marks the run ready: on a 6M-point run that would delay `ready` by the analysis and
    recommendation (1-2 s), the upload-to-ready figure of `make bench`. A reader in the moments between computes
    it itself (once per process: the recommendation cache's single flight). The job is done by now: its lease
    is released first, so the heartbeat does not count it as lost while the summary is computed."""
    if ctx.release is not None:
        ctx.release(job.id)
    if ctx.after_ready is None:
        return
    try:
        ctx.after_ready(ctx.factory, job.run_id)
    except Exception:  # deleted meanwhile, or a bug: the run stays ready; readers compute what is missing
        log.warning("summary of run %s not stored at ingest", job.run_id, exc_info=True)


def _finalize(session: Session, job: ClaimedJob, plan: dict[str, Any], resolution: Resolution) -> None:
    """In the caller's transaction: replicas a rank job stored as well removed, the layer table from every
    stored rank and the plan lines, the run's parallel layout, totals, `ready`."""
    run = _require_processing(session, job)
    store = RankStore(session)
    ranks = JobRepository(session).rank_results(job.run_id)
    settled = settle(resolution, ranks)
    store.drop_ranks(job.run_id, settled.drop)
    facts = store.layer_facts(job.run_id)
    if not facts:
        raise IngestError("NoStatsLines", "no statistics line could be attributed to a layer, tensor and stat")
    store.write_layer_table(job.run_id, layer_table(facts, metadata_from_json(plan["metadata_log"])))
    counts = _counts(plan, ranks)
    if len(ranks) > 1:  # a single rank's layout is stored with the run (runs.parallel) but reports nothing
        counts.report["parallel"] = settled.report
    store.mark_ready(run, counts, replica_ranks=settled.replica_count, parallel=settled.info)


def _counts(plan: dict[str, Any], ranks: dict[int, dict[str, Any]]) -> IngestCounts:
    per_rank = [ranks[rank] for rank in sorted(ranks)]
    unsplit: list[str] = []
    for result in per_rank:
        unsplit += [name for name in result["unsplit_names"] if name not in unsplit]
    report = {
        "files": plan["metadata_reports"] + [f for result in per_rank for f in result["files"]],
        "unsplit_metric_names": unsplit[:MAX_NAME_SAMPLES],
        "unsplit_points": sum(result["unsplit_points"] for result in per_rank),
        "archive": {
            "format": plan["format"],
            "skipped_members": plan["skipped_members"],
            "skipped_samples": plan["skipped_samples"],
        },
        "scalars": plan.get("scalars"),  # the training scalars member: kept, records, warning (None: none)
    }
    return IngestCounts(
        lines_read=sum(r["lines_read"] for r in per_rank),
        lines_skipped=sum(r["lines_skipped"] for r in per_rank),
        lines_blank=sum(r["lines_blank"] for r in per_rank),
        lines_duplicated=sum(r["lines_duplicated"] for r in per_rank),
        report=report,
    )


# --- shared ------------------------------------------------------------------------------------
class _open_upload:  # noqa: N801 - used as a context manager
    """The run's archive from the store, with its size; UploadMissing when it is gone."""

    def __init__(self, ctx: JobContext, run_id: int, key: str) -> None:
        self.ctx, self.run_id, self.key = ctx, run_id, key
        self.handle: IO[bytes] | None = None

    def __enter__(self) -> tuple[IO[bytes], int]:
        try:
            if not self.key:
                raise ArchiveMissing(self.key)
            size = self.ctx.store.size(self.key)
            self.handle = self.ctx.store.open(self.key)
        except ArchiveMissing:
            raise IngestError("UploadMissing", f"the uploaded file of run {self.run_id} is no longer on disk") from None
        return self.handle, size

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.close()


def _run_and_plan(ctx: JobContext, run_id: int) -> tuple[str, str | None, dict[str, Any]]:
    with session_scope(ctx.factory) as session:
        run = RunRepository(session).get(run_id)
        plan = JobRepository(session).result_of(run_id, "plan")
        if run is None or plan is None:
            raise LeaseLost(f"run {run_id} was deleted or re-planned")
        return run.upload_path, run.upload_filename, plan


def _lock_run(session: Session, job: ClaimedJob, mode: str) -> None:
    """The first statement of each transaction that stores a job's outcome: the run's row, locked
    (RunRepository.lock: the one lock order that keeps a concurrent delete from deadlocking with the store).
    A run deleted meanwhile is noticed here, and the job stops storing nothing (LeaseLost)."""
    if RunRepository(session).lock(job.run_id, mode) is None:
        raise LeaseLost(f"run {job.run_id} was deleted")


def _require_processing(session: Session, job: ClaimedJob) -> Run:
    run = RunRepository(session).get(job.run_id)
    if run is None or run.status != "processing":
        raise LeaseLost(f"run {job.run_id} is no longer being ingested")
    return run


def _spill_dir(ctx: JobContext) -> Path:
    path = ctx.settings.data_dir / "work"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _fail(ctx: JobContext, job: ClaimedJob, error: str) -> None:
    """The run fails with `error` and keeps nothing; a job this worker no longer holds changes nothing.

    Failing must never fail (issue 9 item 2): the message may quote names that are not UTF-8 or hold NUL, so
    it is stored as displayable text; should recording it fail anyway, the run is failed with a fixed message
    (and if even that fails, the job's lease runs out and the queue retries it)."""
    error = displayable(error)
    try:
        with session_scope(ctx.factory) as session:
            _lock_run(session, job, "write")
            jobs = JobRepository(session)
            if job.kind == "rank" and jobs.rank_count(job.run_id) > 1:
                error = f"rank {job.rank}: {error}"
            jobs.fail(job, ctx.owner, error)
            RankStore(session).clear_metrics(job.run_id)
            RunRepository(session).mark_failed(job.run_id, error)
            plan = jobs.result_of(job.run_id, "plan")
            failed = RunRepository(session).get(job.run_id)
            upload_path = failed.upload_path if failed is not None else None
    except LeaseLost as exc:
        log.info("not failing run %s: %s", job.run_id, exc)
        return
    except Exception:
        log.exception("recording the failure of run %s failed; failing it with a fixed message", job.run_id)
        try:
            with session_scope(ctx.factory) as session:
                RunRepository(session).mark_failed(
                    job.run_id,
                    "InternalError: the ingest failed and its error could not be recorded; see the service log",
                )
        except Exception:
            log.exception("run %s could not be marked failed; its job will be retried", job.run_id)
        return
    forget_scalars(ctx.store, job.run_id, plan)  # the scalars the plan job kept go with the rest
    forget_junk_upload(ctx.store, job.run_id, upload_path, error)  # an upload that never held a log keeps no bytes
    log.warning("run %s failed: %s", job.run_id, error)


_HANDLERS: dict[str, Callable[[JobContext, ClaimedJob], None]] = {
    "plan": plan_run,
    "rank": ingest_rank,
    "finalize": finalize_run,
}
