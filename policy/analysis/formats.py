"""The training format of a run (TE 2.20 recipes) and what it changes before any statistic is summarised.

Belongs here: recognising the training recipe from metadata or from the stats present, the NVFP4 underflow bands,
reading MXFP8's E8M0 scale_inv bytes, and excluding impossible scale values (with a note naming them). Must not be
here: findings, recommendations, I/O.

Rules:
* Training recipe: the metadata's `recipe` / `fp8_recipe` (normalised); else none when the plan lines say every
  layer with stats ran in high precision (a BF16 run, e.g. our collector logging only what-ifs: `high_precision`);
  else inferred from the stats: `nvfp4_*` stats with no bare quantization stat → NVFP4BlockScaling, stated as an
  assumption (TE raises on bare LogFp8TensorStats stats under NVFP4 training); an `fp8_delayed_scaling_` prefix
  or bare `overflows%` → delayed (TE logs them only under delayed scaling); bare scale_inv values that are E8M0 bytes (below) → MXFP8; bare `_columnwise` stats (only MXFP8
  and block scaling have them) otherwise → block. Else unknown (the recommender then applies TE's
  `get_default_fp8_recipe` rule for the GPU, see recommend/recipe.py).
* E8M0 scale_inv. MXFP8 logs the E8M0 exponent byte as a float (`127.0000` = 1.0; TE
  `pytorch/tensor/mxfp8_tensor.py`): an `mxfp8_` what-if scale series, or a bare one under MXFP8 training, whose
  finite values are all integers in 0..255 is read as bytes and converted to 2^(v - 127) before any scale analysis
  (a swing 118 -> 128 is a factor 2^10). Byte 0 (padding, TE masks it in `nonzero_min`) and 255 (NaN) are
  impossible scales. Such a series that is not bytes is read as linear, with a note.
* TE before 2.17 reported `scale_inv_min` 0 for MXFP8 and NVFP4 (it took the min over the zero-padded scale buffer;
  TE #3041, first released in 2.17): with such a TE (or none named in the metadata) those zeros are a TE bug, not a
  signal: left out of every statistic, counted in one note (every point of such a series is one).
* Impossible scale values are excluded from every statistic and named in a note, never a finding: negative
  values, non-finite what-if (prefixed) values, and the impossible E8M0 bytes. TE's `fp8_block_scaling_scale_inv_*`
  can read its padded scale buffer (one H100 run with TE 2.20.2 logged -95602196480.0). A printed 0.0000 is a
  value below 5e-5 (censored, see signals.py), not an impossible zero, and stays.
* NVFP4 bands (`nvfp4_underflows%` is a share of all elements; TE `debug/features/utils/stats_computation.py`).
  FP8's 0.5 / 2 / 4 % do not apply: a 16-element block shares one E4M3 scale and E2M1 holds six magnitudes, so
  healthy data already loses several percent. `policy/nvfp4_emulation.py` emulates TE's NVFP4 cast on 4 draws of
  256x1024 Gaussian, Laplace and Student-t(4) tensors (worst draw per family): 1x16 blocks (activations,
  gradients) 6.82 / 12.88 / 10.26 %; 16x16 tiles (weights, TE's 2-D weight quantization) 10.15 / 22.45 / 22.57 %.
  warning = halfway between Gaussian and the heaviest healthy family, critical = the heaviest healthy family,
  severe = critical plus that family's excess over Gaussian once more, each rounded up to 0.5 pp: 1-D 10 / 13 /
  19.5 % (the `nvfp4_*` thresholds, settable per request), 2-D 16.5 / 23 / 35.5 % (`NVFP4_WEIGHT_BANDS`).
  tests/policy/analysis/test_nvfp4_bands.py recomputes both. Under NVFP4 training the analysis judges activation and
  gradient `nvfp4_underflows%` with the 1-D bands; weight `nvfp4_*` series (2-D tiles) are left out of the layer
  levels and judged by the precision ladder with the 2-D bands (recommend/ladder.py), said in a note. A layer's
  peers add the relative rule of the ladder: a level in the warning band and at least `NVFP4_PEER_RATIO` times its
  peers' median fails too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from fp8_policy.policy.analysis.format_bands import nvfp4_bands as nvfp4_bands  # re-exported: defined with the rule
from fp8_policy.policy.analysis.format_bands import recipe_bands
from fp8_policy.policy.analysis.layer_formats import layer_formats, mixed, mixed_note
from fp8_policy.policy.analysis.recipes import STAT_PREFIX, normalize_recipe
from fp8_policy.policy.analysis.signals import Signals
from fp8_policy.policy.records import QUANT_STATS, MetricName, Precision, RunData, Series
from fp8_policy.policy.thresholds import Thresholds

SCALE_STATS = ("scale_inv_min", "scale_inv_max")
NVFP4_WEIGHT_BANDS: tuple[float, float, float] = (16.5, 23.0, 35.5)  # 16x16 tiles: warning, critical, severe
NVFP4_PEER_RATIO = 2.0
SCALE_INV_MIN_FIX = (2, 17)  # TE #3041 (2026-06-01): first in v2.17 (git tag --contains 2055c6d2e)
E8M0_BIAS = 127
MAX_NAMED = 5


@dataclass(frozen=True, slots=True)
class ExcludedPoint:
    """One logged value that cannot be a scale, left out of every statistic."""

    name: str  # the metric name as logged
    rank: int
    iteration: int
    value: float
    reason: str

    def describe(self) -> str:
        return f"{self.name} rank {self.rank} iteration {self.iteration} = {self.value:g} ({self.reason})"


@dataclass(frozen=True, slots=True)
class TrainingFormat:
    """The run's training recipe (our name, None when unknown), where it came from, and what reading it changed."""

    recipe: str | None
    source: str
    e8m0_series: int = 0  # scale series read as E8M0 bytes and converted
    excluded: tuple[ExcludedPoint, ...] = ()
    notes: tuple[str, ...] = field(default=())
    high_precision: bool = False  # the plan lines say every layer with stats ran in BF16: all stats are what-ifs
    # layers that trained in another recipe than the run's, from their own evidence (layer_formats.py)
    layer_recipes: dict[str, str] = field(default_factory=dict)
    te_scale_inv_min_zeros: int = 0  # MXFP8/NVFP4 scale_inv_min zeros of a TE before 2.17 left out (TE #3041)
    e8m0_layers: frozenset[str] = frozenset()  # layers whose bare scale_inv series were E8M0 bytes (exact scales)

    def recipe_of(self, layer: str) -> str | None:
        """The recipe `layer` trained in: its own (a mixed-format run) or the run's."""
        return self.layer_recipes.get(layer, self.recipe)

    def bands(self, thresholds: Thresholds) -> Thresholds:
        """The thresholds the run's underflow levels are judged with: NVFP4's bands under NVFP4 training."""
        return recipe_bands(self.recipe, thresholds)

    def layer_bands(self, thresholds: Thresholds) -> dict[str, Thresholds]:
        """Layers judged with other bands than the run's (`thresholds`: the requested, FP8 ones): an NVFP4 layer of
        an FP8 run gets NVFP4's bands, an FP8 layer of an NVFP4 run FP8's."""
        run_fp4 = self.recipe == "nvfp4"
        return {
            name: recipe_bands(recipe, thresholds)
            for name, recipe in self.layer_recipes.items()
            if (recipe == "nvfp4") != run_fp4
        }

    def uncensor(self, signals: Signals) -> None:
        """Scale series read from E8M0 bytes are exact powers of two: none of their points is censored."""
        if not self.e8m0_series:
            return
        for metric, group in signals.summaries.items():
            if metric.stat in SCALE_STATS:
                for summary in group:
                    if summary.censored and _powers_of_two(summary.values):
                        summary.censored = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "recipe": self.recipe,
            "source": self.source,
            "e8m0_scale_series": self.e8m0_series,
            "excluded_scale_points": len(self.excluded),
            "layer_recipes": dict(self.layer_recipes),
            "te_scale_inv_min_zeros": self.te_scale_inv_min_zeros,
        }


