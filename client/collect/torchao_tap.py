"""Observe every FP8 cast torchao's float8 training makes: (high-precision tensor, Float8TrainingTensor) pairs.

Belongs here: installing and removing the observation point. Must not be here: attribution to layers or
statistics (`collector`).

torchao's `matmul_with_hp_or_float8_args` (`torchao/float8/float8_linear.py`) casts each GEMM operand with
`hp_tensor_to_float8_dynamic`, looked up in that module's globals at call time: input and weight in the
forward, grad_output, weight and input again in the backward. Replacing that module attribute with a wrapper
that calls the original and then the observers sees every cast with its real result (FP8 bytes, scale, role
and the owning module's `linear_mm_config`). Nothing else in torchao is changed, and the original function
is put back when the last observer leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Observer = Callable[[Any, Any], None]
_observers: list[Observer] = []
_original: Callable[..., Any] | None = None


def _module() -> Any:
    from torchao.float8 import float8_linear

    return float8_linear


def float8_linear_class() -> type | None:
    """torchao's `Float8Linear` class, or None without torchao."""
    try:
        from torchao.float8.float8_linear import Float8Linear
    except ImportError:
        return None
    cls: type = Float8Linear  # torchao has no type information
    return cls


def _tapped(*args: Any, **kwargs: Any) -> Any:
    assert _original is not None
    result = _original(*args, **kwargs)
    hp_tensor = args[0] if args else kwargs["hp_tensor"]
    for observer in list(_observers):
        observer(hp_tensor, result)
    return result


def add_observer(observer: Observer) -> None:
    """Start calling `observer(hp_tensor, float8_tensor)` after every cast in torchao's float8 linear."""
    global _original
    module = _module()
    if not _observers:
        _original = module.hp_tensor_to_float8_dynamic
        module.hp_tensor_to_float8_dynamic = _tapped
    _observers.append(observer)


def remove_observer(observer: Observer) -> None:
    """Stop calling `observer`; restores torchao's function when no observer is left. Idempotent."""
    global _original
    if observer in _observers:
        _observers.remove(observer)
    if not _observers and _original is not None:
        module = _module()
        if module.hp_tensor_to_float8_dynamic is _tapped:
            module.hp_tensor_to_float8_dynamic = _original
        _original = None
