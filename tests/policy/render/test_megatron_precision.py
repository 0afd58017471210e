"""Megatron dialect at the precision frontier: FP4 flags, and the per-layer ladder as a `--te-precision-config-file`
loaded the way Megatron-LM loads it (tests/policy/render/megatron_loader.py re-implements the loader's checks)."""

from __future__ import annotations

import pytest

from fp8_policy.policy.render.layout import is_one_based
from fp8_policy.policy.render.megatron import megatron_path
from tests.policy.render import factory as f
from tests.policy.render import megatron_loader as loader
from tests.policy.render.test_megatron import run_script

N_BLOCKS = 4


def expected(decision, rungs: dict[str, str], bf16: set[str]) -> dict[str, str]:
    """Module path -> precision we asked for, through our own logged-name -> Megatron-path mapping."""
    one_based = is_one_based(decision)
    out = {}
    for layer in decision.layers:
        path = megatron_path(layer, one_based)
        if path.startswith("decoder.layers."):
            out[path] = "bf16" if layer.name in bf16 else rungs.get(layer.name, decision.recipe.name)
    return out


@pytest.mark.parametrize("family", ["megatron", "esm2", "llama"])
def test_nvfp4_emits_fp4_flags_and_never_fp8_flags(family, tmp_path):
    decision = f.decision(f.family_layers(family, N_BLOCKS), recipe_choice=f.recipe("nvfp4"))
    text, args, config = run_script(decision, tmp_path)
    assert args == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] and config is None
    assert "--fp8-format" not in args and "--fp8-recipe" not in args
    assert "FP4 recipe: nvfp4" in text


def test_nvfp4_with_edge_blocks_uses_first_last_flags(tmp_path):
    layers = f.family_layers("megatron", N_BLOCKS)
    decision = f.decision(layers, f.block_names("megatron", 1), recipe_choice=f.recipe("nvfp4"))
    _, args, config = run_script(decision, tmp_path)
    assert config is None
    assert args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    assert args[4:] == [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "1",
        "--num-layers-at-end-in-bf16",
        "0",
    ]


def test_mxfp8_recipe_flag(tmp_path):
    decision = f.decision(f.family_layers("megatron", 2), recipe_choice=f.recipe("mxfp8"))
    _, args, _ = run_script(decision, tmp_path)
    assert args == ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]


@pytest.mark.parametrize("family", ["megatron", "esm2", "llama", "hf"])
@pytest.mark.parametrize("outer", ["nvfp4", "mxfp8", "current"])
def test_ladder_mix_is_a_precision_config_megatron_accepts(family, outer, tmp_path):
    layers = f.family_layers(family, N_BLOCKS)
    first = 0 if family == "hf" else 1
    names = [layer.name for layer in layers if layer.structure.index is not None]
    rungs = {names[0]: "bf16", names[1]: "mxfp8", names[2]: "nvfp4", names[5]: "block", names[6]: "current"}
    rungs[names[-1]] = "mxfp8"
    skip = (*f.block_names(family, first + 2), names[0])  # a whole block and the bf16 rung (the plan's skips)
    decision = f.with_ladder(f.decision(layers, skip, recipe_choice=f.recipe(outer)), rungs)
    text, args, config = run_script(decision, tmp_path)
    assert config is not None and "--first-last-layers-bf16" not in args
    if outer == "nvfp4":
        assert args[:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] and "--fp8-format" not in args
    got = loader.precisions(config, N_BLOCKS, outer)
    assert got == expected(decision, rungs, set(skip))
    # every matcher reaches a real TE module, and none reaches another module of the model
    recipe = loader.RecipeConfig.from_yaml_file(config)
    te_paths = set(loader.gpt_te_module_paths(N_BLOCKS))
    for pattern, _ in recipe.matchers:
        hits = {p for p in loader.gpt_all_module_paths(N_BLOCKS) if loader.fnmatch.fnmatch(p, pattern)}
        assert hits and (hits <= te_paths or pattern.endswith(".*")), (pattern, hits)
    assert "precision ladder" in text


def test_ladder_rung_equal_to_the_outer_recipe_needs_no_matcher(tmp_path):
    layers = f.family_layers("megatron", N_BLOCKS)
    names = [layer.name for layer in layers]
    decision = f.with_ladder(
        f.decision(layers, recipe_choice=f.recipe("mxfp8")), {names[0]: "mxfp8", names[1]: "nvfp4"}
    )
    _, _, config = run_script(decision, tmp_path)
    recipe = loader.RecipeConfig.from_yaml_file(config)
    assert [key for _, key in recipe.matchers] == ["nvfp4"]
    assert set(recipe.configs) == {"nvfp4"}


