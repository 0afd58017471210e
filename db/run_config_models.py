"""ORM class of a rendered config kept with its run: the file exactly as the service handed it out (a TE debug YAML,
Megatron flags, a Hydra override, a torchao filter, the JSON policy ...), with the policy version and options of the
recommendation it came from. Versions count per run and format from 1; a kept file is never changed, a newer
rendering is a new version. Written by db/run_configs.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from fp8_policy.db.base import Base, UTCDateTime


class RunConfig(Base):
    __tablename__ = "run_configs"
    __table_args__ = (
        UniqueConstraint("run_id", "format", "version"),
        Index("ix_run_configs_run_id_id", "run_id", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    format: Mapped[str] = mapped_column(String(32))  # "json" or one of policy/vocabulary.py OUTPUT_FORMATS
    version: Mapped[int] = mapped_column(Integer)  # 1, 2, ... per (run, format)
    filename: Mapped[str] = mapped_column(String(255))
    media_type: Mapped[str] = mapped_column(String(100))
    content: Mapped[str] = mapped_column(Text, deferred=True)  # read by a download only
    sha256: Mapped[str] = mapped_column(String(64))  # of the content's UTF-8 bytes
    size: Mapped[int] = mapped_column(Integer)  # bytes of the content (the list reads no content)
    policy_version: Mapped[str] = mapped_column(String(32))
    # the recommendation's options (overrides, pp_stage) and the sha256 of its JSON answer: which recommendation
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    recommendation_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(100))  # the access token's name; NULL when anonymous
