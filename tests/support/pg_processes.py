"""The process-level pieces of the throwaway PostgreSQL cluster (tests/support/pg_cluster.py): its errors, finding the
binaries, free ports, live pids, stopping a postmaster and removing its directory; and the watchdog script
(``python -I pg_processes.py --watchdog ...``) that does so when the test process dies without cleaning up.

Standard library only: the watchdog runs this file as a script in isolated mode, outside the tests package.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_OS_USER = "postgres"  # OS account that owns the cluster when we are root
_HOST = "127.0.0.1"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL server binaries (or the ``postgres`` OS user) are missing."""


class PostgresStartupError(RuntimeError):
    """initdb / pg_ctl start / CREATE DATABASE failed; the message has the log tail."""


def _find_bindir(bindir: str | os.PathLike | None) -> Path:
    """Directory holding ``initdb`` and ``pg_ctl``.

    Order: explicit argument, ``$FP8_POLICY_PG_BINDIR``, ``PATH``, then the
    Debian/Ubuntu layout ``/usr/lib/postgresql/<ver>/bin`` (newest first).
    """
    candidates: list[Path] = []
    explicit = bindir or os.environ.get("FP8_POLICY_PG_BINDIR")
    if explicit:
        candidates.append(Path(explicit))
    else:
        found = shutil.which("initdb")
        if found:
            candidates.append(Path(found).parent)
        debian = sorted(
            glob.glob("/usr/lib/postgresql/*/bin"),
            key=lambda p: [int(x) for x in re.findall(r"\d+", p)] or [0],
            reverse=True,
        )
        candidates.extend(Path(p) for p in debian)
    for cand in candidates:
        if all(os.access(cand / exe, os.X_OK) for exe in ("initdb", "pg_ctl", "postgres")):
            return cand
    where = str(candidates[0]) if explicit else "PATH or /usr/lib/postgresql/*/bin"
    raise PostgresUnavailable(
        f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {where}. "
        "Install the PostgreSQL server (e.g. apt-get install postgresql) or point "
        "FP8_POLICY_PG_BINDIR at its bin directory; set FP8_POLICY_SKIP_POSTGRES=1 "
        "to skip the PostgreSQL-backed tests instead."
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return s.getsockname()[1]


def port_is_open(port: int, host: str = _HOST, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _clean_env() -> dict[str, str]:
    """Environment for initdb/pg_ctl: no PG* variables leaking in, C locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    env.pop("LANGUAGE", None)
    return env


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no server log: {exc}>"
    return "\n".join(text.splitlines()[-lines:]) or "<server log is empty>"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still "exists" for kill(0); treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _postmaster_pid(datadir: Path) -> int | None:
    try:
        return int((datadir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _stop_and_remove(base_dir: Path, bindir: Path, as_root: bool, timeout: float = 30.0) -> None:
    """Stop the cluster in base_dir/data (immediate) and delete base_dir.

    Shared by close() and the watchdog; safe to call twice.
    """
    datadir = base_dir / "data"
    pid = _postmaster_pid(datadir)
    if pid is not None and _pid_alive(pid):
        cmd = [str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "-t", str(int(timeout)), "stop"]
        if as_root:
            cmd = ["runuser", "-u", _OS_USER, "--", *cmd]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=str(base_dir),
                env=_clean_env(),
                timeout=timeout + 5,
                check=False,
            )
        # Belt and braces: if the postmaster survived, kill it outright.
        deadline = time.monotonic() + 5
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(base_dir, ignore_errors=True)


def _stop_and_remove_server_only(datadir: Path) -> None:
    """After a failed start attempt: make sure no half-started postmaster lingers."""
    pid = _postmaster_pid(datadir)
    if pid is not None and _pid_alive(pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(OSError):
        (datadir / "postmaster.pid").unlink()


def _watchdog_main(base_dir: str, bindir: str, as_root: str) -> int:
    """Block until the parent closes our stdin; clean up unless it said 'disarm'."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    data = sys.stdin.buffer.read()  # returns on EOF, i.e. when the parent exits/dies
    if b"disarm" not in data:
        _stop_and_remove(Path(base_dir), Path(bindir), as_root == "1")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--watchdog":
        sys.exit(_watchdog_main(*sys.argv[2:]))
    print(__doc__)