def detect_training_recipe(run: RunData) -> tuple[str | None, str]:
    """(recipe, how it was known) from the metadata, else from the stats present (module docstring)."""
    given = run.metadata.get("recipe") or run.metadata.get("fp8_recipe")
    recipe = normalize_recipe(given)
    if recipe is not None:
        return recipe, f"from the run's metadata ({given})"
    quant = [s for s in run.series if s.metric.stat in QUANT_STATS]
    bare = [s for s in quant if s.metric.recipe is None]
    prefixes = {s.metric.recipe for s in quant}
    if trained_in_high_precision(run):
        return None, (
            "the plan lines say every layer with statistics ran in high precision (BF16): its "
            + "/".join(f"{p}_*" for p in sorted(p for p in prefixes if p))
            + " stats are what-ifs, not a training recipe"
        )
    if "nvfp4" in prefixes and not bare:
        return "nvfp4", (
            "assumed NVFP4 training: nvfp4_* stats (LogNvfp4TensorStats) and no bare LogFp8TensorStats stat, which "
            "TE refuses under NVFP4 training; nothing in the metadata says so (a run that trained in BF16 with "
            "nvfp4_ what-ifs has High Precision plan lines, or give the recipe)"
        )
    if "fp8_delayed_scaling" in prefixes or any(s.metric.stat == "overflows%" for s in bare):
        return "delayed", "inferred: overflows% / fp8_delayed_scaling_* are only logged under delayed scaling"
    scales = [s for s in bare if s.metric.stat in SCALE_STATS]
    if scales and _looks_e8m0(scales):
        return "mxfp8", "inferred: bare scale_inv values are E8M0 exponent bytes (integers around 127), as MXFP8 logs"
    if any(s.metric.columnwise for s in bare):
        return "block", "inferred: bare _columnwise stats (only MXFP8 and block scaling log them), not E8M0 bytes"
    return None, ""


