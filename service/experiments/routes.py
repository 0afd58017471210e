"""`POST /api/v1/runs/{id}/experiments` (upload scope: store an experiment, answer it with its verdict) and `GET`
(read scope: the run's experiments, newest first)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse

from fp8_policy._lazy import lazy_module
from fp8_policy.service.auth.deps import READ, UPLOAD, PrincipalDep
from fp8_policy.service.deps import SessionDep
from fp8_policy.service.experiments.schemas import ExperimentRead
from fp8_policy.service.openapi import error_responses

if TYPE_CHECKING:
    from fp8_policy.service.experiments import actions
else:  # imported on first use: start-up path, tests/service/app/test_start_up_imports.py
    actions = lazy_module("fp8_policy.service.experiments.actions")

router = APIRouter(prefix="/api/v1/runs", tags=["experiments"])
ERRORS = error_responses(400, 404, 409)
EXAMPLE = {
    "name": "closed loop, seed 0",
    "seed": 0,
    "setup": {"model": "tiny GPT d=64 x 4 blocks", "device": "cpu", "casts": "emulated"},
    "arms": [
        {"name": "bf16", "kind": "bf16", "steps": 100, "heldout_loss": 2.772, "step_time_s": 0.41},
        {"name": "all-nvfp4", "kind": "all_low", "steps": 100, "heldout_loss": 2.809, "step_time_s": 0.93},
        {
            "name": "last 15%",
            "kind": "rule",
            "rule": "last_15pct",
            "steps": 100,
            "heldout_loss": 2.79,
            "step_time_s": 0.8,
        },
        {"name": "recommended", "kind": "recommended", "steps": 100, "heldout_loss": 2.776, "step_time_s": 0.85},
    ],
}


@router.post(
    "/{run_id}/experiments",
    status_code=201,
    response_model=ExperimentRead,
    responses=ERRORS,
    dependencies=[UPLOAD],
)
def post_experiment(
    run_id: int,
    request: Request,
    session: SessionDep,
    principal: PrincipalDep,
    body: Annotated[Any, Body(description="The experiment: arms trained from the same state.", examples=[EXAMPLE])],
) -> JSONResponse:
    """Store an experiment: arms (bf16, all_low, rule, recommended, frontier) trained for the same steps from one
    state, each with its held-out loss (NaN for a diverged arm) and step time. Each arm is placed on the run's
    frontier and the recommended arm judged: `verification` confirmed / contradicted (with the next step) /
    unverified. With `heldout_losses` (one per replicate, replicate r of every arm under the same seed; `seeds`
    optional) the verdict is paired over the replicates against their one-sided 95 % noise bound. 400 for another
    run or project, unequal steps, replicates that do not line up (UnequalReplicates), non-finite numbers where a
    number is needed."""
    stored = actions.post_experiment(session, request.app.state.recommendations, run_id, body, principal.name)
    model = ExperimentRead.model_validate(stored)
    return JSONResponse(model.model_dump(mode="json", by_alias=True), status_code=201)


@router.get("/{run_id}/experiments", response_model=list[ExperimentRead], responses=ERRORS, dependencies=[READ])
def list_experiments(run_id: int, session: SessionDep) -> list[ExperimentRead]:
    """The run's experiments, newest first (at most 100), each with its arms and verdict."""
    return [ExperimentRead.model_validate(item) for item in actions.list_experiments(session, run_id)]
