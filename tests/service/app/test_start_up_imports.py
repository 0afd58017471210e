"""What `fp8-policy serve` imports before its first 200 (issue 21: /healthz within 3 s of a fresh install, 1 s of
a restart). Each library below costs 0.1-0.5 s of CPU to import and is needed only by some requests or by the
warm-up that runs once the process serves (service/app.py `_warm_up`): numba (the compiled kernels), matplotlib
(an image), alembic (a database that is not at head: db/migrate.py), httpx (a webhook; the client commands),
fsspec (a remote archive store), scikit-learn, SciPy and pandas (analyses, exports)."""

from __future__ import annotations

import subprocess
import sys

DEFERRED = ("numba", "llvmlite", "matplotlib", "alembic", "httpx", "fsspec", "sklearn", "scipy", "pandas")


def test_serve_s_start_up_path_leaves_the_heavy_libraries_for_later(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'start.db'}"
    subprocess.run([sys.executable, "-c", f"from fp8_policy.db.migrate import upgrade; upgrade({url!r})"], check=True)
    probe = f"""
import sys
import fp8_policy.cli, fp8_policy.service.cli
from fp8_policy.db.migrate import upgrade
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
upgrade({url!r})
create_app(Settings(_env_file=None, data_dir={str(tmp_path / "data")!r}, database_url={url!r}))
print(",".join(name for name in {DEFERRED!r} if name in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


# Our own modules that only some requests or a background job need (issue 21: 1 s to /healthz's 200 on a restart):
# the analysis, recommendation, rendering, comparison and heatmap rules, the stats-log parser and the ingest
# pipeline, and the use cases (`actions`) of the routes that call them; with them numpy (0.1 s of CPU), which only
# what computes over series needs. Routes, schemas and dependencies are imported at start-up: FastAPI needs them to
# register the routes.
DEFERRED_OWN = (
    "fp8_policy.policy.recommend",
    "fp8_policy.policy.analysis",
    "fp8_policy.policy.render",
    "fp8_policy.policy.compare",
    "fp8_policy.policy.heatmap",
    "fp8_policy.policy.parse.stats_log",
    "fp8_policy.policy.parse.assemble",
    "fp8_policy.policy.live.batch",
    "fp8_policy.service.ingest.pipeline",
    "fp8_policy.service.analysis.actions",
    "fp8_policy.service.visual.actions",
)


def test_serve_s_start_up_leaves_the_request_only_modules_for_their_first_request(tmp_path) -> None:
    """serve's start-up as `fp8-policy serve` runs it (service/cli.py `_serve`): the app built, `long_running`
    set, the lifespan's start-up run; `serving` stays unset, so the warm-up waits as it does until uvicorn serves."""
    url = f"sqlite:///{tmp_path / 'start.db'}"
    subprocess.run([sys.executable, "-c", f"from fp8_policy.db.migrate import upgrade; upgrade({url!r})"], check=True)
    probe = f"""
import asyncio, sys
import fp8_policy.cli, fp8_policy.service.cli
from fp8_policy.db.migrate import upgrade
from fp8_policy.service.app import create_app
from fp8_policy.service.settings import Settings
upgrade({url!r})
app = create_app(Settings(_env_file=None, data_dir={str(tmp_path / "data")!r}, database_url={url!r}))
app.state.long_running = True
app.state.renderer.warm = lambda: print("render worker started before serving")  # its forkserver takes a core

async def start() -> str:
    async with app.router.lifespan_context(app):
        return ",".join(name for name in {(*DEFERRED, "numpy", *DEFERRED_OWN)!r} if name in sys.modules)

print(asyncio.run(start()))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_once_it_serves_the_warm_up_imports_what_start_up_left_to_first_use(tmp_path) -> None:
    """After the grace, the warm-up imports every module the start-up path deferred (fp8_policy._lazy
    import_deferred), so the first upload or analysis after a restart does not pay its imports, and starts the
    render worker (whose forkserver preloads matplotlib: beside start-up it took the other core)."""
    url = f"sqlite:///{tmp_path / 'start.db'}"
    subprocess.run([sys.executable, "-c", f"from fp8_policy.db.migrate import upgrade; upgrade({url!r})"], check=True)
    probe = f"""
import asyncio, sys, time
from fp8_policy.db.migrate import upgrade
from fp8_policy.service import app as app_module
from fp8_policy.service.settings import Settings
upgrade({url!r})
app_module.WARM_UP_GRACE_SECONDS = 0
app_module.warm_up_process = lambda: None  # the kernels, scikit-learn, gc.freeze: not this test's business
app = app_module.create_app(Settings(_env_file=None, data_dir={str(tmp_path / "data")!r}, database_url={url!r}))
app.state.long_running = True
warmed = []
app.state.renderer.warm = lambda: warmed.append(True)
wanted = {DEFERRED_OWN!r}

async def serve() -> str:
    async with app.router.lifespan_context(app):
        app.state.serving.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(name in sys.modules for name in wanted):
            await asyncio.sleep(0.05)
        missing = [name for name in wanted if name not in sys.modules]
        return ",".join(missing + ([] if warmed else ["the render worker"]))

print(asyncio.run(serve()))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "", done.stdout