def trained_in_high_precision(run: RunData) -> bool:
    """Every layer with quantization stats has plan lines, all "High Precision" (TE's plan for a GEMM it does not
    quantize; our collector writes it for a model that logs only what-ifs), so no stat is of a training cast."""
    logged = {s.metric.layer for s in run.series if s.metric.stat in QUANT_STATS}
    return bool(logged) and all(
        (info := run.layers.get(name)) is not None and info.precision is Precision.HIGH for name in logged
    )


def format_view(run: RunData) -> tuple[RunData, TrainingFormat]:
    """The run as analysis reads it (E8M0 converted, impossible scale values out, the detected recipe in its
    metadata, NVFP4 weight series left to the ladder) and what was done. Arrays not changed are shared."""
    recipe, source = detect_training_recipe(run)
    formats = layer_formats(run, recipe)
    own = {name: fmt.recipe for name, fmt in mixed(formats, recipe).items()}
    excluded: list[ExcludedPoint] = []
    notes: list[str] = mixed_note(formats, recipe)
    converted = te_zeros = te_zero_series = 0
    e8m0_layers: set[str] = set()
    te_bug = _scale_inv_min_bug(run.metadata.get("te_version"))
    series: list[Series] = []
    weights_left = 0
    linear: list[str] = []
    for s in run.series:
        m = s.metric
        layer_recipe = own.get(m.layer, recipe)
        if layer_recipe == "nvfp4" and m.recipe == "nvfp4" and m.tensor == "weight":
            weights_left += 1
            continue
        if m.stat not in SCALE_STATS:
            series.append(s)
            continue
        e8m0 = m.recipe == "mxfp8" or (m.recipe is None and layer_recipe == "mxfp8")
        if e8m0 and not _is_bytes(s.values):
            linear.append(_name(m))
            e8m0 = False
        fp4 = m.recipe == "nvfp4" or (m.recipe is None and layer_recipe == "nvfp4")
        bug_zeros = te_bug and m.stat == "scale_inv_min" and (e8m0 or fp4)
        screened, dropped, zeros = _screen(s, e8m0, bug_zeros)
        excluded += dropped
        te_zeros += zeros
        te_zero_series += int(zeros > 0)
        converted += int(e8m0)
        if e8m0 and m.recipe is None:
            e8m0_layers.add(m.layer)
        if screened.values.size:
            series.append(screened)
    if converted:
        notes.append(
            f"{converted} MXFP8 scale_inv series are E8M0 exponent bytes: read as 2^(v-127) (127 = 1.0) before any "
            "scale analysis."
        )
    if linear:
        more = f" and {len(linear) - 1} more" if len(linear) > 1 else ""
        notes.append(f"{linear[0]}{more}: MXFP8 scale_inv that is not E8M0 bytes (non-integer values), read as linear.")
    if excluded:
        shown = "; ".join(p.describe() for p in excluded[:MAX_NAMED])
        more = f" and {len(excluded) - MAX_NAMED} more" if len(excluded) > MAX_NAMED else ""
        notes.append(
            f"{len(excluded)} impossible scale_inv value(s) left out of every statistic (a scale cannot be negative, "
            f"non-finite or an E8M0 padding byte; TE's block-scaling scale_inv can read its padded buffer): "
            f"{shown}{more}."
        )
    if te_zeros:
        notes.append(
            f"{te_zeros} scale_inv_min value(s) of 0 in {te_zero_series} MXFP8/NVFP4 series left out of every "
            "statistic: TE before 2.17 took scale_inv_min over its zero-padded scale buffer and reported 0 (TE #3041, "
            "fixed in 2.17), so a 0 there is a TE bug, not a signal"
            + ("" if run.metadata.get("te_version") else " (the run's TE version is unknown: assumed older than 2.17)")
            + "."
        )
    if weights_left:
        notes.append(
            f"NVFP4 training: {weights_left} weight nvfp4_* series use 16x16 tiles (healthy Gaussian weights lose "
            "about 10 %); they are judged by the precision ladder with the 2-D bands "
            f"{'/'.join(f'{b:g}' for b in NVFP4_WEIGHT_BANDS)} %, not in the layer levels."
        )
    metadata = run.metadata
    if recipe is not None and normalize_recipe(metadata.get("recipe") or metadata.get("fp8_recipe")) != recipe:
        metadata = {**metadata, "recipe": recipe}
    view = replace(run, series=series, metadata=metadata)
    high = recipe is None and trained_in_high_precision(run)
    return view, TrainingFormat(
        recipe, source, converted, tuple(excluded), tuple(notes), high, own, te_zeros, frozenset(e8m0_layers)
    )


