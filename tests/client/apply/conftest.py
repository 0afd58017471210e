"""Fixtures for the apply tests: the fake TE stand-in and a clean nvdlfw_inspect ConfigManager."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

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
    """nvdlfw_inspect's real ConfigManager (logger initialised, registry of base + TE feature names)."""
    from nvdlfw_inspect.config_manager import ConfigManager
    from nvdlfw_inspect.logging import initialize_logger
    from nvdlfw_inspect.registry import NamespaceData

    initialize_logger(str(tmp_path / "nvdlfw"))
    te_features = [
        "LogTensorStats",
        "LogFp8TensorStats",
        "LogNvfp4TensorStats",
        "DisableFP8GEMM",
        "DisableFP8Layer",
        "DisableQuantizationGEMM",
        "DisableQuantizationLayer",
        "PerTensorScaling",
        "FakeQuant",
        "DumpTensors",
    ]
    registry = {
        "base": NamespaceData("base", None, features={"LogTensorStats": object()}),
        "transformer_engine": NamespaceData(
            "transformer_engine", None, features={name: object() for name in te_features}
        ),
    }
    ConfigManager.reset()

    def load(path):
        ConfigManager._load_config(path, registry_data=registry)
        return ConfigManager

    yield load
    ConfigManager.reset()
