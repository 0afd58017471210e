"""A test-side re-implementation of torchtitan 0.3.0's quantization converters (it needs tyro and a CUDA capability
check to import and build, so the real package is not used here).

Read from the torchtitan 0.3.0 wheel, torchtitan/components/quantization/:
* float8.py `Float8LinearConverter.Config(recipe_name: Literal["rowwise", "rowwise_with_gw_hp"] = "rowwise",
  filter_fqns: list[str] = [], emulate: bool = False)`; `convert` swaps every `Linear.Config` for which
  `utils.module_filter_fn(config, fqn, filter_fqns)` holds: both dims divisible by 16 and no filter FQN a substring
  of the FQN. `Float8GroupedExpertsConverter.Config()` swaps every GroupedExperts config.
* mx.py `MXFP8LinearConverter.Config(fqns: list[str] = [])`: `if not fqns or any(target in fqn for target in fqns)`;
  `MXFP8GroupedExpertsConverter.Config(recipe_name: Literal["mxfp8_rceil"] = "mxfp8_rceil", pad_multiple: int = 32)`.
* nvfp4.py `NVFP4LinearConverter.Config(fqns: list[str] = [])`: the same include rule.
* `QuantizationConverter.Config(model_compile_enabled: bool = False)` is the base of every Config; all are
  `@dataclass(kw_only=True, slots=True)`. The converted configs subclass `Linear.Config`, so a later converter
  matches them again (`traverse(Linear.Config)` uses isinstance).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal


@dataclass(kw_only=True, slots=True)
class _Base:
    model_compile_enabled: bool = False


class Float8LinearConverter:
    @dataclass(kw_only=True, slots=True)
    class Config(_Base):
        recipe_name: Literal["rowwise", "rowwise_with_gw_hp"] = "rowwise"
        filter_fqns: list[str] = field(default_factory=list)
        emulate: bool = False

        def __post_init__(self) -> None:
            assert self.recipe_name in ("rowwise", "rowwise_with_gw_hp"), self.recipe_name

        def convert(self, linears: dict[str, tuple[int, int, str]]) -> None:
            for fqn, (n_in, n_out, _fmt) in linears.items():
                if n_in % 16 == 0 and n_out % 16 == 0 and not any(f in fqn for f in self.filter_fqns):
                    linears[fqn] = (n_in, n_out, "float8")


class _Include:
    fmt = ""
    fqns: list[str]

    def convert(self, linears: dict[str, tuple[int, int, str]]) -> None:
        for fqn, (n_in, n_out, _fmt) in linears.items():
            if not self.fqns or any(target in fqn for target in self.fqns):
                linears[fqn] = (n_in, n_out, self.fmt)


class MXFP8LinearConverter:
    @dataclass(kw_only=True, slots=True)
    class Config(_Base, _Include):
        fqns: list[str] = field(default_factory=list)
        fmt = "mxfp8"


class NVFP4LinearConverter:
    @dataclass(kw_only=True, slots=True)
    class Config(_Base, _Include):
        fqns: list[str] = field(default_factory=list)
        fmt = "nvfp4"


class Float8GroupedExpertsConverter:
    @dataclass(kw_only=True, slots=True)
    class Config(_Base):
        grouped = "float8"


class MXFP8GroupedExpertsConverter:
    @dataclass(kw_only=True, slots=True)
    class Config(_Base):
        recipe_name: Literal["mxfp8_rceil"] = "mxfp8_rceil"
        pad_multiple: int = 32
        grouped = "mxfp8"


def model_linears(n_layers: int, model: str = "llama3", fused_qkv: bool = True) -> dict[str, tuple[int, int]]:
    """The `Linear.Config` FQNs `traverse(Linear.Config)` yields for a torchtitan 0.3.0 model (dims all 256), read from
    the wheel: llama3 / qwen3 (models/common/config_utils.py `make_gqa_config`: `attention.qkv_linear.wqkv` fused, else
    `qkv_linear.wq` and `qkv_linear.wkv` (one config for wk and wv); `attention.wo`; models/common/feed_forward.py
    `feed_forward.w1/w2/w3`; `lm_head`) and deepseek_v3 (models/deepseek_v3/model.py MLA `attention.wq_a/wq_b/
    wkv_a/wkv_b/wo`; block 0 dense `feed_forward.*`, later blocks `moe.shared_experts.w1/w2/w3` and
    `moe.router.gate`; routed experts are a GroupedExperts, no Linear)."""
    out: dict[str, tuple[int, int]] = {}
    for i in range(n_layers):
        if model == "deepseek_v3":
            attention = ["wq_a", "wq_b", "wkv_a", "wkv_b", "wo"]
            mlp = ["feed_forward.w1", "feed_forward.w2", "feed_forward.w3"] if i == 0 else []
            mlp += [] if i == 0 else [f"moe.shared_experts.{w}" for w in ("w1", "w2", "w3")] + ["moe.router.gate"]
        else:
            attention = ["qkv_linear.wqkv" if fused_qkv else "qkv_linear.wq", "wo"]
            attention += [] if fused_qkv else ["qkv_linear.wkv"]
            mlp = ["feed_forward.w1", "feed_forward.w2", "feed_forward.w3"]
        for part in [f"attention.{a}" for a in attention] + mlp:
            out[f"layers.{i}.{part}"] = (256, 256)
    out["lm_head"] = (256, 256)
    return out


@contextmanager
def fake_torchtitan() -> Iterator[None]:
    names = ("torchtitan", "torchtitan.components", "torchtitan.components.quantization")
    saved = {name: sys.modules.get(name) for name in names}
    quantization = types.ModuleType(names[-1])
    for cls in (
        Float8LinearConverter,
        MXFP8LinearConverter,
        NVFP4LinearConverter,
        Float8GroupedExpertsConverter,
        MXFP8GroupedExpertsConverter,
    ):
        setattr(quantization, cls.__name__, cls)
    sys.modules.update(
        {names[0]: types.ModuleType(names[0]), names[1]: types.ModuleType(names[1]), names[2]: quantization}
    )
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def apply(text: str, linears: dict[str, tuple[int, int]], experts: bool) -> tuple[dict[str, str], str]:
    """(fqn -> bf16 | float8 | mxfp8 | nvfp4, the grouped experts' format) once the rendered converters ran."""
    with fake_torchtitan():
        namespace: dict[str, object] = {}
        exec(compile(text, "torchtitan_converters.py", "exec"), namespace)  # noqa: S102 - our own rendering
        converters = namespace["converters"](model_compile_enabled=True)  # type: ignore[operator]
    state = {fqn: (n_in, n_out, "bf16") for fqn, (n_in, n_out) in linears.items()}
    grouped = "bf16"
    for converter in converters:
        if hasattr(converter, "grouped"):
            grouped = converter.grouped if experts else grouped
        else:
            converter.convert(state)
    return {fqn: fmt for fqn, (_i, _o, fmt) in state.items()}, grouped
