"""Megatron dialect: first/last-BF16 flags for edge blocks, otherwise a precision-config YAML.

The bash text is executed, and the YAML it writes is matched the way Megatron's
`quant_config.RecipeConfig` does (fnmatch over 0-based `named_modules()` paths, first enabled matcher wins).
"""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import pytest
import yaml

from fp8_policy.policy.render import RenderOptions, render
from fp8_policy.policy.render.megatron import edge_block_counts, glob_escape
from tests.policy.render import factory as f

SUBLAYERS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def run_script(decision, tmp_path: Path, **options) -> tuple[str, list[str], Path | None]:
    """(text, FP8_POLICY_ARGS as bash sees them, path of the precision config it wrote or None)."""
    text = render(decision, "megatron", RenderOptions(**options)).content
    script = tmp_path / "policy.sh"
    script.write_text(text + 'printf "%s\\n" "${FP8_POLICY_ARGS[@]}"\n')
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, check=True)
    args = done.stdout.splitlines()
    flag = "--te-precision-config-file"
    return text, args, tmp_path / args[args.index(flag) + 1] if flag in args else None


def run(decision, tmp_path: Path, **options) -> tuple[str, list[str], dict | None]:
    """(text, FP8_POLICY_ARGS as bash sees them, parsed precision-config YAML or None)."""
    text, args, path = run_script(decision, tmp_path, **options)
    return text, args, yaml.safe_load(path.read_text()) if path else None


def bf16_paths(config: dict, n_blocks: int) -> set[str]:
    """Megatron module paths that the first enabled matching glob sends to the `bf16` config."""
    paths = [f"decoder.layers.{i}.{s}" for i in range(n_blocks) for s in SUBLAYERS]
    paths += ["output_layer", "embedding.word_embeddings"]
    matchers = [m for m in config["matchers"].values() if m["enabled"] and m["type"] == "glob"]
    chosen = set()
    for path in paths:
        first = next((m["config"] for m in matchers if fnmatch.fnmatch(path, m["pattern"])), None)
        if first == "bf16":
            chosen.add(path)
    return chosen


def block(i: int) -> set[str]:
    return {f"decoder.layers.{i}.{s}" for s in SUBLAYERS}


def test_contiguous_start_and_end_blocks_use_flags(tmp_path):
    layers = f.family_layers("megatron", 12)
    decision = f.decision(layers, f.block_names("megatron", 1, 2, 12))
    text, args, config = run(decision, tmp_path)
    assert config is None and "cat >" not in text and "WARNING" not in text
    assert args == [
        "--fp8-format",
        "hybrid",
        "--fp8-recipe",
        "tensorwise",
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "2",
        "--num-layers-at-end-in-bf16",
        "1",
    ]


@pytest.mark.parametrize(
    ("skipped_blocks", "expected"),
    [((1, 2), (2, 0)), ((6,), (0, 1)), ((1, 2, 3, 4, 5, 6), (6, 0)), ((1, 3), None), ((2,), None)],
)
def test_edge_block_counts(skipped_blocks, expected):
    layers = f.family_layers("esm2", 6)
    assert edge_block_counts(f.decision(layers, f.block_names("esm2", *skipped_blocks))) == expected


def test_partial_edge_block_is_not_contiguous():
    layers = f.family_layers("megatron", 4)
    skip = f.block_names("megatron", 1)[:3]  # fc2 of block 1 stays FP8
    assert edge_block_counts(f.decision(layers, skip)) is None


