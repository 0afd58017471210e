"""Issue 20 item 5: a stored `runs/<id>/upload.bin` without a run row (its process was killed before the commit)
is removed at start-up; a committed run's file, and one another process is storing right now, are kept."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fp8_policy.service.app import create_app
from fp8_policy.service.runs.orphans import sweep_orphan_uploads
from fp8_policy.service.settings import Settings
from tests.conftest import wait_for_run
from tests.support.archives import multi_rank_tree, tree_tar_gz

NEVER_USED_ID = 2_000_000_000  # far above any id the suite's shared database hands out


def _orphan(settings: Settings, run_id: int = NEVER_USED_ID) -> Path:
    path = settings.data_dir / "runs" / str(run_id) / "upload.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"bytes of an upload whose run row was never committed")
    return path


def test_an_orphan_upload_is_swept_at_start_and_a_runs_upload_is_kept(
    app_settings: Settings, tmp_path: Path, project: str
) -> None:
    with TestClient(create_app(app_settings)) as client:
        archive = tree_tar_gz(multi_rank_tree(tmp_path / "run", ranks=1))
        response = client.post("/api/v1/runs", files={"file": ("run.tgz", archive)}, data={"project": project})
        assert response.status_code == 202, response.text
        run = wait_for_run(client, response.json()["id"])
    kept = app_settings.data_dir / "runs" / str(run["id"]) / "upload.bin"
    assert kept.is_file()
    orphan = _orphan(app_settings)
    with TestClient(create_app(app_settings)) as client:
        assert not orphan.parent.exists()
        assert kept.is_file()
        assert client.get(f"/api/v1/runs/{run['id']}").json()["status"] == "ready"


def test_a_file_being_stored_by_another_process_is_kept(app_settings: Settings) -> None:
    orphan = _orphan(app_settings)
    with TestClient(create_app(app_settings)) as client:
        assert not orphan.exists()  # swept at start
        orphan = _orphan(app_settings)
        store, factory = client.app.state.ingest.store, client.app.state.session_factory
        with open(orphan, "rb") as other:  # another open file: its lock conflicts as another process's would
            fcntl.flock(other.fileno(), fcntl.LOCK_EX)
            assert sweep_orphan_uploads(store, factory) == []
            assert orphan.is_file()
        assert sweep_orphan_uploads(store, factory) == [NEVER_USED_ID]
        assert not orphan.parent.exists()


def test_an_upload_keeps_its_file_locked_until_its_run_row_is_committed(
    client: TestClient, tmp_path: Path, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that runs (in another process) between the move to runs/<id>/ and the commit leaves the file."""
    store, factory = client.app.state.ingest.store, client.app.state.session_factory
    swept: list[list[int]] = []
    real_put = store.put_file

    def put_then_sweep(local_path: Path, key: str) -> None:
        real_put(local_path, key)
        swept.append(sweep_orphan_uploads(store, factory))  # the run row is added but not committed yet

    monkeypatch.setattr(store, "put_file", put_then_sweep)
    archive = tree_tar_gz(multi_rank_tree(tmp_path / "run", ranks=1))
    response = client.post("/api/v1/runs", files={"file": ("run.tgz", archive)}, data={"project": project})
    assert response.status_code == 202, response.text
    assert swept == [[]]
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run["error"]
    assert (client.app.state.settings.data_dir / "runs" / str(run["id"]) / "upload.bin").is_file()
