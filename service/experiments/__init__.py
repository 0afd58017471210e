"""Experiments posted to a run: `POST|GET /api/v1/runs/{id}/experiments` (routes), the checks of a posted body
(validate), storing and judging it (actions); the verdict's rules are policy/recommend/verification.py."""
