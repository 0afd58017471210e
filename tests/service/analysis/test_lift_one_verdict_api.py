"""One verdict through the API (recommend/ladder.py, the lift rule): a synthetic NVFP4 run whose last two blocks
fail NVFP4 by underflow; the recommendation endpoint's ladder rung of every layer is the precision its rendered
Megatron script runs it at (the precision config loaded as Megatron loads it) and the one its JSON formats keep."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fastapi.testclient import TestClient

from fp8_policy.policy.synthetic import FRONTIER_SCENARIOS, write_run
from tests.conftest import wait_for_run
from tests.policy.render import megatron_loader as loader
from tests.service.analysis.test_analysis_api import wait_for_summary
from tests.support.archives import tree_tar_gz

BODY = re.compile(r"decoder\.layers\.(\d+)\.(.+)$")


def test_nvfp4_late_layers_ladder_rung_is_the_rendered_precision(client: TestClient, tmp_path: Path, project: str):
    case = FRONTIER_SCENARIOS["nvfp4_late_layers"]
    write_run(case.run, tmp_path / "run")
    response = client.post(
        "/api/v1/runs",
        files={"file": ("run.tgz", tree_tar_gz(tmp_path / "run"))},
        data={"project": project, "name": "nvfp4-late", "metadata": '{"gpu": "B200", "recipe": "nvfp4"}'},
    )
    assert response.status_code == 202, response.text
    run_id = wait_for_run(client, response.json()["id"])["id"]
    wait_for_summary(client, run_id)
    body = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    rungs = {name: rung["precision"] for name, rung in body["precision_ladder"]["layers"].items()}
    planted = set(case.truth.skip_layers)
    assert {rungs[name] for name in planted} == {"mxfp8"}
    assert all(
        "lifted to MXFP8 instead of BF16" in body["precision_ladder"]["layers"][n]["evidence"][-1] for n in planted
    )
    assert body["fp8_skip_layers"] == [] and {rungs[n] for n in set(rungs) - planted} == {"nvfp4"}
    for fmt, applied in body["formats"].items():  # no ladder layer in BF16, except a widening the format declares
        widened = set(applied["bf16_layers"]) & set(rungs)
        assert widened <= set(applied["extra_bf16_layers"]) and applied["not_applied"] == [], fmt
        if fmt == "hydra":  # fp8_layers holds one recipe per block: MXFP8 rungs under NVFP4 take theirs to BF16
            assert planted <= widened and "(mxfp8)" in applied["approximation"], applied
        else:
            assert not widened & planted, fmt

    script = client.get(f"/api/v1/runs/{run_id}/recommendation", params={"format": "megatron"}).text
    (tmp_path / "policy.sh").write_text(script + 'printf "%s\\n" "${FP8_POLICY_ARGS[@]}"\n')
    args = subprocess.run(
        ["bash", "policy.sh"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] and "--first-last-layers-bf16" not in args
    config = tmp_path / args[args.index("--te-precision-config-file") + 1]
    body_layers = {name: BODY.search(name) for name in rungs}
    first = min(int(m.group(1)) for m in body_layers.values() if m)  # TE's layer_number is 1-based
    n_blocks = max(int(m.group(1)) for m in body_layers.values() if m) - first + 1
    got = loader.precisions(config, n_blocks, "nvfp4")
    recipe = loader.RecipeConfig.from_yaml_file(config)
    for name, rung in rungs.items():
        match = body_layers[name]
        if match is None:  # the head: Megatron's `output_layer` (no matcher: the outer recipe)
            assert name.endswith("output_layer"), name
            matched = recipe.match("output_layer")
            assert (matched.precision if matched else "nvfp4") == rung, name
            continue
        assert got[f"decoder.layers.{int(match.group(1)) - first}.{match.group(2)}"] == rung, name
