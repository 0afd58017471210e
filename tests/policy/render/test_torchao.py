"""torchao snippet: executed for real and checked against a small nn.Module tree with the logged layout."""

from __future__ import annotations

import pytest
from torch import nn

from fp8_policy.policy.render import render
from fp8_policy.policy.render.torchao import skip_fqns
from tests.policy.render import factory as f


class Attention(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.layernorm_qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)


class Mlp(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.self_attention = Attention(width)
        self.layernorm_mlp = Mlp(width)


class Body(nn.Module):
    def __init__(self, n_blocks: int, width: int):
        super().__init__()
        self.layers = nn.ModuleList(Block(width) for _ in range(n_blocks))


class LlamaLike(nn.Module):
    """named_modules(): model.layers.<0-based>.self_attention.layernorm_qkv ..., lm_head."""

    def __init__(self, n_blocks: int = 4, width: int = 32):
        super().__init__()
        self.model = Body(n_blocks, width)
        self.lm_head = nn.Linear(width, 64)


def load_filter(decision) -> dict:
    namespace: dict = {}
    exec(compile(render(decision, "torchao").content, "torchao_fp8_filter.py", "exec"), namespace)
    return namespace


def test_snippet_filters_skipped_modules_of_a_real_tree():
    fc2 = "model.model.layers.2.layernorm_mlp.fc2"
    skip = (*f.block_names("llama", 1), "model.lm_head")
    namespace = load_filter(f.decision(f.family_layers("llama", 4), skip, [f.override(fc2, "wgrad")]))
    expected_skip = {
        "model.layers.0.self_attention.layernorm_qkv",
        "model.layers.0.self_attention.proj",
        "model.layers.0.layernorm_mlp.fc1",
        "model.layers.0.layernorm_mlp.fc2",
        "lm_head",
        "model.layers.1.layernorm_mlp.fc2",  # per-GEMM override -> whole module
    }
    assert namespace["SKIP_FQNS"] == expected_skip
    model = LlamaLike()
    fqns = {fqn for fqn, _ in model.named_modules()}
    assert expected_skip <= fqns
    for fqn, module in model.named_modules():
        expected = isinstance(module, nn.Linear) and fqn not in expected_skip
        assert namespace["module_filter_fn"](module, fqn) is expected, fqn


def test_real_conversion_keeps_skipped_modules_in_high_precision():
    pytest.importorskip("torchao.float8")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    skip = ("model.model.layers.1.self_attention.proj", "model.lm_head")
    namespace = load_filter(f.decision(f.family_layers("llama", 2), skip))
    model = LlamaLike(n_blocks=2)
    convert_to_float8_training(
        model,
        config=Float8LinearConfig.from_recipe_name("tensorwise"),
        module_filter_fn=namespace["module_filter_fn"],
    )
    modules = dict(model.named_modules())
    assert type(modules["model.layers.0.self_attention.proj"]) is nn.Linear
    assert type(modules["lm_head"]) is nn.Linear
    assert type(modules["model.layers.1.self_attention.proj"]).__name__ == "Float8Linear"
    assert type(modules["model.layers.0.layernorm_mlp.fc1"]).__name__ == "Float8Linear"


def test_megatron_names_drop_ddp_levels_and_become_zero_based():
    skip = ("model.module.decoder.layers.3.mlp.linear_fc1", "model.module.output_layer")
    fqns = skip_fqns(f.decision(f.family_layers("megatron", 4), skip))
    assert list(fqns) == ["decoder.layers.2.mlp.linear_fc1", "output_layer"]


def test_zero_based_and_esm2_names():
    hf = skip_fqns(f.decision(f.family_layers("hf", 3), ["model.model.layers.0.self_attn.q_proj"]))
    assert list(hf) == ["model.layers.0.self_attn.q_proj"]
    esm = skip_fqns(f.decision(f.family_layers("esm2", 3), ["model.esm.encoder.layers.3.layernorm_mlp.fc1"]))
    assert list(esm) == ["esm.encoder.layers.2.layernorm_mlp.fc1"]


def test_empty_policy_converts_every_linear():
    namespace = load_filter(f.decision(f.family_layers("llama", 2)))
    assert namespace["SKIP_FQNS"] == set()
    model = LlamaLike(n_blocks=2)
    linears = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert all(namespace["module_filter_fn"](m, fqn) for fqn, m in linears)
    assert not namespace["module_filter_fn"](model.model.layers[0].layernorm_mlp.norm, "x")


def test_usage_and_torchtitan_comment():
    decision = f.decision(
        f.family_layers("megatron", 2),
        ["model.module.decoder.layers.1.mlp.linear_fc2"],
        recipe_choice=f.recipe("delayed"),
    )
    text = render(decision, "torchao").content
    assert "convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)" in text
    assert 'Float8LinearConfig.from_recipe_name("tensorwise")' in text
    assert "#   --float8.filter_fqns decoder.layers.0.mlp.linear_fc2" in text
