"""The `megatron` section: first/last BF16 only for contiguous end blocks, counts, recipe names, extra args."""

from __future__ import annotations

from fp8_policy.policy.analysis import analyze
from fp8_policy.policy.recommend.megatron import megatron_section
from fp8_policy.policy.recommend.recipe import KWARGS
from fp8_policy.policy.recommend.skiplist import SkipPlan
from fp8_policy.policy.records import RECIPE_CLASSES, GemmOverride, RecipeChoice
from fp8_policy.policy.render.options import RenderOptions
from tests.policy.analysis.factories import FAMILIES, Spec, build_run, heads, name


def recipe(name_: str) -> RecipeChoice:
    return RecipeChoice(name_, RECIPE_CLASSES[name_], dict(KWARGS[name_]), "test")


def layout_of(spec: Spec):
    analysis = analyze(build_run(spec))
    assert analysis.layout is not None
    return analysis.layout


def block_layers(family: str, blocks: list[int]) -> tuple[str, ...]:
    return tuple(name(family, b, s) for b in blocks for s in FAMILIES[family]["subs"])  # type: ignore[union-attr]


def skip(layers: tuple[str, ...], kept: tuple[str, ...] = ()) -> SkipPlan:
    return SkipPlan(layers, layers, kept, (), ())


def test_contiguous_first_and_last_blocks() -> None:
    section = megatron_section(
        layout_of(Spec(n_blocks=12)), skip(block_layers("megatron", [0, 1, 10, 11])), recipe("current")
    )
    assert section["first_last_layers_bf16"] is True
    assert (section["num_layers_at_start_in_bf16"], section["num_layers_at_end_in_bf16"]) == (2, 2)
    assert section["fp8_recipe"] == "tensorwise" and section["blocks_needing_precision_config"] == []
    assert section["extra_args"] == [
        "--fp8-format",
        "hybrid",
        "--fp8-recipe",
        "tensorwise",
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "2",
        "--num-layers-at-end-in-bf16",
        "2",
    ]
    assert any("Megatron runs output_layer in BF16 whatever the flags say" in note for note in section["notes"])


def test_a_partial_first_block_goes_to_the_precision_config_not_the_flags() -> None:
    # The flags would put the 3 healthy sublayers of block 0 in BF16 too.
    section = megatron_section(layout_of(Spec(n_blocks=12)), skip((name("megatron", 0, "qkv"),)), recipe("block"))
    assert section["first_last_layers_bf16"] is False
    assert (section["num_layers_at_start_in_bf16"], section["num_layers_at_end_in_bf16"]) == (0, 0)
    assert section["blocks_needing_precision_config"] == [0]
    assert section["fp8_recipe"] == "blockwise" and section["fp8_format"] == "e4m3"


def test_whole_blocks_of_gemm_overrides_use_the_flags() -> None:
    # Megatron can only run a whole module in BF16, so overrides count like skips for the flags.
    layers = block_layers("megatron", [0, 11])
    overrides = tuple(GemmOverride(layer, ("dgrad", "wgrad"), "gradient") for layer in layers)
    section = megatron_section(layout_of(Spec(n_blocks=12)), SkipPlan((), (), (), overrides, ()), recipe("current"))
    assert section["first_last_layers_bf16"] is True
    assert (section["num_layers_at_start_in_bf16"], section["num_layers_at_end_in_bf16"]) == (1, 1)
    assert any("kept as whole modules in BF16" in note for note in section["notes"])


def test_middle_block_needs_a_precision_config_not_first_last() -> None:
    section = megatron_section(
        layout_of(Spec(family="esm2", n_blocks=12)), skip(block_layers("esm2", [6])), recipe("mxfp8")
    )
    assert section["first_last_layers_bf16"] is False
    assert (section["num_layers_at_start_in_bf16"], section["num_layers_at_end_in_bf16"]) == (0, 0)
    assert section["blocks_needing_precision_config"] == [5]  # logged 1-based block 6 = Megatron layer 5
    assert "--te-precision-config-file" in section["extra_args"] and section["fp8_recipe"] == "mxfp8"
    assert any("1-based" in note for note in section["notes"])
    # the file the JSON names is the one the rendered script writes (RenderOptions.precision_config_file)
    flag = section["extra_args"].index("--te-precision-config-file")
    assert section["extra_args"][flag + 1] == RenderOptions().precision_config_file == "fp8_precision_config.yaml"


def test_existing_bf16_tail_counts_for_the_flags() -> None:
    layout = layout_of(Spec(n_blocks=12, bf16_blocks=(10, 11)))
    tail = block_layers("megatron", [10, 11])
    section = megatron_section(layout, SkipPlan((), (), tail, (), ()), recipe("current"))
    assert section["first_last_layers_bf16"] is True and section["num_layers_at_end_in_bf16"] == 2


def test_heads_are_not_transformer_layers() -> None:
    section = megatron_section(layout_of(Spec(n_blocks=6)), skip(tuple(heads("megatron"))), recipe("delayed"))
    assert section["first_last_layers_bf16"] is False
    assert section["extra_args"][:4] == ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"]
    assert "--fp8-amax-history-len" in section["extra_args"]
    assert any("Head layer(s)" in note for note in section["notes"])


def test_no_skips_no_flags() -> None:
    section = megatron_section(layout_of(Spec(n_blocks=6)), skip(()), recipe("current"))
    assert section["first_last_layers_bf16"] is False and section["blocks_needing_precision_config"] == []
    assert "--first-last-layers-bf16" not in section["extra_args"]
