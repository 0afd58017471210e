"""Helpers for the image tests: decode PNG/SVG bodies, read the geometry headers, sample cell colours."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import numpy as np
from matplotlib import colormaps
from matplotlib import image as mpimg

SVG_NS = "{http://www.w3.org/2000/svg}"


def png_pixels(content: bytes) -> np.ndarray:
    """(height, width, channels) floats in [0, 1]."""
    assert content[:8] == b"\x89PNG\r\n\x1a\n"
    return mpimg.imread(io.BytesIO(content), format="png")


def extents(headers) -> list[tuple[float, ...]]:
    return [tuple(float(v) for v in part.split(",")) for part in headers["x-heatmap-extent"].split(";")]


def shapes(headers) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in part.split(",")) for part in headers["x-heatmap-shape"].split(";")]  # type: ignore


def cell_rgb(pixels: np.ndarray, headers, row: int, column: int, panel: int = 0, window: int = 0) -> np.ndarray:
    """The RGB colour at the centre of a cell (mean over ±`window` pixels), from the extent and shape headers."""
    x0, y0, x1, y1 = extents(headers)[panel]
    rows, columns = shapes(headers)[panel]
    x = x0 + (column + 0.5) * (x1 - x0) / columns
    y = y0 + (row + 0.5) * (y1 - y0) / rows
    patch = pixels[int(y) - window : int(y) + window + 1, int(x) - window : int(x) + window + 1, :3]
    return patch.reshape(-1, 3).mean(axis=0)


def top_colour() -> np.ndarray:
    return np.asarray(colormaps["YlOrRd"](1.0)[:3])


def luminance(rgb: np.ndarray) -> float:
    return float(0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2])


def svg_tree(content: bytes) -> ET.Element:
    return ET.fromstring(content)


def svg_text(root: ET.Element) -> str:
    return " ".join("".join(el.itertext()) for el in root.iter(f"{SVG_NS}text"))


def svg_ids(root: ET.Element, prefix: str) -> list[str]:
    return [el.get("id") for el in root.iter() if (el.get("id") or "").startswith(prefix)]  # type: ignore
