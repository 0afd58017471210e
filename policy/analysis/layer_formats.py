"""The format each layer trained in, read from that layer's own evidence (mixed-format runs).

Belongs here: `layer_formats` (layer -> recipe and why) and the one-line note that names a mixed run. Must not be
here: the run-level recipe (formats.py `detect_training_recipe`), bands, findings, rungs.

Why per layer: a run can train under one outer recipe with some modules on another (Megatron's
`--te-precision-config-file` matchers, TE `CustomRecipe`, nested `te.autocast`), e.g. an NVFP4 run whose last four
blocks run MXFP8. The run-level recipe alone would read those blocks' plain `underflows%` as NVFP4 statistics.
Rules, from TE's own debug features (transformer_engine/debug/features/):
* Plan lines saying high precision: the layer ran in BF16 (not in this map; analysis/layout.py). Plan lines never
  say WHICH low-precision format: TE writes "Quantize" for every parent quantizer, FP8, MXFP8 and NVFP4 alike
  (transformer_engine/debug/pytorch/debug_quantization.py `STANDARD_QUANTIZE`, `log_messages_about_plans`), and TE
  logs no recipe name at init. The one metadata-log line that tells a format is `Feature=LogNvfp4TensorStats,
  API=inspect_tensor: <tensor>`: `LogNvfp4TensorStats.inspect_tensor` writes it only after its
  `isinstance(quantizer, NVFP4Quantizer)` check passed, in the same call that feeds the layer's `nvfp4_` stats
  (log_nvfp4_tensor_stats.py), so it says nothing those stats do not (it is not read); `Feature=LogFp8TensorStats`
  is written for any quantizer (an NVFP4 layer's recipe-prefixed what-ifs too) and says no format. A layer's format
  therefore comes from its statistics (below) and the run metadata, never from its plan lines.
* `nvfp4_*` stats and no bare quantization stat: NVFP4. `LogNvfp4TensorStats.inspect_tensor` skips any quantizer
  that is not an `NVFP4Quantizer` (log_nvfp4_tensor_stats.py), so TE writes `nvfp4_` names only for NVFP4 layers;
  the CPU collector's `nvfp4_` what-ifs come with bare stats (or high-precision plan lines).
* Bare stats (`underflows%`, `scale_inv_min`, ...): an FP8 quantizer, since LogFp8TensorStats' bare stats use the
  layer's own recipe and raise under NVFP4 (log_fp8_tensor_stats.py). Which FP8 recipe: bare scale_inv values that
  are E8M0 exponent bytes (integers 0..255, median >= 64; formats.py) -> MXFP8; bare `overflows%` or an
  `fp8_delayed_scaling_` prefix -> delayed; bare `_columnwise` stats that are not E8M0 -> block; otherwise the
  run's recipe when it is an FP8 recipe with per-tensor scales, else per-tensor current scaling, stated as an
  assumption (an MXFP8 run's layer whose scales are not E8M0 bytes, or an NVFP4 run's FP8 layer without them).
* Run metadata `layer_recipes` ({layer name or fnmatch glob over logged names: recipe}) wins over all of the above
  for the layers it names (the precision config the job trained with, as the uploader states it); then a Megatron
  `--te-precision-config-file` given as metadata `megatron_precision_config` (megatron_config.py), its matchers
  applied to each layer's Megatron module path as Megatron applies them.
* Anything else (no quantization stats): the run's recipe.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fp8_policy.policy.analysis.format_bands import Stated
from fp8_policy.policy.analysis.recipes import FP8_RECIPES
from fp8_policy.policy.records import QUANT_STATS, Precision, RunData, Series

SCALE_STATS = ("scale_inv_min", "scale_inv_max")
MAX_NAMED = 4


@dataclass(frozen=True, slots=True)
class LayerFormat:
    """The recipe one layer trained in (our name) and the evidence that says so."""

    recipe: str
    source: str


def layer_formats(run: RunData, run_recipe: str | None) -> dict[str, LayerFormat]:
    """Layer -> the recipe it trained in, for every layer with quantization stats (module docstring)."""
    stated = _stated(run.metadata, run.layers)
    by_layer: dict[str, list[Series]] = defaultdict(list)
    for s in run.series:
        if s.metric.stat in QUANT_STATS:
            by_layer[s.metric.layer].append(s)
    e8m0 = {layer: _scales_are_e8m0(series) for layer, series in by_layer.items()}
    any_e8m0 = any(flag for flag in e8m0.values())
    out: dict[str, LayerFormat] = {}
    for layer, series in by_layer.items():
        info = run.layers.get(layer)
        if info is not None and info.precision is Precision.HIGH:
            continue
        found = stated.get(layer) or _from_stats(series, run_recipe, e8m0[layer], any_e8m0)
        if found is not None:
            out[layer] = found
    for layer, fmt in stated.items():
        info = run.layers.get(layer)
        if info is None or info.precision is not Precision.HIGH:
            out.setdefault(layer, fmt)
    return out


def mixed(formats: Mapping[str, LayerFormat], run_recipe: str | None) -> dict[str, LayerFormat]:
    """The layers whose own recipe is not the run's."""
    return {name: fmt for name, fmt in formats.items() if fmt.recipe != run_recipe}


