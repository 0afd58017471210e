"""One ladder everywhere: every rendering and both apply paths run each layer at the ladder's rung.

A property over generated TE 2.20-style runs (policy/recommend/ladder.py): training recipe (current, delayed, MXFP8,
NVFP4) and GPU (Hopper, Blackwell) drawn, FP8 / NVFP4 / MXFP8 levels failing on random layers and tensors, and
layers that ran in BF16 (the head, sometimes a whole block) with or without an nvfp4_ what-if of their own. Per run:

* the ladder's BF16 rungs are the JSON's whole-layer BF16 set (`fp8_skip_layers` + `kept_bf16`), except a `bf16`
  rung the recommendation states it does not apply yet (`precision.unapplied_bf16`, said in every file header);
* a layer that ran in BF16 is BF16 everywhere unless the ladder gives it a cheaper rung on evidence;
* te-yaml (nvdlfw_inspect's ConfigManager): Disable*Layer on exactly that set, Disable*GEMM on exactly the
  GEMM overrides; torchao (the snippet executed): exactly that set plus overridden modules kept;
  Megatron (the script run by bash, its precision config read by tests/policy/render/megatron_loader.py): every
  transformer-block module at its rung; Hydra: every block holding one of them out of `fp8_layers`;
* `apply_policy(backend="te")` (the TE stand-in records the recipe each module ran under) runs every module at its
  rung; `apply_policy(backend="torchao")` keeps exactly that set as nn.Linear, MXFP8 rungs on torchao's MXFP8, the rest
  Float8Linear;
* the compare page's per-layer precision is the same.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torchao.float8 import Float8LinearConfig
from torchao.float8.float8_linear import Float8Linear

from bench.eval_ingest import parse_tree
from bench.te_config_manager import TeConfigManager
from fp8_policy.client.apply import apply_policy, recipe_from_policy
from fp8_policy.client.apply.plan import RECIPE_CLASSES
from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.compare.runs import RunVerdict
from fp8_policy.policy.recommend import RecommendOptions, recommend
from fp8_policy.policy.records import PRECISIONS, LayerGroup, LayerInfo, MetricName, Precision, RunData, Series
from fp8_policy.policy.render import FORMATS, RenderOptions, render
from fp8_policy.policy.render.layout import is_one_based, layer_index, module_index, torch_fqn
from fp8_policy.policy.render.megatron import megatron_path
from fp8_policy.policy.render.precision import effective_rung, unapplied_bf16, whole_bf16_layers
from tests.client.apply import fake_te
from tests.policy.frontier_runs import SUBS, frontier_run, layer_name, noisy
from tests.policy.render import megatron_loader as loader
from tests.support.archives import ESM2
from tests.support.fuzz import fuzz

HEAD = "model.module.output_layer"
WIDTH = 32  # every Linear 32x32: torchao's multiple-of-16 rule holds and the forward chains
LAYER_OFF = {"DisableFP8Layer", "DisableQuantizationLayer"}
GEMM_OFF = {"DisableFP8GEMM", "DisableQuantizationGEMM"}
TRAINING = ("current", "delayed", "mxfp8", "NVFP4BlockScaling")
EMULATE = Float8LinearConfig(emulate=True)


# ------------------------------------------------------------------------------------------------ generated runs
@st.composite
def ladder_runs(draw: st.DrawFn) -> RunData:
    training = draw(st.sampled_from(TRAINING))
    nvfp4 = training == "NVFP4BlockScaling"
    gpu = "B200" if training in ("mxfp8", "NVFP4BlockScaling") else draw(st.sampled_from(["B200", "H100"]))
    whatifs = draw(st.sets(st.sampled_from(["nvfp4_underflows%", "mxfp8_underflows%"])))
    keys = ("nvfp4_underflows%",) if nvfp4 else ("underflows%", *sorted(whatifs))
    n_blocks = draw(st.integers(2, 4))
    layers = [layer_name(b, sub) for b in range(n_blocks) for sub in SUBS]
    tensors = ("activation", "gradient", "weight")
    pairs = st.tuples(st.sampled_from(layers), st.sampled_from(tensors))
    fp8_fail = draw(st.sets(pairs, max_size=3))
    nv_fail = draw(st.sets(pairs, max_size=4))
    mx_fail = draw(st.sets(pairs, max_size=2))
    bf16_block = draw(st.one_of(st.none(), st.integers(0, n_blocks - 1)))

    def values(layer: str, block: int, sub: str, tensor: str, key: str, rng: np.random.Generator) -> Any:
        if block == bf16_block and key == "underflows%":
            return None  # ran in BF16: no training stats of its own
        if key == "underflows%":
            return noisy(3.5 if (layer, tensor) in fp8_fail else 0.1, rng)
        if key == "mxfp8_underflows%":
            return noisy(3.0 if (layer, tensor) in mx_fail else 0.05, rng)
        if (layer, tensor) in nv_fail:
            return noisy(24.0 if tensor != "weight" else 40.0, rng)
        return noisy(10.0 if tensor == "weight" else 7.0, rng)

    meta = {"fp8_recipe" if nvfp4 else "recipe": training, "gpu": gpu}
    run = frontier_run(values, keys, n_blocks=n_blocks, metadata=meta, seed=draw(st.integers(0, 20)))
    if bf16_block is not None and not nvfp4:
        ran = {layer_name(bf16_block, sub) for sub in SUBS}
        run.layers.update({n: replace(i, precision=Precision.HIGH) for n, i in run.layers.items() if n in ran})
    return _with_head(run, draw(st.sampled_from(["none", "bf16", "bf16_whatif"])))


def _with_head(run: RunData, head: str) -> RunData:
    """A head that ran in BF16 (as bionemo's LM head), with or without an nvfp4_ what-if of its own."""
    if head == "none":
        return run
    from fp8_policy.policy.names import layer_structure

    series = list(run.series)
    if head == "bf16_whatif":
        iterations = series[0].iterations
        for tensor in ("activation", "gradient", "weight"):
            metric = MetricName(HEAD, tensor, "underflows%", "nvfp4")
            series.append(Series(0, metric, iterations, np.full(iterations.size, 5.0)))
    layers = {**run.layers, HEAD: LayerInfo(HEAD, layer_structure(HEAD), Precision.HIGH, head == "bf16_whatif")}
    return RunData(layers=layers, series=series, metadata=run.metadata)


# ------------------------------------------------------------------------------------------------ models
class _Block(nn.Module):
    def __init__(self, linear: type[nn.Linear]) -> None:
        super().__init__()
        self.self_attention = nn.Module()
        self.self_attention.linear_qkv = linear(WIDTH, WIDTH)
        self.self_attention.linear_proj = linear(WIDTH, WIDTH)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = linear(WIDTH, WIDTH)
        self.mlp.linear_fc2 = linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in (self.self_attention.linear_qkv, self.self_attention.linear_proj):
            x = module(x)
        return self.mlp.linear_fc2(self.mlp.linear_fc1(x))


class MegatronShaped(nn.Module):
    """`decoder.layers.N.{self_attention.linear_qkv,...}` and `output_layer`: the logged names less `model.module.`."""

    def __init__(self, n_blocks: int, linear: type[nn.Linear] = nn.Linear) -> None:
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(_Block(linear) for _ in range(n_blocks))
        self.output_layer = linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.decoder.layers:
            x = block(x)
        return self.output_layer(x)


# ------------------------------------------------------------------------------------------------ the property
def expected(rec_json: dict, decision: Any) -> tuple[dict[str, str], set[str], dict[str, tuple[str, ...]]]:
    """(layer -> the precision it must run at, whole-BF16 layers, GEMM overrides) from the ladder and the JSON."""
    rungs = {n: r["precision"] for n, r in rec_json["precision_ladder"]["layers"].items()}
    outer = rec_json["recipe"]["name"]
    whole = set(rec_json["fp8_skip_layers"]) | set(rec_json["kept_bf16"])
    overrides = {o["layer"]: tuple(o["gemms"]) for o in rec_json["gemm_overrides"] if o["layer"] not in whole}
    unapplied = set(unapplied_bf16(decision))
    assert whole == set(whole_bf16_layers(decision))
    assert {n for n, r in rungs.items() if r == "bf16"} == (whole & set(rungs)) | unapplied, "ladder vs BF16 set"
    ran = {layer.name for layer in decision.layers if layer.precision is Precision.HIGH}
    for name in ran:  # BF16 everywhere unless evidence gives it a cheaper rung
        assert name in whole or rungs.get(name, "bf16") != "bf16", name
    runs_at = {}
    for layer in decision.layers:
        name = layer.name
        if name in whole or name in overrides:
            runs_at[name] = "bf16"
        else:
            rung = rungs.get(name, outer)
            runs_at[name] = outer if rung == "bf16" else effective_rung(rung, outer)
    return runs_at, whole, overrides


def assert_one_ladder(run: RunData, tmp_path: Path) -> None:
    rec = recommend(run, analyze(run), RecommendOptions.from_metadata(run.metadata))
    body = json.loads(json.dumps(rec.to_dict()))
    decision = rec.decision
    runs_at, whole, overrides = expected(body, decision)
    outer = decision.recipe.name
    _headline(body, runs_at, overrides)
    _formats_section(body, whole, overrides)
    _te_yaml(decision, whole, overrides, tmp_path)
    _torchao_snippet(decision, whole, overrides)
    _hydra(decision, whole, overrides)
    if all(layer.name.startswith("model.module.") for layer in decision.layers):
        _megatron(decision, runs_at, tmp_path)
        _apply_te(body, decision, runs_at, outer)
        _apply_torchao(body, decision, runs_at, outer)
    _compare(body, decision, runs_at, overrides)
    if unapplied_bf16(decision):  # a ladder bf16 rung not applied yet is said in every file
        for fmt in FORMATS:
            assert "NOT applied" in render(decision, fmt).content, fmt


def _headline(body: dict, runs_at: dict[str, str], overrides: dict[str, tuple[str, ...]]) -> None:
    """The record the cards, the layer table, the heatmap marks and the runs list read tells the same story (a layer
    with GEMM overrides keeps its rung there; the apply paths run it whole in BF16, a stated approximation)."""
    head = body["headline"]
    by_layer = head["precision_by_layer"]
    assert {n: p for n, p in by_layer.items() if n not in overrides} == {
        n: p for n, p in runs_at.items() if n not in overrides
    }
    assert all(by_layer[n] != "bf16" for n in overrides) and set(by_layer) == set(runs_at)
    assert head["precision_mix"] == {p: n for p in PRECISIONS if (n := list(by_layer.values()).count(p))}
    assert head["recipe"] == body["recipe"]["name"]
    assert head["gemm_speedup_vs_all_bf16"] == body["expected_cost"]["gemm_speedup_vs_all_bf16"]
    assert (head["to_bf16"], head["kept_bf16"]) == (len(body["fp8_skip_layers"]), len(body["kept_bf16"]))
    moved = head["to_bf16"] + head["kept_bf16"]
    assert head["precision_mix"].get("bf16", 0) == moved
    assert ("no layer moves to BF16" in head["text"]) is (moved == 0)


def _formats_section(body: dict, whole: set[str], overrides: dict[str, tuple[str, ...]]) -> None:
    for fmt, applied in body["formats"].items():
        kept = set(applied["bf16_layers"])
        assert kept >= whole - set(applied["not_applied"]), fmt
        if applied["exact"]:
            assert kept == whole, fmt
            assert {g["layer"]: tuple(g["gemms"]) for g in applied["bf16_gemms"]} == overrides, fmt
        else:
            assert applied["approximation"], fmt


def _te_yaml(decision: Any, whole: set[str], overrides: dict[str, tuple[str, ...]], tmp_path: Path) -> None:
    with TeConfigManager(tmp_path) as manager:
        config = manager.load(render(decision, "te-yaml", RenderOptions()).content)
        for layer in decision.layers:
            features = config.get_config_for_layer(layer.name)["transformer_engine"]
            assert bool(LAYER_OFF & set(features)) is (layer.name in whole), layer.name
            gemms = [tuple(features[f]["gemms"]) for f in GEMM_OFF & set(features)]
            assert gemms == ([overrides[layer.name]] if layer.name in overrides else []), layer.name
            if layer.name in whole and layer.precision is Precision.HIGH:
                assert "LogFp8TensorStats" not in features and "LogNvfp4TensorStats" not in features


def _torchao_snippet(decision: Any, whole: set[str], overrides: dict[str, tuple[str, ...]]) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(render(decision, "torchao").content, "torchao_fp8_filter.py", "exec"), namespace)  # noqa: S102
    keep, linear = namespace["module_filter_fn"], nn.Linear(2, 2)
    index, one_based = layer_index(decision), is_one_based(decision)
    kept = {
        layer.name for layer in decision.layers if not keep(linear, torch_fqn(layer.name, index[layer.name], one_based))
    }
    assert kept == whole | set(overrides)


