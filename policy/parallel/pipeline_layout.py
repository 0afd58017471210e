"""Megatron-LM's explicit pipeline layout string (`--pipeline-model-parallel-layout`), read without executing it.

Belongs here: turning a layout such as `"Ettt|(tt|)*29,m|L"` into, per pipeline rank and virtual stage, the number
of decoder layers it builds, following `megatron/core/transformer/pipeline_parallel_layer_layout.py`
(`PipelineParallelLayerLayout.parse_str_to_list` for the grammar: `E` embedding, `L` loss, `t` decoder, `m` MTP,
`|` between stages, `(...)*n` and `x*n` repeats, cosmetic commas; `__init__` for the order of the stages: stage `s`
of the flat list is pipeline rank `s % pp`, virtual stage `s // pp`).
Must not be here: offsets and names (stages.py), anything that reads metadata (layout.py).

Megatron expands the repeats with `re.sub`; a client-given `"(t)*1000000000"` would allocate gigabytes, so the
expansion here is computed arithmetically and refused past MAX_LAYOUT_STAGES stages or MAX_LAYOUT_LAYERS layers.
"""

from __future__ import annotations

import re

MAX_LAYOUT_CHARS = 10_000  # the layout text as given
MAX_LAYOUT_STAGES = 4_096  # pipeline ranks x virtual stages after expansion
MAX_LAYOUT_LAYERS = 100_000  # layer symbols after expansion

_LAYER_CHARS = frozenset("ELtm")
# Megatron's two substitution passes, verbatim (`parse_str_to_list`).
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")
_MAX_FIRST_PASS_CHARS = 1_000_000


class LayoutError(ValueError):
    """The layout text is not Megatron's grammar, or expands past the bounds."""


def stage_decoder_counts(layout: str | list[list[str]], pipeline_size: int) -> tuple[tuple[int, ...], ...]:
    """Decoder layers (`t`) per pipeline rank and virtual stage: `counts[pp_rank][vp_stage]`.

    `layout` is Megatron's string or its list form (a list of per-stage lists of layer-type names or symbols).
    Raises LayoutError when the text cannot be read, expands past the bounds, or its stage count is not a multiple
    of `pipeline_size` (Megatron asserts the same in `PipelineParallelLayerLayout.__init__`).
    """
    stages = _stages_from_list(layout) if isinstance(layout, list) else _stages_from_text(layout)
    if pipeline_size < 1 or len(stages) % pipeline_size:
        raise LayoutError(
            f"the layout has {len(stages)} stage(s), not a multiple of pipeline_model_parallel_size {pipeline_size}"
        )
    virtual = len(stages) // pipeline_size
    return tuple(
        tuple(stages[vp * pipeline_size + pp].count("t") for vp in range(virtual)) for pp in range(pipeline_size)
    )


def _stages_from_list(layout: list[list[str]]) -> list[str]:
    names = {"embedding": "E", "loss": "L", "decoder": "t", "mtp": "m"}
    if len(layout) > MAX_LAYOUT_STAGES:
        raise LayoutError(f"the layout has more than {MAX_LAYOUT_STAGES} stages")
    stages, total = [], 0
    for row in layout:
        if not isinstance(row, list):
            raise LayoutError("a list layout holds one list of layer types per stage")
        symbols = []
        for item in row:
            text = str(item).strip()
            symbol = names.get(text.lower(), text if text in _LAYER_CHARS else None)
            if symbol is None:
                raise LayoutError(f"unknown layer type {text[:40]!r} (embedding, decoder, mtp, loss)")
            symbols.append(symbol)
        total += len(symbols)
        if total > MAX_LAYOUT_LAYERS:
            raise LayoutError(f"the layout has more than {MAX_LAYOUT_LAYERS} layers")
        stages.append("".join(symbols))
    return stages


def _stages_from_text(text: str) -> list[str]:
    if not isinstance(text, str) or len(text) > MAX_LAYOUT_CHARS:
        raise LayoutError(f"a layout is a string of at most {MAX_LAYOUT_CHARS} characters")
    text = text.replace(",", "")  # purely cosmetic commas, as Megatron drops them
    for pattern, bound in ((_GROUP, _MAX_FIRST_PASS_CHARS), (_SINGLE, MAX_LAYOUT_LAYERS + MAX_LAYOUT_STAGES)):
        size = len(text) + sum(len(m.group(1)) * _count(m.group(2)) - len(m.group(0)) for m in pattern.finditer(text))
        if size > bound:
            raise LayoutError(f"the layout expands past {MAX_LAYOUT_LAYERS} layers and {MAX_LAYOUT_STAGES} stages")
        text = pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)
    bad = set(text) - _LAYER_CHARS - {"|"}
    if bad:
        raise LayoutError(f"invalid layer character(s) {''.join(sorted(bad))[:20]!r}; known: E, L, t, m and |")
    stages = text.split("|")
    if len(stages) > MAX_LAYOUT_STAGES:
        raise LayoutError(f"the layout has more than {MAX_LAYOUT_STAGES} stages")
    return stages


def _count(digits: str) -> int:
    if len(digits) > 7:
        raise LayoutError(f"a repeat count of {len(digits)} digits is past any layout")
    return int(digits)
