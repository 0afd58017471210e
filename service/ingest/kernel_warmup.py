"""Getting the compiled numba kernels ready without a user's request paying for it.

Belongs here: when and where the kernels of policy/parse/_*_kernel.py are compiled or loaded in a serving process, and
the wait of an ingest job whose input is too large for the interpreted kernels (policy/parse/kernels.py).

Measured on the 2-core development machine: compiling every kernel takes 30-100 s (numba, once per machine and
source version: `cache=True` writes the machine code next to the sources, or to NUMBA_CACHE_DIR, or to numba's
per-user cache directory when the installed package is read-only); loading them from that cache takes 1.5-2 s,
most of it holding the GIL. So:

* until the compiled kernels are loaded, ingest runs the interpreted kernels (the ESM-2 fixture parses in 0.25 s
  that way); only an upload over `kernels.SMALL_UPLOAD_BYTES` waits for the compiled ones (`kernels_for`);
* `fp8-policy serve` / `worker` (`prepare_in_background`) compile in a child process when the cache is not
  complete (`python -m fp8_policy.service.ingest.kernel_warmup`: the other core works, the server's GIL stays
  free for requests and the interpreted parse), then load the cached code in a background thread;
* an app built in-process (the test suite) loads them in its background warm-up thread (`warm_parser`).
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from fp8_policy._lazy import lazy_module

if TYPE_CHECKING:
    from fp8_policy.policy.parse import kernels
else:  # imported on first use (with numpy; the warm-up, the first parse): start-up path,
    # tests/service/app/test_start_up_imports.py
    kernels = lazy_module("fp8_policy.policy.parse.kernels")

log = logging.getLogger("fp8_policy.kernels")

_KERNEL_MODULES = ("_name_kernel", "_line_kernel", "_stats_kernel", "_summary_kernel", "_csv_kernel")
_preparing = threading.Event()  # a background preparation has started: jobs wait for it instead of compiling
_prepared = threading.Event()  # ... and has ended (the kernels loaded, or it failed)


def exercise_kernels() -> None:
    """Call every kernel once with the argument types ingest and the CSV export use (compiling or loading each)."""
    import numpy as np

    from fp8_policy.policy import csv_export
    from fp8_policy.policy.parse.assemble import assemble_run
    from fp8_policy.policy.parse.metadata_log import MetadataLog
    from fp8_policy.policy.parse.name_table import NameTable
    from fp8_policy.policy.parse.stats_log import StatsLogParser

    line = b"2026-01-01 00:00:00,000 - INFO - model.l_gradient_mse \t\t\t\t iteration=000000 \t\t\t\t value=0.0000\n"
    parser = StatsLogParser(workers=1)
    parser.feed(io.BytesIO(line * 2), "warm-up")
    # only reached past an over-long line: uncompiled, it left cache_complete() False and every start compiling
    kernels.stats.find_newline(np.frombuffer(line, dtype=np.uint8).copy(), 0, len(line))
    # the same for the name table's own entry point (names.id_for): scan_block loaded from the cache does not
    # compile the dispatchers it calls, so after an edit of _name_kernel.py its index was never written again
    kernels.name_id(NameTable(), np.frombuffer(b"model.l_gradient_mse", dtype=np.uint8).copy())
    assemble_run({0: parser.finish()}, MetadataLog())
    prefix = csv_export.row_prefix("long", 0, "model.l", "gradient", None, "mse")
    b"".join(csv_export.series_rows(prefix, np.arange(2, dtype=np.int64), np.zeros(2)))


def warm_parser() -> None:
    """Load (or compile, the first time on this machine) the kernels in this process and switch ingest to them."""
    started = time.perf_counter()
    kernels.load_compiled(exercise_kernels)
    log.info("compiled kernels ready in %.1f s", time.perf_counter() - started)


def cache_complete() -> bool:
    """Whether numba's on-disk cache holds, for this machine and these sources, every kernel entry point that
    was compiled before (False when unknown: the child process then finds out)."""
    import importlib

    try:
        for name in _KERNEL_MODULES:
            module = importlib.import_module(f"fp8_policy.policy.parse.{name}")
            for value in vars(module).values():
                cache = getattr(value, "_cache", None)
                if value.__class__.__name__ != "CPUDispatcher" or cache is None:
                    continue
                if value.targetoptions.get("inline") == "always":
                    continue  # inlined into its callers: never compiled on its own
                if not cache._cache_file._load_index():  # numba: {} when missing or stale
                    return False
    except Exception:  # numba's cache internals changed: assume not
        return False
    return True


def compile_in_child(timeout: float = 600.0) -> bool:
    """Compile the kernels into the on-disk cache in a child process; whether it succeeded."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fp8_policy.service.ingest.kernel_warmup", "--parent", str(os.getpid())],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("compiling the kernels in a child process failed: %s", exc)
        return False
    if done.returncode != 0:  # negative: ended by that signal (the service stopping while it compiled, say)
        reason = done.stderr.strip()[-2000:] or "no output"
        log.warning("compiling the kernels in a child process failed (exit status %s): %s", done.returncode, reason)
    return done.returncode == 0


def prepare() -> None:
    """The kernels of a serving process: compiled in a child when the cache is not complete, then loaded here."""
    _preparing.set()
    started = time.perf_counter()
    try:
        if not cache_complete():
            log.info("compiling the kernels in a child process; small uploads are parsed without them meanwhile")
            compile_in_child()
            log.info("kernels compiled in %.1f s", time.perf_counter() - started)
        warm_parser()
    finally:
        _prepared.set()


def prepare_in_background() -> threading.Thread:
    thread = threading.Thread(target=prepare, name="kernels", daemon=True)
    thread.start()
    return thread


def kernels_for(size: int) -> None:
    """Before parsing an input of `size` bytes: the interpreted kernels may take it, or the compiled ones must be
    ready (waiting for a preparation under way, or loading them in this thread)."""
    if kernels.compiled_ready() or kernels.small_enough(size):
        return
    if _preparing.is_set():
        log.info("waiting for the compiled kernels to parse %d bytes", size)
        _prepared.wait()
    warm_parser()  # at once when the preparation loaded them; compiles here when it failed


def _end_with(parent: int) -> None:
    """Exit when `parent` has ended (its server was stopped): a compile nobody waits for is not left running."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


if __name__ == "__main__":  # `python -m ...kernel_warmup [--parent PID]`: compile_in_child, `make run`, the bench
    logging.basicConfig(level=logging.INFO)
    if len(sys.argv) == 3 and sys.argv[1] == "--parent":
        # Ctrl-C reaches the whole process group: the service decides (this child ends with it), no traceback here
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        threading.Thread(target=_end_with, args=(int(sys.argv[2]),), daemon=True).start()
    warm_parser()
