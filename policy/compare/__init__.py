"""Comparing runs on the policy side: problems that followed a moved BF16 boundary (`boundary`), two runs'
recommendations side by side (`recommendations`), changes with a noise floor (`changes`), 2-8 runs' verdicts,
recommendations and per-layer precisions side by side (`runs`), and one metric of several runs on one iteration
axis (`overlay`).

Belongs here: pure functions over `Analysis` / `Recommendation`. Must not be here: loading runs, HTTP, images
(the service's `compare/pair.py` and `compare/actions.py` do those and call these).
"""

from __future__ import annotations

from fp8_policy.policy.compare.boundary import Edges, MovedProblem, moved_problems

__all__ = ["Edges", "MovedProblem", "moved_problems"]
