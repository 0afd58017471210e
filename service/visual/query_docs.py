"""OpenAPI parameter objects for the heatmap and compare endpoints, whose query strings `service.visual.params`
validates by hand (a bad value is a 400 `{"error", "detail"}`). Bounds come from `params` itself, and
tests/service/app/test_openapi_document.py checks that the documented names are exactly the accepted ones
(`params.HEATMAP_KEYS`), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from fp8_policy.policy.records import QUANT_STATS, TENSORS
from fp8_policy.policy.vocabulary import DEFAULT_BOXES
from fp8_policy.service.openapi import query_param, threshold_params
from fp8_policy.service.visual.params import MAX_BOXES, MAX_CELL_COLUMNS, MAX_DPI, MIN_DPI, THRESHOLD_KEYS

_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}


def heatmap_params(*, show_skip_default: bool = True) -> list[dict[str, Any]]:
    return [
        query_param(
            "tensor",
            {**_TEXT, "default": "gradient", "examples": list(TENSORS)},
            f"Tensor as logged: {', '.join(TENSORS)} (or a custom tensor name the log used).",
        ),
        query_param(
            "stat",
            {**_TEXT, "default": "underflows%", "examples": list(QUANT_STATS)},
            "Stat as logged after the tensor, recipe prefix and `_columnwise` included, e.g. underflows%, "
            "mxfp8_underflows%, scale_inv_min. A stat the run did not log is a 400 NoData naming the "
            "logged ones.",
        ),
        query_param(
            "rank",
            {"type": "integer", "minimum": 0},
            "One rank; default: the maximum over ranks per iteration. A rank the run lacks is a 400; a data-parallel "
            "replica stored once is drawn from the rank it repeats.",
        ),
        query_param(
            "sublayer",
            dict(_TEXT),
            "One sublayer (e.g. qkv, proj, fc1, fc2): one row per block. Unknown sublayers are a 400.",
        ),
        query_param(
            "vmax",
            {"type": "number", "exclusiveMinimum": 0},
            "Top of the colour scale; default 6 for percentage stats, else the largest value.",
        ),
        query_param(
            "dpi",
            {"type": "integer", "minimum": MIN_DPI, "maximum": MAX_DPI, "default": 150},
            "Image resolution (dots per inch).",
        ),
        query_param(
            "width",
            {"type": "number", "exclusiveMinimum": 0},
            "Image width in inches; default from the number of iterations.",
        ),
        query_param(
            "height",
            {"type": "number", "exclusiveMinimum": 0},
            "Image height in inches; default from the number of rows.",
        ),
        query_param(
            "mark_iteration",
            {"type": "integer", "minimum": 0},
            "Draw a vertical marker at this iteration (must lie within the run's iterations).",
        ),
        query_param(
            "show_skip",
            {"type": "boolean", "default": show_skip_default},
            "Mark the recommended skip set in the strip on the right (true/false, 1/0, yes/no, on/off).",
        ),
        query_param(
            "boxes",
            {"type": "integer", "minimum": 0, "default": DEFAULT_BOXES},
            f"Box at most this many worst rows at or above the critical band (capped at {MAX_BOXES}).",
        ),
        *threshold_params(THRESHOLD_KEYS),
    ]


def heatmap_json_params() -> list[dict[str, Any]]:
    return [
        *heatmap_params(),
        query_param(
            "cells",
            {"type": "integer", "minimum": 0, "maximum": MAX_CELL_COLUMNS, "default": 0},
            "Also return the cell values, averaged (NaN-aware) into at most this many iteration "
            "columns, as the image does; 0: none.",
        ),
    ]


def run_pair_params() -> list[dict[str, Any]]:
    return [
        query_param("base", {"type": "integer", "minimum": 1}, "The run compared against (its id).", required=True),
        query_param("head", {"type": "integer", "minimum": 1}, "The run compared (its id).", required=True),
    ]
