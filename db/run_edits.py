"""What a user edits on a stored run after its upload: its notes (a description), its tags and the link to its
experiment-tracker run.

Belongs here: the SQL of those edits. The caller checks the values (service/limits.py) and locks the run's row
first (RunRepository.lock), so an edit never interleaves with an ingest, a live append or a delete of the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete
from sqlalchemy.orm import Session

from fp8_policy.db.run_models import Run, RunTag


def set_notes(session: Session, run: Run, notes: str | None) -> None:
    run.notes = notes
    session.flush()


def set_training_run(session: Session, run: Run, link: dict[str, str] | None) -> None:
    run.training_run = link
    session.flush()


def replace_tags(session: Session, run: Run, tags: Sequence[str]) -> None:
    """The run's tags become `tags` (distinct, in this order). Old rows are deleted by statement before the new
    ones are inserted: assigning a new collection would let the unit of work insert a kept tag's row before it
    deletes the old one, which breaks the (run_id, tag) primary key."""
    session.execute(delete(RunTag).where(RunTag.run_id == run.id))
    session.add_all(RunTag(run_id=run.id, tag=tag) for tag in dict.fromkeys(tags))
    session.flush()
    session.expire(run, ["tags"])  # read back from the rows just written
