"""policy/parse/kernels.py: the interpreted twins of the numba kernels give exactly the compiled kernels' results, and
parsing before the compiled kernels are loaded compiles nothing (a service's first upload must not wait for numba)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fp8_policy.policy import csv_export
from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.assemble import AssembledRun, assemble_run
from fp8_policy.policy.parse.metadata_log import MetadataLog
from fp8_policy.policy.parse.stats_log import StatsLogParser
from tests.support.archives import ESM2_STATS, LLAMA3_STATS, TS, stats_log

ROOT = Path(__file__).resolve().parents[3]
FC1 = "model.layers.1.fc1"
UNUSUAL = (
    stats_log([(f"{FC1}_activation_underflows%", it, 0.25 * it) for it in range(5)])
    + b"\n   \n"  # blank lines
    + f"{TS} - INFO - {FC1}_gradient_mse   iteration=7   value=nan\n".encode()  # other spacing, nan
    + f"{TS} - INFO - {FC1}_gradient_mse \t\t\t\t iteration=000008 \t\t\t\t value=-inf\r\n".encode()  # CRLF, -inf
    + f"{TS} - INFO - {FC1}_weight_scale_inv_max \t\t\t\t iteration=000003 \t\t\t\t value=1.234567891\n".encode()
    + b"not a statistics line at all\n"
    + stats_log([(f"{FC1}_activation_underflows%", 2, 9.0)])  # a duplicate: the last value wins
    + f"{TS} - INFO - {FC1}_activation_overflows% \t\t\t\t iteration=000009 \t\t\t\t value=3.5000".encode()  # no EOL
)


def parse(data: bytes) -> AssembledRun:
    parser = StatsLogParser(workers=1)
    parser.feed(io.BytesIO(data), "rank0.log")
    return assemble_run({0: parser.finish()}, MetadataLog())


def parse_both(data: bytes) -> tuple[AssembledRun, AssembledRun]:
    with kernels.forced_interpreted():
        interpreted = parse(data)
    with kernels.forced_compiled():
        compiled = parse(data)
    return interpreted, compiled


def assert_same_run(interpreted: AssembledRun, compiled: AssembledRun) -> None:
    assert interpreted.points == compiled.points
    assert [s.metric for s in interpreted.series] == [s.metric for s in compiled.series]
    for a, b in zip(interpreted.series, compiled.series, strict=True):
        assert np.array_equal(a.iterations, b.iterations)
        assert np.array_equal(a.values, b.values, equal_nan=True)
        assert repr(a.summary) == repr(b.summary)  # repr: a NaN minimum equals itself


@pytest.mark.parametrize("path", [ESM2_STATS, LLAMA3_STATS], ids=["esm2", "llama3"])
def test_the_interpreted_kernels_parse_the_real_logs_as_the_compiled_ones(path: Path) -> None:
    interpreted, compiled = parse_both(path.read_bytes())

    assert interpreted.points > 0
    assert_same_run(interpreted, compiled)


def test_slow_path_lines_blank_lines_non_finite_values_and_duplicates_agree() -> None:
    interpreted, compiled = parse_both(UNUSUAL)

    assert_same_run(interpreted, compiled)
    values = np.concatenate([s.values for s in interpreted.series])
    assert np.isnan(values).any() and np.isneginf(values).any() and 9.0 in values  # the duplicate's last value


def test_the_csv_writer_agrees() -> None:
    prefix = csv_export.row_prefix("long", 3, FC1, "gradient", "DelayedScaling", "underflows%")
    its = np.array([0, 10, 123456789], dtype=np.int64)
    vals = np.array([0.5, np.nan, -np.inf])

    with kernels.forced_interpreted():
        interpreted = b"".join(csv_export.series_rows(prefix, its, vals))
    with kernels.forced_compiled():
        compiled = b"".join(csv_export.series_rows(prefix, its, vals))

    assert interpreted == compiled
    assert interpreted.count(b"\n") == 3


def test_a_twin_is_plain_python_and_its_kernels_call_each_other_as_plain_functions() -> None:
    twin = kernels.twin("_stats_kernel")

    assert isinstance(twin.scan_block, types.FunctionType)
    assert isinstance(twin._parse_exact, types.FunctionType)
    assert twin.hash_name is kernels.twin("_name_kernel").hash_name  # the other twin, not numba's dispatcher
    assert twin._parse_exact is kernels.twin("_line_kernel")._parse_exact  # inlined from there when compiled
    assert "numba" not in {type(v).__module__.split(".")[0] for v in vars(twin).values()}


def test_which_kernels_a_thread_gets() -> None:
    with kernels.forced_interpreted():
        assert kernels.stats.group_block.__module__.endswith("[interpreted]")
    with kernels.forced_compiled():
        assert type(kernels.stats.group_block).__name__ == "CPUDispatcher"
    assert kernels.small_enough(kernels.SMALL_UPLOAD_BYTES)
    assert not kernels.small_enough(kernels.SMALL_UPLOAD_BYTES + 1)


def test_a_fresh_process_parses_the_esm2_log_without_compiling_a_kernel(tmp_path: Path) -> None:
    """With an empty numba cache and the compiled kernels never loaded, the parse runs on the twins: no numba
    dispatcher has a compiled signature afterwards."""
    script = f"""
