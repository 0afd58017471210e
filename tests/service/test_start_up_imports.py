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
