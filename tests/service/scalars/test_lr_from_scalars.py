"""An uploaded archive whose scalars.jsonl logs `lr`: the precision schedule of its NVFP4 layers starts the BF16
fprop phase where the curve's decay starts, and says it read it there (policy/parse/lr_schedule.py); the stored summary's
answer and a recomputed one agree."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from tests.conftest import wait_for_run
from tests.policy.recommend.test_mixed_format import METADATA, SUBS, _mxfp8_layer, _name, _nvfp4_layer
from tests.policy.te_logs import write_tree
from tests.support.archives import tar_bytes


def wsd(step: int) -> float:
    return 3e-4 * min(1.0, (step + 1) / 20) if step < 300 else 3e-4 * (1 - (step - 300) / 200)


def archive(root: Path) -> bytes:
    rng = np.random.default_rng(3)
    layers = [(_nvfp4_layer if b <= 4 else _mxfp8_layer)(_name(b, s), rng) for b in range(1, 9) for s in SUBS]
    write_tree(root, layers, np.arange(40) * 10)
    members = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    scalars = "".join(json.dumps({"step": s, "loss": 3.0, "lr": wsd(s)}) + "\n" for s in range(400))
    return tar_bytes({**members, "scalars.jsonl": scalars.encode()})


def test_the_schedule_reads_the_lr_decay_from_the_uploaded_scalars(
    client: TestClient, project: str, tmp_path: Path
) -> None:
    response = client.post(
        "/api/v1/runs",
        data={"project": project, "metadata": json.dumps({**METADATA, "lr_decay_start": 9000})},
        files={"file": ("logs.tar.gz", archive(tmp_path))},
    )
    assert response.status_code == 202, response.text
    run = wait_for_run(client, response.json()["id"])
    assert run["status"] == "ready", run.get("error")
    assert run["ingest_report"]["scalars"]["lr"]["decay_start"] == 300
    for params in ({}, {"lr_decay_start": "9000"}):  # the stored answer, a recomputed one
        body = client.get(f"/api/v1/runs/{run['id']}/recommendation", params=params).json()
        phases = body["schedule"]
        assert [p["from_step"] for p in phases] == [0, 300], phases
        assert (
            "detected in the run's scalars.jsonl lr curve; lr_decay_start 9000 given, not used" in phases[1]["reason"]
        )
