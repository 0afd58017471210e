"""Hypothesis budgets for the property-based tests: bounded in `make test`, longer on demand.

`fuzz(n)` is the settings of one property: `n` examples by default (chosen so every property file runs in a few
seconds on the 2-core dev machine), or FP8_POLICY_FUZZ_EXAMPLES examples when that variable is set, e.g.

    FP8_POLICY_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests -k properties

No example database is written (`database=None`): runs leave no `.hypothesis/` folder in the tree, and a failure
prints the `@reproduce_failure` / seed line to replay it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES_ENV = "FP8_POLICY_FUZZ_EXAMPLES"


def fuzz_examples(default: int) -> int:
    raw = os.environ.get(FUZZ_EXAMPLES_ENV, "").strip()
    return int(raw) if raw else default


def fuzz(default: int) -> settings:
    return settings(
        max_examples=fuzz_examples(default),
        deadline=None,  # numba compiles on first use; timing is `make bench`'s business
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
