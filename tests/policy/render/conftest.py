"""Fixtures for the renderer tests: nvdlfw_inspect's real ConfigManager with a fake TE feature registry."""

from __future__ import annotations

import pytest

from bench.te_config_manager import TeConfigManager


@pytest.fixture
def nvdlfw_config(tmp_path):
    """`load(yaml_text)` -> ConfigManager loaded with the real nvdlfw_inspect code (state reset around each test)."""
    with TeConfigManager(tmp_path) as manager:
        yield manager.load
