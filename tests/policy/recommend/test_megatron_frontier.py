"""The JSON `megatron` section at the precision frontier: FP4 flags for NVFP4, and a precision-config file (no
first/last flags) when the ladder runs some layers under another recipe than the outer one."""

from __future__ import annotations

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend.megatron import megatron_section
from fp8_policy.policy.recommend.recipe import KWARGS
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import RECIPE_CLASSES, LayerPrecision, RecipeChoice
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, name


def recipe(name_: str) -> RecipeChoice:
    return RecipeChoice(name_, RECIPE_CLASSES[name_], dict(KWARGS[name_]), "test")


def layout_of(spec: Spec):  # type: ignore[no-untyped-def]
    analysis = analyze(build_run(spec))
    assert analysis.layout is not None
    return analysis.layout


def edge_skip() -> SkipPlan:
    layers = tuple(name("megatron", 0, s) for s in FAMILIES["megatron"]["subs"])  # type: ignore[union-attr]
    return SkipPlan(layers, layers, (), (), ())


def test_nvfp4_section_has_fp4_flags_and_no_fp8_flag() -> None:
    section = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("nvfp4"))
    assert section["extra_args"][:4] == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    assert not any(arg.startswith("--fp8-") for arg in section["extra_args"])
    assert (section["fp8_recipe"], section["fp8_format"]) == (None, None)
    assert (section["fp4_format"], section["fp4_recipe"]) == ("e2m1", "nvfp4")
    assert section["first_last_layers_bf16"] is True  # Megatron's first/last BF16 applies to FP4 too (fp4_utils.py)


def test_a_ladder_mix_goes_to_the_precision_config_instead_of_the_flags() -> None:
    rungs = (
        LayerPrecision(name("megatron", 3, "fc1"), "nvfp4", ("test",), 0.9),
        LayerPrecision(name("megatron", 0, "qkv"), "bf16", ("test",), 0.9),
        LayerPrecision(name("megatron", 4, "fc2"), "mxfp8", ("test",), 0.9),
    )
    section = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("mxfp8"), rungs)
    assert section["first_last_layers_bf16"] is False
    assert "--te-precision-config-file" in section["extra_args"]
    assert "--first-last-layers-bf16" not in section["extra_args"]
    assert any("precision ladder" in note for note in section["notes"])
    # rungs equal to the outer recipe or BF16 alone change nothing
    same = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("mxfp8"), rungs[1:])
    assert same["first_last_layers_bf16"] is True and "--te-precision-config-file" not in same["extra_args"]


def test_recommend_passes_the_ladder_so_the_json_and_the_rendered_script_agree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from fp8_policy.policy.render import render
    from tests.policy.recommend.test_ladder import fp8_run_with_nvfp4_whatifs, ladder

    rec, data = ladder(fp8_run_with_nvfp4_whatifs())
    assert data["precision_ladder"]["counts"]["nvfp4"] > 0 and data["recipe"]["name"] == "current"
    section = data["megatron"]
    assert "--te-precision-config-file" in section["extra_args"] and not section["first_last_layers_bf16"]
    assert any("precision ladder run under another recipe" in note for note in section["notes"])
    script = tmp_path / "policy.sh"
    script.write_text(render(rec.decision, "megatron").content + 'printf "%s\\n" "${FP8_POLICY_ARGS[@]}"\n')
    args = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "--te-precision-config-file" in args.splitlines()
    assert "fp4_quantization_recipe: nvfp4" in (tmp_path / "fp8_precision_config.yaml").read_text()


def test_the_plans_bf16_wins_over_a_rung_and_a_delayed_rung_is_no_mix_under_fp8() -> None:
    skipped_rung = LayerPrecision(name("megatron", 0, "qkv"), "mxfp8", ("test",), 0.9)  # the plan skips block 0
    section = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("nvfp4"), (skipped_rung,))
    assert section["first_last_layers_bf16"] is True and "--te-precision-config-file" not in section["extra_args"]
    delayed = LayerPrecision(name("megatron", 3, "fc1"), "delayed", ("test",), 0.9)
    assert (
        "--te-precision-config-file"
        not in megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("current"), (delayed,))["extra_args"]
    )
    under_nvfp4 = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe("nvfp4"), (delayed,))
    assert "--te-precision-config-file" in under_nvfp4["extra_args"]


def test_delayed_with_block_layers_in_bf16_json_and_script_say_tensorwise(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from fp8_policy.policy.records import PolicyDecision
    from fp8_policy.policy.render import render

    layout = layout_of(Spec(n_blocks=6))
    section = megatron_section(layout, edge_skip(), recipe("delayed"))
    assert section["fp8_recipe"] == "tensorwise"
    layers = tuple(lv.info for lv in layout.levels.values())
    decision = PolicyDecision(edge_skip().bf16_layers, (), recipe("delayed"), layers)
    script = tmp_path / "policy.sh"
    script.write_text(render(decision, "megatron").content + 'printf "%s\\n" "${FP8_POLICY_ARGS[@]}"\n')
    args = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    flags = args.splitlines()
    assert flags[flags.index("--fp8-recipe") + 1] == section["fp8_recipe"]


def test_an_output_layer_rung_has_no_megatron_setting_and_the_notes_say_so() -> None:
    """Megatron's output_layer is a plain ColumnParallelLinear (gpt_model.py; TELMHeadColumnParallelLinear only with
    fp8_output_proj under --fp8-recipe mxfp8): no --te-precision-config-file matcher reaches it, and no FP4 path
    exists, so its nvfp4 rung is not emitted and the notes say it runs in BF16 there."""
    head = "model.module.output_layer"
    rung = (LayerPrecision(head, "nvfp4", ("test",), 0.9),)
    for outer in ("mxfp8", "nvfp4", "current"):
        section = megatron_section(layout_of(Spec(n_blocks=6)), edge_skip(), recipe(outer), rung)
        assert "--te-precision-config-file" not in section["extra_args"], (outer, section["extra_args"])
        assert section["first_last_layers_bf16"] is True  # the head's rung does not turn the flags off
        note = next((n for n in section["notes"] if head in n and "nvfp4" in n), None)
        assert note is not None and "run in BF16 under Megatron" in note and "ColumnParallelLinear" in note, note


def test_a_head_the_plan_runs_in_low_precision_is_bf16_in_the_notes_the_formats_and_the_script_alike() -> None:
    """One verdict on the head: Megatron runs output_layer in BF16 even where the plan leaves it at the outer recipe,
    so the JSON notes, `formats.megatron` (an approximation, not 'exactly') and the script's comment all say so."""
    from fp8_policy.policy.recommend import recommend
    from fp8_policy.policy.render import render
    from tests.policy.analysis.factories import heads

    rec = recommend(build_run(Spec(n_blocks=4)))
    data = rec.to_dict()
    head = heads("megatron")[0]
    assert head not in data["fp8_skip_layers"]
    claim = data["formats"]["megatron"]
    assert head in claim["bf16_layers"] and not claim["exact"] and head in claim["approximation"], claim
    note = next(n for n in data["megatron"]["notes"] if head in n and "run in BF16 under Megatron" in n)
    text = render(rec.decision, "megatron").content.splitlines()
    assert f"# {note}" in text and text[2] == f"# Approximation: {claim['approximation']}"
