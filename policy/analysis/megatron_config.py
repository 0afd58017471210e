"""A Megatron-LM precision config (`--te-precision-config-file`) given as run metadata, read into per-module recipes.

Belongs here: parsing the config the job trained with (run metadata `megatron_precision_config`: the YAML text, or
the same structure as a JSON object) into ordered (glob, recipe) matchers, refusing one Megatron would refuse, and
the Megatron module path of a logged layer name. Who applies the matchers to layers: format_bands.py (`Stated`).
Must not be here: writing such a config (policy/render/megatron.py).

Schema, as Megatron-LM's own loader reads it (NVIDIA/Megatron-LM main):
* megatron/core/quantization/quant_config.py `RecipeConfig.from_yaml_file` (yaml.SafeLoader) ->
  `from_config_dict`: `matchers` (a mapping, in order) and `configs` (name -> payload). `_build_matchers` drops a
  matcher unless `enabled` is true (default false), requires `type` (only "glob" is implemented: NotImplementedError
  otherwise), `pattern` and `config`; `match_to_config_key`: the first enabled matcher whose fnmatch pattern matches
  the module path wins; `match` looks the key up in `configs` (an unknown name is a KeyError).
* megatron/core/quantization/utils.py `get_quant_config_or_none(module_path, recipe)`; GPTModel passes every
  `named_modules()` path with `finish_init` (`decoder.layers.<i>.mlp.linear_fc1`, a TEGroupedLinear's
  `...mlp.experts.linear_fc1` for all its experts).
* megatron/core/extensions/transformer_engine.py `TEQuantizationParams.parse_from_config`: `transformer_engine_config
  _type: TEQuantizationParams`, `training_recipe` required, `evaluation_recipe` optional, no other key (asserted);
  each through `TEQuantizationRecipe.parse_from_config`: only its dataclass fields (`fp8_quantization_recipe`
  (megatron/core/enums.py Fp8Recipe: delayed refused per module, tensorwise, mxfp8, blockwise, custom),
  `fp4_quantization_recipe` (Fp4Recipe: nvfp4, custom), never both, `custom` needing `custom_recipe_factory`,
  `fp8_format` "e4m3" (default) or "hybrid" (`_get_fp8_autocast_for_quant_recipe` raises on anything else),
  `override_quantized_autocast` (default true), `override_nonquantized_autocast` (default false), ...).
How a matched module trains (`_get_fp8_autocast_for_quant_params(qparams, training)`): the TRAINING recipe while
`self.training`; `evaluation_recipe` replaces it only when not training (validation / eval forward passes), so it
never sets the precision the logged training statistics were taken in: it is checked as Megatron checks it and
otherwise ignored. In a quantized context (the run's `--fp8-format` / `--fp4-format` recipe) a config applies only
with `override_quantized_autocast` (the default); with neither fp8 nor fp4 recipe it opens
`fp8_autocast(enabled=False)`: the module trains in BF16.
Recipes read: nvfp4 -> nvfp4, mxfp8 -> mxfp8, blockwise -> block, tensorwise -> current; neither -> `BF16` (the
layer trained in BF16: config_bf16.py marks it where its logs do not say otherwise); `custom` -> None (a factory's
formats are not in the config: the layer's recipe comes from its logs, and the run says so); a config with
`override_quantized_autocast: false` -> None (it changes nothing in a quantized context, and which contexts were not
quantized the config does not say). A matched module takes no later matcher either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

METADATA_KEY = "megatron_precision_config"
BF16 = "bf16"  # a config with neither an fp8 nor an fp4 recipe: the module trains in BF16
MAX_CONFIG_CHARS = 200_000
FP8_RECIPES = {"tensorwise": "current", "blockwise": "block", "mxfp8": "mxfp8", "custom": None}
FP4_RECIPES = {"nvfp4": "nvfp4", "custom": None}
RECIPE_KEYS = frozenset(
    {
        "fp8_quantization_recipe",
        "fp4_quantization_recipe",
        "custom_recipe_factory",
        "fp8_format",
        "override_quantized_autocast",
        "override_nonquantized_autocast",
        "tp_only_amax_red",
        "fp8_param",
        "fp4_param",
    }
)
PARAMS_KEYS = frozenset({"transformer_engine_config_type", "training_recipe", "evaluation_recipe"})
FP8_FORMATS = ("e4m3", "hybrid")
_BLOCK = re.compile(r"(?:^|\.)decoder\.layers\.(\d+)(?=\.|$)")
_GEMM = re.compile(r"\.gemm_\d+$")


def parse_precision_config(given: object) -> list[tuple[str, str | None]]:
    """(fnmatch pattern over Megatron module paths, recipe: ours, `BF16`, or None for custom / no override) in
    matcher order; ValueError naming what Megatron's loader would refuse."""
    config = _load(given)
    configs = config.get("configs") or {}
    if not isinstance(configs, Mapping):
        raise ValueError("'configs' must be a mapping of config name -> TEQuantizationParams")
    matchers = config.get("matchers")
    if matchers is None:
        return []
    if not isinstance(matchers, Mapping):
        raise ValueError("'matchers' must be a mapping of matcher name -> {type, pattern, config, enabled}")
    out: list[tuple[str, str | None]] = []
    for name, matcher in matchers.items():
        if not isinstance(matcher, Mapping):
            raise ValueError(f"matcher {name!r} must be a mapping")
        if not matcher.get("enabled", False):
            continue  # quant_config._build_matchers: a matcher is off unless enabled
        if matcher.get("type") != "glob":
            raise ValueError(f"matcher {name!r}: type must be 'glob' (the only match type Megatron implements)")
        pattern, key = matcher.get("pattern"), matcher.get("config")
        if not isinstance(pattern, str) or not isinstance(key, str):
            raise ValueError(f"matcher {name!r} must give 'pattern' and 'config' as strings")
        if key not in configs:
            raise ValueError(f"matcher {name!r} names config {key!r}, which 'configs' does not define")
        out.append((pattern, _recipe(key, configs[key])))
    return out


