"""Layer and metric names as logged by TE / nvdlfw_inspect: splitting `<layer>_<tensor>_<stat>`, model structure, order.

Belongs here: pure string logic on names (no I/O, no numpy). Must not be here: reading logs, thresholds, decisions.

Conventions (nvdlfw_inspect `infer_and_assign_layer_names`, https://github.com/NVIDIA/nvidia-dlfw-inspect; TE debug tensor names):
* `split_metric_name` is called once per distinct name; it returns None when a name cannot be split.
* `layer_structure.index` is the block number exactly as logged (1-based under TE's `layer_number`, else 0-based).
* T5-style encoder-decoder stacks (`encoder.block.N`, `decoder.block.N`) keep the logged index and put the stack
  name in front of the sublayer (`"encoder.q"`, `"decoder.cross_proj"`, `"decoder.fc1"`), so encoder block 0 and
  decoder block 0 stay distinct. `encoder.layers.N` / `decoder.layers.N` (ESM2, BERT, Megatron GPT) get no prefix;
  `order_key` still puts an encoder stack before a decoder stack.
* Cross-attention GEMMs get a `cross_` prefix (`cross_q`, `cross_kv`, `cross_proj`) so they do not collide with
  the self-attention ones of the same block.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from fp8_policy.policy.records import (
    GEMM_OUTPUTS,
    QUANT_STATS,
    RECIPE_PREFIXES,
    SENSITIVITY_STAT,
    TENSOR_STATS,
    TENSORS,
    LayerGroup,
    LayerStructure,
    MetricName,
)

_METRIC = re.compile(rf"^(?P<layer>.+)_(?P<tensor>{'|'.join(TENSORS)})_(?P<stat>.+)$")  # greedy layer
_QSTAT = re.compile(
    rf"^(?:(?P<recipe>{'|'.join(RECIPE_PREFIXES)})_)?"
    rf"(?P<base>{'|'.join(map(re.escape, QUANT_STATS))})"
    r"(?P<columnwise>_columnwise)?$"
)
# Loss sensitivity of a GEMM output to a format (records.SENSITIVITY_STAT): the recipe prefix is required.
_SENSITIVITY = re.compile(rf"^(?P<recipe>{'|'.join(RECIPE_PREFIXES)})_{SENSITIVITY_STAT}$")
# TE LogTensorStats: plain stats plus str(BlockwiseDynamicRangeStat).
_TE_STAT = re.compile(
    rf"^(?:{'|'.join(TENSOR_STATS)}"
    r"|max_blockwise_dynamic_range_block_size_\d+_dims_\d+(?:_max_over_orientations)?)$"
)
# nvdlfw's generic LogTensorStats with a custom tensor name: only the stat suffix is known. Longest first.
_GENERIC_STAT = re.compile(rf"_(?P<stat>{'|'.join(sorted(TENSOR_STATS, key=len, reverse=True))})$")


def split_metric_name(name: str, known_layers: Collection[str] = ()) -> MetricName | None:
    """Split `<layer>_<tensor>_<stat>`; None when the name does not follow the grammar.

    TE names split at the LAST `_<tensor>_` with a known stat after it. Names whose tensor is a custom
    nvdlfw `tensor_name` (`model.fc1_relu_quant_act_max`) split at the known stat suffix, then at the longest
    `known_layers` entry that prefixes the rest, else at the first `_` after the last `.`. A standard tensor
    followed by an unknown stat is accepted last (stat kept verbatim), for stats added by later TE versions.
    """
    standard = _split_standard(name, strict=True)
    if standard is not None and (standard.layer in known_layers or _known_prefix(name, known_layers) is None):
        return standard
    return _split_custom(name, known_layers) or standard or _split_standard(name, strict=False)


def metric_of(layer: str, tensor: str, stat_key: str) -> MetricName:
    """The MetricName of a stored series from its stat as logged after the tensor (`mxfp8_underflows%_columnwise`
    -> stat `underflows%`, recipe `mxfp8`, columnwise); a stat outside the quantization grammar is kept whole."""
    quant = _QSTAT.match(stat_key)
    if quant is None:
        return MetricName(layer, tensor, stat_key)
    return MetricName(layer, tensor, quant["base"], quant["recipe"], quant["columnwise"] is not None)


def _split_standard(name: str, *, strict: bool) -> MetricName | None:
    match = _METRIC.match(name)
    if match is None:
        return None
    layer, tensor, stat = match["layer"], match["tensor"], match["stat"]
    quant = _QSTAT.match(stat)
    if quant is not None:
        return MetricName(layer, tensor, quant["base"], quant["recipe"], quant["columnwise"] is not None)
    sensitivity = _SENSITIVITY.match(stat) if tensor in GEMM_OUTPUTS.values() else None
    if sensitivity is not None:
        return MetricName(layer, tensor, SENSITIVITY_STAT, sensitivity["recipe"])
    if _TE_STAT.match(stat) or not strict:
        return MetricName(layer, tensor, stat)
    return None


def _split_custom(name: str, known_layers: Collection[str]) -> MetricName | None:
    match = _GENERIC_STAT.search(name)
    if match is None:
        return None
    head = name[: match.start()]  # "<layer>_<tensor>"
    layer = _known_prefix(head, known_layers)
    if layer is None:
        cut = head.find("_", head.rfind(".") + 1)
        layer = head[:cut] if cut > 0 else None
    if not layer or len(head) <= len(layer) + 1:
        return None
    return MetricName(layer, head[len(layer) + 1 :], match["stat"])


def _known_prefix(text: str, known_layers: Collection[str]) -> str | None:
    """The longest known layer L with `text` starting with `L_`, or None."""
    best = None
    for layer in known_layers:
        if text.startswith(layer + "_") and (best is None or len(layer) > len(best)):
            best = layer
    return best


# --- model structure -------------------------------------------------------------------------------------------

_BLOCK_CONTAINERS = frozenset({"layers", "layer", "h", "blocks", "block"})
_HEADS = frozenset({"lm_head", "output_layer", "head", "classifier", "pooler"})
_EMBEDDINGS = frozenset(
    {
        "embed",
        "embeddings",
        "embedding",
        "embed_tokens",
        "word_embeddings",
        "wte",
        "wpe",
        "position_embeddings",
        "token_type_embeddings",
        "embed_positions",
    }
)
_STACKS = ("encoder", "decoder")
_ATTENTION = frozenset({"self_attention", "self_attn", "attention", "attn", "selfattention", "self"})
_CROSS_ATTENTION = frozenset(
    {"inter_attention", "cross_attention", "encdecattention", "encoder_attn", "crossattention"}
)
_MLP = frozenset({"mlp", "layernorm_mlp", "feed_forward", "ffn", "densereludense"})

# Last path component (lower case) -> normalized GEMM name, whatever the context.
_GEMM_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ("layernorm_qkv", "linear_qkv", "qkv", "query_key_value", "c_attn", "layernorm_linear_qkv", "qkv_proj", "wqkv"),
        "qkv",
    ),
    **dict.fromkeys(("q", "query", "q_proj", "layernorm_query", "linear_q", "layernorm_linear_q"), "q"),
    **dict.fromkeys(("k", "key", "k_proj"), "k"),
    **dict.fromkeys(("v", "value", "v_proj"), "v"),
    **dict.fromkeys(("kv", "key_value", "linear_kv", "kv_proj"), "kv"),
    **dict.fromkeys(("proj", "linear_proj", "out_proj", "o_proj", "o"), "proj"),
    **dict.fromkeys(
        ("fc1", "linear_fc1", "dense_h_to_4h", "up_proj", "gate_proj", "c_fc", "wi", "wi_0", "wi_1"), "fc1"
    ),
    **dict.fromkeys(("fc2", "linear_fc2", "dense_4h_to_h", "down_proj"), "fc2"),
}
_SUBLAYER_ORDER = (
    "qkv",
    "q",
    "k",
    "v",
    "kv",
    "proj",
    "cross_qkv",
    "cross_q",
    "cross_k",
    "cross_v",
    "cross_kv",
    "cross_proj",
    "fc1",
    "fc2",
)
_GROUP_ORDER = {LayerGroup.EMBEDDING: 0, LayerGroup.BODY: 1, LayerGroup.OTHER: 2, LayerGroup.HEAD: 3}
_GROUPED_GEMM = re.compile(r"^gemm_\d+$")  # TE GroupedLinear logs `<name>.gemm_<i>`


def layer_structure(layer: str) -> LayerStructure:
    """Where `layer` sits: the outermost of embedding component, head component or `<container>.<N>` block wins."""
    parts = layer.split(".")
    block = _block_position(parts)
    head = _first_position(parts, _HEADS)
    embedding = _first_position(parts, _EMBEDDINGS)
    candidates = [
        (pos, group)
        for pos, group in ((block, LayerGroup.BODY), (head, LayerGroup.HEAD), (embedding, LayerGroup.EMBEDDING))
        if pos is not None
    ]
    if not candidates:
        return LayerStructure(LayerGroup.OTHER, None, parts[-1])
    pos, group = min(candidates, key=lambda item: item[0])
    if group is LayerGroup.HEAD:
        return LayerStructure(group, None, ".".join(parts[pos:]))
    if group is LayerGroup.EMBEDDING:
        return LayerStructure(group, None, parts[-1])
    return LayerStructure(group, int(parts[pos + 1]), _block_sublayer(parts, pos))


def block_index_at(layer: str) -> tuple[int, int] | None:
    """(position of the block number among the dot-separated components, the number) of a body layer, as
    `layer_structure` finds it (`decoder.layers.3.mlp` -> (2, 3)); None outside a block."""
    parts = layer.split(".")
    pos = _block_position(parts)
    return None if pos is None else (pos + 1, int(parts[pos + 1]))


def with_block_index(layer: str, index: int) -> str:
    """`layer` with its block number replaced (`decoder.layers.3.mlp`, 11 -> `decoder.layers.11.mlp`); a name
    outside a block is returned unchanged."""
    found = block_index_at(layer)
    if found is None:
        return layer
    parts = layer.split(".")
    parts[found[0]] = str(index)
    return ".".join(parts)


def order_key(layer: str) -> tuple[object, ...]:
    """Sort key for model order: embedding, body (stack, index, qkv/proj/fc1/fc2), other, head; then the name."""
    structure = layer_structure(layer)
    parts = layer.split(".")
    stack = _stack_of(parts, _block_position(parts))
    sublayer = structure.sublayer or ""
    if stack and (sublayer == stack or sublayer.startswith(stack + ".")):
        sublayer = sublayer[len(stack) + 1 :]
    base = sublayer.split(".")[0]
    if not base:
        rank = -1  # the block module itself comes before its GEMMs
    else:
        rank = _SUBLAYER_ORDER.index(base) if base in _SUBLAYER_ORDER else len(_SUBLAYER_ORDER)
    index = -1 if structure.index is None else structure.index
    stack_rank = _STACKS.index(stack) if stack else 0
    return (_GROUP_ORDER[structure.group], stack_rank, index, rank, _natural(sublayer), _natural(layer))


def _block_position(parts: list[str]) -> int | None:
    """Position of the outermost `<container>` component followed by a number (`layers.3`, `h.0`, `block.2`)."""
    for pos, part in enumerate(parts[:-1]):
        if part in _BLOCK_CONTAINERS and parts[pos + 1].isascii() and parts[pos + 1].isdigit():
            return pos
    return None


def _first_position(parts: list[str], names: frozenset[str]) -> int | None:
    return next((pos for pos, part in enumerate(parts) if part in names), None)


def _stack_of(parts: list[str], block: int | None) -> str | None:
    """`encoder`/`decoder` when that component sits anywhere before the block container."""
    if block is None:
        return None
    return next((part for part in reversed(parts[:block]) if part in _STACKS), None)


def _block_sublayer(parts: list[str], block: int) -> str | None:
    tail = parts[block + 2 :]
    sublayer = _gemm_name(tail) if tail else None
    if parts[block] == "block" and block > 0 and parts[block - 1] in _STACKS:  # T5: keep encoder/decoder apart
        stack = parts[block - 1]
        return f"{stack}.{sublayer}" if sublayer else stack
    return sublayer


def _gemm_name(tail: list[str]) -> str:
    """Normalized name of the GEMM at the end of `tail` (components after `<container>.<N>`)."""
    if len(tail) > 1 and _GROUPED_GEMM.match(tail[-1]):
        return f"{_gemm_name(tail[:-1])}.{tail[-1]}"
    last = tail[-1]
    context = {part.lower() for part in tail[:-1]}
    cross = bool(context & _CROSS_ATTENTION)
    attention = cross or bool(context & _ATTENTION)
    name = _GEMM_NAMES.get(last.lower())
    if name is None and last in ("dense", "c_proj", "wo"):
        name = _contextual_name(last, tail[-2] if len(tail) > 1 else "", attention, bool(context & _MLP))
    if name is None:
        return last
    return f"cross_{name}" if cross and name in ("qkv", "q", "k", "v", "kv", "proj") else name


def _contextual_name(last: str, parent: str, attention: bool, mlp: bool) -> str | None:
    """`dense` / `c_proj` / `wo` mean different GEMMs depending on where they sit (BERT, GPT-2, T5)."""
    if attention:
        return "proj"  # BERT attention.output.dense, GPT-2 attn.c_proj, GPT-NeoX attention.dense
    if parent == "intermediate":
        return "fc1"  # BERT intermediate.dense
    if mlp or parent == "output":
        return "fc2"  # GPT-2 mlp.c_proj, T5 DenseReluDense.wo, BERT output.dense
    return None


def _natural(text: str) -> tuple[tuple[int, object], ...]:
    """`layers.10` after `layers.2`: digit runs compare as numbers."""
    return tuple((0, int(chunk)) if chunk.isdecimal() else (1, chunk) for chunk in re.split(r"(\d+)", text) if chunk)