@pytest.mark.parametrize(("outer", "runs_at"), [("current", "current"), ("mxfp8", "mxfp8"), ("nvfp4", "current")])
def test_a_delayed_rung_under_another_recipe_never_becomes_a_delayed_config(tmp_path, outer, runs_at):
    layers = f.family_layers("megatron", N_BLOCKS)
    names = [layer.name for layer in layers]
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe(outer)), {names[3]: "delayed"})
    _, _, config = run_script(decision, tmp_path)
    if config is None:  # nothing to change: the outer FP8 recipe is at least as fine as delayed scaling
        assert runs_at == outer
        return
    assert loader.precisions(config, N_BLOCKS, outer)["decoder.layers.0.mlp.linear_fc2"] == runs_at
    assert "delayed" not in config.read_text().split("matchers:")[0]


def test_a_bf16_rung_the_plan_does_not_skip_is_stated_not_applied(tmp_path):
    """The plan wins: e.g. it switches the recipe and asks for a re-run before skipping (make eval's uniform/llama)."""
    layers = f.family_layers("llama", N_BLOCKS)
    names = [layer.name for layer in layers]
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe("block")), dict.fromkeys(names, "bf16"))
    text, args, config = run_script(decision, tmp_path)
    assert config is None and args == ["--fp8-format", "e4m3", "--fp8-recipe", "blockwise"]
    assert f"NOT applied: the precision ladder finds no low-precision rung for {len(names)} layer(s)" in text


@pytest.mark.parametrize(
    ("training_recipe", "error"),
    [
        ({"fp8_quantization_recipe": "delayed"}, "Delayed scaling not in scope"),
        ({"fp8_quantization_recipe": "mxfp8", "fp4_quantization_recipe": "nvfp4"}, "mutually exclusive"),
        ({"fp8_quantization_recipe": "mxfp8", "fp8_format": "E4M3"}, "Unhandled fp8_format"),
        ({"fp4_quantization_recipe": "nvfp4", "fp4_format": "e2m1"}, "not valid for this configuration"),
    ],
)
def test_the_loader_rejects_what_megatron_rejects(training_recipe, error):
    config = {
        "configs": {
            "x": {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": training_recipe}
        },
        "matchers": {"m": {"config": "x", "type": "glob", "pattern": "*", "enabled": True}},
    }
    with pytest.raises(ValueError, match=error):
        loader.RecipeConfig(config).match("decoder.layers.0.mlp.linear_fc1")


@pytest.mark.parametrize("outer", ["nvfp4", "mxfp8", "current"])
def test_an_output_layer_rung_gets_no_matcher_and_the_script_says_it_runs_bf16(outer, tmp_path):
    """Megatron's output_layer is a plain ColumnParallelLinear (no finish_init: no precision-config matcher reaches
    it) unless fp8_output_proj, which runs it in MXFP8 under --fp8-recipe mxfp8 only: an nvfp4 rung on it cannot be
    expressed, so nothing claims it and the script says so."""
    layers = f.family_layers("megatron", N_BLOCKS)
    names = [layer.name for layer in layers if layer.structure.index is not None]
    head = "model.module.output_layer"
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe(outer)), {head: "nvfp4", names[2]: "block"})
    text, _, config = run_script(decision, tmp_path)
    assert config is not None  # the body layer's block rung still needs the file
    recipe = loader.RecipeConfig.from_yaml_file(config)
    assert all(not loader.fnmatch.fnmatch("output_layer", pattern) for pattern, _ in recipe.matchers), recipe.matchers
    assert f"# Head layer(s) {head} (nvfp4) run in BF16 under Megatron" in text, text
    assert "no FP4 (nvfp4) setting" in text
    head_only = f.with_ladder(f.decision(layers, recipe_choice=f.recipe(outer)), {head: "nvfp4"})
    text, args, config = run_script(head_only, tmp_path)
    assert config is None and "--te-precision-config-file" not in args and "run in BF16 under Megatron" in text


