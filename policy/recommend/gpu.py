"""Which GPU a recommendation is for: the metadata keys users write and the compute capability they mean.

Belongs here: the accepted keys, product-name / architecture / `sm_XX` / "9.0" parsing, and the sentence that says
where the capability came from (or that the value was not recognised). Must not be here: recipe rules.

Compute capabilities: NVIDIA's CUDA GPUs table (https://developer.nvidia.com/cuda-gpus). FP8 GEMMs need 8.9
(Ada) or 9.0 (Hopper); MXFP8 needs 10.x (Blackwell).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Metadata / override keys naming the GPU, in priority order (the first present one wins).
GPU_KEYS: tuple[str, ...] = ("gpu_arch", "gpu", "gpu_name", "gpu_model", "compute_capability")
ASSUMED_CAPABILITY = 9.0

_NAMES: dict[str, float] = {
    # architectures
    "volta": 7.0,
    "turing": 7.5,
    "ampere": 8.0,
    "ada": 8.9,
    "adalovelace": 8.9,
    "lovelace": 8.9,
    "hopper": 9.0,
    "blackwell": 10.0,
    # data-centre products
    "v100": 7.0,
    "t4": 7.5,
    "a100": 8.0,
    "a800": 8.0,
    "a30": 8.0,
    "a10": 8.6,
    "a10g": 8.6,
    "a40": 8.6,
    "a16": 8.6,
    "a2": 8.6,
    "l4": 8.9,
    "l40": 8.9,
    "l40s": 8.9,
    "l20": 8.9,
    "h100": 9.0,
    "h800": 9.0,
    "h200": 9.0,
    "h20": 9.0,
    "gh200": 9.0,
    "b100": 10.0,
    "b200": 10.0,
    "gb200": 10.0,
    "b300": 10.3,
    "gb300": 10.3,
    # workstation products
    "a6000": 8.6,
    "rtxa6000": 8.6,
    "rtx6000ada": 8.9,
    "rtxpro6000": 12.0,
}
_RTX_SERIES = {"20": 7.5, "30": 8.6, "40": 8.9, "50": 12.0}  # GeForce RTX 2080 / 3090 / 4090 / 5090 ...
_NOISE = ("nvidia", "geforce", "tesla", "quadro", "corporation")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The GPU as given: its text, the key it came from, and the capability it means (None: not recognised)."""

    text: str
    key: str
    capability: float | None

    def describe(self) -> str:
        if self.capability is None:
            return f"unrecognised GPU {self.text!r} (key {self.key!r})"
        return f"{self.key} {self.text!r} = compute capability {self.capability:.1f}"


def compute_capability(text: str | None) -> float | None:
    """ "hopper" / "H100" / "sm_90" / "sm100a" / "9.0" / "90" / "RTX 4090" / "NVIDIA H100 80GB HBM3" → 9.0 / 9.0 /
    9.0 / 10.0 / 9.0 / 9.0 / 8.9 / 9.0; None when not recognised (case, spaces, dashes and vendor words do not
    matter). The whole text is tried first, then its words and runs of two or three words."""
    for candidate in _candidates(text):
        cap = _capability(candidate)
        if cap is not None:
            return cap
    return None


def gpu_key(text: str | None) -> str | None:
    """The GPU a text names, in one spelling, to compare two texts by (the runs list's `gpu` filter): the product or
    architecture as in the table above ("NVIDIA H100 80GB HBM3", "h100-sxm" -> "h100"; "Hopper" -> "hopper"),
    "rtx4090" for GeForce cards, "sm90" for a compute capability ("sm_90", "9.0"); text it does not recognise
    lowercased, vendor words dropped ("NVIDIA Foo-X" -> "foo x"). None when blank."""
    words = _words(text)
    if not words:
        return None
    for candidate in _candidates(text):
        name = _named(candidate)
        if name is not None:
            return name
        if re.fullmatch(r"rtx\d{4}(?:ti|super|d)*", candidate) and _capability(candidate) is not None:
            return candidate
        cap = _capability(candidate)
        if cap is not None:
            return f"sm{round(cap * 10)}"
    return " ".join(words)


def _words(text: str | None) -> list[str]:
    if text is None:
        return []
    return [w for w in re.split(r"[\s\-()/,]+", str(text).lower()) if w and w not in _NOISE]


def _candidates(text: str | None) -> list[str]:
    """The whole text, then its runs of three, two and one words, each without spaces and underscores."""
    words = _words(text)
    if not words:
        return []
    grams = ["".join(words)] + ["".join(words[i : i + n]) for n in (3, 2, 1) for i in range(len(words) - n + 1)]
    return list(dict.fromkeys(gram.replace("_", "") for gram in grams))


def _named(key: str) -> str | None:
    """The name of the table a key spells (itself, or it followed by a non-digit: "h100sxm" -> "h100")."""
    for name in sorted(_NAMES, key=len, reverse=True):
        if key == name or (key.startswith(name) and not key[len(name)].isdigit()):
            return name
    return None


def _capability(key: str) -> float | None:
    sm = re.fullmatch(r"(?:sm|compute|cc)?(\d)(\d)a?", key) or re.fullmatch(r"(?:sm|compute|cc)?(1\d)(\d)a?", key)
    if sm:
        return float(f"{sm[1]}.{sm[2]}")
    number = re.fullmatch(r"(?:cc)?(\d{1,2}\.\d)", key)
    if number:
        return float(number[1])
    if re.fullmatch(r"\d{1,2}", key) and int(key) <= 12:  # "9", "10": a bare major version
        return float(key)
    rtx = re.fullmatch(r"rtx(\d{2})\d{2}(?:ti|super|d)*", key)
    if rtx and rtx[1] in _RTX_SERIES:
        return _RTX_SERIES[rtx[1]]
    name = _named(key)
    return _NAMES[name] if name is not None else None


def gpu_from(data: Mapping[str, Any]) -> GpuSpec | None:
    """The GPU named by the first present key of GPU_KEYS (numbers such as 9.0 are read as text)."""
    for key in GPU_KEYS:
        value = data.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        text = str(value).strip()
        if text:
            return GpuSpec(text, key, compute_capability(text))
    return None
