"""HTTP routes of the rendered configs kept with a run: keep (POST), list, download (service/configs/actions.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request, Response
from pydantic import ValidationError

from fp8_policy.policy.vocabulary import MEDIA_TYPES
from fp8_policy.service.auth.deps import READ, UPLOAD, PrincipalDep
from fp8_policy.service.configs import actions
from fp8_policy.service.configs.schemas import KeepConfigs, RunConfigList
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.errors import InvalidParameter
from fp8_policy.service.openapi import error_responses

router = APIRouter(prefix="/api/v1/runs", tags=["configs"])
# the media types a kept file is sent with: the JSON policy's and each rendered format's (policy/vocabulary.py)
KEPT_MEDIA_TYPES = {
    **{media: {"schema": {"type": "string"}} for media in MEDIA_TYPES.values()},
    "application/json": {"schema": {"type": "object"}},  # the JSON policy
}
CONFIG_ID = Path(ge=1, le=2**63 - 1, description="A kept config's id (from the list).")


@router.post(
    "/{run_id}/configs",
    status_code=201,
    response_model=RunConfigList,
    dependencies=[UPLOAD],
    responses=error_responses(400, 404, 409),
)
def keep_configs(
    run_id: int,
    raw: Annotated[
        dict[str, Any],
        Body(
            description="`formats` (json or rendered formats, 1 to 16) and `overrides` (the recommendation's "
            "options, as the body of POST .../recommendation; left out: the default recommendation).",
            examples=[{"formats": ["te-yaml", "megatron", "json"], "overrides": {"te_version": "2.13"}}],
        ),
    ],
    request: Request,
    session: SessionDep,
    principal: PrincipalDep,
) -> RunConfigList:
    """Render the run's recommendation in each of `formats` (with `overrides`, and `?pp_stage=` as for
    .../recommendation) and keep the files with the run: a new version of a format unless its newest version is
    the same file from the same recommendation (`new: false`). Nothing is kept when one format fails (4xx)."""
    try:
        body = KeepConfigs.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise InvalidParameter(f"configs to keep: {problems}") from None
    return RunConfigList(items=actions.keep(request, session, run_id, body, principal))


@router.get("/{run_id}/configs", response_model=RunConfigList, dependencies=[READ], responses=error_responses(400, 404))
def list_configs(
    run_id: int,
    session: SessionDep,
    format: Annotated[str | None, Query(description="Only this format's versions.")] = None,
) -> RunConfigList:
    """The rendered configs kept with the run, newest first (each with its download path)."""
    return RunConfigList(items=actions.kept_configs(session, run_id, format))


@router.get(
    "/{run_id}/configs/{config_id}",
    dependencies=[READ],
    responses={
        **error_responses(400, 404),
        200: {"description": "The kept file, as it was rendered", "content": KEPT_MEDIA_TYPES},
    },
)
def download_config(run_id: int, config_id: Annotated[int, CONFIG_ID], session: SessionDep) -> Response:
    """The kept file, byte for byte; `X-Policy-Version`, `X-Config-Version` and `ETag` (its sha256) name it."""
    row = actions.kept_config(session, run_id, config_id)
    return Response(
        row.content.encode("utf-8"),
        media_type=row.media_type,
        headers={
            "Content-Disposition": f'attachment; filename="{row.filename}"',
            "ETag": f'"{row.sha256}"',
            "X-Policy-Version": row.policy_version,
            "X-Config-Version": str(row.version),
        },
    )