@pytest.mark.parametrize(("rung", "said"), [("nvfp4", "nvfp4"), (None, "current")])
def test_the_first_line_and_the_json_say_megatron_runs_the_head_in_bf16(rung, said, tmp_path):
    """One output, one verdict: Megatron runs output_layer in BF16 whatever the decision asks (a ladder rung, or the
    outer recipe), so its `applied()` (the script's first line and the JSON `formats.megatron`) lists the head as
    BF16 and calls it an approximation, never 'Applies ... exactly', and the bench reader reads the same."""
    from bench import eval_bf16
    from fp8_policy.policy.render import applied_by_format

    layers = f.family_layers("megatron", N_BLOCKS)
    head = "model.module.output_layer"
    base = f.decision(layers, f.block_names("megatron", 1), recipe_choice=f.recipe("current"))
    decision = f.with_ladder(base, {head: rung} if rung else {})
    text, _, _ = run_script(decision, tmp_path)
    claim = applied_by_format(decision)["megatron"]
    assert head in claim["bf16_layers"] and head in claim["extra_bf16_layers"] and not claim["exact"], claim
    assert f"{head} ({said})" in claim["approximation"] and "BF16" in claim["approximation"]
    assert text.splitlines()[2] == f"# Approximation: {claim['approximation']}"
    assert "Applies the recommendation exactly" not in text
    assert eval_bf16.compare("megatron", eval_bf16.megatron_applied(text, decision), decision) == []


def test_a_head_that_ran_in_bf16_or_is_skipped_keeps_megatron_exact(tmp_path):
    """A head the decision itself keeps in BF16 is no approximation: Megatron runs what was asked."""
    from fp8_policy.policy.records import Precision

    head = "model.module.output_layer"
    high = f.decision(f.family_layers("megatron", N_BLOCKS, Precision.HIGH), f.block_names("megatron", 1))
    skipped = f.decision(f.family_layers("megatron", N_BLOCKS), (*f.block_names("megatron", 1), head))
    for decision in (high, skipped):
        text, _, _ = run_script(decision, tmp_path)
        assert (
            text.splitlines()[2]
            == "# Applies the recommendation exactly (same BF16 layers and GEMMs as the JSON recommendation)."
        ), text


def test_a_skipped_head_needs_no_megatron_setting_and_keeps_the_flags_route_the_json_takes(tmp_path):
    """Megatron runs output_layer in BF16 without any setting, so a skipped or overridden head gets no (dead)
    `output_layer` matcher and does not push the edge blocks off `--first-last-layers-bf16`, the route the JSON
    `megatron` section (which counts blocks only) gives for the same plan."""
    from fp8_policy.policy.analysis import analyze
    from fp8_policy.policy.recommend.megatron import megatron_section
    from fp8_policy.policy.recommend.skiplist import SkipPlan
    from tests.policy.analysis.factories import Spec, build_run

    head = "model.module.output_layer"
    edge = f.block_names("megatron", 1)
    layers = f.family_layers("megatron", N_BLOCKS)
    for decision in (f.decision(layers, (*edge, head)), f.decision(layers, edge, [f.override(head, "wgrad")])):
        text, args, config = run_script(decision, tmp_path)
        assert config is None and args[4:] == [
            "--first-last-layers-bf16",
            "--num-layers-at-start-in-bf16",
            "1",
            "--num-layers-at-end-in-bf16",
            "0",
        ], text
        assert "Megatron runs output_layer in BF16, no flag needed" in text
    layout = analyze(build_run(Spec(n_blocks=N_BLOCKS))).layout  # 0-based names: its first block is block 0
    skips = (*(n for n, lv in layout.levels.items() if lv.block == layout.blocks[0]), head)
    section = megatron_section(layout, SkipPlan(skips, skips, (), (), ()), f.recipe("current"))
    assert section["extra_args"][4:] == args[4:]
    _, args, config = run_script(f.decision(layers, [head]), tmp_path)
    assert config is None and args == ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]


def test_the_json_notes_a_head_as_asked_only_when_the_plan_asks_for_it(tmp_path):
    """One verdict: the script names a head 'BF16 as asked' only when the decision skips or overrides it (not when
    the run already had it in BF16), and the JSON `megatron` section's notes say the same."""
    from fp8_policy.policy.analysis import analyze
    from fp8_policy.policy.recommend.megatron import megatron_section
    from fp8_policy.policy.recommend.skiplist import SkipPlan
    from tests.policy.analysis.factories import Spec, build_run

    layout = analyze(build_run(Spec(n_blocks=N_BLOCKS))).layout
    head = next(n for n, lv in layout.levels.items() if lv.info.structure.group.value == "head")
    edge = tuple(n for n, lv in layout.levels.items() if lv.block == layout.blocks[0])
    asked = megatron_section(layout, SkipPlan((*edge, head), (*edge, head), (), (), ()), f.recipe("current"))
    ran_bf16 = megatron_section(layout, SkipPlan(edge, edge, (head,), (), ()), f.recipe("current"))
    assert any(f"Head layer(s) ['{head}'] stay BF16 as asked" in note for note in asked["notes"]), asked["notes"]
    assert not any("as asked" in note for note in ran_bf16["notes"]), ran_bf16["notes"]
