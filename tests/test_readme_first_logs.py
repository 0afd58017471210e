"""The README's "Your first logs" snippets, each run: the TE feature YAML loaded by nvdlfw_inspect's own ConfigManager
(with TE's feature names: TE needs CUDA), the TE / NeMo Python compiled and checked against nvdlfw_inspect's API,
the Megatron / bionemo command lines through `bash -n` with their flags and overrides as documented, and the CPU
collector's snippet run as written, its logs uploaded with the documented command to a service and analysed.
Also the collector's other documented calls: `recipe="nvfp4"` without `stats`, `recipe="delayed"` logging
`overflows%`, and a what-if-only run reported as trained in BF16."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.eval_ingest import parse_tree
from bench.te_config_manager import TeConfigManager
from fp8_policy.collect import FP8StatsCollector
from fp8_policy.policy.recommend import recommend

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- first-logs: (\S+) -->\n```(\w+)\n(.*?)\n```", re.S)


def snippets() -> dict[str, tuple[str, str]]:
    """name -> (language, code) of every marked block of the README's first-logs section."""
    found = {m[1]: (m[2], m[3]) for m in BLOCK.finditer((ROOT / "README.md").read_text())}
    assert set(found) == {"te-yaml", "te-python", "megatron", "nemo", "bionemo", "collector", "upload"}, found
    return found


def test_the_te_feature_yaml_loads_in_nvdlfw_inspect_and_watches_every_layer(tmp_path: Path) -> None:
    language, text = snippets()["te-yaml"]
    assert language == "yaml"
    with TeConfigManager(tmp_path) as manager:
        config = manager.load(text)
        for layer in ("model.decoder.layers.0.mlp.linear_fc1", "model.lm_head"):
            feature = config.get_config_for_layer(layer)["transformer_engine"]["LogFp8TensorStats"]
            assert feature["stats"] == ["underflows%", "scale_inv_min", "scale_inv_max", "mse"]
            assert feature["tensors"] == ["activation", "gradient", "weight"] and feature["freq"] == 10


def test_the_te_python_uses_nvdlfw_inspects_api_in_order() -> None:
    import nvdlfw_inspect.api as debug_api

    language, code = snippets()["te-python"]
    tree = ast.parse(code)
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and getattr(node.func.value, "id", "") == "debug_api"
    ]
    calls = [node.func.attr for node in sorted(found, key=lambda n: n.lineno)]  # type: ignore[attr-defined]
    assert language == "python" and calls == ["initialize", "infer_and_assign_layer_names", "step", "end_debug"]
    for name in calls:
        assert callable(getattr(debug_api, name)), name
    initialize = next(
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "initialize"
    )
    assert {k.arg for k in initialize.keywords} == {"config_file", "feature_dirs", "log_dir"}


@pytest.mark.parametrize("name", ["megatron", "bionemo", "upload"])
def test_the_command_lines_are_valid_shell(name: str) -> None:
    language, text = snippets()[name]
    assert language == "sh"
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False).returncode == 0
    words = shlex.split(text.replace("\\\n", " "))
    if name == "megatron":  # Megatron-LM's four tensor-inspection flags (docs/user-guide/features/tensor_inspect.md)
        assert {"--tensor-inspect", "--tensor-inspect-features", "--tensor-inspect-log-dir"} <= set(words)
        assert words[words.index("--tensor-inspect-features") + 1] == "fp8_stats.yaml"
    if name == "bionemo":  # bionemo-recipes' Hydra keys (initialize_fp8_debugging's arguments)
        keys = dict(w.split("=", 1) for w in words if "=" in w)
        assert keys == {
            "fp8_config.enabled": "true",
            "fp8_stats_config.enabled": "true",
            "fp8_stats_config.fp8_stats_file": "fp8_stats.yaml",
            "fp8_stats_config.fp8_log_dir": "fp8_log_dir",
        }


def test_the_nemo_config_names_megatron_bridges_fields() -> None:
    language, code = snippets()["nemo"]
    call = next(n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call))
    assert language == "python" and getattr(call.func, "id", "") == "TensorInspectConfig"
    assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == {
        "enabled": True,
        "features": "fp8_stats.yaml",
        "log_dir": "fp8_log_dir",
    }