def _hydra(decision: Any, whole: set[str], overrides: dict[str, tuple[str, ...]]) -> None:
    text = render(decision, "hydra").content
    line = next((x for x in text.splitlines() if x.startswith("'fp8_layers=")), None)
    listed = set(json.loads(line.split("=", 1)[1].rstrip("'"))) if line else set()
    one_based = is_one_based(decision)
    for layer in decision.layers:
        s = layer.structure
        if s.group is LayerGroup.BODY and s.index is not None and (layer.name in whole or layer.name in overrides):
            assert module_index(s.index, one_based) + 1 not in listed, layer.name  # fp8_layers: 1-based blocks


def _megatron(decision: Any, runs_at: dict[str, str], tmp_path: Path) -> None:
    from tests.policy.render.test_megatron import run_script

    n_blocks = len({layer.structure.index for layer in decision.layers if layer.structure.group is LayerGroup.BODY})
    _, args, config = run_script(decision, tmp_path)
    megatron_outer = decision.recipe.name
    if "--fp8-recipe" in args and args[args.index("--fp8-recipe") + 1] == "tensorwise":
        megatron_outer = "current"  # delayed becomes tensorwise on the Megatron path (megatron.py, stated)
    got = loader.precisions(config, n_blocks, megatron_outer) if config else {}
    if not config:
        got = dict.fromkeys(loader.gpt_te_module_paths(n_blocks), megatron_outer)
    if "--first-last-layers-bf16" in args:
        start = int(args[args.index("--num-layers-at-start-in-bf16") + 1])
        end = int(args[args.index("--num-layers-at-end-in-bf16") + 1])
        edge = [*range(start), *range(n_blocks - end, n_blocks)]
        got.update({p: "bf16" for p in got for i in edge if p.startswith(f"decoder.layers.{i}.")})
    for layer in decision.layers:
        if layer.structure.group is LayerGroup.BODY:
            want = runs_at[layer.name]
            want = megatron_outer if want == decision.recipe.name else want
            assert got[megatron_path(layer, False)] == want, layer.name


