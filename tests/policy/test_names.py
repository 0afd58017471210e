"""Tests for policy.names: metric-name grammar (fp8-log-format.md §3), layer structure and model order."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from fp8_policy.policy.names import layer_structure, order_key, split_metric_name
from fp8_policy.policy.records import QUANTIZED_TENSORS, LayerGroup, LayerStructure, MetricName

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared/fixtures/bionemo"
STATS_LOGS = {
    "esm2": FIXTURES / "dummy_logs_esm2/rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
    "llama3": FIXTURES / "dummy_logs_llama3/rank_0/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log",
}
STATS_LINE = re.compile(  # fp8-log-format.md §1.2
    r"^(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}) - (?P<level>[A-Z]+) - "
    r"(?P<name>.+?)\s+iteration=(?P<iteration>\d+)\s+value=(?P<value>[-+]?(?:\d+(?:\.\d+)?|nan|inf))\s*$"
)
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"real bionemo logs not found at {FIXTURES}")

L = "model.module.decoder.layers.3.self_attention.linear_qkv"


# --- split_metric_name ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # §3 table, one row per logged name
        (f"{L}_gradient_underflows%", MetricName(L, "gradient", "underflows%")),
        (f"{L}_activation_scale_inv_min", MetricName(L, "activation", "scale_inv_min")),
        (f"{L}_activation_scale_inv_max", MetricName(L, "activation", "scale_inv_max")),
        (f"{L}_activation_mse", MetricName(L, "activation", "mse")),
        (f"{L}_weight_overflows%", MetricName(L, "weight", "overflows%")),
        (
            f"{L}_activation_fp8_delayed_scaling_overflows%",
            MetricName(L, "activation", "overflows%", "fp8_delayed_scaling"),
        ),
        (f"{L}_activation_mxfp8_underflows%", MetricName(L, "activation", "underflows%", "mxfp8")),
        (
            f"{L}_activation_mxfp8_scale_inv_min_columnwise",
            MetricName(L, "activation", "scale_inv_min", "mxfp8", columnwise=True),
        ),
        (f"{L}_weight_fp8_current_scaling_mse", MetricName(L, "weight", "mse", "fp8_current_scaling")),
        (f"{L}_gradient_fp8_block_scaling_underflows%", MetricName(L, "gradient", "underflows%", "fp8_block_scaling")),
        (
            f"{L}_gradient_fp8_block_scaling_scale_inv_max_columnwise",
            MetricName(L, "gradient", "scale_inv_max", "fp8_block_scaling", columnwise=True),
        ),
        (f"{L}_gradient_nvfp4_underflows%", MetricName(L, "gradient", "underflows%", "nvfp4")),
        (f"{L}_gradient_nvfp4_mse", MetricName(L, "gradient", "mse", "nvfp4")),
        (f"{L}_wgrad_max", MetricName(L, "wgrad", "max")),
        (f"{L}_wgrad_cur_amax", MetricName(L, "wgrad", "cur_amax")),
        (f"{L}_wgrad_dynamic_range", MetricName(L, "wgrad", "dynamic_range")),
        (f"{L}_activation_underflows_num", MetricName(L, "activation", "underflows_num")),
        (f"{L}_activation_overflows_num", MetricName(L, "activation", "overflows_num")),
        (f"{L}_weight_total_square_error", MetricName(L, "weight", "total_square_error")),
        # TE-style example lines (§3)
        (f"{L}_gradient_scale_inv_min", MetricName(L, "gradient", "scale_inv_min")),
        (f"{L}_gradient_scale_inv_max", MetricName(L, "gradient", "scale_inv_max")),
        (f"{L}_gradient_mse", MetricName(L, "gradient", "mse")),
        (f"{L}_activation_overflows%", MetricName(L, "activation", "overflows%")),
        (f"{L}_weight_fp8_block_scaling_mse", MetricName(L, "weight", "mse", "fp8_block_scaling")),
        (
            f"{L}_weight_max_blockwise_dynamic_range_block_size_32_dims_1_max_over_orientations",
            MetricName(L, "weight", "max_blockwise_dynamic_range_block_size_32_dims_1_max_over_orientations"),
        ),
        (
            f"{L}_gradient_max_blockwise_dynamic_range_block_size_32_dims_1",
            MetricName(L, "gradient", "max_blockwise_dynamic_range_block_size_32_dims_1"),
        ),
        (f"{L}_activation_nvfp4_underflows%", MetricName(L, "activation", "underflows%", "nvfp4")),
        (f"{L}_dgrad_min", MetricName(L, "dgrad", "min")),
        (f"{L}_wgrad_l2_norm", MetricName(L, "wgrad", "l2_norm")),
        (f"{L}_output_std", MetricName(L, "output", "std")),
        # real bionemo names
        (
            "model.esm.encoder.layers.1.self_attention.layernorm_qkv_gradient_underflows%",
            MetricName("model.esm.encoder.layers.1.self_attention.layernorm_qkv", "gradient", "underflows%"),
        ),
        (
            "model.model.layers.2.self_attention.layernorm_qkv_gradient_underflows%",
            MetricName("model.model.layers.2.self_attention.layernorm_qkv", "gradient", "underflows%"),
        ),
        (
            "model.esm.encoder.layers.1.layernorm_mlp.fc1_activation_mse",
            MetricName("model.esm.encoder.layers.1.layernorm_mlp.fc1", "activation", "mse"),
        ),
        # nvdlfw generic LogTensorStats (§1.2, §6.2, §6.3)
        ("model.fc1_activation_min", MetricName("model.fc1", "activation", "min")),
        ("model.fc1_gradient_mean", MetricName("model.fc1", "gradient", "mean")),
        ("model.layers.1.linear_activation_min", MetricName("model.layers.1.linear", "activation", "min")),
        ("model.layers.2.linear_activation_l1_norm", MetricName("model.layers.2.linear", "activation", "l1_norm")),
        # greedy on the layer: the LAST `_<tensor>_` is the split point
        ("model.tied_weight_proj_activation_mse", MetricName("model.tied_weight_proj", "activation", "mse")),
        (
            "model.gradient_activation_gate_weight_underflows%",
            MetricName("model.gradient_activation_gate", "weight", "underflows%"),
        ),
    ],
)
def test_split_metric_name_follows_the_grammar(name: str, expected: MetricName) -> None:
    assert split_metric_name(name) == expected
    assert f"{expected.layer}_{expected.tensor}_{expected.stat_key}" == name


@pytest.mark.parametrize(
    ("name", "known_layers", "expected"),
    [
        ("model.fc1_relu_quant_act_max", (), MetricName("model.fc1", "relu_quant_act", "max")),
        ("model.fc1_relu_quant_act_max", ("model", "model.fc1"), MetricName("model.fc1", "relu_quant_act", "max")),
        # underscores in the layer: without known layers the split is at the first `_` after the last `.`
        ("model.layers.1.linear_qkv_relu_act_std", (), MetricName("model.layers.1.linear", "qkv_relu_act", "std")),
        (
            "model.layers.1.linear_qkv_relu_act_std",
            ("model.layers.1.linear", "model.layers.1.linear_qkv"),
            MetricName("model.layers.1.linear_qkv", "relu_act", "std"),
        ),
        # a custom tensor that ends in a TE tensor name: known layers disambiguate
        ("model.fc1_pre_activation_min", ("model.fc1",), MetricName("model.fc1", "pre_activation", "min")),
        ("model.fc1_pre_activation_min", (), MetricName("model.fc1_pre", "activation", "min")),
        # a custom tensor that starts with a TE tensor name
        ("model.fc1_weight_grad_l2_norm", (), MetricName("model.fc1", "weight_grad", "l2_norm")),
        # LayerNormMLP: the assigned `…layernorm_mlp` is not a prefix followed by `_`
        (
            "model.esm.encoder.layers.1.layernorm_mlp.fc2_gradient_underflows%",
            ("model.esm.encoder.layers.1.layernorm_mlp", "model.esm.encoder.layers.1"),
            MetricName("model.esm.encoder.layers.1.layernorm_mlp.fc2", "gradient", "underflows%"),
        ),
        # a known layer that is itself the greedy split
        (f"{L}_activation_mxfp8_underflows%", (L, "model"), MetricName(L, "activation", "underflows%", "mxfp8")),
        # a standard tensor followed by a stat this version does not know is kept verbatim
        (f"{L}_activation_new_stat", (), MetricName(L, "activation", "new_stat")),
    ],
)
def test_split_metric_name_with_custom_tensors_and_known_layers(
    name: str, known_layers: tuple[str, ...], expected: MetricName
) -> None:
    assert split_metric_name(name, known_layers) == expected


@pytest.mark.parametrize(
    "name",
    [
        "",
        "garbage",
        "model.fc1",
        "model.fc1_",
        "model.fc1_activation_",
        "_activation_min",
        "_max",
        "model_max",
        "model.fc1_cos",
    ],
)
def test_split_metric_name_returns_none_for_names_outside_the_grammar(name: str) -> None:
    assert split_metric_name(name) is None


def _distinct_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        match = STATS_LINE.match(line)
        assert match is not None, line
        names.add(match["name"])
    return names


@needs_fixtures
@pytest.mark.parametrize("run", sorted(STATS_LOGS))
def test_every_real_metric_name_splits(run: str) -> None:
    names = _distinct_names(STATS_LOGS[run])
    split = {name: split_metric_name(name) for name in names}

    assert len(names) == {"esm2": 72, "llama3": 24}[run]
    assert all(metric is not None for metric in split.values())
    assert {m.tensor for m in split.values() if m} == set(QUANTIZED_TENSORS)
    assert {m.stat for m in split.values() if m} == {"underflows%", "scale_inv_min", "scale_inv_max", "mse"}
    assert all(m.layer.endswith(".self_attention.layernorm_qkv") for m in split.values() if m)
    assert all(m.recipe is None and not m.columnwise for m in split.values() if m)
    known = {m.layer for m in split.values() if m} | {"model", "model.model", "model.esm"}
    assert all(split_metric_name(name, known) == metric for name, metric in split.items())


# --- layer_structure ----------------------------------------------------------------------------------------------

BODY = LayerGroup.BODY


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        # ESM2 (bionemo TE) and BERT
        ("model.esm.encoder.layers.1.self_attention.layernorm_qkv", LayerStructure(BODY, 1, "qkv")),
        ("model.esm.encoder.layers.6.self_attention.proj", LayerStructure(BODY, 6, "proj")),
        ("model.esm.encoder.layers.1.layernorm_mlp.fc1", LayerStructure(BODY, 1, "fc1")),
        ("model.esm.encoder.layers.1.layernorm_mlp.fc2", LayerStructure(BODY, 1, "fc2")),
        ("model.esm.encoder.layers.1.layernorm_mlp", LayerStructure(BODY, 1, "layernorm_mlp")),
        ("model.esm.encoder.layers.1", LayerStructure(BODY, 1, None)),
        ("model.bert.encoder.layer.0.attention.self.query", LayerStructure(BODY, 0, "q")),
        ("model.bert.encoder.layer.0.attention.self.key", LayerStructure(BODY, 0, "k")),
        ("model.bert.encoder.layer.0.attention.self.value", LayerStructure(BODY, 0, "v")),
        ("model.bert.encoder.layer.0.attention.output.dense", LayerStructure(BODY, 0, "proj")),
        ("model.bert.encoder.layer.0.intermediate.dense", LayerStructure(BODY, 0, "fc1")),
        ("model.bert.encoder.layer.0.output.dense", LayerStructure(BODY, 0, "fc2")),
        # bionemo Llama3 (TE) and HF Llama
        ("model.model.layers.2.self_attention.layernorm_qkv", LayerStructure(BODY, 2, "qkv")),
        ("model.model.layers.2.layernorm_mlp.fc2", LayerStructure(BODY, 2, "fc2")),
        ("model.model.layers.0.self_attn.q_proj", LayerStructure(BODY, 0, "q")),
        ("model.model.layers.0.self_attn.o_proj", LayerStructure(BODY, 0, "proj")),
        ("model.model.layers.0.mlp.gate_proj", LayerStructure(BODY, 0, "fc1")),
        ("model.model.layers.0.mlp.up_proj", LayerStructure(BODY, 0, "fc1")),
        ("model.model.layers.0.mlp.down_proj", LayerStructure(BODY, 0, "fc2")),
        # Megatron, with and without DDP `.module` levels
        ("model.module.decoder.layers.3.self_attention.linear_qkv", LayerStructure(BODY, 3, "qkv")),
        ("model.module.module.module.decoder.layers.1.self_attention.linear_proj", LayerStructure(BODY, 1, "proj")),
        ("model.decoder.layers.1.mlp.linear_fc1", LayerStructure(BODY, 1, "fc1")),
        ("model.module.decoder.layers.1.mlp.linear_fc2", LayerStructure(BODY, 1, "fc2")),
        ("model.module.decoder.layers.2.mlp.experts.linear_fc1.gemm_3", LayerStructure(BODY, 2, "fc1.gemm_3")),
        # GPT-2 / GPT-NeoX / TE TransformerLayer stacks
        ("model.transformer.h.0.attn.c_attn", LayerStructure(BODY, 0, "qkv")),
        ("model.transformer.h.0.attn.c_proj", LayerStructure(BODY, 0, "proj")),
        ("model.transformer.h.11.mlp.c_fc", LayerStructure(BODY, 11, "fc1")),
        ("model.transformer.h.11.mlp.c_proj", LayerStructure(BODY, 11, "fc2")),
        ("model.transformer.layers.4.attention.query_key_value", LayerStructure(BODY, 4, "qkv")),
        ("model.transformer.layers.4.attention.dense", LayerStructure(BODY, 4, "proj")),
        ("model.transformer.layers.4.mlp.dense_h_to_4h", LayerStructure(BODY, 4, "fc1")),
        ("model.transformer.layers.4.mlp.dense_4h_to_h", LayerStructure(BODY, 4, "fc2")),
        ("model.layers.5.self_attention.layernorm_qkv", LayerStructure(BODY, 5, "qkv")),
        ("model.layers.5.inter_attention.layernorm_query", LayerStructure(BODY, 5, "cross_q")),
        ("model.layers.5.inter_attention.key_value", LayerStructure(BODY, 5, "cross_kv")),
        ("model.layers.5.inter_attention.proj", LayerStructure(BODY, 5, "cross_proj")),
        ("model.layers.1.linear", LayerStructure(BODY, 1, "linear")),
        ("model.vit.blocks.7.attn.qkv", LayerStructure(BODY, 7, "qkv")),
        ("model.vit.blocks.7.mlp.fc1", LayerStructure(BODY, 7, "fc1")),
        ("model.layers.0.self_attention.core_attention.flash_attention", LayerStructure(BODY, 0, "flash_attention")),
        # T5: the stack name leads the sublayer; the outer `block.N` is the index, not the inner `layer.M`
        ("model.encoder.block.0.layer.0.SelfAttention.q", LayerStructure(BODY, 0, "encoder.q")),
        ("model.encoder.block.0.layer.0.SelfAttention.o", LayerStructure(BODY, 0, "encoder.proj")),
        ("model.encoder.block.0.layer.1.DenseReluDense.wi", LayerStructure(BODY, 0, "encoder.fc1")),
        ("model.encoder.block.0.layer.1.DenseReluDense.wo", LayerStructure(BODY, 0, "encoder.fc2")),
        ("model.decoder.block.0.layer.0.SelfAttention.q", LayerStructure(BODY, 0, "decoder.q")),
        ("model.decoder.block.0.layer.1.EncDecAttention.k", LayerStructure(BODY, 0, "decoder.cross_k")),
        ("model.decoder.block.0.layer.1.EncDecAttention.o", LayerStructure(BODY, 0, "decoder.cross_proj")),
        ("model.decoder.block.0.layer.2.DenseReluDense.wi_0", LayerStructure(BODY, 0, "decoder.fc1")),
        ("model.decoder.block.0.layer.2.DenseReluDense.wo", LayerStructure(BODY, 0, "decoder.fc2")),
        ("model.decoder.block.2", LayerStructure(BODY, 2, "decoder")),
        # heads
        ("model.lm_head", LayerStructure(LayerGroup.HEAD, None, "lm_head")),
        ("model.lm_head.dense", LayerStructure(LayerGroup.HEAD, None, "lm_head.dense")),
        ("model.lm_head.decoder", LayerStructure(LayerGroup.HEAD, None, "lm_head.decoder")),
        ("model.esm.lm_head.dense", LayerStructure(LayerGroup.HEAD, None, "lm_head.dense")),
        ("model.module.output_layer", LayerStructure(LayerGroup.HEAD, None, "output_layer")),
        ("model.head.dense", LayerStructure(LayerGroup.HEAD, None, "head.dense")),
        ("model.classifier", LayerStructure(LayerGroup.HEAD, None, "classifier")),
        ("model.bert.pooler.dense", LayerStructure(LayerGroup.HEAD, None, "pooler.dense")),
        # embeddings
        ("model.esm.embeddings", LayerStructure(LayerGroup.EMBEDDING, None, "embeddings")),
        ("model.esm.embeddings.word_embeddings", LayerStructure(LayerGroup.EMBEDDING, None, "word_embeddings")),
        ("model.model.embed_tokens", LayerStructure(LayerGroup.EMBEDDING, None, "embed_tokens")),
        ("model.module.embedding.word_embeddings", LayerStructure(LayerGroup.EMBEDDING, None, "word_embeddings")),
        ("model.transformer.wte", LayerStructure(LayerGroup.EMBEDDING, None, "wte")),
        ("model.transformer.wpe", LayerStructure(LayerGroup.EMBEDDING, None, "wpe")),
        ("model.embed", LayerStructure(LayerGroup.EMBEDDING, None, "embed")),
        # everything else
        ("model", LayerStructure(LayerGroup.OTHER, None, "model")),
        ("model.fc1", LayerStructure(LayerGroup.OTHER, None, "fc1")),
        ("model.model.norm", LayerStructure(LayerGroup.OTHER, None, "norm")),
        ("model.esm.encoder.rotary_embeddings", LayerStructure(LayerGroup.OTHER, None, "rotary_embeddings")),
        ("model.layers", LayerStructure(LayerGroup.OTHER, None, "layers")),
    ],
)
def test_layer_structure(layer: str, expected: LayerStructure) -> None:
    assert layer_structure(layer) == expected


def test_t5_encoder_and_decoder_blocks_stay_distinct() -> None:
    encoder = layer_structure("model.encoder.block.0.layer.1.DenseReluDense.wi")
    decoder = layer_structure("model.decoder.block.0.layer.2.DenseReluDense.wi")

    assert encoder.index == decoder.index == 0
    assert encoder != decoder


# --- order_key ----------------------------------------------------------------------------------------------------


def _shuffled(layers: list[str]) -> list[str]:
    copy = list(layers)
    random.Random(7).shuffle(copy)
    return copy


def test_order_key_sorts_esm2_in_model_order() -> None:
    subs = ("self_attention.layernorm_qkv", "self_attention.proj", "layernorm_mlp.fc1", "layernorm_mlp.fc2")
    body = [f"model.esm.encoder.layers.{i}.{sub}" for i in (1, 2, 10) for sub in subs]
    expected = ["model.esm.embeddings.word_embeddings", *body, "model.lm_head.dense"]

    assert sorted(_shuffled(expected), key=order_key) == expected


def test_order_key_sorts_megatron_gpt_and_hf_llama_in_model_order() -> None:
    megatron = [
        "model.module.embedding.word_embeddings",
        "model.module.decoder.layers.1.self_attention.linear_qkv",
        "model.module.decoder.layers.1.self_attention.linear_proj",
        "model.module.decoder.layers.1.mlp.linear_fc1",
        "model.module.decoder.layers.1.mlp.linear_fc2",
        "model.module.decoder.layers.2.self_attention.linear_qkv",
        "model.module.output_layer",
    ]
    llama = [
        "model.model.embed_tokens",
        "model.model.layers.0",
        "model.model.layers.0.self_attn.q_proj",
        "model.model.layers.0.self_attn.k_proj",
        "model.model.layers.0.self_attn.v_proj",
        "model.model.layers.0.self_attn.o_proj",
        "model.model.layers.0.mlp.down_proj",
        "model.lm_head",
    ]

    assert sorted(_shuffled(megatron), key=order_key) == megatron
    assert sorted(_shuffled(llama), key=order_key) == llama


def test_order_key_puts_t5_encoder_blocks_before_decoder_blocks() -> None:
    expected = [
        "model.encoder.block.0.layer.0.SelfAttention.q",
        "model.encoder.block.0.layer.1.DenseReluDense.wo",
        "model.encoder.block.1.layer.0.SelfAttention.o",
        "model.decoder.block.0.layer.0.SelfAttention.q",
        "model.decoder.block.0.layer.1.EncDecAttention.q",
        "model.decoder.block.0.layer.1.EncDecAttention.o",
        "model.decoder.block.0.layer.2.DenseReluDense.wi",
        "model.decoder.block.1.layer.0.SelfAttention.q",
        "model.lm_head",
    ]

    assert sorted(_shuffled(expected), key=order_key) == expected


def test_order_key_sorts_grouped_gemms_numerically() -> None:
    expected = [f"model.decoder.layers.1.mlp.experts.linear_fc1.gemm_{i}" for i in (0, 2, 10)]

    assert sorted(_shuffled(expected), key=order_key) == expected
