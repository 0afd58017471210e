"""The wheel is the product: built from this tree and installed in clean venvs OUTSIDE the source tree.

- base (`pip install <wheel>`): the client only — `from fp8_policy import PolicyClient` works, no generic
  top-level module (`client`, `db`, ...) exists, none of the server's dependencies is installed, and a server
  command answers with one line naming the extra.
- `<wheel>[server]`: `fp8-policy db upgrade` runs the packaged migrations, `fp8-policy serve` answers `/`,
  `/healthz` and `/docs` (with its assets from the wheel), and the base install's client CLI uploads the
  BioNeMo ESM-2 fixture and waits until it is ingested.

Dependencies come from the configured package indexes; every command runs from a temporary cwd with a
scrubbed environment so neither the checkout nor the editable install of the dev venv can be imported by
accident. The server's ~700 MB of dependencies are installed once per dependency set into a template venv
under ~/.cache/fp8-policy-tests (outside the source tree; keyed by the wheel's Requires-Dist and the Python
version); each session hard-links a copy of it and installs the freshly built wheel into the copy with
`--no-deps`: the same files a fresh `pip install <wheel>[server]` gives, without re-unpacking them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.service import stop_service, wait_healthy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT.parent / "shared" / "fixtures" / "bionemo" / "dummy_logs_esm2"
# Distributions only the `server` extra may bring (and pandas, which only the dev tools use).
SERVER_DISTRIBUTIONS = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "psycopg-binary",
    "numpy",
    "pandas",
    "numba",
    "llvmlite",
    "scikit-learn",
    "scipy",
    "matplotlib",
    "pydantic",
    "pydantic-settings",
    "isal",
    "python-multipart",
}
HINT = "pip install 'fp8-policy[server]'"
# What a copy of the tree for building leaves out (.gitignore's entries and the VCS folder).
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "data",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "test-artifacts",
    ".pytest_cache",
    "out",
    "*.db",
)


def _env(home: Path) -> dict[str, str]:
    """The environment of an installed-tool session: no PYTHONPATH, no FP8_POLICY_* from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FP8_POLICY_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "FP8_POLICY_DATA_DIR": str(home / "data"), "PYTHONNOUSERSITE": "1"}


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the working tree (setuptools writes build/ and *.egg-info into the source)."""
    source = tmp_path_factory.mktemp("source") / "fp8-policy"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = out.glob("fp8_policy-*.whl")
    return path


def _venv(where: Path, requirement: str, *, compile_: bool = False) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    flags = [] if compile_ else ["--no-compile"]
    done = _run([str(python), "-m", "pip", "install", "--quiet", *flags, requirement], where.parent, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    return _venv(tmp_path_factory.mktemp("base") / "venv", str(wheel))


def _dependency_key(wheel: Path, extra: str) -> str:
    """What decides a template venv's content: the Python version and the wheel's Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = sorted(
            line for line in archive.read(name).decode().splitlines() if line.startswith("Requires-Dist:")
        )
    return hashlib.sha256("\n".join([sys.version, extra, *requires]).encode()).hexdigest()[:16]


def _template(wheel: Path, extra: str) -> Path:
    """A venv holding exactly `<wheel>[extra]`'s dependencies (the wheel itself uninstalled again), built once."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fp8-policy-tests"
    cache.mkdir(parents=True, exist_ok=True)
    template = cache / f"{extra}-{_dependency_key(wheel, extra)}"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test sessions build it once
        if not (template / ".complete").exists():
            for stale in cache.glob(f"{extra}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            python = _venv(template, f"{wheel}[{extra}]", compile_=True)  # .pyc files get linked too
            removed = _run([str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "fp8-policy"], cache)
            assert removed.returncode == 0, removed.stderr[-3000:]
            (template / ".complete").touch()
    return template


def _copy(template: Path, where: Path) -> None:
    """Hard links where the file system allows them (nothing writes into the template's files), else copies."""
    try:
        shutil.copytree(template, where, symlinks=True, copy_function=os.link)
    except (OSError, shutil.Error):
        shutil.rmtree(where, ignore_errors=True)
        shutil.copytree(template, where, symlinks=True)


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    where = tmp_path_factory.mktemp("server") / "venv"
    _copy(_template(wheel, "server"), where)
    python = where / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps", str(wheel)], where.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    checked = _run([str(python), "-m", "pip", "check"], where.parent)
    assert checked.returncode == 0, checked.stdout[-3000:]
    extra = _run(
        [str(python), "-c", "from fp8_policy.cli import missing_server_requirements as m; print(m())"], where.parent
    )
    assert extra.stdout.strip() == "[]", extra.stdout + extra.stderr  # every requirement of [server] is there
    return python


def test_the_base_install_is_the_client_and_nothing_of_the_server(base: Path, tmp_path: Path) -> None:
    script = (
        "import importlib.metadata as m, importlib.util as u, json, fp8_policy\n"
        "from fp8_policy import PolicyClient, apply_policy\n"
        "print(json.dumps({'file': fp8_policy.__file__, 'client': PolicyClient.__module__,\n"
        "  'generic': [n for n in ('client', 'db', 'policy', 'service', 'alembic') if u.find_spec(n)],\n"
        "  'dists': sorted(d.metadata['Name'].lower() for d in m.distributions())}))\n"
    )
    done = _run([str(base), "-c", script], tmp_path)

    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["file"]).is_relative_to(base.parent.parent)  # the venv's copy, not the checkout
    assert found["client"] == "fp8_policy.client.client"
    assert found["generic"] == []  # `import client` fails: nothing generic in site-packages
    assert "fp8-policy" in found["dists"]
    assert sorted(SERVER_DISTRIBUTIONS & set(found["dists"])) == []


