"""`GET /api/v1/runs/{id}/frontier.png` (and `.svg`): the recommendation's speed/risk frontier drawn, with the rule
recipes and the arms experiments measured (`fp8-policy frontier RUN -o frontier.png`). The data is the JSON
recommendation's `frontier` (the same cached recommendation, `?target=` re-solved), the drawing is done in a render
worker (service/visual/pool.py) and cached by run, target, newest experiment and policy version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from fp8_policy._lazy import lazy_module
from fp8_policy.policy.policy_version import POLICY_VERSION
from fp8_policy.service.auth.deps import READ
from fp8_policy.service.openapi import error_responses

if TYPE_CHECKING:
    from fp8_policy.service.analysis import target
    from fp8_policy.service.experiments import actions as experiments
    from fp8_policy.service.runs import actions as runs
    from fp8_policy.service.visual import job, marks
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    target = lazy_module("fp8_policy.service.analysis.target")
    experiments = lazy_module("fp8_policy.service.experiments.actions")
    runs = lazy_module("fp8_policy.service.runs.actions")
    marks = lazy_module("fp8_policy.service.visual.marks")
    job = lazy_module("fp8_policy.service.visual.job")

router = APIRouter(tags=["analysis"], dependencies=[READ])


def _images(media_type: str) -> dict[int | str, dict[str, Any]]:
    body = {
        "description": "The frontier chart.",
        "content": {media_type: {"schema": {"type": "string", "format": "binary"}}},
    }
    return {**error_responses(400, 404, 409, 429, 503), 200: body}  # 429/503: service/visual/pool.py


PNG, SVG = _images("image/png"), _images("image/svg+xml")
TARGET = Query(alias="target", description="speedup:<x> or risk:<x>, as for GET .../recommendation (400 otherwise)")


def _key(session: Session, run_id: int, target_text: str | None, fmt: str) -> tuple[object, ...]:
    run = runs.get_ready_run(session, run_id)
    newest = experiments.newest_experiment_id(session, run_id)
    return ("frontier", marks.run_identity(session, run), target_text, newest, fmt, POLICY_VERSION)


def _job(request: Request, session: Session, run_id: int, target_text: str | None, fmt: str) -> Any:
    overrides, budget = target.split_target({"target": target_text} if target_text is not None else {})
    rec = target.cached(request.app.state.recommendations, session, run_id, overrides, budget)
    data = {
        "title": f"run {run_id}: speed/risk frontier ({rec.decision.recipe.name} with per-layer rungs)",
        "frontier": rec.to_dict()["frontier"],
        "measured": experiments.measured_arms(session, run_id, rec),
    }
    headers = {"Content-Disposition": f'inline; filename="run_{run_id}_frontier.{fmt}"'}
    return job.ChartJob(data, fmt, headers, 880 * 550)


async def _image(request: Request, run_id: int, target_text: str | None, fmt: str) -> Response:
    if target_text is not None:
        target.parse(target_text)  # 400 before any work
    state = request.app.state
    rendered = await state.renderer.image(
        state.unit_of_work,
        lambda session: _key(session, run_id, target_text, fmt),
        lambda session, _max_pixels: _job(request, session, run_id, target_text, fmt),
    )
    return Response(rendered.content, media_type=rendered.media_type, headers=rendered.headers)


@router.get("/api/v1/runs/{run_id}/frontier.png", responses=PNG, response_class=Response)
async def frontier_png(run_id: int, request: Request, budget: Annotated[str | None, TARGET] = None) -> Response:
    """The speed/risk frontier as PNG: points from all-BF16 to all-cheapest, the recommended (or target) point,
    the rule recipes, and the arms experiments measured (held-out gap to BF16 on the right axis)."""
    return await _image(request, run_id, budget, "png")


@router.get("/api/v1/runs/{run_id}/frontier.svg", responses=SVG, response_class=Response)
async def frontier_svg(run_id: int, request: Request, budget: Annotated[str | None, TARGET] = None) -> Response:
    """The frontier chart as SVG."""
    return await _image(request, run_id, budget, "svg")
