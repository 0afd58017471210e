"""Recommendations computed once: an in-process LRU of finished recommendations, and single-flight computing.

A recommendation on a large run costs a full load of its series plus an analysis (0.7 s on a 2.4M-point run);
recomputing it per request made 20 concurrent readers take a minute. A recommendation depends only on
* the run as stored (database, id, uploaded bytes' sha256, ingest finish time, metadata),
* the options of the request (thresholds, GPU, TE version, ... as canonical JSON),
* the previous run's identity when `previous_run` is given (its analysis is the history),
* `POLICY_VERSION` (the rules),
so that tuple is the key (as the stored analyses are keyed by run and policy version, service/analysis/summary.py,
and rendered images by run identity, service/visual/pool.py). Concurrent requests for the same key wait for the one
computing it instead of computing it again; a failure (404, 409, 400) is raised to every waiter and not cached.

Belongs here: the key a recommendation is cached under. The cache and the waiting are service/single_flight.py
(shared with the scalars, the summaries and the compare page); computing the recommendation is
actions.recommendation_for's.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.policy_version import POLICY_VERSION
from fp8_policy.service.limits import run_id_of
from fp8_policy.service.runs.actions import get_ready_run


def recommendation_key(session: Session, run_id: int, overrides: dict[str, Any]) -> tuple[object, ...]:
    """What a recommendation of `run_id` with `overrides` depends on (raises 404 / 409 like computing it would)."""
    run = get_ready_run(session, run_id)
    options = json.dumps(overrides, sort_keys=True, default=str)
    previous: tuple[object, ...] = ()
    if "previous_run" in overrides:
        previous_id = run_id_of(overrides["previous_run"])
        other = RunRepository(session).get(previous_id) if previous_id is not None else None
        # an unknown or malformed previous run is refused by the computation itself; it never gets cached
        previous = (other.id, other.sha256, str(other.finished_at), str(other.status)) if other is not None else ("?",)
    metadata = json.dumps(run.run_metadata or {}, sort_keys=True, default=str)
    return (
        str(session.get_bind().engine.url),
        run.id,
        run.sha256,
        str(run.finished_at),
        metadata,
        options,
        previous,
        POLICY_VERSION,
    )
