"""Demo data of `make run`: planted-pattern runs (and the real fixtures when ../shared is there)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from fp8_policy.db.migrate import upgrade
from fp8_policy.service.app import create_app
from fp8_policy.service.demo import DEMO_SCENARIOS, FIXTURES, load_demo_runs
from fp8_policy.service.settings import Settings


def test_demo_runs_are_queued_once_and_become_ready_with_their_planted_patterns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    upgrade(url)
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url, load_demo=True)
    with TestClient(create_app(settings)) as client:
        client.app.state.demo_loader.join(timeout=180)  # queued in the background: start-up does not wait for it
        client.app.state.ingest.wait_idle(timeout=180)
        runs = client.get("/api/v1/runs", params={"project": "demo", "limit": 100}).json()["items"]
        fixtures = sum((FIXTURES / name).is_dir() for name in ("dummy_logs_esm2", "dummy_logs_llama3"))
        assert len(runs) == len(DEMO_SCENARIOS) + 1 + fixtures  # + the NVFP4 run on a B200
        assert {r["status"] for r in runs} == {"ready"}, [(r["name"], r["error"]) for r in runs]
        by_name = {r["name"]: r for r in runs}
        head = client.get(f"/api/v1/runs/{by_name['demo-head_only']['id']}/analysis").json()
        assert "head_only" in {f["pattern"] for f in head["findings"]}
        healthy = client.get(f"/api/v1/runs/{by_name['demo-healthy']['id']}/analysis").json()
        assert [f["pattern"] for f in healthy["findings"]] == ["healthy"]
        nvfp4 = by_name["demo-nvfp4-b200"]
        assert nvfp4["metadata"]["gpu"] == "B200"
        rec = client.get(f"/api/v1/runs/{nvfp4['id']}/recommendation").json()
        assert rec["recipe"]["name"] == "nvfp4" and rec["headline"]["precision_mix"]["mxfp8"] > 0  # lifted layers
        curves = client.get(f"/api/v1/live/runs/{by_name['demo-u_shape']['id']}/scalars").json()
        assert {"loss", "grad_norm", "lr"} <= set(curves["series"])
        assert load_demo_runs(client.app) == []  # the database is no longer empty
