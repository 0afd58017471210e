"""Reads of a live (or finalized) run the routes answer with: its received files and its early-warning events.

Belongs here: what a read of a live run asks the database (db/live.py), so that no route touches a repository.
Must not be here: receiving pieces, detecting events, finalizing (service/live/actions.py, imported on first use
because it loads the parser), the run's training scalars (service/scalars/).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from fp8_policy.db.live import LiveFileRecord, LiveRepository, StoredEvent

MAX_EVENTS_PAGE = 500


def received_files(session: Session, run_id: int) -> list[LiveFileRecord]:
    """The files a live run has received so far (none once it is finalized)."""
    return LiveRepository(session).files(run_id)


def events_after(session: Session, run_id: int, after: int) -> list[StoredEvent]:
    """The run's events with an id above `after`, ids ascending (a poll)."""
    return LiveRepository(session).events(run_id, after)


def events_page(session: Session, run_id: int, before: int | None, limit: int) -> tuple[int, list[StoredEvent], bool]:
    """(all events of the run, up to `limit` events below id `before` newest first, whether older ones exist)."""
    repo = LiveRepository(session)
    limit = min(limit, MAX_EVENTS_PAGE)
    page = repo.events_before(run_id, before, limit + 1)
    return repo.count_events(run_id), page[:limit], len(page) > limit
