"""Comparing two runs on the policy side: problems that followed a moved BF16 boundary (`boundary`), the two
recommendations side by side (`recommendations`) and changes with a noise floor (`changes`).

Belongs here: pure functions over `Analysis` / `Recommendation`. Must not be here: loading runs, HTTP, images
(the service's `visual/compare.py` does those and calls these).
"""

from __future__ import annotations

from fp8_policy.policy.compare.boundary import Edges, MovedProblem, moved_problems

__all__ = ["Edges", "MovedProblem", "moved_problems"]
