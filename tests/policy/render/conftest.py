"""Fixtures for the renderer tests: nvdlfw_inspect's real ConfigManager with a fake TE feature registry."""

from __future__ import annotations

import logging

import pytest

TE_FEATURES = (
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
)


@pytest.fixture
def nvdlfw_config(tmp_path):
    """`load(yaml_text)` -> ConfigManager loaded with the real nvdlfw_inspect code (state reset around each test)."""
    from nvdlfw_inspect import logging as nv_logging
    from nvdlfw_inspect.config_manager import ConfigManager
    from nvdlfw_inspect.registry import NamespaceData

    previous_logger = nv_logging.LOGGER
    nv_logger = logging.getLogger("nvdlfw_inspect")
    previous_handlers = list(nv_logger.handlers)
    nv_logging.initialize_logger(str(tmp_path / "nvdlfw_logs"))
    registry = {
        "base": NamespaceData("base", None, features={"LogTensorStats": object()}),
        "transformer_engine": NamespaceData(
            "transformer_engine", None, features={name: object() for name in TE_FEATURES}
        ),
    }

    def load(text: str):
        path = tmp_path / "te_debug.yaml"
        path.write_text(text)
        ConfigManager.reset()
        ConfigManager._load_config(str(path), registry_data=registry)
        return ConfigManager

    ConfigManager.reset()
    yield load
    ConfigManager.reset()
    for handler in list(nv_logger.handlers):
        if handler not in previous_handlers:
            nv_logger.removeHandler(handler)
            handler.close()
    nv_logging.LOGGER = previous_logger
