"""What a Megatron precision config says beyond a layer's recipe: the layers it trains in BF16, and the layers
whose recipe it leaves to a custom factory.

Belongs here: marking a layer as trained in BF16 (`Precision.HIGH`, as plan lines of a disabled layer would) when
the run's Megatron precision config matches it with a config that has neither an fp8 nor an fp4 recipe
(megatron_config.py: Megatron opens `fp8_autocast(enabled=False)` for it, transformer_engine.py
`_get_fp8_autocast_for_quant_recipe`), and the note naming both kinds. The logs win: a layer with plan lines or
quantized statistics keeps what they say (a config that did not apply, e.g. another stage's file, is not
believed over them). Must not be here: parsing the config (megatron_config.py), bands (format_bands.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from fp8_policy.policy.analysis.format_bands import Stated
from fp8_policy.policy.analysis.megatron_config import BF16, METADATA_KEY
from fp8_policy.policy.records import LayerInfo, Precision, RunData

MAX_NAMED = 4


def matched(run: RunData) -> tuple[dict[str, str], dict[str, str]]:
    """({layer: matcher pattern} the config trains in BF16 and whose logs say nothing else, {layer: pattern} whose
    config is a custom factory or leaves a quantized context alone: recipe from the logs only)."""
    if run.metadata.get(METADATA_KEY) is None:
        return {}, {}
    stated = Stated.from_metadata(run.metadata, run.layers)
    bf16: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for name, info in run.layers.items():
        found = stated.megatron_match(name)
        if found is None or stated.recipe(name) is not None:  # `layer_recipes` or a stated recipe decides
            continue
        pattern, recipe = found[0], found[1]
        if recipe == BF16 and _logs_silent(info):
            bf16[name] = pattern
        elif recipe is None:
            unknown[name] = pattern
    return bf16, unknown


def with_config_bf16(run: RunData) -> RunData:
    """The run with the layers its Megatron config trains in BF16 marked `Precision.HIGH`; the same object when
    there are none (arrays always shared)."""
    bf16, _unknown = matched(run)
    if not bf16:
        return run
    layers = {
        name: replace(info, precision=Precision.HIGH) if name in bf16 else info for name, info in run.layers.items()
    }
    if all(layers[name] == run.layers[name] for name in bf16):
        return run  # marked already
    return replace(run, layers=layers)


def config_notes(run: RunData) -> list[str]:
    """Lines for the analysis notes: the layers marked BF16 by the config, the layers whose recipe it leaves open."""
    bf16, unknown = matched(run)
    out = []
    if bf16:
        out.append(
            f"{len(bf16)} layer(s) trained in BF16 per the Megatron precision config (a config with no fp8/fp4 recipe: "
            f"{_patterns(bf16)}), their logs showing no quantization: {_names(bf16)}."
        )
    if unknown:
        out.append(
            f"{len(unknown)} layer(s) matched by a Megatron precision config that names no recipe for them (a custom "
            f"recipe factory, or override_quantized_autocast: false; {_patterns(unknown)}): their recipe is read from "
            f"their logs only: {_names(unknown)}."
        )
    return out


def _logs_silent(info: LayerInfo) -> bool:
    """No quantization in the logs: no plan lines (or plan lines of high precision, e.g. already marked) and no
    quantized statistics."""
    return info.precision in (Precision.UNKNOWN, Precision.HIGH) and not info.has_fp8_stats


def _names(layers: Mapping[str, str]) -> str:
    names = list(layers)
    return ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _patterns(layers: Mapping[str, str]) -> str:
    return "matcher(s) " + ", ".join(repr(p) for p in dict.fromkeys(layers.values()))
