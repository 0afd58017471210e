"""bionemo Hydra overrides: fp8_config.* and the 1-indexed fp8_layers list of blocks that stay in FP8."""

from __future__ import annotations

import shlex

import pytest

from fp8_policy.policy.render import render
from fp8_policy.policy.render.hydra import hydra_value
from tests.policy.render import factory as f


def overrides(decision) -> dict[str, str]:
    """key -> value of every non-comment line, as the shell would pass it to Hydra."""
    out = {}
    for line in render(decision, "hydra").content.splitlines():
        if line and not line.startswith("#"):
            (token,) = shlex.split(line)
            key, value = token.split("=", 1)
            out[key] = value
    return out


def comments(decision) -> str:
    return "\n".join(line for line in render(decision, "hydra").content.splitlines() if line.startswith("#"))


def test_esm2_skipped_edge_blocks_leave_fp8_layers():
    decision = f.decision(f.family_layers("esm2", 6), f.block_names("esm2", 1, 6))
    got = overrides(decision)
    assert got["fp8_layers"] == "[2,3,4,5]"
    assert got["fp8_config.enabled"] == "True"
    assert "# Blocks kept in BF16: 1, 6" in comments(decision)


def test_block_with_any_skipped_sublayer_runs_in_bf16():
    decision = f.decision(f.family_layers("llama", 5), ["model.model.layers.3.layernorm_mlp.fc2"])
    assert overrides(decision)["fp8_layers"] == "[1,2,4,5]"


def test_zero_based_logs_are_converted_to_one_based():
    decision = f.decision(f.family_layers("hf", 4), ["model.model.layers.0.mlp.down_proj"])
    assert overrides(decision)["fp8_layers"] == "[2,3,4]"
    assert "logged numbering + 1" in comments(decision)


def test_empty_skip_keeps_every_block():
    decision = f.decision(f.family_layers("megatron", 4))
    assert overrides(decision)["fp8_layers"] == "[1,2,3,4]"


def test_recipe_overrides_and_quoting():
    choice = f.recipe("delayed", amax_history_len=16, amax_compute_algo="max", fp8_format="Format.HYBRID")
    decision = f.decision(f.family_layers("esm2", 2), recipe_choice=choice)
    got = overrides(decision)
    assert got["fp8_config.fp8_recipe"] == "transformer_engine.common.recipe.DelayedScaling"
    assert got["fp8_config.fp8_format"] == "HYBRID"
    assert got["fp8_config.fp8_recipe_kwargs"] == "{amax_history_len: 16, amax_compute_algo: max}"
    text = render(decision, "hydra").content
    assert "'fp8_config.fp8_recipe_kwargs={amax_history_len: 16, amax_compute_algo: max}'" in text
    assert "'fp8_layers=[1,2]'" in text


@pytest.mark.parametrize(("name", "fmt"), [("current", "HYBRID"), ("block", "E4M3"), ("mxfp8", "E4M3")])
def test_format_defaults(name, fmt):
    got = overrides(f.decision(f.family_layers("llama", 1), recipe_choice=f.recipe(name)))
    assert got["fp8_config.fp8_format"] == fmt
    assert got["fp8_config.fp8_recipe_kwargs"] == "{}"


def test_head_comments():
    layers = f.family_layers("llama", 3)
    assert "the recommended head BF16 (skip or GEMM override) needs no override" in comments(
        f.decision(layers, ["model.lm_head"])
    )
    assert "stays BF16 even though" in comments(f.decision(layers))
    assert overrides(f.decision(layers, ["model.lm_head"]))["fp8_layers"] == "[1,2,3]"


def test_inexpressible_parts_are_listed():
    layers = f.family_layers("llama", 3)
    fc2 = "model.model.layers.2.layernorm_mlp.fc2"
    text = comments(f.decision(layers, ["model.embedding.custom"], [f.override(fc2, "wgrad")]))
    assert "Not expressible with fp8_layers (outside the transformer blocks): model.embedding.custom" in text
    assert f"{fc2} [wgrad]" in text


def test_no_blocks_logged_omits_fp8_layers():
    decision = f.decision([f.head("model.lm_head")], ["model.lm_head"])
    assert "fp8_layers" not in overrides(decision)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (None, "null"),
        (16, "16"),
        (0.5, "0.5"),
        ("max", "max"),
        ("true", '"true"'),
        ("a b", '"a b"'),
        ('q"x', '"q\\"x"'),
        ([1, "x"], "[1, x]"),
        ({"a": {"b": False}}, "{a: {b: false}}"),
        (float("inf"), "inf"),
    ],
)
def test_hydra_value(value, expected):
    assert hydra_value(value) == expected


def test_the_per_block_granularity_is_stated_even_when_nothing_is_widened():
    decision = f.decision(f.family_layers("esm2", 4))
    assert "# bionemo's fp8_layers works per transformer block" in comments(decision)


