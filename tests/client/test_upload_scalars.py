"""`fp8-policy upload DIR` packs the training scalars with the logs (DIR/scalars.jsonl, or `--scalars FILE`), and
the real service keeps and serves them: the finished run's curves come from the same file a live run streams."""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fp8_policy.client.packing import pack_directory
from tests.client.cli.test_upload_identity import fp8
from tests.support.archives import ESM2
from tests.support.uvicorn_app import Live, sqlite_service


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with sqlite_service(tmp_path_factory.mktemp("scalars")) as served:
        yield served


def records(steps: range, scale: float = 1.0) -> str:
    return "".join(json.dumps({"step": s, "loss": scale * 8.0 / (1 + s), "grad_norm": 1.5}) + "\n" for s in steps)


def members(archive) -> list[str]:
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        return tar.getnames()


def test_a_directory_packs_its_scalars_jsonl_at_the_archive_root(tmp_path: Path) -> None:
    tree = shutil.copytree(ESM2, tmp_path / "esm2")
    (tree / "scalars.jsonl").write_text(records(range(3)))
    (tree / "rank_0" / "scalars.jsonl").write_text(records(range(3)))  # not at the root: not the run's scalars

    with pack_directory(tree) as archive:
        names = members(archive)
    assert "scalars.jsonl" in names and "rank_0/scalars.jsonl" not in names
    other = tmp_path / "elsewhere.jsonl"
    other.write_text(records(range(5)))
    with pack_directory(tree, other) as archive, tarfile.open(fileobj=archive, mode="r:gz") as tar:
        packed = tar.extractfile("scalars.jsonl")
        assert packed is not None and packed.read().decode() == records(range(5))  # --scalars wins


def test_upload_sends_the_scalars_and_the_service_serves_them(live: Live, tmp_path: Path) -> None:
    tree = shutil.copytree(ESM2, tmp_path / "esm2")
    (tree / "scalars.jsonl").write_text(records(range(0, 100, 5)))

    result = fp8(live, "upload", str(tree), "--project", "scalars-dir", "--wait", "--json")

    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["ingest_report"]["scalars"]["records"] == 20
    served = httpx.get(f"{live.url}/api/v1/live/runs/{run['id']}/scalars").json()
    assert served["series"]["loss"]["steps"] == list(range(0, 100, 5))


def test_upload_with_scalars_from_elsewhere(live: Live, tmp_path: Path) -> None:
    tree = shutil.copytree(ESM2, tmp_path / "esm2")
    scalars = tmp_path / "train_scalars.jsonl"
    scalars.write_text(records(range(7), scale=2.0))

    result = fp8(live, "upload", str(tree), "--scalars", str(scalars), "--project", "scalars-file", "--wait", "--json")

    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    served = httpx.get(f"{live.url}/api/v1/live/runs/{run['id']}/scalars").json()
    assert served["records"] == 7 and served["series"]["loss"]["values"][0] == 16.0


def test_scalars_with_a_single_file_upload_is_a_usage_error(live: Live, tmp_path: Path) -> None:
    scalars = tmp_path / "s.jsonl"
    scalars.write_text(records(range(2)))
    log = next(ESM2.rglob("*globalrank-0.log"))

    result = fp8(live, "upload", str(log), "--scalars", str(scalars))

    assert result.exit_code == 2
    assert "--scalars goes with a log directory" in result.output
