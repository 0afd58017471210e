"""What the collector logs and when, with the keys of TE's LogFp8TensorStats YAML section.

Belongs here: `TensorSpec` (tensor, stats, freq, start_step, end_step, start_end_list), its schedule, and
`options_from_te_config`, which reads a TE debug config (file or dict; LogFp8TensorStats and LogNvfp4TensorStats)
into collector keyword arguments.
Must not be here: hooks, quantization, files.

Schedule source: NVIDIA/TransformerEngine `transformer_engine/debug/features/utils/__init__.py`
`next_enabled_iter`: a tensor is logged at `iteration` when `iteration % freq == 0` and
`start_step <= iteration <= end_step` (both inclusive; `start_end_list` intervals inclusive too).
Config keys: `log_fp8_tensor_stats.py` `LogFp8TensorStats` docstring; layer selection as in nvdlfw_inspect
`config_manager.py` (`layer_name_regex_pattern` with `re.search`, `layer_types` as escaped substrings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TENSORS = ("activation", "gradient", "weight")
DEFAULT_STATS = ("underflows%", "scale_inv_min", "scale_inv_max", "mse")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One `tensors_struct` entry: which stats of which tensor, on which iterations."""

    tensor: str
    stats: tuple[str, ...] = DEFAULT_STATS
    freq: int = 1
    start_step: int | None = None
    end_step: int | None = None
    start_end_list: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.tensor not in TENSORS:
            raise ValueError(f"tensor {self.tensor!r}: LogFp8TensorStats logs only {', '.join(TENSORS)}")
        if not self.stats:
            raise ValueError(f"tensor {self.tensor!r}: no stats to log")
        if int(self.freq) < 1:
            raise ValueError(f"tensor {self.tensor!r}: freq must be >= 1, got {self.freq}")

    def enabled(self, iteration: int) -> bool:
        """TE's `next_enabled_iter(...)[0]` for this entry."""
        if iteration % self.freq:
            return False
        if self.start_end_list:
            return any(start <= iteration <= end for start, end in self.start_end_list)
        start = 0 if self.start_step is None else self.start_step
        return iteration >= start and (self.end_step is None or iteration <= self.end_step)


def build_specs(
    *,
    tensors: Iterable[str] = TENSORS,
    stats: Sequence[str] = DEFAULT_STATS,
    freq: int = 1,
    start_step: int | None = None,
    end_step: int | None = None,
    start_end_list: Sequence[Sequence[int]] | None = None,
    tensors_struct: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, TensorSpec]:
    """Specs per tensor: from `tensors_struct` when given (per-entry keys override the shared ones), else one
    spec per name in `tensors` with the shared keys. A tensor listed twice is an error, as in TE."""
    shared: dict[str, Any] = {
        "stats": tuple(stats),
        "freq": freq,
        "start_step": start_step,
        "end_step": end_step,
        "start_end_list": _intervals(start_end_list),
    }
    entries = tensors_struct if tensors_struct is not None else [{"tensor": t} for t in tensors]
    specs: dict[str, TensorSpec] = {}
    for entry in entries:
        unknown = set(entry) - {"tensor", "stats", "freq", "start_step", "end_step", "start_end_list"}
        if unknown:
            raise ValueError(f"tensors_struct entry {dict(entry)!r}: unknown keys {sorted(unknown)}")
        merged: dict[str, Any] = {**shared, **{k: v for k, v in entry.items() if k != "tensor"}}
        merged["stats"] = tuple(merged["stats"])
        merged["start_end_list"] = _intervals(merged["start_end_list"])
        spec = TensorSpec(tensor=entry["tensor"], **merged)
        if spec.tensor in specs:
            raise ValueError(f"tensor {spec.tensor!r} is listed twice")
        specs[spec.tensor] = spec
    return specs


def _intervals(value: Sequence[Sequence[int]] | None) -> tuple[tuple[int, int], ...] | None:
    if value is None:
        return None
    return tuple((int(start), int(end)) for start, end in value)


