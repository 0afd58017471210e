"""`POLICY_VERSION`: the version of the rules (analysis, recommendation, rendering). It changes whenever a rule
changes; stored summaries and recommendations of an older version are recomputed (service/analysis/summary.py).

Re-exported by policy/recommend/ (where the rules it versions are). It lives in a module of its own because the
service names it on its start-up path (the recommendation cache's keys, the runs list's staleness), which must not
import the rules themselves (issue 21, tests/service/app/test_start_up_imports.py).
"""

from __future__ import annotations

POLICY_VERSION = "2026.12.02-wave4-widen"  # + underflow GEMM overrides widened to the high-sensitivity GEMMs
