"""`fp8-policy recommend --target`, `frontier` and `verify` against the real app (in-process), and the arms a
recommendation implies (client/experiment/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from fp8_policy import PolicyClient
from fp8_policy.client.cli import cli
from fp8_policy.client.experiment.arms import arms_from_recommendation, experiment_body
from tests.support.sensitivity_runs import SENSITIVE, upload_sensitivity_run

SPEC = """
from examples.tiny_gpt import Setup, TinyGPT, corpus, loss_of
from examples.tiny_gpt import batches as sample

SETUP = Setup(d_model=16, n_layers=8, steps=2, eval_batches=1, logit_scale=1.0)
TRAIN, HELD = corpus()
STEPS = 2


def model():
    return TinyGPT(SETUP)


def loss(model, batch):
    return loss_of(model, batch)


def batches():
    return sample(TRAIN, SETUP, seed=1)


def heldout():
    return [next(sample(HELD, SETUP, seed=2))]
"""


@pytest.fixture
def api(client: TestClient) -> Iterator[PolicyClient]:
    with PolicyClient(str(client.base_url), transport=client._transport) as policy_client:
        yield policy_client


SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # trains models: one backend is enough


@SQLITE_ONLY
def test_arms_from_a_recommendation_merge_equal_assignments(client: TestClient, project: str) -> None:
    run_id = upload_sensitivity_run(client, project, name="arms")
    policy = client.get(f"/api/v1/runs/{run_id}/recommendation").json()
    arms = arms_from_recommendation(policy, frontier_points=(0,))
    by_name = {arm.name: arm for arm in arms}
    assert set(by_name["bf16"].precisions.values()) == {"bf16"} and "frontier_0" in by_name["bf16"].also
    assert set(by_name["all_nvfp4"].precisions.values()) == {"nvfp4"}
    assert by_name["recommended"].precisions[SENSITIVE] == "mxfp8"
    rule = by_name["last_15pct"]
    assert rule.precisions["model.output_layer"] == "bf16" and rule.precisions[SENSITIVE] == "nvfp4"
    assert len({arm.key() for arm in arms}) == len(arms)
    body = experiment_body(
        [{"arm": a, "steps": 5, "heldout_loss": 3.0, "step_time_s": 0.1, "train_loss": 3.1} for a in arms],
        name="x",
        run_id=run_id,
    )
    assert body["run_id"] == run_id and {a["name"] for a in body["arms"]} == set(by_name)
    assert body["setup"]["same_as.bf16"] == "frontier_0"


@SQLITE_ONLY
def test_the_cli_re_solves_draws_and_verifies(
    client: TestClient, project: str, api: PolicyClient, tmp_path: Path
) -> None:
    run_id = upload_sensitivity_run(client, project, name="cli")
    run = CliRunner()
    result = run.invoke(cli, ["recommend", str(run_id), "--target", "speedup:1.6"], obj=api)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["target"]["spec"] == "speedup:1.6"
    table = run.invoke(cli, ["frontier", str(run_id)], obj=api)
    assert table.exit_code == 0 and "rule last_15pct" in table.stdout and "chosen (recommendation)" in table.stdout
    png = tmp_path / "frontier.png"
    drawn = run.invoke(cli, ["frontier", str(run_id), "-o", str(png), "--target", "risk:0.001"], obj=api)
    assert drawn.exit_code == 0, drawn.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = run.invoke(cli, ["recommend", str(run_id), "--target", "fast"], obj=api)
    assert bad.exit_code == 2 and "InvalidTarget" in bad.stderr

    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    verified = run.invoke(cli, ["verify", str(run_id), "--spec", str(spec), "--json"], obj=api)
    assert verified.exit_code == 0, verified.output
    experiment = json.loads(verified.stdout)
    kinds = {arm["kind"] for arm in experiment["arms"]}
    assert {"bf16", "all_low", "rule", "recommended"} <= kinds
    assert all(arm["steps"] == 2 for arm in experiment["arms"])
    assert experiment["verification"]["status"] in ("confirmed", "contradicted")
    assert api.experiments(run_id)[0]["id"] == experiment["id"]


@SQLITE_ONLY
def test_verify_with_replicates_posts_them_and_prints_the_noise_bound(
    client: TestClient, project: str, api: PolicyClient, tmp_path: Path
) -> None:
    run_id = upload_sensitivity_run(client, project, name="cli-replicates")
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    run = CliRunner()
    refused = run.invoke(cli, ["verify", str(run_id), "--spec", str(spec), "--replicates", "0"], obj=api)
    assert refused.exit_code == 2 and "--replicates" in refused.output
    verified = run.invoke(
        cli, ["verify", str(run_id), "--spec", str(spec), "--replicates", "2", "--seed", "4"], obj=api
    )
    assert verified.exit_code == 0, verified.output
    assert "noise: 2 replicates, one-sided 95 % bound ±" in verified.stdout, verified.stdout
    assert "(SE over 2 replicates)" in verified.stdout
    experiment = api.experiments(run_id)[0]
    assert experiment["name"] == "spec.py seeds 4-5" and experiment["seeds"] == [4, 5]
    assert all(len(arm["heldout_losses"]) == 2 for arm in experiment["arms"])
    assert experiment["verification"]["replicates"] == 2
    assert experiment["verification"]["status"] in ("confirmed", "contradicted")
