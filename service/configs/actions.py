"""Use cases of the rendered configs kept with a run: keep, list, read one (the routes: service/configs/routes.py).

A kept file is rendered by the same code that answers GET/POST .../recommendation?format= (service/analysis/
routes.py `respond_recommendation`, its caches included), so it is byte for byte what that request hands a
training job; it is stored with the policy version, the options and the sha256 of the recommendation's JSON
answer, and numbered per run and format. SQL is db/run_configs.py."""

from __future__ import annotations

import hashlib

from fastapi import Request, Response
from sqlalchemy.orm import Session

from fp8_policy.db.run_config_models import RunConfig
from fp8_policy.db.run_configs import NewConfig, RunConfigRepository
from fp8_policy.db.runs import RunRepository
from fp8_policy.policy.policy_version import POLICY_VERSION
from fp8_policy.policy.vocabulary import OUTPUT_FORMATS, STAGED_FORMATS
from fp8_policy.service.analysis.routes import PP_STAGE, pp_stage_of, respond_recommendation
from fp8_policy.service.auth.actions import Principal
from fp8_policy.service.configs.schemas import KeepConfigs, RunConfigRead
from fp8_policy.service.errors import NotFound, UnknownFormat
from fp8_policy.service.runs import actions as runs

KEEPABLE = ("json", *OUTPUT_FORMATS)


def keep(
    request: Request, session: Session, run_id: int, body: KeepConfigs, principal: Principal
) -> list[RunConfigRead]:
    formats = list(dict.fromkeys(body.formats))
    unknown = [fmt for fmt in formats if fmt not in KEEPABLE]
    if unknown:
        raise UnknownFormat(f"unknown format {unknown[0]!r}; expected one of: {', '.join(KEEPABLE)}")
    runs.get_ready_run(session, run_id)
    # `?pp_stage=K` is one stage's TE debug-API files (STAGED_FORMATS); the other formats serve every stage
    staged = [fmt for fmt in formats if fmt in STAGED_FORMATS]
    stage = pp_stage_of(request, staged[0] if staged else formats[0])
    answer = _body(respond_recommendation(request, session, run_id, body.overrides, "json"))
    rendered = [
        (
            fmt,
            respond_recommendation(
                request, session, run_id, body.overrides, fmt, None, stage if fmt in staged else None
            ),
        )
        for fmt in formats
    ]
    options = {**body.overrides, **({PP_STAGE: stage} if stage is not None else {})}
    if RunRepository(session).lock(run_id, "write") is None:  # deleted meanwhile
        raise NotFound(f"run {run_id} does not exist")
    repo = RunConfigRepository(session)
    kept = []
    for fmt, response in rendered:
        content = _body(response)
        row, new = repo.keep(
            NewConfig(
                run_id=run_id,
                format=fmt,
                filename=_filename(response, fmt, run_id),
                media_type=_media_type(response),
                content=content.decode("utf-8"),
                sha256=hashlib.sha256(content).hexdigest(),
                size=len(content),
                policy_version=POLICY_VERSION,
                options=options,
                recommendation_sha256=hashlib.sha256(answer).hexdigest(),
                created_by=principal.name,
            )
        )
        kept.append(config_read(row, new=new))
    return kept


def kept_configs(session: Session, run_id: int, format: str | None) -> list[RunConfigRead]:
    """The run's kept configs, newest first, or one format's (404 unknown run, 400 UnknownFormat)."""
    runs.get_run(session, run_id)
    if format is not None and format not in KEEPABLE:
        raise UnknownFormat(f"unknown format {format!r}; expected one of: {', '.join(KEEPABLE)}")
    return [config_read(row) for row in RunConfigRepository(session).of_run(run_id, format)]


def kept_config(session: Session, run_id: int, config_id: int) -> RunConfig:
    """One kept config of the run (404 for an unknown run or config)."""
    runs.get_run(session, run_id)
    row = RunConfigRepository(session).get(run_id, config_id)
    if row is None:
        raise NotFound(f"run {run_id} keeps no config {config_id}")
    return row


def config_read(row: RunConfig, *, new: bool | None = None) -> RunConfigRead:
    """The kept config as the API reads it: every field but `download` and `new` is the row's column of that name."""
    columns = {name: getattr(row, name) for name in RunConfigRead.model_fields if name not in ("download", "new")}
    return RunConfigRead(**columns, download=f"/api/v1/runs/{row.run_id}/configs/{row.id}", new=new)


def _body(response: object) -> bytes:
    """The bytes of an answer of `respond_recommendation` (always a Response: JSON or a rendered file)."""
    if not isinstance(response, Response):  # pragma: no cover - its signature allows a model it never returns
        raise TypeError(f"expected a Response, got {type(response).__name__}")
    return bytes(response.body)


def _media_type(response: object) -> str:
    media_type = response.media_type if isinstance(response, Response) else None
    return media_type or "application/octet-stream"


def _filename(response: object, fmt: str, run_id: int) -> str:
    disposition = response.headers.get("content-disposition", "") if isinstance(response, Response) else ""
    if 'filename="' in disposition:
        return disposition.split('filename="', 1)[1].rstrip('"')[:255]
    return f"fp8-policy-run{run_id}.json" if fmt == "json" else f"fp8-policy-run{run_id}.{fmt}"