def test_a_server_command_on_the_base_install_names_the_extra_in_one_line(base: Path, tmp_path: Path) -> None:
    script = base.parent / "fp8-policy"
    for argv in (["serve", "--host", "0.0.0.0"], ["db", "upgrade"]):
        done = _run([str(script), *argv], tmp_path)

        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and HINT in done.stderr, done.stderr
    listed = _run([str(script), "--help"], tmp_path)
    assert listed.returncode == 0 and "upload" in listed.stdout and "serve" in listed.stdout


def test_the_installed_wheel_has_one_version(base: Path, tmp_path: Path) -> None:
    """The wheel's metadata, `fp8-policy --version` and `fp8_policy.__version__` agree with the source's version."""
    from fp8_policy._version import __version__

    script = "import importlib.metadata as m, fp8_policy; print(m.version('fp8-policy'), fp8_policy.__version__)"
    metadata = _run([str(base), "-c", script], tmp_path)
    printed = _run([str(base.parent / "fp8-policy"), "--version"], tmp_path)

    assert metadata.stdout.split() == [__version__, __version__], metadata.stderr
    assert printed.returncode == 0 and printed.stdout == f"fp8-policy {__version__}\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(server_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`fp8-policy db upgrade` then `fp8-policy serve` from the [server] install; yields (base URL, its home)."""
    home = tmp_path_factory.mktemp("home")
    script = server_venv.parent / "fp8-policy"
    upgraded = _run([str(script), "db", "upgrade"], home)
    assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    assert upgraded.stdout.strip().endswith("database at head")
    assert list((home / "data").glob("*.db")), "db upgrade created no SQLite database in the data dir"

    port = _free_port()
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [str(script), "serve", "--host", "127.0.0.1", "--port", str(port), "--no-demo", "--log-level", "warning"],
        cwd=home,
        env=_env(home),
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        try:  # /healthz answers 503 while the service is still starting: wait for its 200
            wait_healthy(url, server, timeout=120)
        except SystemExit as exc:
            pytest.fail(f"{exc}\n{(home / 'serve.log').read_text()[-3000:]}")
        yield url, home
    finally:
        stop_service(server, timeout=20)
        log.close()


def test_the_server_install_serves_the_dashboard_health_and_offline_docs(served: tuple[str, Path]) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/healthz").status_code == 200
        page = http.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        docs = http.get("/docs")
        assert docs.status_code == 200
        assets = [
            *re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text),
            *re.findall(r"""(?:src|href)=["']([^"']+)["']""", docs.text),
        ]
        local = [a for a in assets if not a.startswith(("#", "data:"))]
        assert [a for a in local if re.match(r"^(https?:)?//", a)] == []  # nothing from another host
        assert local, "the dashboard and docs pages load no asset at all"
        for asset in local:  # each one ships in the wheel
            path = asset if asset.startswith("/") else "/" + asset
            assert http.get(path).status_code == 200, asset


def test_the_base_client_uploads_the_esm2_fixture_and_the_server_ingests_it(
    served: tuple[str, Path], base: Path, tmp_path: Path
) -> None:
    url, _ = served
    client = base.parent / "fp8-policy"
    done = _run(
        [
            str(client),
            "upload",
            str(FIXTURE),
            "--name",
            "esm2-wheel",
            "--wait",
            "--timeout",
            "180",
            "--json",
            "--url",
            url,
        ],
        tmp_path,
        timeout=240,
    )

    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["status"] == "ready", run
    assert run["layer_count"] > 0
    recommended = _run([str(client), "recommend", str(run["id"]), "--json", "--url", url], tmp_path)
    assert recommended.returncode == 0, recommended.stderr
    assert {"recipe", "rationale", "policy_version"} <= set(json.loads(recommended.stdout))