import io, json
from fp8_policy.policy.parse import _line_kernel
from fp8_policy.policy.parse import _name_kernel
from fp8_policy.policy.parse import _stats_kernel
from fp8_policy.policy.parse import _summary_kernel
from fp8_policy.policy.parse import kernels
from fp8_policy.policy.parse.assemble import assemble_run
from fp8_policy.policy.parse.metadata_log import MetadataLog
from fp8_policy.policy.parse.stats_log import StatsLogParser
parser = StatsLogParser(workers=1)
parser.feed(io.BytesIO(open({str(ESM2_STATS)!r}, "rb").read()), "esm2")
run = assemble_run({{0: parser.finish()}}, MetadataLog())
compiled = [
    f"{{m.__name__}}.{{k}}"
    for m in (_line_kernel, _name_kernel, _stats_kernel, _summary_kernel)
    for k, v in vars(m).items()
    if type(v).__name__ == "CPUDispatcher" and v.signatures
]
print(json.dumps({{"points": run.points, "compiled": compiled, "ready": kernels.compiled_ready()}}))
"""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"points": 1800, "compiled": [], "ready": False}
    assert not (tmp_path / "numba").exists() or not any((tmp_path / "numba").rglob("*.nbc"))


def _compiled_signatures() -> dict[str, list]:
    """Every compiled kernel entry point's signatures in this process, by name."""
    import importlib

    from fp8_policy.service.ingest.kernel_warmup import _KERNEL_MODULES

    found = {}
    for module_name in _KERNEL_MODULES:
        module = importlib.import_module(f"fp8_policy.policy.parse.{module_name}")
        for name, value in vars(module).items():
            if type(value).__name__ == "CPUDispatcher":
                found[f"{module_name}.{name}"] = list(value.signatures)
    return found


def test_input_without_a_final_newline_needs_no_kernel_the_warm_up_did_not_compile() -> None:
    """UNUSUAL ends without a newline: its last block came from bytes (read-only), and numba compiled another
    scan_block (and hash_name, lookup_or_insert) for it, tens of seconds inside the first such ingest of a
    service whose warm-up had finished."""

    from fp8_policy.policy.parse.stats_log import _id_of
    from fp8_policy.policy.parse.stats_names import NamedTable
    from fp8_policy.service.ingest.kernel_warmup import exercise_kernels

    with kernels.forced_compiled():
        exercise_kernels()
        warm = _compiled_signatures()
        parse(UNUSUAL)
        _id_of(NamedTable(), b"model.layers.2.fc2_gradient_mse")  # a name as bytes, as the slow path has it
    assert _compiled_signatures() == warm
    read_only = [
        (name, sig)
        for name, sigs in warm.items()
        if name.endswith(("scan_block", "hash_name"))
        for sig in sigs
        if getattr(sig[0], "mutable", True) is False
    ]
    assert read_only == []
