"""Where heatmap and compare images are drawn: two small worker pools with bounded queues, and a cache.

matplotlib is not thread-safe (https://matplotlib.org/stable/users/faq.html#work-with-threads) and
`render` serializes on a process-wide lock, so drawing in more threads buys nothing, and one huge figure made
every other request wait behind it. Here each lane is one worker *process* (single-threaded: no lock contention,
and the memory of a big figure goes back to the system with the process):

* the light lane draws figures up to `heavy_render_pixels` (the dashboard's images);
* the heavy lane draws larger ones (high dpi, posters); its worker is replaced after every figure;
* each lane admits one figure drawing plus `render_queue` waiting; beyond that the request is answered
  429 `{"error": "RenderQueueFull", ...}` with `Retry-After`, so heavy requests can never starve light ones,
  nor pile up without bound;
* figures beyond `heatmap_max_pixels` are refused before anything is drawn (400 `ImageTooLarge`, in actions).

A worker exits when the API process that started it dies, however it died (kill -9 included): each worker
receives the forkserver's "alive" pipe end (multiprocessing/forkserver.py hands it to every child so it could start
processes itself), so without that the forkserver never sees its parent go, and the worker waits on its task queue
for ever — a killed API left ~350 MB of render processes behind. The watch is a `pidfd` of the API process
(https://man7.org/linux/man-pages/man2/pidfd_open.2.html; polling with signal 0 where pidfds are missing); once the
workers are gone the forkserver reads EOF on its pipe and exits too.

Rendered images are cached in memory (LRU, at most `render_cache_bytes`) by what they depend on: the run as
stored (database, id, sha256, ingest finish time), the parameters, the format and the policy version.
Routes stay off the event loop: the database work runs in the threadpool, the drawing in the lane's process.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from fp8_policy._lazy import lazy_module
from fp8_policy.service.errors import RendererUnavailable, RenderQueueFull
from fp8_policy.service.settings import Settings

if TYPE_CHECKING:
    from fp8_policy.service.visual import job as visual_job
    from fp8_policy.service.visual.job import Job, Rendered
else:  # imported on first use (the first image; the worker processes preload it): start-up path,
    # tests/service/app/test_start_up_imports.py
    visual_job = lazy_module("fp8_policy.service.visual.job")

CacheKey = tuple[object, ...]  # what an image depends on (visual/actions.py heatmap_cache_key, compare_cache_key)
UnitOfWork = Callable[[], AbstractContextManager[Session]]

log = logging.getLogger("fp8_policy.render")
LIGHT_TASKS_PER_WORKER = 500  # recycle the light worker now and then (fragmentation)


class _WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver child that does not re-run the parent's `__main__`: the drawing code needs nothing from it,
    and a script that starts the service without an `if __name__ == "__main__"` guard would otherwise start it
    again in every worker (https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-
    methods). While the child's start-up data is taken, `__main__` is a bare module (a few milliseconds)."""

    def start(self) -> None:
        with _START_LOCK:
            main = sys.modules["__main__"]
            sys.modules["__main__"] = _BARE_MAIN
            try:
                super().start()
            finally:
                sys.modules["__main__"] = main


class _WorkerContext(multiprocessing.context.ForkServerContext):
    Process = _WorkerProcess


_START_LOCK = threading.Lock()
_BARE_MAIN = types.ModuleType("__main__")
_CONTEXT = _WorkerContext()


def _worker_context() -> multiprocessing.context.BaseContext:
    """Workers are forked from a forkserver that has imported matplotlib and the drawing code once
    (https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods): a new worker starts in
    milliseconds, and the service's own threads are never forked. This module is preloaded too: the child unpickles
    its `_WorkerProcess` by reference, and importing it there (FastAPI, SQLAlchemy, settings) took ~0.5 s per worker."""
    _CONTEXT.set_forkserver_preload(
        ["fp8_policy.service.visual.job", "fp8_policy.service.visual.render", "fp8_policy.service.visual.pool"]
    )
    return _CONTEXT


class RenderCache:
    """LRU of rendered images bounded by their total size in bytes (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[CacheKey, Rendered] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> Rendered | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: CacheKey, rendered: Rendered) -> None:
        size = len(rendered.content)
        if size > self.max_bytes // 4:  # one image never pushes out most of the others
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= len(old.content)
            self._items[key] = rendered
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self.bytes -= len(evicted.content)


class RenderLane:
    """One worker (process, or thread when processes are off) and a bounded count of admitted figures."""

    def __init__(self, name: str, queue: int, *, processes: bool, tasks_per_worker: int | None) -> None:
        self.name = name
        self.capacity = queue + 1  # drawing + waiting
        self.processes = processes
        self.tasks_per_worker = tasks_per_worker
        self.admitted = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        self._closed = False  # the service is stopping: no worker is started any more (stop_starting, close)

    def _pool(self) -> Executor:
        if self._closed:
            raise RendererUnavailable("the service is stopping; retry once it has restarted")
        if self._executor is None:
            if self.processes:
                self._executor = ProcessPoolExecutor(
                    1,
                    mp_context=_worker_context(),
                    max_tasks_per_child=self.tasks_per_worker,
                    initializer=exit_with_parent,
                    initargs=(os.getpid(),),
                )
            else:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"render-{self.name}")
        return self._executor

    def warm(self) -> None:
        """Start the worker process (under the lock: a first image submitted meanwhile waits for this one);
        nothing once the lane is closed (the service stopped before its warm-up came to this)."""
        with self._lock:
            try:
                self._pool().submit(_ready)
            except RendererUnavailable:  # closed (stop_starting, close): no worker any more
                return

    def submit(self, job: Job) -> Future[Rendered]:
        with self._lock:
            if self.admitted >= self.capacity:
                raise RenderQueueFull(
                    f"{self.admitted} {self.name} images are being drawn or waiting (limit "
                    f"{self.capacity}); retry in a few seconds"
                )
            self.admitted += 1
            try:
                future = self._pool().submit(visual_job.render_job, job)
            except BrokenProcessPool:
                self._executor = None
                self.admitted -= 1
                raise RendererUnavailable("the image renderer restarted; retry") from None
            except RendererUnavailable:  # closed: the service is stopping
                self.admitted -= 1
                raise
        future.add_done_callback(self._release)  # also when the waiting request went away
        return future

    def broken(self) -> None:
        """The worker process died. Twice in a row means processes cannot work here: draw in a thread."""
        self._discard()
        self.failures += 1
        if self.processes and self.failures >= 2:
            log.error("the %s render worker died twice in a row; drawing in-process from now on", self.name)
            self.processes = False

    def _release(self, _future: Future[Rendered]) -> None:
        with self._lock:
            self.admitted -= 1

    def close(self) -> None:
        """For good (the service stops): the worker is shut down and none is started after this.

        Under the lock, so a warm-up starting the worker meanwhile finishes first and its worker is shut down
        here. A pool left running when the process ends leaks its queues' named semaphores: uvicorn ends the
        process by re-raising SIGTERM, so no atexit hook finalizes them, and multiprocessing's resource tracker
        warned "There appear to be 5 leaked semaphore objects" on every stop that came before the warm-up.
        """
        with self._lock:
            self._closed = True
            self._discard()

    def stop_starting(self) -> None:
        """No worker is started from now on (a flag only: safe in a signal handler); close() shuts down one that
        runs or is being started."""
        self._closed = True

    def _discard(self) -> None:
        """Shut the worker down; the next image starts a new one (unless closed)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


