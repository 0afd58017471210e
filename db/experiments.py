"""All SQL of experiments (db/experiment_models.py): add one, list a run's, the newest one's id."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from fp8_policy.db.experiment_models import ExperimentRow
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import Repository


class ExperimentRepository(Repository):
    def add(self, run_id: int, name: str, steps: int, uploaded_by: str | None, body: dict[str, Any]) -> ExperimentRow:
        row = ExperimentRow(
            run_id=run_id, name=name, steps=steps, uploaded_by=uploaded_by, body=body, created_at=utcnow()
        )
        self.session.add(row)
        self.session.flush()
        return row

    def of_run(self, run_id: int, limit: int = 100) -> list[ExperimentRow]:
        """The run's experiments, newest first."""
        query = select(ExperimentRow).where(ExperimentRow.run_id == run_id).order_by(ExperimentRow.id.desc())
        return list(self.session.scalars(query.limit(limit)))

    def newest(self, run_id: int) -> ExperimentRow | None:
        rows = self.of_run(run_id, limit=1)
        return rows[0] if rows else None

    def newest_id(self, run_id: int) -> int | None:
        value = self.session.scalar(select(func.max(ExperimentRow.id)).where(ExperimentRow.run_id == run_id))
        return int(value) if value is not None else None
