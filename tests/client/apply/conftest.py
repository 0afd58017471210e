"""Fixtures for the apply tests: the fake TE stand-in and a clean nvdlfw_inspect ConfigManager."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from bench.te_config_manager import TeConfigManager
from tests.client.apply import fake_te


@pytest.fixture
def fake_te_29(monkeypatch: pytest.MonkeyPatch):
    """The TE stand-in with `autocast` (TE >= 2.9); yields its `transformer_engine.pytorch`."""
    return fake_te.install(monkeypatch, "2.9")


@pytest.fixture
def fake_te_28(monkeypatch: pytest.MonkeyPatch):
    """The TE stand-in as TE 2.8: only `fp8_autocast`."""
    return fake_te.install(monkeypatch, "2.8")


@pytest.fixture
def no_te(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import transformer_engine...` fail even if some TE were importable."""
    for name in (
        "transformer_engine",
        "transformer_engine.pytorch",
        "transformer_engine.common",
        "transformer_engine.common.recipe",
    ):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def nvdlfw_config(tmp_path) -> Iterator[object]:
    """`load(path)` -> nvdlfw_inspect's real ConfigManager (logger initialised, registry of base + TE feature names)."""
    with TeConfigManager(tmp_path) as manager:
        yield manager.load_file
