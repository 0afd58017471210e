"""All SQL of stored run summaries (db/summary_models.py): read fresh ones, write, find the stale."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Text, cast, delete, or_, select

from fp8_policy.db.run_models import Run, RunStatus
from fp8_policy.db.runs import RunRepository, utcnow
from fp8_policy.db.session import Repository
from fp8_policy.db.summary_models import RunSummary


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    run_id: int
    policy_version: str
    severity: str
    pattern: str | None
    headline: str | None
    to_bf16: int
    gemm_overrides: int
    precision_mix: dict[str, int] | None = None
    gemm_speedup: float | None = None


def _record(row: RunSummary) -> SummaryRecord:
    return SummaryRecord(
        row.run_id,
        row.policy_version,
        row.severity,
        row.pattern,
        row.headline,
        row.to_bf16,
        row.gemm_overrides,
        row.precision_mix,
        row.gemm_speedup,
    )


class SummaryRepository(Repository):
    def fresh(self, run_ids: Iterable[int], policy_version: str) -> dict[int, SummaryRecord]:
        """Summaries of these runs computed by this policy version (stale and missing ones are left out)."""
        ids = list(run_ids)
        if not ids:
            return {}
        rows = self.session.scalars(
            select(RunSummary).where(RunSummary.run_id.in_(ids), RunSummary.policy_version == policy_version)
        )
        return {row.run_id: _record(row) for row in rows}

    def analysis(self, run_id: int, policy_version: str) -> dict[str, Any] | None:
        return self.session.scalar(
            select(RunSummary.analysis).where(RunSummary.run_id == run_id, RunSummary.policy_version == policy_version)
        )

    def recommendation(self, run_id: int, policy_version: str) -> dict[str, Any] | None:
        """The stored default-options recommendation of this policy version (None when missing or stale)."""
        return self.session.scalar(
            select(RunSummary.recommendation).where(
                RunSummary.run_id == run_id, RunSummary.policy_version == policy_version
            )
        )

    def put(
        self, record: SummaryRecord, analysis: dict[str, Any], recommendation: dict[str, Any] | None = None
    ) -> None:
        """Insert or replace the run's summary (a run deleted meanwhile is left alone). The run's row is locked
        first (RunRepository.lock's order): a delete racing this waits for it or is waited for, where replacing
        the summary row before the insert's foreign-key check on the run once deadlocked with it on PostgreSQL."""
        if RunRepository(self.session).lock(record.run_id, "share") is None:
            return
        self.session.execute(delete(RunSummary).where(RunSummary.run_id == record.run_id))
        self.session.add(
            RunSummary(
                **asdict(record), analysis=analysis, recommendation=recommendation, computed_at=utcnow()
            )  # the record's fields are the row's columns of the same names
        )

    def stale_ready_runs(self, policy_version: str, limit: int = 1000) -> list[int]:
        """Ready runs with no summary of this policy version, newest first."""
        current = select(RunSummary.run_id).where(RunSummary.policy_version == policy_version)
        return list(
            self.session.scalars(
                select(Run.id)
                .where(Run.status == RunStatus.ready, Run.id.not_in(current))
                .order_by(Run.id.desc())
                .limit(limit)
            )
        )

    def without_recommendation(self, policy_version: str, limit: int = 1000) -> list[int]:
        """Ready runs whose summary of this policy version has no stored recommendation (stored before the column
        existed: SQL NULL, or a JSON null), newest first."""
        column = RunSummary.recommendation
        return list(
            self.session.scalars(
                select(RunSummary.run_id)
                .join(Run, Run.id == RunSummary.run_id)
                .where(
                    Run.status == RunStatus.ready,
                    RunSummary.policy_version == policy_version,
                    or_(column.is_(None), cast(column, Text) == "null"),
                )
                .order_by(RunSummary.run_id.desc())
                .limit(limit)
            )
        )
