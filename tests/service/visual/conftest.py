"""Fixtures of the heatmap API tests: the planted before/after pair (tests/support/planted_pair.py)."""

from tests.support.planted_pair import planted, visual_client

__all__ = ["planted", "visual_client"]  # fixtures, found by pytest in this conftest