def layer_regex(layers: Mapping[str, Any]) -> str:
    """A TE/nvdlfw `layers:` block as one regex for `re.search` (name regex, else escaped `layer_types`)."""
    if layers.get("layer_name_regex_pattern"):
        return str(layers["layer_name_regex_pattern"])
    if layers.get("layer_types"):
        return "|".join(re.escape(t) for t in layers["layer_types"])
    raise ValueError(
        "layers: give layer_name_regex_pattern or layer_types (layer_numbers and exact_layer_names "
        "are not supported by the collector)"
    )


FEATURES = ("LogFp8TensorStats", "LogNvfp4TensorStats")
_SCHEDULE = ("freq", "start_step", "end_step", "start_end_list")


def options_from_te_config(config: Mapping[str, Any] | str | Path, section: str | None = None) -> dict[str, Any]:
    """Collector keyword arguments (`layers`, `tensors_struct`) from a TE debug config section that enables
    LogFp8TensorStats and/or LogNvfp4TensorStats.

    `config` is a YAML path or the parsed dict; `section` picks one top-level section when several qualify.
    LogNvfp4TensorStats' stats (`underflows%`, `mse`) become the names it logs (`nvfp4_underflows%`,
    `nvfp4_mse`). The collector keeps one schedule per tensor: a tensor both features log must have the same
    freq / start_step / end_step / start_end_list in both.
    """
    if not isinstance(config, Mapping):
        import yaml

        config = yaml.safe_load(Path(config).read_text())
    if not isinstance(config, Mapping):
        raise ValueError("a TE debug config is a mapping of section names to sections")
    found = []
    for name, body in config.items():
        if section is not None and name != section:
            continue
        te = (body or {}).get("transformer_engine") or {}
        features = {f: te[f] for f in FEATURES if (te.get(f) or {}).get("enabled")}
        if body.get("enabled") and features:
            found.append((name, body, features))
    if len(found) != 1:
        names = [name for name, _, _ in found]
        raise ValueError(f"expected one enabled section with transformer_engine.{' or '.join(FEATURES)}, found {names}")
    _name, body, features = found[0]
    merged: dict[str, dict[str, Any]] = {}
    for feature_name, feature in features.items():
        for entry in _entries(feature):
            if feature_name == "LogNvfp4TensorStats":
                entry["stats"] = [f"nvfp4_{stat}" for stat in entry.get("stats", ())]
            tensor = entry["tensor"]
            if tensor not in merged:
                merged[tensor] = entry
                continue
            schedule = {k: merged[tensor].get(k) for k in _SCHEDULE}
            if schedule != {k: entry.get(k) for k in _SCHEDULE}:
                raise ValueError(
                    f"tensor {tensor!r}: LogFp8TensorStats and LogNvfp4TensorStats log it on different schedules; "
                    "the collector keeps one per tensor"
                )
            merged[tensor]["stats"] = [*merged[tensor].get("stats", ()), *entry.get("stats", ())]
    return {"layers": layer_regex(body.get("layers", {})), "tensors_struct": list(merged.values())}


def _entries(feature: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per tensor of a feature section, the feature-wide keys filled in."""
    shared = {k: feature[k] for k in ("stats", *_SCHEDULE) if k in feature}
    if "tensors_struct" in feature:
        struct = [dict(entry) for entry in feature["tensors_struct"]]
    else:
        struct = [{"tensor": t} for t in feature.get("tensors", TENSORS)]
    return [{**shared, **entry} for entry in struct]


def default_stats(recipe: str) -> tuple[str, ...]:
    """The stats logged when none are given: what TE logs for that training recipe - LogNvfp4TensorStats'
    `underflows%` / `mse` (written `nvfp4_*`) under NVFP4, LogFp8TensorStats' with `overflows%` under delayed
    scaling (the only recipe TE logs it for), `DEFAULT_STATS` otherwise."""
    if recipe == "nvfp4":
        return ("nvfp4_underflows%", "nvfp4_mse")
    if recipe == "delayed":
        return ("underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse")
    return DEFAULT_STATS
