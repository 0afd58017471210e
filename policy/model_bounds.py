"""Bounds of the model dimensions a client may state (run metadata, recommendation options): what each may be at most.

A dimension is read in many places (the analysis's body blocks, the recommendation's FLOP shares, the Megatron
section, a parallel layout), and some of them allocate or loop in proportion to it: `num_layers` made the layout
build `set(range(num_layers))`, and a run whose metadata said 10**18 layers made every analysis of it (the runs
list's background summary included) allocate until the kernel killed the process. So every dimension is a
positive integer within its bound here, wherever it enters:
* a request's options (`model_dims` of POST .../recommendation) past a bound are refused (the 400 names the bound,
  `checked_dimension`);
* run metadata past a bound is ignored, and the analysis and the recommendation say so in a note
  (`metadata_dimension`): metadata is advisory, a run with odd metadata still gets its verdict.

The bounds are sanity ceilings far above any model trained so far, not facts about models: the deepest published
Transformers have 1,000 layers (DeepNet, Wang et al. 2022, https://arxiv.org/abs/2203.00555), the widest hidden
sizes are in the tens of thousands (PaLM 540B: 18,432), the largest vocabularies a few hundred thousand tokens,
the largest training jobs some 10^5 GPUs. Megatron-LM names the parallel sizes `tensor_model_parallel_size`,
`pipeline_model_parallel_size`, `context_parallel_size`, `expert_model_parallel_size` (megatron/core/
parallel_state.py `initialize_model_parallel`) and the expert count `num_moe_experts` (megatron/core/
transformer/transformer_config.py `TransformerConfig`).

Pure: no web, database or file-system imports. Belongs here: the bounds and the checks against them. The HTTP
bounds of a request (ids, paging, body sizes) are service/limits.py's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

MAX_NUM_LAYERS = 10_000
MAX_HIDDEN_SIZE = 1 << 20
MAX_FFN_HIDDEN_SIZE = 1 << 22
MAX_SEQ_LEN = 1 << 24
MAX_VOCAB_SIZE = 1 << 24
MAX_NUM_ATTENTION_HEADS = 1 << 14
MAX_WORLD_SIZE = 1 << 20  # GPUs of one job
MAX_PARALLEL_SIZE = 1 << 16  # any one parallel dimension (tensor, pipeline, context, expert, data)
MAX_NUM_EXPERTS = 1 << 16

# Canonical dimension name -> its bound (inclusive). Spellings (`num_hidden_layers`, `n_layer`, ...) are the
# caller's to map onto these names.
BOUNDS: dict[str, int] = {
    "num_layers": MAX_NUM_LAYERS,
    "hidden_size": MAX_HIDDEN_SIZE,
    "ffn_hidden_size": MAX_FFN_HIDDEN_SIZE,
    "seq_len": MAX_SEQ_LEN,
    "vocab_size": MAX_VOCAB_SIZE,
    "num_attention_heads": MAX_NUM_ATTENTION_HEADS,
    "num_query_groups": MAX_NUM_ATTENTION_HEADS,
    "world_size": MAX_WORLD_SIZE,
    "tensor_model_parallel_size": MAX_PARALLEL_SIZE,
    "pipeline_model_parallel_size": MAX_PARALLEL_SIZE,
    "context_parallel_size": MAX_PARALLEL_SIZE,
    "expert_model_parallel_size": MAX_PARALLEL_SIZE,
    "data_parallel_size": MAX_PARALLEL_SIZE,
    "num_moe_experts": MAX_NUM_EXPERTS,
}


def dimension_problem(name: str, value: Any, *, key: str | None = None) -> str | None:
    """Why `value` is no usable value of the dimension `name` (as given under `key`, default `name`), or None.
    Usable: a positive integer (an integral float such as 24.0 too, never a bool) of at most BOUNDS[name]."""
    shown = key or name
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or int(value) != value
        or value <= 0
    ):
        return f"model dimension {shown!r} must be a positive integer, got {_short(value)}"
    bound = BOUNDS[name]
    if value > bound:
        return f"model dimension {shown!r} must be at most {bound:,} (the bound of {name}), got {_short(value)}"
    return None


def checked_dimension(name: str, value: Any, *, key: str | None = None) -> int:
    """`value` as the int it is, or ValueError saying why not (the bound named when it is past it)."""
    problem = dimension_problem(name, value, key=key)
    if problem is not None:
        raise ValueError(problem)
    return int(value)


def metadata_dimension(
    metadata: Mapping[str, Any], name: str, keys: Iterable[str] | None = None
) -> tuple[int | None, str | None]:
    """The dimension `name` from run metadata (the first of `keys` present, default `name` itself): (its value,
    None), (None, None) when absent, or (None, a note) when given but unusable: ignored, and the note says so."""
    for key in keys or (name,):
        if key in metadata and metadata[key] is not None:
            problem = dimension_problem(name, metadata[key], key=key)
            if problem is None:
                return int(metadata[key]), None
            return None, f"Run metadata ignored: {problem}."
    return None, None


def _short(value: Any) -> str:
    """A value as the message shows it: 60 characters at most (a 20-digit number stays whole)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
