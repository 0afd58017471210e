"""Logged module names (Megatron-Core, Hugging Face, TE TransformerLayer) -> torchtitan 0.3's converter FQNs.

Belongs here: the name table, the MLA test, the approximation each mapping carries, the concrete torchtitan Linear
FQNs a target stands for (for loaders and checks). Must not be here: converters, rungs, the Python text
(torchtitan.py).

What the converters see (torchtitan 0.3.0 wheel): `MXFP8/NVFP4/Float8LinearConverter.convert` walk
`model_config.traverse(Linear.Config)` (torchtitan/config/configurable.py: the FQN "mirrors the module FQN that
build() would produce", list items numbered, `layers.0.feed_forward.w1`) and test `target in fqn` (substring,
components/quantization/{mx,nvfp4}.py; `utils.module_filter_fn` for Float8's exclude list). The models' config trees:
* Llama3 / Qwen3 (models/common/config_utils.py `make_gqa_config`; models/llama3/__init__.py and
  models/qwen3/__init__.py build with `fuse_qkv=True` by default): attention `layers.<i>.attention.qkv_linear.wqkv`
  (FusedQKVLinear: one GEMM for q, k, v), or with `fuse_qkv=False` `qkv_linear.wq` and `qkv_linear.wkv` (QKVLinear
  builds `wk` and `wv` from the ONE `wkv` config, models/common/attention.py: k and v cannot be told apart by a
  converter); `layers.<i>.attention.wo`; `layers.<i>.feed_forward.w1` (gate) / `w3` (up) / `w2` (down)
  (models/common/feed_forward.py); head `lm_head` (not 0.2's `output`).
* DeepSeek-V3 (models/deepseek_v3/model.py `Attention`, MLA): `attention.wq` (q_lora_rank 0) or `attention.wq_a` /
  `wq_b`, `attention.wkv_a`, `attention.wkv_b`, `attention.wo`; MoE blocks `moe.shared_experts.w1/w2/w3` (a
  FeedForward), `moe.router.gate`, routed experts one `GroupedExperts` (`moe.routed_experts.inner_experts`,
  models/common/moe.py) that only the grouped-experts converters take (no FQN selection); dense blocks
  `feed_forward.w1/w2/w3`.
The same correspondence is torchtitan's own Hugging Face checkpoint mapping (models/{llama3,qwen3,deepseek_v3}/
state_dict_adapter.py `from_hf_map`: q_proj -> attention.qkv_linear.wq, gate_proj -> feed_forward.w1, up_proj -> w3,
down_proj -> w2, kv_a_proj_with_mqa -> attention.wkv_a, shared_experts.gate_proj -> moe.shared_experts.w1, ...).
Megatron-Core names (megatron/core/models/gpt/gpt_layer_specs.py: `self_attention.linear_qkv` / `linear_proj`,
MLA `linear_q_proj` / `linear_q_down_proj` / `linear_q_up_proj` / `linear_kv_down_proj` / `linear_kv_up_proj`,
`mlp.linear_fc1` (gate and up fused under a gated linear unit) / `linear_fc2`, `mlp.shared_experts.*`,
`mlp.experts.*`, head `output_layer`) and TE TransformerLayer's (`self_attention.layernorm_qkv` / `proj`,
`layernorm_mlp.fc1` / `fc2`) are mapped onto the same modules.

Approximations (said by `Target.note`): q, k and v go to `attention.qkv_linear.` as one target (substring: the fused
`wqkv` and the separate `wq` + `wkv` alike), at the most precise rung any logged q/k/v projection needs; a fused fc1
(gate+up) goes to `w1` and `w3` together. Names outside these tables (other models, encoders) are left as logged
and called unmapped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEAD = "lm_head"
QKV = "attention.qkv_linear."  # a prefix: matches wqkv (fused, the 0.3 default) and wq + wkv (fuse_qkv=False)
_BLOCK = re.compile(r"^(?:model\.|decoder\.)?layers\.(?P<index>\d+)\.(?P<rest>.+)$")
_HEADS = {"output_layer", "lm_head", "model.lm_head", "output"}

FUSED_QKV = "fused q/k/v: one target for wqkv (fuse_qkv=True) or wq + wkv (fuse_qkv=False)"
QKV_TOGETHER = "q/k/v projections share one target (torchtitan fuses them in wqkv, or builds wk and wv from one wkv)"
FC1 = "fc1 (gate and up fused) -> feed_forward w1 and w3 together"

# path inside a block -> (torchtitan path(s) inside `layers.<i>.`, approximation or None when one-to-one)
_GQA: dict[str, tuple[tuple[str, ...], str | None]] = {
    "self_attention.linear_qkv": ((QKV,), FUSED_QKV),
    "self_attention.layernorm_qkv": ((QKV,), FUSED_QKV),
    "self_attn.q_proj": ((QKV,), QKV_TOGETHER),
    "self_attn.k_proj": ((QKV,), QKV_TOGETHER),
    "self_attn.v_proj": ((QKV,), QKV_TOGETHER),
}
_MLA: dict[str, tuple[tuple[str, ...], str | None]] = {
    "self_attention.linear_q_proj": (("attention.wq",), None),
    "self_attention.linear_q_down_proj": (("attention.wq_a",), None),
    "self_attention.linear_q_up_proj": (("attention.wq_b",), None),
    "self_attention.linear_kv_down_proj": (("attention.wkv_a",), None),
    "self_attention.linear_kv_up_proj": (("attention.wkv_b",), None),
    "self_attn.q_proj": (("attention.wq",), None),
    "self_attn.q_a_proj": (("attention.wq_a",), None),
    "self_attn.q_b_proj": (("attention.wq_b",), None),
    "self_attn.kv_a_proj_with_mqa": (("attention.wkv_a",), None),
    "self_attn.kv_b_proj": (("attention.wkv_b",), None),
}
_COMMON: dict[str, tuple[tuple[str, ...], str | None]] = {
    "self_attention.linear_proj": (("attention.wo",), None),
    "self_attention.proj": (("attention.wo",), None),
    "self_attn.o_proj": (("attention.wo",), None),
    "mlp.linear_fc1": (("feed_forward.w1", "feed_forward.w3"), FC1),
    "layernorm_mlp.fc1": (("feed_forward.w1", "feed_forward.w3"), FC1),
    "mlp.linear_fc2": (("feed_forward.w2",), None),
    "layernorm_mlp.fc2": (("feed_forward.w2",), None),
    "mlp.gate_proj": (("feed_forward.w1",), None),
    "mlp.up_proj": (("feed_forward.w3",), None),
    "mlp.down_proj": (("feed_forward.w2",), None),
    "mlp.shared_experts.linear_fc1": (("moe.shared_experts.w1", "moe.shared_experts.w3"), FC1),
    "mlp.shared_experts.linear_fc2": (("moe.shared_experts.w2",), None),
    "mlp.shared_experts.gate_proj": (("moe.shared_experts.w1",), None),
    "mlp.shared_experts.up_proj": (("moe.shared_experts.w3",), None),
    "mlp.shared_experts.down_proj": (("moe.shared_experts.w2",), None),
    "mlp.gate": (("moe.router.gate",), None),
}
_NATIVE = ("attention.", "feed_forward.", "moe.")  # already torchtitan's own names
# routed experts: TEGroupedMLP (`mlp.experts.linear_fc1[.gemm_<i>]`), SequentialMLP
# (`mlp.experts.local_experts.<e>.linear_fc1`), HF (`mlp.experts.<e>.gate_proj`)
_ROUTED = re.compile(r"^mlp\.experts\.(?:local_experts\.\d+\.)?(?:\d+\.)?\w+(?:\.gemm_\d+)?$")
_MLA_MARKERS = ("linear_q_down_proj", "linear_kv_down_proj", "kv_a_proj_with_mqa", "kv_b_proj", "q_a_proj")


@dataclass(frozen=True)
class Target:
    """Where a logged layer lands in torchtitan: converter FQNs (substring-matched), or the routed experts."""

    fqns: tuple[str, ...]
    note: str | None = None  # None: one logged module is one torchtitan module
    routed: bool = False  # a routed expert: the grouped-experts converters, no FQN


def is_mla(paths: list[str]) -> bool:
    """True when the logged names are Multi-Latent Attention (DeepSeek-V3): its q_proj is `attention.wq`."""
    return any(marker in path for path in paths for marker in _MLA_MARKERS)


def target(path: str, mla: bool) -> Target | None:
    """The torchtitan target of a logged module path (root/wrappers stripped, block index 0-based); None: unmapped."""
    if path in _HEADS:
        return Target((HEAD,))
    match = _BLOCK.match(path)
    if match is None:
        return None
    index, rest = match["index"], match["rest"]
    if _ROUTED.match(rest):
        return Target((), None, routed=True)
    if path.startswith("layers.") and rest.startswith(_NATIVE):
        return Target((path,))
    found = (_MLA if mla else _GQA).get(rest) or _COMMON.get(rest)
    if found is None:
        return None
    paths, note = found
    return Target(tuple(f"layers.{index}.{p}" for p in paths), note)


def concrete(fqn: str, fused_qkv: bool = True) -> tuple[str, ...]:
    """The torchtitan 0.3 `Linear.Config` FQNs a target stands for (the q/k/v prefix: `wqkv`, or `wq` and `wkv`)."""
    if not fqn.endswith("."):
        return (fqn,)
    return (fqn + "wqkv",) if fused_qkv else (fqn + "wq", fqn + "wkv")
