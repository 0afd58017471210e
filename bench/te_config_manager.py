"""nvdlfw_inspect's real ConfigManager with Transformer Engine's feature names registered, without TE installed.

Belongs here: loading a rendered te-yaml / te-monitor file the way TE's debug API does, for the eval's config
checker (bench/eval_configs.py) and the renderer, apply and service tests. nvdlfw_inspect keeps its config and
logger in module globals; `TeConfigManager` sets them up on entry and puts them back on exit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

TE_FEATURES: tuple[str, ...] = (
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


class TeConfigManager:
    """Use as a context manager; `load(text)` / `load_file(path)` -> the loaded ConfigManager (it raises on a file
    TE would reject: unknown feature, missing field, bad YAML). `features`: the TE feature names registered."""

    def __init__(self, workdir: Path, features: Iterable[str] = TE_FEATURES) -> None:
        self.workdir = workdir
        self.features = tuple(features)

    def __enter__(self) -> Self:
        from nvdlfw_inspect import logging as nv_logging
        from nvdlfw_inspect.config_manager import ConfigManager
        from nvdlfw_inspect.registry import NamespaceData

        self._nv_logging, self.manager = nv_logging, ConfigManager
        self._previous_logger = nv_logging.LOGGER
        self._nv_logger = logging.getLogger("nvdlfw_inspect")
        self._previous_handlers = list(self._nv_logger.handlers)
        nv_logging.initialize_logger(str(self.workdir / "nvdlfw_logs"))
        self.registry = {
            "base": NamespaceData("base", None, features={"LogTensorStats": object()}),
            "transformer_engine": NamespaceData(
                "transformer_engine", None, features={name: object() for name in self.features}
            ),
        }
        ConfigManager.reset()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.manager.reset()
        for handler in list(self._nv_logger.handlers):
            if handler not in self._previous_handlers:
                self._nv_logger.removeHandler(handler)
                handler.close()
        self._nv_logging.LOGGER = self._previous_logger

    def load_file(self, path: Path | str) -> Any:
        self.manager.reset()
        self.manager._load_config(str(path), registry_data=self.registry)
        return self.manager

    def load(self, text: str, name: str = "te_debug.yaml") -> Any:
        path = self.workdir / name
        path.write_text(text)
        return self.load_file(path)
