"""Which underflow bands judge a series: the one rule every view reads (analysis, heatmap, live events).

Belongs here: NVFP4's bands as a `Thresholds`, a recipe's bands, the recipe the run metadata's `layer_recipes`
states for a layer, and `SeriesBands` (the bands of one logged series from its name and the run's metadata, for the
views that have no analysis: the live detectors and the heatmap's row levels). Must not be here: reading a layer's
recipe from its statistics (analysis/layer_formats.py), the derivation of the NVFP4 numbers (analysis/formats.py).
Lives in analysis/ (next to recipes.py, whose names it reads); the live path and the heatmap import it too.

Rule: a series is judged with the bands of the format it measures. `nvfp4_*` stats are NVFP4 casts
(LogNvfp4TensorStats, TE transformer_engine/debug/features/log_nvfp4_tensor_stats.py: a share of all elements, a
16-element block sharing one scale), so NVFP4's bands; any other prefix names an FP8 recipe's cast, so the FP8
bands; a bare stat is the layer's own quantizer (LogFp8TensorStats' bare stats use the layer's recipe and raise
under NVFP4), so the bands of the recipe the metadata states for that layer (`layer_recipes`, or the Megatron
precision config the job trained with: `Stated`), else FP8's. The batch analysis reaches
the same bands per layer (analysis/formats.py `TrainingFormat.layer_bands`, analysis/layout.py `own_bands`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fp8_policy.policy.analysis.megatron_config import BF16 as MEGATRON_BF16
from fp8_policy.policy.analysis.megatron_config import METADATA_KEY as MEGATRON_KEY
from fp8_policy.policy.analysis.megatron_config import module_path, one_based, parse_precision_config, stage_local
from fp8_policy.policy.analysis.recipes import PREFIX_RECIPE, normalize_recipe
from fp8_policy.policy.records import MetricName
from fp8_policy.policy.thresholds import Thresholds

UNDECIDED, E8M0, LINEAR = 0, 1, 2  # how a scale_inv series' values are read (policy/live/scales.py)
METADATA_KEY = "layer_recipes"  # run metadata: {layer name or fnmatch glob over logged names: recipe}


def nvfp4_bands(thresholds: Thresholds) -> Thresholds:
    """`thresholds` with NVFP4's warning / critical / severe underflow bands."""
    return replace(
        thresholds,
        warning=thresholds.nvfp4_warning,
        critical=thresholds.nvfp4_critical,
        severe=thresholds.nvfp4_severe,
    )


def recipe_bands(recipe: str | None, thresholds: Thresholds) -> Thresholds:
    """The bands a layer that trained in `recipe` is judged with: NVFP4's for NVFP4, `thresholds` (FP8's) else."""
    return nvfp4_bands(thresholds) if recipe == "nvfp4" else thresholds


def stated_patterns(metadata: Mapping[str, object]) -> list[tuple[str, str]]:
    """(pattern, recipe) of the metadata's `layer_recipes`, in the order given (unknown recipes left out)."""
    given = metadata.get(METADATA_KEY)
    if not isinstance(given, Mapping):
        return []
    return [(str(k), recipe) for k, v in given.items() if (recipe := normalize_recipe(v)) is not None]


def stated_recipe(patterns: list[tuple[str, str]], layer: str) -> tuple[str, str] | None:
    """(recipe, pattern) of the first `layer_recipes` entry naming `layer` (exact name or fnmatch glob)."""
    for pattern, recipe in patterns:
        if pattern == layer or fnmatch.fnmatchcase(layer, pattern):
            return recipe, pattern
    return None


