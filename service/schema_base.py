"""Building blocks shared by the API's response models (the `schemas.py` module of each route package).

`ApiModel` is the base of every response model: it spells non-finite floats as the strings "NaN", "Infinity" and
"-Infinity" (JSON has no NaN), the one spelling this API uses everywhere, and `Number` is the type of a field that
may carry them. `threshold_fields()` turns `policy.thresholds.Thresholds` into documented fields, so a threshold
added there appears in the OpenAPI document without a second list to keep in step.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fp8_policy.policy import thresholds as thresholds_module
from fp8_policy.policy.thresholds import Thresholds

NonFinite = Literal["NaN", "Infinity", "-Infinity"]
Number = float | NonFinite
"""A float that may be non-finite; JSON carries NaN and ±inf as "NaN", "Infinity", "-Infinity"."""


class ApiModel(BaseModel):
    """Base of every response model: non-finite floats are serialized as "NaN" / "Infinity" / "-Infinity"."""

    model_config = ConfigDict(ser_json_inf_nan="strings", from_attributes=True)


@cache
def threshold_help() -> dict[str, str]:
    """Each `Thresholds` field's trailing comment in policy/thresholds.py: its documentation."""
    source = Path(thresholds_module.__file__).read_text(encoding="utf-8")
    names = {f.name for f in fields(Thresholds)}
    help_by_name: dict[str, str] = {}
    pending: str | None = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in names and token.start[1] == 4:
            pending = token.string
        elif token.type == tokenize.COMMENT and pending is not None:
            help_by_name[pending] = token.string.lstrip("# ").strip()
            pending = None
        elif token.type == tokenize.NEWLINE:
            pending = None
    return help_by_name


def threshold_type(name: str) -> type:
    annotation = {f.name: f.type for f in fields(Thresholds)}[name]
    return int if annotation in (int, "int") else float


def threshold_fields() -> dict[str, Any]:
    """`create_model` keyword arguments: one required field per threshold, typed and described."""
    defaults = Thresholds()
    return {
        f.name: (
            threshold_type(f.name),
            Field(description=f"{threshold_help().get(f.name, '')} (default {getattr(defaults, f.name)!r})".strip()),
        )
        for f in fields(Thresholds)
    }
