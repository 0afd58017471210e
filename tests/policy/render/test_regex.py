"""Exact-name regexes: anchored, escaped, factored without ever matching a name that was not given."""

from __future__ import annotations

import random
import re

import pytest

from fp8_policy.policy.render import regex

UNIVERSE = (
    [
        f"model.module.decoder.layers.{i}.{s}"
        for i in range(0, 13)
        for s in ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")
    ]
    + ["model.module.output_layer", "model.lm_head", "model.lm_head.dense", "model.embedding"]
    + [
        "model.blocks.1.attn+proj[0]",
        "model.blocks.10.attn+proj[0]",
        "model.blocks.1.attnnproj0",
        "model_blocks.1.attn+proj[0]",
        "model.blocks.1.attn+proj[0].x",
        "x.model.blocks.1.attn+proj[0]",
        "model.blocks.01.attn+proj[0]",
        "model.experts.3.gemm_(a|b)",
        "model.experts.3.gemm_a",
    ]
)


def _matches(pattern: str) -> set[str]:
    compiled = re.compile(pattern)
    return {name for name in UNIVERSE if compiled.search(name)}


@pytest.mark.parametrize("seed", range(40))
def test_exact_and_excluding_partition_the_universe(seed):
    rng = random.Random(seed)
    chosen = set(rng.sample(UNIVERSE, rng.randint(1, 25)))
    assert _matches(regex.exact(chosen)) == chosen
    assert _matches(regex.excluding(chosen)) == set(UNIVERSE) - chosen


def test_factoring_groups_numbers_and_suffixes():
    names = [f"model.layers.{i}.{s}" for i in (1, 2, 32) for s in ("fc1", "fc2")]
    assert regex.exact(names) == r"^(model\.layers\.(?:1|2|32)\.(?:fc1|fc2))$"


def test_metacharacters_are_escaped_and_anchored():
    pattern = regex.exact(["model.blocks.1.attn+proj[0]"])
    assert pattern.startswith("^(") and pattern.endswith(")$")
    assert _matches(pattern) == {"model.blocks.1.attn+proj[0]"}


def test_near_miss_numbers_do_not_match():
    pattern = regex.exact(["model.module.decoder.layers.1.mlp.linear_fc1"])
    assert not re.search(pattern, "model.module.decoder.layers.10.mlp.linear_fc1")
    assert not re.search(pattern, "model.module.decoder.layers.01.mlp.linear_fc1")


def test_excluding_nothing_matches_everything():
    assert regex.excluding([]) == ".*"
    assert _matches(regex.excluding([])) == set(UNIVERSE)


def test_alternation_needs_names():
    with pytest.raises(ValueError):
        regex.alternation([])