@dataclass(frozen=True, slots=True)
class Stated:
    """The per-layer recipes a run's metadata states: `layer_recipes` (globs over logged names, the first naming a
    layer wins) and a Megatron precision config (`megatron_precision_config`, megatron_config.py: matchers over
    module paths, the first enabled match wins; a BF16 or custom config states no low-precision recipe: a BF16 one
    marks the layer as trained in BF16, config_bf16.py). `layer_recipes` first."""

    patterns: tuple[tuple[str, str], ...] = ()
    megatron: tuple[tuple[str, str | None], ...] = ()
    one_based: bool = False
    local: Callable[[int], int] | None = None  # global block -> its index on its pipeline stage (megatron_config)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, object] | None, layers: Iterable[str] = ()) -> Stated:
        """`layers`: the run's logged names (whether their block numbers are 1-based, for the Megatron matchers).
        A config Megatron would refuse states nothing here (an upload naming one is refused: service/limits.py)."""
        given = metadata or {}
        megatron: tuple[tuple[str, str | None], ...] = ()
        if given.get(MEGATRON_KEY) is not None:
            try:
                megatron = tuple(parse_precision_config(given[MEGATRON_KEY]))
            except ValueError:
                megatron = ()
        local = stage_local(given) if megatron else None  # Megatron's matchers see each stage's local paths
        return cls(tuple(stated_patterns(given)), megatron, one_based(layers) if megatron else False, local)

    def __bool__(self) -> bool:
        return bool(self.patterns or self.megatron)

    def recipe(self, layer: str) -> tuple[str, str] | None:
        """(recipe, where it is stated) for `layer`, None when nothing states one."""
        found = stated_recipe(list(self.patterns), layer)
        if found is not None:
            return found[0], f"the run metadata's layer_recipes ({found[1]!r})"
        matched = self.megatron_match(layer)
        if matched is None:
            return None
        pattern, recipe, path = matched
        if recipe is None or recipe == MEGATRON_BF16:
            return None  # custom factory / no override: unknown from the config; BF16: no low-precision recipe
        return recipe, f"the Megatron precision config's matcher {pattern!r} (module {path})"

    def megatron_match(self, layer: str) -> tuple[str, str | None, str] | None:
        """(pattern, recipe or `BF16` or None, module path) of the Megatron matcher that takes `layer`, if any."""
        if not self.megatron:
            return None
        path = module_path(layer, self.one_based, self.local)
        for pattern, recipe in self.megatron:
            if fnmatch.fnmatchcase(path, pattern):  # megatron quant_config.GlobMatcher: first enabled match
                return pattern, recipe, path
        return None


@dataclass(slots=True)
class SeriesBands:
    """The bands of each series of one run (module docstring), from its metadata; `choices` lists the distinct
    bands in use, `index` gives a series' position in it (the live detectors' per-row arrays)."""

    thresholds: Thresholds
    stated: Stated = field(default_factory=Stated)
    run_recipe: str | None = None  # the metadata's `recipe` / `fp8_recipe`
    choices: list[Thresholds] = field(init=False)
    _index: dict[tuple[str, str | None], int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.choices = [self.thresholds, nvfp4_bands(self.thresholds)]

    @classmethod
    def from_metadata(
        cls, thresholds: Thresholds, metadata: Mapping[str, object] | None, layers: Iterable[str] = ()
    ) -> SeriesBands:
        given = metadata or {}
        recipe = normalize_recipe(given.get("recipe") or given.get("fp8_recipe"))
        return cls(thresholds, Stated.from_metadata(given, layers), recipe)

    def recipe(self, metric: MetricName) -> str | None:
        """The format the series measures: its prefix's recipe, else the layer's stated recipe (None: FP8)."""
        if metric.recipe is not None:
            return PREFIX_RECIPE.get(metric.recipe, "current")
        found = self.stated.recipe(metric.layer) if self.stated else None
        return found[0] if found is not None else None

    def index(self, metric: MetricName) -> int:
        key = (metric.layer, metric.recipe)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = int(self.recipe(metric) == "nvfp4")
        return found

    def of(self, metric: MetricName) -> Thresholds:
        return self.choices[self.index(metric)]

    def scale_form(self, metric: MetricName) -> int:
        """How a scale_inv series is read before any value says more (policy/live/scales.py): E8M0 bytes when
        its format is MXFP8 (an `mxfp8_` prefix, a layer stated MXFP8, a bare stat of an MXFP8 run with no stated
        recipe for the layer), linear when it is another (another prefix, another stated recipe), else undecided
        (its first value off 1.0 decides, as the batch analysis reads a layer's bytes: layer_formats.py)."""
        if metric.recipe is not None:
            return E8M0 if metric.recipe == "mxfp8" else LINEAR
        stated = self.stated.recipe(metric.layer) if self.stated else None
        if stated is not None:
            return E8M0 if stated[0] == "mxfp8" else LINEAR
        return E8M0 if self.run_recipe == "mxfp8" else UNDECIDED

    def for_key(self, layer: str, stat_key: str) -> Thresholds:
        """The bands of `layer`'s series logged as `stat_key` (`nvfp4_underflows%`, `underflows%_columnwise`, ...)."""
        return self.of(MetricName(layer, "activation", "underflows%", stat_key_prefix(stat_key), False))


def stat_key_prefix(stat_key: str) -> str | None:
    """The recipe prefix of a logged stat key (`mxfp8_underflows%` -> `mxfp8`), None for a bare one."""
    return next((prefix for prefix in PREFIX_RECIPE if stat_key.startswith(prefix + "_")), None)
