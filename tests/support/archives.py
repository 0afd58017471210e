"""Test helpers: nvdlfw_inspect log lines, synthetic `fp8_log_dir` trees and upload bytes (tar, tar.gz, zip, gz).

Everything is built in memory or under a test's tmp_path; the real bionemo fixtures are only ever read.
"""

from __future__ import annotations

import gzip
import io
import math
import tarfile
import zipfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "bionemo"
ESM2 = FIXTURES / "dummy_logs_esm2"
LLAMA3 = FIXTURES / "dummy_logs_llama3"
STATS_DIR = "nvdlfw_inspect_statistics_logs"
META_DIR = "nvdlfw_inspect_logs"
ESM2_STATS = ESM2 / "rank_0" / STATS_DIR / "nvdlfw_inspect_globalrank-0.log"
LLAMA3_STATS = LLAMA3 / "rank_0" / STATS_DIR / "nvdlfw_inspect_globalrank-0.log"

# nvdlfw_inspect's stats line (fp8-log-format.md §1.2), asctime first.
LINE_FORMAT = "%s - INFO - %s \t\t\t\t iteration=%06d \t\t\t\t value=%.4f"
TS = "2026-01-15 23:06:41,584"
META_TS = "2026-01-15 23:06:31,201"


def stats_line(name: str, iteration: int, value: float, ts: str = TS) -> str:
    """One statistics line exactly as nvdlfw_inspect prints it (no line ending)."""
    return LINE_FORMAT % (ts, name, iteration, value)


def stats_log(points: Iterable[tuple[str, int, float]], newline: str = "\n") -> bytes:
    return "".join(stats_line(n, i, v) + newline for n, i, v in points).encode()


def metadata_log(layers: Mapping[str, str]) -> bytes:
    """Metadata lines: each layer assigned, with plan lines `FP8 Quantize` or `High Precision` for every GEMM."""
    lines = [f"{META_TS} - INFO - Assigned layer name: {layer}" for layer in layers]
    for layer, plan in layers.items():
        for tensor, gemms in (
            ("activation", ("fprop", "wgrad")),
            ("weight", ("fprop", "dgrad")),
            ("gradient", ("dgrad", "wgrad")),
        ):
            lines += [f"{META_TS} - INFO - LAYER={layer}: Tensor: {tensor}, gemm {gemm} - {plan}" for gemm in gemms]
    return ("\n".join(lines) + "\n").encode()


def stats_relpath(rank: int, stamp: str | None = None, rank_dir: bool = True) -> str:
    stamp_part = f"_{stamp}" if stamp else ""
    prefix = f"rank_{rank}/" if rank_dir else ""
    return f"{prefix}{STATS_DIR}/nvdlfw_inspect{stamp_part}_globalrank-{rank}.log"


def meta_relpath(rank: int, rank_dir: bool = True) -> str:
    prefix = f"rank_{rank}/" if rank_dir else ""
    return f"{prefix}{META_DIR}/nvdlfw_inspect_globalrank-{rank}.log"


def write_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    """Write relpath -> bytes under root (an `fp8_log_dir` on disk)."""
    for relpath, data in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def rank_value(rank: int, layer: int, iteration: int) -> float:
    """The synthetic value of a multi-rank tree, distinct per (rank, layer, iteration) and exact at 4 decimals."""
    return round(rank * 10 + layer + iteration / 1000, 4)


def multi_rank_tree(root: Path, ranks: int, layers: int = 2, iterations: Iterable[int] = range(0, 50, 10)) -> Path:
    """`rank_N/{stats,metadata}` for N ranks: `model.layers.L.fc1` (FP8 plans), activation underflows% per rank."""
    its = list(iterations)
    names = [f"model.layers.{layer}.fc1" for layer in range(1, layers + 1)]
    files: dict[str, bytes] = {}
    for rank in range(ranks):
        points = [
            (f"{name}_activation_underflows%", it, rank_value(rank, k + 1, it))
            for it in its
            for k, name in enumerate(names)
        ]
        files[stats_relpath(rank)] = stats_log(points)
        files[meta_relpath(rank)] = metadata_log(dict.fromkeys(names, "FP8 Quantize"))
    return write_tree(root, files)


# --- archive bytes ---------------------------------------------------------------------------------------


def tar_bytes(
    members: Mapping[str, bytes] | Iterable[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz"
) -> bytes:
    """A tar (mode "w") or tar.gz ("w:gz") of the members; TarInfo items are added as they are (links, devices)."""
    buffer = io.BytesIO()
    items = members.items() if isinstance(members, Mapping) else members
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for item in items:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
                continue
            name, data = item
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tree_tar_gz(root: Path) -> bytes:
    """A tar.gz of a directory tree, member names relative to root (what `tar czf x.tgz -C root .` gives)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return buffer.getvalue()


def tree_zip(root: Path) -> bytes:
    return zip_bytes({p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()})


def zip_bytes(members: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def gz_bytes(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def special_member(name: str, type_: bytes, linkname: str = "") -> tarfile.TarInfo:
    """A tar member of another type than a regular file: SYMTYPE, LNKTYPE, CHRTYPE, BLKTYPE, FIFOTYPE."""
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    if type_ in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info


def zeros_tar_gz(member: str, size: int) -> bytes:
    """A tar.gz holding one member of `size` zero bytes (a compression bomb), built without holding it in memory."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo(member)
        info.size = size
        tar.addfile(info, _Zeros(size))
    return buffer.getvalue()


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


# --- the real fixtures as uploads ---------------------------------------------------------------------------


@cache
def esm2_tar_gz() -> bytes:
    return tree_tar_gz(ESM2)


@cache
def llama3_tar_gz() -> bytes:
    return tree_tar_gz(LLAMA3)


@cache
def llama3_zip() -> bytes:
    return tree_zip(LLAMA3)


def parse_reference(path: Path) -> dict[str, dict[int, float]]:
    """name -> {iteration: value} of a stats log by the reference regex + float(), later lines winning."""
    from fp8_policy.policy.parse.stats_log import STATS_LINE

    out: dict[str, dict[int, float]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for line in handle.read().splitlines():
            match = STATS_LINE.match(line)
            if match is not None:
                out.setdefault(match["name"], {})[int(match["iteration"])] = float(match["value"])
    return out


def same_float(a: float, b: float) -> bool:
    """Equal, with NaN equal to NaN and -0.0 distinct from 0.0 (bitwise sign)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
