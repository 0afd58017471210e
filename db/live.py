"""All SQL of live runs (db/live_models.py): received files and their offsets, detector state, events."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from fp8_policy.db.live_models import LiveEventRow, LiveFile, LiveState
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import Repository, rows_affected

if TYPE_CHECKING:
    from fp8_policy.policy.live.events import LiveEvent


@dataclass(frozen=True, slots=True)
class LiveFileRecord:
    path: str
    kind: str
    size: int
    parsed_offset: int


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    run_id: int
    event: LiveEvent
    created_at: str


class LiveRepository(Repository):
    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._state_rows: dict[int, LiveState] = {}  # locked by state_for_update, written back by save_state

    # --- files --------------------------------------------------------------------------------
    def file_for_update(self, run_id: int, path: str, kind: str) -> LiveFile:
        """The file's row, locked for this transaction (created at size 0 the first time)."""
        row = self.session.scalar(
            select(LiveFile).where(LiveFile.run_id == run_id, LiveFile.path == path).with_for_update()
        )
        if row is None:
            row = LiveFile(run_id=run_id, path=path, kind=kind, size=0, parsed_offset=0, updated_at=utcnow())
            self.session.add(row)
            self.session.flush()
        return row

    def files(self, run_id: int) -> list[LiveFileRecord]:
        rows = self.session.scalars(select(LiveFile).where(LiveFile.run_id == run_id).order_by(LiveFile.path))
        return [LiveFileRecord(r.path, r.kind, r.size, r.parsed_offset) for r in rows]

    def forget_files(self, run_id: int) -> None:
        self.session.execute(delete(LiveFile).where(LiveFile.run_id == run_id))

    # --- detector state -----------------------------------------------------------------------
    def state_for_update(self, run_id: int) -> dict[str, Any]:
        """The run's detector state document (one row per run: every series' state in one query), locked."""
        row = self.session.scalar(select(LiveState).where(LiveState.run_id == run_id).with_for_update())
        if row is None:
            return {}
        self._state_rows[run_id] = row
        return dict(row.state)

    def state_stamp_for_update(self, run_id: int) -> datetime | None:
        """When the run's state document was last saved (None: never), its row locked, without reading the document
        (a caller holding the document saved at that moment uses it)."""
        return self.session.scalar(select(LiveState.updated_at).where(LiveState.run_id == run_id).with_for_update())

    def save_state(self, run_id: int, state: dict[str, Any]) -> datetime:
        """Replace the run's state document (the row state_for_update locked: no second read of the document).
        Returns its new stamp (state_stamp_for_update)."""
        stamp = utcnow()
        row = self._state_rows.get(run_id)
        if row is not None:
            row.state, row.updated_at = state, stamp
        elif not rows_affected(
            self.session.execute(
                update(LiveState).where(LiveState.run_id == run_id).values(state=state, updated_at=stamp)
            )
        ):
            self.session.add(LiveState(run_id=run_id, state=state, updated_at=stamp))
        return stamp

    # --- events -------------------------------------------------------------------------------
    def add_events(self, run_id: int, events: Iterable[LiveEvent]) -> list[int]:
        rows = [
            LiveEventRow(
                run_id=run_id,
                kind=e.kind,
                severity=e.severity,
                layer=e.layer,
                tensor=e.tensor,
                stat=e.stat,
                rank=e.rank,
                iteration=e.iteration,
                value=e.value,
                message=e.message,
                detail=e.detail,
                created_at=utcnow(),
            )
            for e in events
        ]
        self.session.add_all(rows)
        self.session.flush()
        return [row.id for row in rows]

    def events(self, run_id: int, after_id: int = 0, limit: int = 500) -> list[StoredEvent]:
        """Events with an id above `after_id`, oldest first (polling for new ones)."""
        rows = self.session.scalars(
            select(LiveEventRow)
            .where(LiveEventRow.run_id == run_id, LiveEventRow.id > after_id)
            .order_by(LiveEventRow.id)
            .limit(limit)
        )
        return [_stored(r) for r in rows]

    def events_before(self, run_id: int, before_id: int | None, limit: int) -> list[StoredEvent]:
        """Up to `limit` events with an id below `before_id` (all when None), newest first (paging back)."""
        query = select(LiveEventRow).where(LiveEventRow.run_id == run_id)
        if before_id is not None:
            query = query.where(LiveEventRow.id < before_id)
        rows = self.session.scalars(query.order_by(LiveEventRow.id.desc()).limit(limit))
        return [_stored(r) for r in rows]

    def count_events(self, run_id: int) -> int:
        return int(
            self.session.scalar(select(func.count()).select_from(LiveEventRow).where(LiveEventRow.run_id == run_id))
            or 0
        )


def _stored(r: LiveEventRow) -> StoredEvent:
    # imported on first use (with numpy): start-up path, tests/service/app/test_start_up_imports.py
    from fp8_policy.policy.live.events import LiveEvent

    return StoredEvent(
        r.id,
        r.run_id,
        LiveEvent(
            r.kind, r.severity, r.layer, r.tensor, r.stat, r.rank, r.iteration, r.value, r.message, dict(r.detail or {})
        ),
        r.created_at.isoformat(),
    )
