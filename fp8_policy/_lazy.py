"""Imports on first use. PEP 562 lazy attributes for the package root and `fp8_policy.collect`: a public name is
imported from its module on first use, so importing the package loads neither the HTTP client nor torch until a
name is used. `lazy_module`: a module a few requests or a background job need, imported when first used, so
`fp8-policy serve` answers sooner (tests/service/app/test_start_up_imports.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of `package` (its globals are `namespace`): `exports` maps each
    public name to the module it is imported from; a name, once imported, is kept in `namespace`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__


class _LazyModule:
    """Stands for a module until an attribute is first read, set or deleted: then the module is imported
    (importlib.import_module holds the import lock, so two threads get the same module) and every attribute
    access is forwarded to it. Setting or deleting an attribute sets or deletes it on the module itself, so a
    test's monkeypatch on either the proxy or the module is seen through both."""

    __slots__ = ("_lazy_name", "_lazy_module")

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_lazy_name", name)
        object.__setattr__(self, "_lazy_module", None)

    def _load(self) -> ModuleType:
        module: ModuleType | None = object.__getattribute__(self, "_lazy_module")
        if module is None:
            module = importlib.import_module(object.__getattribute__(self, "_lazy_name"))
            object.__setattr__(self, "_lazy_module", module)
        return module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._load(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._load(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._load(), name)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        name = object.__getattribute__(self, "_lazy_name")
        loaded = object.__getattribute__(self, "_lazy_module") is not None
        return f"<lazy module {name!r}{'' if loaded else ' (not imported yet)'}>"


_deferred: dict[str, None] = {}  # every module a lazy_module stands for, in the order they were named


def lazy_module(name: str) -> Any:
    """The module `name`, imported on first attribute access (see `_LazyModule`). Use it under
    `if TYPE_CHECKING: from package import module` / `else: module = lazy_module("package.module")`, so
    type checkers see the real module: the start-up path imports what only some requests need when they come."""
    _deferred[name] = None
    return _LazyModule(name)


def import_deferred() -> list[str]:
    """Import every module a `lazy_module` stands for (a serving process does it once it serves, in its warm-up:
    the first request of each kind then pays no import); returns their names."""
    names = list(_deferred)
    for name in names:
        importlib.import_module(name)
    return names