def test_a_layer_whose_ladder_rung_needs_more_than_the_outer_recipe_takes_its_block_to_bf16():
    """NVFP4 outer recipe, one layer lifted to MXFP8 by the ladder (it fails NVFP4): fp8_layers holds one recipe for
    every listed block, so that block leaves the list (BF16, the safe side) and the first lines say so; running it
    at NVFP4 would be the precision the ladder ruled out."""
    from fp8_policy.policy.render import applied

    layers = f.family_layers("esm2", 4)
    lifted = f.block_names("esm2", 2)[3]
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe("nvfp4")), {lifted: "mxfp8"})
    assert overrides(decision)["fp8_layers"] == "[1,3,4]"
    claim = applied(decision, "hydra")
    assert set(f.block_names("esm2", 2)) <= set(claim.bf16_layers) and not claim.exact
    assert f"{lifted} (mxfp8)" in (claim.approximation or ""), claim.approximation
    assert "# Approximation:" in comments(decision).splitlines()[1]


def test_a_cheaper_ladder_rung_runs_at_the_outer_recipe_and_that_is_stated():
    from fp8_policy.policy.render import applied

    layers = f.family_layers("esm2", 4)
    cheap = f.block_names("esm2", 3)[0]
    decision = f.with_ladder(f.decision(layers, recipe_choice=f.recipe("mxfp8")), {cheap: "nvfp4"})
    assert overrides(decision)["fp8_layers"] == "[1,2,3,4]"  # the safe side: it stays at MXFP8
    claim = applied(decision, "hydra")
    assert f"{cheap} (nvfp4)" in (claim.approximation or "") and "run at mxfp8" in (claim.approximation or "")
    assert "Applies the recommendation exactly" not in comments(decision)


@pytest.mark.parametrize(
    ("outer", "rung", "said", "allowed"), [("current", None, "current", "FP8"), ("mxfp8", "nvfp4", "nvfp4", "FP4")]
)
def test_a_head_run_in_low_precision_by_the_decision_makes_hydra_an_approximation(outer, rung, said, allowed):
    """One output, one verdict: bionemo runs its LM head under te.autocast(enabled=False), i.e. in BF16, whatever the
    decision asks (the outer recipe, or a ladder rung such as nvfp4), so the first line and the JSON formats.hydra
    call that an approximation naming the head, never 'Applies ... exactly', even when it is the only difference."""
    from fp8_policy.policy.render import applied_by_format

    head = "model.lm_head"
    base = f.decision(f.family_layers("llama", 3), recipe_choice=f.recipe(outer))
    decision = f.with_ladder(base, {head: rung}) if rung else base
    claim = applied_by_format(decision)["hydra"]
    assert head in claim["bf16_layers"] and head in claim["extra_bf16_layers"] and not claim["exact"], claim
    assert f"{head} ({said})" in claim["approximation"] and "BF16" in claim["approximation"], claim
    assert "te.autocast(enabled=False)" in claim["approximation"]
    assert comments(decision).splitlines()[1] == f"# Approximation: {claim['approximation']}"
    assert "Applies the recommendation exactly" not in comments(decision)
    assert f"the analysis would allow {allowed} there ({head} ({said});" in comments(decision)


def test_a_head_the_decision_keeps_in_bf16_leaves_hydra_exact():
    """A head skipped, overridden or already BF16 in the run is what bionemo runs: no approximation."""
    from fp8_policy.policy.records import Precision
    from fp8_policy.policy.render import applied

    head = "model.lm_head"
    layers = f.family_layers("llama", 3)
    for decision in (
        f.decision(layers, [head]),
        f.decision(layers, (), [f.override(head, "wgrad")]),
        f.decision(f.family_layers("llama", 3, Precision.HIGH)),
    ):
        claim = applied(decision, "hydra")
        assert claim.exact and head in claim.bf16_layers, claim
        assert comments(decision).splitlines()[1] == (
            "# Applies the recommendation exactly (same BF16 layers and GEMMs as the JSON recommendation)."
        )


def test_the_taken_along_count_is_every_layer_a_bf16_block_moves_out_of_low_precision():
    """A block leaves fp8_layers for one skipped layer: the count names each of its layers the decision runs in low
    precision (a cheaper-rung one included, and no longer listed as running at the outer recipe), never a layer
    that already ran in BF16."""
    from dataclasses import replace

    from fp8_policy.policy.records import Precision
    from fp8_policy.policy.render import applied_by_format

    prefix = "model.esm.encoder.layers"
    layers = [
        f.body(
            name, int(name.split(".")[4]), Precision.HIGH if name == f"{prefix}.2.layernorm_mlp.fc1" else Precision.FP8
        )
        for name in (x.name for x in f.family_layers("esm2", 4) if x.structure.index is not None)
    ]
    base = f.decision(layers, [f"{prefix}.2.layernorm_mlp.fc2"])
    decision = f.with_ladder(
        base, {f"{prefix}.2.self_attention.proj": "nvfp4", f"{prefix}.3.self_attention.proj": "nvfp4"}
    )
    decision = replace(decision, recipe=f.recipe("current"))
    formats = applied_by_format(decision)["hydra"]
    assert (
        "block(s) 2 run wholly in BF16 for 1 skipped/overridden layer(s) and 1 layer(s) that ran in BF16, "
        "taking 2 healthy layer(s)" in formats["approximation"]
    )
    assert (
        f"1 layer(s) at a cheaper ladder rung run at current (fp8_layers holds one recipe per block): {prefix}.3"
        in (formats["approximation"])
    )