def band_note(training: TrainingFormat, thresholds: Thresholds) -> list[str]:
    """The sentence saying which bands judged the run, when they are not FP8's."""
    if training.recipe != "nvfp4":
        return []
    return [
        f"NVFP4 training: nvfp4_underflows% judged with NVFP4 bands {thresholds.nvfp4_warning:g} / "
        f"{thresholds.nvfp4_critical:g} / {thresholds.nvfp4_severe:g} % (warning / critical / severe, derived from "
        "an emulation of NVFP4 on healthy Gaussian and heavy-tailed tensors), not FP8's bands."
    ]


def stat_prefix(recipe: str | None) -> str | None:
    return STAT_PREFIX.get(recipe or "")


def e8m0_to_scale(values: np.ndarray) -> np.ndarray:
    """E8M0 exponent bytes -> the power-of-two scales they encode (127 -> 1.0)."""
    return np.exp2(np.asarray(values, dtype=np.float64) - E8M0_BIAS)


def _scale_inv_min_bug(te_version: object) -> bool:
    """Whether this TE may log scale_inv_min 0 for MXFP8/NVFP4 (before 2.17, TE #3041; unknown: assumed so)."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", str(te_version)) if isinstance(te_version, (str, int, float)) else None
    return found is None or (int(found[1]), int(found[2])) < SCALE_INV_MIN_FIX


def _screen(series: Series, e8m0: bool, bug_zeros: bool = False) -> tuple[Series, list[ExcludedPoint], int]:
    """The series without impossible scale values (named, each) and without TE #3041's zeros (`bug_zeros`: only
    counted; a TE before 2.17 logs one at every point)."""
    values = series.values
    plain = not e8m0 and not bug_zeros and series.metric.recipe is None
    if plain and not (values < 0).any():  # the common case, one pass
        return series, [], 0
    finite = np.isfinite(values)
    zeros = finite & (values == 0) if bug_zeros else np.zeros(values.shape, dtype=bool)
    bad = finite & ((values <= 0) | (values >= 255)) if e8m0 else finite & (values < 0)
    bad &= ~zeros
    if series.metric.recipe is not None:  # a non-finite what-if scale is no training event
        bad |= ~finite
    if not e8m0 and not bad.any() and not zeros.any():
        return series, [], 0
    keep = ~(bad | zeros)
    name = _name(series.metric)
    dropped = [
        ExcludedPoint(name, series.rank, int(series.iterations[i]), float(values[i]), _reason(float(values[i]), e8m0))
        for i in np.flatnonzero(bad)
    ]
    kept = values[keep]
    if e8m0:
        kept = np.where(np.isfinite(kept), e8m0_to_scale(kept), kept)
    return Series(series.rank, series.metric, series.iterations[keep], kept), dropped, int(zeros.sum())


def _reason(value: float, e8m0: bool) -> str:
    if not np.isfinite(value):
        return "non-finite what-if scale"
    if e8m0:
        return "E8M0 byte 0: padding" if value <= 0 else "E8M0 byte 255: NaN"
    return "negative"


def _powers_of_two(values: np.ndarray) -> bool:
    positive = values[values > 0]
    return positive.size == values.size and bool(np.all(np.log2(positive) == np.round(np.log2(positive))))


def _is_bytes(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return bool(finite.size) and bool(np.all((finite == np.round(finite)) & (finite >= 0) & (finite <= 255)))


def _looks_e8m0(scales: list[Series]) -> bool:
    """Bare scale_inv values that can only be E8M0 bytes: all integers in 0..255, at least 3 distinct, median >= 64
    (a per-tensor FP8 scale_inv of 64 would mean an amax of 28672)."""
    seen: set[float] = set()
    medians: list[float] = []
    for s in scales:  # stops at the first series that is not bytes (a per-tensor FP8 run: at once)
        finite = s.values[np.isfinite(s.values)]
        if finite.size == 0:
            continue
        if not _is_bytes(finite):
            return False
        seen.update((float(finite.min()), float(finite.max())))
        medians.append(float(np.median(finite)))
    return len(seen) >= 3 and bool(medians) and float(np.median(medians)) >= 64


def _name(metric: MetricName) -> str:
    return f"{metric.layer}_{metric.tensor}_{metric.stat_key}"
