"""SQL of the rendered configs kept with a run (db/run_config_models.py `RunConfig`): keep one (a new version unless
the newest of that format is the same file from the same recommendation), list a run's, read one."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select

from fp8_policy.db.run_config_models import RunConfig
from fp8_policy.db.runs import utcnow
from fp8_policy.db.session import Repository


@dataclass(frozen=True, slots=True)
class NewConfig:
    """A rendered file to keep, and the recommendation it came from."""

    run_id: int
    format: str
    filename: str
    media_type: str
    content: str
    sha256: str
    size: int
    policy_version: str
    options: dict[str, Any]
    recommendation_sha256: str
    created_by: str | None


class RunConfigRepository(Repository):
    def keep(self, new: NewConfig) -> tuple[RunConfig, bool]:
        """The kept row and whether it is new. The caller holds the run's write lock (RunRepository.lock), so
        version numbers are handed out one at a time."""
        newest = self.session.scalars(
            select(RunConfig)
            .where(RunConfig.run_id == new.run_id, RunConfig.format == new.format)
            .order_by(RunConfig.version.desc())
            .limit(1)
        ).first()
        if newest is not None and (
            newest.sha256,
            newest.policy_version,
            newest.options,
            newest.recommendation_sha256,
        ) == (
            new.sha256,
            new.policy_version,
            new.options,
            new.recommendation_sha256,
        ):
            return newest, False
        row = RunConfig(  # NewConfig's fields are columns of the same names
            **asdict(new), version=(newest.version + 1) if newest is not None else 1, created_at=utcnow()
        )
        self.session.add(row)
        self.session.flush()
        return row, True

    def of_run(self, run_id: int, format: str | None = None) -> list[RunConfig]:
        """A run's kept configs, newest first (without their content: read it with `get`)."""
        query = select(RunConfig).where(RunConfig.run_id == run_id).order_by(RunConfig.id.desc())
        if format is not None:
            query = query.where(RunConfig.format == format)
        return list(self.session.scalars(query))

    def get(self, run_id: int, config_id: int) -> RunConfig | None:
        return self.session.scalars(
            select(RunConfig).where(RunConfig.run_id == run_id, RunConfig.id == config_id)
        ).first()

    def count(self, run_id: int) -> int:
        return int(
            self.session.scalar(select(func.count()).select_from(RunConfig).where(RunConfig.run_id == run_id)) or 0
        )
