"""What a service's start-up does not wait for, so /healthz answers seconds sooner: scikit-learn (SciPy, pandas) is
imported on first analysis, numba kernels are not compiled (tests/policy/parse/test_kernels.py), and the render worker
process (a forkserver that preloads matplotlib) starts in the background."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fp8_policy.service.settings import Settings
from fp8_policy.service.visual import pool

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_app_imports_neither_scikit_learn_nor_pandas_nor_scipy_stats() -> None:
    script = (
        "import json, sys, fp8_policy.service.app\n"
        "print(json.dumps(sorted(set(sys.modules) & {'sklearn', 'pandas', 'scipy.stats'})))"
    )  # numba imports the `scipy` package itself (milliseconds); scipy.stats is what scikit-learn pulls in
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_analysis_still_fits_trends_and_rank_outliers_with_scikit_learn() -> None:
    import numpy as np

    from fp8_policy.policy.analysis.outliers import lof_outliers
    from fp8_policy.policy.analysis.trends import huber_line
    from fp8_policy.policy.thresholds import Thresholds

    slope, _last, _t = huber_line(np.arange(0, 2000, 100), np.linspace(1.0, 3.0, 20))
    scores = lof_outliers(np.array([1.0, 1.01, 0.99, 1.0, 1.02, 9.0, 1.0, 0.98]), Thresholds())

    assert slope == pytest.approx(2.0 / 1.9, rel=1e-3)
    assert [index for index, _score in scores] == [5]


def test_warming_the_renderer_returns_before_the_worker_process_has_started(monkeypatch) -> None:
    started, release = threading.Event(), threading.Event()

    def slow_start(lane: pool.RenderLane) -> None:  # a forkserver preloading matplotlib on a busy machine
        started.set()
        release.wait(30)

    monkeypatch.setattr(pool.RenderLane, "warm", slow_start)
    renderer = pool.Renderer(Settings(_env_file=None, render_processes=True))
    try:
        renderer.warm()  # returns at once: the lane starts in its own thread

        assert started.wait(10)
        assert not release.is_set()
    finally:
        release.set()
        renderer.close()
