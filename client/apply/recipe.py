"""The TE recipe object for a policy's `recipe`: `recipe_from_policy`.

Belongs here: mapping the policy's recipe name / class path and kwargs onto
`transformer_engine.common.recipe` classes. Must not be here: autocast or model changes.

Checked against TE's source (NVIDIA/TransformerEngine @ d0067d0, `transformer_engine/common/recipe/__init__.py`;
also tags v2.4 and v2.8):
* `Format` (l. 29-50) is an Enum with members E2M1, E4M3, E5M2, HYBRID: strings map with `Format[name]`.
* `DelayedScaling` (l. 172-261), `Float8CurrentScaling` (l. 285-312), `MXFP8BlockScaling` (l. 336-373) and
  `Float8BlockScaling` (l. 391-443) are `pydantic.dataclasses.dataclass`es. Pydantic dataclasses silently
  IGNORE unknown keyword arguments, so a misspelt kwarg would be dropped without error by TE itself: the
  kwargs are therefore checked here against `dataclasses.fields(cls)` and an unknown key is a TypeError.
* `fp8_quant_fwd_inp` / `_fwd_weight` / `_bwd_grad` of the current/block recipes carry no annotation: they are
  class attributes, not constructor fields, and are rejected like any unknown key.
* `fp8_gemm_fprop` / `_dgrad` / `_wgrad` are `MMParams(use_split_accumulator=...)` (l. 53-64): dicts are
  converted. TE's `__post_init__` assertions (no pure E5M2, split accumulation for block scaling) are left to
  TE: pydantic re-raises them as a `ValidationError`, a ValueError.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from fp8_policy.client.apply.plan import RECIPE_CLASSES
from fp8_policy.client.apply.te_import import import_te

RECIPE_MODULE = "transformer_engine.common.recipe"
FORMAT_KWARGS = ("fp8_format", "fp4_format")
MM_KWARGS = ("fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad")


def recipe_class_name(recipe: Mapping[str, Any]) -> str:
    """The TE class name from the recipe's `class` path and/or `name`; ValueError when they disagree."""
    path, name = recipe.get("class"), recipe.get("name")
    from_path = None
    if path:
        if not str(path).startswith("transformer_engine."):
            raise ValueError(f"recipe class {path!r} is not a transformer_engine recipe")
        from_path = str(path).rsplit(".", 1)[-1]
    from_name = RECIPE_CLASSES.get(str(name)) if name else None
    if name and from_name is None:
        raise ValueError(f"unknown recipe name {name!r}; expected one of {', '.join(RECIPE_CLASSES)}")
    if from_path and from_name and from_path != from_name:
        raise ValueError(f"recipe name {name!r} means {from_name}, but its class is {path!r}")
    chosen = from_path or from_name
    if chosen is None or chosen not in RECIPE_CLASSES.values():
        raise ValueError(f"recipe class {chosen!r} is not one of {', '.join(RECIPE_CLASSES.values())}")
    return chosen


def recipe_from_policy(policy: Mapping[str, Any]) -> Any:
    """The TE recipe object for `policy["recipe"]` (or a bare recipe dict), e.g.
    `{"name": "current", "class": "transformer_engine.common.recipe.Float8CurrentScaling",
    "kwargs": {"fp8_format": "HYBRID"}}` -> `Float8CurrentScaling(fp8_format=Format.HYBRID)`.

    Raises ImportError (with the install hint) without TE, ValueError for an unknown recipe or format,
    TypeError naming the key for a kwarg the class does not take.
    """
    recipe = policy.get("recipe", policy)
    if not isinstance(recipe, Mapping) or not (recipe.get("name") or recipe.get("class")):
        raise ValueError("the policy has no recipe (expected recipe.name or recipe.class)")
    class_name = recipe_class_name(recipe)
    module = import_te(RECIPE_MODULE)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ImportError(f"this transformer_engine has no recipe class {class_name}; upgrade TE")
    return cls(**convert_kwargs(cls, recipe.get("kwargs") or {}, module))


def init_fields(cls: type) -> set[str]:
    """Names the recipe's constructor accepts (dataclass init fields, else the signature)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    return {p for p in inspect.signature(cls).parameters if not p.startswith("_")}


def convert_kwargs(cls: type, raw: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """Policy kwargs -> constructor kwargs: format strings to `Format`, dicts to `MMParams`."""
    accepted = init_fields(cls)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in accepted:
            raise TypeError(
                f"{cls.__name__} has no parameter {key!r} (from the policy's recipe kwargs); "
                f"it takes: {', '.join(sorted(accepted))}"
            )
        if key in FORMAT_KWARGS and isinstance(value, str):
            value = to_format(module.Format, value, key)
        elif key in MM_KWARGS and isinstance(value, Mapping):
            value = module.MMParams(**value)
        out[key] = value
    return out


def to_format(format_enum: Any, value: str, key: str = "fp8_format") -> Any:
    """`"HYBRID"`, `"hybrid"` or `"Format.HYBRID"` -> `Format.HYBRID`."""
    member = value.rsplit(".", 1)[-1].upper()
    try:
        return format_enum[member]
    except KeyError:
        names = ", ".join(m.name for m in format_enum)
        raise ValueError(f"unknown {key} {value!r}; expected one of {names}") from None