def module_path(layer: str, one_based: bool, local: Callable[[int], int] | None = None) -> str:
    """The Megatron `named_modules()` path a logged layer name stands for: from `decoder.` on (root and wrapper
    levels dropped), the block index made 0-based when the logs use TE's 1-based layer numbers, a GroupedLinear's
    `.gemm_<i>` folded into its module; a name without `decoder.layers.` as logged. `local`: global 0-based block ->
    its index on its pipeline stage (`stage_local`): under pipeline parallelism each stage's `TransformerBlock`
    numbers its ModuleList from 0 (megatron/core/transformer/transformer_block.py `_build_layers`), and those are
    the paths the matchers see."""
    found = _BLOCK.search(layer)
    if found is None:
        return _GEMM.sub("", layer)
    index = int(found.group(1)) - (1 if one_based else 0)
    if local is not None:
        index = local(index)
    rest = layer[found.end() :]
    return _GEMM.sub("", f"decoder.layers.{index}{rest}")


def stage_local(metadata: Mapping[str, object]) -> Callable[[int], int] | None:
    """Global 0-based block -> its ModuleList index on its pipeline stage (its model chunk under VPP), from the
    layout the metadata states (policy/parallel: `layout_from_metadata`, `block_home`); None without pipeline
    parallelism or when the stated layout does not place every block (the global index is kept)."""
    from fp8_policy.policy.parallel.layout import layout_from_metadata
    from fp8_policy.policy.parallel.stages import StageError, block_home, check_stages

    layout = layout_from_metadata(metadata).layout
    if layout is None or layout.pp <= 1 or not layout.num_layers:
        return None
    try:
        check_stages(layout)
    except StageError:
        return None

    def local(block: int) -> int:
        try:
            return block_home(layout, block)[2]
        except StageError:
            return block

    return local


