"""Which implementation of the numba kernels runs: the compiled one, or the same source run by the interpreter.

Belongs here: the choice between the two, the compiled kernels' readiness, and building the interpreted twin.
The kernels themselves stay in `policy/parse/_*_kernel.py`, written once.

Why two: numba compiles a kernel on its first call (about 30-100 s for all of them on a 2-core machine, once per
machine: `cache=True` keeps the result on disk, NUMBA_CACHE_DIR). A service must not make a user's first upload
wait for that. Until `load_compiled()` has finished in this process, `stats`, `names`, `summary` and `csv` hand
out the *interpreted twin*: each `_*_kernel.py` module executed again with `numba.njit` replaced by a decorator
that returns the function unchanged, so every kernel and every kernel-to-kernel call is plain Python over the
same arrays, with the same results (tests/policy/parse/test_kernels.py compares both on real logs). It is 100-1000x
slower than the compiled code: fine for a log of a few MB, not for a 6M-line run, which waits for the compiled
kernels instead (`small_enough`, service/ingest/pipeline.py).

Two differences of numba's typing are bridged by the twin: a uint8 array argument is handed over as a
`memoryview` (whose items are Python ints: `buf[i] - 48` cannot wrap around as a numpy uint8 scalar would, and
`buf[i] * 10**k` cannot overflow one), and numpy's overflow warnings are silenced (uint64 hash arithmetic
wraps, as in numba).
"""

from __future__ import annotations

import builtins
import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from typing import Any

import numpy as np

_KERNEL_MODULES = ("_name_kernel", "_line_kernel", "_stats_kernel", "_summary_kernel", "_csv_kernel")
_PACKAGE = "fp8_policy.policy.parse"
SMALL_UPLOAD_BYTES = 4 * 1024 * 1024  # uploads the interpreted kernels take while the compiled ones are not loaded

_ready = threading.Event()
_loading = threading.RLock()
_local = threading.local()  # .compiled True / False: this thread's choice whatever `_ready` says
_twins: dict[str, types.ModuleType] = {}
_twins_lock = threading.RLock()  # a twin importing another twin builds it inside


# --- readiness -------------------------------------------------------------------------------------------------
def compiled_ready() -> bool:
    """Whether the compiled kernels are loaded in this process (every caller then uses them)."""
    return _ready.is_set()


def small_enough(size: int) -> bool:
    """Whether an input of `size` bytes may be parsed before the compiled kernels are loaded."""
    return size <= SMALL_UPLOAD_BYTES


def load_compiled(warm: Callable[[], None]) -> None:
    """Compile the kernels (or load them from numba's on-disk cache) by running `warm` with the compiled kernels
    forced in this thread, then switch every caller to them. Idempotent; concurrent callers wait for the first."""
    if _ready.is_set():
        return
    with _loading:
        if _ready.is_set():
            return
        with forced_compiled():
            warm()
        _ready.set()


def wait_compiled(timeout: float | None = None) -> bool:
    return _ready.wait(timeout)


@contextmanager
def forced_compiled() -> Iterator[None]:
    """Within the block, this thread calls the compiled kernels (compiling them on first use)."""
    with _forced(True):
        yield


@contextmanager
def forced_interpreted() -> Iterator[None]:
    """Within the block, this thread calls the interpreted twins, even once the compiled kernels are loaded."""
    with _forced(False):
        yield


@contextmanager
def _forced(compiled: bool) -> Iterator[None]:
    before = getattr(_local, "compiled", None)
    _local.compiled = compiled
    try:
        yield
    finally:
        _local.compiled = before


def _use_compiled() -> bool:
    forced: bool | None = getattr(_local, "compiled", None)
    return _ready.is_set() if forced is None else forced