def mixed_note(formats: Mapping[str, LayerFormat], run_recipe: str | None) -> list[str]:
    """One line naming a mixed-format run: how many layers trained in which recipe, and from what evidence."""
    differ = mixed(formats, run_recipe)
    if not differ:
        return []
    groups: dict[str, list[str]] = defaultdict(list)
    for name, fmt in differ.items():
        groups[fmt.recipe].append(name)
    parts = []
    for recipe, names in groups.items():
        shown = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
        parts.append(f"{len(names)} layer(s) in {recipe} ({differ[names[0]].source}): {shown}")
    return [
        f"Mixed-format run: the run's recipe is {run_recipe or 'unknown'}, but {'; '.join(parts)}. Each layer is read "
        "with its own format's statistics and bands, and never offered a cheaper rung without evidence for it."
    ]


def _scales_are_e8m0(series: list[Series]) -> bool:
    scales = [s for s in series if s.metric.recipe is None and s.metric.stat in SCALE_STATS]
    return bool(scales) and is_e8m0(scales)


def _from_stats(series: list[Series], run_recipe: str | None, e8m0: bool, run_has_e8m0: bool) -> LayerFormat | None:
    bare = [s for s in series if s.metric.recipe is None]
    prefixes = {s.metric.recipe for s in series if s.metric.recipe is not None}
    if not bare:
        if "nvfp4" in prefixes:
            return LayerFormat("nvfp4", "nvfp4_* stats and no bare LogFp8TensorStats stat: TE logs them only for NVFP4")
        return None
    if "fp8_delayed_scaling" in prefixes or any(s.metric.stat == "overflows%" for s in bare):
        return LayerFormat("delayed", "overflows% / fp8_delayed_scaling_* are logged only under delayed scaling")
    if e8m0:
        return LayerFormat("mxfp8", "its bare scale_inv values are E8M0 exponent bytes")
    if any(s.metric.columnwise for s in bare):
        return LayerFormat("block", "bare _columnwise stats that are not E8M0 bytes")
    scales = any(s.metric.stat in SCALE_STATS for s in bare)
    # an MXFP8 run whose layers all log linear scales logs that way (formats.py reads them as linear, with a note);
    # only next to layers with E8M0 bytes does a linear scale say "another recipe"
    own = run_recipe in FP8_RECIPES and (run_recipe != "mxfp8" or not scales or not run_has_e8m0)
    if own and run_recipe is not None:
        return LayerFormat(run_recipe, "bare stats under the run's recipe")
    if run_recipe is None:
        return None
    why = "not E8M0 bytes" if scales else "no scale_inv to tell the FP8 recipe"
    return LayerFormat("current", f"assumed per-tensor current scaling: bare LogFp8TensorStats stats ({why})")


def is_e8m0(scales: list[Series]) -> bool:
    """Bare scale_inv series that can only be E8M0 exponent bytes: every finite value an integer in 0..255 and a
    median of at least 64 over the series that are not all zero (a per-tensor FP8 scale_inv of 64 would mean an
    amax of 28672; TE before 2.17 logged scale_inv_min 0 for MXFP8: all-zero series say nothing)."""
    medians: list[float] = []
    for s in scales:
        finite = s.values[np.isfinite(s.values)]
        if finite.size == 0:
            continue
        if not bool(np.all((finite == np.round(finite)) & (finite >= 0) & (finite <= 255))):
            return False
        if finite.any():
            medians.append(float(np.median(finite)))
    return bool(medians) and float(np.median(medians)) >= 64


def _stated(metadata: Mapping[str, object], layers: Mapping[str, object]) -> dict[str, LayerFormat]:
    """Layers the run metadata states a recipe for: `layer_recipes`, then a Megatron precision config
    (format_bands.py `Stated`)."""
    stated = Stated.from_metadata(metadata, layers)
    if not stated:
        return {}
    out: dict[str, LayerFormat] = {}
    for name in layers:
        found = stated.recipe(name)
        if found is not None:
            out[name] = LayerFormat(found[0], found[1])
    return out
