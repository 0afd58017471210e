"""What follows an ingest job that made a run ready, wired into the ingest worker by those that build one: the app
(service/app.py) and the worker command (service/worker_cli.py).

The ingest (service/ingest/) knows nothing of the analysis: it calls `JobContext.after_ready` with the run's id, and
what is called is chosen here, above both. Today: the run's summary, default analysis and default-options
recommendation, stored once so readers find them (service/analysis/summary.py `refresh`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from fp8_policy._lazy import lazy_module

if TYPE_CHECKING:
    from fp8_policy.service.analysis import summary
else:  # imported by the first run made ready (the analysis): start-up path, tests/service/app/test_start_up_imports.py
    summary = lazy_module("fp8_policy.service.analysis.summary")


def store_summary(factory: sessionmaker[Session], run_id: int) -> None:
    """The run's summary, analysis and recommendation computed and stored (its own transactions)."""
    summary.refresh(factory, run_id)