# --- the two implementations -----------------------------------------------------------------------------------
class KernelModule:
    """Attribute access to one kernel module: the compiled module's attribute once loaded (or when forced in this
    thread), the interpreted twin's before. Constants and plain classes are the same either way."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if _use_compiled():
            return getattr(importlib.import_module(f"{_PACKAGE}.{self._name}"), attr)
        module = twin(self._name)
        value = getattr(module, attr)
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            return _entry_point(module, attr)
        return value


stats = KernelModule("_stats_kernel")
names = KernelModule("_name_kernel")
summary = KernelModule("_summary_kernel")
csv = KernelModule("_csv_kernel")


def twin(name: str) -> types.ModuleType:
    """The interpreted twin of `policy/<name>.py` (built once per process)."""
    with _twins_lock:
        module = _twins.get(name)
        if module is None:
            module = _build_twin(name)
            _twins[name] = module
        return module


def name_id(table: Any, name: np.ndarray) -> int:
    """`id_for(table, name)` (policy/parse/_name_kernel.py) with the kernels in use. A read-only `name` (np.frombuffer of
    bytes) is copied: numba compiles a separate specialisation per array writability, and the warm-up
    (service/ingest/kernel_warmup.py) compiles the writable one only."""
    if not name.flags.writeable:
        name = name.copy()
    if _use_compiled():
        return int(importlib.import_module(f"{_PACKAGE}._name_kernel").id_for(table, name))
    with np.errstate(over="ignore"):
        return int(twin("_name_kernel").id_for(table, name))


class _NoJit(types.ModuleType):
    """Stands in for `numba` in a twin: `numba.njit(...)` returns the function as it is (kernels then call each
    other as plain functions; only calls from outside go through `_entry_point`)."""

    def __init__(self) -> None:
        super().__init__("numba")

    @staticmethod
    def njit(*args: Any, **_options: Any) -> Any:
        if len(args) == 1 and callable(args[0]):
            return args[0]
        return lambda function: function


@functools.cache
def _entry_point(module: types.ModuleType, attr: str) -> Callable[..., Any]:
    """A twin's kernel called from outside: uint8 arrays as memoryviews, numpy overflow warnings off."""
    function = getattr(module, attr)

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        with np.errstate(over="ignore"):
            return function(*(_as_bytes_view(a) for a in args))

    return call


def _as_bytes_view(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
        return value.data if value.flags.c_contiguous else np.ascontiguousarray(value).data  # a memoryview
    return value


def _build_twin(name: str) -> types.ModuleType:
    spec = find_spec(f"{_PACKAGE}.{name}")
    if spec is None or spec.origin is None or spec.loader is None:
        raise ImportError(f"no kernel module {_PACKAGE}.{name}")
    source = spec.loader.get_source(spec.name)  # type: ignore[attr-defined]
    if source is None:
        raise ImportError(f"the source of {spec.name} is not available")
    module = types.ModuleType(f"{_PACKAGE}.{name}[interpreted]")
    module.__file__ = spec.origin
    module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": _twin_import}
    exec(compile(source, spec.origin, "exec"), module.__dict__)  # noqa: S102 - the package's own kernel source
    if "load_u64" in module.__dict__:
        module.load_u64 = _load_u64  # type: ignore[attr-defined]
    return module


def _load_u64(buf: Any, i: int) -> np.uint64:
    """The 8 bytes buf[i:i+8] as one little-endian uint64, as _name_kernel.load_u64 computes it with eight shifted
    byte loads (the spelling LLVM merges into one load); read at once here, 20x faster in the interpreter."""
    return np.uint64(int.from_bytes(buf[i : i + 8], "little"))


_NUMBA = _NoJit()


def _twin_import(
    name: str,
    globals_: dict[str, Any] | None = None,
    locals_: dict[str, Any] | None = None,
    fromlist: tuple[str, ...] = (),
    level: int = 0,
) -> Any:
    """`import numba` gets the stand-in; a kernel module importing another kernel module gets that one's twin."""
    if name == "numba" or name.startswith("numba."):
        return _NUMBA
    prefix = f"{_PACKAGE}."
    if level == 0 and name.startswith(prefix) and name[len(prefix) :] in _KERNEL_MODULES:
        return twin(name[len(prefix) :]) if fromlist else sys.modules[_PACKAGE]
    return builtins.__import__(name, globals_, locals_, fromlist, level)
