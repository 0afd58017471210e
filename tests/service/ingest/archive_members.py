"""Archives built for the tests of service.ingest.archive (test_archive.py, test_archive_refusals.py,
test_archive_bombs.py): tar and zip files of given members, special members, the files an extraction left, and
the checks of a refusal and of what was extracted."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from fp8_policy.service.ingest.archive import ArchiveError, ExtractLimits, ExtractResult, extract_upload
from tests.support.archives import tar_bytes

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
ESM2_LOGS = SHARED / "fixtures" / "bionemo" / "dummy_logs_esm2"
STATS = "nvdlfw_inspect_statistics_logs"
META = "nvdlfw_inspect_logs"
STATS_0 = f"rank_0/{STATS}/nvdlfw_inspect_globalrank-0.log"
META_0 = f"rank_0/{META}/nvdlfw_inspect_globalrank-0.log"
STATS_TEXT = (
    b"2026-01-15 23:06:41,589 - INFO - model.layers.1.fc1_activation_underflows% \t\t\t\t "
    b"iteration=000000 \t\t\t\t value=21.4681\n"
)
META_TEXT = b"2026-01-15 23:06:31,201 - INFO - Assigned layer name: model\n"
MiB = 1024**2
Members = dict[str, bytes]


def _tar(path: Path, members: Members | list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> Path:
    path.write_bytes(tar_bytes(members, mode))
    return path


def _special(name: str, type_: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    return info


def _zip(path: Path, members: Members | list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return path


def _files_under(root: Path) -> set[Path]:
    return set(root.rglob("*")) if root.exists() else set()


def _refuse(
    upload: Path, dest: Path, code: str, limits: ExtractLimits | None = None, hint: str | None = None
) -> ArchiveError:
    """Extraction fails with `code`, leaves dest empty and writes nothing anywhere else in tmp_path."""
    before = _files_under(upload.parent) - _files_under(dest)
    with pytest.raises(ArchiveError) as caught:
        extract_upload(upload, dest, limits or ExtractLimits(), filename_hint=hint)
    assert caught.value.code == code, caught.value.detail
    assert _files_under(dest) == set()
    assert _files_under(upload.parent) - {dest, dest.parent} == before - {dest, dest.parent}
    return caught.value


def _extracted(result: ExtractResult, dest: Path) -> dict[str, bytes]:
    return {path.relative_to(dest).as_posix(): path.read_bytes() for _, path in result.files}
