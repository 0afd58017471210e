"""The FastAPI application: `create_app(settings)` wires the database, the ingest worker and the routes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from fp8_policy._lazy import import_deferred, lazy_module
from fp8_policy._version import __version__
from fp8_policy.db.session import create_db_engine, create_session_factory, is_in_memory, session_scope
from fp8_policy.service import after_ingest, lanes
from fp8_policy.service.alerts.routes import router as alerts_router
from fp8_policy.service.alerts.sender import AlertSender
from fp8_policy.service.analysis.refresher import SummaryRefresher
from fp8_policy.service.analysis.routes import router as analysis_router
from fp8_policy.service.auth.hosts import normalise_hosts
from fp8_policy.service.auth.routes import AUTH_ERRORS as AUTH_RESPONSES
from fp8_policy.service.auth.routes import router as auth_router
from fp8_policy.service.compare.routes import router as compare_router
from fp8_policy.service.configs.routes import router as configs_router
from fp8_policy.service.docs.routes import router as docs_router
from fp8_policy.service.errors import install_error_handlers
from fp8_policy.service.experiments.routes import router as experiments_router
from fp8_policy.service.health import HEALTH_RESPONSES, HealthRead
from fp8_policy.service.ingest.kernel_warmup import cache_complete
from fp8_policy.service.ingest.worker import IngestWorker, warm_parser, warm_up_process
from fp8_policy.service.limits import check_request
from fp8_policy.service.live.heatmap.routes import router as live_heatmap_router
from fp8_policy.service.live.pieces import PieceGate
from fp8_policy.service.live.routes import router as live_router
from fp8_policy.service.runs.orphans import sweep_orphan_uploads
from fp8_policy.service.runs.routes import router as runs_router
from fp8_policy.service.scalars.routes import router as scalars_router
from fp8_policy.service.security import BrowserGuard
from fp8_policy.service.settings import Settings, get_settings
from fp8_policy.service.single_flight import SingleFlightCache
from fp8_policy.service.storage.disk import install_storage_handlers, sweep_stale_parts
from fp8_policy.service.transport.body import BodyTimeoutMiddleware
from fp8_policy.service.transport.body_cap import BodyCapMiddleware
from fp8_policy.service.transport.overload import install_overload_handlers
from fp8_policy.service.transport.uploads import UploadGate
from fp8_policy.service.visual.frontier.routes import router as frontier_router
from fp8_policy.service.visual.pool import Renderer
from fp8_policy.service.visual.routes import router as visual_router
from fp8_policy.service.web.routes import router as web_router

if TYPE_CHECKING:
    from fp8_policy.service.experiments import actions as experiments
else:  # imported by the first recommendation read: start-up path, tests/service/app/test_start_up_imports.py
    experiments = lazy_module("fp8_policy.service.experiments.actions")

log = logging.getLogger("fp8_policy.service")
SERVING_WAIT_SECONDS = 10.0
WARM_UP_GRACE_SECONDS = 1.0  # a client that polled /healthz and uploads next has its job queued first


def _with_verification(session: Session, run_id: int, body: bytes) -> bytes:
    """The recommendation's JSON `body` with the newest experiment's verdict (service/experiments/actions.py):
    handed to the analysis routes through `app.state`, so the analysis imports no feature that comes after it."""
    return experiments.with_verification(session, run_id, body)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    # sync routes and dependencies share this loop's default thread limiter (Starlette's run_in_threadpool): a few
    # threads, not one per waiting reader, so the event loop (receiving upload bodies) rarely waits for the GIL
    anyio.to_thread.current_default_thread_limiter().total_tokens = settings.request_thread_count()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale_parts(settings.data_dir / "uploads")  # left by a killed process; live uploads are locked
    engine = create_db_engine(settings.resolved_database_url, settings.pool_options())
    factory = create_session_factory(engine)
    app.state.engine = engine
    app.state.session_factory = factory
    app.state.unit_of_work = lambda: session_scope(factory)
    # Background work gets its own pool, so readers holding every request connection cannot starve an ingest
    # job into failing its run (bench/load.py's mixed load did: a plan job waited 30 s and failed). An
    # in-memory SQLite database exists once per engine, so it keeps one.
    background_engine = (
        engine
        if is_in_memory(engine)
        else create_db_engine(settings.resolved_database_url, settings.background_pool_options())
    )
    background = create_session_factory(background_engine)
    threading.Thread(target=_warm_up, args=(app,), name="warm-up", daemon=True).start()
    if not app.state.long_running:  # a serving process starts its render worker once it serves (_warm_up)
        app.state.renderer.warm()
    worker = IngestWorker(background, settings, after_ready=after_ingest.store_summary)
    app.state.ingest = worker
    worker.resume_interrupted()
    sweep_orphan_uploads(worker.store, background)  # stored by a process killed before its run row was committed
    # its backfill of missing stored recommendations waits while uploads are received or ingested here
    summaries = SummaryRefresher(background, busy=lambda: app.state.upload_gate.active > 0 or worker.running())
    app.state.summaries = summaries
    # Runs stored before a policy-version change (or whose summary a stopped process left unfinished) get their
    # summary recomputed; a serving process queues them once it serves: on a restart right after an upload, that
    # recomputation (the analysis imports scikit-learn) ran beside start-up, 0.6 s of CPU before /healthz's 200.
    if app.state.long_running:
        threading.Thread(target=_catch_up_when_serving, args=(app, summaries), name="catch-up", daemon=True).start()
    else:
        summaries.catch_up()
    alerts = AlertSender(
        background, poll_seconds=settings.alert_poll_seconds, allow_private=settings.webhook_allow_private
    )
    app.state.alerts = alerts
    if settings.load_demo:  # generating and queueing the demo runs takes seconds: the service answers meanwhile
        from fp8_policy.service.demo import load_demo_runs_in_background

        load_demo_runs_in_background(app)
    try:
        yield
    finally:
        worker.shutdown()
        summaries.stop()
        alerts.stop()
        # last: it waits for a render worker the warm-up is starting (seconds, in the bounded stop)
        app.state.renderer.close()
        engine.dispose()
        background_engine.dispose()


def _catch_up_when_serving(app: FastAPI, summaries: SummaryRefresher) -> None:
    app.state.serving.wait(SERVING_WAIT_SECONDS)
    time.sleep(WARM_UP_GRACE_SECONDS)  # after uvicorn's first answers, as the warm-up
    summaries.catch_up()


def _warm_up(app: FastAPI) -> None:
    """The kernels (and, in a serving process, scikit-learn, gc.freeze and the parser's buffers: warm_up_process).

    A serving process first waits until it serves (`app.state.serving`, set by `fp8-policy serve` when uvicorn
    takes the port over), SERVING_WAIT_SECONDS at most, then WARM_UP_GRACE_SECONDS: even asking whether numba's
    cache is complete imports numba (0.3 s of CPU, holding the GIL), and the warm-up is 2-3 s of CPU in this
    process (loading the cached kernels, 0.5-0.6 s, much of it holding the GIL; importing scikit-learn); beside
    start-up, or right as uvicorn starts, it delayed /healthz's first 200 (a warm cache made it slower than an
    empty one). With the cache complete it then waits until ingest is idle (SERVING_WAIT_SECONDS at most), so as
    not to run beside the upload of a client that waited for /healthz.
    Ingest uses the interpreted kernels meanwhile; a large upload loads the compiled ones itself
    (kernel_warmup.kernels_for). With the cache incomplete the compile starts in a child process once the
    service serves (after the grace), and large uploads wait for it."""
    if not app.state.long_running:
        warm_parser()
        return
    app.state.serving.wait(SERVING_WAIT_SECONDS)
    time.sleep(WARM_UP_GRACE_SECONDS)  # `serving` is set as uvicorn starts: its first answers come first
    # the render worker's forkserver preloads matplotlib (2-10 s of CPU in its own process): started beside the
    # app's start-up it took the other core from it, and the first image is seldom asked within the grace
    app.state.renderer.warm()
    if cache_complete():
        with suppress(TimeoutError):
            app.state.ingest.wait_idle(timeout=SERVING_WAIT_SECONDS)
    # what the start-up path left to first use (the use cases, the parser, the analysis: 0.4 s of CPU), imported
    # now so the first request of each kind does not wait for it (and gc.freeze in warm_up_process covers it)
    try:
        import_deferred()
        match_every_route(app)
    except Exception:  # a bug in one of them: its first request will say so; the warm-up goes on
        log.exception("importing the modules left to first use failed")
    warm_up_process()


WARM_UP_PATH = "/__warm-up__"  # matches no route


def match_every_route(app: FastAPI) -> None:
    """Match one request that no route takes against every route: FastAPI builds each included router's route
    contexts at its first match (0.2 s of CPU for all 42 routes), which the first request of each kind would pay."""
    scope = {"type": "http", "method": "GET", "path": WARM_UP_PATH, "root_path": "", "headers": [], "query_string": b""}
    for route in app.router.routes:
        route.matches(scope)


def create_app(settings: Settings | None = None) -> FastAPI:
    app = FastAPI(
        title="fp8-policy",
        version=__version__,
        summary="Upload Transformer Engine FP8 debug logs; get which layers to keep in BF16.",
        lifespan=lifespan,
        dependencies=[Depends(check_request)],  # ids, ranks, NUL: the same limits for every route (service/limits.py)
        docs_url=None,  # FastAPI's pages load Swagger UI / ReDoc from a CDN: service/docs serves them locally
        redoc_url=None,
    )
    app.state.settings = settings = settings or get_settings()
    app.state.long_running = False  # `fp8-policy serve` sets it: start-up objects are then frozen (warm_up_process)
    app.state.serving = threading.Event()  # `fp8-policy serve` sets it once uvicorn serves: the warm-up starts
    app.state.allowed_hosts = normalise_hosts(settings.allowed_hosts)  # an open service's names (auth/hosts.py)
    app.state.upload_gate = UploadGate(settings.max_concurrent_uploads, settings.max_uploads_per_client)
    app.state.live_pieces = PieceGate(settings.max_concurrent_pieces, settings.piece_workers)
    app.state.renderer = Renderer(settings)  # worker processes start at the first image
    app.state.recommendations = SingleFlightCache()  # finished recommendations, computed once per key
    app.state.with_verification = _with_verification  # the analysis routes' one use of a later feature
    for lane in (lanes.ANALYSIS, lanes.SCALARS):  # process-wide: the cores are the process's
        lane.configure(settings.compute_running_count(), settings.compute_waiting)
    # innermost first: the cap counts the bytes the body timeout lets through (service/transport/body_cap.py)
    app.add_middleware(BodyCapMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        BodyTimeoutMiddleware,
        timeout=settings.body_timeout,
        min_rate=settings.body_min_rate,
        grace=settings.body_rate_grace,
    )
    install_error_handlers(app)
    install_overload_handlers(app)  # no free pooled connection: 503, not a 500
    install_storage_handlers(app)  # a full disk is 507, never blamed on the client
    app.add_middleware(BrowserGuard, allowed_origins=settings.allowed_origins)  # cross-site writes, headers

    # /healthz first: FastAPI builds a router's effective route contexts (dependencies, response fields) when a
    # request is first matched against it, and a /healthz registered after the API routers built all 42 of them
    # for the first answer after a (re)start, 0.2 s of CPU; the API routers build theirs with their first request
    # (or in the warm-up once the service serves: _warm_up).
    @app.get("/healthz", tags=["health"], response_model=HealthRead, responses=HEALTH_RESPONSES)
    def healthz() -> JSONResponse:
        """Liveness plus a database round trip."""
        try:
            with app.state.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:  # any driver error means "not healthy"
            return JSONResponse({"status": "error", "database": f"{type(exc).__name__}: {exc}"}, status_code=503)
        return JSONResponse({"status": "ok", "database": "ok"})

    # the features, in the order a run flows through them (tests/test_import_graph.py SERVICE_FLOW); no two of their
    # paths match one URL, so the order is the reader's, not the router's
    app.include_router(runs_router, responses=AUTH_RESPONSES)  # upload (ingest), list, read, edit, delete, retry
    app.include_router(scalars_router, responses=AUTH_RESPONSES)  # training scalars of every run
    app.include_router(analysis_router, responses=AUTH_RESPONSES)  # analysis and recommendation
    app.include_router(experiments_router, responses=AUTH_RESPONSES)  # arms trained from a recommendation
    app.include_router(visual_router, responses=AUTH_RESPONSES)  # heatmaps
    app.include_router(frontier_router, responses=AUTH_RESPONSES)  # the speed/risk frontier chart
    app.include_router(compare_router, responses=AUTH_RESPONSES)  # runs side by side
    app.include_router(configs_router, responses=AUTH_RESPONSES)  # rendered configs kept with a run
    app.include_router(alerts_router, responses=AUTH_RESPONSES)  # webhooks for live events
    app.include_router(live_router, responses=AUTH_RESPONSES)  # live runs: pieces, events, finalize
    app.include_router(live_heatmap_router, responses=AUTH_RESPONSES)  # a live run's heatmap
    app.include_router(auth_router)  # access tokens
    app.include_router(web_router)  # the dashboard's pages
    app.include_router(docs_router)  # the API's documentation

    return app