def test_the_collector_snippet_runs_as_written_and_its_upload_is_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run where a user would (its own working directory), then `fp8-policy upload` exactly as documented, against a
    service on loopback."""
    from click.testing import CliRunner

    from fp8_policy.client.cli import cli
    from fp8_policy.db.migrate import upgrade
    from fp8_policy.service.settings import Settings
    from tests.support.uvicorn_app import plain_config, serving

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    torch.manual_seed(0)
    exec(compile(snippets()["collector"][1], "README.md", "exec"), {"__name__": "readme"})  # noqa: S102
    logs = work / "fp8_log_dir" / "rank_0" / "nvdlfw_inspect_statistics_logs"
    text = next(logs.glob("*.log")).read_text()
    assert "_overflows%" in text and "_underflows%" in text  # delayed scaling logs overflows%
    command = shlex.split(snippets()["upload"][1])
    assert command[:3] == ["fp8-policy", "upload", "fp8_log_dir"]
    url = f"sqlite:///{tmp_path / 'service.db'}"
    upgrade(url)
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", database_url=url, load_demo=False)
    with serving(plain_config(settings)) as port:
        base = f"http://127.0.0.1:{port}"
        result = CliRunner().invoke(cli, [*command[1:], "--json"], env={"FP8_POLICY_URL": base})
        assert result.exit_code == 0, result.output
        import json

        import httpx

        run = json.loads(result.stdout)
        assert run["status"] == "ready", run
        with httpx.Client(base_url=base) as http:
            analysis = http.get(f"/api/v1/runs/{run['id']}/analysis").json()
            rec = http.get(f"/api/v1/runs/{run['id']}/recommendation").json()
    assert analysis["training_recipe"]["recipe"] == "delayed"
    assert rec["recipe"]["current"] == "delayed" and rec["headline"]["precision_mix"]


class Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _train(tmp_path: Path, **options: object) -> Path:
    torch.manual_seed(0)
    model = Pair()
    with FP8StatsCollector(model, tmp_path, **options) as collector:  # type: ignore[arg-type]
        for _ in range(6):
            model(torch.randn(64, 32)).square().mean().backward()
            model.zero_grad()
            collector.step()
    return tmp_path


def test_the_documented_nvfp4_call_runs_without_stats_and_logs_nvfp4s() -> None:
    with pytest.raises(ValueError, match="LogFp8TensorStats' bare stats raise"):  # what used to happen by default
        FP8StatsCollector(Pair(), "unused", recipe="nvfp4", stats=["underflows%"])


def test_nvfp4_default_stats(tmp_path: Path) -> None:
    text = next((_train(tmp_path, recipe="nvfp4") / "rank_0" / "nvdlfw_inspect_statistics_logs").glob("*.log"))
    names = {line.split(" - INFO - ")[1].split()[0] for line in text.read_text().splitlines()}
    assert {name.split("_", 2)[-1] for name in names} == {"nvfp4_underflows%", "nvfp4_mse"}, names
    assert "nvfp4_underflows%" in text.read_text() and "scale_inv" not in text.read_text()


def test_a_whatif_only_run_is_reported_as_trained_in_bf16(tmp_path: Path) -> None:
    run = parse_tree(_train(tmp_path, stats=["mxfp8_underflows%", "fp8_block_scaling_underflows%"]))
    body = recommend(run).to_dict()
    assert body["recipe"]["current"] == "bf16" and body["recipe"]["changed_from"] == "bf16"


def test_the_readme_snippets_need_no_network() -> None:
    """Nothing in the section downloads: the collector snippet builds its model and data in memory."""
    code = snippets()["collector"][1]
    assert "http" not in code and "download" not in code and os.sep not in code.replace("/", "")
    assert sys.modules.get("fp8_policy.collect") is not None


def test_the_readme_ci_upload_step_fails_when_the_upload_fails(tmp_path: Path) -> None:
    """It wrote `run_id=` and exited 0 when the service was down (`echo "run_id=$(... | jq -r .id)"`). Run as GitHub
    Actions runs a `run:` script (`bash -e {0}`), with an `fp8-policy` that fails and one that succeeds."""
    import shutil

    import yaml

    if shutil.which("jq") is None:
        pytest.skip("jq (the README's CI step uses it) is not installed")
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- ci-upload -->\n```yaml\n(.*?)\n```", text, re.S)
    assert block is not None
    script = yaml.safe_load(block[1])[0]["run"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "fp8-policy"
    for upload_ok, expected in ((False, ""), (True, "run_id=7\n")):
        fake.write_text(
            "#!/bin/sh\n" + ("echo '{\"id\": 7}'\n" if upload_ok else "echo 'error: unreachable' >&2; exit 2\n")
        )
        fake.chmod(0o755)
        output = tmp_path / "github_output"
        output.write_text("")
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(output), "LOG_DIR": "x"}
        done = subprocess.run(["bash", "-e", "-c", script], env=env, cwd=tmp_path, capture_output=True, check=False)
        assert (done.returncode == 0) is upload_ok, done.stderr
        assert output.read_text() == expected