def test_non_contiguous_skip_writes_precision_config(tmp_path):
    layers = f.family_layers("megatron", 12)
    skip = f.block_names("megatron", 2, 7) + ("model.module.decoder.layers.11.mlp.linear_fc2",)
    text, args, config = run(f.decision(layers, skip), tmp_path, precision_config_file="prec.yaml")
    assert args[-2:] == ["--te-precision-config-file", "prec.yaml"]
    assert "--first-last-layers-bf16" not in args
    assert config["configs"] == {
        "bf16": {"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}}
    }
    # logged blocks 2 and 7 are Megatron blocks 1 and 6; logged 11 -> 10; block 10/0/… near misses stay FP8
    assert bf16_paths(config, 12) == block(1) | block(6) | {"decoder.layers.10.mlp.linear_fc2"}
    assert "decoder.layers.1.*" in text and "1-based TE layer_number" in text


def test_esm2_names_are_translated_to_megatron_modules(tmp_path):
    layers = f.family_layers("esm2", 6)
    skip = (
        "model.esm.encoder.layers.3.self_attention.layernorm_qkv",
        "model.esm.encoder.layers.5.layernorm_mlp.fc1",
        "model.lm_head.dense",
    )
    _, _, config = run(f.decision(layers, skip), tmp_path)
    assert bf16_paths(config, 6) == {  # the head gets no matcher: Megatron runs output_layer in BF16 anyway
        "decoder.layers.2.self_attention.linear_qkv",
        "decoder.layers.4.mlp.linear_fc1",
    }


def test_zero_based_logs_keep_their_index(tmp_path):
    layers = f.family_layers("hf", 4)
    skip = ("model.model.layers.0.self_attn.q_proj", "model.model.layers.2.mlp.down_proj")
    text, _, config = run(f.decision(layers, skip), tmp_path)
    assert bf16_paths(config, 4) == {"decoder.layers.0.self_attention.linear_qkv", "decoder.layers.2.mlp.linear_fc2"}
    assert "0-based list index, kept" in text


def test_gemm_overrides_are_approximated_by_whole_modules(tmp_path):
    layers = f.family_layers("megatron", 6)
    overrides = [
        f.override("model.module.decoder.layers.3.mlp.linear_fc2", "wgrad"),
        f.override("model.module.decoder.layers.4.mlp.linear_fc1", "wgrad"),
    ]
    text, args, config = run(f.decision(layers, (), overrides), tmp_path)
    assert bf16_paths(config, 6) == {"decoder.layers.2.mlp.linear_fc2", "decoder.layers.3.mlp.linear_fc1"}
    assert "approximated by running them wholly in BF16" in text
    assert "# Alternative: drop those matchers and pass --no-fp8-wgrad" in text
    assert "--no-fp8-wgrad" not in args


def test_mixed_gemm_overrides_offer_no_wgrad_alternative(tmp_path):
    layers = f.family_layers("megatron", 6)
    overrides = [f.override("model.module.decoder.layers.3.mlp.linear_fc2", "dgrad", "wgrad")]
    text, _, config = run(f.decision(layers, f.block_names("megatron", 1), overrides), tmp_path)
    assert "--no-fp8-wgrad" not in text
    assert bf16_paths(config, 6) == block(0) | {"decoder.layers.2.mlp.linear_fc2"}


def test_delayed_recipe_with_block_skips_runs_tensorwise_on_the_megatron_path(tmp_path):
    # Megatron rejects delayed scaling with transformer layers in BF16: the script says tensorwise, as the JSON
    # `megatron` section does (tests/policy/recommend/test_megatron_frontier.py checks the two agree)
    layers = f.family_layers("megatron", 8)
    choice = f.recipe("delayed", amax_history_len=16, amax_compute_algo="max", reduce_amax=True)
    text, args, _ = run(f.decision(layers, f.block_names("megatron", 1), recipe_choice=choice), tmp_path)
    assert not any(line.startswith("# WARNING") for line in text.splitlines())
    assert args[:4] == ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
    assert "--fp8-amax-history-len" not in args and "--fp8-amax-compute-algo" not in args
    assert "# Megatron path only: --fp8-recipe tensorwise (current scaling)" in text
    assert "# recipe kwarg amax_history_len=16 is delayed scaling's" in text
    assert "-> --fp8-recipe tensorwise" in text


def test_delayed_recipe_keeps_its_flags_when_only_the_head_leaves_fp8(tmp_path):
    layers = f.family_layers("megatron", 8)
    head = [layer.name for layer in layers if layer.structure.group.value == "head"]
    assert head
    choice = f.recipe("delayed", amax_history_len=16, amax_compute_algo="max")
    _, args, _ = run(f.decision(layers, head, recipe_choice=choice), tmp_path)
    assert args[:8] == [
        "--fp8-format",
        "hybrid",
        "--fp8-recipe",
        "delayed",
        "--fp8-amax-history-len",
        "16",
        "--fp8-amax-compute-algo",
        "max",
    ]


def test_delayed_recipe_without_skips_does_not_warn(tmp_path):
    text, args, config = run(f.decision(f.family_layers("megatron", 4), recipe_choice=f.recipe("delayed")), tmp_path)
    assert "WARNING" not in text and config is None
    assert args == ["--fp8-format", "hybrid", "--fp8-recipe", "delayed"]


@pytest.mark.parametrize(
    ("recipe_name", "fmt", "megatron_recipe"),
    [
        ("current", "hybrid", "tensorwise"),
        ("delayed", "hybrid", "delayed"),
        ("block", "e4m3", "blockwise"),
        ("mxfp8", "e4m3", "mxfp8"),
    ],
)
def test_recipe_flags(tmp_path, recipe_name, fmt, megatron_recipe):
    decision = f.decision(f.family_layers("llama", 2), recipe_choice=f.recipe(recipe_name))
    _, args, _ = run(decision, tmp_path)
    assert args == ["--fp8-format", fmt, "--fp8-recipe", megatron_recipe]


def test_explicit_format_kwarg_wins(tmp_path):
    decision = f.decision(f.family_layers("llama", 2), recipe_choice=f.recipe("current", fp8_format="Format.E4M3"))
    _, args, _ = run(decision, tmp_path)
    assert args[:2] == ["--fp8-format", "e4m3"]


def test_glob_metacharacters_are_literal():
    assert glob_escape("a.b[0]*?") == "a.b[[]0][*][?]"
    assert fnmatch.fnmatch("a.b[0]*?", glob_escape("a.b[0]*?"))
    assert not fnmatch.fnmatch("a.b0xy", glob_escape("a.b[0]*?"))


def test_whole_edge_blocks_of_gemm_overrides_use_the_flags(tmp_path):
    # Megatron can only run whole modules in BF16; when the overridden modules fill the first and last blocks,
    # the flags say exactly that (the JSON `megatron` section agrees).
    layers = f.family_layers("megatron", 6)
    overrides = [f.override(name, "dgrad", "wgrad") for name in f.block_names("megatron", 1, 6)]
    text, args, config = run(f.decision(layers, (), overrides), tmp_path)
    assert config is None and "approximated by whole modules in BF16" in text
    assert args[-5:] == [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16",
        "1",
        "--num-layers-at-end-in-bf16",
        "1",
    ]