def one_based(layers: Any) -> bool:
    """Whether logged names number Megatron blocks from 1 (no `decoder.layers.0` among them)."""
    indices = [int(m.group(1)) for name in layers if (m := _BLOCK.search(str(name))) is not None]
    return bool(indices) and min(indices) != 0


def _load(given: object) -> Mapping[str, Any]:
    if isinstance(given, str):
        if len(given) > MAX_CONFIG_CHARS:
            raise ValueError(f"is longer than {MAX_CONFIG_CHARS} characters")
        import yaml  # only when a run states such a config

        try:
            loaded = yaml.safe_load(given)  # RecipeConfig.from_yaml_file: yaml.SafeLoader
        except yaml.YAMLError as exc:
            raise ValueError(f"is not valid YAML: {str(exc).splitlines()[0]}") from None
        given = loaded
    if not isinstance(given, Mapping):
        raise ValueError("must be the precision config's YAML text or a mapping with 'configs' and 'matchers'")
    return given


def _recipe(key: str, payload: object) -> str | None:
    """The training recipe of one TEQuantizationParams payload (module docstring: ours, `BF16`, or None)."""
    if not isinstance(payload, Mapping) or payload.get("transformer_engine_config_type") != "TEQuantizationParams":
        raise ValueError(f"config {key!r} must have transformer_engine_config_type: TEQuantizationParams")
    extra = sorted(str(k) for k in payload if k not in PARAMS_KEYS)
    if extra:
        raise ValueError(f"config {key!r}: key(s) {', '.join(extra)} not valid (training_recipe, evaluation_recipe)")
    if "training_recipe" not in payload:
        raise ValueError(f"config {key!r} must have a training_recipe")
    if "evaluation_recipe" in payload:
        _checked(key, "evaluation_recipe", payload["evaluation_recipe"])  # eval passes only: checked, not read
    training = _checked(key, "training_recipe", payload["training_recipe"])
    if training.get("override_quantized_autocast", True) is False:
        return None
    fp8, fp4 = training.get("fp8_quantization_recipe"), training.get("fp4_quantization_recipe")
    if fp8 is not None:
        return FP8_RECIPES[fp8]
    if fp4 is not None:
        return FP4_RECIPES[fp4]
    return BF16


def _checked(key: str, which: str, recipe: object) -> Mapping[str, Any]:
    """One TEQuantizationRecipe as `parse_from_config` and the autocast helpers check it."""
    if recipe is None:
        recipe = {}
    if not isinstance(recipe, Mapping):
        raise ValueError(f"config {key!r}: {which} must be a mapping")
    unknown = sorted(str(k) for k in recipe if k not in RECIPE_KEYS)
    if unknown:
        raise ValueError(f"config {key!r}: {which} field(s) {', '.join(unknown)} not valid")
    fp8, fp4 = recipe.get("fp8_quantization_recipe"), recipe.get("fp4_quantization_recipe")
    if fp8 is not None and fp4 is not None:
        raise ValueError(f"config {key!r}: fp8 and fp4 quantization settings are mutually exclusive")
    if fp8 == "delayed":
        raise ValueError(f"config {key!r}: delayed scaling is not allowed in a per-module config")
    if fp8 is not None and fp8 not in FP8_RECIPES:
        raise ValueError(f"config {key!r}: fp8_quantization_recipe {fp8!r} is not one of {', '.join(FP8_RECIPES)}")
    if fp4 is not None and fp4 not in FP4_RECIPES:
        raise ValueError(f"config {key!r}: fp4_quantization_recipe {fp4!r} is not one of {', '.join(FP4_RECIPES)}")
    if "custom" in (fp8, fp4) and recipe.get("custom_recipe_factory") is None:
        raise ValueError(f"config {key!r}: a custom fp8 or fp4 recipe requires custom_recipe_factory")
    if fp8 is not None and recipe.get("fp8_format", "e4m3") not in FP8_FORMATS:
        raise ValueError(f"config {key!r}: fp8_format {recipe.get('fp8_format')!r} is not e4m3 or hybrid")
    return recipe
