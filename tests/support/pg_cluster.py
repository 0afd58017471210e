"""Throwaway PostgreSQL cluster for the test suite.

Usage::

    with ThrowawayPostgres() as pg:
        engine = sqlalchemy.create_engine(pg.url)          # default database
        other = sqlalchemy.create_engine(pg.create_database())  # isolated one

The cluster lives in a fresh ``mkdtemp`` directory under /tmp, listens on a
free port on 127.0.0.1 only (plus a Unix socket inside that directory), uses
``trust`` authentication for the ``postgres`` superuser and runs with
fsync/synchronous_commit/full_page_writes off.  It starts in well under a
second on a warm machine.

Running as root (as CI does): ``initdb`` refuses root, so ``initdb`` and
``pg_ctl`` run as the ``postgres`` OS user via ``runuser`` and the directory
is chowned to that user.  As a non-root user they run directly.

Cleanup (``pg_ctl -m immediate stop`` + removing the directory) happens on
``__exit__``/``close()``, from an ``atexit`` hook (normal exit, Ctrl-C,
SIGINT), and -- for SIGTERM/SIGKILL/``os._exit`` of the test process -- from a
tiny watchdog process that notices its parent is gone (EOF on a pipe).

Missing binaries or OS user raise :class:`PostgresUnavailable`; whether that
means skip or fail is decided by the test harness (tests/conftest.py), not
here.  Any startup failure raises :class:`PostgresStartupError` including the
tail of the server log.

This module only uses the standard library at import time (psycopg is
imported lazily by :meth:`ThrowawayPostgres.create_database`); the process-level pieces and the watchdog script
are in tests/support/pg_processes.py.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.support import pg_processes
from tests.support.pg_processes import (
    _HOST,
    _OS_USER,
    PostgresStartupError,
    PostgresUnavailable,
    _clean_env,
    _find_bindir,
    _free_port,
    _stop_and_remove,
    _stop_and_remove_server_only,
    _tail,
)

__all__ = ["ThrowawayPostgres", "PostgresUnavailable", "PostgresStartupError"]

_DB_USER = "postgres"  # database superuser created by initdb -U
_PREFIX = "fp8-policy-pg-"
_BIND_ERRORS = ("could not bind", "Address already in use", "could not create any TCP/IP sockets")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# the cluster
# --------------------------------------------------------------------------


class ThrowawayPostgres:
    """A disposable PostgreSQL cluster bound to 127.0.0.1 on a free port.

    Attributes (valid after start()/__enter__):
      url          postgresql+psycopg://postgres@127.0.0.1:PORT/DBNAME  (SQLAlchemy)
      host, port, dbname, user
      base_dir     temp dir (socket, log, data/); removed on close
      datadir      base_dir / "data"
      log_path     base_dir / "log"
      startup_seconds  wall time of initdb + start + CREATE DATABASE
    Methods:
      create_database(name=None) -> url   fresh, isolated database
      url_for(dbname) -> url
      log_tail(lines=40) -> str
      start() / close()  (what __enter__/__exit__ call; close() is idempotent)
    """

    def __init__(
        self,
        dbname: str = "fp8_policy_test",
        *,
        bindir: str | os.PathLike | None = None,
        base_tmp: str | os.PathLike | None = None,
        server_settings: dict[str, str] | None = None,
        start_timeout: int = 30,
        watchdog: bool = True,
    ) -> None:
        if not _IDENT_RE.match(dbname):
            raise ValueError(f"invalid database name {dbname!r}")
        self.dbname = dbname
        self.user = _DB_USER
        self.host = _HOST
        self.port: int | None = None
        self._bindir_arg = bindir
        # /tmp keeps the Unix socket path short (107-byte limit) and is
        # traversable by the postgres user, unlike e.g. a 0700 $TMPDIR of root.
        self._base_tmp = (
            base_tmp
            or os.environ.get("FP8_POLICY_PG_TMPDIR")
            or ("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())
        )
        self._server_settings = dict(server_settings or {})
        self._start_timeout = int(start_timeout)
        self._use_watchdog = watchdog
        self._lock = threading.RLock()
        self._counter = itertools.count(1)
        self._owner_pid: int | None = None
        self._watchdog: subprocess.Popen | None = None
        self.base_dir: Path | None = None
        self.bindir: Path | None = None
        self.startup_seconds: float | None = None
        self._as_root = os.geteuid() == 0

    # -- public API ---------------------------------------------------------

    @property
    def datadir(self) -> Path:
        return self._require_dir() / "data"

    @property
    def log_path(self) -> Path:
        return self._require_dir() / "log"

    @property
    def url(self) -> str:
        return self.url_for(self.dbname)

    @property
    def running(self) -> bool:
        return self.base_dir is not None and self.port is not None

    def url_for(self, dbname: str) -> str:
        if self.port is None:
            raise RuntimeError("ThrowawayPostgres is not started")
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """CREATE DATABASE ``name`` (auto-generated if None); return its SQLAlchemy URL."""
        with self._lock:
            if name is None:
                name = f"{self.dbname}_{next(self._counter)}"
        if not _IDENT_RE.match(name):
            raise ValueError(f"invalid database name {name!r}")
        self._execute_admin(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines) if self.base_dir else "<not started>"

    def __enter__(self) -> ThrowawayPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"port={self.port} dir={self.base_dir}" if self.running else "stopped"
        return f"<ThrowawayPostgres {state}>"

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> ThrowawayPostgres:
        with self._lock:
            if self.running:
                return self
            t0 = time.monotonic()
            self.bindir = _find_bindir(self._bindir_arg)
            if self._as_root:
                self._check_root_prereqs()
            self.base_dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=self._base_tmp))
            self._owner_pid = os.getpid()
            atexit.register(self._atexit_close)
            try:
                if self._as_root:
                    os.chown(self.base_dir, self._os_uid, self._os_gid)
                if self._use_watchdog:
                    self._start_watchdog()
                self._initdb()
                self._start_server()
                try:
                    self._execute_admin(f'CREATE DATABASE "{self.dbname}"')
                except Exception as exc:
                    raise PostgresStartupError(
                        f"CREATE DATABASE {self.dbname} failed: {exc}\n{self._describe()}"
                    ) from exc
            except BaseException:
                self.close()
                raise
            self.startup_seconds = time.monotonic() - t0
            return self

    def close(self) -> None:
        """Stop the server (immediate mode) and delete the directory. Idempotent."""
        with self._lock:
            base_dir, self.base_dir, self.port = self.base_dir, None, None
            try:
                if base_dir is not None and os.getpid() == self._owner_pid:
                    _stop_and_remove(base_dir, self.bindir, self._as_root)
            finally:
                self._stop_watchdog()
                atexit.unregister(self._atexit_close)

    def _atexit_close(self) -> None:
        # A forked child that exits normally must not tear down the parent's server.
        if os.getpid() == self._owner_pid:
            self.close()

    # -- internals ----------------------------------------------------------

    def _require_dir(self) -> Path:
        if self.base_dir is None:
            raise RuntimeError("ThrowawayPostgres is not started")
        return self.base_dir

    def _check_root_prereqs(self) -> None:
        import pwd

        try:
            pw = pwd.getpwnam(_OS_USER)
        except KeyError:
            raise PostgresUnavailable(
                f"running as root but there is no '{_OS_USER}' OS user to run initdb/pg_ctl as "
                "(initdb refuses to run as root)"
            ) from None
        if shutil.which("runuser") is None:
            raise PostgresUnavailable("running as root but 'runuser' (util-linux) is not on PATH")
        self._os_uid, self._os_gid = pw.pw_uid, pw.pw_gid

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        return ["runuser", "-u", _OS_USER, "--", *cmd] if self._as_root else cmd

    def _run(self, what: str, *args: str, timeout: float) -> None:
        try:
            proc = subprocess.run(
                self._cmd(*args),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                cwd=str(self.base_dir),
                env=_clean_env(),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PostgresStartupError(f"{what} timed out after {timeout}s\n{self._describe()}") from exc
        if proc.returncode != 0:
            raise PostgresStartupError(
                f"{what} failed (exit {proc.returncode}): {' '.join(proc.args)}\n"
                f"--- output ---\n{(proc.stdout + proc.stderr).strip()}\n{self._describe()}"
            )

    def _describe(self) -> str:
        return f"--- server log tail ({self.base_dir}/log) ---\n{_tail(self.base_dir / 'log')}"

    def _initdb(self) -> None:
        self._run(
            "initdb",
            "initdb",
            "-D",
            str(self.base_dir / "data"),
            "-A",
            "trust",
            "-U",
            _DB_USER,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
            timeout=120,
        )

    def _start_server(self, attempts: int = 5) -> None:
        log = self.base_dir / "log"
        for attempt in range(1, attempts + 1):
            port = _free_port()
            settings = {
                "listen_addresses": _HOST,
                "port": str(port),
                "unix_socket_directories": str(self.base_dir),
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                **self._server_settings,
            }
            opts = " ".join(f"-c {k}={shlex.quote(str(v))}" for k, v in settings.items())
            log_offset = log.stat().st_size if log.exists() else 0
            try:
                self._run(
                    "pg_ctl start",
                    "pg_ctl",
                    "-D",
                    str(self.base_dir / "data"),
                    "-w",
                    "-t",
                    str(self._start_timeout),
                    "-o",
                    opts,
                    "-l",
                    str(log),
                    "start",
                    timeout=self._start_timeout + 15,
                )
            except PostgresStartupError:
                # Lost the race for the port to someone else? Try another one.
                try:
                    with open(log, errors="replace") as fh:
                        fh.seek(log_offset)
                        new_log = fh.read()
                except OSError:
                    new_log = ""
                if attempt < attempts and any(m in new_log for m in _BIND_ERRORS):
                    _stop_and_remove_server_only(self.base_dir / "data")
                    continue
                raise
            self.port = port
            return

    def _execute_admin(self, statement: str) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - psycopg is a hard dependency
            raise PostgresUnavailable("psycopg (v3) is required to talk to the throwaway cluster") from exc
        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            conn.execute(statement)

    # -- watchdog: cleans up if this process dies without running atexit ----

    def _start_watchdog(self) -> None:
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-I",
                os.path.abspath(pg_processes.__file__),
                "--watchdog",
                str(self.base_dir),
                str(self.bindir),
                "1" if self._as_root else "0",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no terminal Ctrl-C; survives our death
            close_fds=True,
        )

    def _stop_watchdog(self) -> None:
        wd, self._watchdog = self._watchdog, None
        if wd is None:
            return
        try:
            wd.stdin.write(b"disarm\n")  # we cleaned up ourselves; just exit
            wd.stdin.close()
        except OSError:
            pass
        try:
            wd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            wd.kill()
            wd.wait()