class Renderer:
    """The app's render lanes and image cache (`app.state.renderer`)."""

    def __init__(self, settings: Settings) -> None:
        self.max_pixels = settings.heatmap_max_pixels
        self.heavy_pixels = settings.heavy_render_pixels
        processes = settings.render_processes
        self.light = RenderLane(
            "light",
            settings.render_queue,
            processes=processes,
            tasks_per_worker=LIGHT_TASKS_PER_WORKER if processes else None,
        )
        self.heavy = RenderLane(
            "heavy", settings.render_queue, processes=processes, tasks_per_worker=1 if processes else None
        )
        self.cache = RenderCache(settings.render_cache_bytes)

    async def image(
        self,
        unit_of_work: UnitOfWork,
        cache_key: Callable[[Session], CacheKey],
        build: Callable[[Session, int], Job],
    ) -> Rendered:
        """`cache_key(session)` (raises 404/409), then the cached image or `build(session, max_pixels)` drawn in
        its lane. The database work runs in the threadpool, the drawing in the lane's worker."""
        key, hit = await run_in_threadpool(self._prepare, unit_of_work, cache_key, build)
        if isinstance(hit, visual_job.Rendered):
            return replace(hit, headers={**hit.headers, "X-Render-Cache": "hit"})
        lane = self.heavy if hit.pixels > self.heavy_pixels else self.light
        try:
            rendered = await asyncio.wrap_future(lane.submit(hit))
        except BrokenProcessPool:  # the worker died (killed for memory?): start a new one next time
            lane.broken()
            raise RendererUnavailable("the image renderer stopped while drawing; retry") from None
        lane.failures = 0
        self.cache.put(key, rendered)
        return replace(rendered, headers={**rendered.headers, "X-Render-Cache": "miss"})

    def _prepare(
        self,
        unit_of_work: UnitOfWork,
        cache_key: Callable[[Session], CacheKey],
        build: Callable[[Session, int], Job],
    ) -> tuple[CacheKey, Rendered | Job]:
        with unit_of_work() as session:
            key = cache_key(session)
            hit = self.cache.get(key)
            return key, hit if hit is not None else build(session, self.max_pixels)

    def warm(self) -> None:
        """Start the light worker now, in a background thread, so the first image does not wait for it. In a
        thread: the first submit starts the forkserver, which preloads matplotlib before it forks (2-10 s), and
        the app's start-up (and so /healthz) must not wait for that."""
        if self.light.processes:
            threading.Thread(target=self.light.warm, name="render-warm", daemon=True).start()

    def stop_starting(self) -> None:
        """The service got its stop signal: neither lane starts a worker any more (the warm-up's included)."""
        self.light.stop_starting()
        self.heavy.stop_starting()

    def close(self) -> None:
        self.light.close()
        self.heavy.close()


def _ready() -> bool:
    return True


PARENT_POLL_SECONDS = 1.0


def exit_with_parent(parent_pid: int) -> None:
    """In a worker: end this process as soon as `parent_pid` (the API process) has ended (a daemon thread). Ctrl-C
    in a terminal reaches the whole process group: the API process stops its workers, so a worker ignores SIGINT
    instead of printing a KeyboardInterrupt traceback from its task loop (the forkserver hands its children the
    default handler back, multiprocessing/forkserver.py `_serve_one`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(0)  # already gone
    except (AttributeError, OSError):  # no pidfd on this kernel or platform
        watch = None
    threading.Thread(target=_wait_for_exit, args=(parent_pid, watch), name="exit-with-parent", daemon=True).start()


def _wait_for_exit(parent_pid: int, watch: int | None) -> None:
    if watch is not None:
        select.select([watch], [], [])  # readable once the process has ended
    else:
        while True:
            time.sleep(PARENT_POLL_SECONDS)
            try:
                os.kill(parent_pid, 0)
            except (ProcessLookupError, PermissionError):  # gone, or its pid now belongs to another user
                break
    os._exit(0)  # no clean-up to do: a figure being drawn is for a client that is gone
