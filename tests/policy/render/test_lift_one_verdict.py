"""One verdict for layers failing NVFP4 (recommend/ladder.py, the lift rule): the precision the ladder gives each
layer is what the rendered outputs run it at: Megatron's precision config as Megatron loads it
(tests/policy/render/megatron_loader.py), the TE debug YAML as nvdlfw_inspect's ConfigManager reads it, and the
JSON's per-format BF16 sets; a hand-edited decision that breaks the pairing is what `disagreements` reports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fp8_policy.policy.render import RenderOptions, render
from fp8_policy.policy.render.layout import is_one_based
from fp8_policy.policy.render.megatron import megatron_path
from fp8_policy.policy.render.precision import disagreements
from tests.policy.recommend.test_ladder import ladder, nvfp4_block7_failing
from tests.policy.render import megatron_loader as loader
from tests.policy.render.test_megatron import run_script
from tests.policy.render.test_te_yaml import features

N_BLOCKS = 8
CASES = {"lifted": {}, "nan_not_lifted": {"nan": True}, "mxfp8_whatif_fails": {"mxfp8": 3.0}}


def rungs_of(data: dict) -> dict[str, str]:
    return {name: rung["precision"] for name, rung in data["precision_ladder"]["layers"].items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_megatron_runs_every_layer_at_its_ladder_rung(case, tmp_path):
    rec, data = ladder(nvfp4_block7_failing(**CASES[case]))
    rungs = rungs_of(data)
    _, args, config = run_script(rec.decision, tmp_path)
    assert args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    got = (
        loader.precisions(config, N_BLOCKS, "nvfp4")
        if config
        else dict.fromkeys(loader.gpt_te_module_paths(N_BLOCKS), "nvfp4")
    )
    if "--first-last-layers-bf16" in args:  # Megatron: layer_no < start or >= num_layers - end runs in BF16
        start = int(args[args.index("--num-layers-at-start-in-bf16") + 1])
        end = int(args[args.index("--num-layers-at-end-in-bf16") + 1])
        edge = [*range(start), *range(N_BLOCKS - end, N_BLOCKS)]
        got.update({p: "bf16" for p in got for i in edge if p.startswith(f"decoder.layers.{i}.")})
    one_based = is_one_based(rec.decision)
    assert got == {megatron_path(layer, one_based): rungs[layer.name] for layer in rec.decision.layers}


@pytest.mark.parametrize("case", sorted(CASES))
def test_te_yaml_and_every_format_keep_exactly_the_ladder_bf16_layers(case, nvdlfw_config):
    rec, data = ladder(nvfp4_block7_failing(**CASES[case]))
    bf16 = {name for name, rung in rungs_of(data).items() if rung == "bf16"}
    manager = nvdlfw_config(render(rec.decision, "te-yaml", RenderOptions()).content)
    disabled = {
        name
        for name in rungs_of(data)
        if {"DisableFP8Layer", "DisableQuantizationLayer"} & set(features(manager, name))
    }
    assert disabled == bf16
    # a format that cannot say it exactly keeps at least the BF16 set and says so (widening it, or mapping names
    # approximately: torchtitan's fused fc1 -> w1 + w3)
    for fmt, applied in data["formats"].items():
        if applied["exact"]:
            assert set(applied["bf16_layers"]) == bf16, fmt
        else:
            assert set(applied["bf16_layers"]) >= bf16 and applied["approximation"], fmt
            widened = set(applied["bf16_layers"]) > bf16
            assert widened or fmt == "torchtitan", fmt
    if case == "lifted":
        assert not bf16 and "mxfp8" in rungs_of(data).values()


def test_disagreements_name_a_skipped_layer_whose_rung_is_not_bf16():
    rec, data = ladder(nvfp4_block7_failing())
    assert rec.ladder is not None
    lifted = rec.ladder.lifted[0]
    assert disagreements(rec.decision) == {}
    edited = replace(rec.decision, skip_layers=(lifted,))
    assert disagreements(edited) == {lifted: ("mxfp8", "bf16")}
