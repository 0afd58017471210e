"""MoE experts logged by TE's GroupedLinear as `...mlp.experts.linear_fc2.gemm_<i>`: the TE YAML acts per expert;
Megatron's precision config and torchao reach only the whole grouped module (never a path that is no module), each
stating the experts it takes along. Logs written by the synthetic generator in Megatron-Core's naming (TEGroupedMLP)
and read back by the upload path's parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.eval_ingest import parse_tree
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.render import applied_by_format, render
from fp8_policy.policy.render.regex import exact
from fp8_policy.policy.synthetic import Rule, Scenario, SyntheticRun, level, named, write_run
from tests.policy.render.megatron_loader import RecipeConfig
from tests.policy.render.test_megatron import run_script

BAD = "model.module.decoder.layers.5.mlp.experts.linear_fc2.gemm_5"
MODULE = "model.module.decoder.layers.5.mlp.experts.linear_fc2"


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    rules = tuple(Rule(named(BAD), level(3.5), tensor, "underflows%") for tensor in ("activation", "gradient"))
    run = SyntheticRun(family="megatron_moe", num_layers=8, iterations=200, profile=Scenario(rules=rules))
    root = tmp_path_factory.mktemp("moe")
    write_run(run, root)
    data = parse_tree(root)
    data.metadata.update({"recipe": "Float8CurrentScaling", "gpu": "H100"})
    return recommend(data, options=RecommendOptions.from_metadata(data.metadata))


def test_the_failing_expert_alone_is_skipped(moe) -> None:
    assert moe.decision.skip_layers == (BAD,)


def test_te_yaml_disables_that_expert_gemm_alone(moe) -> None:
    text = render(moe.decision, "te-yaml").content
    assert exact([BAD]) in text  # DisableQuantizationLayer on `...gemm_5`: TE runs that expert's GEMM in BF16
    assert applied_by_format(moe.decision)["te-yaml"]["exact"] is True


def test_megatron_reaches_the_grouped_module_and_names_the_experts_it_takes_along(moe, tmp_path: Path) -> None:
    text, _args, path = run_script(moe.decision, tmp_path)
    assert path is not None
    config = RecipeConfig.from_yaml_file(path)
    assert config.matchers and not any("gemm_" in pattern for pattern, _ in config.matchers)
    matched = config.match("decoder.layers.4.mlp.experts.linear_fc2")  # TE layer_number 5 -> module index 4
    assert matched is not None and matched.precision == "bf16"
    assert config.match("decoder.layers.4.mlp.experts.linear_fc1") is None
    assert config.match("decoder.layers.3.mlp.experts.linear_fc2") is None
    formats = applied_by_format(moe.decision)["megatron"]
    siblings = {f"{MODULE}.gemm_{e}" for e in range(8)}
    assert siblings <= set(formats["bf16_layers"])
    assert set(formats["extra_bf16_layers"]) == siblings - {BAD} | {"model.module.output_layer"}  # head: BF16
    assert "taking 7 expert(s) along" in formats["approximation"] and MODULE in formats["approximation"]
    assert "Approximation:" in text and "taking 7 expert(s) along" in text


def test_torchao_skips_the_grouped_module_not_a_gemm_name(moe) -> None:
    text = render(moe.decision, "torchao").content
    namespace: dict[str, object] = {}
    exec(compile(text, "torchao_filter.py", "exec"), namespace)  # noqa: S102 - our own rendered snippet
    assert namespace["SKIP_FQNS"] == {"decoder.layers.4.mlp.experts.linear_fc2"}  # 0-based module index
    formats = applied_by_format(moe.decision)["torchao"]
    assert "taking 7 expert(s) along" in formats["approximation"]


def _moe_decision(rungs: dict[str, str]):
    from dataclasses import replace

    from fp8_policy.policy.names import layer_structure
    from fp8_policy.policy.records import LayerInfo, Precision
    from tests.policy.render import factory as f

    names = [
        f"model.module.decoder.layers.{b}.{sub}"
        for b in (1, 2)
        for sub in (
            "self_attention.linear_qkv",
            "self_attention.linear_proj",
            *(f"mlp.experts.linear_fc1.gemm_{e}" for e in range(4)),
            *(f"mlp.experts.linear_fc2.gemm_{e}" for e in range(4)),
        )
    ]
    layers = [LayerInfo(n, layer_structure(n), Precision.FP8, True) for n in names]
    base = f.decision(layers, recipe_choice=f.recipe("nvfp4"))
    return replace(f.with_ladder(base, {n: rungs.get(n, "nvfp4") for n in names}))


def test_an_expert_rung_runs_its_whole_grouped_module_at_the_finer_precision(tmp_path: Path) -> None:
    lifted = "model.module.decoder.layers.2.mlp.experts.linear_fc1.gemm_3"
    decision = _moe_decision({lifted: "mxfp8"})
    _text, args, path = run_script(decision, tmp_path)
    assert path is not None and args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    config = RecipeConfig.from_yaml_file(path)
    assert [pattern for pattern, _ in config.matchers] == ["decoder.layers.1.mlp.experts.linear_fc1"]
    assert config.match("decoder.layers.1.mlp.experts.linear_fc1").precision == "mxfp8"
    formats = applied_by_format(decision)["megatron"]
    assert "runs wholly at mxfp8 for expert(s) 3, taking 3 expert(s) along" in formats["approximation"]
