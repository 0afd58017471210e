"""torchao's MXFP8 / NVFP4 training config classes across torchao versions: the resolver functions the torchao
snippet carries, so it runs on the torchao its user has.

Belongs here: the candidate (module, class, construction) table and the text of the resolvers. Must not be here: the
filter or the FQNs (torchao.py).

Read from pytorch/ao's history (torchao/prototype/moe_training/):
* 0.14-0.16: `conversion_utils.MoETrainingConfig(scaling_type=MoEScalingType.MXFP8)` (grouped experts only);
* main 2026-02 to 2026-03 (#3862): `config.MXFP8GroupedMMConfig` (`MXFP8GroupedMMRecipe`);
* 0.17, 0.18 and main 2026-08 (#3968): `config.MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)`,
  applied with `torchao.quantization.quantize_(model, config, filter_fn=...)` to nn.Linear and grouped experts;
  `nvfp4_training.nvfp4_training.NVFP4TrainingConfig()` (dense nn.Linear, 0.18);
* announced renames (not in a release we could read, tried last): `config.MXFP8TrainingConfig`,
  `torchao.prototype.mx_formats.grouped_mm.config.MXFP8GroupedMMConfig`.
"""

from __future__ import annotations

# (module, class name, how to build it) in the order tried: the newest known first
MXFP8_CANDIDATES: tuple[tuple[str, str, str], ...] = (
    ("torchao.prototype.moe_training.config", "MXFP8TrainingOpConfig", "from_recipe:MXFP8TrainingRecipe.MXFP8_RCEIL"),
    ("torchao.prototype.moe_training.config", "MXFP8TrainingConfig", "call"),
    ("torchao.prototype.mx_formats.grouped_mm.config", "MXFP8GroupedMMConfig", "call"),
    ("torchao.prototype.moe_training.config", "MXFP8GroupedMMConfig", "call"),
    ("torchao.prototype.moe_training.conversion_utils", "MoETrainingConfig", "scaling_type:MoEScalingType.MXFP8"),
)
NVFP4_CANDIDATES: tuple[tuple[str, str, str], ...] = (
    ("torchao.prototype.moe_training.nvfp4_training.nvfp4_training", "NVFP4TrainingConfig", "call"),
    ("torchao.prototype.moe_training.nvfp4_training", "NVFP4TrainingConfig", "call"),
)

RESOLVER = '''

def _resolve(candidates):
    """The first torchao training config these candidates name that this torchao has, built; None if none."""
    import importlib

    for module_name, class_name, build in candidates:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, class_name, None)
        if cls is None:
            continue
        how, _, arg = build.partition(":")
        if how == "call":
            return cls()
        enum_name, _, member = arg.partition(".")
        value = getattr(getattr(module, enum_name), member)
        return cls.from_recipe(value) if how == "from_recipe" else cls(**{how: value})
    return None


def mxfp8_training_config():
    """torchao's MXFP8 training config (quantize_ it with module_filter_fn), whatever its class name here."""
    return _resolve(MXFP8_CANDIDATES)


def nvfp4_training_config():
    """torchao's NVFP4 training config for dense nn.Linear (torchao >= 0.18); None when this torchao has none."""
    return _resolve(NVFP4_CANDIDATES)
'''


def resolver_lines() -> list[str]:
    """The candidate tables and the resolver functions, as lines of the snippet."""
    return [
        f"MXFP8_CANDIDATES = {MXFP8_CANDIDATES!r}",
        f"NVFP4_CANDIDATES = {NVFP4_CANDIDATES!r}",
        *RESOLVER.rstrip("\n").split("\n"),
    ]


def usage_lines(recipe: str) -> list[str]:
    """The usage comment for an MXFP8 or NVFP4 recipe (empty for the float8 recipes)."""
    if recipe == "mxfp8":
        return [
            "# MXFP8 (torchao prototype; the class is resolved above across torchao versions):",
            "#   from torchao.quantization import quantize_",
            "#   quantize_(model, mxfp8_training_config(), filter_fn=module_filter_fn)",
        ]
    if recipe == "nvfp4":
        return [
            "# NVFP4 (torchao >= 0.18 prototype, dense nn.Linear only; its grouped GEMM is emulated only):",
            "#   from torchao.quantization import quantize_",
            "#   config = nvfp4_training_config() or mxfp8_training_config()  # MXFP8 where NVFP4 is missing",
            "#   quantize_(model, config, filter_fn=module_filter_fn)",
        ]
    return []
