"""Model families we emulate: how `infer_and_assign_layer_names` names their modules and TE GEMM layers.

Belongs here: `Family`, the `FAMILIES` table (ESM2, Llama, Megatron, GPT) and `LayerSpec`.
Must not be here: value profiles, scenarios, file writing, and any web or database import.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------------- families
_ATTN_TE = (
    "core_attention",
    "core_attention.flash_attention",
    "core_attention.fused_attention",
    "core_attention.unfused_attention",
    "core_attention.unfused_attention.scale_mask_softmax",
    "core_attention.unfused_attention.attention_dropout",
)
_TE_BLOCK = (
    "",
    "self_attention",
    "self_attention.layernorm_qkv",
    *(f"self_attention.{m}" for m in _ATTN_TE),
    "self_attention.proj",
    "layernorm_mlp",
)
_TE_GEMMS = (
    ("qkv", "self_attention.layernorm_qkv"),
    ("proj", "self_attention.proj"),
    ("fc1", "layernorm_mlp.fc1"),
    ("fc2", "layernorm_mlp.fc2"),
)

# Shared by the Megatron-Core families below (DDP-wrapped GPTModel, `model.module`): the modules the two MoE families
# assign before the first block and in a block's MoE MLP, what every Megatron family assigns after the last block,
# and the 8 routed experts' TEGroupedMLP GEMMs.
_MCORE_MOE_BEFORE = (
    "model",
    "model.module",
    "model.module.embedding",
    "model.module.embedding.word_embeddings",
    "model.module.decoder",
)
_MCORE_AFTER = ("model.module.decoder.final_layernorm", "model.module.output_layer")
_MCORE_MOE_MLP = (  # a block's MoE MLP modules: router, then the TEGroupedMLP experts
    "pre_mlp_layernorm",
    "mlp",
    "mlp.router",
    "mlp.experts",
    "mlp.experts.linear_fc1",
    "mlp.experts.linear_fc2",
)
_MCORE_EXPERT_GEMMS = (
    *(("fc1", f"mlp.experts.linear_fc1.gemm_{e}") for e in range(8)),
    *(("fc2", f"mlp.experts.linear_fc2.gemm_{e}") for e in range(8)),
)


@dataclass(frozen=True, slots=True)
class Family:
    """How `infer_and_assign_layer_names` names one model family (nvdlfw_inspect, https://github.com/NVIDIA/nvidia-dlfw-inspect)."""

    blocks: str  # ModuleList path; block i is f"{blocks}.{i}"
    gemms: tuple[tuple[str, str], ...]  # (role, suffix inside a block) in forward order
    heads: tuple[str, ...]  # TE GEMM layers after the blocks, in forward order
    before: tuple[str, ...]  # modules assigned before the first block
    block_modules: tuple[str, ...]  # modules inside a block in named_children order ("" = the block itself)
    after: tuple[str, ...]  # modules assigned after the last block


def _mcore_moe(
    gemms: tuple[tuple[str, str], ...], attention: tuple[str, ...], after_mlp: tuple[str, ...] = ()
) -> Family:
    """A Megatron-Core MoE GPTModel: `gemms` (attention, shared experts) then the routed experts' GEMMs in each
    block; a block's modules are its input layernorm, self_attention with its core attention and `attention`
    modules, the MoE MLP, then `after_mlp`."""
    return Family(
        "model.module.decoder.layers",
        (*gemms, *_MCORE_EXPERT_GEMMS),
        ("model.module.output_layer",),
        _MCORE_MOE_BEFORE,
        (
            "",
            "input_layernorm",
            "self_attention",
            "self_attention.core_attention",
            *attention,
            *_MCORE_MOE_MLP,
            *after_mlp,
        ),
        _MCORE_AFTER,
    )


FAMILIES: dict[str, Family] = {
    # Names as in the real bionemo ESM2 log: the heads are model.lm_head.dense / .decoder (not under model.esm).
    "esm2": Family(
        "model.esm.encoder.layers",
        _TE_GEMMS,
        ("model.lm_head.dense", "model.lm_head.decoder"),
        ("model", "model.esm", "model.esm.embeddings", "model.esm.embeddings.word_embeddings", "model.esm.encoder"),
        _TE_BLOCK,
        (
            "model.esm.encoder.emb_layer_norm_after",
            "model.esm.encoder.rotary_embeddings",
            "model.lm_head",
            "model.lm_head.dense",
            "model.lm_head.decoder",
        ),
    ),
    "llama": Family(
        "model.model.layers",
        _TE_GEMMS,
        ("model.lm_head",),
        ("model", "model.model", "model.model.embed_tokens"),
        _TE_BLOCK,
        ("model.model.norm", "model.model.rotary_emb", "model.lm_head"),
    ),
    "megatron": Family(
        "model.module.decoder.layers",
        (
            ("qkv", "self_attention.linear_qkv"),
            ("proj", "self_attention.linear_proj"),
            ("fc1", "mlp.linear_fc1"),
            ("fc2", "mlp.linear_fc2"),
        ),
        ("model.module.output_layer",),
        (
            "model",
            "model.module",
            "model.module.embedding",
            "model.module.embedding.word_embeddings",
            "model.module.embedding.embedding_dropout",
            "model.module.rotary_pos_emb",
            "model.module.decoder",
        ),
        (
            "",
            "input_layernorm",
            "self_attention",
            *(f"self_attention.{m}" for m in _ATTN_TE),
            "self_attention.linear_proj",
            "self_attention.linear_qkv",
            "pre_cross_attn_layernorm",
            "cross_attention",
            "pre_mlp_layernorm",
            "mlp",
            "mlp.linear_fc1",
            "mlp.linear_fc2",
        ),
        _MCORE_AFTER,
    ),
    # Megatron-Core MoE (TEGroupedMLP): each expert GEMM of TE's GroupedLinear logs as `<module>.gemm_<i>`
    # (megatron/core/transformer/moe/experts.py); 8 experts, numbered globally here (a parallel job's writer
    # numbers them per expert-parallel rank, as TE does).
    "megatron_moe": _mcore_moe(
        (("qkv", "self_attention.linear_qkv"), ("proj", "self_attention.linear_proj")),
        ("self_attention.linear_proj", "self_attention.linear_qkv"),
    ),
    # A DeepSeek-style Megatron-Core MoE block: multi-latent attention (megatron/core/transformer/
    # multi_latent_attention.py: linear_q_down_proj / linear_q_up_proj / linear_kv_down_proj / linear_kv_up_proj /
    # linear_proj), shared experts (moe/shared_experts.py SharedExpertMLP under `mlp.shared_experts`) and 8 routed
    # experts as TEGroupedMLP GEMMs `<module>.gemm_<i>`.
    "megatron_moe_mla": _mcore_moe(
        (
            ("q_down", "self_attention.linear_q_down_proj"),
            ("q_up", "self_attention.linear_q_up_proj"),
            ("kv_down", "self_attention.linear_kv_down_proj"),
            ("kv_up", "self_attention.linear_kv_up_proj"),
            ("proj", "self_attention.linear_proj"),
            ("shared_fc1", "mlp.shared_experts.linear_fc1"),
            ("shared_fc2", "mlp.shared_experts.linear_fc2"),
        ),
        (
            "self_attention.linear_q_down_proj",
            "self_attention.linear_q_up_proj",
            "self_attention.linear_kv_down_proj",
            "self_attention.linear_kv_up_proj",
            "self_attention.linear_proj",
        ),
        ("mlp.shared_experts", "mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"),
    ),
    "gpt": Family(
        "model.transformer.h",
        (("qkv", "attn.c_attn"), ("proj", "attn.c_proj"), ("fc1", "mlp.c_fc"), ("fc2", "mlp.c_proj")),
        ("model.lm_head",),
        ("model", "model.transformer", "model.transformer.wte", "model.transformer.wpe", "model.transformer.drop"),
        (
            "",
            "ln_1",
            "attn",
            "attn.c_attn",
            "attn.c_proj",
            "attn.attn_dropout",
            "attn.resid_dropout",
            "ln_2",
            "mlp",
            "mlp.c_fc",
            "mlp.c_proj",
            "mlp.act",
            "mlp.dropout",
        ),
        ("model.transformer.ln_f", "model.lm_head"),
    ),
}


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One TE GEMM layer of a synthetic run."""

    name: str  # exactly as in plan and stats lines
    role: str  # qkv | proj | fc1 | fc2 | head
    ordinal: int | None  # 0-based block position; None for heads
    index: int | None  # block number as logged (ordinal + first_index); None for heads
