"""A test-side re-implementation of how Megatron-LM loads and applies `--te-precision-config-file`.

Read from NVIDIA/Megatron-LM (main, d98e8a6):
* megatron/training/argument_utils.py: `--te-precision-config-file` -> `load_quantization_recipe(path)`;
* megatron/core/quantization/utils.py: `load_quantization_recipe` = `RecipeConfig.from_yaml_file`;
  `get_quant_config_or_none(module_path, recipe)` matches one module path;
* megatron/core/quantization/quant_config.py: `RecipeConfig.from_yaml_file` (yaml.SafeLoader),
  `from_config_dict` (`matchers`, `configs`), `_build_matchers` (in YAML order; disabled ones dropped; `type`
  required, only "glob"; `pattern` and `config` required), `match_to_config_key` (first matcher wins),
  `match` (`self.configs[config_key]`: a KeyError for an unknown config name), `GlobMatcher` (fnmatch);
* megatron/core/models/gpt/gpt_model.py: after construction, for every `(name, module)` of
  `self.named_modules()` that has `finish_init`, `finish_init(get_quant_config_or_none(name, recipe))`;
* megatron/core/extensions/transformer_engine.py: `TEQuantizationParams.parse_from_config` (the
  `transformer_engine_config_type` key must be "TEQuantizationParams"; `training_recipe` required; no other key
  than `evaluation_recipe`), `TEQuantizationRecipe.parse_from_config` (only its dataclass fields; delayed
  rejected; FP8 and FP4 exclusive; custom needs custom_recipe_factory) and `_get_fp8_autocast_for_quant_recipe`
  (`fp8_format` must be "e4m3" or "hybrid"; no recipe at all = BF16); megatron/core/enums.py `Fp8Recipe`,
  `Fp4Recipe`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise", "custom")  # megatron/core/enums.py Fp8Recipe
FP4_RECIPES = ("nvfp4", "custom")  # Fp4Recipe


@dataclass
class TEQuantizationRecipe:
    fp8_quantization_recipe: str | None = None
    fp4_quantization_recipe: str | None = None
    custom_recipe_factory: str | None = None
    fp8_format: str = "e4m3"
    override_quantized_autocast: bool = True
    override_nonquantized_autocast: bool = False
    tp_only_amax_red: bool = False
    fp8_param: bool = False
    fp4_param: bool = False

    @classmethod
    def parse(cls, config: dict) -> TEQuantizationRecipe:
        keys = {f.name for f in fields(cls)}
        for key in config:
            if key not in keys:
                raise ValueError(f"Field '{key}' not valid for this configuration.")
        recipe = cls(**config)
        if recipe.fp8_quantization_recipe is not None and recipe.fp8_quantization_recipe not in FP8_RECIPES:
            raise ValueError(f"{recipe.fp8_quantization_recipe!r} is not a valid Fp8Recipe")
        if recipe.fp4_quantization_recipe is not None and recipe.fp4_quantization_recipe not in FP4_RECIPES:
            raise ValueError(f"{recipe.fp4_quantization_recipe!r} is not a valid Fp4Recipe")
        if recipe.fp8_quantization_recipe == "delayed":
            raise ValueError("Delayed scaling not in scope of te per-module quantization config.")
        if recipe.fp8_quantization_recipe is not None and recipe.fp4_quantization_recipe is not None:
            raise ValueError("fp8 and fp4 quantization settings are mutually exclusive.")
        custom = "custom" in (recipe.fp8_quantization_recipe, recipe.fp4_quantization_recipe)
        if custom and recipe.custom_recipe_factory is None:
            raise ValueError("custom fp8 or fp4 recipe requires custom_recipe_factory")
        if recipe.fp8_quantization_recipe is not None and recipe.fp8_format not in ("e4m3", "hybrid"):
            raise ValueError(f"Unhandled fp8_format {recipe.fp8_format}")
        return recipe

    @property
    def precision(self) -> str:
        """Our ladder name for what the module runs at: bf16, nvfp4, mxfp8, block or current."""
        if self.fp4_quantization_recipe:
            return self.fp4_quantization_recipe
        names = {"mxfp8": "mxfp8", "blockwise": "block", "tensorwise": "current"}
        return names[self.fp8_quantization_recipe] if self.fp8_quantization_recipe else "bf16"


def parse_params(config: dict) -> TEQuantizationRecipe:
    """TEQuantizationParams.parse_from_config: the training recipe of one `configs.<name>` entry."""
    if "transformer_engine_config_type" not in config:
        raise ValueError("TransformerEngine config dictionary must have 'transformer_engine_config_type' key.")
    if config["transformer_engine_config_type"] != "TEQuantizationParams":
        raise ValueError(f"Unsupported config type '{config['transformer_engine_config_type']}'.")
    if "training_recipe" not in config:
        raise ValueError("TransformerEngine config dictionary must have 'training_recipe' key")
    training = TEQuantizationRecipe.parse(config["training_recipe"])
    if "evaluation_recipe" in config:
        TEQuantizationRecipe.parse(config["evaluation_recipe"])
        assert len(config) == 3
    else:
        assert len(config) == 2
    return training


class RecipeConfig:
    """quant_config.RecipeConfig: ordered glob matchers -> config names."""

    def __init__(self, config: dict) -> None:
        self.configs: dict = config.get("configs", {})
        self.matchers: list[tuple[str, str]] = []
        for matcher in (config.get("matchers") or {}).values():
            if not matcher.get("enabled", False):
                continue
            assert matcher.get("type") is not None, 'Matcher must specify a "type" field'
            if matcher["type"] != "glob":
                raise NotImplementedError(f"Match type '{matcher['type']}' not implemented")
            assert matcher.get("pattern") is not None and matcher.get("config") is not None
            self.matchers.append((matcher["pattern"], matcher["config"]))

    @classmethod
    def from_yaml_file(cls, path: Path) -> RecipeConfig:
        return cls(yaml.load(path.read_text(), Loader=yaml.SafeLoader))

    def match(self, module_path: str) -> TEQuantizationRecipe | None:
        """None: no matcher (the module keeps the outer autocast); else the parsed training recipe."""
        for pattern, key in self.matchers:
            if fnmatch.fnmatch(module_path, pattern):
                return parse_params(self.configs[key])
        return None


SUBLAYERS = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def gpt_te_module_paths(num_layers: int) -> list[str]:
    """The GPTModel.named_modules() paths that have `finish_init` (the TE linears of a dense GPT layer spec,
    megatron/core/models/gpt/gpt_layer_specs.py); `output_layer` is a ColumnParallelLinear without it."""
    return [f"decoder.layers.{i}.{sub}" for i in range(num_layers) for sub in SUBLAYERS]


def gpt_all_module_paths(num_layers: int) -> list[str]:
    """Every named_modules() path of a small dense GPTModel (for checking that globs hit nothing else)."""
    out = ["", "embedding", "embedding.word_embeddings", "embedding.position_embeddings", "decoder", "decoder.layers"]
    for i in range(num_layers):
        block = f"decoder.layers.{i}"
        out += [block, f"{block}.input_layernorm", f"{block}.self_attention", f"{block}.self_attention.core_attention"]
        out += [f"{block}.{sub}" for sub in SUBLAYERS]
        out += [f"{block}.pre_mlp_layernorm", f"{block}.mlp"]
    return out + ["decoder.final_layernorm", "output_layer"]


def precisions(config_path: Path, num_layers: int, outer: str) -> dict[str, str]:
    """Module path -> the precision Megatron runs it at (`outer` where no matcher applies), as GPTModel does."""
    recipe = RecipeConfig.from_yaml_file(config_path)
    out = {}
    for path in gpt_te_module_paths(num_layers):
        matched = recipe.match(path)
        out[path] = outer if matched is None else matched.precision
    return out
