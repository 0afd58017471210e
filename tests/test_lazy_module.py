"""fp8_policy/_lazy.py `lazy_module`: a stand-in for a module that imports it on first use (issue 21: what only
some requests need is not imported on `fp8-policy serve`'s start-up path)."""

from __future__ import annotations

import sys
import threading

import pytest

from fp8_policy import _lazy
from fp8_policy._lazy import import_deferred, lazy_module


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """The name of a module no test has imported: a file written now, on sys.path for this test."""
    (tmp_path / "lazy_probe_module.py").write_text("VALUE = 1\n\ndef value():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe_module", raising=False)
    yield "lazy_probe_module"
    sys.modules.pop("lazy_probe_module", None)
    _lazy._deferred.pop("lazy_probe_module", None)  # gone with tmp_path: no later import_deferred() may try it


def test_the_module_is_imported_at_the_first_attribute_read_only(fresh_module) -> None:
    proxy = lazy_module(fresh_module)
    assert fresh_module not in sys.modules
    assert "not imported yet" in repr(proxy)
    assert proxy.value() == 1
    assert proxy.VALUE == sys.modules[fresh_module].VALUE == 1
    with pytest.raises(AttributeError):
        _ = proxy.missing


def test_a_patch_on_either_the_proxy_or_the_module_is_seen_through_both(fresh_module, monkeypatch) -> None:
    proxy = lazy_module(fresh_module)
    monkeypatch.setattr(proxy, "VALUE", 2)  # imports the module and sets the attribute on it
    module = sys.modules[fresh_module]
    assert module.VALUE == 2 and module.value() == 2 and proxy.value() == 2
    monkeypatch.setattr(module, "VALUE", 3)
    assert proxy.VALUE == 3
    monkeypatch.undo()
    assert proxy.VALUE == module.VALUE == 1
    proxy.extra = "set"
    assert module.extra == "set"
    del proxy.extra
    assert not hasattr(module, "extra")


def test_threads_that_use_it_at_once_get_one_module(fresh_module) -> None:
    proxy = lazy_module(fresh_module)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(proxy.value)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(function) for function in seen}) == 1
    assert seen[0] is sys.modules[fresh_module].value


def test_import_deferred_imports_every_module_a_proxy_stands_for(fresh_module) -> None:
    """A serving process's warm-up (service/app.py) imports them once it serves: no first request waits for it."""
    proxy = lazy_module(fresh_module)
    assert fresh_module not in sys.modules
    assert fresh_module in import_deferred()
    assert fresh_module in sys.modules and proxy.VALUE == 1