def _apply_te(body: dict, decision: Any, runs_at: dict[str, str], outer: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        te = fake_te.install(patch, "2.9")
        model = MegatronShaped(_blocks(decision), fake_te.Linear)
        apply_policy(model, body, backend="te")
        outer_recipe = recipe_from_policy(body)
        with te.autocast(enabled=True, recipe=outer_recipe):
            model(torch.zeros(2, WIDTH))
        for layer in decision.layers:
            module = model.get_submodule(torch_fqn(layer.name, layer_index(decision)[layer.name], False))
            want = runs_at[layer.name]
            if want == "bf16":
                assert module.fp8_seen is False, layer.name
            elif want == outer:
                assert module.recipe_seen is outer_recipe, layer.name
            else:
                assert type(module.recipe_seen).__name__ == RECIPE_CLASSES[want], (layer.name, want)


def _apply_torchao(body: dict, decision: Any, runs_at: dict[str, str], outer: str) -> None:
    model = MegatronShaped(_blocks(decision))
    report = apply_policy(model, body, backend="torchao", config=EMULATE)
    mxfp8 = {fqn for fqn, rung in report.precision_wrapped.items() if rung == "mxfp8"}
    for layer in decision.layers:
        fqn = torch_fqn(layer.name, layer_index(decision)[layer.name], False)
        module, want = model.get_submodule(fqn), runs_at[layer.name]
        if want == "bf16":
            assert type(module) is nn.Linear, layer.name
        elif want == "mxfp8" and outer != "mxfp8":
            assert fqn in mxfp8, layer.name
        else:  # the outer recipe, or a rung torchao runs as float8 (stated in the report's warnings)
            assert isinstance(module, Float8Linear), layer.name


def _compare(body: dict, decision: Any, runs_at: dict[str, str], overrides: dict[str, tuple[str, ...]]) -> None:
    analysis = {
        "findings": [],
        "layers": [
            {
                "name": layer.name,
                "group": layer.structure.group.value,
                "index": layer.structure.index,
                "sublayer": layer.structure.sublayer,
                "status": "bf16" if layer.precision is Precision.HIGH else "fp8",
            }
            for layer in decision.layers
        ],
    }
    verdict = RunVerdict.from_json(1, "x", analysis, body)
    for layer in verdict.layers:
        got, gemms = verdict.precision(layer)
        if layer.name in overrides:
            assert gemms == overrides[layer.name], layer.name
        else:
            assert got == runs_at[layer.name], layer.name


def _blocks(decision: Any) -> int:
    return len({layer.structure.index for layer in decision.layers if layer.structure.group is LayerGroup.BODY})


# ------------------------------------------------------------------------------------------------ the tests
@fuzz(20)
@given(run=ladder_runs())
def test_every_rendering_and_both_apply_paths_run_each_layer_at_its_ladder_rung(run: RunData, tmp_path_factory) -> None:
    assert_one_ladder(run, tmp_path_factory.mktemp("ladder"))


def test_the_esm2_heads_that_ran_in_bf16_stay_bf16_in_every_format(tmp_path: Path) -> None:
    """The real bionemo ESM-2 log: its LM head ran in BF16; torchao used to convert it to Float8Linear."""
    run = parse_tree(ESM2)
    rec = recommend(run, analyze(run), RecommendOptions.from_metadata(run.metadata))
    body = rec.to_dict()
    assert body["kept_bf16"] == ["model.lm_head.decoder", "model.lm_head.dense"]
    assert_one_ladder(run, tmp_path)
    snippet = render(rec.decision, "torchao").content
    assert "'lm_head.decoder',  # ran in BF16 in the analysed run" in snippet


@pytest.mark.parametrize("text", ["speedup:1.6", "risk:0.001"])
def test_a_targeted_answer_tells_one_story_in_every_view(text: str, tmp_path: Path) -> None:
    """A budget re-solved on the frontier (recommend/target.py) changes rungs and the skip list: the headline, the one
    cost, every format and both apply paths follow it, as they follow an untargeted answer."""
    from fp8_policy.policy.recommend.target import parse_target, retarget
    from tests.policy.recommend.test_sensitivity_ladder import nvfp4_run

    run = nvfp4_run()
    rec = recommend(run, analyze(run), RecommendOptions.from_metadata(run.metadata))
    assert rec.context is not None
    solved = retarget(rec, rec.context, parse_target(text))
    body = json.loads(json.dumps(solved.to_dict()))
    assert body["target"]["layers_changed"], "the budget should move some layer off the recommendation"
    assert body["headline"] != rec.to_dict()["headline"]
    speedup = body["expected_cost"]["gemm_speedup_vs_all_bf16"]
    assert body["headline"]["gemm_speedup_vs_all_bf16"] == speedup == body["target"]["speedup"]
    runs_at, whole, overrides = expected(body, solved.decision)
    _headline(body, runs_at, overrides)
    _formats_section(body, whole, overrides)
    _te_yaml(solved.decision, whole, overrides, tmp_path)
    _torchao_snippet(solved.decision, whole, overrides)
    _compare(body, solved.decision, runs_at, overrides)
